#!/usr/bin/env bash
# The side-by-side benchmark of issue 11 on a GPU machine, from a bundle (scripts/bundle.sh
# --with-postgres; the stack is started as scripts/h100_stack.sh starts it). For each network,
# precision and per-kernel workspace cap (MiB):
#   - a plan from the server: the first at each network and precision is cold (empty timings),
#     timed until the plan is complete;
#   - the example training step with --json: legacy cuDNN alone and ucudnn (plans from the
#     server, through the client library) in the same process, at the cap per kernel;
#   - PyTorch cudnn.benchmark (bench/torch_peer.py) at the cap, and once unlimited (the floor).
#     The cap is CUDNN_CONV_WSCAP_DBG=<cap> (--peer-cap wscap, the default), or the process's GPU
#     memory limited to its tensors + the largest output + <cap> (--peer-cap memory: PyTorch then
#     drops the engines whose workspace it cannot allocate), or both (two PyTorch runs per cap).
#     Each PyTorch run also reports the largest workspace one of its kernels took.
# ucudnn's processes get LD_LIBRARY_PATH = the torch venv's nvidia/cudnn/lib, so that both use the
# same cuDNN. Everything is collected by bench/peer_table.py into $OUT/peer_bench.json and
# $OUT/peer_bench.md (ms and ratios). The whole run keeps within --budget-s: a step that would
# not fit is skipped and recorded as such.
#
#   bash scripts/peer_bench.sh [BUNDLE_DIR=.bundle] [--networks "resnet50 vgg16 alexnet densenet121"]
#        [--precisions "fp32:nchw fp16:nhwc bf16:nhwc"] [--caps "64 256"] [--batch 256]
#        [--budget-s 540] [--python /opt/torch/.venv/bin/python3] [--backend cudnn|cpu]
#        [--peer-cap wscap|memory|both] [--no-legacy-plans] [--dry-run]
# --no-legacy-plans leaves out the legacy-only ucudnn plans: with the worker's probe pruning on
# (its default) the legacy algorithms that engine configurations dominate are not timed, so a plan
# that excludes the engines is built from leftovers and says nothing.
# --dry-run checks the arguments and prints the steps without running anything.
set -uo pipefail

usage() { sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
fail_usage() { echo "peer_bench.sh: $*" >&2; exit 2; }

bundle=".bundle"
networks="resnet50 vgg16 alexnet densenet121"
precisions="fp32:nchw fp16:nhwc bf16:nhwc"
caps="64 256"
batch=256
budget_s=540
python=/opt/torch/.venv/bin/python3
backend=cudnn
dry_run=0
legacy_plans=1
peer_cap=wscap
while [ $# -gt 0 ]; do
  case "$1" in
    --networks|--precisions|--caps|--batch|--budget-s|--python|--backend|--peer-cap)
      [ $# -ge 2 ] || fail_usage "$1: needs a value"
      case "$1" in
        --networks) networks="$2" ;;
        --precisions) precisions="$2" ;;
        --caps) caps="$2" ;;
        --batch) batch="$2" ;;
        --budget-s) budget_s="$2" ;;
        --python) python="$2" ;;
        --backend) backend="$2" ;;
        --peer-cap) peer_cap="$2" ;;
      esac
      shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --no-legacy-plans) legacy_plans=0; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) fail_usage "unknown option $1 (see --help)" ;;
    *) bundle="$1"; shift ;;
  esac
done

positive_int() { [[ "$1" =~ ^[1-9][0-9]{0,8}$ ]]; }
[ -n "${networks// /}" ] || fail_usage "--networks: empty"
for n in $networks; do
  [[ "$n" =~ ^[A-Za-z0-9_.-]+$ ]] || fail_usage "--networks: not a network name: '$n'"
done
[ -n "${precisions// /}" ] || fail_usage "--precisions: empty"
for p in $precisions; do
  [[ "$p" =~ ^(fp32|fp16|bf16):(nchw|nhwc)$ ]] ||
    fail_usage "--precisions: expected DTYPE:LAYOUT (fp32|fp16|bf16 : nchw|nhwc), got '$p'"
done
[ -n "${caps// /}" ] || fail_usage "--caps: empty"
for c in $caps; do positive_int "$c" || fail_usage "--caps: not a positive number of MiB: '$c'"; done
positive_int "$batch" || fail_usage "--batch: not a positive integer: '$batch'"
positive_int "$budget_s" || fail_usage "--budget-s: not a positive number of seconds: '$budget_s'"
[[ "$backend" =~ ^(cudnn|cpu)$ ]] || fail_usage "--backend: cudnn or cpu, got '$backend'"
[[ "$peer_cap" =~ ^(wscap|memory|both)$ ]] ||
  fail_usage "--peer-cap: wscap, memory or both, got '$peer_cap'"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
results="${OUT:-$(pwd)/peer-results}"
runs="$results/runs"
manifest="$runs/manifest.jsonl"
start_s=$(date +%s)

# Seconds left of the budget.
remaining() { echo $((budget_s - ($(date +%s) - start_s))); }

# One line of the manifest that bench/peer_table.py reads.
record() {  # kind network dtype layout cap status seconds file reason
  printf '{"kind": "%s", "network": "%s", "dtype": "%s", "layout": "%s", "cap_mib": %s, "status": "%s", "seconds": %s, "file": "%s", "reason": "%s"}\n' \
    "$@" >>"$manifest"
}

# Runs a step within min(its own limit, what is left of the budget), or skips it when less than
# `least` seconds are left; records it either way.
#   step KIND NETWORK DTYPE LAYOUT CAP LIMIT_S LEAST_S FILE -- COMMAND...
step() {
  local kind=$1 network=$2 dtype=$3 layout=$4 cap=$5 limit=$6 least=$7 file=$8
  shift 9
  local left
  left=$(remaining)
  if [ "$dry_run" -eq 1 ]; then
    echo "step: $kind $network $dtype $layout cap=$cap limit=${limit}s: $*"
    return 0
  fi
  if [ "$left" -lt "$least" ]; then
    log "skip $kind $network $dtype/$layout cap $cap: ${left}s left of the budget, needs ${least}s"
    record "$kind" "$network" "$dtype" "$layout" "$cap" skipped 0 "" "budget: ${left}s left, needs ${least}s"
    return 0
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0 t1 rc status seconds
  t0=$(now)
  timeout "$limit" "$@" >"$runs/$file" 2>"$runs/$file.log"
  rc=$?
  t1=$(now)
  seconds=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
  case $rc in
    0) status=ok ;;
    124) status=timeout ;;
    *) status=failed ;;
  esac
  log "$kind $network $dtype/$layout cap $cap: $status after ${seconds}s"
  record "$kind" "$network" "$dtype" "$layout" "$cap" "$status" "$seconds" "$file" "exit $rc"
}

if [ "$dry_run" -eq 1 ]; then
  echo "budget ${budget_s}s, batch $batch, backend $backend"
  log() { :; }
else
  mkdir -p "$runs"
  : >"$manifest"
  # shellcheck source=scripts/stack_lib.sh
  . "$here/stack_lib.sh"
  # Every ucudnn process (server, worker, plan, example) loads the cuDNN PyTorch loads.
  cudnn_lib=""
  for d in "$(dirname "$python")"/../lib/python3*/site-packages/nvidia/cudnn/lib; do
    [ -d "$d" ] && cudnn_lib="$(cd "$d" && pwd)"
  done
  if [ -n "$cudnn_lib" ]; then
    export LD_LIBRARY_PATH="$cudnn_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    log "ucudnn uses PyTorch's cuDNN: $cudnn_lib"
  else
    log "no cuDNN under the torch venv of $python: ucudnn uses its own"
  fi
  stack_start || exit 1
fi

for network in $networks; do
  for precision in $precisions; do
    dtype=${precision%%:*}
    layout=${precision##*:}
    tag="${network}_${dtype}_${layout}"
    flags=(--network "$network" --batch "$batch" --dtype "$dtype" --layout "$layout")
    first_cap=${caps%% *}
    step plan "$network" "$dtype" "$layout" "$first_cap" 300 30 "plan_cold_$tag.txt" -- \
      ucudnn plan --server "${server_addr:-}" --backend "$backend" "${flags[@]}" \
      --workspace "${first_cap}MiB" --wait 5m
    for cap in $caps; do
      step example "$network" "$dtype" "$layout" "$cap" 240 40 "example_${tag}_$cap.json" -- \
        ucudnn-example-train-step --backend "$backend" "${flags[@]}" \
        --server "${server_addr:-}" --limits-mib "$cap" --total-budget-mib 0 --steps 5 --json
      # The same plans from the legacy algorithms alone (the same timings, the other space left
      # out): what ucudnn gave before the engine configurations.
      [ "$legacy_plans" -eq 1 ] && step example_legacy "$network" "$dtype" "$layout" "$cap" 240 40 \
        "example_legacy_${tag}_$cap.json" -- \
        ucudnn-example-train-step --backend "$backend" "${flags[@]}" \
        --server "${server_addr:-}" --limits-mib "$cap" --total-budget-mib 0 --steps 5 --json \
        --algorithms legacy
      [ "$peer_cap" = memory ] ||
        step torch "$network" "$dtype" "$layout" "$cap" 180 30 "torch_${tag}_$cap.json" -- \
          env CUDNN_CONV_WSCAP_DBG="$cap" "$python" "$here/../bench/torch_peer.py" \
          --network "$network" --batch "$batch" --dtype "$dtype" --layout "$layout" \
          --json "$runs/torch_${tag}_$cap.full.json"
      [ "$peer_cap" = wscap ] ||
        step torch_mem "$network" "$dtype" "$layout" "$cap" 180 30 "torch_mem_${tag}_$cap.json" -- \
          env -u CUDNN_CONV_WSCAP_DBG "$python" "$here/../bench/torch_peer.py" \
          --network "$network" --batch "$batch" --dtype "$dtype" --layout "$layout" \
          --memory-headroom-mib "$cap" --json "$runs/torch_mem_${tag}_$cap.full.json"
    done
    step torch "$network" "$dtype" "$layout" null 180 30 "torch_${tag}_unlimited.json" -- \
      env -u CUDNN_CONV_WSCAP_DBG "$python" "$here/../bench/torch_peer.py" \
      --network "$network" --batch "$batch" --dtype "$dtype" --layout "$layout" \
      --json "$runs/torch_${tag}_unlimited.full.json"
  done
done

[ "$dry_run" -eq 1 ] && exit 0
table_python=python3
command -v python3 >/dev/null || table_python="$python"
"$table_python" "$here/../bench/peer_table.py" --runs "$runs" --json "$results/peer_bench.json" \
  --markdown "$results/peer_bench.md" --budget-s "$budget_s" && cat "$results/peer_bench.md"
