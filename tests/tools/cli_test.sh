#!/usr/bin/env bash
# Checks of the `ucudnn` CLI as a process: each case tests the exit status and the output.
# Usage: cli_test.sh UCUDNN_BINARY CASE   (the cases are the functions below; tests/tools.cmake)
set -u
ucudnn=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_exit CODE CMD...: runs CMD, keeps stdout+stderr in $out, fails unless it exits CODE.
expect_exit() {
  local want=$1
  shift
  out=$("$@" 2>&1)
  local rc=$?
  printf '%s\n' "$out"
  [ "$rc" -eq "$want" ] || fail "'$*' exited $rc, expected $want"
}

# expect_line REGEX: some line of $out matches the extended regular expression.
expect_line() {
  grep -Eq -- "$1" <<<"$out" || fail "no line matches /$1/"
}

problem_resnet50_unique() {
  expect_exit 0 "$ucudnn" problem --network resnet50 --unique
  expect_line '^kernel +hash +canonical key$'
  local rows
  rows=$(tail -n +2 <<<"$out" | wc -l)
  [ "$rows" -eq 69 ] || fail "$rows unique kernels, expected 69"
}

networks_lists_builtins() {
  expect_exit 0 "$ucudnn" networks
  expect_line '^densenet121 +120 +66$'
  expect_line '^resnet152 +155 +23$'
  [ "$(wc -l <<<"$out")" -eq 8 ] || fail "expected a header and 7 networks"
}

unknown_network_is_a_clear_error() {
  expect_exit 1 "$ucudnn" problem --network resnet51
  expect_line "^ucudnn: INVALID_ARGUMENT: network: unknown name 'resnet51'; known: alexnet, "
}

bad_network_file_names_the_line() {
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  { sed -n 1,3p "$here/tiny_net.csv"; sed -n 3p "$here/tiny_net.csv"; } >"$scratch/dup.csv"
  expect_exit 1 "$ucudnn" problem --network "$scratch/dup.csv"
  expect_line "line 4: layer: 'stem' appears twice \\(line 3\\)"
}

# The issue's `ucudnn cpu-bench`, on a tiny user network file so that it stays fast.
cpu_bench_user_network() {
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  expect_exit 0 "$ucudnn" cpu-bench --network "$here/tiny_net.csv" --batch 4 --workspace 1MiB \
    --threads 2 --output "$scratch/timings.csv"
  expect_line '^cpu-bench .*tiny_net\.csv, mini-batch 4$'
  expect_line '^Device: cpu ".+", [0-9]+ cores, .*openblas [0-9.]+ threads:2 \(BLAS threads 2\); fingerprint [0-9a-f]{16}$'
  expect_line '^Plan: 6 kernels \(fp32 nchw\), policy power_of_two, workspace 1 MiB per kernel$'
  expect_line '^kernel +shape +segments +ws MiB +time ms +undiv ms +speedup$'
  # Every kernel planned with named algorithms, compared with its undivided baseline.
  for kernel in stem/fwd stem/bwd_data stem/bwd_filter down/fwd down/bwd_data down/bwd_filter; do
    expect_line "^$kernel +n4 .* [0-9]+x[0-9]+@(direct|im2col_gemm|im2col_gemm_per_sample)( |$).* [0-9]+\\.[0-9] +[0-9]+\\.[0-9]{3} +[0-9]+\\.[0-9]{3} +[0-9]+\\.[0-9]{2}x$"
  done
  expect_line '^total +[0-9]+\.[0-9] +[0-9]+\.[0-9]{3} +[0-9]+\.[0-9]{3} +[0-9]+\.[0-9]{2}x$'
  # The timings file is filed under the 2-thread device, not the 1-thread one of the workers.
  grep -Eq '^# device\.blas: openblas [0-9.]+ threads:2$' "$scratch/timings.csv" ||
    fail "timings.csv: no '# device.blas: ... threads:2' line"
}

bad_workspace_is_a_clear_error() {
  expect_exit 1 "$ucudnn" cpu-bench --network alexnet --workspace 64XB
  expect_line "^ucudnn: INVALID_ARGUMENT: '64XB': unknown unit 'xb'"
}

# Every subcommand's flag beats the exported variable (issue 22): the error names the address or
# database of the flag, never the environment's. No server is needed: both addresses are closed.
flags_beat_the_environment() {
  local net=(--network "$here/tiny_net.csv" --batch 4 --backend cpu)
  local cmd
  for cmd in health devices workers jobs plan explain timings curve; do
    local more=()
    case $cmd in plan | explain | timings | curve) more=("${net[@]}") ;; esac
    expect_exit 1 env UCUDNN_SERVER=127.0.0.1:1 "$ucudnn" "$cmd" --server 127.0.0.1:2 \
      --deadline-ms 2000 "${more[@]}"
    expect_line "UNAVAILABLE: 127\.0\.0\.1:2"
    ! grep -q '127\.0\.0\.1:1\b' <<<"$out" || fail "$cmd dialled the environment's address"
    # The environment is used where no flag is given.
    expect_exit 1 env UCUDNN_SERVER=127.0.0.1:1 "$ucudnn" "$cmd" --deadline-ms 2000 "${more[@]}"
    expect_line "UNAVAILABLE: 127\.0\.0\.1:1"
  done
  for cmd in migrate import; do
    local more=()
    [ "$cmd" = import ] && more=("$here/tiny_net.csv")
    expect_exit 1 env UCUDNN_DATABASE_URL=postgresql://env@127.0.0.1:1/env "$ucudnn" "$cmd" \
      --database-url postgresql://flag@127.0.0.1:2/flag "${more[@]}"
    expect_line 'port 2 failed'
    ! grep -q 'port 1 failed' <<<"$out" || fail "$cmd opened the environment's database"
  done
}

# Usage errors exit 2 with one clear line, whatever CLI11 calls them.
usage_errors_exit_2() {
  expect_exit 2 "$ucudnn" --bogus
  expect_line "^ucudnn: unknown flag or command '--bogus'$"
  expect_exit 2 "$ucudnn"
  expect_line '^ucudnn: A subcommand is required'
  expect_exit 2 "$ucudnn" devices --no-such-flag
  expect_line "^ucudnn: The following argument was not expected: --no-such-flag"
  expect_exit 2 "$ucudnn" jobs --limit many
  expect_line "Run 'ucudnn --help'"
  expect_exit 2 "$ucudnn" devices --token-file /nonexistent/token
  expect_line "^ucudnn: INVALID_ARGUMENT: --token-file: cannot open '/nonexistent/token'$"
}

# --json on the local read commands: one document that parses.
local_commands_print_json() {
  expect_exit 0 "$ucudnn" networks --json
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert len(d["networks"]) == 7, d' "$out" ||
    fail "networks --json"
  expect_exit 0 "$ucudnn" problem --network "$here/tiny_net.csv" --batch 4 --unique --json
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert len(d["kernels"]) == 6, d' "$out" ||
    fail "problem --json"
}

"$case_name"
echo "PASS: $case_name"
