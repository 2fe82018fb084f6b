"""bench/torch_models.py (the real-model benchmark of issue 20) on the CPU: its argument checks
and one whole suite row at toy sizes against a planner that is down, so that the GPU run works
first time and its JSON has the documented shape."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "torch_models.py")
import support  # noqa: E402  (python/ and bench/ on the path; shared helpers)
import host_noise  # noqa: E402  (bench/host_noise.py: where a host-bound step's noise comes from)
import step_memory  # noqa: E402  (bench/step_memory.py, issue 21)
import torch_models  # noqa: E402

ROW_KEYS = {"model", "family", "precision", "compiled", "cap_gib", "batch", "native_ms",
            "converted_ms", "ratio", "native_peak_mib", "converted_peak_mib",
            "native_first_fast_s", "converted_first_fast_s"}


closed_port = support.closed_port


class ArgumentsTest(unittest.TestCase):
    def rejects(self, argv, message):
        support.assert_rejected(self, torch_models.parse_args, argv, message)

    def test_bad_arguments_are_named(self):
        self.rejects(["suite", "--out", "x", "--rows", "resnet50"], "--server")
        self.rejects(["suite", "--server", "h:1", "--out", "x", "--rows", "alexnet:amp"],
                     "unknown model 'alexnet'")
        self.rejects(["suite", "--server", "h:1", "--out", "x", "--rows", "resnet50:fp8"],
                     "precision must be one of")
        self.rejects(["suite", "--server", "h:1", "--out", "x", "--rows", "resnet50:amp:jit"],
                     "compile mode must be one of")
        self.rejects(["suite", "--server", "h:1", "--out", "x", "--rows", "resnet50:amp::low"],
                     "the fourth field is one of ('cap', 'fallback', 'liveness'")
        self.rejects(["run", "--model", "resnet50", "--steps", "3"], "--steps must be >= 4")
        self.rejects(["run", "--model", "resnet50", "--option", "server"], "expected KEY=VALUE")

    def test_wide_stands_for_the_fixed_list(self):
        args = torch_models.parse_args(["suite", "--server", "h:1", "--out", "x", "--rows",
                                        "wide", "vgg16:fp32"])
        self.assertEqual(args.rows, [f"{m}:amp" for m in torch_models.WIDE_ROWS] + ["vgg16:fp32"])
        args = torch_models.parse_args(["warm", "--server", "h:1", "--runs-dir", "x", "--rows",
                                        "wide:fp32"])
        self.assertEqual(args.rows, [f"{m}:fp32" for m in torch_models.WIDE_ROWS])
        # At least 10 families, every model known.
        self.assertGreaterEqual(len({torch_models.MODELS[m][0] for m in torch_models.WIDE_ROWS}),
                                10)
        self.rejects(["suite", "--server", "h:1", "--out", "x", "--rows", "wide:fp8"],
                     "fp8")

    def test_rows_parse(self):
        self.assertEqual(torch_models.parse_row("resnet50"), ("resnet50", "amp", "", ""))
        self.assertEqual(torch_models.parse_row("vgg16:fp32:compile:cap"),
                         ("vgg16", "fp32", "default", "cap"))
        self.assertEqual(torch_models.parse_row("convnext_tiny:amp:reduce-overhead"),
                         ("convnext_tiny", "amp", "reduce-overhead", ""))
        self.assertEqual(torch_models.parse_row("efficientnet_b0:amp::all-framework"),
                         ("efficientnet_b0", "amp", "", "all-framework"))
        self.assertEqual(torch_models.MIN_LAYER_GAIN_OF_VARIANT["all-framework"], "inf")
        self.assertEqual(torch_models.parse_row("unet3d:bf16::cap"),
                         ("unet3d", "bf16", "", "cap"))


class StepMemoryTest(unittest.TestCase):
    """bench/step_memory.py's pure parts: the caps it runs at and the largest-batch search."""

    def test_caps_from_native_peak_down_to_the_peak_without_workspace(self):
        caps = step_memory.cap_levels(27_806, 21_500, 3)
        self.assertEqual(len(caps), 3)
        self.assertAlmostEqual(caps[0], 27_806 * 1.02 / 1024)
        self.assertAlmostEqual(caps[-1], 21_500 * 1.02 / 1024)
        self.assertEqual(caps, sorted(caps, reverse=True))
        # The lowest peak no lower than native's: one cap, just above native's peak.
        self.assertEqual(step_memory.cap_levels(27_806, 27_807, 3), [27_806 * 1.02 / 1024])

    def test_no_caps_where_native_holds_no_workspace_at_its_peak(self):
        # nnU-Net's fp32 U-Net on an H200: both steady peaks 9,122 MiB (its 1 GiB workspaces run
        # below the peak), so no cap can bind native; VGG-16-like peaks leave a range.
        self.assertIn("no workspace", step_memory.no_cap_range(9_122, 9_123))
        self.assertIn("no workspace", step_memory.no_cap_range(9_122, 9_110))
        self.assertIsNone(step_memory.no_cap_range(27_806, 21_500))
        self.assertEqual(step_memory.step_peak_mib({"max_memory_allocated_mib": 9_625,
                                                    "steady_max_memory_allocated_mib": 9_122}),
                         9_122)
        self.assertEqual(step_memory.step_peak_mib({"max_memory_allocated_mib": 9_625}), 9_625)
        self.assertIsNone(step_memory.step_peak_mib({"error": "exit 1"}))

    def test_largest_batch_bisects_over_multiples_of_eight(self):
        for limit in (8, 13, 200, 1024):
            probes = []

            def fits(batch):
                probes.append(batch)
                return batch <= limit
            self.assertEqual(step_memory.largest_batch(fits, 8, 1024), limit // 8 * 8)
            self.assertTrue(all(b % 8 == 0 for b in probes))
            self.assertLessEqual(len(probes), 9, "bisection, not a scan")
        self.assertIsNone(step_memory.largest_batch(lambda b: False, 8, 1024))

    def test_arguments(self):
        support.assert_rejected(self, step_memory.parse_args,
                                ["--server", "h:1", "--out", "x", "--rows", "alexnet:amp"],
                                "unknown model 'alexnet'")
        support.assert_rejected(self, step_memory.parse_args,
                                ["--server", "h:1", "--out", "x", "--rows", "resnet50:amp",
                                 "--caps", "0"], "--caps must be >= 1")
        base = ["--server", "h:1", "--out", "x", "--rows", "resnet50:fp32"]
        for bad in ("256", "a:b", "320:256", "0:64"):
            support.assert_rejected(self, step_memory.parse_args,
                                    base + ["--max-batch-range", bad], "--max-batch-range")
        self.assertEqual(step_memory.parse_args(base + ["--max-batch-range", "256:320"])
                         .batch_range, (256, 320))
        self.assertIsNone(step_memory.parse_args(base).batch_range)
        # A 3-D model's batches are a few volumes: multiples of --max-batch-step 1.
        support.assert_rejected(self, step_memory.parse_args, base + ["--max-batch-range", "2:6"],
                                "expected 8 (--max-batch-step) <= LOW <= HIGH")
        small = step_memory.parse_args(base + ["--max-batch-range", "2:6", "--max-batch-step", "1"])
        self.assertEqual((small.batch_range, small.max_batch_step), ((2, 6), 1))
        self.assertEqual(step_memory.largest_batch(lambda b: b <= 5, 2, 6, 1), 5)
        support.assert_rejected(self, step_memory.parse_args, base + ["--max-batch-step", "0"],
                                "--max-batch-step must be >= 1")
        support.assert_rejected(self, step_memory.parse_args, base + ["--only-max-batch"],
                                "--only-max-batch needs --max-batch-cap-gib")
        self.assertTrue(step_memory.parse_args(
            base + ["--only-max-batch", "--max-batch-cap-gib", "24"]).only_max_batch)

    def test_only_max_batch_runs_no_rows(self):
        out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, out)
        searched = []
        with mock.patch.object(step_memory, "run_row",
                               side_effect=AssertionError("a row ran")), \
                mock.patch.object(step_memory, "max_batch_row",
                                  side_effect=lambda args, row: searched.append(row) or {}):
            step_memory.main(["--server", "h:1", "--out", out, "--rows", "resnet50:fp32",
                              "--only-max-batch", "--max-batch-cap-gib", "24"])
        self.assertEqual(searched, ["resnet50:fp32"])
        with open(os.path.join(out, "step_memory.json")) as f:
            self.assertEqual(json.load(f)["rows"], [])

    def test_no_curve_runs_the_rows_without_the_curve(self):
        runs = []

        native_steady_mib = 1000.0

        def run_process(args, name, argv, **kwargs):
            runs.append((name, argv[0]))
            # The first steps' peak (PyTorch's benchmark) above every steady one.
            steady = native_steady_mib if name.endswith("_native") else 1000.0
            return {"max_memory_allocated_mib": 1500.0, "steady_max_memory_allocated_mib": steady,
                    "median_step_ms": 10.0, "batch": 2}
        args = step_memory.parse_args(["--server", "h:1", "--out", "x", "--rows",
                                       "resnet50:fp32", "--caps", "2", "--no-curve"])
        with mock.patch.object(step_memory.torch_models, "run_process", side_effect=run_process):
            rows = step_memory.run_row(args, "resnet50:fp32", {})
        self.assertNotIn("curve", [kind for _, kind in runs])
        # Native, the 64 MiB plan, liveness; no cap: the steady peaks meet (native's holds no
        # workspace), and the row says so.
        self.assertEqual([name for name, _ in runs], ["resnet50_fp32_native",
                                                      "resnet50_fp32_converted_64mib",
                                                      "resnet50_fp32_converted_liveness"])
        self.assertEqual(len(rows), 1)
        self.assertIn("no workspace", rows[0]["caps_skipped"])
        # Native's steady peak 200 MiB over the step's without workspace: two caps, each side.
        runs.clear()
        native_steady_mib = 1200.0
        with mock.patch.object(step_memory.torch_models, "run_process", side_effect=run_process):
            rows = step_memory.run_row(args, "resnet50:fp32", {})
        self.assertEqual(len(runs), 3 + 2 * 2)
        self.assertEqual([r["native_cap_gib"] for r in rows],
                         [None, round(1200 * 1.02 / 1024, 3), round(1000 * 1.02 / 1024, 3)])


class CpusTest(unittest.TestCase):
    def test_cpu_lists_parse_and_bad_ones_are_named(self):
        self.assertEqual(torch_models.parse_cpus("4-7,9"), {4, 5, 6, 7, 9})
        self.assertEqual(torch_models.parse_cpus("3"), {3})
        for bad in ("a", "7-4", "-1", "1,,2"):
            with self.assertRaises(ValueError):
                torch_models.parse_cpus(bad)
        support.assert_rejected(self, torch_models.parse_args,
                                ["run", "--model", "resnet50", "--cpus", "2-x"],
                                "expected CPU numbers and ranges")
        support.assert_rejected(self, torch_models.parse_args,
                                ["run", "--model", "resnet50", "--cpus", "100000"],
                                "this machine's CPUs are")
        args = torch_models.parse_args(["run", "--model", "resnet50", "--cpus",
                                        torch_models.format_cpus(torch_models.available_cpus())])
        self.assertTrue(args.cpus)

    def test_host_probe_times_real_work(self):
        self.assertGreater(torch_models.host_probe_ms(repeats=3), 0.0)


class Event:
    """A torch.profiler event as conv_time_ms reads it."""

    def __init__(self, name, parent=None, device_us=0.0, cpu_us=0.0):
        self.name, self.cpu_parent = name, parent
        self.device_time_total, self.cpu_time_total = device_us, cpu_us


class ConvTimeTest(unittest.TestCase):
    def test_outermost_convolution_ops_count_once(self):
        backward = Event("ConvFunctionBackward", device_us=900.0, cpu_us=50.0)
        forward_op = Event("aten::convolution")
        events = [
            Event("autograd::engine::evaluate_function: ConvFunctionBackward",
                  device_us=950.0),
            backward,
            # PyTorch's own for one gradient inside the planned layer's backward: in the 900.
            Event("aten::convolution_backward", parent=backward, device_us=400.0),
            Event("ConvFunction", device_us=300.0, cpu_us=20.0),
            forward_op,
            Event("aten::cudnn_convolution", parent=Event("aten::_convolution", forward_op),
                  device_us=200.0, cpu_us=10.0),
            Event("aten::add_", device_us=5000.0),  # not a convolution
        ]
        device = torch_models.conv_time_ms(events, cuda=True)
        self.assertAlmostEqual(device["forward"], 0.5)   # the planned and the native forward
        self.assertAlmostEqual(device["backward"], 0.9)  # the planned backward, once
        host = torch_models.conv_time_ms(events, cuda=False)
        self.assertAlmostEqual(host["forward"] + host["backward"], 0.08)

    def test_a_profiled_cpu_step_counts_its_convolutions(self):
        import torch
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                                    torch.nn.Conv2d(8, 8, 3), torch.nn.Flatten(),
                                    torch.nn.Linear(8 * 12 * 12, 10))
        data = torch.randn(4, 3, 16, 16)

        def step():
            model.zero_grad()
            model(data).sum().backward()
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        events = prof.events()
        conv = torch_models.conv_time_ms(events, cuda=False)
        total_ms = sum(e.cpu_time_total for e in events if e.cpu_parent is None) / 1e3
        self.assertGreater(conv["forward"], 0.0)
        self.assertGreater(conv["backward"], 0.0)
        self.assertLess(conv["forward"] + conv["backward"], total_ms)
        conv, device_ms = torch_models.measured_conv_ms(torch, step, cuda=False, steps=2)
        self.assertGreater(conv["forward"], 0.0)
        self.assertEqual(device_ms, 0.0)

    def test_predictions_count_every_call_by_its_route(self):
        from ucudnn import _lib

        def key(op, k):
            # memory_profile()'s key: the ConvShape fields in their order.
            return (op, 8, 16, 14, 14, k, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0)

        def report_row(op, k, route, predicted, framework):
            return {"op": op, "dims": [8, 16, 14, 14, k, 3, 3], "groups": 1, "route": route,
                    "predicted_ms": predicted, "framework_ms": framework}
        ut = types.SimpleNamespace(_lib=_lib, report=lambda model: [
            report_row(0, 16, "plan", 1.0, 2.0), report_row(1, 16, "framework", 3.0, 1.5),
            report_row(0, 32, "framework_layer", 0.0, 4.0)])
        profile = {"calls": [(key(0, 16), 0, 0), (key(0, 16), 0, 0), (key(1, 16), 0, 0),
                             (key(0, 32), 0, 0), (key(2, 16), 0, 0)]}
        self.assertEqual(torch_models.predicted_conv_ms(ut, None, profile), {
            "predicted_ms": 1.0 + 1.0 + 1.5 + 4.0, "framework_ms": 2.0 + 2.0 + 1.5 + 4.0,
            "predicted_forward_ms": 1.0 + 1.0 + 4.0, "framework_forward_ms": 2.0 + 2.0 + 4.0,
            "planned_calls": 2, "unknown_calls": 1})


class FirstCallsTest(unittest.TestCase):
    def test_each_op_is_timed_by_kind_and_the_originals_come_back(self):
        synced = []

        class Conv:
            dims, groups = (8, 3, 9, 9, 4, 3, 3), 1

            def run(self, op, a, b, out):
                return "ran"

        def forward(x, w, conv):
            return "y"

        def backward(conv, x, w, grad_y, need_x, need_w):
            return "grads"

        conv = types.SimpleNamespace(LayerConv=Conv)
        autograd = types.SimpleNamespace(conv_forward=forward, conv_backward=backward)
        custom_ops = types.SimpleNamespace(conv_forward=forward, conv_backward=backward)
        module = types.SimpleNamespace(conv_forward=forward)
        fake_torch = types.SimpleNamespace(
            cuda=types.SimpleNamespace(synchronize=lambda: synced.append(1)))
        first = torch_models.FirstCalls(fake_torch, (conv, autograd, custom_ops, module))
        first.SLOW_MS = 0.0  # every call is "slow" here
        with first:
            self.assertEqual(Conv().run(0, None, None, None), "ran")
            self.assertEqual(autograd.conv_forward(None, None, Conv()), "y")
            self.assertEqual(autograd.conv_backward(Conv(), None, None, None, True, True),
                             "grads")
        self.assertIs(autograd.conv_forward, forward)
        self.assertIs(custom_ops.conv_backward, backward)
        self.assertIs(Conv.run.__name__, "run")
        self.assertEqual(len(synced), 6)  # before and after each op
        summary = first.summary()
        self.assertEqual(sorted(summary["seconds"]), ["backward op", "forward op", "plan"])
        self.assertEqual(summary["calls"], 3)
        self.assertEqual(len(summary["slowest"]), 3)
        for call in summary["slowest"]:
            self.assertIn(str(Conv.dims), call["what"])


class CpuSuiteTest(unittest.TestCase):
    def test_one_row_with_the_planner_down(self):
        with tempfile.TemporaryDirectory() as out:
            rc = subprocess.run([sys.executable, SCRIPT, "suite", "--device", "cpu",
                                 "--server", f"127.0.0.1:{closed_port()}", "--out", out,
                                 "--rows", "resnet50:fp32", "--repeats", "2", "--batch", "2",
                                 "--steps", "4", "--image-size", "32"],
                                stdout=subprocess.DEVNULL).returncode
            with open(os.path.join(out, "torch_models.json")) as f:
                summary = json.load(f)
        self.assertEqual(summary["errors"], [])
        self.assertEqual(rc, 0)
        (row,) = summary["rows"]
        self.assertLessEqual(ROW_KEYS, set(row))
        self.assertEqual((row["model"], row["family"], row["precision"], row["compiled"]),
                         ("resnet50", "residual", "fp32", False))
        self.assertEqual(len(row["native_runs_ms"]), 2)
        self.assertEqual(len(row["converted_runs_ms"]), 2)
        self.assertAlmostEqual(row["ratio"], row["native_ms"] / row["converted_ms"])
        # Each side's job-to-job spread (the noise a per-job ratio is read against).
        for side in ("native", "converted"):
            runs = row[f"{side}_runs_ms"]
            self.assertAlmostEqual(row[f"{side}_jobs_spread"], max(runs) / min(runs))
            self.assertGreaterEqual(row[f"{side}_jobs_spread"], 1.0)
        # Each job's own device peak (none on the CPU) and what prepare() left of the memory.
        self.assertEqual(row["native_peaks_by_job_mib"], [None, None])
        self.assertEqual(len(row["converted_peaks_by_job_mib"]), 2)
        self.assertEqual(len(row["converted_memory_stages"]), 2)
        # The suite's own compiled-plan cache, empty on the CPU (nothing is compiled there).
        self.assertEqual(row["converted_compiled_plans_at_start"], [0, 0])
        self.assertEqual(row["converted_host_bound"], [None, None])  # not measured on the CPU
        # The planner is down: every convolution ran PyTorch's own (53 layers, the first
        # without backward-data), through the adapter or, between its rechecks, on the native
        # route (uncounted); the first step's loss is native's (later ones drift apart:
        # PyTorch's convolution backward called directly sums in another order, and batch norm
        # over 2 samples amplifies it).
        calls = row["converted_calls_per_step"]
        self.assertEqual(calls["planned_calls"], 0)
        self.assertLessEqual(calls["fallback_calls"] + calls["framework_calls"], 53 * 3 - 1)
        self.assertLessEqual(calls["native_route_layers"], 53)
        self.assertAlmostEqual(row["loss_native_first"], row["loss_converted_first"], places=4)

    def test_a_cap_row_at_a_given_cap_in_bf16(self):
        # --cap-gib: the cap row runs at that cap, with no native run to measure one.
        with tempfile.TemporaryDirectory() as out:
            rc = subprocess.run([sys.executable, SCRIPT, "suite", "--device", "cpu",
                                 "--server", f"127.0.0.1:{closed_port()}", "--out", out,
                                 "--rows", "dcgan:bf16::cap", "--cap-gib", "3.5",
                                 "--repeats", "1", "--batch", "2", "--steps", "4"],
                                stdout=subprocess.DEVNULL).returncode
            with open(os.path.join(out, "torch_models.json")) as f:
                summary = json.load(f)
            runs = os.listdir(out)
        self.assertEqual((rc, summary["errors"]), (0, []))
        (row,) = summary["rows"]
        self.assertEqual((row["model"], row["precision"], row["variant"], row["cap_gib"]),
                         ("dcgan", "bf16", "cap", 3.5))
        self.assertFalse([r for r in runs if "unlimited" in r], runs)

    def test_compiled_plans_counted(self):
        count = torch_models.compiled_plans_in
        with tempfile.TemporaryDirectory() as cache:
            self.assertIsNone(count(["server=a:1"]))
            self.assertIsNone(count([f"compiled_plan_cache={cache}", "compiled_plan_cache=Off"]))
            self.assertEqual(count([f"compiled_plan_cache={cache}/absent"]), 0)
            for name in ("a.plan", "b.plan", "a.plan.tmp.12.0", "notes"):
                open(os.path.join(cache, name), "w").close()
            self.assertEqual(count([f"compiled_plan_cache={cache}"]), 2)
        self.assertEqual(torch_models.parse_row("convnext_tiny:amp::cold")[3], "cold")
        self.assertEqual(torch_models.OPTIONS_OF_VARIANT["cold"], ["compiled_plan_cache=off"])
        # The machine's cache is the library's default path, where the stack's worker keeps the
        # plans it compiled (core/src/files.cc UserCachePath).
        machine = torch_models.OPTIONS_OF_VARIANT["machine"]
        self.assertEqual(len(machine), 1)
        self.assertTrue(machine[0].endswith("/ucudnn/compiled_plans"), machine)
        self.assertEqual(torch_models.parse_row("resnet50:amp::own-handle")[3], "own-handle")
        self.assertEqual(torch_models.OPTIONS_OF_VARIANT["own-handle"], ["cudnn_handle=own"])

    def test_each_run_compiles_from_scratch(self):
        seen = []

        def run(command, **kwargs):
            seen.append(kwargs["env"])
            return types.SimpleNamespace(returncode=1)

        with tempfile.TemporaryDirectory() as runs, \
                mock.patch.object(torch_models.subprocess, "run", side_effect=run):
            args = types.SimpleNamespace(runs_dir=runs, python=sys.executable, run_timeout_s=5)
            for name in ("a_native_0", "a_converted_0"):
                self.assertIn("error", torch_models.run_process(args, name, ["run"]))
        caches = [env["TORCHINDUCTOR_CACHE_DIR"] for env in seen]
        self.assertEqual(len(set(caches)), 2, "one torch.compile cache per run")
        self.assertTrue(all(c.startswith(runs) for c in caches))
        self.assertEqual(seen[1]["TRITON_CACHE_DIR"], os.path.join(caches[1], "triton"))
        self.assertEqual({env["UCUDNN_HOST_BOUND_CACHE"] for env in seen},
                         {os.path.join(runs, "host_bound.json")}, "one record file per suite")

    def test_no_row_starts_that_would_end_past_the_deadline(self):
        clock = [1000.0]
        started = []

        def run(args, name, run_args, timeout_s=None):
            started.append(name)
            clock[0] += 10.0  # every job takes 10 s
            return {"error": f"{name}: failed (a stand-in)"}

        with tempfile.TemporaryDirectory() as out, \
                mock.patch.object(torch_models, "run_process", side_effect=run), \
                mock.patch.object(torch_models.time, "monotonic", side_effect=lambda: clock[0]):
            args = torch_models.parse_args(
                ["suite", "--server", "h:1", "--out", out, "--repeats", "1", "--deadline-s", "45",
                 "--rows", "resnet50:amp", "googlenet:amp", "vgg16:amp"])
            self.assertEqual(torch_models.run_suite(args), 1)
            with open(os.path.join(out, "torch_models.json")) as f:
                errors = json.load(f)["errors"]
        self.assertIn("vgg16:amp: not run (the suite's deadline: 5 s left, its 2 jobs expected "
                      "to take 20 s)", errors)
        # The first row starts with nothing to go by (20 s); the second is expected to take its
        # two jobs' 20 s of the 25 left; the third's 20 s would pass the 5 left: not started.
        self.assertEqual(started, ["resnet50_amp_native_0", "resnet50_amp_converted_0",
                                   "googlenet_amp_native_0", "googlenet_amp_converted_0"])
        self.assertEqual(torch_models.row_seconds([], 3), 0.0)
        self.assertEqual(torch_models.row_seconds([10.0, 30.0, 12.0], 3), 72.0)

    def test_the_warm_up_keeps_its_deadline(self):
        clock = [1000.0]
        started = {}

        def run(args, name, run_args, timeout_s=None):
            started[name] = (float(run_args[run_args.index("--prepare-wait-s") + 1]), timeout_s)
            clock[0] += 40.0  # every run takes 40 s
            return {"error": f"{name}: failed (a stand-in)"}

        with mock.patch.object(torch_models, "run_process", side_effect=run), \
                mock.patch.object(torch_models.time, "monotonic", side_effect=lambda: clock[0]):
            args = torch_models.parse_args(
                ["warm", "--server", "h:1", "--runs-dir", "r", "--warm-wait-s", "200",
                 "--deadline-s", "100", "--rows", "resnet50:amp", "googlenet:amp"])
            errors = torch_models.warm_up(args, [], args.deadline_s)
        grace = torch_models.WARM_GRACE_S
        # Each run waits for its plans only till the deadline less the grace, and is stopped at
        # the deadline; the third would start with 20 s left, no more than the grace: not run.
        self.assertEqual(started, {"resnet50_amp_warm": (100.0 - grace, 100.0),
                                   "googlenet_amp_warm": (60.0 - grace, 60.0)})
        self.assertIn("resnet50_amp_framework: not run (the warm-up's deadline: 20 s left)",
                      errors)
        self.assertIn("googlenet_amp_framework: not run (the warm-up's deadline: 20 s left)",
                      errors)
        started.clear()
        with mock.patch.object(torch_models, "run_process", side_effect=run):
            torch_models.warm_up(args, [])  # no deadline: the wait and the run's own timeout
        self.assertEqual(started["resnet50_amp_warm"], (200.0, 200.0 + args.run_timeout_s))

    def test_the_server_holds_no_request_once_the_worker_is_stopped(self):
        seen = {}

        def run(args, name, run_args, timeout_s=None):
            seen[name] = run_args
            return {"error": f"{name}: failed (a stand-in)"}

        for extra, held_ms in (([], 2000), (["--server-wait-s", "0"], 0)):
            seen.clear()
            with tempfile.TemporaryDirectory() as out, \
                    mock.patch.object(torch_models, "run_process", side_effect=run):
                args = torch_models.parse_args(
                    ["suite", "--server", "h:1", "--out", out, "--repeats", "1",
                     "--converted-wait-s", "2", "--rows", "resnet50:amp"] + extra)
                torch_models.run_suite(args)
            converted = seen["resnet50_amp_converted_0"]
            # prepare() still waits 2 s for the planner's answers (the route is measured).
            self.assertIn("--prepare-wait-s", converted)
            self.assertEqual(converted[converted.index("--prepare-wait-s") + 1], "2.0")
            self.assertIn(f"--option=server_wait_ms={held_ms}", converted)
            self.assertNotIn("--prepare-wait-s", seen["resnet50_amp_native_0"])
        support.assert_rejected(self, torch_models.parse_args,
                                ["suite", "--server", "h:1", "--out", "x", "--server-wait-s", "-1",
                                 "--rows", "resnet50:amp"], "--server-wait-s must be >= 0")

    def test_host_bound_answers_summarised(self):
        of = torch_models.host_bound_of
        self.assertIsNone(of({}))
        self.assertIsNone(of({"prepare": {"host_bound": None}}))
        self.assertIsNone(of({"prepare": {"host_bound": {"host_bound": True,
                                                         "assumed": "compiled"}}}))
        self.assertEqual(of({"prepare": {"host_bound": {"host_bound": True, "host_ms": 3.0}}}),
                         "yes")
        self.assertEqual(of({"prepare": {"host_bound": {"host_bound": False, "host_ms": 3.0,
                                                        "remembered": True}}}),
                         "no (remembered)")
        self.assertEqual(of({"prepare": {"host_bound": {"host_bound": True, "remembered": True},
                                         "cudnn_benchmark": False}}),
                         "yes (remembered), heuristics")

    def test_native_with_the_library_loaded(self):
        with tempfile.TemporaryDirectory() as out:
            path = os.path.join(out, "run.json")
            subprocess.run([sys.executable, SCRIPT, "run", "--device", "cpu", "--model",
                            "resnet50", "--precision", "fp32", "--batch", "2", "--steps", "4",
                            "--image-size", "32", "--with-library", "--option",
                            f"server=127.0.0.1:{closed_port()}", "--option", "cache_path=off",
                            "--cudnn-benchmark", "off", "--json-out", path],
                           stdout=subprocess.DEVNULL, check=True)
            with open(path) as f:
                result = json.load(f)
        self.assertEqual((result["config"]["cudnn_benchmark"], result["cudnn_benchmark"]),
                         ("off", False))
        # The model is native (no counters of the adapter); the library was loaded beside it.
        self.assertEqual(len(result["losses"]), 4)
        self.assertNotIn("calls_per_step", result)
        self.assertTrue(result["config"]["with_library"])
        self.assertIn(".so", os.path.basename(result["library_loaded"]["path"]), result)
        self.assertEqual(result["library_loaded"]["kernels"], 1)  # the probe's forward
        self.assertEqual(torch_models.parse_row("resnet50:amp::library")[3], "library")

    def test_kernels_alone_with_step_totals(self):
        result = subprocess.run(
            [sys.executable, SCRIPT, "kernels", "--device", "cpu", "--model", "resnet50",
             "--precision", "fp32", "--batch", "2", "--image-size", "32", "--repeats", "2",
             "--flush-l2", "--option", f"server=127.0.0.1:{closed_port()}",
             "--option", "cache_path=off"], stdout=subprocess.PIPE, check=True)
        got = json.loads(result.stdout)
        # ResNet-50's 53 layers: 158 ops a step (the first layer has no backward-data), fewer
        # distinct kernels (repeated blocks); no plan with the planner down.
        self.assertLess(len(got["kernels"]), 158)
        self.assertTrue(all(r["plan_ms"] is None for r in got["kernels"]))
        self.assertGreater(got["framework_step_ms"], got["framework_total_ms"])
        self.assertAlmostEqual(got["plan_step_ms"], got["framework_step_ms"])
        # No plan: the plans' step issues PyTorch's own, at PyTorch's host cost.
        self.assertGreater(got["framework_step_host_ms"], 0.0)
        self.assertAlmostEqual(got["plan_step_host_ms"], got["framework_step_host_ms"])
        # On the CPU there is no L2 to flush: the second pass says so.
        flushed = got["l2_flushed"]
        self.assertEqual(len(flushed["kernels"]), len(got["kernels"]))
        self.assertFalse(any(r["l2_flushed"] for r in flushed["kernels"]))

    def test_paired_rounds_in_one_process(self):
        result = subprocess.run(
            [sys.executable, SCRIPT, "paired", "--device", "cpu", "--model", "resnet50",
             "--precision", "fp32", "--batch", "2", "--image-size", "32", "--rounds", "3",
             "--steps", "1", "--option", f"server=127.0.0.1:{closed_port()}",
             "--option", "cache_path=off"], stdout=subprocess.PIPE, check=True)
        paired = json.loads(result.stdout)
        self.assertEqual(len(paired["native_round_ms"]), 3)
        self.assertEqual(len(paired["converted_round_ms"]), 3)
        ratios = [n / c for n, c in zip(paired["native_round_ms"], paired["converted_round_ms"])]
        self.assertAlmostEqual(paired["ratio"], sorted(ratios)[1])
        self.assertEqual(paired["ratio_range"], [min(ratios), max(ratios)])
        # Every converted convolution ran PyTorch's own (the planner is down), through the
        # adapter (counted) or on the native route.
        self.assertLessEqual(paired["calls_per_step"]["fallback_calls"], 53 * 3 - 1)
        self.assertLessEqual(paired["calls_per_step"]["native_route_layers"], 53)
        self.assertEqual(paired["calls_per_step"]["planned_calls"], 0)
        support.assert_rejected(self, torch_models.parse_args,
                                ["paired", "--model", "resnet50", "--rounds", "1"],
                                "--rounds must be >= 2")


# A stand-in for the GPU machine's python3 running `torch_models.py run`: writes a run's JSON
# (step times from the --cpus it was given: 10 ms pinned, 20 unpinned) to --json-out.
FAKE_RUN = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
cpus = args[args.index("--cpus") + 1] if "--cpus" in args else ""
ms = 10.0 if cpus else 20.0
json.dump({"step_ms": [50.0] + [ms] * 7, "median_step_ms": ms, "host_probe_ms": [5.0, 6.0],
           "device_ms_per_step": 4.0}, open(args[args.index("--json-out") + 1], "w"))
"""


class HostNoiseTest(unittest.TestCase):
    def run_main(self, argv):
        with tempfile.TemporaryDirectory() as out:
            path = os.path.join(out, "noise.json")
            host_noise.main(argv + ["--json-out", path])
            with open(path) as f:
                return json.load(f)

    def test_probes_every_cpu_in_every_sweep(self):
        cpus = sorted(torch_models.available_cpus())
        result = self.run_main(["--jobs", "0", "--sweeps", "2", "--probe-repeats", "1",
                                "--cpus", str(cpus[0])])
        self.assertEqual(sorted(map(int, result["topology"]["cpus"])), cpus)
        self.assertEqual(sorted(map(int, result["probe_by_cpu_ms"])), cpus)
        for times in result["probe_by_cpu_ms"].values():
            self.assertEqual(len(times), 2)
            self.assertTrue(all(t > 0 for t in times), times)
        self.assertEqual(result["jobs"], [])
        self.assertEqual(result["summary"], {"unpinned": None, "pinned": None})
        # The sweeps gave the process back every CPU it had.
        self.assertEqual(torch_models.available_cpus(), set(cpus))

    def test_jobs_alternate_pinned_and_unpinned(self):
        cpu = str(min(torch_models.available_cpus()))
        with tempfile.TemporaryDirectory() as tools:
            fake = os.path.join(tools, "python3")
            with open(fake, "w") as f:
                f.write(FAKE_RUN)
            os.chmod(fake, 0o755)
            result = self.run_main(["--jobs", "2", "--sweeps", "1", "--probe-repeats", "1",
                                    "--cpus", cpu, "--python", fake])
        self.assertEqual([j["cpus"] for j in result["jobs"]], ["any", cpu, cpu, "any"])
        self.assertEqual([j["median_step_ms"] for j in result["jobs"]], [20.0, 10.0, 10.0, 20.0])
        self.assertEqual(result["jobs"][0]["steady_step_ms"], [20.0] * 4)
        self.assertEqual(result["summary"]["pinned"],
                         {"job_medians_ms": [10.0, 10.0], "median_ms": 10.0, "max_over_min": 1.0})
        self.assertEqual(result["summary"]["unpinned"]["median_ms"], 20.0)

    def test_a_failed_job_is_recorded_and_left_out_of_the_summary(self):
        cpu = str(min(torch_models.available_cpus()))
        result = self.run_main(["--jobs", "1", "--sweeps", "1", "--probe-repeats", "1",
                                "--cpus", cpu, "--python", shutil.which("false")])
        self.assertEqual(len(result["jobs"]), 2)
        for job in result["jobs"]:
            self.assertIn("error", job)
        self.assertEqual(result["summary"], {"unpinned": None, "pinned": None})

    def test_rejects_cpus_the_machine_lacks(self):
        support.assert_rejected(self, host_noise.main, ["--cpus", "100000"],
                                "this machine's CPUs are")
        support.assert_rejected(self, host_noise.main, ["--cpus", "2-x"], "expected CPU numbers")
        support.assert_rejected(self, host_noise.main, ["--sweeps", "0"], "--sweeps >= 1")

    def test_the_pinned_side_defaults_to_the_upper_half_of_the_cpus(self):
        cpus = sorted(torch_models.available_cpus())
        result = self.run_main(["--jobs", "0", "--sweeps", "1", "--probe-repeats", "1"])
        self.assertEqual(result["config"]["cpus"],
                         torch_models.format_cpus(cpus[len(cpus) // 2:]))


if __name__ == "__main__":
    unittest.main()
