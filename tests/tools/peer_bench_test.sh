#!/usr/bin/env bash
# scripts/peer_bench.sh's argument handling (bad input is a clear usage error, --dry-run lists
# the steps) and bench/peer_table.py's table from fake step outputs; no GPU, bundle or PyTorch.
#   bash tests/tools/peer_bench_test.sh SOURCE_DIR
set -uo pipefail
src="$1"
bench="$src/scripts/peer_bench.sh"
table="$src/bench/peer_table.py"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_usage_error "message part" ARGS...: exit 2 and the message on stderr, nothing run.
expect_usage_error() {
  local want="$1"
  shift
  local err rc
  err="$(OUT="$tmp/out" bash "$bench" "$@" 2>&1 >/dev/null)"
  rc=$?
  [ "$rc" -eq 2 ] || fail "peer_bench.sh $*: exit $rc, expected 2"
  [[ "$err" == *"$want"* ]] || fail "peer_bench.sh $*: '$err' lacks '$want'"
}
expect_usage_error "--precisions: expected DTYPE:LAYOUT" --precisions "fp32:nchw fp8:nhwc"
expect_usage_error "--caps: not a positive number of MiB: '0'" --caps "64 0"
expect_usage_error "--caps: not a positive number of MiB: 'lots'" --caps lots
expect_usage_error "--budget-s: not a positive number of seconds: '-5'" --budget-s -5
expect_usage_error "--batch: not a positive integer" --batch 2x
expect_usage_error "--networks: not a network name: 'a;b'" --networks "resnet50 a;b"
expect_usage_error "--networks: empty" --networks " "
expect_usage_error "--backend: cudnn or cpu" --backend tpu
expect_usage_error "--peer-cap: wscap, memory or both, got 'tight'" --peer-cap tight
expect_usage_error "unknown option --fast" --fast
expect_usage_error "--caps: needs a value" --caps
[ ! -e "$tmp/out" ] || fail "a usage error created the results directory"

# --dry-run: per network and precision one cold plan, per cap an example and a PyTorch run,
# then PyTorch unlimited.
out="$(bash "$bench" --dry-run --networks "alexnet vgg16" --precisions "fp32:nchw bf16:nhwc" \
  --caps "64 256" --budget-s 120 --batch 32)"
rc=$?
[ "$rc" -eq 0 ] || fail "--dry-run: exit $rc"
[ "$(grep -c '^step: ' <<<"$out")" -eq $((2 * 2 * (1 + 2 * 3 + 1))) ] ||
  fail "--dry-run: wrong number of steps: $out"
[[ "$out" == *"budget 120s, batch 32"* ]] || fail "--dry-run: no budget line: $out"
grep -q '^step: plan vgg16 bf16 nhwc cap=64 .*ucudnn plan .*--dtype bf16 --layout nhwc --workspace 64MiB' \
  <<<"$out" || fail "--dry-run: no cold plan of vgg16 bf16: $out"
grep -q '^step: example alexnet fp32 nchw cap=256 .*--limits-mib 256 --total-budget-mib 0' \
  <<<"$out" || fail "--dry-run: no example at 256 MiB: $out"
grep -q '^step: torch alexnet fp32 nchw cap=256 .*CUDNN_CONV_WSCAP_DBG=256 .*torch_peer.py' \
  <<<"$out" || fail "--dry-run: no capped PyTorch run: $out"
grep -q '^step: torch vgg16 bf16 nhwc cap=null .*env -u CUDNN_CONV_WSCAP_DBG' <<<"$out" ||
  fail "--dry-run: no unlimited PyTorch run: $out"
# --peer-cap memory: the capped PyTorch runs limit the process's memory instead; both: both runs.
out="$(bash "$bench" --dry-run --networks alexnet --precisions fp32:nchw --caps 64 --peer-cap memory)"
grep -q '^step: torch_mem alexnet fp32 nchw cap=64 .*env -u CUDNN_CONV_WSCAP_DBG .*torch_peer.py .*--memory-headroom-mib 64' \
  <<<"$out" || fail "--peer-cap memory: no memory-capped PyTorch run: $out"
grep -q '^step: torch alexnet fp32 nchw cap=64 .*CUDNN_CONV_WSCAP_DBG=64' <<<"$out" &&
  fail "--peer-cap memory: a CUDNN_CONV_WSCAP_DBG run: $out"
out="$(bash "$bench" --dry-run --networks alexnet --precisions fp32:nchw --caps 64 --peer-cap both)"
[ "$(grep -c '^step: torch' <<<"$out")" -eq 3 ] || fail "--peer-cap both: wscap, memory, unlimited: $out"

# The table from fake outputs: resnet50 fp32 at 64 MiB complete; at 256 MiB the example was
# skipped for the budget and PyTorch failed.
runs="$tmp/runs"
mkdir -p "$runs"
cat >"$runs/manifest.jsonl" <<'JSON'
{"kind": "plan", "network": "resnet50", "dtype": "fp32", "layout": "nchw", "cap_mib": 64, "status": "ok", "seconds": 41.5, "file": "plan.txt", "reason": "exit 0"}
{"kind": "example", "network": "resnet50", "dtype": "fp32", "layout": "nchw", "cap_mib": 64, "status": "ok", "seconds": 30, "file": "example64.json", "reason": "exit 0"}
{"kind": "torch", "network": "resnet50", "dtype": "fp32", "layout": "nchw", "cap_mib": 64, "status": "ok", "seconds": 20, "file": "torch64.json", "reason": "exit 0"}
{"kind": "torch_mem", "network": "resnet50", "dtype": "fp32", "layout": "nchw", "cap_mib": 64, "status": "ok", "seconds": 20, "file": "torch_mem64.json", "reason": "exit 0"}
{"kind": "example", "network": "resnet50", "dtype": "fp32", "layout": "nchw", "cap_mib": 256, "status": "skipped", "seconds": 0, "file": "", "reason": "budget: 12s left, needs 40s"}
{"kind": "torch", "network": "resnet50", "dtype": "fp32", "layout": "nchw", "cap_mib": 256, "status": "failed", "seconds": 3, "file": "torch256.json", "reason": "exit 1"}
{"kind": "torch", "network": "resnet50", "dtype": "fp32", "layout": "nchw", "cap_mib": null, "status": "ok", "seconds": 20, "file": "torch_unlimited.json", "reason": "exit 0"}
JSON
echo "Plan: ..." >"$runs/plan.txt"
cat >"$runs/example64.json" <<'JSON'
{"network": "resnet50", "results": [
  {"workspace_mode": "per_kernel", "workspace_bytes": 8388608, "without_library_ms": 300.0, "with_library_ms": 100.0},
  {"workspace_mode": "per_kernel", "workspace_bytes": 67108864, "without_library_ms": 237.5, "with_library_ms": 74.2}]}
JSON
printf 'cudnn log line\n{"step_ms_median": 69.4, "wscap_mib": "64", "memory_headroom_mib": null, "max_kernel_workspace_mib": 931.4}\n' >"$runs/torch64.json"
echo '{"step_ms_median": 70.0, "wscap_mib": "unlimited"}' >"$runs/torch_unlimited.json"
echo '{"step_ms_median": 81.62, "memory_headroom_mib": 64, "max_kernel_workspace_mib": 60.5}' >"$runs/torch_mem64.json"
python3 "$table" --runs "$runs" --json "$tmp/t.json" --markdown "$tmp/t.md" --budget-s 300 ||
  fail "peer_table.py failed"
python3 - "$tmp/t.json" <<'PY' || fail "peer_table.py's JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
rows = doc["rows"]
assert [(r["cap_mib"]) for r in rows] == [64, 256], rows
a, b = rows
assert a["legacy_ms"] == 237.5 and a["ucudnn_ms"] == 74.2 and a["torch_ms"] == 69.4, a
assert abs(a["torch_over_ucudnn"] - 69.4 / 74.2) < 1e-12, a
assert abs(a["legacy_over_ucudnn"] - 237.5 / 74.2) < 1e-12, a
assert abs(a["ucudnn_over_floor"] - 74.2 / 70.0) < 1e-12, a
assert a["cold_plan_s"] == 41.5 and a["missing"] == {}, a
assert a["torch_max_workspace_mib"] == 931.4 and a["torch_mem_max_workspace_mib"] == 60.5, a
assert a["torch_mem_ms"] == 81.62 and abs(a["torch_mem_over_ucudnn"] - 81.62 / 74.2) < 1e-12, a
assert b["torch_max_workspace_mib"] is None and b["torch_mem_ms"] is None, b
assert "torch_mem_ms" not in b["missing"], b  # not asked for at 256 MiB
assert b["ucudnn_ms"] is None and b["torch_ms"] is None and b["torch_unlimited_ms"] == 70.0, b
assert b["missing"]["ucudnn_ms"].startswith("skipped: budget"), b
assert b["missing"]["torch_ms"] == "failed (exit 1)", b
assert len(doc["steps"]) == 7 and doc["budget_s"] == 300
PY
md="$(cat "$tmp/t.md")"
[[ "$md" == *"| resnet50 | fp32 nchw | 64 | 41.5 | 237.50 | 74.20 | 69.40 | 70.00 | 0.94x | 3.20x | 1.060 | n/a | n/a | 931 | 81.62 | 1.10x | 60 |"* ]] ||
  fail "markdown row at 64 MiB: $md"
[[ "$md" == *"| resnet50 | fp32 nchw | 256 | 41.5 | n/a | n/a | n/a | 70.00 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"* ]] ||
  fail "markdown row at 256 MiB: $md"
[[ "$md" == *"Skipped to keep within the budget of 300 s:"*"- example resnet50 fp32 nchw 256 MiB: budget: 12s left, needs 40s"* ]] ||
  fail "markdown skipped list: $md"

# A broken manifest is a clear error, not a traceback.
echo "not json" >"$runs/manifest.jsonl"
err="$(python3 "$table" --runs "$runs" --json "$tmp/t.json" --markdown "$tmp/t.md" 2>&1)"
rc=$?
[ "$rc" -eq 1 ] || fail "broken manifest: exit $rc"
[[ "$err" == *"manifest.jsonl line 1: not JSON"* ]] || fail "broken manifest: $err"

[ "$failures" -eq 0 ] && echo "peer_bench: all checks passed"
[ "$failures" -eq 0 ]
