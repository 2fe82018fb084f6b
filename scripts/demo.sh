#!/usr/bin/env bash
# The README's main command. On a fresh Debian machine: installs what is missing, builds, starts a
# PostgreSQL of its own in .run/ (never the system's), applies the migrations, starts the planner
# server and a worker (cuDNN on a GPU when there is one, the CPU backend otherwise), asks for a
# plan for a real network and prints it as a table. The services keep running; the commands to
# query and stop them are printed at the end. Running it again reuses the database and restarts
# the server and worker on the freshly built binaries.
#
#   scripts/demo.sh          # everything above
#   scripts/demo.sh stop     # stops the server, the worker and the demo's PostgreSQL
#   scripts/demo.sh status   # what is running
#
# Environment: UCUDNN_DEMO_PG_PORT (55432), UCUDNN_DEMO_PORT (50051), UCUDNN_DEMO_METRICS_PORT
# (9464), UCUDNN_DEMO_NETWORK / UCUDNN_DEMO_BATCH (default resnet50/256 on a GPU, alexnet/8 on
# the CPU backend, whose convolutions are ~1000x slower), UCUDNN_DEMO_WORKSPACE (64MiB).
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

stop_pidfile() {  # stops the process in $1 if it is running
  local f="$1"
  [ -f "$f" ] || return 0
  local pid
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" || true
  fi
  rm -f "$f"
}

pg_running() { [ -d "$run_dir/pgdata" ] && as_pg "$pg_bin/pg_ctl" -D "$run_dir/pgdata" status >/dev/null 2>&1; }

case "${1:-start}" in
  stop)
    stop_pidfile "$run_dir/worker.pid"
    stop_pidfile "$run_dir/server.pid"
    if pg_running; then as_pg "$pg_bin/pg_ctl" -D "$run_dir/pgdata" -m fast -w stop >/dev/null; fi
    ucudnn_log "stopped (data kept in $run_dir; remove it for a clean start)"
    exit 0 ;;
  status)
    for s in server worker; do
      if [ -f "$run_dir/$s.pid" ] && kill -0 "$(cat "$run_dir/$s.pid")" 2>/dev/null; then
        echo "$s: running (pid $(cat "$run_dir/$s.pid"), log $run_dir/$s.log)"
      else echo "$s: stopped"; fi
    done
    if pg_running; then echo "postgres: running on 127.0.0.1:$pg_port"; else echo "postgres: stopped"; fi
    exit 0 ;;
  start) ;;
  *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac

ucudnn_install_packages
ucudnn_log "building"
mkdir -p "$run_dir"
ucudnn_build "$root" >"$run_dir/build.log" 2>&1 || { tail -40 "$run_dir/build.log"; exit 1; }
ucudnn_install_buf "$root"

# ---- PostgreSQL in .run/pgdata ---------------------------------------------------------------
if [ ! -f "$run_dir/pgdata/PG_VERSION" ]; then
  ucudnn_log "initialising PostgreSQL in $run_dir/pgdata"
  mkdir -p "$run_dir/pgdata" "$run_dir/pgsock"
  [ -z "$pg_user" ] || chown "$pg_user" "$run_dir/pgdata" "$run_dir/pgsock"
  as_pg "$pg_bin/initdb" -D "$run_dir/pgdata" -U ucudnn --auth=trust --no-sync >/dev/null
fi
if ! pg_running; then
  ucudnn_log "starting PostgreSQL on 127.0.0.1:$pg_port"
  [ -z "$pg_user" ] || chown "$pg_user" "$run_dir/pgsock"
  as_pg "$pg_bin/pg_ctl" -D "$run_dir/pgdata" -l "$run_dir/pgdata/postgres.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $run_dir/pgsock" start >/dev/null
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
UCUDNN_TOKENS="$(cat "$run_dir/token")" setsid "$bin/ucudnn-server" --listen "127.0.0.1:$grpc_port" \
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
ucudnn_log "planning $network (mini-batch $batch, $workspace per kernel) on the $backend device;"
ucudnn_log "the worker benchmarks what is missing first (progress below)"
"$bin/ucudnn" plan --server "127.0.0.1:$grpc_port" --backend "$backend" --network "$network" \
  --batch "$batch" --workspace "$workspace" --wait 1800

buf="$root/build/tools/node_modules/.bin/buf"
cat <<EOF

The services keep running:
  server    127.0.0.1:$grpc_port   log $run_dir/server.log   metrics http://127.0.0.1:$metrics_port/metrics
  worker    ($backend)           log $run_dir/worker.log
  postgres  127.0.0.1:$pg_port   data $run_dir/pgdata      url $db_url

Query them:
  $bin/ucudnn devices --server 127.0.0.1:$grpc_port
  $bin/ucudnn jobs --server 127.0.0.1:$grpc_port
  $bin/ucudnn plan --server 127.0.0.1:$grpc_port --backend $backend --network $network --batch $batch --workspace 256MiB --total
  $buf curl --protocol grpc --http2-prior-knowledge --list-services http://127.0.0.1:$grpc_port
  $buf curl --protocol grpc --http2-prior-knowledge http://127.0.0.1:$grpc_port/ucudnn.v1.CatalogService/ListDevices
  grpcurl -plaintext 127.0.0.1:$grpc_port list      # where grpcurl is installed
Stop them:
  $root/scripts/demo.sh stop
EOF
