#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang++ and runs one of them for a bounded time.
#
#   run_fuzz.sh SOURCE_DIR BINARY_DIR TARGET SECONDS   build, then fuzz TARGET for SECONDS over
#                                                      fuzz/corpus/TARGET (a ctest test)
#   run_fuzz.sh --build-only SOURCE_DIR BINARY_DIR     build every target (target ucudnn_fuzzers)
#
# The fuzz project is configured once into BINARY_DIR/fuzz. New inputs found while fuzzing go to
# a temporary directory (the committed corpus is only read); a crash's input is kept under
# BINARY_DIR/fuzz-artifacts/ and the test fails. Without clang++ or libFuzzer it skips: exit 77
# (ctest's SKIP_RETURN_CODE), or 0 with --build-only. UCUDNN_FUZZ_CXX overrides the compiler.
set -euo pipefail

build_only=0
if [[ ${1:-} == --build-only ]]; then
  build_only=1
  shift
fi
src=${1:?source dir}
bin=${2:?binary dir}
target=${3:-}
seconds=${4:-20}
if [[ $build_only == 0 && -z $target ]]; then
  echo "usage: $0 SOURCE_DIR BINARY_DIR TARGET SECONDS | --build-only SOURCE_DIR BINARY_DIR" >&2
  exit 2
fi

skip() {
  echo "SKIPPED: $*"
  if [[ $build_only == 1 ]]; then exit 0; fi
  exit 77
}

cxx=${UCUDNN_FUZZ_CXX:-$(command -v clang++ || true)}
[[ -n $cxx ]] || skip "clang++ not found (libFuzzer needs clang)"
fuzz_bin=$bin/fuzz
mkdir -p "$fuzz_bin"
# libFuzzer ships with clang's compiler-rt; some installs lack it.
probe=$fuzz_bin/libfuzzer-probe
if [[ ! -x $probe ]]; then
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' |
    "$cxx" -x c++ -fsanitize=fuzzer,address - -o "$probe" 2>"$fuzz_bin/probe.log" ||
    skip "$cxx cannot link -fsanitize=fuzzer,address ($(head -c 300 "$fuzz_bin/probe.log"))"
fi

if [[ ! -f $fuzz_bin/build.ninja ]]; then
  cmake -S "$src/fuzz" -B "$fuzz_bin" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$fuzz_bin/configure.log" 2>&1 || {
    cat "$fuzz_bin/configure.log"
    exit 1
  }
fi
# Serialised with the other fuzz tests by ctest's RESOURCE_LOCK; -j2: the machines have 2 cores.
cmake --build "$fuzz_bin" -j2 ${target:+--target "$target"}
[[ $build_only == 1 ]] && exit 0

corpus=$src/fuzz/corpus/$target
[[ -d $corpus ]] || {
  echo "no seed corpus at $corpus" >&2
  exit 1
}
work=$(mktemp -d "${TMPDIR:-/tmp}/ucudnn-fuzz-$target.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/new" "$work/artifacts"
status=0
# -timeout: one input running 10 s is a hang; -rss_limit_mb: 2 GiB is a leak or a bomb.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$fuzz_bin/$target" -max_total_time="$seconds" \
  -timeout=10 -rss_limit_mb=2048 -error_exitcode=1 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/new" "$corpus" || status=$?
if [[ $status != 0 ]] || compgen -G "$work/artifacts/*" >/dev/null; then
  keep=$bin/fuzz-artifacts/$target
  mkdir -p "$keep"
  cp -r "$work/artifacts/." "$keep/" 2>/dev/null || true
  echo "FAILED: $target found a problem (exit $status); inputs kept in $keep" >&2
  exit 1
fi
echo "$target: no failure in $seconds s ($(find "$work/new" -type f | wc -l) new inputs found)"
