#!/usr/bin/env bash
# The worker's search on a GPU machine (issue 40), in one command, each part within --budget-s
# and in this order: --know, --gate, --offline.
#
#   --offline NETWORK:DTYPE:LAYOUT:BATCH  the worker's offline benchmark of a network, pruned (as
#       it runs) and then exhaustive (--exhaustive), each timed: the two timing CSVs come back for
#       `ucudnn-bench-engine --replay-pruning --data-dir DIR` on the development machine (the
#       pruned search replayed on the exhaustive table: its plans against the exhaustive ones).
#   --know ROW ...  (MODEL:PRECISION, bench/torch_models.py's)  each model's time to know on a
#       cold cluster: a fresh stack (empty database, one worker as deploy/ runs it), one converted
#       job that asks for every plan and waits (--know-cap-s at most), then the span from the
#       first benchmark job queued to the last one done and the worker's busy seconds.
#   --gate MODEL:PRECISION  native jobs (cudnn.benchmark on, --gate-jobs a side) alternately with
#       the idle-gated worker running, a backlog before it (--gate-backlog ROW ...: models whose
#       plans are asked for first, not waited for), and with the worker stopped.
#
#   On the development machine:  cmake --build build -j2
#                                scripts/bundle.sh --with-postgres --with-client \
#                                  --only "ucudnn ucudnn-server ucudnn-worker"
#   On the GPU machine (repo root, .bundle/ carried along):
#     bash scripts/gpu_search.sh [BUNDLE_DIR=.bundle] [--budget-s 540] [--offline SPEC] [--offline-cap-s 180]
#          [--know ROW ...] [--know-cap-s 120] [--gate ROW] [--gate-jobs 3]
#          [--gate-backlog ROW ...] [--gate-steps 40]
#
#   The stack's server takes its other settings from the environment, e.g.
#   UCUDNN_SEARCH_SIZES=limit (what a per-kernel request's jobs time: docs/results.md).
#
#   Without a GPU, a smoke test (CPU backend and worker, toy sizes): --cpu --python /usr/bin/python3
#
# Results in $OUT (or ./search-results): search.json (bench/worker_search.py collect; rewritten
# after every part), the offline CSVs, stack.log, logs.txt, runs.tar.gz (every run's JSON, the
# worker logs). Exit 1 when a part failed or did not finish.
set -uo pipefail

bundle=".bundle"
python=/opt/torch/.venv/bin/python3
budget_s=540
offline=""
offline_cap_s=180
know_rows=()
know_cap_s=120
gate_row=""
gate_jobs=3
gate_steps=40
gate_backlog=()
backend=cudnn
device=cuda
model_args=()  # --cpu: toy sizes
rows_of=""  # which option the bare ROW arguments belong to
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --budget-s) budget_s="$2"; shift 2 ;;
    --offline) offline="$2"; shift 2 ;;
    --offline-cap-s) offline_cap_s="$2"; shift 2 ;;
    --know) rows_of=know; shift ;;
    --know-cap-s) know_cap_s="$2"; shift 2 ;;
    --gate) gate_row="$2"; shift 2 ;;
    --gate-jobs) gate_jobs="$2"; shift 2 ;;
    --gate-steps) gate_steps="$2"; shift 2 ;;
    --gate-backlog) rows_of=backlog; shift ;;
    --cpu) backend=cpu; device=cpu; model_args=(--batch 4 --image-size 64); shift ;;
    -h|--help) sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_search.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *:*)
      case "$rows_of" in
        know) know_rows+=("$1") ;;
        backlog) gate_backlog+=("$1") ;;
        *) echo "gpu_search.sh: '$1' follows no --know or --gate-backlog" >&2; exit 2 ;;
      esac
      shift ;;
    *) bundle="$1"; shift ;;
  esac
done
[ -n "$offline" ] || [ "${#know_rows[@]}" -gt 0 ] || [ -n "$gate_row" ] ||
  { echo "gpu_search.sh: nothing to do: --offline, --know or --gate (see --help)" >&2; exit 2; }
results="${OUT:-$(pwd)/search-results}"
runs="$(mktemp -d /tmp/ucudnn-search.XXXXXX)"
mkdir -p "$results"
started=$SECONDS
time_left() { echo $((budget_s - (SECONDS - started))); }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/stack_lib.sh
. "$root/scripts/stack_lib.sh"
log() { echo "[gpu_search $(date +%T)] $*" | tee -a "$results/stack.log" >&2; }
rc=0
collect() {
  "$python" "$root/bench/worker_search.py" collect --runs-dir "$runs" --out "$results/search.json" ||
    rc=1
  tar -czf "$results/runs.tar.gz" -C "$runs" . 2>/dev/null
}
stack_prepare_torch "$python" "$device" || exit 1
# shellcheck source=/dev/null
. "$bundle/bin/env.sh"

for row in "${know_rows[@]}"; do
  left=$(time_left)
  if [ "$left" -le 45 ]; then log "know $row skipped: no time left"; rc=1; continue; fi
  cap=$((left - 20 < know_cap_s ? left - 20 : know_cap_s))
  stack_start || { log "the stack did not start"; rc=1; break; }
  tag="${row//:/_}"
  log "know $row: a converted job waits up to $cap s for every plan on a cold database"
  know_began=$SECONDS
  timeout -k 20 "$((cap + 15))" "$python" "$root/bench/torch_models.py" warm --no-framework \
    --server "$server_addr" --runs-dir "$runs" --device "$device" --warm-wait-s "$cap" "${model_args[@]}" \
    --rows "$row" >>"$runs/runs.log" 2>&1 ||
    { log "know $row: the job failed or timed out; GPU processes: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null | tr '\n' ' ')"
      pkill -KILL -f "torch_models.py run" 2>/dev/null; rc=1; }
  tar -czf "$results/runs.tar.gz" -C "$runs" . 2>/dev/null
  # The job may stop waiting before the worker is done (the server's answer "missing"): the
  # worker's queue, drained or not, within the same cap.
  while [ $((SECONDS - know_began)) -lt "$cap" ] &&
    [ "$(stack_jobs_in "'queued', 'running'")" != 0 ]; do
    sleep 1
  done
  stack_summary "$runs/know_$tag.summary.json"
  stack_timings_csv "$runs/know_$tag.timings.csv.gz"
  cp "$work/worker.log" "$runs/know_$tag.worker.log"
  stack_stop
  collect
done

if [ -n "$gate_row" ]; then
  stack_start || { log "the stack did not start"; exit 1; }
  if [ "${#gate_backlog[@]}" -gt 0 ]; then
    log "gate: the worker's backlog: ${gate_backlog[*]} (plans asked for, not waited for)"
    "$python" "$root/bench/torch_models.py" warm --no-framework --server "$server_addr" \
      --runs-dir "$runs" --device "$device" --warm-wait-s 1 "${model_args[@]}" --rows "${gate_backlog[@]}" \
      >>"$runs/runs.log" 2>&1 || true  # plans missing is what was asked for
  fi
  IFS=: read -r g_model g_precision <<<"$gate_row"
  for i in $(seq 1 "$gate_jobs"); do
    for side in with without; do
      left=$(time_left)
      if [ "$left" -le 40 ]; then log "gate job $i $side skipped: no time left"; rc=1; continue; fi
      if [ "$side" = without ]; then stack_stop_worker; fi
      done_before="$(stack_jobs_in "'done'")"
      pauses_before="$(grep -c 'benchmark paused' "$work/worker.log")"
      json="$runs/gate_${i}_${side}.json"
      timeout -k 20 "$left" "$python" "$root/bench/torch_models.py" run --mode native \
        --model "$g_model" --precision "$g_precision" --steps "$gate_steps" --device "$device" "${model_args[@]}" \
        --json-out "$json" >>"$runs/runs.log" 2>&1 || { log "gate job $i $side failed"; rc=1; }
      done_after="$(stack_jobs_in "'done'")"
      pauses_after="$(grep -c 'benchmark paused' "$work/worker.log")"
      printf '{"job": %d, "worker": %s, "benchmark_jobs_done": %d, "pauses": %d}\n' "$i" \
        "$([ "$side" = with ] && echo true || echo false)" "$((done_after - done_before))" \
        "$((pauses_after - pauses_before))" >"$runs/gate_${i}_${side}.worker.json"
      if [ "$side" = without ]; then stack_start_worker; fi
      log "gate job $i, worker $side: median step $("$python" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["median_step_ms"], 2))' "$json" 2>/dev/null) ms"
    done
  done
  stack_summary "$runs/gate.summary.json"
  stack_stop_worker  # the offline benchmarks below would share the GPU with it
  cp "$work/worker.log" "$runs/gate.worker.log"
  collect
fi
if [ -n "$offline" ]; then
  IFS=: read -r o_network o_dtype o_layout o_batch <<<"$offline"
  for search in pruned exhaustive; do
    left=$(time_left)
    if [ "$left" -le 30 ]; then log "offline $search skipped: no time left"; rc=1; continue; fi
    csv="$results/offline-${o_network}-${o_dtype}-${o_layout}-${search}.csv"
    flags=(--offline --backend "$backend" --network "$o_network" --dtype "$o_dtype"
      --layout "$o_layout" --batch "$o_batch" --output "$csv")
    [ "$search" = pruned ] || flags+=(--exhaustive)
    log "offline $search: $offline"
    begin=$(now)
    timeout -k 20 "$((left < offline_cap_s ? left : offline_cap_s))" ucudnn-worker "${flags[@]}" \
      >"$runs/offline_$search.log" 2>&1 ||
      { log "offline $search failed (runs.tar.gz: offline_$search.log)"; rc=1; }
    end=$(now)
    printf '{"search": "%s", "spec": "%s", "wall_s": %s, "csv": "%s"}\n' "$search" "$offline" \
      "$(awk -v a="$begin" -v b="$end" 'BEGIN { print b - a }')" "$(basename "$csv")" >"$runs/offline_$search.json"
    grep -E "offline: wrote" "$runs/offline_$search.log" | tee -a "$results/stack.log" >&2
  done
  collect
fi

log "done: exit $rc"
exit "$rc"
