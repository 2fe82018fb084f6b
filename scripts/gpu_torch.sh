#!/usr/bin/env bash
# The PyTorch adapter on a GPU machine (issue 12), from a bundle, with PyTorch 2.x in a venv: the
# whole stack (PostgreSQL, planner server, cuDNN worker; scripts/stack_lib.sh), then
# bench/torch_adapter.py's suite: ResNet-50 at batch 256, fp32 and AMP fp16 channels-last, native
# PyTorch against ucudnn.torch (losses agree), step times at a 64 MiB cap, against
# CUDNN_CONV_WSCAP_DBG=64 and uncapped, the adapter's overhead per call against native (undivided
# plans; bench/torch_adapter.py overhead) and its share of the step, and the time to
# the first fast step. The first ucudnn run of each precision fills the empty database (the worker
# benchmarks its kernels; a few minutes), so later runs see a warm one.
#
#   On the development machine:  cmake --build build -j2
#                                scripts/bundle.sh --with-postgres --with-client \
#                                  --only "ucudnn ucudnn-server ucudnn-worker"
#   On the GPU machine (repo root, .bundle/ copied along):
#                                bash scripts/gpu_torch.sh [BUNDLE_DIR=.bundle] [--python PY]
#                                  [--batch 256] [--steps 20] [--image-size 224]
#   Without a GPU, a smoke test of the script (CPU backend and worker, toy sizes):
#                                bash scripts/gpu_torch.sh --cpu --python /usr/bin/python3
#
# Results go to $OUT (or ./torch-results): torch_adapter.json (report, failures, every run),
# one JSON and log per run, stack.log, logs.txt. Exit 1 when a run failed or losses disagree.
set -uo pipefail

bundle=".bundle"
python=/opt/torch/.venv/bin/python3
batch=256
steps=20
image_size=224
backend=cudnn
device=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --image-size) image_size="$2"; shift 2 ;;
    # Batch 8 at 64x64: smaller ones leave batch norm a handful of values per channel in the
    # last stage, which turns rounding differences into different losses.
    --cpu) backend=cpu; device=cpu; batch=8; steps=2; image_size=64; shift ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_torch.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) bundle="$1"; shift ;;
  esac
done
results="${OUT:-$(pwd)/torch-results}"
mkdir -p "$results"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/stack_lib.sh
. "$root/scripts/stack_lib.sh"
# After stack_lib.sh: its steps log through this one.
log() { echo "[gpu_torch $(date +%T)] $*" | tee -a "$results/stack.log" >&2; }
die() { log "$*"; exit 1; }

stack_prepare_torch "$python" "$device" || exit 1

stack_start || die "the stack did not start"
ucudnn health --server "$server_addr" >/dev/null 2>&1 || die "the planner server did not start"
log "torch $("$python" -c 'import torch; print(torch.__version__, "cuDNN", torch.backends.cudnn.version())')"

# The suite keeps within what is left of 9 minutes of wall time.
"$python" "$root/bench/torch_adapter.py" suite --server "$server_addr" --out "$results" \
  --device "$device" --batch "$batch" --steps "$steps" --image-size "$image_size" 2>&1 |
  tee -a "$results/stack.log"
rc=${PIPESTATUS[0]}
log "suite: exit $rc (report: $results/torch_adapter.json)"
exit "$rc"
