#!/usr/bin/env bash
# Convolutions in every dimension on a GPU machine (issue 39), in one command: the cuDNN-vs-CPU
# equivalence tests of the 1-D and 3-D layers (every legacy algorithm and every engine
# configuration cuDNN proposes, in every precision and layout: tests/gpu/cudnn_equivalence_test.cc)
# on PyTorch's cuDNN, then scripts/gpu_torch_models.sh with the arguments after `--` (the
# N-d models of bench/nd_models.py: r3d_18, r2plus1d_18, unet3d, dcgan, vae3d-decoder,
# wav2letter).
#
#   On the development machine:  cmake --build build -j2
#                                scripts/bundle.sh --with-postgres --with-client --with-tests \
#                                  --only "ucudnn ucudnn-server ucudnn-worker ucudnn_gpu_tests"
#   On the GPU machine (repo root, .bundle/ carried along):
#     bash scripts/gpu_nd.sh [--no-tests] [-- GPU_TORCH_MODELS_ARGS...]
#
# Results in $OUT (or ./nd-results): nd_gpu_tests.log and .json (gtest's), and what
# gpu_torch_models.sh writes there. Exit 1 when a test failed or a run did.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python=/opt/torch/.venv/bin/python3
tests=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) tests=0; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_nd.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
results="${OUT:-$(pwd)/nd-results}"
mkdir -p "$results"
rc=0
if [ "$tests" = 1 ]; then
  cudnn_dir="$("$python" - 2>/dev/null <<'PY'
import os, torch
torch.backends.cudnn.version()
for line in open("/proc/self/maps"):
    if "libcudnn.so" in line:
        print(os.path.dirname(line.split()[-1]))
        break
PY
)"
  echo "[gpu_nd $(date +%T)] equivalence tests on cuDNN from ${cudnn_dir:-the system}" >&2
  # Full fp32 accuracy bounds (as scripts/gpu_suite.sh): TF32 off for the default math.
  NVIDIA_TF32_OVERRIDE=0 LD_LIBRARY_PATH="${cudnn_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    timeout 300 "$root/.bundle/bin/ucudnn_gpu_tests" \
    --gtest_filter='Layers/*unet3d*:Layers/*r3d*:Layers/*r2plus1d*:Layers/*conv1d*' \
    --gtest_output="json:$results/nd_gpu_tests.json" >"$results/nd_gpu_tests.log" 2>&1 || rc=1
  grep -E '^\[  (PASSED|FAILED) |tests ran' "$results/nd_gpu_tests.log" >&2
fi
if [ $# -gt 0 ]; then
  bash "$root/scripts/gpu_torch_models.sh" "$@" || rc=1
fi
exit "$rc"
