#!/usr/bin/env python3
"""The table of scripts/peer_bench.sh: reads its runs directory (manifest.jsonl, one line per
step, and each step's output) and writes one JSON document and a markdown table.

  python3 bench/peer_table.py --runs DIR --json OUT.json --markdown OUT.md [--budget-s 540]

One row per network, precision and per-kernel cap: the cold plan's time (the first complete plan
at that network and precision), legacy cuDNN alone and ucudnn (both from the example's
per_kernel result at that cap), PyTorch cudnn.benchmark at the cap and unlimited (the floor),
and the ratios: PyTorch at the cap / ucudnn (>1: ucudnn faster), legacy / ucudnn, and ucudnn /
the floor, and the largest workspace one of PyTorch's kernels took at the cap (which shows
whether the cap bound it). PyTorch is capped by CUDNN_CONV_WSCAP_DBG (kind "torch") or by a GPU
memory limit (kind "torch_mem", peer_bench.sh --peer-cap memory|both): each has its columns. A value that is missing says why (skipped for the budget, failed, timed out). Steps
that were skipped are listed under the table.
"""
import argparse
import json
import os
import sys


def load_manifest(runs):
    entries = []
    path = os.path.join(runs, "manifest.jsonl")
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {number}: not JSON: {e}") from None
    return entries


def load_output(runs, entry):
    """The step's JSON output (the last JSON object line of what it printed), or None."""
    if entry is None or entry.get("status") != "ok" or not entry.get("file"):
        return None
    try:
        with open(os.path.join(runs, entry["file"])) as f:
            text = f.read()
    except OSError:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    for line in reversed(text.splitlines()):  # a summary line after other output
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def why_missing(entry):
    if entry is None:
        return "not run"
    status = entry.get("status", "?")
    if status == "ok":
        return "no result in its output"
    if status == "skipped":
        return "skipped: " + entry.get("reason", "budget")
    return f"{status} ({entry.get('reason', '')})".replace(" ()", "")


def example_times(output, cap_mib):
    """(legacy cuDNN ms, ucudnn ms) of the example's per_kernel result at the cap."""
    for result in (output or {}).get("results", []):
        if (result.get("workspace_mode") == "per_kernel"
                and result.get("workspace_bytes") == cap_mib << 20):
            return result.get("without_library_ms"), result.get("with_library_ms")
    return None, None


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None


def build(entries, runs):
    by_key = {}
    for e in entries:
        by_key[(e["kind"], e["network"], e["dtype"], e["layout"], e["cap_mib"])] = e
    groups = []  # (network, dtype, layout) in run order
    caps = {}
    for e in entries:
        group = (e["network"], e["dtype"], e["layout"])
        if group not in groups:
            groups.append(group)
        if e["cap_mib"] is not None:
            caps.setdefault(group, [])
            if e["cap_mib"] not in caps[group]:
                caps[group].append(e["cap_mib"])
    rows = []
    for group in groups:
        network, dtype, layout = group
        plan = next((e for (k, n, d, l, _), e in by_key.items()
                     if k == "plan" and (n, d, l) == group), None)
        floor_entry = by_key.get(("torch", network, dtype, layout, None))
        floor = load_output(runs, floor_entry)
        floor_ms = (floor or {}).get("step_ms_median")
        for cap in caps.get(group, []):
            example_entry = by_key.get(("example", network, dtype, layout, cap))
            torch_entry = by_key.get(("torch", network, dtype, layout, cap))
            legacy_ms, ucudnn_ms = example_times(load_output(runs, example_entry), cap)
            legacy_plan_entry = by_key.get(("example_legacy", network, dtype, layout, cap))
            _, legacy_plan_ms = example_times(load_output(runs, legacy_plan_entry), cap)
            torch_out = load_output(runs, torch_entry) or {}
            torch_ms = torch_out.get("step_ms_median")
            mem_entry = by_key.get(("torch_mem", network, dtype, layout, cap))
            mem_out = load_output(runs, mem_entry) or {}
            torch_mem_ms = mem_out.get("step_ms_median")
            row = {
                "network": network, "dtype": dtype, "layout": layout, "cap_mib": cap,
                "cold_plan_s": plan["seconds"] if plan and plan.get("status") == "ok" else None,
                "legacy_ms": legacy_ms, "ucudnn_ms": ucudnn_ms, "torch_ms": torch_ms,
                "torch_unlimited_ms": floor_ms,
                "torch_over_ucudnn": ratio(torch_ms, ucudnn_ms),
                "legacy_over_ucudnn": ratio(legacy_ms, ucudnn_ms),
                "ucudnn_over_floor": ratio(ucudnn_ms, floor_ms),
                "ucudnn_legacy_only_ms": legacy_plan_ms,
                "legacy_only_over_mixed": ratio(legacy_plan_ms, ucudnn_ms),
                "torch_max_workspace_mib": torch_out.get("max_kernel_workspace_mib"),
                "torch_mem_ms": torch_mem_ms,
                "torch_mem_over_ucudnn": ratio(torch_mem_ms, ucudnn_ms),
                "torch_mem_max_workspace_mib": mem_out.get("max_kernel_workspace_mib"),
                "missing": {},
            }
            for name, value, entry in (("cold_plan_s", row["cold_plan_s"], plan),
                                       ("ucudnn_ms", ucudnn_ms, example_entry),
                                       ("torch_ms", torch_ms, torch_entry),
                                       ("torch_unlimited_ms", floor_ms, floor_entry),
                                       ("torch_mem_ms", torch_mem_ms, mem_entry)):
                if name == "torch_mem_ms" and mem_entry is None:
                    continue  # not asked for (--peer-cap wscap)
                if value is None:
                    row["missing"][name] = why_missing(entry)
            rows.append(row)
    skipped = [e for e in entries if e.get("status") == "skipped"]
    return rows, skipped


def cell(value, fmt):
    return "n/a" if value is None else fmt.format(value)


def markdown(rows, skipped, budget_s):
    out = ["| network | precision | cap MiB | cold plan s | legacy cuDNN ms | ucudnn ms | "
           "PyTorch at cap ms | PyTorch unlimited ms | PyTorch/ucudnn | legacy/ucudnn | "
           "ucudnn/floor | ucudnn legacy-only ms | legacy-only/mixed | PyTorch max ws MiB | "
           "PyTorch memory-capped ms | PyTorch memory-capped/ucudnn | its max ws MiB |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(("| {} | {} {} |" + " {} |" * 15)
                   .format(
            r["network"], r["dtype"], r["layout"], r["cap_mib"],
            cell(r["cold_plan_s"], "{:.1f}"), cell(r["legacy_ms"], "{:.2f}"),
            cell(r["ucudnn_ms"], "{:.2f}"), cell(r["torch_ms"], "{:.2f}"),
            cell(r["torch_unlimited_ms"], "{:.2f}"), cell(r["torch_over_ucudnn"], "{:.2f}x"),
            cell(r["legacy_over_ucudnn"], "{:.2f}x"), cell(r["ucudnn_over_floor"], "{:.3f}"),
            cell(r["ucudnn_legacy_only_ms"], "{:.2f}"), cell(r["legacy_only_over_mixed"], "{:.3f}"),
            cell(r["torch_max_workspace_mib"], "{:.0f}"), cell(r["torch_mem_ms"], "{:.2f}"),
            cell(r["torch_mem_over_ucudnn"], "{:.2f}x"),
            cell(r["torch_mem_max_workspace_mib"], "{:.0f}")))
    notes = []
    for r in rows:
        for name, why in sorted(r["missing"].items()):
            notes.append(f"- {r['network']} {r['dtype']} {r['layout']} {r['cap_mib']} MiB: "
                         f"{name} n/a: {why}")
    if notes:
        out += ["", "Missing values:"] + notes
    if skipped:
        out += ["", f"Skipped to keep within the budget of {budget_s} s:"]
        for e in skipped:
            cap = "unlimited" if e["cap_mib"] is None else f"{e['cap_mib']} MiB"
            out.append(f"- {e['kind']} {e['network']} {e['dtype']} {e['layout']} {cap}: "
                       f"{e.get('reason', '')}")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, help="peer_bench.sh's runs directory")
    ap.add_argument("--json", required=True, help="write the collected results here")
    ap.add_argument("--markdown", required=True, help="write the table here")
    ap.add_argument("--budget-s", type=int, default=540)
    args = ap.parse_args(argv)
    try:
        entries = load_manifest(args.runs)
    except (OSError, ValueError) as e:
        print(f"peer_table.py: {e}", file=sys.stderr)
        return 1
    for number, e in enumerate(entries, 1):
        missing = [k for k in ("kind", "network", "dtype", "layout", "cap_mib", "status")
                   if k not in e]
        if missing:
            print(f"peer_table.py: manifest line {number}: missing {', '.join(missing)}",
                  file=sys.stderr)
            return 1
    rows, skipped = build(entries, args.runs)
    with open(args.json, "w") as f:
        json.dump({"budget_s": args.budget_s, "rows": rows, "steps": entries}, f, indent=1)
    with open(args.markdown, "w") as f:
        f.write(markdown(rows, skipped, args.budget_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
