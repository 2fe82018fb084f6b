#!/usr/bin/env bash
# Regenerates the seed corpora under fuzz/corpus/ from the text-format messages in fuzz/seeds/
# (protoc --encode) and frames the plan-cache seeds like the client library's cache file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto=$here/../proto
encode() { protoc --proto_path="$proto" --encode="ucudnn.v1.$1" ucudnn/v1/ucudnn.proto <"$2"; }
rm -rf "$here/corpus"
mkdir -p "$here/corpus/plan_request_fuzzer" "$here/corpus/plan_decode_fuzzer" \
  "$here/corpus/plan_cache_fuzzer" "$here/corpus/compiled_plan_fuzzer" \
  "$here/corpus/rpc_request_fuzzer"
for seed in request_valid request_gpu_total request_invalid; do
  encode GetPlanRequest "$here/seeds/$seed.txtpb" >"$here/corpus/plan_request_fuzzer/$seed"
done
encode Timing "$here/seeds/timing.txtpb" >"$here/corpus/plan_request_fuzzer/timing"
# rpc_request_fuzzer: byte 0 is the method (the order of kMethods in rpc_request_fuzzer.cc),
# byte 1 the length of the authorization value that follows, then the request.
rpc() {  # METHOD_INDEX TYPE NAME AUTHORIZATION < text-format request
  local out=$here/corpus/rpc_request_fuzzer/$3
  printf "\\$(printf %03o "$1")\\$(printf %03o "${#4}")%s" "$4" >"$out"
  protoc --proto_path="$proto" --encode="ucudnn.v1.$2" ucudnn/v1/ucudnn.proto >>"$out"
}
for seed in request_valid request_gpu_total request_invalid; do
  rpc 0 GetPlanRequest "get_plan_$seed" "" <"$here/seeds/$seed.txtpb"
done
{ echo "request {"; cat "$here/seeds/request_valid.txtpb"; echo "}"; } |
  rpc 1 StreamPlanRequest stream_plan "Bearer plan-token"
rpc 2 ListDevicesRequest list_devices "" </dev/null
rpc 3 ListWorkersRequest list_workers "bearer read-token" <"$here/seeds/rpc_list_workers.txtpb"
rpc 4 ListJobsRequest list_jobs "" <"$here/seeds/rpc_list_jobs.txtpb"
rpc 4 ListJobsRequest list_jobs_invalid "Basic x" <"$here/seeds/rpc_list_jobs_invalid.txtpb"
rpc 5 GetTimingsRequest get_timings "" <"$here/seeds/rpc_get_timings.txtpb"
rpc 6 GetParetoFrontRequest get_pareto_front "" <"$here/seeds/rpc_get_pareto_front.txtpb"
{ echo "request {"; cat "$here/seeds/request_gpu_total.txtpb"; echo "}"; } |
  rpc 7 ExplainPlanRequest explain_plan ""
rpc 8 RetryJobRequest retry_job "Bearer admin-token" <"$here/seeds/rpc_retry_job.txtpb"
rpc 8 RetryJobRequest retry_job_invalid "" <"$here/seeds/rpc_retry_job_invalid.txtpb"
rpc 9 CancelJobsRequest cancel_jobs "Bearer admin-token" <"$here/seeds/rpc_cancel_jobs.txtpb"
rpc 9 CancelJobsRequest cancel_jobs_invalid "" <"$here/seeds/rpc_cancel_jobs_invalid.txtpb"
rpc 10 SubmitTimingsRequest submit_timings "Bearer submit-token" \
  <"$here/seeds/rpc_submit_timings.txtpb"
rpc 10 SubmitTimingsRequest submit_timings_invalid "" \
  <"$here/seeds/rpc_submit_timings_invalid.txtpb"
for seed in plan_complete plan_partial; do
  encode GetPlanResponse "$here/seeds/$seed.txtpb" >"$here/corpus/plan_decode_fuzzer/$seed"
done
# A cache record is a Plan (field 1 of the GetPlanResponse seeds).
python3 - "$here" <<'PY'
import os, struct, subprocess, sys
here = sys.argv[1]
proto = os.path.join(here, "..", "proto")
def encode(kind, text):
    return subprocess.run(["protoc", "--proto_path=" + proto, "--encode=ucudnn.v1." + kind,
                           "ucudnn/v1/ucudnn.proto"], input=text.encode(), capture_output=True,
                          check=True).stdout
def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h
complete = open(os.path.join(here, "seeds", "plan_complete.txtpb")).read()
body = complete[complete.index("{") + 1:complete.rindex("}")]  # the Plan inside
record = encode("Plan", body)
payload = struct.pack("<I", len(record)) + record
out = os.path.join(here, "corpus", "plan_cache_fuzzer")
# The fuzzer frames inputs starting with an even byte itself; odd ones are whole files.
open(os.path.join(out, "payload_one_record"), "wb").write(b"\x00" + payload)
open(os.path.join(out, "payload_two_records"), "wb").write(b"\x02" + payload + payload)
header = b"ucudnn-plan-cache 1\n" + struct.pack("<QQ", len(payload), fnv1a64(payload))
open(os.path.join(out, "file_one_record"), "wb").write(b"\x01" + header + payload)
open(os.path.join(out, "file_bad_checksum"), "wb").write(
    b"\x01" + header[:-1] + bytes([header[-1] ^ 1]) + payload)
# compiled_plan_fuzzer: odd first byte, the rest is a payload it encodes; even, a whole file for
# the fuzzer's key (compiled_plan_fuzzer.cc).
key = b"v2;backend=cudnn;name=GPU|v1;op=fwd;c=8|4|0|e=5"
plan = b'{"version": "9.19.0", "engine": 5, "knobs": [1, 2]}'
file = (b"ucudnn-compiled-plan 1\n" + key + b"\n" + str(len(plan)).encode() + b" " +
        b"%016x" % fnv1a64(plan) + b"\n" + plan)
out = os.path.join(here, "corpus", "compiled_plan_fuzzer")
open(os.path.join(out, "payload"), "wb").write(b"\x01" + plan)
open(os.path.join(out, "file_valid"), "wb").write(b"\x00" + file)
open(os.path.join(out, "file_other_key"), "wb").write(b"\x00" + file.replace(b"c=8", b"c=9"))
PY
ls -l "$here"/corpus/*
