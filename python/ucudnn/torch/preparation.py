"""prepare(): declares and plans every kernel of a training step and decides each layer's route."""

import time
import warnings

import torch

from .decision import NATIVE
from .options import BUDGETS
from .handle import restore_framework_search
from .module import UcudnnConvolution, layer_convs, require_per_kernel, runtimes_of
from .declare import compiled_original, declare_at_limits, kernels, unique_shapes
from .budgets import allowance_limit, auto_budget, check_step_budget, liveness_budgets
from .host_bound import HOST_BOUND_SEARCHES, host_bound_answer
from .measure import fit_framework, time_framework_and_plan
from .pending import wait_for_route
from . import route as step_route
from .outputs import inputs_on_cuda
from .steps import release_cached_memory, reserved_memory


# prepare(route=...): "auto" (the machine's record; else measured on CUDA once the plans are in;
# else each layer's rule), "measure" (measured on any device, for tests and CPU jobs), "rule"
# (each layer by its rule, nothing measured or recorded).
ROUTE_CHOICES = ("auto", "measure", "rule")


def prepare(model, *sample_inputs, wait_ms=0, measure_framework=True, budget="auto",
            above_peak=None, loss_fn=None, host_bound=None, host_bound_search="benchmark",
            route="auto"):
    """Declares every kernel of a training step (kernels()) and plans them now: in the total
    modes, the whole network under one budget. `sample_inputs` at the training batch size.
    `wait_ms`: how long to wait for the server's answers (0: plans arrive in the background).
    With `measure_framework` (and wait_ms > 0), PyTorch's own time and workspace are measured
    for the kernels the cluster has no measurement of (this resets the device's peak memory
    counter), once their problems are benchmarked (where one is not yet, when the step's route is
    decided: pending.py), and submitted so that every
    job of this framework on this device plans with them (PyTorch's own is a candidate only
    where its workspace fits the kernel's limit); without a server or token, the measurement
    decides for this process alone. `budget`: "fixed" (each
    kernel's limit is the configured one), "liveness" (per-kernel mode, CUDA: each kernel may use
    what is free at its point of the step, memory_profile() and liveness_limits(), plus
    `above_peak` bytes over the step's peak without workspace; default: the configured
    workspace_bytes, else 64 MiB; less where the process may not take that much, by its memory
    cap or the device's free memory; `loss_fn` makes the profiled step's loss from the output;
    a kernel whose plan is slower than PyTorch's own only for want of PyTorch's workspace then
    gets that workspace, which native's step takes at the same point; the model's first
    forwards after this correct the budgets by the memory the job holds beyond the profiled
    step, the optimizer's state: StepBudget),
    "allowance" (per-kernel mode, CUDA: every kernel may use the memory the process may take, as
    PyTorch's own benchmark does), or "auto" (the default): liveness where it applies (per-kernel
    mode, CUDA inputs; not for a step this machine recorded native, whose layers run no plan),
    allowance for a compiled model there, else fixed; a step that cannot be
    profiled without a loss_fn (an output that is not a tensor) falls back to fixed with a
    warning. `host_bound`: whether the step is host-bound, where a plan's
    device-time saving does not shorten it (then every layer whose plans only save device time
    runs PyTorch's own); None (the default): measured on CUDA once the plans are in
    (step_is_host_bound(), rank 0's answer for every rank of a torch.distributed job).
    A torch.compile'd model (prepare(torch.compile(model), ...), as a compiled job should call
    it) runs no eager training step here, whose memory and host time are not its step's: its
    kernels are declared by a forward of the original module that keeps no activation, "auto"
    budgets are allowance (an eager step's liveness is not the compiled step's, and a plan kept
    under a fixed limit where PyTorch's own needs more ran slower than native: ConvNeXt-T 0.98x
    on an H100), and `host_bound` defaults to True (a compiled step does not gain from a
    plan's device-time saving what its custom op costs on the host: every layer whose plans
    only save device time is traced as PyTorch's own; host_bound=False keeps them).
    `route`: how the step's route is decided (route.py, decision.py): "auto" (the default) takes
    the machine's record of this step (UCUDNN_ROUTE_CACHE) where there is one; else, on CUDA with
    wait_ms > 0 and every plan in, measures the step with the plans' routes (each layer by its
    rule) against every layer on PyTorch's own, in alternating rounds, keeps the plans only where
    they are faster beyond the rounds' noise, and records the answer, so that every later job of
    the same step takes the same route without measuring. `wait_ms` waits for the planner's
    answers, not for the cluster's benchmarks: while a plan is still coming (a model new to the
    cluster), every layer runs PyTorch's own, and the step's route is measured and decided
    between two training steps once every plan is in (pending.py). "measure": the same on any
    device; "rule": each layer by its rule alone, nothing measured or recorded. An explicit `host_bound`, a compiled
    model and host_bound_search="heuristics" keep their own rules.
    `host_bound_search`: "benchmark" (the default) leaves PyTorch's cuDNN benchmark flag as the
    job set it; "heuristics" measures whether the step is host-bound and, where it is, turns the
    benchmark off for the process (torch.backends.cudnn.benchmark = False, restored by the next
    prepare() or unconvert()), which spares a host-bound job's first step the search of every
    kernel; the machine's next job checks the step with cuDNN's heuristic choices
    (heuristics_keep_pace), so the first jobs of a step may run different algorithms.
    Returns {"kernels": declared, "measured": framework timings taken here, "budget": the budget
    used, "above_peak": the bytes over the step's peak that liveness budgets allowed (None under
    other budgets), "framework_fitted": the kernels whose liveness limit was raised to the
    workspace of PyTorch's own, faster than their plan (framework_fit_limit), "host_bound":
    step_is_host_bound()'s answer, or {"host_bound": the value given} ({"host_bound": True,
    "assumed": "compiled"} for a compiled model), or None when not
    measured (a host-bound answer's "framework_search": HOST_BOUND_CODES), "route": the step's
    route (route.decide(): {"route", "source", "why", "layers"}, None where not decided),
    "compiled": whether
    `model` was torch.compile's, "cudnn_benchmark": torch.backends.cudnn.benchmark after it,
    "seconds": {"budgets": the memory
    profile, "plans": declaring the kernels, the plans' answers and PyTorch's timings measured
    here, "host_bound": the steps that measure it (PyTorch's benchmark for the layers that run
    its own, the plans' first calls)}}."""
    if budget not in BUDGETS:
        raise ValueError(f"ucudnn.torch.prepare: budget must be one of {', '.join(BUDGETS)}, "
                         f"got {budget!r}")
    if route not in ROUTE_CHOICES:
        raise ValueError(f"ucudnn.torch.prepare: route must be one of {', '.join(ROUTE_CHOICES)}, "
                         f"got {route!r}")
    if host_bound_search not in HOST_BOUND_SEARCHES:
        raise ValueError(f"ucudnn.torch.prepare: host_bound_search must be one of "
                         f"{', '.join(HOST_BOUND_SEARCHES)}, got {host_bound_search!r}")
    restore_framework_search()  # this prepare() decides again
    original = compiled_original(model)
    compiled = original is not None
    model = original or model  # the eager module: its layers, its passes
    if not any(isinstance(m, UcudnnConvolution) for m in model.modules()):
        runtimes_of(model)  # ValueError unless convert() was called (it warned what it left)
        return {"kernels": 0, "measured": 0, "budget": None, "above_peak": None,
                "framework_fitted": 0, "host_bound": None, "route": None, "compiled": compiled,
                "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
                "seconds": {"budgets": 0.0, "plans": 0.0, "host_bound": 0.0}}
    step_budget = None
    budget_limit = None
    started = time.perf_counter()
    reserved_before = reserved_memory(sample_inputs)  # what the job cached before any pass
    model.__dict__.pop("_ucudnn_step_budget", None)
    model.__dict__.pop("_ucudnn_pending_route", None)
    # The machine's record of the step, read once (the route below applies it). A step recorded
    # native runs PyTorch's own whatever plans arrive: its plans are asked for (a later decision
    # may want them), not waited for, and no budget of theirs is worth profiling the step for.
    known = step_kernels = None
    if route != "rule" and not compiled and host_bound is None:
        # The step's kernels (a shape-only pass), which are also the layers a record is checked
        # against; the budgets below change the kernels' limits, not which kernels there are.
        step_kernels = kernels(model, *sample_inputs)
        known = step_route.usable_record(model, sample_inputs, loss_fn)
    record = known[0] if known is not None else None
    recorded_native = record is not None and record["route"] == NATIVE
    if budget == "auto":
        budget = auto_budget(model, sample_inputs)
        if budget == "liveness" and compiled:
            budget = "allowance"  # an eager step's liveness is not the compiled step's
        if budget == "liveness" and recorded_native:
            budget = "fixed"  # no plan runs: the profiling pass would only delay the first step
        if budget == "liveness":
            try:
                step_budget = liveness_budgets(model, sample_inputs, above_peak, loss_fn)
            except (AttributeError, TypeError) as e:
                warnings.warn(f"ucudnn.torch.prepare: the step could not be profiled ({e}); "
                              "each kernel gets the configured limit (give loss_fn)")
                budget = "fixed"
    elif budget == "liveness":
        step_budget = liveness_budgets(model, sample_inputs, above_peak, loss_fn)
    if budget == "allowance":
        require_per_kernel(model, "prepare: budget='allowance'")
        budget_limit = allowance_limit(sample_inputs)
    limits = step_budget.limits() if step_budget is not None else {}
    for runtime in runtimes_of(model):
        runtime.kernel_limits = limits
        runtime.lowered_limits = {}
        runtime.budget_limit = budget_limit
    for conv in layer_convs(model):
        conv.forget_kernels()  # declared again with the limits now in force
    budgeted = time.perf_counter()
    declared = measured = fitted = 0
    if step_kernels is None:
        step_kernels = kernels(model, *sample_inputs, compiled=compiled)
    plans_wait_ms = 0 if recorded_native else wait_ms
    declared_kernels = []
    for (runtime, device), shapes in step_kernels.items():
        context = runtime.context(device)
        if context is None:
            continue
        shapes = unique_shapes(shapes)
        declared_kernels.append((runtime, device, shapes))
        declared += len(shapes)
        declare_at_limits(runtime, context, shapes)
        if plans_wait_ms <= 0:
            continue
        # Up to wait_ms for the planner's answers, not for the cluster's benchmarks: a kernel
        # whose problem is still being benchmarked ("missing") runs PyTorch's own, and the step
        # switches to its route between steps once every plan is in (pending.py).
        context.wait_for_plans(wait_ms)
        timed, shared = time_framework_and_plan(runtime, context, device, shapes, wait_ms,
                                                measure_framework)
        measured += timed
        if shared and step_budget is not None:
            raised = fit_framework(runtime, context, shapes, step_budget.ceiling())
            step_budget.raised.update(raised)
            if raised:
                fitted += len(raised)
                context.wait_for_plans(wait_ms)
    if fitted:
        for conv in layer_convs(model):
            conv.forget_kernels()  # declared again at the raised limits
    planned = time.perf_counter()
    bound = None
    for runtime in runtimes_of(model):
        runtime.host_bound = False  # the rule alone, for the step measured below
    step_route.forget(model)  # this prepare() decides again
    on_device = inputs_on_cuda(sample_inputs)
    if host_bound is not None:
        bound = {"host_bound": bool(host_bound)}
    elif compiled:
        # Measured on H100 (session 24): under torch.compile a planned layer's custom op costs
        # more host time than its plans save (ConvNeXt-T AMP with 31 planned calls 0.94x,
        # RegNet-Y-1.6GF 0.84x); with every such layer traced as F.conv2d the graph is native's.
        # Plans kept for memory stay. Those rows predate the op's operands laid out in the
        # graph (custom_ops.in_call_layout), with which nnU-Net's U-Net kept its plans at 1.16x
        # native on an H200, but with 680 MiB more reserved (docs/results.md): not yet measured
        # again on 2-D models, so the rule stands.
        bound = {"host_bound": True, "assumed": "compiled"}
    elif wait_ms > 0 and on_device and host_bound_search == "heuristics":
        step_route.decide_layers(model)  # the step measured as it will run
        bound = host_bound_answer(model, sample_inputs, loss_fn, host_bound_search)
    for runtime in runtimes_of(model):
        runtime.host_bound = bool(bound and bound["host_bound"])
    if wait_ms > 0:
        step_route.decide_layers(model)
    decided = None
    if route != "rule" and bound is None:
        # One route for the step, the same in every job (route.py): the machine's record, else
        # measured where the plans are in (wait_ms) on the device, else each layer's rule.
        measurable = route == "measure" or (wait_ms > 0 and on_device)
        decided = step_route.decide(model, sample_inputs, loss_fn, measure=measurable,
                                    only_recorded=not measurable, known=known)
        if measurable and decided["source"] == "plans missing":
            # PyTorch's own until every plan is in, then decided between two steps.
            wait_for_route(model, declared_kernels, sample_inputs, loss_fn, wait_ms,
                           measure_framework)
    if step_budget is not None:
        # The job's first steps correct the budgets (StepBudget.check).
        step_budget.wait_ms = wait_ms
        model._ucudnn_step_budget = step_budget
        if check_step_budget not in model._forward_pre_hooks.values():
            model.register_forward_pre_hook(check_step_budget)
    release_cached_memory(sample_inputs, reserved_before)
    return {"kernels": declared, "measured": measured, "budget": budget,
            "above_peak": step_budget.above_peak() if step_budget is not None else None,
            "framework_fitted": fitted, "host_bound": bound, "route": decided,
            "compiled": compiled, "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "seconds": {"budgets": budgeted - started, "plans": planned - budgeted,
                        "host_bound": time.perf_counter() - planned}}


def wait_for_plans(model, timeout_ms):
    """Waits up to timeout_ms for the server's answers for every kernel seen; True when none is
    still waiting. For setup and tests, not inside a training step."""
    answered = True
    for runtime in runtimes_of(model):
        for context in runtime.contexts():
            answered = context.wait_for_plans(timeout_ms) and answered
    return answered
