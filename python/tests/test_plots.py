"""The benchmarks' `plot` subcommands (bench/plots.py) on small JSON fixtures, through the scripts
as a user runs them: the SVG is written, parses as XML, holds one element per data series, and is
the same bytes when drawn again (so that a commit of docs/img/ shows only real changes)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import support

try:
    import matplotlib  # noqa: F401
except ImportError:
    matplotlib = None

BENCH = os.path.join(support.REPO, "bench")
GIB = 1 << 30


def curve(base_gib, times_ms, native):
    points = [{"budget_bytes": i << 20, "peak_bytes": int((base_gib + 0.1 * i) * GIB),
               "predicted_ms": ms, "complete": True, "pareto": True}
              for i, ms in enumerate(times_ms)]
    return {"base_peak_bytes": int(base_gib * GIB), "points": points,
            "native": native}


STEP_MEMORY = {"device": "test", "rows": [], "curves": {
    "vgg16:fp32": curve(10.3, [77.3, 70.9, 67.5], {"peak_bytes": 15 * GIB, "conv_ms": 79.0}),
    "resnet50:amp": curve(10.5, [16.3, 16.2], {}),  # no native point: one series only
}}


def model_row(model, compiled, ratio, variant="plans", cap=None, call=1, ready=(9.0, 2.0)):
    return {"model": model, "precision": "amp", "compiled": compiled, "cap_gib": cap,
            "variant": variant, "call": call, "ratio": ratio, "batch": 128,
            "native_ready_to_fast_s": ready[0], "converted_ready_to_fast_s": ready[1]}


TORCH_MODELS = {"device": "test", "rows": [
    model_row("resnet50", False, 0.99, call=1),
    model_row("resnet50", False, 1.01, call=5),  # the later call of the same row is drawn
    model_row("resnet50", "default", 1.02, ready=(None, None)),
    model_row("vgg16", False, 1.6, cap=10.5),  # capped: not a plain row
    model_row("densenet121", False, 1.0, variant="library"),  # not a converted row
]}


@unittest.skipIf(matplotlib is None, "matplotlib is not installed (Debian: python3-matplotlib)")
class PlotTest(unittest.TestCase):
    def draw(self, script, data):
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "results.json")
            with open(source, "w") as f:
                json.dump(data, f)
            svg = os.path.join(tmp, "img", "out.svg")
            drawn = []
            for _ in range(2):
                done = subprocess.run([sys.executable, os.path.join(BENCH, script), "plot",
                                       "--json", source, "--svg", svg],
                                      capture_output=True, text=True, timeout=120)
                self.assertEqual(done.returncode, 0, done.stderr)
                with open(svg, "rb") as f:
                    drawn.append(f.read())
            self.assertEqual(drawn[0], drawn[1], "the same JSON draws the same bytes")
            self.assertLess(len(drawn[0]), 100 * 1024)
            root = ET.fromstring(drawn[0])
            self.assertTrue(root.tag.endswith("svg"), root.tag)
            return sorted(e.get("id") for e in root.iter()
                          if (e.get("id") or "").startswith("series-"))

    def test_step_memory_draws_each_curve_and_native_point(self):
        self.assertEqual(self.draw("step_memory.py", STEP_MEMORY),
                         ["series-curve-resnet50:amp", "series-curve-vgg16:fp32",
                          "series-native-vgg16:fp32"])

    def test_torch_models_draws_ratio_and_start_times(self):
        series = self.draw("torch_models.py", TORCH_MODELS)
        self.assertEqual(sorted(set(series)),
                         ["series-ratio", "series-ready-converted", "series-ready-native"])

    def test_torch_models_picks_plain_rows_latest_call(self):
        import plots
        rows = plots.model_rows(TORCH_MODELS)
        self.assertEqual(list(rows), ["resnet50 AMP, eager", "resnet50 AMP, compiled"])
        self.assertEqual(rows["resnet50 AMP, eager"]["call"], 5)

    def test_bad_json_is_named_not_a_traceback(self):
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "results.json")
            with open(source, "w") as f:
                json.dump({"curves": {}}, f)
            done = subprocess.run([sys.executable, os.path.join(BENCH, "step_memory.py"), "plot",
                                   "--json", source, "--svg", os.path.join(tmp, "x.svg")],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(done.returncode, 2)
            self.assertIn("no curves", done.stderr)
            self.assertNotIn("Traceback", done.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "x.svg")))


if __name__ == "__main__":
    unittest.main()
