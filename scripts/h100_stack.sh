#!/usr/bin/env bash
# The whole stack on a GPU machine, from a bundle (scripts/bundle.sh --with-postgres): a PostgreSQL
# of its own, the planner server, a cuDNN worker, then the example training step through the
# client library. Measures the time from an empty database to a complete ResNet-50 plan, the time
# for the same plan from a warm database, and the step times with and without the library.
# Needs no compiler, cmake or network on the GPU machine. Results: docs/results.md, JSON under bench/results/.
#
#   bash scripts/h100_stack.sh [BUNDLE_DIR=.bundle] [--network resnet50] [--batch 256]
#                              [--backend cudnn|cpu] [--dtype fp32|fp16|bf16] [--layout nchw|nhwc]
#                              [--math default|tensor_op|fma|...]
# The precision flags go to `ucudnn plan` and the example as they are (defaults: fp32 NCHW;
# fp16/bf16 default to NHWC with tensor-op math, fp32 compute).
#
# Results go to $OUT (or ./stack-results): summary.txt, stack.log, plan_cold.txt, plan_warm.txt,
# train_step.json, and the last lines of the server's, worker's and example's logs (logs.txt).
# The newest train_step JSON is kept in bench/results/<gpu>/ (docs/results.md).
set -uo pipefail

bundle=".bundle"
network=resnet50
batch=256
backend=cudnn
precision=()  # --dtype/--layout/--math, passed on
while [ $# -gt 0 ]; do
  case "$1" in
    --network) network="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --backend) backend="$2"; shift 2 ;;  # cpu: a smoke test of the script without a GPU
    --dtype|--layout|--math) precision+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) bundle="$1"; shift ;;
  esac
done
results="${OUT:-$(pwd)/stack-results}"
mkdir -p "$results"
# shellcheck source=scripts/stack_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/stack_lib.sh"
stack_start || exit 1

log "cold plan: $network batch $batch, 64 MiB per kernel, empty database"
t0=$(now)
ucudnn plan --server "$server_addr" --backend "$backend" --network "$network" --batch "$batch" \
  "${precision[@]}" --workspace 64MiB --wait 8m >"$results/plan_cold.txt" 2>"$work/plan_cold.log"
rc_cold=$?
t1=$(now)
cold_s=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
log "cold plan: exit $rc_cold after ${cold_s}s"

t0=$(now)
ucudnn plan --server "$server_addr" --backend "$backend" --network "$network" --batch "$batch" \
  "${precision[@]}" --workspace 64MiB >"$results/plan_warm.txt" 2>&1
rc_warm=$?
t1=$(now)
warm_s=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
log "warm plan: exit $rc_warm after ${warm_s}s"

log "example training step through the client library (plans from the server)"
timeout 300 ucudnn-example-train-step --backend "$backend" --network "$network" --batch "$batch" \
  "${precision[@]}" --server "$server_addr" --steps 5 --json >"$results/train_step.json" \
  2>"$work/train_step.log"
rc_step=$?
log "train step: exit $rc_step"

{
  echo "network $network batch $batch ${precision[*]}"
  echo "cold plan (empty database -> complete plan): ${cold_s}s (exit $rc_cold)"
  echo "warm plan (timings present):                 ${warm_s}s (exit $rc_warm)"
  tail -3 "$results/plan_cold.txt"
  echo "train step exit $rc_step"
} | tee "$results/summary.txt"
[ "$rc_cold" -eq 0 ] && [ "$rc_warm" -eq 0 ] && [ "$rc_step" -eq 0 ]
