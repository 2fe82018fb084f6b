"""The step's route, the same in every job (decision.py's rules): read from the machine's record,
or measured in alternating rounds (the plans' routes against every layer on PyTorch's own) and
recorded; then applied to every converted layer, frozen for the job."""

import logging
import platform
import time

import torch

from .. import _cache
from . import decision
from .autograd import autocast_dtype
from .declare import PLANS_COMING
from .handle import process_rank, rank0s
from .module import runtimes_of
from .options import INFINITY
from .records import read_records
from .steps import model_kept, training_pass
from .outputs import inputs_device, inputs_signature


_log = logging.getLogger("ucudnn.torch")

# The record file (UCUDNN_ROUTE_CACHE; "off" for none).
CACHE_VARIABLE = "UCUDNN_ROUTE_CACHE"


def records_path():
    """Where the route decisions are kept on this machine, or None for nowhere."""
    return _cache.cache_path(CACHE_VARIABLE, "routes.json")


def converted_layers(model):
    """The model's converted layers that a step runs (their LayerConvs with ops), in module
    order: [(module, [LayerConv, ...])]."""
    layers = []
    for module in model.modules():
        convs = [c for c in getattr(module, "_ucudnn_convs", {}).values()
                 if c is not None and c.ops]
        if convs:
            layers.append((module, convs))
    return layers


def memory_cap(device):
    """The process's memory cap on `device` (set_per_process_memory_fraction, where PyTorch reads
    it back), rounded to 1/1000, or None without one. Under a cap PyTorch's own may run slower
    algorithms (its benchmark skips those whose workspace it cannot allocate) while plans
    micro-batch to fit: the uncapped step's answer is not the capped one's."""
    get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if device.type != "cuda" or get_fraction is None:
        return None
    fraction = get_fraction(device.index if device.index is not None else
                            torch.cuda.current_device())
    return None if fraction >= 1.0 else round(fraction, 3)


def step_key(model, sample_inputs, loss_fn):
    """What the step's speed depends on: the host, the GPU, PyTorch's and cuDNN's versions, the
    model's structure, the inputs (shapes, dtypes, strides), autocast, the loss, PyTorch's
    benchmark flag, the process's memory cap and the adapter's options. Not the layers' routes:
    they are the answer."""
    device = inputs_device(sample_inputs)
    inputs = inputs_signature(sample_inputs)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    options = [(sorted((k, str(v)) for k, v in r.config.items() if k not in ("token",)),
                r.workspace_limit, r.min_layer_gain_us) for r in runtimes_of(model)]
    cap = memory_cap(device)
    return decision.step_key([
        platform.node(), gpu, torch.__version__, torch.backends.cudnn.version(),
        decision.structure_hash(model), inputs, autocast_dtype(device.type == "cuda"),
        getattr(loss_fn, "__qualname__", repr(loss_fn)) if loss_fn is not None else "sum",
        torch.backends.cudnn.benchmark, options] + ([] if cap is None else [("memory_cap", cap)]))


def set_routes(model, layer_routes):
    """Each converted layer on its route ("framework": PyTorch's own whole; "plan": its plans),
    frozen: no recheck moves it. Every layer first leaves the native route (Runtime.route_native
    holds a layer there until its recheck, which a frozen route never reaches), so that a layer
    set to its plans runs them at its next call and one set to PyTorch's own goes back to the
    native route at its next call."""
    for runtime in runtimes_of(model):
        runtime.restore_native()
    for (module, convs), layer_route in zip(converted_layers(model), layer_routes):
        framework = layer_route == "framework"
        for conv in convs:
            conv.framework_layer = framework
            conv.layer_recheck = INFINITY
        module._ucudnn_framework_layer = framework


def forget(model):
    """No route decided for the step (prepare() and a pending step decide again): each layer's
    rule (LayerConv.decide_layer) is then its own, not the step's route."""
    for runtime in runtimes_of(model):
        runtime.decided_route, runtime.decided_source, runtime.decided_why = None, None, ""


def apply(model, route, layer_routes, why, source):
    """Every converted layer on its route for the rest of the job (set_routes): under the step's
    route "native" all run PyTorch's own; under "plans" each its `layer_routes` entry. A shape
    first seen later follows the step's route (LayerConv.decide_layer)."""
    for runtime in runtimes_of(model):
        runtime.decided_route = route
        runtime.decided_source = source
        runtime.decided_why = why
    if route == decision.NATIVE:
        layer_routes = ["framework"] * len(layer_routes)
    set_routes(model, layer_routes)
    for (_, convs), layer_route in zip(converted_layers(model), layer_routes):
        for conv in convs:  # the rule's reason (decide_layer's) kept under the step's
            conv.why = (f"step route {route}: {why}" if route == decision.NATIVE
                        else f"step route {route}, layer {layer_route}: {conv.why}")


def decide_layers(model):
    """The plans in: each layer's decision (LayerConv.decide_layer) for the ops its step runs,
    also kept on the module for torch.compile, which then traces PyTorch's own convolution for a
    layer decided so (a module attribute: dynamo guards on it)."""
    now = time.monotonic()
    for module, convs in converted_layers(model):
        for conv in convs:
            conv.decide_layer(conv.ops, now)
        module._ucudnn_framework_layer = all(c.framework_layer for c in convs)


def rule_routes(model):
    """Each converted layer's route by its rule (LayerConv.decide_layer, already run): "framework"
    where the rule gave the layer PyTorch's own, or where no op of it has a plan, else "plan"
    (its plans run; PyTorch's time need not be known: the measured step weighs them); None while
    an op still waits for the planner's answer or for its problem's benchmark (PLANS_COMING): a
    route measured then would be recorded from part of the plans."""
    routes = []
    for _, convs in converted_layers(model):
        states = [conv.context.kernel_info(conv.kernels[op] or conv.declare(op))["state"]
                  for conv in convs for op in conv.ops]
        if any(state in PLANS_COMING for state in states):
            return None
        planned = "planned" in states and not all(c.framework_layer for c in convs)
        routes.append("plan" if planned else "framework")
    return routes


def measure_rounds(model, sample_inputs, loss_fn, plan_routes, rounds=decision.ROUNDS,
                   steps=decision.STEPS_PER_ROUND):
    """Each side's round medians (ms) of the step, the plans' routes and every layer on PyTorch's
    own, alternating which side goes first; a warm-up step of each side first (PyTorch's
    benchmark of the layers it runs, the plans' first calls). Fewer than `rounds` where the
    rounds so far settle it for PyTorch's own (decision.settled). The model is left as it was."""
    device = inputs_device(sample_inputs)
    cuda = device.type == "cuda"
    sides = {decision.PLANS: plan_routes, decision.NATIVE: ["framework"] * len(plan_routes)}
    measured = {decision.PLANS: [], decision.NATIVE: []}

    def run(side, count):
        set_routes(model, sides[side])
        times = []
        for _ in range(count):
            if cuda:
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            training_pass(model, sample_inputs, loss_fn)
            if cuda:
                torch.cuda.synchronize(device)
            times.append((time.perf_counter() - start) * 1e3)
        return times

    with model_kept(model):
        for side in sides:
            run(side, 1)
        for i in range(rounds):
            order = list(sides) if i % 2 == 0 else list(reversed(list(sides)))
            for side in order:
                times = sorted(run(side, steps))
                measured[side].append(times[len(times) // 2])
            if decision.settled(measured[decision.PLANS], measured[decision.NATIVE]):
                break  # the plans lost beyond the noise: no round left could make them win
    return measured[decision.PLANS], measured[decision.NATIVE]


def usable_record(model, sample_inputs, loss_fn):
    """(this machine's record of the step's route where one applies, else None; its key). Read
    once by prepare(): before it waits for plans (a step recorded native runs PyTorch's own
    whatever plans arrive, so its job waits for none), and for decide()."""
    for runtime in runtimes_of(model):
        runtime.restore_native()  # the key reads the model's structure, not its routes now
    path = records_path()
    key = step_key(model, sample_inputs, loss_fn) if path else None
    record = read_records(path).get(key) if key else None
    usable = decision.valid(record) and len(record["layers"]) == len(converted_layers(model))
    return (record if usable else None), key


def decide(model, sample_inputs, loss_fn, measure=True, only_recorded=False, known=None):
    """prepare()'s route for the step: the machine's record where one applies; else, with every
    plan in, measured (`measure`) and recorded; else PyTorch's own for every layer while a plan
    is still coming (decided again between steps once they are in: pending.py). Applied to every
    layer. Returns {"route", "source"
    ("recorded", "measured", "no plan saves time", "plans missing"), "why", "layers"} (rank 0's
    answer in every rank of a torch.distributed job). `known`: usable_record()'s answer where
    the caller has read it already."""
    record, key = known if known is not None else usable_record(model, sample_inputs, loss_fn)
    layers = converted_layers(model)
    device = inputs_device(sample_inputs)
    path = records_path()
    usable = record is not None
    # Rank 0's record decides for every rank: 0 none, 1 native, 2 plans.
    code = rank0s(0 if not usable else 1 if record["route"] == decision.NATIVE else 2, device)
    if code:
        if usable and (code == 2) == (record["route"] == decision.PLANS):
            route, layer_routes, why = record["route"], record["layers"], record["why"]
        else:  # rank 0 has a record this rank has not (another host): its route, this rule
            route = decision.PLANS if code == 2 else decision.NATIVE
            layer_routes = rule_routes(model) or ["framework"] * len(layers)
            why = "rank 0's recorded route"
        apply(model, route, layer_routes, why, "recorded")
        return {"route": route, "source": "recorded", "why": why, "layers": list(layer_routes)}
    if only_recorded:
        return None  # no record: each layer's rule (prepare(wait_ms=0) on a cold machine)
    plan_routes = rule_routes(model)
    if plan_routes is None:
        why = ("plans still coming (the planner's answers, or the cluster's benchmarks of the "
               "step's problems): PyTorch's own everywhere until every plan is in, then the "
               "step is measured and decided between two steps (pending.py)")
        answer = decision.NATIVE, ["framework"] * len(layers), "plans missing", why
    elif "plan" not in plan_routes:
        why = "no layer's plans save time against PyTorch's own"
        answer = decision.NATIVE, plan_routes, "no plan saves time", why
    elif not measure:
        why = "the plans' routes by each layer's rule (not measured)"
        answer = decision.PLANS, plan_routes, "rule", why
    else:
        plans_ms, native_ms = measure_rounds(model, sample_inputs, loss_fn, plan_routes)
        route, why = decision.choose(plans_ms, native_ms)
        route = decision.PLANS if rank0s(int(route == decision.PLANS), device) else decision.NATIVE
        answer = route, plan_routes, "measured", why
        if key and process_rank() == 0:
            decision.write_record(path, key, decision.make_record(
                route, why, plan_routes, plans_ms, native_ms), _log)
    route, layer_routes, source, why = answer
    apply(model, route, layer_routes, why, source)
    _log.info("ucudnn.torch: the step's route is %s (%s): %s", route, source, why)
    return {"route": route, "source": source, "why": why, "layers": list(layer_routes)}

