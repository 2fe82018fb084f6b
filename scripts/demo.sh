#!/usr/bin/env bash
# The README's main command. On a fresh Debian machine: installs what is missing, builds, starts a
# PostgreSQL of its own in .run/ (never the system's), applies the migrations, starts the planner
# server and a worker (cuDNN on a GPU when there is one, the CPU backend otherwise), asks for a
# plan for a real network and prints it as a table. The services keep running; the commands to
# query and stop them are printed at the end. Running it again reuses the database and restarts
# the server and worker on the freshly built binaries.
#
#   scripts/demo.sh          # everything above
#   scripts/demo.sh [start] [--dtype fp32|fp16|bf16] [--layout nchw|nhwc] [--math MODE]
#                            # the same, planning the network at that precision (default fp32
#                            # NCHW; fp16/bf16 default to NHWC and tensor-op math, fp32 compute)
#   scripts/demo.sh stop     # stops the server, the worker and the demo's PostgreSQL
#   scripts/demo.sh status   # what is running
#   scripts/demo.sh clean    # stops everything and removes .run/ and the demo's database
#
# Environment: UCUDNN_DEMO_PG_PORT (55432), UCUDNN_DEMO_PORT (50051), UCUDNN_DEMO_METRICS_PORT
# (9464), UCUDNN_DEMO_NETWORK / UCUDNN_DEMO_BATCH (default resnet50/256 on a GPU, alexnet/8 on
# the CPU backend, whose convolutions are ~1000x slower), UCUDNN_DEMO_WORKSPACE (64MiB).
#
# As root, PostgreSQL (which refuses to run as root) runs as the system user ucudnn-demo. When
# that user cannot reach .run/ (a clone under /root, which is 0700), the database lives in
# /var/lib/ucudnn-demo/<hash of the repository's path>/ instead, and .run/pgdata is a symbolic
# link to it, so stop, status and the next run find it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/lib.sh"

run_dir="$root/.run"
pg_port="${UCUDNN_DEMO_PG_PORT:-55432}"
grpc_port="${UCUDNN_DEMO_PORT:-50051}"
metrics_port="${UCUDNN_DEMO_METRICS_PORT:-9464}"
workspace="${UCUDNN_DEMO_WORKSPACE:-64MiB}"
pg_bin="$(pg_config --bindir 2>/dev/null || true)"
[ -x "$pg_bin/initdb" ] || pg_bin=/usr/lib/postgresql/15/bin
db_url="postgresql://ucudnn@127.0.0.1:$pg_port/ucudnn"
bin="$root/build/bin"

# PostgreSQL refuses to run as root: as root, the cluster belongs to an unprivileged user.
pg_user=""
if [ "$(id -u)" -eq 0 ]; then
  pg_user=ucudnn-demo
  id "$pg_user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$pg_user"
fi
as_pg() { if [ -n "$pg_user" ]; then runuser -u "$pg_user" -- "$@"; else "$@"; fi; }

# Where the cluster (pgdata/) and its socket directory (pgsock/) live: .run/, or the directory
# .run/pgdata links to (see the header). Sets pg_home and pgdata.
external_home="/var/lib/ucudnn-demo/$(printf '%s' "$root" | sha256sum | cut -c1-16)"
locate_pgdata() {  # $1 = create: choose and prepare a place when there is none yet
  if [ -L "$run_dir/pgdata" ]; then
    pgdata="$(readlink "$run_dir/pgdata")"
    pg_home="$(dirname "$pgdata")"
  elif [ -e "$run_dir/pgdata" ] || [ "${1:-}" != create ]; then
    pg_home="$run_dir"
    pgdata="$run_dir/pgdata"
  elif [ -n "$pg_user" ] && ! runuser -u "$pg_user" -- test -x "$run_dir"; then
    ucudnn_log "$pg_user cannot reach $run_dir: the database goes to $external_home"
    mkdir -p "$external_home"
    chmod 755 "$(dirname "$external_home")" "$external_home"
    ln -sfn "$external_home/pgdata" "$run_dir/pgdata"
    pg_home="$external_home"
    pgdata="$external_home/pgdata"
  else
    pg_home="$run_dir"
    pgdata="$run_dir/pgdata"
  fi
}
stop_pidfile() {  # stops the process in $1 if it is running
  local f="$1"
  [ -f "$f" ] || return 0
  local pid
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$f"
}

pg_running() { [ -d "$pgdata" ] && as_pg "$pg_bin/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; }
stop_all() {
  stop_pidfile "$run_dir/worker.pid"
  stop_pidfile "$run_dir/server.pid"
  if pg_running; then as_pg "$pg_bin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null; fi
}

command=start
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then command="$1"; shift; fi
precision=()  # --dtype/--layout/--math for `ucudnn plan`, checked here before the long build
while [ $# -gt 0 ]; do
  case "$1:${2:-}" in
    --dtype:fp32|--dtype:fp16|--dtype:bf16|--layout:nchw|--layout:nhwc) ;;
    --math:default|--math:tensor_op|--math:tensor_op_allow_conversion|--math:fma) ;;
    *) echo "usage: $0 [start|stop|status|clean] [--dtype fp32|fp16|bf16] [--layout nchw|nhwc]" \
         "[--math default|tensor_op|tensor_op_allow_conversion|fma]; got '$*'" >&2
       exit 2 ;;
  esac
  precision+=("$1" "$2")
  shift 2
done

locate_pgdata
case "$command" in
  stop)
    stop_all
    ucudnn_log "stopped (data kept in $pgdata; '$0 clean' removes it)"
    exit 0 ;;
  clean)
    stop_all
    removed="$run_dir"
    if [ "$pg_home" != "$run_dir" ]; then rm -rf "$pg_home"; removed="$removed and $pg_home"; fi
    rm -rf "$run_dir"
    ucudnn_log "stopped; removed $removed"
    exit 0 ;;
  status)
    for s in server worker; do
      if [ -f "$run_dir/$s.pid" ] && kill -0 "$(cat "$run_dir/$s.pid")" 2>/dev/null; then
        echo "$s: running (pid $(cat "$run_dir/$s.pid"), log $run_dir/$s.log)"
      else echo "$s: stopped"; fi
    done
    if pg_running; then echo "postgres: running on 127.0.0.1:$pg_port (data $pgdata)"; else echo "postgres: stopped"; fi
    exit 0 ;;
  start) ;;
  *) echo "usage: $0 [start|stop|status|clean]" >&2; exit 2 ;;
esac

ucudnn_install_packages
ucudnn_log "building"
mkdir -p "$run_dir"
ucudnn_build "$root" >"$run_dir/build.log" 2>&1 || { tail -40 "$run_dir/build.log"; exit 1; }
ucudnn_install_buf "$root"

# ---- PostgreSQL in .run/pgdata (or where it links to) -----------------------------------------
locate_pgdata create
if [ ! -f "$pgdata/PG_VERSION" ]; then
  ucudnn_log "initialising PostgreSQL in $pgdata"
  mkdir -p "$pgdata" "$pg_home/pgsock"
  [ -z "$pg_user" ] || chown "$pg_user" "$pgdata" "$pg_home/pgsock"
  as_pg "$pg_bin/initdb" -D "$pgdata" -U ucudnn --auth=trust --no-sync >/dev/null
fi
if ! pg_running; then
  ucudnn_log "starting PostgreSQL on 127.0.0.1:$pg_port"
  mkdir -p "$pg_home/pgsock"
  [ -z "$pg_user" ] || chown "$pg_user" "$pg_home/pgsock"
  as_pg "$pg_bin/pg_ctl" -D "$pgdata" -l "$pgdata/postgres.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_home/pgsock" start >/dev/null
fi
as_pg "$pg_bin/psql" -h 127.0.0.1 -p "$pg_port" -U ucudnn -d postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname = 'ucudnn'" | grep -q 1 ||
  as_pg "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U ucudnn ucudnn

ucudnn_log "applying migrations"
"$bin/ucudnn" migrate --database-url "$db_url"

# ---- Server and worker (restarted on each run, so they are the binaries just built) ----------
[ -f "$run_dir/token" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$run_dir/token"
chmod 600 "$run_dir/token"
stop_pidfile "$run_dir/worker.pid"
stop_pidfile "$run_dir/server.pid"

ucudnn_log "starting the planner server on 127.0.0.1:$grpc_port (metrics on :$metrics_port)"
# The token from its file (0600), never on a command line where `ps` shows it to every user.
setsid "$bin/ucudnn-server" --listen "127.0.0.1:$grpc_port" --token-file "$run_dir/token" \
  --database-url "$db_url" --metrics-listen "127.0.0.1:$metrics_port" \
  >"$run_dir/server.log" 2>&1 </dev/null &
echo $! >"$run_dir/server.pid"

if "$bin/ucudnn" gpus >/dev/null 2>&1; then
  backend=cudnn
  network="${UCUDNN_DEMO_NETWORK:-resnet50}"; batch="${UCUDNN_DEMO_BATCH:-256}"
  ucudnn_log "GPU found: the worker benchmarks on cuDNN ($("$bin/ucudnn" gpus | head -1))"
else
  backend=cpu
  network="${UCUDNN_DEMO_NETWORK:-alexnet}"; batch="${UCUDNN_DEMO_BATCH:-8}"
  ucudnn_log "no GPU here: the worker benchmarks on the CPU backend (a stand-in, not a GPU)"
fi
setsid "$bin/ucudnn-worker" --backend "$backend" --database-url "$db_url" \
  >"$run_dir/worker.log" 2>&1 </dev/null &
echo $! >"$run_dir/worker.pid"

for _ in $(seq 1 50); do
  "$bin/ucudnn" health --server "127.0.0.1:$grpc_port" >/dev/null 2>&1 && break
  sleep 0.2
done
"$bin/ucudnn" health --server "127.0.0.1:$grpc_port" >/dev/null ||
  { tail -20 "$run_dir/server.log"; ucudnn_log "the server did not come up"; exit 1; }

# ---- The plan ----------------------------------------------------------------------------------
ucudnn_log "planning $network (mini-batch $batch, $workspace per kernel${precision[*]:+, ${precision[*]}})" \
  "on the $backend device;"
ucudnn_log "the worker benchmarks what is missing first (progress below)"
# With the token (from the environment, not the command line): a caller without one gets plans
# from what is measured but may not enqueue benchmarks.
UCUDNN_TOKEN="$(cat "$run_dir/token")" "$bin/ucudnn" plan --server "127.0.0.1:$grpc_port" \
  --backend "$backend" --network "$network" --batch "$batch" "${precision[@]}" \
  --workspace "$workspace" --wait 1800

cat <<EOF

The services keep running:
  server    127.0.0.1:$grpc_port   log $run_dir/server.log   metrics http://127.0.0.1:$metrics_port/metrics
  worker    ($backend)           log $run_dir/worker.log
  postgres  127.0.0.1:$pg_port   data $pgdata   url $db_url
  token     $run_dir/token   (bearer token, role admin: enqueueing benchmarks, submitting timings)

Query them (a plan without the token is made from what is measured; with it, missing benchmarks
are queued):
  $bin/ucudnn devices --server 127.0.0.1:$grpc_port
  $bin/ucudnn jobs --server 127.0.0.1:$grpc_port
  export UCUDNN_TOKEN="\$(cat $run_dir/token)"
  $bin/ucudnn plan --server 127.0.0.1:$grpc_port --backend $backend --network $network --batch $batch --workspace 256MiB --total
EOF
# buf curl calls the server through reflection, as grpcurl would (Debian 12 has no grpcurl).
if buf="$(ucudnn_buf "$root")"; then
  cat <<EOF
  $buf curl --protocol grpc --http2-prior-knowledge --list-services http://127.0.0.1:$grpc_port
  $buf curl --protocol grpc --http2-prior-knowledge http://127.0.0.1:$grpc_port/ucudnn.v1.CatalogService/ListDevices
EOF
fi
if command -v grpcurl >/dev/null 2>&1; then
  echo "  grpcurl -plaintext 127.0.0.1:$grpc_port list"
fi
cat <<EOF
Stop them:
  $root/scripts/demo.sh stop
EOF
