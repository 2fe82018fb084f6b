#!/usr/bin/env bash
# Why is a kernel slower in ucudnn than in PyTorch? For each kernel given, on a GPU machine: what
# PyTorch's own convolution runs (bench/torch_conv_trace.py under cuDNN's API log: its time, its
# device kernels, the engine configuration its search kept) and what cuDNN offers ucudnn for the
# same problem (ucudnn-engine-probe: the heuristics' candidates and the exhaustive engine x knob
# space), both on PyTorch's cuDNN.
#
#   bash scripts/gpu_conv_trace.sh BUNDLE_DIR [--python PY] [--precision amp|fp32] [--batch 128]
#        [--exhaustive-s 40] [--max-per-engine 16] -- OP,NAME:C:H:W:K:R:S:PAD:STRIDE[:GROUPS] ...
#   OP: fwd, bwd_data or bwd_filter; the bundle needs ucudnn-engine-probe (scripts/bundle.sh
#   --only "... ucudnn-engine-probe").
#
# Results in $OUT (or ./conv-trace-results): conv_trace.log (both sides' tables), conv_trace.json
# (PyTorch's rows), engine_probe.jsonl, cudnn_logs.tar.xz (the end of each cuDNN API log).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle=""
python=/opt/torch/.venv/bin/python3
precision=amp
batch=128
exhaustive_s=40
max_per_engine=16
kernels=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --precision) precision="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --exhaustive-s) exhaustive_s="$2"; shift 2 ;;
    --max-per-engine) max_per_engine="$2"; shift 2 ;;
    --) shift; kernels=("$@"); break ;;
    -*) echo "gpu_conv_trace.sh: unknown option $1" >&2; exit 2 ;;
    *) bundle="$1"; shift ;;
  esac
done
if [ -z "$bundle" ] || [ ! -x "$bundle/bin/ucudnn-engine-probe" ]; then
  echo "gpu_conv_trace.sh: BUNDLE_DIR/bin/ucudnn-engine-probe is needed" >&2
  exit 2
fi
[ ${#kernels[@]} -gt 0 ] || { echo "gpu_conv_trace.sh: no kernels given (after --)" >&2; exit 2; }
case "$precision" in
  amp) probe_precision=fp16_nhwc ;;
  fp32) probe_precision=fp32_nchw ;;
  *) echo "gpu_conv_trace.sh: --precision is amp or fp32" >&2; exit 2 ;;
esac
results="${OUT:-$PWD/conv-trace-results}"
mkdir -p "$results"
work="$(mktemp -d /tmp/conv-trace.XXXXXX)"
log="$results/conv_trace.log"
: >"$log"

# shellcheck source=scripts/stack_lib.sh
. "$root/scripts/stack_lib.sh"
stack_use_torch_cudnn "$python" 2>>"$log"

traces=()
for spec in "${kernels[@]}"; do
  op="${spec%%,*}"
  shape="${spec#*,}"
  name="${shape%%:*}_$op"
  echo "== $spec" | tee -a "$log"
  # PyTorch's side, under cuDNN's API log (its own process: the log covers this kernel alone).
  CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$work/cudnn_$name.log" \
    PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" "$python" "$root/bench/torch_conv_trace.py" --shape "$shape" --op "$op" \
    --precision "$precision" --batch "$batch" --out "$work/trace_$name.json" 2>&1 | tee -a "$log"
  [ -f "$work/trace_$name.json" ] && traces+=("$work/trace_$name.json")
  if [ -f "$work/cudnn_$name.log" ]; then
    # The steady calls come last: the end of the log names the plan PyTorch kept.
    tail -n 3000 "$work/cudnn_$name.log" >"$work/cudnn_${name}_tail.log"
    rm -f "$work/cudnn_$name.log"
  fi
  # ucudnn's side: the heuristics' candidates and the exhaustive space, on the same cuDNN.
  "$bundle/bin/ucudnn-engine-probe" --shape "$shape" --op "$op" --precision "$probe_precision" \
    --batch "$batch" --exhaustive --exhaustive-s "$exhaustive_s" \
    --max-per-engine "$max_per_engine" --no-host-overhead --out "$work/probe_$name.jsonl" \
    2>&1 | tee -a "$log"
  cat "$work/probe_$name.jsonl" >>"$results/engine_probe.jsonl" 2>/dev/null
done

"$python" - "$results/conv_trace.json" "${traces[@]}" <<'PY'
import json, sys
rows, head = [], {}
for path in sys.argv[2:]:
    d = json.load(open(path))
    rows += d.pop("rows")
    head = d
json.dump(dict(head, rows=rows), open(sys.argv[1], "w"), indent=1)
PY
(cd "$work" && tar -cf - ./*_tail.log) | xz -T2 -6 >"$results/cudnn_logs.tar.xz"
rm -rf "$work"
