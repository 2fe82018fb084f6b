"""Pictures of the benchmarks' results for docs/results.md: the step's time-memory curve
(bench/step_memory.py's JSON) and the real-model rows (bench/torch_models.py's JSON), as SVG.

Each script's `plot` subcommand calls in here. Matplotlib (Debian's python3-matplotlib) draws
with its 'svg' backend, with a fixed hash salt and no date, so that the same JSON gives the same
file byte for byte and a commit shows only real changes. Every data series carries an SVG id
starting with "series-", so that a test can count them.
"""

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULTS = {
    "step_memory": ("bench/results/h100/step_memory.json", "docs/img/step_memory.svg"),
    "torch_models": ("bench/results/h100/torch_models.json", "docs/img/torch_models.svg"),
}
MIB = 1 << 20


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ValueError("matplotlib is missing (Debian: apt-get install python3-matplotlib; "
                         "scripts/lib.sh installs it)") from None
    matplotlib.use("svg")
    matplotlib.rcParams["svg.hashsalt"] = "ucudnn"  # deterministic ids
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: small files
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")


def _label(key):
    model, _, precision = key.partition(":")
    return f"{model} {precision.upper() if precision == 'amp' else precision}"


def plot_step_memory(data, path):
    """One panel per curve: predicted convolution time against the step's peak, the Pareto points
    joined, native's peak and summed PyTorch time marked."""
    curves = data.get("curves") or {}
    if not curves:
        raise ValueError("no curves in the step-memory JSON (its 'curves' object is empty)")
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), squeeze=False)
    for ax, (key, curve) in zip(axes[0], curves.items()):
        points = [p for p in curve["points"] if p.get("complete", True)]
        pareto = [p for p in points if p.get("pareto")] or points
        ax.plot([p["peak_bytes"] / MIB / 1024 for p in pareto],
                [p["predicted_ms"] for p in pareto], "o-", markersize=3,
                label="ucudnn plans (Pareto)", gid=f"series-curve-{key}")
        native = curve.get("native") or {}
        if native.get("peak_bytes") and native.get("conv_ms"):
            ax.plot([native["peak_bytes"] / MIB / 1024], [native["conv_ms"]], "s", color="C3",
                    label="native PyTorch", gid=f"series-native-{key}")
        ax.set_title(_label(key), fontsize=10)
        ax.set_xlabel("step peak, GiB")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("predicted convolution ms per step")
    axes[0][0].legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)


def model_rows(data):
    """The rows the picture shows: each model, precision and mode's plain row (variant 'plans',
    no cap), the latest call of each, in the JSON's order."""
    rows = {}
    for row in data.get("rows", []):
        if row.get("cap_gib") is not None or row.get("variant") not in ("plans", None):
            continue
        if row.get("ratio") is None:
            continue
        compiled = row.get("compiled")
        mode = "eager" if not compiled else "compiled" if compiled == "default" else compiled
        key = f"{_label(row['model'] + ':' + row['precision'])}, {mode}"
        if key not in rows or row.get("call", 0) >= rows[key].get("call", 0):
            rows[key] = row
    return rows


def plot_torch_models(data, path):
    """Two panels: the step's ratio native/converted (above 1: converted faster), and seconds from
    the model on the device to its first fast step, native against converted."""
    rows = model_rows(data)
    if not rows:
        raise ValueError("no plain rows (variant 'plans', no cap) in the torch-models JSON")
    plt = _pyplot()
    labels = list(rows)
    y = list(range(len(labels)))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.32 * len(labels) + 1.4), sharey=True)
    left.barh(y, [rows[k]["ratio"] for k in labels], color="C0", gid="series-ratio")
    left.axvline(1.0, color="black", linewidth=0.8)
    left.set_xlim(0.8, max(1.3, max(rows[k]["ratio"] for k in labels) + 0.05))
    left.set_xlabel("step time native / converted (>1: converted faster)")
    left.set_yticks(y)
    left.set_yticklabels(labels, fontsize=8)
    left.invert_yaxis()
    ready = [(i, rows[k]) for i, k in enumerate(labels)
             if rows[k].get("native_ready_to_fast_s") and rows[k].get("converted_ready_to_fast_s")]
    height = 0.38
    right.barh([i - height / 2 for i, _ in ready], [r["native_ready_to_fast_s"] for _, r in ready],
               height, color="C3", label="native", gid="series-ready-native")
    right.barh([i + height / 2 for i, _ in ready],
               [r["converted_ready_to_fast_s"] for _, r in ready], height, color="C0",
               label="converted", gid="series-ready-converted")
    right.set_xscale("log")
    right.set_xlabel("seconds from model on device to first fast step (log)")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
    _save(fig, path)
    plt.close(fig)


PLOTTERS = {"step_memory": plot_step_memory, "torch_models": plot_torch_models}


def add_arguments(parser, kind):
    json_default, svg_default = DEFAULTS[kind]
    parser.add_argument("--json", default=os.path.join(REPO, json_default),
                        help=f"the results to draw (default: {json_default})")
    parser.add_argument("--svg", default=os.path.join(REPO, svg_default),
                        help=f"the picture to write (default: {svg_default})")


def run(kind, args):
    """The `plot` subcommand: reads args.json, writes args.svg; 0, or 2 with the reason."""
    try:
        with open(args.json) as f:
            data = json.load(f)
        PLOTTERS[kind](data, args.svg)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"[plot] cannot draw {args.json}: {error}", file=sys.stderr)
        return 2
    print(f"[plot] wrote {args.svg}", file=sys.stderr)
    return 0


def main(kind, argv):
    """For a script without subcommands of its own (bench/step_memory.py plot ...)."""
    parser = argparse.ArgumentParser(prog=f"{kind}.py plot",
                                     description=f"draw {DEFAULTS[kind][0]} as SVG")
    add_arguments(parser, kind)
    return run(kind, parser.parse_args(argv))
