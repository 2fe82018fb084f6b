#!/usr/bin/env bash
# The GPU suite: the one command to run on a machine with a GPU, from a bundle made on a
# development machine (no cmake, compiler or network needed here). See docs/gpu.md.
#
#   On the development machine:   cmake --preset default && cmake --build build -j
#                                 scripts/bundle.sh --gpu-suite   (or --with-tests: everything)
#   On the GPU machine (repo root, with .bundle/ copied along):
#                                 bash scripts/gpu_suite.sh [BUNDLE_DIR=.bundle] [--all-tests]
#
# Steps, each under its own time limit so the whole suite stays under 10 minutes:
#   1. environment: nvidia-smi, the libraries the binaries resolve to (a missing one stops here)
#   2. ucudnn_gpu_tests with NVIDIA_TF32_OVERRIDE=0 (full fp32 accuracy bounds), gtest JSON
#   3. ucudnn-bench-engine --json --repeat 2 (wall time per op, repeat agreement, ratio to the
#      measured tables in data/h100/)
#   4. the cuDNN-vs-CPU equivalence cases again with TF32 allowed (cuDNN's real default math on
#      Ampere and newer), with the TF32 bound
#   5. with --all-tests: every other *_tests binary of the bundle (relocation check)
# Results go to $OUT when set (the device runner collects it), else ./gpu-results:
#   env.txt, gpu_tests.{json,log}, gpu_tests_tf32.{json,log}, bench_engine.{json,log},
#   summary.txt. Exit status: 0 when every test passed and the benchmark ran, 1 otherwise.
#   The newest bench_engine.json is kept in bench/results/<gpu>/ (docs/results.md).
set -uo pipefail

bundle=".bundle"
all_tests=0
for arg in "$@"; do
  case "$arg" in
    --all-tests) all_tests=1 ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) bundle="$arg" ;;
  esac
done
results="${OUT:-$(pwd)/gpu-results}"
mkdir -p "$results"
[ -f "$bundle/bin/env.sh" ] || { echo "gpu_suite.sh: no bundle at '$bundle' (scripts/bundle.sh --with-tests makes one)" >&2; exit 1; }
bundle="$(cd "$bundle" && pwd)"
# A copied tree may have lost the executable bits.
chmod +x "$bundle"/bin/* 2>/dev/null || true
# shellcheck source=/dev/null
. "$bundle/bin/env.sh"

log() { printf '\033[1m[gpu_suite]\033[0m %s\n' "$*" >&2; }
has() { command -v "$1" >/dev/null 2>&1; }
# The device runner allows 10 minutes per command: every step gets at most its own limit and
# never more than what is left of the suite's budget (UCUDNN_GPU_SUITE_BUDGET_S, default 540).
budget="${UCUDNN_GPU_SUITE_BUDGET_S:-540}"
run_limited() {  # seconds, command...: the command under a time limit when `timeout` exists
  local limit="$1"; shift
  local left=$((budget - SECONDS - 10))
  [ "$left" -lt "$limit" ] && limit="$left"
  if [ "$limit" -le 0 ]; then echo "gpu_suite.sh: no time left for $*" >&2; return 124; fi
  if has timeout; then timeout --kill-after=10 "$limit" "$@"; else "$@"; fi
}
status_word() { case "$1" in 0) echo ok ;; 124|137) echo "timed out" ;; *) echo "failed (rc $1)" ;; esac; }

tests_bin="$bundle/bin/ucudnn_gpu_tests"
bench_bin="$bundle/bin/ucudnn-bench-engine"
overall=0

# ---- 1. environment -----------------------------------------------------------------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  kernel: $(uname -r)"
  [ -f /etc/os-release ] && grep PRETTY_NAME /etc/os-release
  ldd --version 2>/dev/null | head -1
  [ -f "$bundle/MANIFEST.txt" ] && sed -n '1,3p' "$bundle/MANIFEST.txt"
  has nvidia-smi && nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
  for b in "$tests_bin" "$bench_bin"; do
    [ -x "$b" ] || continue
    echo "== ldd $(basename "$b")"
    ldd "$b" 2>&1
  done
} > "$results/env.txt" 2>&1
missing="$(grep -h "not found" "$results/env.txt" || true)"
if [ -n "$missing" ]; then
  log "libraries not found (see $results/env.txt):"
  echo "$missing" >&2
  exit 1
fi
[ -x "$tests_bin" ] || { log "$tests_bin missing: make the bundle with --with-tests"; exit 1; }
log "results in $results"

# ---- 2. the GPU tests, fp32 without TF32 ---------------------------------------------------------
log "ucudnn_gpu_tests (NVIDIA_TF32_OVERRIDE=0)"
(
  export NVIDIA_TF32_OVERRIDE=0
  run_limited 240 "$tests_bin" --gtest_output="json:$results/gpu_tests.json"
) > "$results/gpu_tests.log" 2>&1
tests_rc=$?
tail -n 5 "$results/gpu_tests.log" >&2
[ "$tests_rc" = 0 ] || overall=1
# This suite exists to exercise the GPU: skipped GPU cases here are a failure, not a pass.
gpu_skipped=0
if grep -q "no GPU visible" "$results/gpu_tests.log"; then
  gpu_skipped=1
  overall=1
  log "the GPU cases were SKIPPED: CUDA sees no GPU (see env.txt)"
fi

# ---- 3. the engine benchmark ---------------------------------------------------------------------
bench_rc=127
if [ -x "$bench_bin" ]; then
  data_args=()
  [ -d data/h100 ] && data_args=(--data-dir data/h100)
  log "ucudnn-bench-engine --json --repeat 2"
  run_limited 180 "$bench_bin" --json --repeat 2 "${data_args[@]}" \
    > "$results/bench_engine.json" 2> "$results/bench_engine.log"
  bench_rc=$?
else
  log "$bench_bin missing from the bundle"
fi
[ "$bench_rc" = 0 ] || overall=1

# ---- 4. equivalence with TF32 allowed ------------------------------------------------------------
log "equivalence cases with TF32 allowed"
(
  unset NVIDIA_TF32_OVERRIDE
  run_limited 150 "$tests_bin" --gtest_filter='Layers/CudnnEquivalenceTest.*' \
    --gtest_output="json:$results/gpu_tests_tf32.json"
) > "$results/gpu_tests_tf32.log" 2>&1
tf32_rc=$?
[ "$tf32_rc" = 0 ] || overall=1

# ---- 5. every other test binary -----------------------------------------------------------------
other_summary=""
if [ "$all_tests" = 1 ]; then
  for t in "$bundle"/bin/*_tests; do
    [ "$t" = "$tests_bin" ] && continue
    [ -x "$t" ] || continue
    name="$(basename "$t")"
    log "$name"
    run_limited 120 "$t" --gtest_output="json:$results/$name.json" > "$results/$name.log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || overall=1
    other_summary+="$(printf '%-28s %s' "$name" "$(status_word "$rc")")"$'\n'
  done
fi

# ---- summary -------------------------------------------------------------------------------------
gtest_counts() {  # log file -> "passed N, failed N, skipped N"
  local f="$1" p s fl
  p="$(grep -oE '^\[  PASSED  \] [0-9]+' "$f" | grep -oE '[0-9]+$' | tail -1)"
  s="$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$f" | grep -oE '[0-9]+' | tail -1)"
  fl="$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$f" | grep -oE '[0-9]+' | tail -1)"
  echo "passed ${p:-?}, failed ${fl:-0}, skipped ${s:-0}"
}
{
  echo "==================== ucudnn GPU suite ===================="
  grep -m1 "fingerprint:" "$results/gpu_tests.log" | sed 's/^ *//'
  grep -m1 "cuDNN at run time" "$results/gpu_tests.log" | sed 's/^ */  /'
  printf '%-28s %-12s %s\n' "step" "status" "detail"
  printf '%-28s %-12s %s\n' "gpu tests (no TF32)" "$(status_word "$tests_rc")" "$(gtest_counts "$results/gpu_tests.log")"
  printf '%-28s %-12s %s\n' "equivalence (TF32 allowed)" "$(status_word "$tf32_rc")" "$(gtest_counts "$results/gpu_tests_tf32.log")"
  printf '%-28s %-12s %s\n' "engine benchmark" "$(status_word "$bench_rc")" "bench_engine.json"
  [ -n "$other_summary" ] && printf '%s' "$other_summary"
  [ "$gpu_skipped" = 1 ] && echo "GPU cases SKIPPED: CUDA sees no GPU here; this run proves nothing about the GPU"
  failed="$(grep -hE '^\[  FAILED  \] [A-Za-z]' "$results/gpu_tests.log" "$results/gpu_tests_tf32.log" 2>/dev/null | sort -u)"
  if [ -n "$failed" ]; then echo "failed tests:"; echo "$failed"; fi
  if [ -s "$results/bench_engine.log" ]; then
    echo "--- engine benchmark ---"
    grep -vE '^\[[0-9]{4}-' "$results/bench_engine.log"
  fi
  echo "results: $results"
} | tee "$results/summary.txt"
exit "$overall"
