"""stats() and report(): what ran where."""

from .. import _lib
from .module import CONVERTED_OF_NATIVE, UcudnnConvolution, runtimes_of


def stats(model):
    """The library's counters (ucudnn::ClientStats) summed over the model's contexts, with the
    calls the adapter sent to PyTorch's own convolution without asking the library (the route
    was known) added to fallback_calls (no plan) and framework_calls (the plan chose it), and
    "native_route_layers": how many layers are on the native route now (Runtime.route_native;
    their calls there are torch.nn's own and counted nowhere), "workspace_out_of_memory":
    the calls whose plan's workspace did not fit (each ran PyTorch's own; LayerConv.run), and
    "budget_replans": the times the job's steps changed prepare()'s liveness budgets
    (StepBudget); "route": the step's route and why ({"route": "plans" or "native", "source":
    how it was decided (route.decide's: "recorded", "measured", ...; "plans missing": PyTorch's
    own until every plan is in, then decided between two steps), "why"}; None before a
    prepare() decided one: route.py), and "layer_routes": how
    many converted layers are on each route ({"plan": n, "framework": n, "undecided": n}; each
    layer's own with its reason: routes())."""
    total = {name: 0 for name in _lib.STATS_FIELDS}
    total.setdefault("framework_calls", 0)
    total["native_route_layers"] = 0
    total["workspace_out_of_memory"] = 0
    total["budget_replans"] = 0
    for runtime in runtimes_of(model):
        for context in runtime.contexts():
            for name, value in context.stats().items():
                total[name] += value
        total["fallback_calls"] += runtime.skipped[0]
        total["framework_calls"] += runtime.skipped[1]
        total["native_route_layers"] += sum(type(m) in CONVERTED_OF_NATIVE
                                            for m in runtime.native_routed)
        total["workspace_out_of_memory"] += runtime.workspace_out_of_memory
        total["budget_replans"] += runtime.budget_replans
    decided = [r for r in runtimes_of(model) if r.decided_route is not None]
    total["route"] = ({"route": decided[0].decided_route, "source": decided[0].decided_source,
                       "why": decided[0].decided_why} if decided else None)
    counts = {"plan": 0, "framework": 0, "undecided": 0}
    for layer in routes(model):
        counts[layer["route"]] += 1
    total["layer_routes"] = counts
    return total


def routes(model):
    """Each converted layer's route and why, in module order: [{"layer": its name in the model,
    "route": "plan" (its plans run where it has them), "framework" (PyTorch's own, whole) or
    "undecided" (not called yet, or its plans still coming), "why"}]."""
    rows = []
    for name, module in model.named_modules():
        if not isinstance(module, UcudnnConvolution):
            continue
        convs = [c for c in module._ucudnn_convs.values() if c is not None]
        if not convs:
            rows.append({"layer": name, "route": "undecided", "why": "not called yet"})
            continue
        framework = all(c.framework_layer for c in convs)
        decided = framework or all(c.layer_recheck > 0.0 for c in convs)
        rows.append({"layer": name,
                     "route": "framework" if framework else "plan" if decided else "undecided",
                     "why": "; ".join(dict.fromkeys(c.why for c in convs))})
    return rows


def report(model):
    """Per kernel seen: its op and shape, and what the library knows of it (state, predicted and
    framework time); for benchmarks and debugging."""
    rows = []
    for module in model.modules():
        if not isinstance(module, UcudnnConvolution):
            continue
        for conv in module._ucudnn_convs.values():
            if conv is None:
                continue
            for op, kernel in enumerate(conv.kernels):
                if kernel is None:
                    continue
                rows.append({"op": op, "dims": conv.dims, "groups": conv.groups,
                             "route": "framework_layer" if conv.framework_layer else (
                                 "ask", "plan", "no_plan", "framework")[conv.routes[op]],
                             **conv.context.kernel_info(kernel)})
    return rows
