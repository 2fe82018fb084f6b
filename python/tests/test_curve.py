"""The step's time-memory curve (issue 21, item 4): ucudnn.curve's points, Pareto marks and
drawings on recorded profiles (pure, no torch), ucudnn.torch.step_curve() on the CPU with
stand-in plans, and a profile as a file through `python -m ucudnn curve` (ucudnn.profile)."""

import itertools
import json
import os
import subprocess
import sys
import tempfile
import unittest

import support  # noqa: F401  (python/ on the path)
from ucudnn import curve

MIB = 1 << 20


def recorded_profile():
    """A step whose peak (360 MiB) is in the backward pass; kernel "a0" runs twice."""
    return {"base": 0, "calls": [
        ("a0", 100 * MIB, 50 * MIB),
        ("b0", 150 * MIB, 50 * MIB),
        ("b1", 300 * MIB, 60 * MIB),
        ("b2", 300 * MIB, 1 * MIB),
        ("a2", 200 * MIB, 1 * MIB),
        ("a0", 340 * MIB, 10 * MIB),
    ]}


def front_plan(key, limit):
    """A kernel's plan at `limit`: the DP's shape, 1 ms with no workspace, halving per 64 MiB
    used (at most 256 MiB), workspace what it uses; "b2" is PyTorch's own at 0.3 ms."""
    if key == "b2":
        return "framework", 0.3, 0
    used = min(limit, 256 * MIB) // (64 * MIB) * (64 * MIB)
    return "planned", 1.0 / (1 << (used // (64 * MIB))), used


class AbovePeakWithinTest(unittest.TestCase):
    def test_lowered_only_where_the_process_may_not_take_it(self):
        profile = recorded_profile()  # peak without workspace: 360 MiB
        self.assertEqual(curve.above_peak_within(profile, 64 * MIB, None), 64 * MIB)
        self.assertEqual(curve.above_peak_within(profile, 64 * MIB, 1024 * MIB), 64 * MIB)
        self.assertEqual(curve.above_peak_within(profile, 64 * MIB, 400 * MIB), 40 * MIB)
        self.assertEqual(curve.above_peak_within(profile, 64 * MIB, 360 * MIB), 0)
        self.assertEqual(curve.above_peak_within(profile, 64 * MIB, 100 * MIB), 0,
                         "a step over the allowance already: each kernel its headroom only")


class CurvePointsTest(unittest.TestCase):
    def points(self, budgets=curve.DEFAULT_BUDGETS, plan=front_plan):
        profile = recorded_profile()

        def limits_of(budget):
            above = curve.UNLIMITED_BYTES if budget is None else budget
            return curve.liveness_limits(profile, above)
        return curve.curve_points(profile, budgets, limits_of, plan)

    def test_monotone_and_within_the_budget(self):
        points = self.points()
        self.assertEqual(len(points), len(curve.DEFAULT_BUDGETS))
        times = [p["predicted_ms"] for p in points]
        self.assertEqual(times, sorted(times, reverse=True), "more memory is never slower")
        peaks = [p["peak_bytes"] for p in points]
        self.assertEqual(peaks, sorted(peaks), "more budget never lowers the peak")
        base = curve.base_peak(recorded_profile())
        self.assertEqual(base, 360 * MIB)
        for p in points:
            if p["budget_bytes"] is not None:
                self.assertLessEqual(p["peak_bytes"], base + p["budget_bytes"],
                                     "a point's peak stays within its budget")
            # Every call counted, a0 twice: 5 plans and b2 PyTorch's own.
            self.assertEqual((p["ucudnn_calls"], p["framework_calls"]), (5, 1))
            self.assertTrue(p["complete"])

    def test_no_budget_and_unlimited(self):
        first, last = self.points()[0], self.points()[-1]
        # No budget: a0 (10 MiB headroom at its second call), b1 (at the peak) run with none;
        # b0 has 160 MiB (128 MiB as a power of two: 2 x 64 MiB used), a2 159 MiB (128: 2).
        self.assertAlmostEqual(first["predicted_ms"], 1 + 0.25 + 1 + 0.3 + 0.25 + 1)
        self.assertEqual(first["peak_bytes"], 360 * MIB, "the peak without workspace")
        self.assertAlmostEqual(last["predicted_ms"], 5 * 1 / 16 + 0.3)
        self.assertIsNone(last["budget_bytes"])

    def test_pareto_marks(self):
        points = self.points()
        front = [p for p in points if p["pareto"]]
        self.assertTrue(points[0]["pareto"], "the smallest peak is on the curve")
        for a, b in zip(front, front[1:]):
            self.assertLess(b["predicted_ms"], a["predicted_ms"])
            self.assertGreater(b["peak_bytes"], a["peak_bytes"])
        for p in points:
            if not p["pareto"]:
                self.assertTrue(any(q["peak_bytes"] <= p["peak_bytes"] and
                                    q["predicted_ms"] <= p["predicted_ms"] for q in front),
                                "a point off the curve is dominated by one on it")

    def test_a_kernel_without_plan_makes_the_point_incomplete(self):
        def plan(key, limit):
            return ("waiting", 0.0, 0) if key == "b1" and limit > 64 * MIB else front_plan(
                key, limit)
        points = self.points(plan=plan)
        self.assertTrue(points[0]["complete"])
        self.assertFalse(points[-1]["complete"])
        self.assertFalse(points[-1]["pareto"])

    def test_table_and_svg(self):
        result = {"points": self.points(), "native": {"peak_bytes": 500 * MIB, "conv_ms": 0.9}}
        table = curve.format_table(result)
        self.assertIn("| 0 | 360 | 3.800 | 5 | 1 | yes |", table)
        self.assertIn("| unlimited |", table)
        self.assertIn("| native | 500 | 0.900 |", table)
        svg = curve.format_svg(result, "ResNet <50>")
        self.assertTrue(svg.startswith("<svg") and svg.rstrip().endswith("</svg>"))
        self.assertIn("ResNet &lt;50&gt;", svg, "the title escaped")
        self.assertIn("native", svg)
        self.assertIn("polyline", svg)
        empty = curve.format_svg({"points": [], "native": None}, "none")
        self.assertIn("no complete point", empty)


class StepCurveTest(unittest.TestCase):
    def test_through_the_adapter_with_stand_in_plans(self):
        import torch
        from torch import nn
        from unittest import mock
        import ucudnn.torch as ut
        from ucudnn import _lib
        from ucudnn.torch.conv import shape_key

        torch.manual_seed(51)
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                         nn.Conv2d(4, 6, 3)), server="", cache_path="off")
        x = torch.randn(4, 3, 9, 9)
        readings = itertools.count(MIB, 16 * MIB)
        profile = ut.memory_profile(model, x, reader=lambda: next(readings))
        asked = {}
        handles = {}
        real_kernel = _lib.Context.kernel

        def kernel(context, shape, limit=0):
            handle = real_kernel(context, shape, limit)
            asked[handle] = limit
            handles[(shape_key(shape), limit)] = handle
            return handle

        def info(context, handle):
            limit = asked[handle]
            used = min(limit, 256 * MIB)
            return {"state": "planned", "segments": 1, "predicted_ms": 1.0 - used / (512 * MIB),
                    "framework_ms": 0.0, "undivided_ms": 1.0, "workspace_bytes": used}

        with mock.patch.object(_lib.Context, "kernel", autospec=True, side_effect=kernel), \
                mock.patch.object(_lib.Context, "kernel_info", autospec=True, side_effect=info):
            result = ut.step_curve(model, x, profile=profile, budgets=[0, 64 * MIB, None],
                                   wait_ms=10, native={"peak_bytes": 1, "conv_ms": 2.0})
        self.assertEqual(result["base_peak_bytes"], curve.base_peak(profile))
        times = [p["predicted_ms"] for p in result["points"]]
        self.assertEqual(times, sorted(times, reverse=True))
        # Layer 1: forward and backward-filter (x needs no gradient); layer 2: all three.
        self.assertEqual([p["ucudnn_calls"] for p in result["points"]], [5, 5, 5])
        self.assertEqual(max(asked.values()), curve.UNLIMITED_BYTES, "unlimited: 1 TiB each")
        # Each kernel at each limit is a kernel of its own, planned at that limit (one handle for
        # all limits made every point of the curve the first limit's).
        self.assertGreater(len({limit for _, limit in handles}), 1)
        self.assertEqual(len(set(handles.values())), len(handles))
        self.assertEqual(result["native"]["conv_ms"], 2.0)
        with self.assertRaisesRegex(ValueError, "a budget is bytes >= 0 or None"):
            ut.step_curve(model, x, profile=profile, budgets=[-1])
        total = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off",
                           workspace_mode="total")
        with self.assertRaisesRegex(ValueError, "needs workspace_mode='per_kernel'"):
            ut.step_curve(total, x, profile=profile)


def shape_profile():
    """recorded_profile() with real kernels: 3x3 convolutions of fp32 NCHW at batch 4."""
    from ucudnn import _lib
    shapes = {}
    for key, channels, op in (("a0", 3, _lib.FORWARD), ("b0", 4, _lib.BACKWARD_DATA),
                              ("b1", 4, _lib.BACKWARD_FILTER), ("b2", 6, _lib.FORWARD),
                              ("a2", 6, _lib.BACKWARD_DATA)):
        shape = _lib.ConvShape(op, 4, channels, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1,
                               _lib.FLOAT, _lib.NCHW, _lib.MATH_DEFAULT)
        shapes[key] = tuple(getattr(shape, name) for name, _ in _lib.ConvShape._fields_)
    recorded = recorded_profile()
    return {"base": 7, "calls": [(shapes[key], in_use, output)
                                 for key, in_use, output in recorded["calls"]]}


class ProfileFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name, document=None):
        path = os.path.join(self.dir.name, name)
        if document is not None:
            with open(path, "w") as f:
                f.write(document if isinstance(document, str) else json.dumps(document))
        return path

    def test_round_trip(self):
        from ucudnn import profile as uprofile
        profile = shape_profile()
        path = self.path("step.json")
        uprofile.save(profile, path, backend="cpu", framework="torch-x/benchmark")
        loaded, backend, framework = uprofile.load(path)
        self.assertEqual(loaded, profile)
        self.assertEqual((backend, framework), ("cpu", "torch-x/benchmark"))
        with self.assertRaisesRegex(ValueError, "backend must be one of"):
            uprofile.save(profile, path, backend="rocm")

    def test_what_is_wrong_with_a_file_is_named(self):
        from ucudnn import profile as uprofile
        good = {"format": "ucudnn-memory-profile", "version": 1, "backend": "cpu", "base": 0,
                "calls": [[list(shape_profile()["calls"][0][0]), 1, 2]]}
        for document, message in (
                ("{", "not a readable JSON memory profile"),
                ({"format": "other"}, "not a ucudnn memory profile"),
                (dict(good, version=2), "version 2; this ucudnn reads version 1"),
                (dict(good, backend="tpu"), "\"backend\" must be one of"),
                (dict(good, calls=[[[1, 2], 1, 2]]), "calls\\[0\\] is not"),
                (dict(good, calls=[[good["calls"][0][0], -1, 2]]), "calls\\[0\\] is not"),
                (dict(good, calls=[]), "no convolution calls")):
            with self.subTest(message=message), self.assertRaisesRegex(uprofile.ProfileError,
                                                                       message):
                uprofile.load(self.path("bad.json", document))
        with self.assertRaisesRegex(uprofile.ProfileError, "not a readable JSON"):
            uprofile.load(self.path("missing.json"))

    def run_cli(self, *argv):
        env = dict(os.environ, UCUDNN_LOG_LEVEL="error",
                   PYTHONPATH=os.path.dirname(os.path.dirname(curve.__file__)))
        return subprocess.run([sys.executable, "-m", "ucudnn", "curve", *argv], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def test_the_command_line_without_a_planner(self):
        import support
        from ucudnn import profile as uprofile
        path = self.path("step.json")
        uprofile.save(shape_profile(), path, backend="cpu")
        out, svg = self.path("curve.json"), self.path("curve.svg")
        run = self.run_cli(path, "--server", f"127.0.0.1:{support.closed_port()}",
                           "--wait-s", "0.2", "--budgets-mib", "0,64,unlimited",
                           "--native-peak-mib", "400", "--native-ms", "3", "--json", out,
                           "--svg", svg)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(out) as f:
            result = json.load(f)
        # No planner: every point is incomplete, each budget has its point.
        self.assertEqual([p["budget_bytes"] for p in result["points"]], [0, 64 * MIB, None])
        self.assertFalse(any(p["complete"] for p in result["points"]))
        self.assertEqual(result["base_peak_bytes"], 360 * MIB)
        self.assertEqual(result["native"], {"peak_bytes": 400 * MIB, "conv_ms": 3.0})
        self.assertIn("| unlimited |", run.stdout)
        with open(svg) as f:
            self.assertTrue(f.read().startswith("<svg"))

    def test_bad_input_exits_2_with_the_reason(self):
        run = self.run_cli(self.path("bad.json", {"format": "other"}))
        self.assertEqual(run.returncode, 2)
        self.assertIn("not a ucudnn memory profile", run.stderr)
        run = self.run_cli(self.path("x.json"), "--budgets-mib", "0,lots")
        self.assertEqual(run.returncode, 2)
        self.assertIn("'lots' is not MiB or 'unlimited'", run.stderr)
        run = self.run_cli(self.path("x.json"), "--native-ms", "3")
        self.assertEqual(run.returncode, 2)
        self.assertIn("go together", run.stderr)


if __name__ == "__main__":
    unittest.main()
