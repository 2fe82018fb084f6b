#!/usr/bin/env bash
# Regenerates the seed corpora under fuzz/corpus/ from the text-format messages in fuzz/seeds/
# (protoc --encode) and frames the plan-cache seeds like the client library's cache file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
proto=$here/../proto
encode() { protoc --proto_path="$proto" --encode="ucudnn.v1.$1" ucudnn/v1/ucudnn.proto <"$2"; }
rm -rf "$here/corpus"
mkdir -p "$here/corpus/plan_request_fuzzer" "$here/corpus/plan_decode_fuzzer" \
  "$here/corpus/plan_cache_fuzzer"
for seed in request_valid request_gpu_total request_invalid; do
  encode GetPlanRequest "$here/seeds/$seed.txtpb" >"$here/corpus/plan_request_fuzzer/$seed"
done
encode Timing "$here/seeds/timing.txtpb" >"$here/corpus/plan_request_fuzzer/timing"
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
PY
ls -l "$here"/corpus/*
