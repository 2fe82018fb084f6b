#!/usr/bin/env python3
"""ucudnn-bench-engine --replay-sizes on the measured H100 tables (data/h100): the limit-aware
size rule (core/size_rule.h) keeps a share of every table, never more than all of it, and its
plans are never faster than those from every size (the cut tables are parts of the whole ones,
both timed with the same medians), nor are those at each limit from the tables cut for a
smaller one. Usage: replay_sizes_test.py BENCH_ENGINE DATA_DIR"""

import json
import subprocess
import sys


def main(bench_engine, data_dir):
    out = subprocess.run([bench_engine, "--replay-sizes", "--data-dir", data_dir],
                         check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    networks = report["networks"]
    assert len(networks) == 2, [n["file"] for n in networks]
    for network in networks:
        limits = network["limits"]
        assert [x["workspace_bytes"] for x in limits] == [1 << 20, 8 << 20, 64 << 20, 1 << 30]
        for x in limits:
            for share in ("sizes_kept", "timings_kept", "timed_ms_kept"):
                assert 0 < x[share] <= 1, (network["file"], x)
            assert x["limit_sizes_plan_measured_ms"] >= x["all_sizes_plan_measured_ms"], x
            # Planned from the tables cut for each smaller limit: one entry each, and never
            # faster than from every size (parts of the same tables, the same medians).
            smaller = [c["cut_for_workspace_bytes"] for c in x["from_smaller_limit"]]
            assert smaller == [w for w in (1 << 20, 8 << 20, 64 << 20)
                               if w < x["workspace_bytes"]], x
            for c in x["from_smaller_limit"]:
                assert c["plan_measured_ms"] >= x["all_sizes_plan_measured_ms"], (x, c)
            # The worker's search for the limit, replayed: it ran something, and its plans are
            # no faster than those of every measured size (the medians' optimum).
            assert x["limit_search"]["runs"] > 0 and x["limit_search"]["device_ms"] > 0, x
            assert x["limit_search_plan_vs_all_sizes_measured"] >= -1e-9, x
        assert network["all_sizes_search"]["runs"] > 0, network
        # A larger limit leaves fewer sizes worth splitting into.
        kept = [x["timings_kept"] for x in limits]
        assert kept == sorted(kept, reverse=True), (network["file"], kept)
        # With 256 samples and eight smaller power-of-two sizes, the rule leaves some out.
        assert min(kept) < 0.5, (network["file"], kept)
    print("ok:", ", ".join(f"{n['file']}: {[round(x['timings_kept'], 2) for x in n['limits']]}"
                           for n in networks))


if __name__ == "__main__":
    main(*sys.argv[1:])
