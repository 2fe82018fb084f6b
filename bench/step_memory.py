#!/usr/bin/env python3
"""The step's memory against its time (issue 21): real models (bench/torch_models.py's runs, each
in a process of its own), native PyTorch against ucudnn.torch planned with per-kernel budgets
from the step's liveness (prepare(budget="liveness")), unlimited and under process memory caps
from native's unlimited steady peak down to the step's peak without workspace + 2% (the curve's
base peak; the converted 64 MiB plan's where lower or where the curve failed; none, and the row's
"caps_skipped" says why, where native's peak holds no workspace), and the step's
predicted time-memory curve (torch_models.py curve --check: its predictions against the measured
step's convolution time too).

    step_memory.py --server h:p --out DIR --rows resnet50:fp32 resnet50:amp [--caps 3]
                   [--max-batch-cap-gib 24 [--max-batch-range 256:320] [--max-batch-step 8]
                    [--only-max-batch]]
    step_memory.py plot [--json bench/results/h100/step_memory.json] [--svg docs/img/step_memory.svg]

DIR/step_memory.json: {"device", "rows": [{"model", "precision", "batch", "native_cap_gib"
(null: unlimited), "native_ms", "native_peak_mib", "converted_ms", "converted_peak_mib",
"converted_64mib_peak_mib", ...}], "curves": {"MODEL:PRECISION": curve}}, with DIR/curve_*.svg.
Peaks are PyTorch's counter (max_memory_allocated); the device-level peaks are extra keys.
With --max-batch-cap-gib, "max_batch" rows too: the largest batch (a multiple of
--max-batch-step, default 8) each side trains at under that process cap, and its images per
second.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_models  # noqa: E402

# The tightest cap: the step's peak without workspace times this (the "+ 2%").
TIGHTEST_MARGIN = 1.02


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="planner HOST:PORT")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", nargs="+", required=True, metavar="MODEL:PRECISION")
    parser.add_argument("--caps", type=int, default=3,
                        help="cap levels from native's unlimited peak down to the tightest")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--wait-s", type=float, default=60.0,
                        help="how long a converted run waits for its plans")
    parser.add_argument("--run-timeout-s", type=float, default=240.0)
    parser.add_argument("--runs-dir", default="", help="each run's JSON and runs.log "
                        "(default: --out)")
    parser.add_argument("--max-batch-cap-gib", type=float, default=0.0,
                        help="also find the largest batch each side trains at under this cap")
    parser.add_argument("--max-batch-range", default="", metavar="LOW:HIGH",
                        help="the batches the search probes (multiples of --max-batch-step; "
                        "default the step to 4x the model's batch): each probe is a training "
                        "run, and a converted one at a new batch waits for new plans")
    parser.add_argument("--max-batch-step", type=int, default=8,
                        help="the search's batches are multiples of this (1 for 3-D models, whose "
                        "batches are a few volumes)")
    parser.add_argument("--no-curve", action="store_true",
                        help="no time-memory curve (torch_models.py curve --check): the caps go "
                        "down to the converted 64 MiB plan's peak; spares a run that times every "
                        "kernel at every limit (minutes for a 3-D model)")
    parser.add_argument("--only-max-batch", action="store_true",
                        help="just the largest-batch search (with --max-batch-cap-gib): no rows, "
                        "no curves")
    parser.add_argument("--memory-trace", action="store_true",
                        help="the converted liveness runs trace their step's memory against "
                        "their profile (torch_models.py run --memory-trace)")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    if args.only_max_batch and args.max_batch_cap_gib <= 0:
        parser.error("--only-max-batch needs --max-batch-cap-gib")
    for row in args.rows:
        try:
            torch_models.parse_row(row)
        except ValueError as e:
            parser.error(str(e))
    if args.caps < 1:
        parser.error("--caps must be >= 1")
    args.batch_range = None
    if args.max_batch_range:
        low, _, high = args.max_batch_range.partition(":")
        try:
            args.batch_range = (int(low), int(high))
        except ValueError:
            parser.error(f"--max-batch-range {args.max_batch_range!r}: expected LOW:HIGH")
        if not 1 <= args.max_batch_step <= args.batch_range[0] <= args.batch_range[1]:
            parser.error(f"--max-batch-range {args.max_batch_range!r}: expected "
                         f"{args.max_batch_step} (--max-batch-step) <= LOW <= HIGH")
    if args.max_batch_step < 1:
        parser.error("--max-batch-step must be >= 1")
    return args


# Native's steady peak must exceed the step's peak without workspace by more than this (the
# allocator's rounding) for a cap between them to take a workspace away from PyTorch's own.
WORKSPACE_AT_PEAK_MIB = 16


def step_peak_mib(result):
    """A run's steady allocated peak (the steps after the first ones: no benchmark or prepare()
    transient), else its whole peak; None where the run failed."""
    return result.get("steady_max_memory_allocated_mib") or result.get("max_memory_allocated_mib")


def no_cap_range(native_peak_mib, lowest_peak_mib):
    """Why no cap can bind PyTorch's own where native's steady peak holds no workspace beyond the
    step's peak without it (the workspace-hungry kernels run below the peak: nnU-Net's fp32
    U-Net on an H200), else None."""
    if native_peak_mib - lowest_peak_mib > WORKSPACE_AT_PEAK_MIB:
        return None
    return (f"native's steady peak ({native_peak_mib:.0f} MiB) holds no workspace beyond the "
            f"step's peak without it ({lowest_peak_mib:.0f} MiB): no cap between them takes a "
            "workspace away from PyTorch's own")


def cap_levels(native_peak_mib, lowest_peak_mib, count):
    """`count` caps (GiB) from just above native's unlimited peak (TIGHTEST_MARGIN over it: a
    cap at the peak itself leaves the allocator no slack) down to `lowest_peak_mib` + 2% (the
    step's peak without workspace), evenly spaced; one cap when the two peaks meet."""
    top = native_peak_mib * TIGHTEST_MARGIN
    bottom = min(native_peak_mib, lowest_peak_mib) * TIGHTEST_MARGIN
    if count == 1 or top - bottom < 1:
        return [bottom / 1024]
    step = (top - bottom) / (count - 1)
    return [(top - i * step) / 1024 for i in range(count)]


def converted_args(args):
    """A converted process's options: the planner, no plan cache, and prepare() waiting for the
    plans (torch_models.warm_options)."""
    return [f"--option=server={args.server}", "--option=cache_path=off"] + (
        torch_models.warm_options(args.wait_s))


def largest_batch(fits, low, high, step=8):
    """The largest multiple of `step` in [low, high] for which fits(batch) is true, by bisection
    (fits is taken to be monotone: true up to some batch, false above); None when fits(low) is
    false. Each probe is a training run, so few of them."""
    low, high = low // step, high // step
    if low < 1 or not fits(low * step):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle * step):
            low = middle
        else:
            high = middle - 1
    return low * step


def max_batch_row(args, row):
    """Native and converted (liveness) under the --max-batch-cap-gib cap: each side's largest
    batch and images per second there."""
    model, precision = torch_models.parse_row(row)[:2]
    default = torch_models.MODELS[model][1]
    common = ["--model", model, "--precision", precision, "--device", args.device,
              "--image-size", str(args.image_size), "--cap-gib", str(args.max_batch_cap_gib),
              "--steps", str(args.steps)]
    sides = {"native": [],
             "converted": converted_args(args) + ["--mode", "ucudnn", "--budget", "liveness"]}
    entry = {"model": model, "precision": precision, "cap_gib": args.max_batch_cap_gib}
    for name, extra in sides.items():
        runs = {}

        def fits(batch):
            runs[batch] = torch_models.run_process(
                args, f"{model}_{precision}_{name}_maxbatch{batch}",
                ["run"] + common + extra + ["--batch", str(batch)])
            return "median_step_ms" in runs[batch]
        step = args.max_batch_step
        best = largest_batch(fits, *(args.batch_range or (step, max(step, 4 * default))), step)
        entry[f"{name}_max_batch"] = best
        entry[f"{name}_images_per_s"] = (
            best / runs[best]["median_step_ms"] * 1e3 if best else None)
        entry[f"{name}_probes"] = sorted(runs)
        if best and "calls_per_step" in runs[best]:
            # At a batch the cluster has no timings of, the converted side runs PyTorch's own
            # until its plans arrive: say what ran.
            entry[f"{name}_calls_per_step"] = runs[best]["calls_per_step"]
    return entry


def side(result, prefix):
    """A run's figures under `prefix` ("native", "converted"), or its error."""
    if "error" in result:
        return {f"{prefix}_error": result["error"]}
    return {f"{prefix}_ms": result["median_step_ms"],
            f"{prefix}_peak_mib": result.get("max_memory_allocated_mib"),
            f"{prefix}_steady_peak_mib": result.get("steady_max_memory_allocated_mib"),
            f"{prefix}_device_peak_mib": result.get("device_peak_mib"),
            f"{prefix}_calls_per_step": {k: v for k, v in result.get("calls_per_step", {}).items()
                                         if v},
            # A converted run's step route and why (a capped job decides its own: the
            # uncapped job's answer is not the capped one's).
            f"{prefix}_route": torch_models.route_of(result)}


def run_row(args, row, curves):
    model, precision = torch_models.parse_row(row)[:2]
    tag = f"{model}_{precision}"
    common = ["--model", model, "--precision", precision, "--device", args.device,
              "--image-size", str(args.image_size)] + (
        ["--batch", str(args.batch)] if args.batch else [])
    converted = common + converted_args(args)

    def run(name, extra):
        return torch_models.run_process(args, f"{tag}_{name}",
                                        ["run", "--steps", str(args.steps)] + extra)

    native = run("native", common)
    curves.setdefault("_device", native.get("device_name"))
    liveness_run = converted + ["--mode", "ucudnn", "--budget", "liveness"] + (
        ["--memory-trace"] if args.memory_trace else [])
    fixed = run("converted_64mib", converted + ["--mode", "ucudnn", "--budget", "fixed",
                                                "--option=workspace_bytes=64MiB"])
    liveness = run("converted_liveness", liveness_run)
    batch = native.get("batch") or torch_models.MODELS[model][1]
    base = {"model": model, "precision": precision, "batch": batch,
            "converted_64mib_peak_mib": fixed.get("max_memory_allocated_mib"),
            "converted_64mib_ms": fixed.get("median_step_ms")}
    rows = [dict(base, native_cap_gib=None, **side(native, "native"),
                 **side(liveness, "converted"))]
    if not args.no_curve:
        curve = torch_models.run_process(
            args, f"{tag}_curve", ["curve", "--check"] + converted + [
                "--native-peak-mib", str(native.get("max_memory_allocated_mib", 0)),
                "--svg", os.path.join(args.out, f"curve_{tag}.svg")])
        # The curve, and its predictions against the measured step (torch_models.check_curve).
        curves[row] = dict(curve.get("curve", curve), check=curve.get("check"))
    native_peak, lowest = step_peak_mib(native), step_peak_mib(fixed)
    if native_peak is None or lowest is None:
        return rows  # a run failed, or no CUDA device: no caps
    if curves.get(row, {}).get("base_peak_bytes"):  # the curve run's, absent where it failed
        lowest = min(lowest, curves[row]["base_peak_bytes"] / 2**20)
    why = no_cap_range(native_peak, lowest)
    if why:
        rows[0]["caps_skipped"] = why
        return rows
    for cap in cap_levels(native_peak, lowest, args.caps):
        capped = ["--cap-gib", f"{cap:.3f}"]
        rows.append(dict(base, native_cap_gib=round(cap, 3),
                         **side(run(f"native_cap{cap:.2f}", common + capped), "native"),
                         **side(run(f"converted_liveness_cap{cap:.2f}",
                                    liveness_run + capped),
                                "converted")))
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["plot"]:
        import plots
        return plots.main("step_memory", argv[1:])
    args = parse_args(argv)
    args.runs_dir = args.runs_dir or args.out
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.runs_dir, exist_ok=True)
    rows, curves, max_batch = [], {}, []

    def write():
        device = curves.get("_device") or args.device
        with open(os.path.join(args.out, "step_memory.json"), "w") as f:
            json.dump({"device": device, "rows": rows, "max_batch": max_batch,
                       "curves": {k: v for k, v in curves.items() if k != "_device"}}, f,
                      indent=1)

    for row in [] if args.only_max_batch else args.rows:
        rows += run_row(args, row, curves)
        write()
    if args.max_batch_cap_gib > 0:
        for row in args.rows:
            max_batch.append(max_batch_row(args, row))
            write()
    for r in rows:
        cap = "unlimited" if r["native_cap_gib"] is None else f"{r['native_cap_gib']:.2f} GiB"
        print(f"{r['model']}:{r['precision']} {cap}: native {r.get('native_ms')} ms "
              f"{r.get('native_peak_mib')} MiB, converted {r.get('converted_ms')} ms "
              f"{r.get('converted_peak_mib')} MiB", file=sys.stderr)
    return 1 if any("native_error" in r or "converted_error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
