"""The step's time-memory curve (issue 21), pure: from a step's memory profile and the kernels'
plans at their liveness limits, the predicted convolution time of the step at each peak-memory
budget, as points, a table and an SVG picture. ucudnn.torch.step_curve() gathers the inputs; no
I/O and no torch here.

A budget is the bytes allowed above the step's peak without workspace; each kernel's limit is its
headroom at its point of the step plus the budget (liveness_limits). A point's peak is
what the plans chosen would reach: the largest of the step's peak without workspace and, over the
step's calls, the memory in use at the call plus its output plus its plan's workspace."""

import html

# The default budgets above the peak without workspace: none, then 1 MiB to 16 GiB by powers of
# two; None is "unlimited" (each kernel's limit is UNLIMITED_BYTES).
DEFAULT_BUDGETS = [0] + [1 << (20 + i) for i in range(15)] + [None]
UNLIMITED_BYTES = 1 << 40  # the contract's largest per-kernel limit (1 TiB)


def base_peak(profile):
    """The step's peak without workspace (bytes, as the profile's counter reads them)."""
    return max((in_use + output for _, in_use, output in profile["calls"]), default=0)


# The smallest limit a kernel is asked with: no workspace (the library reads 0 as "the configured
# limit", so 0 cannot say none).
NO_WORKSPACE = 1


def liveness_limits(profile, above_peak, floor=0, quantize=True):
    """Each kernel's workspace limit from the step's memory profile: what it may use without
    raising the step's peak without workspace (the largest in-use-plus-output of any op), plus
    `above_peak` bytes the user allows over that peak. A kernel that runs at several points of
    the step (repeated blocks) gets the smallest. With `quantize`, a limit is rounded down to a
    power of two (at least above_peak), so that a network's kernels ask with few distinct limits;
    never below `floor`. {shape key: limit}."""
    if not profile["calls"]:
        return {}
    peak = base_peak(profile)
    limits = {}
    for key, in_use, output in profile["calls"]:
        headroom = max(0, peak - in_use - output)
        limit = headroom + above_peak
        limits[key] = min(limits.get(key, limit), limit)
    if quantize:
        for key, limit in limits.items():
            rounded = 1 << (limit.bit_length() - 1) if limit > 0 else 0
            limits[key] = max(rounded, min(limit, above_peak))
    # At least one byte: no workspace. The library reads a limit of 0 as its configured one.
    return {key: max(limit, floor, NO_WORKSPACE) for key, limit in limits.items()}


def budget_limits(profile, budgets):
    """{budget: {shape key: limit}}: each budget's liveness limits (None: unlimited, each limit at
    most UNLIMITED_BYTES, the contract's largest)."""
    limits = {}
    for budget in budgets:
        above = UNLIMITED_BYTES if budget is None else budget
        limits[budget] = {key: min(limit, UNLIMITED_BYTES)
                          for key, limit in liveness_limits(profile, above).items()}
    return limits


def checked_budgets(budgets, who):
    """`budgets` as a list (None: DEFAULT_BUDGETS); ValueError naming `who` unless each is bytes
    >= 0 or None (unlimited)."""
    budgets = list(DEFAULT_BUDGETS if budgets is None else budgets)
    for budget in budgets:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or
                                   budget < 0):
            raise ValueError(f"{who}: a budget is bytes >= 0 or None (unlimited), got {budget!r}")
    return budgets


def above_peak_within(profile, above_peak, allowance):
    """`above_peak` lowered, where needed, so that the step's peak without workspace plus it stays
    within `allowance` bytes (what the process may allocate at most; None: no bound). Never below
    0: a step whose peak without workspace already exceeds the allowance gets 0 and each kernel
    only its headroom."""
    if allowance is None:
        return above_peak
    return max(0, min(above_peak, allowance - base_peak(profile)))


def curve_points(profile, budgets, limits_of, plan_of):
    """One point per budget: {"budget_bytes" (None: unlimited), "peak_bytes", "predicted_ms",
    "ucudnn_calls", "framework_calls", "complete", "pareto"}. `limits_of(budget)`: {shape key:
    limit}; `plan_of(key, limit)`: (state, predicted ms, workspace bytes) of the kernel's plan at
    that limit, state "planned" or "framework" (its predicted time PyTorch's own), anything else
    when it has no plan (the point is then incomplete: its time counts the calls that have one).
    Every call of the step counts (a kernel that runs twice, twice). Pareto: no point of a smaller
    or equal peak is as fast."""
    peak0 = base_peak(profile)
    points = []
    for budget in budgets:
        limits = limits_of(budget)
        point = {"budget_bytes": budget, "peak_bytes": peak0, "predicted_ms": 0.0,
                 "ucudnn_calls": 0, "framework_calls": 0, "complete": True}
        for key, in_use, output in profile["calls"]:
            state, ms, workspace = plan_of(key, limits[key])
            if state not in ("planned", "framework"):
                point["complete"] = False
                continue
            point["predicted_ms"] += ms
            if state == "planned":
                point["ucudnn_calls"] += 1
                point["peak_bytes"] = max(point["peak_bytes"], in_use + output + workspace)
            else:
                point["framework_calls"] += 1
        points.append(point)
    mark_pareto(points)
    return points


def mark_pareto(points):
    """Sets each point's "pareto": complete, and faster than every complete point of a smaller or
    equal peak (ties: the smaller peak, then the earlier point, stays)."""
    order = sorted(range(len(points)), key=lambda i: (points[i]["peak_bytes"], i))
    best = None
    for i in order:
        point = points[i]
        point["pareto"] = point["complete"] and (best is None or point["predicted_ms"] < best)
        if point["pareto"]:
            best = point["predicted_ms"]


def _mib(value):
    return f"{value / 2**20:,.0f}"


def format_table(curve):
    """A markdown table of `curve` (ucudnn.torch.step_curve's result), with the native point's line
    when it has one."""
    lines = ["| budget above peak MiB | predicted peak MiB | predicted conv ms | ucudnn calls "
             "| PyTorch's own calls | on the curve |",
             "|---:|---:|---:|---:|---:|---|"]
    for p in curve["points"]:
        budget = "unlimited" if p["budget_bytes"] is None else _mib(p["budget_bytes"])
        mark = "yes" if p["pareto"] else ("incomplete" if not p["complete"] else "")
        lines.append(f"| {budget} | {_mib(p['peak_bytes'])} | {p['predicted_ms']:.3f} | "
                     f"{p['ucudnn_calls']} | {p['framework_calls']} | {mark} |")
    native = curve.get("native")
    if native:
        lines.append(f"| native | {_mib(native['peak_bytes'])} | {native['conv_ms']:.3f} | - | - "
                     "| measured |")
    return "\n".join(lines) + "\n"


def format_svg(curve, title, width=640, height=400):
    """A self-contained SVG: predicted convolution time of the step against its peak memory (MiB),
    the Pareto points joined, the others hollow, the native point a red cross when known."""
    points = [p for p in curve["points"] if p["complete"]]
    native = curve.get("native")
    xs = [p["peak_bytes"] for p in points] + ([native["peak_bytes"]] if native else [])
    ys = [p["predicted_ms"] for p in points] + ([native["conv_ms"]] if native else [])
    left, right, top, bottom = 70, 20, 40, 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle">{html.escape(title)}</text>']
    if not xs:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no complete '
                   'point</text></svg>')
        return "\n".join(out) + "\n"
    x0, x1 = min(xs), max(xs)
    y0, y1 = 0.0, max(ys) * 1.05 or 1.0
    x1 = x1 if x1 > x0 else x0 + 1

    def sx(x):
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def sy(y):
        return height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)

    out.append(f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" '
               f'y2="{height - bottom}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>')
    for i in range(5):
        x = x0 + (x1 - x0) * i / 4
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{sx(x):.1f}" y="{height - bottom + 16}" '
                   f'text-anchor="middle">{_mib(x)}</text>')
        out.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.1f}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 12}" '
               'text-anchor="middle">peak memory of the step (MiB)</text>')
    out.append(f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(top + height - bottom) / 2})">'
               'predicted convolution time (ms)</text>')
    front = sorted((p for p in points if p["pareto"]), key=lambda p: p["peak_bytes"])
    if len(front) > 1:
        path = " ".join(f"{sx(p['peak_bytes']):.1f},{sy(p['predicted_ms']):.1f}" for p in front)
        out.append(f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for p in points:
        fill = "#1f77b4" if p["pareto"] else "white"
        out.append(f'<circle cx="{sx(p["peak_bytes"]):.1f}" cy="{sy(p["predicted_ms"]):.1f}" '
                   f'r="4" fill="{fill}" stroke="#1f77b4"/>')
    if native:
        cx, cy = sx(native["peak_bytes"]), sy(native["conv_ms"])
        out.append(f'<path d="M{cx - 5:.1f},{cy - 5:.1f} L{cx + 5:.1f},{cy + 5:.1f} '
                   f'M{cx - 5:.1f},{cy + 5:.1f} L{cx + 5:.1f},{cy - 5:.1f}" stroke="red" '
                   'stroke-width="2"/>')
        out.append(f'<text x="{cx + 8:.1f}" y="{cy - 8:.1f}" fill="red">native</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
