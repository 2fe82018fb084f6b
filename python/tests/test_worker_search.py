"""bench/worker_search.py (issue 40's worker search, gathered from scripts/gpu_search.sh's runs):
what it computes from a runs directory, and that a part not run is absent, not invented."""

import json
import os
import tempfile
import unittest

import support  # noqa: F401  (bench/ on the path)
import worker_search


def write(directory, name, content):
    with open(os.path.join(directory, name), "w") as f:
        if isinstance(content, str):
            f.write(content)
        else:
            json.dump(content, f)


def summary(done, queued, span, busy):
    return {"jobs_done": done, "jobs_failed": 0, "jobs_queued": queued, "worker_busy_s": busy,
            "first_queued_to_last_done_s": span, "timings_ok": 10 * done, "timings_failed": 0,
            "wrong_results": 0, "wrong_result_examples": []}


class CollectTest(unittest.TestCase):
    def collect(self, runs):
        out = os.path.join(runs, "search.json")
        self.assertEqual(worker_search.main(["collect", "--runs-dir", runs, "--out", out]), 0)
        with open(out) as f:
            return json.load(f)

    def test_each_part_from_its_runs(self):
        with tempfile.TemporaryDirectory() as runs:
            write(runs, "offline_pruned.json", {"search": "pruned", "spec": "resnet50:fp16:nhwc:256",
                                                "wall_s": 12.5, "csv": "p.csv"})
            write(runs, "offline_pruned.log",
                  "[info] offline: wrote /o/p.csv (69 problems, 4000 timings, 3990 ok) in 12.4 s")
            # A model whose name has an underscore: the row is MODEL:PRECISION again.
            write(runs, "know_efficientnet_b0_amp.summary.json", summary(40, 0, 31.5, 29.0))
            write(runs, "efficientnet_b0_amp_warm.json",
                  {"batch": 128, "prepare_s": 33.0, "device_name": "NVIDIA H200",
                   "cudnn_version": 91900, "torch": "2.11.0"})
            write(runs, "know_resnet50_amp.summary.json", summary(60, 9, 120.0, 118.0))
            # The runs issued are counted where the line says them (an older worker's does not).
            write(runs, "know_efficientnet_b0_amp.worker.log", "".join(
                f"[info] benchmarked v1;op=fwd;c={c} on NVIDIA H200 (cudnn): 40 configurations, "
                f"{total} s (prepare 40 ms on 8 threads, queries 10 ms, operands 5 ms, result "
                f"checks {checks} ms (references {ref} ms), probes 90 ms{probe_runs}, "
                f"measurements 100 ms{measurement_runs})\n"
                for c, total, checks, ref, probe_runs, measurement_runs in (
                    (3, 0.5, 250, 50, " (1000 runs)", " (50 runs)"), (8, 0.3, 50, 25, "", "")))
                + "[info] something else\n")
            for job, side, ms in ((1, "with", 60.0), (1, "without", 50.0), (2, "with", 66.0),
                                  (2, "without", 60.0)):
                write(runs, f"gate_{job}_{side}.worker.json",
                      {"job": job, "worker": side == "with", "benchmark_jobs_done": 3,
                       "pauses": 1})
                write(runs, f"gate_{job}_{side}.json",
                      {"median_step_ms": ms, "steady_spread_ms": 1.0,
                       "time_to_first_fast_step_s": 5.0})
            result = self.collect(runs)
        self.assertEqual(result["device"]["name"], "NVIDIA H200")
        (pruned,) = result["offline"]
        self.assertEqual((pruned["problems"], pruned["timings"], pruned["wall_s"]),
                         (69, 4000, 12.5))
        know = {row["row"]: row for row in result["know"]}
        self.assertEqual(set(know), {"efficientnet_b0:amp", "resnet50:amp"})
        self.assertTrue(know["efficientnet_b0:amp"]["complete"])
        self.assertEqual(know["efficientnet_b0:amp"]["time_to_know_s"], 31.5)
        self.assertEqual(know["efficientnet_b0:amp"]["batch"], 128)
        self.assertEqual(know["efficientnet_b0:amp"]["phases_s"],
                         {"problems": 2, "total": 0.8, "prepare": 0.08, "queries": 0.02,
                          "operands": 0.01, "result_checks": 0.3, "references": 0.08,
                          "probes": 0.18, "measurements": 0.2, "probe_runs": 1000,
                          "measurement_runs": 50})
        self.assertIsNone(know["resnet50:amp"]["phases_s"])
        # Jobs left when the cap came: not known, whatever the span says.
        self.assertFalse(know["resnet50:amp"]["complete"])
        self.assertEqual(know["resnet50:amp"]["job_error"], "no run JSON (runs.log)")
        gate = result["gate"]
        self.assertEqual([(j["job"], j["worker"]) for j in gate["jobs"]],
                         [(1, True), (1, False), (2, True), (2, False)])
        self.assertAlmostEqual(gate["median_with_ms"], 63.0)
        self.assertAlmostEqual(gate["median_without_ms"], 55.0)
        self.assertAlmostEqual(gate["with_over_without"], 63.0 / 55.0)

    def test_parts_not_run_are_absent(self):
        with tempfile.TemporaryDirectory() as runs:
            result = self.collect(runs)
        self.assertEqual((result["offline"], result["know"], result["gate"], result["device"]),
                         ([], [], None, None))


if __name__ == "__main__":
    unittest.main()


class PlansTest(unittest.TestCase):
    """`plans`: two searches' plans of the same problems, timed with the reference's medians."""

    def write_csv(self, directory, name, rows):
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write("canonical_key,micro_batch,algo,status,time_ms,workspace_bytes,error\n")
            for problem, size, algo, ms, workspace in rows:
                f.write(f"{problem},{size},{algo},ok,{ms},{workspace},\n")
        return path

    def test_a_plan_is_timed_with_the_reference_medians(self):
        reference = [("p", 1, "a", 1.0, 0), ("p", 2, "a", 1.5, 0), ("p", 4, "a", 4.0, 0),
                     ("p", 4, "big", 2.0, 1 << 30), ("p", 4, "wide", 2.5, 2 << 20)]
        # The search left out "wide" at 4 and measured "a" a little faster there: its plan under
        # 8 MiB is two micro-batches of 2 (3.0 ms by either table), where the reference's is
        # "wide" at 4 (2.5 ms).
        search = [row for row in reference if row[2] != "wide"] + [("q", 1, "a", 1.0, 0)]
        search[1] = ("p", 2, "a", 1.4, 0)
        with tempfile.TemporaryDirectory() as d:
            ours = worker_search.read_timings(self.write_csv(d, "s.csv", search))
            theirs = worker_search.read_timings(self.write_csv(d, "r.csv", reference))
        rows = worker_search.compare_plans(ours, theirs, [8 << 20, 1 << 30])
        self.assertEqual(rows[0]["problems"], 1)  # "q" is not in the reference
        self.assertEqual(rows[0]["reference_plans_ms"], 2.5)
        self.assertEqual(rows[0]["search_plans_ms"], 3.0)  # 2 x 1.5, the reference's median
        self.assertAlmostEqual(rows[0]["search_vs_reference"], 0.2)
        # Under 1 GiB both plans run "big" at 4.
        self.assertEqual(rows[1]["search_vs_reference"], 0.0)
        self.assertEqual(rows[1]["entries_not_in_reference"], 0)

    def test_a_plan_composes_the_sizes_measured(self):
        sizes = {1: [("a", 1.0, 0)], 2: [("a", 3.0, 0)], 4: [("a", 3.5, 0)]}
        self.assertEqual(worker_search.plan(sizes, 0), [(4, "a", 3.5)])
        sizes[4] = [("a", 4.5, 0)]
        self.assertEqual(sorted(worker_search.plan(sizes, 0)), [(1, "a", 1.0)] * 4)
        self.assertIsNone(worker_search.plan({1: [("a", 1.0, 1 << 20)]}, 0))
        # A total given: 8 samples from these sizes (one of 4 and four of 1, or two of 4).
        self.assertEqual(sorted(worker_search.plan(sizes, 0, 8)), [(1, "a", 1.0)] * 8)

    def test_both_plans_are_for_the_largest_size_either_search_measured(self):
        # The search measured nothing at 4 (every entry skipped): its plan composes 4 from 2s,
        # timed with the reference's medians, not a plan of 2 against one of 4.
        reference = [("p", 2, "a", 1.0, 0), ("p", 4, "a", 1.5, 0)]
        search = [("p", 2, "a", 1.0, 0)]
        with tempfile.TemporaryDirectory() as d:
            ours = worker_search.read_timings(self.write_csv(d, "s.csv", search))
            theirs = worker_search.read_timings(self.write_csv(d, "r.csv", reference))
        (row,) = worker_search.compare_plans(ours, theirs, [1 << 30])
        self.assertEqual((row["search_plans_ms"], row["reference_plans_ms"]), (2.0, 1.5))
