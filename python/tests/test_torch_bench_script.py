"""bench/torch_adapter.py (the H100 script) on the CPU: its argument checks, its verdicts, and one
whole suite at toy sizes against a planner that is down, so that the GPU run works first time."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "torch_adapter.py")
import support  # noqa: E402  (python/ and bench/ on the path; shared helpers)
import torch_adapter  # noqa: E402


closed_port = support.closed_port


class ArgumentsTest(unittest.TestCase):
    def rejects(self, argv, message):
        support.assert_rejected(self, torch_adapter.parse_args, argv, message)

    def test_bad_arguments_are_named(self):
        self.rejects(["suite", "--out", "x"], "--server")
        self.rejects(["run", "--steps", "1"], "--steps must be >= 2")
        self.rejects(["run", "--batch", "0"], "--batch must be >= 1")
        self.rejects(["run", "--option", "server"], "expected KEY=VALUE")
        self.rejects(["run", "--device", "tpu"], "invalid choice")

    def test_defaults_are_the_h100_run(self):
        args = torch_adapter.parse_args(["suite", "--server", "h:1", "--out", "o"])
        self.assertEqual((args.batch, args.steps, args.image_size, args.device),
                         (256, 20, 224, "cuda"))
        names = [name for name, _, _ in torch_adapter.suite_configs(args)]
        self.assertEqual(names, [
            "fp32_ucudnn_warmup", "fp32_ucudnn_64mib", "fp32_native_benchmark",
            "fp32_native_wscap64", "amp_ucudnn_warmup", "amp_ucudnn_64mib",
            "amp_native_benchmark", "amp_native_wscap64", "fp32_ucudnn_undivided",
            "overhead_undivided"])
        env = {name: extra for name, _, extra in torch_adapter.suite_configs(args)}
        self.assertEqual(env["fp32_native_wscap64"], {"CUDNN_CONV_WSCAP_DBG": "64"})


class CompareTest(unittest.TestCase):
    @staticmethod
    def result(losses, ms=10.0):
        return {"losses": losses, "median_step_ms": ms, "time_to_first_fast_step_s": 1.0,
                "stats": {"planned_calls": 3 * len(losses), "fallback_calls": 0,
                          "kernels_planned": 3, "kernels": 3}}

    def test_agreeing_losses_pass(self):
        results = {"fp32_native_benchmark": self.result([2.0, 1.5], 12.0),
                   "fp32_ucudnn_64mib": self.result([2.001, 1.501], 10.0),
                   "fp32_native_wscap64": self.result([2.0, 1.5], 15.0)}
        report, failures = torch_adapter.compare(results)
        self.assertEqual(failures, [])
        self.assertAlmostEqual(report["fp32"]["speedup_vs_wscap64"], 1.5)
        self.assertAlmostEqual(report["fp32"]["speedup_vs_uncapped"], 1.2)

    def test_diverging_losses_and_errors_fail(self):
        results = {"fp32_native_benchmark": self.result([2.0, 1.5]),
                   "fp32_ucudnn_64mib": self.result([2.0, 1.9]),
                   "amp_native_benchmark": {"error": "exit 1"}}
        _, failures = torch_adapter.compare(results)
        self.assertEqual(len(failures), 2, failures)
        self.assertTrue(any("losses differ" in f for f in failures))


TOOL = support.TOOL


class OverheadTest(unittest.TestCase):
    def overhead(self, *extra):
        with tempfile.TemporaryDirectory() as out:
            path = os.path.join(out, "overhead.json")
            run = subprocess.run([sys.executable, SCRIPT, "overhead", "--calls", "20",
                                  "--rounds", "3", "--json-out", path, *extra],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if run.returncode != 0:
                return run, None
            with open(path) as f:
                return run, json.load(f)

    def test_every_converted_call_runs_the_undivided_plan(self):
        self.assertTrue(TOOL and os.path.exists(TOOL), "UCUDNN_TEST_PLAN_CACHE_TOOL is not set")
        run, result = self.overhead("--plan-cache-tool", TOOL)
        self.assertEqual(run.returncode, 0, run.stdout)
        self.assertEqual(result["clock"], "thread CPU time")
        self.assertEqual(len(result["rounds_us"]["native"]), 3)
        self.assertEqual(len(result["rounds_us"]["converted"]), 3)
        self.assertGreater(result["converted_us_per_layer_step"], 0)
        self.assertAlmostEqual(result["overhead_us_per_call"] * 3,
                               result["overhead_us_per_layer_step"])
        # Warm-up (10 steps) and 3 rounds of 20, each step forward, backward-data and
        # backward-filter: all planned.
        self.assertEqual(result["stats"]["planned_calls"], 3 * (10 + 3 * 20))
        self.assertEqual(result["stats"]["fallback_calls"], 0)

    def test_the_route_of_a_layer_decided_for_pytorchs_own(self):
        self.assertTrue(TOOL and os.path.exists(TOOL), "UCUDNN_TEST_PLAN_CACHE_TOOL is not set")
        run, result = self.overhead("--plan-cache-tool", TOOL, "--route", "framework",
                                    "--autocast")
        self.assertEqual(run.returncode, 0, run.stdout)
        # The warm-up's calls (no plan for the autocast dtype: the tool's plans are fp32) ask the
        # library; the measured calls take the decided route, on the native route from the first
        # that goes through the adapter (none, when the warm-up's native route still held).
        self.assertIn(result["stats"]["framework_calls"], (0, 3))
        self.assertEqual(result["stats"]["native_route_layers"], 1)
        self.assertEqual(result["stats"]["planned_calls"], 0)
        self.assertEqual(result["config"]["route"], "framework")

    def test_without_plans_it_refuses_to_measure(self):
        run, _ = self.overhead("--option=server=", "--option=cache_path=off")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("the library ran no plan", run.stdout)


class CpuRunTest(unittest.TestCase):
    def test_one_converted_run(self):
        with tempfile.TemporaryDirectory() as out:
            path = os.path.join(out, "run.json")
            subprocess.run([sys.executable, SCRIPT, "run", "--device", "cpu", "--mode", "ucudnn",
                            "--batch", "2", "--steps", "2", "--image-size", "32",
                            "--option=server=", "--option=cache_path=off", "--json-out", path],
                           check=True)
            with open(path) as f:
                result = json.load(f)
        self.assertEqual(len(result["losses"]), 2)
        self.assertTrue(all(loss == loss and loss > 0 for loss in result["losses"]))
        # ResNet-50: 53 convolutions; the first has no backward-data. Repeated blocks share
        # kernels (68 distinct at this size).
        calls = 2 * (53 * 3 - 1)
        self.assertEqual(result["stats"]["kernels"], 68)
        # No server: every call ran PyTorch's convolution, counted as a fallback, whether it
        # asked the library (adapter_calls) or was routed there directly (no plan, known).
        self.assertEqual(result["stats"]["fallback_calls"], calls)
        self.assertLessEqual(result["adapter_calls"], calls)
        self.assertGreaterEqual(result["adapter_calls"], 68, "each kernel asked at least once")

    def test_suite_with_the_planner_down(self):
        with tempfile.TemporaryDirectory() as out:
            rc = subprocess.run([sys.executable, SCRIPT, "suite", "--device", "cpu",
                                 "--server", f"127.0.0.1:{closed_port()}", "--out", out,
                                 "--batch", "2", "--steps", "2", "--image-size", "32",
                                 "--warm-wait-s", "1", "--plan-cache-tool", TOOL],
                                stdout=subprocess.DEVNULL).returncode
            with open(os.path.join(out, "torch_adapter.json")) as f:
                summary = json.load(f)
        self.assertEqual(summary["failures"], [])
        self.assertEqual(rc, 0)
        self.assertEqual(set(summary["report"]), {"fp32", "amp", "adapter_overhead_undivided"})
        # The overhead run's plans came from the tool: its per-call overhead, at the ResNet-50
        # step's calls through the adapter (at most 53 convolutions' ops, the first without
        # backward-data; calls on the native route between rechecks are not the adapter's).
        overhead = summary["report"]["adapter_overhead_undivided"]
        self.assertGreater(overhead["calls_per_step"], 0)
        self.assertLessEqual(overhead["calls_per_step"], 53 * 3 - 1)
        self.assertAlmostEqual(overhead["overhead_ms_per_step"],
                               overhead["overhead_us_per_call"] * overhead["calls_per_step"] / 1e3)
        # Nothing planned (the planner is down): every convolution is PyTorch's, losses equal.
        self.assertEqual(summary["report"]["fp32"]["loss_max_rel_diff"], 0.0)
        self.assertEqual(summary["runs"]["fp32_ucudnn_64mib"]["stats"]["planned_calls"], 0)


if __name__ == "__main__":
    unittest.main()


class ConvTraceTest(unittest.TestCase):
    """bench/torch_conv_trace.py (scripts/gpu_conv_trace.sh's PyTorch side): its shapes and the
    three ops it calls, on the CPU."""

    def test_bad_shapes_are_named(self):
        import argparse

        import torch_conv_trace
        for text, message in (("a:1:2", "NAME:C:H:W"), ("a:1:2:2:1:1:1:0:1:x", "integers"),
                              ("a:6:7:7:6:3:3:1:1:4", "out of range")):
            with self.assertRaises(argparse.ArgumentTypeError) as raised:
                torch_conv_trace.parse_shape(text)
            self.assertIn(message, str(raised.exception))

    def test_each_op_gives_its_output(self):
        import torch

        import torch_conv_trace
        from ucudnn.torch import measure as ut_measure
        shape = torch_conv_trace.parse_shape("dw:8:7:7:8:7:7:3:1:8")
        self.assertEqual(shape["groups"], 8)

        def run(op):
            kernel = torch_conv_trace.conv_shape(shape, op, 2, "fp32")
            x, w, dy, geometry = ut_measure.operands_of(kernel, torch.device("cpu"))
            return x, w, ut_measure.framework_call(kernel, x, w, dy, geometry)()

        _, _, y = run("fwd")
        self.assertEqual(tuple(y.shape), (2, 8, 7, 7))
        x, _, (dx, _, _) = run("bwd_data")
        self.assertEqual(tuple(dx.shape), tuple(x.shape))
        _, w, (_, dw, _) = run("bwd_filter")
        self.assertEqual(tuple(dw.shape), tuple(w.shape))
        self.assertGreater(float(dw.abs().sum()), 0.0)
