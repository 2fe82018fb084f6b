#!/usr/bin/env python3
"""The worker's search on a GPU (issue 40), gathered from scripts/gpu_search.sh's runs into one
JSON: the offline benchmark's seconds pruned and exhaustive, each model's time to know on a cold
cluster, and native jobs' steps with the idle-gated worker running and stopped.

    python3 bench/worker_search.py collect --runs-dir DIR --out search.json
    python3 bench/worker_search.py plans --search A.timings.csv.gz --reference B.timings.csv.gz

`plans` compares two searches of the same problems (gpu_search.sh --know writes each run's
timings): per workspace limit, every problem's plan from each table (the fastest composition of
micro-batches, each size's fastest configuration within the limit, dp.h's model), both timed with
the reference table's medians, summed over the problems. A plan entry the reference did not
measure keeps the search's own time (counted in "entries_not_in_reference").

No PyTorch and no GPU needed: it reads what the runs wrote.

JSON: {"device", "offline": [{"search", "spec", "wall_s", "csv", "problems", "timings"}],
"know": [{"row", "time_to_know_s" (first benchmark job queued to last done), "worker_busy_s",
"jobs_done", "jobs_failed", "jobs_queued" (left when the cap came), "complete", "timings_ok",
"wrong_results", "job_prepare_s", "phases_s" (the worker's seconds in each phase, summed over
the problems, from its summary lines)}], "gate": {"jobs": [{"job", "worker", "median_step_ms",
"steady_spread_ms", "benchmark_jobs_done", "pauses"}], "median_with_ms", "median_without_ms",
"with_over_without"}}."""

import argparse
import csv
import glob
import gzip
import json
import os
import re
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def offline_rows(runs_dir):
    rows = []
    for search in ("pruned", "exhaustive"):
        path = os.path.join(runs_dir, f"offline_{search}.json")
        if not os.path.exists(path):
            continue
        row = load(path)
        log_path = os.path.join(runs_dir, f"offline_{search}.log")
        wrote = None
        if os.path.exists(log_path):
            with open(log_path) as f:
                wrote = re.search(r"offline: wrote \S+ \((\d+) problems, (\d+) timings", f.read())
        row["problems"] = int(wrote.group(1)) if wrote else None
        row["timings"] = int(wrote.group(2)) if wrote else None
        rows.append(row)
    return rows


# The worker's summary line of one benchmarked problem (engine/src/benchmark.cc LogSummary).
PHASES = re.compile(
    r"benchmarked .* (?P<total>[\d.]+) s \(prepare (?P<prepare>[\d.]+) ms on \d+ threads, "
    r"queries (?P<queries>[\d.]+) ms, operands (?P<operands>[\d.]+) ms, result checks "
    r"(?P<result_checks>[\d.]+) ms(?: \(references (?P<references>[\d.]+) ms\))?, probes "
    r"(?P<probes>[\d.]+) ms(?: \((?P<probe_runs>\d+) runs\))?, measurements "
    r"(?P<measurements>[\d.]+) ms(?: \((?P<measurement_runs>\d+) runs\))?\)")


def phases(worker_log):
    """Seconds of each phase summed over the problems the worker benchmarked, or None."""
    if not os.path.exists(worker_log):
        return None
    sums, problems = {}, 0
    with open(worker_log, errors="replace") as f:
        for line in f:
            m = PHASES.search(line)
            if not m:
                continue
            problems += 1
            for name, value in m.groupdict().items():
                if value is not None:
                    scale = 1.0 if name == "total" or name.endswith("_runs") else 1e-3
                    sums[name] = sums.get(name, 0.0) + float(value) * scale
    if not problems:
        return None
    return dict({name: round(value, 2) if not name.endswith("_runs") else int(value)
                 for name, value in sums.items()}, problems=problems)


def know_rows(runs_dir):
    rows = []
    for path in sorted(glob.glob(os.path.join(runs_dir, "know_*.summary.json"))):
        tag = os.path.basename(path)[len("know_"):-len(".summary.json")]
        summary = load(path)
        run_path = os.path.join(runs_dir, f"{tag}_warm.json")
        run = load(run_path) if os.path.exists(run_path) else {}
        rows.append({
            "row": ":".join(tag.rsplit("_", 1)),  # MODEL_PRECISION (no precision has a "_")
            "batch": run.get("batch"),
            "time_to_know_s": summary["first_queued_to_last_done_s"],
            "worker_busy_s": summary["worker_busy_s"],
            "jobs_done": summary["jobs_done"],
            "jobs_failed": summary["jobs_failed"],
            "jobs_queued": summary["jobs_queued"],
            "complete": summary["jobs_queued"] == 0 and summary["jobs_done"] > 0,
            "timings_ok": summary["timings_ok"],
            "wrong_results": summary["wrong_results"],
            "job_prepare_s": run.get("prepare_s"),
            "phases_s": phases(os.path.join(runs_dir, f"know_{tag}.worker.log")),
            "job_error": None if run else "no run JSON (runs.log)",
        })
    return rows


def gate_result(runs_dir):
    jobs = []
    for path in sorted(glob.glob(os.path.join(runs_dir, "gate_*.worker.json"))):
        worker = load(path)
        side = "with" if worker["worker"] else "without"
        run_path = os.path.join(runs_dir, f"gate_{worker['job']}_{side}.json")
        run = load(run_path) if os.path.exists(run_path) else {}
        jobs.append(dict(worker, median_step_ms=run.get("median_step_ms"),
                         steady_spread_ms=run.get("steady_spread_ms"),
                         time_to_first_fast_step_s=run.get("time_to_first_fast_step_s")))
    if not jobs:
        return None
    jobs.sort(key=lambda j: (j["job"], not j["worker"]))

    def median_of(with_worker):
        steps = [j["median_step_ms"] for j in jobs
                 if j["worker"] == with_worker and j["median_step_ms"] is not None]
        return statistics.median(steps) if steps else None

    with_ms, without_ms = median_of(True), median_of(False)
    return {"jobs": jobs, "median_with_ms": with_ms, "median_without_ms": without_ms,
            "with_over_without": with_ms / without_ms if with_ms and without_ms else None}


def device_of(runs_dir):
    for path in sorted(glob.glob(os.path.join(runs_dir, "*.json"))):
        try:
            run = load(path)
        except (OSError, ValueError):
            continue
        if isinstance(run, dict) and run.get("device_name"):
            return {"name": run["device_name"], "cudnn": run.get("cudnn_version"),
                    "torch": run.get("torch")}
    return None


def collect(args):
    result = {"device": device_of(args.runs_dir), "offline": offline_rows(args.runs_dir),
              "know": know_rows(args.runs_dir), "gate": gate_result(args.runs_dir)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    for row in result["offline"]:
        print(f"offline {row['search']}: {row['wall_s']:.1f} s, {row['problems']} problems, "
              f"{row['timings']} timings", file=sys.stderr)
    for row in result["know"]:
        print(f"know {row['row']}: {row['time_to_know_s']} s (busy {row['worker_busy_s']} s), "
              f"{row['jobs_done']} jobs done, {row['jobs_queued']} left", file=sys.stderr)
    if result["gate"]:
        print(f"gate: with the worker / without: {result['gate']['with_over_without']}",
              file=sys.stderr)
    return 0


def read_timings(path):
    """{problem: {micro_batch: [(algo, ms, workspace)]}} of a timings CSV (stack_timings_csv's,
    gzipped or not): the ok entries of the search's own configurations (not PyTorch's, -2)."""
    opener = gzip.open if path.endswith(".gz") else open
    tables = {}
    with opener(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if row["status"] != "ok" or row["algo"] == "-2":
                continue
            sizes = tables.setdefault(row["canonical_key"], {})
            sizes.setdefault(int(row["micro_batch"]), []).append(
                (row["algo"], float(row["time_ms"]), int(row["workspace_bytes"])))
    return tables


def plan(sizes, limit, total=None):
    """The fastest composition of `total` samples (default: the problem's largest micro-batch)
    from the sizes measured, each size at its fastest configuration within `limit` bytes:
    [(micro_batch, algo, ms)], or None."""
    best = {}
    for size, entries in sizes.items():
        fitting = [(ms, algo) for algo, ms, workspace in entries if workspace <= limit]
        if fitting:
            best[size] = min(fitting)
    if not best:
        return None
    total = total or max(sizes)
    cost = [0.0] + [float("inf")] * total
    choice = [None] * (total + 1)
    for n in range(1, total + 1):
        for size, (ms, _) in best.items():
            if size <= n and cost[n - size] + ms < cost[n]:
                cost[n], choice[n] = cost[n - size] + ms, size
    if cost[total] == float("inf"):
        return None
    pieces, n = [], total
    while n > 0:
        size = choice[n]
        pieces.append((size, best[size][1], best[size][0]))
        n -= size
    return pieces


def compare_plans(search, reference, limits):
    """Per limit, the summed plan times of the problems both tables hold, each plan timed with
    the reference's medians: {"limit_bytes", "problems", "search_plans_ms", "reference_plans_ms",
    "search_vs_reference", "entries_not_in_reference"}."""
    rows = []
    for limit in limits:
        search_ms = reference_ms = 0.0
        problems = missing = 0
        for problem in sorted(set(search) & set(reference)):
            # Both plans for the same mini-batch: the largest size either search measured (a
            # table whose largest size had nothing run plans a smaller total otherwise).
            total = max(max(search[problem]), max(reference[problem]))
            ours = plan(search[problem], limit, total)
            theirs = plan(reference[problem], limit, total)
            if ours is None or theirs is None:
                continue
            measured = {(size, algo): ms for size, entries in reference[problem].items()
                        for algo, ms, _ in entries}
            problems += 1
            reference_ms += sum(ms for _, _, ms in theirs)
            for size, algo, ms in ours:
                if (size, algo) not in measured:
                    missing += 1
                search_ms += measured.get((size, algo), ms)
        rows.append({"limit_bytes": limit, "problems": problems,
                     "search_plans_ms": round(search_ms, 4),
                     "reference_plans_ms": round(reference_ms, 4),
                     "search_vs_reference": round(search_ms / reference_ms - 1, 5)
                     if reference_ms else None,
                     "entries_not_in_reference": missing})
    return rows


def plans(args):
    rows = compare_plans(read_timings(args.search), read_timings(args.reference),
                         [int(limit) << 20 for limit in args.limits_mib])
    print(json.dumps({"search": args.search, "reference": args.reference, "plans": rows},
                     indent=1))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="gather gpu_search.sh's runs into one JSON")
    c.add_argument("--runs-dir", required=True)
    c.add_argument("--out", required=True)
    p = sub.add_parser("plans", help="two searches' plans, timed with the reference's medians")
    p.add_argument("--search", required=True, help="timings CSV of the search judged")
    p.add_argument("--reference", required=True, help="timings CSV of the search compared with")
    p.add_argument("--limits-mib", type=int, nargs="+", default=[1, 8, 64, 1024],
                   help="workspace limits, MiB")
    args = parser.parse_args(argv)
    return collect(args) if args.command == "collect" else plans(args)


if __name__ == "__main__":
    sys.exit(main())
