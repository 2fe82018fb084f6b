"""python -m ucudnn curve: the time-memory curve of a job's recorded step, from the cluster's
planner, for an operator deciding what memory buys what speed.

    python -m ucudnn curve (or ucudnn-curve) PROFILE [--server HOST:PORT] [--wait-s 30] [--budgets-mib 0,64,...]
                           [--native-peak-mib M --native-ms T] [--json FILE] [--svg FILE]

PROFILE is a step's memory profile as the job recorded it (ucudnn.profile.save of
ucudnn.torch.memory_profile): its kernels, the memory in use at each and the framework whose own
convolution is a candidate. Run it on a node with the job's GPU and cuDNN (the plans are its
device's). Prints the curve as a markdown table: for each budget above the step's peak without
workspace, the predicted peak, the predicted convolution time of the step, and whether the point
is on the Pareto curve; --json and --svg write it too. Exit 0 with a curve, 1 when the library
or its backend is not there, 2 for bad arguments or a bad profile.
"""

import argparse
import json
import os
import sys

from . import _lib
from . import curve as _curve
from . import profile as _profile


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m ucudnn curve",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", help="the step's memory profile (ucudnn.profile.save)")
    parser.add_argument("--server", default=os.environ.get("UCUDNN_SERVER", ""),
                        help="planner HOST:PORT (default: $UCUDNN_SERVER)")
    parser.add_argument("--wait-s", type=float, default=30.0,
                        help="how long to wait for the plans (a worker may benchmark meanwhile)")
    parser.add_argument("--budgets-mib", default="",
                        help="budgets above the peak, MiB, comma-separated; 'unlimited' for none "
                        "(default: 0, 1 to 16384 by powers of two, unlimited)")
    parser.add_argument("--native-peak-mib", type=float, default=0.0,
                        help="the native step's measured peak, to mark it (with --native-ms)")
    parser.add_argument("--native-ms", type=float, default=0.0,
                        help="the native step's convolution time, ms")
    parser.add_argument("--json", default="", help="also write the curve as JSON here")
    parser.add_argument("--svg", default="", help="also draw the curve into this SVG file")
    args = parser.parse_args(argv)
    if args.wait_s < 0:
        parser.error("--wait-s must be >= 0")
    if (args.native_peak_mib > 0) != (args.native_ms > 0):
        parser.error("--native-peak-mib and --native-ms go together (both > 0)")
    try:
        args.budgets = parse_budgets(args.budgets_mib)
    except ValueError as e:
        parser.error(str(e))
    return args


def parse_budgets(text):
    """'0,64,unlimited' -> [0, 64 MiB, None]; '' -> None (the default budgets)."""
    if not text.strip():
        return None
    budgets = []
    for item in text.split(","):
        item = item.strip()
        if item == "unlimited":
            budgets.append(None)
            continue
        try:
            mib = float(item)
        except ValueError:
            raise ValueError(f"--budgets-mib: {item!r} is not MiB or 'unlimited'") from None
        if not mib >= 0:
            raise ValueError(f"--budgets-mib: {item!r} is not >= 0")
        budgets.append(int(mib * 2**20))
    return budgets


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        profile, backend, framework = _profile.load(args.profile)
    except _profile.ProfileError as e:
        print(f"python -m ucudnn curve: {e}", file=sys.stderr)
        return 2
    try:
        library = _lib.load()
        options = [f"UCUDNN_SERVER={args.server}", "UCUDNN_CACHE_PATH=off",
                   "UCUDNN_WORKSPACE_MODE=per_kernel"]
        if framework:
            options.append(f"UCUDNN_FRAMEWORK={framework}")
        context = _lib.Context(library, backend, ";".join(options))
    except (_lib.LibraryNotFound, _lib.ShapeError, OSError) as e:
        print(f"python -m ucudnn curve: {e}", file=sys.stderr)
        return 1
    native = ({"peak_bytes": int(args.native_peak_mib * 2**20), "conv_ms": args.native_ms}
              if args.native_ms > 0 else None)
    try:
        result = _profile.plan_curve(context, profile, _curve.checked_budgets(
            args.budgets, "python -m ucudnn curve"), int(args.wait_s * 1000), native)
    finally:
        context.close()
    print(_curve.format_table(result))
    if not all(p["complete"] for p in result["points"]):
        print("python -m ucudnn curve: some kernels have no plan within --wait-s (no server, or "
              "their timings are still being benchmarked): an incomplete point counts only the "
              "calls with one", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.svg:
        with open(args.svg, "w") as f:
            f.write(_curve.format_svg(result, f"{os.path.basename(args.profile)}: predicted "
                                      "convolution time of a step"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
