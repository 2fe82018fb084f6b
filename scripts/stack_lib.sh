# shellcheck shell=bash disable=SC2154
# The stack on a GPU machine from a bundle (scripts/bundle.sh --with-postgres), for the scripts that
# measure it there (h100_stack.sh, peer_bench.sh, gpu_torch.sh): a PostgreSQL of its own, the
# planner server and one worker. Sourced; the caller sets `bundle` (a directory), `results` (a directory) and
# `backend` (cudnn, or cpu for a smoke test without a GPU), then calls stack_start. Afterwards
# `server_addr` is the server's host:port, UCUDNN_TOKEN (exported) a token it accepts, `work` a
# scratch directory whose *.log files end up in $results/logs.txt, and an EXIT trap stops
# everything. (SC2154: the caller's variables.)

log() { echo "[stack $(date +%T)] $*" | tee -a "$results/stack.log" >&2; }
now() { date +%s.%N; }

stack_cleanup() {
  for p in "${stack_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 1
  for f in "$work"/*.log "$work/pgdata/postgres.log"; do
    [ -f "$f" ] && { echo "==== $(basename "$f") (last 40 lines)"; tail -40 "$f"; }
  done >"$results/logs.txt"
  if [ -n "${as_pg_user:-}" ]; then
    runuser -u "$as_pg_user" -- "$pg_bin/pg_ctl" -D "$work/pgdata" -m immediate stop >/dev/null 2>&1
  fi
}

as_pg() {
  if [ -n "$as_pg_user" ]; then runuser -u "$as_pg_user" -- "$@"; else "$@"; fi
}

stack_start() {
  bundle="$(cd "$bundle" && pwd)"
  chmod +x "$bundle"/bin/* "$bundle"/lib/postgresql/15/bin/* 2>/dev/null || true
  # shellcheck source=/dev/null
  . "$bundle/bin/env.sh"
  work="$(mktemp -d /tmp/ucudnn-stack.XXXXXX)"
  chmod 755 "$work"
  pg_bin="$bundle/lib/postgresql/15/bin"
  local pg_port=55432 grpc_port=50051
  local db_url="postgresql://ucudnn@127.0.0.1:$pg_port/ucudnn"
  server_addr="127.0.0.1:$grpc_port"
  stack_pids=()
  trap stack_cleanup EXIT

  # PostgreSQL refuses to run as root.
  as_pg_user=""
  if [ "$(id -u)" -eq 0 ]; then
    as_pg_user=ucudnn-stack
    id "$as_pg_user" >/dev/null 2>&1 || useradd --system --no-create-home "$as_pg_user"
    # The bundle must be readable by that user; its programs find their libraries through their
    # RUNPATHs (scripts/bundle.sh), whatever environment runuser leaves them.
    chmod -R a+rX "$bundle"
  fi

  log "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  [ "$backend" = cpu ] || ucudnn gpus | tee -a "$results/stack.log"

  mkdir -p "$work/pgdata"
  [ -z "$as_pg_user" ] || chown "$as_pg_user" "$work/pgdata"
  as_pg "$pg_bin/initdb" -D "$work/pgdata" -U ucudnn --auth=trust --no-sync >"$work/initdb.log" 2>&1 ||
    { log "initdb failed"; cat "$work/initdb.log"; return 1; }
  as_pg "$pg_bin/pg_ctl" -D "$work/pgdata" -l "$work/pgdata/postgres.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $work/pgdata -c fsync=off" start >/dev/null ||
    { log "postgres did not start"; cat "$work/pgdata/postgres.log"; return 1; }
  as_pg "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U ucudnn ucudnn
  stack_db_url="$db_url"
  # A warm database from an earlier machine (stack_dump's file): timings, so that plans come
  # without benchmarking again. Data only, into the schema it was dumped from (its first line
  # says which), then migrated the rest of the way, so that the data migrations since (schema
  # 9's, say) apply to its rows. A dump without that line goes into the newest schema.
  local dump_version=""
  if [ -n "${warm_db:-}" ] && [ -f "$warm_db" ]; then
    dump_version="$( (gzip -dc "$warm_db" | head -n 1) 2>/dev/null |
      sed -n 's/^-- ucudnn schema version: \([0-9][0-9]*\)$/\1/p')" || true
  fi
  if [ -n "$dump_version" ] &&
    ucudnn migrate --database-url "$db_url" --to-version "$dump_version" | tee -a "$results/stack.log"; then
    :
  else
    dump_version=""
    ucudnn migrate --database-url "$db_url" | tee -a "$results/stack.log"
  fi
  if [ -n "${warm_db:-}" ] && [ -f "$warm_db" ]; then
    if gzip -dc "$warm_db" | "$pg_bin/psql" -q -v ON_ERROR_STOP=1 "$db_url" >"$work/restore.log" 2>&1; then
      log "warm database restored from $warm_db${dump_version:+ (schema $dump_version)}"
    else
      log "warm database $warm_db not restored (see restore.log); starting cold"
    fi
  fi
  [ -z "$dump_version" ] || ucudnn migrate --database-url "$db_url" | tee -a "$results/stack.log"

  # Callers without a token may not enqueue benchmarks: the clients of this shell (`ucudnn plan`,
  # the examples, the PyTorch adapter) send this one (role admin) from UCUDNN_TOKEN; the server
  # reads it from its file, never from a command line.
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
  chmod 600 "$work/token"
  UCUDNN_TOKEN="$(cat "$work/token")"
  export UCUDNN_TOKEN
  ucudnn-server --listen "$server_addr" --database-url "$db_url" --metrics-listen "" \
    --token-file "$work/token" --no-migrate >"$work/server.log" 2>&1 &
  stack_pids+=($!)
  stack_start_worker
  for _ in $(seq 1 50); do ucudnn health --server "$server_addr" >/dev/null 2>&1 && break; sleep 0.2; done
}

# The stack's worker (as the deploy files run it: the idle gate and the result checks on), its
# log appended to worker.log; `stack_worker_pid` is its process.
stack_start_worker() {
  ucudnn-worker --backend "$backend" --database-url "$stack_db_url" >>"$work/worker.log" 2>&1 &
  stack_worker_pid=$!
  stack_pids+=("$stack_worker_pid")
}

# Stops the stack's worker and waits for it (a running configuration finishes; its job goes back
# to the queue).
stack_stop_worker() {
  [ -n "${stack_worker_pid:-}" ] || return 0
  kill -TERM "$stack_worker_pid" 2>/dev/null && wait "$stack_worker_pid" 2>/dev/null
  stack_worker_pid=""
}

# Stops the whole stack and forgets it, so that stack_start can start another on an empty
# database (scripts/gpu_search.sh: every model's time to know from a cold cluster).
stack_stop() {
  stack_cleanup
  for p in "${stack_pids[@]}"; do wait "$p" 2>/dev/null; done
  stack_pids=()
  stack_worker_pid=""
  trap - EXIT
}

# Writes the database's data to the gzip file $1, for a later machine's stack_start
# (warm_db=FILE): its schema version on the first line (stack_start migrates to it, restores,
# then migrates the rest), schema_migrations left out.
stack_dump() {
  local version
  version="$("$pg_bin/psql" -tA "$stack_db_url" -c 'SELECT max(version) FROM schema_migrations')" ||
    return 1
  { echo "-- ucudnn schema version: $version"
    "$pg_bin/pg_dump" --data-only --exclude-table=schema_migrations "$stack_db_url"; } |
    gzip -6 >"$1" && log "database dumped to $1 (schema $version, $(du -h "$1" | cut -f1))"
}

# How many of the stack's benchmark jobs are in the states given ("'done'", "'queued', 'running'").
stack_jobs_in() {
  "$pg_bin/psql" -tA "$stack_db_url" -c "SELECT count(*) FROM jobs WHERE state IN ($1)"
}

# The stack's timings as gzipped CSV into $1 (problem key, micro-batch, algorithm or engine
# configuration, status, median ms, workspace bytes, error): what a search stored, for comparing
# the plans of two searches offline (bench/worker_search.py plans).
stack_timings_csv() {
  "$pg_bin/psql" -q "$stack_db_url" -c "COPY (SELECT p.canonical_key, t.micro_batch,
      CASE WHEN t.engine_config = '' THEN t.algo::text ELSE t.engine_config END AS algo,
      t.status, t.time_ms, t.workspace_bytes, t.error
      FROM timings t JOIN problems p ON p.id = t.problem_id
      ORDER BY p.canonical_key, t.micro_batch, algo) TO STDOUT WITH CSV HEADER" | gzip -6 >"$1"
}

# What the stack's worker did, as one JSON object into $1: benchmark jobs (done, failed, still
# queued), the worker's busy seconds (the sum of its jobs' run times) and the span from the first
# job queued to the last one done, timings stored (ok, failed) and the configurations blocked for
# a wrong result (the worker's result check against the fp32 reference: engine/result_check.h),
# with the first of those.
stack_summary() {
  "$pg_bin/psql" -tA "$stack_db_url" -c "SELECT json_build_object(
      'jobs_done', (SELECT count(*) FROM jobs WHERE state = 'done'),
      'jobs_failed', (SELECT count(*) FROM jobs WHERE state = 'failed'),
      'jobs_queued', (SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')),
      'worker_busy_s', (SELECT coalesce(extract(epoch FROM sum(finished_at - started_at)), 0)
                        FROM jobs WHERE finished_at IS NOT NULL),
      'first_queued_to_last_done_s', (SELECT extract(epoch FROM max(finished_at) - min(created_at))
                                      FROM jobs),
      'timings_ok', (SELECT count(*) FROM timings WHERE status = 'ok'),
      'timings_failed', (SELECT count(*) FROM timings WHERE status = 'failed'),
      'wrong_results', (SELECT count(*) FROM timings WHERE error LIKE 'wrong result:%'),
      'wrong_result_examples', (SELECT coalesce(json_agg(w), '[]') FROM (
          SELECT p.canonical_key AS problem, t.micro_batch, t.algo, t.error FROM timings t
          JOIN problems p ON p.id = t.problem_id WHERE t.error LIKE 'wrong result:%'
          ORDER BY p.canonical_key, t.micro_batch, t.algo LIMIT 20) w))" >"$1" &&
    log "stack summary: $(cat "$1")"
}

# For the PyTorch scripts (gpu_torch.sh, gpu_torch_models.sh): checks that `bundle` has the
# client library and PostgreSQL and that python $1 exists (with CUDA when $2 is cuda), makes
# `bundle` absolute, exports UCUDNN_LIBRARY and, on cuda, PyTorch's cuDNN for the stack
# (stack_use_torch_cudnn). Returns 1, having said why, when something is missing.
stack_prepare_torch() {
  local python="$1" device="$2"
  local missing=""
  if [ ! -f "$bundle/bin/env.sh" ]; then
    missing="no bundle at '$bundle' (see --help for how to make one)"
  elif [ ! -f "$bundle/lib/libucudnn_client.so" ]; then
    missing="$bundle has no lib/libucudnn_client.so: make it with --with-client"
  elif [ ! -x "$bundle/lib/postgresql/15/bin/postgres" ]; then
    missing="$bundle has no PostgreSQL: make it with --with-postgres"
  elif [ ! -x "$python" ]; then
    missing="no Python at $python (--python PY)"
  elif [ "$device" = cuda ] &&
    ! "$python" -c 'import torch; assert torch.cuda.is_available(), "CUDA not available"'; then
    missing="$python: torch with CUDA is needed"
  fi
  if [ -n "$missing" ]; then
    log "$missing"
    return 1
  fi
  bundle="$(cd "$bundle" && pwd)"
  export UCUDNN_LIBRARY="$bundle/lib/libucudnn_client.so"
  if [ "$device" = cuda ]; then stack_use_torch_cudnn "$python"; fi
}

# Puts the directory of the libcudnn that PyTorch under python $1 loads first on LD_LIBRARY_PATH
# (exported), so that the worker and the client library run PyTorch's cuDNN: plans are per device
# fingerprint, which holds the cuDNN version, so a worker on another cuDNN serves no training
# process. The bundle's own libraries still resolve through RUNPATH.
stack_use_torch_cudnn() {
  local dir
  dir="$("$1" - 2>/dev/null <<'PY'
import os, torch
torch.backends.cudnn.version()  # loads libcudnn
for line in open("/proc/self/maps"):
    if "libcudnn.so" in line:
        print(os.path.dirname(line.split()[-1]))
        break
PY
)"
  if [ -n "$dir" ] && [ -d "$dir" ]; then
    log "worker and library use PyTorch's cuDNN from $dir"
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    log "warning: cannot tell which libcudnn PyTorch loads; the worker uses the system's"
  fi
}
