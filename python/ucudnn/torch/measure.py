"""Timing PyTorch's own convolution against the plans, kernel by kernel."""

import collections
import time

import torch

from .. import _lib
from .options import TORCH_DTYPES
from .routing import beats_framework
from .conv import SUCCESS, memory_format_of, problem_tensors, shape_key, torch_convolution
from .declare import declare_at_limits, kernel_infos, kernels, plans_coming, unique_shapes


def measure_framework_times(runtime, context, device, shapes, share=True):
    """Measures PyTorch's own time and workspace for the kernels whose plan does not know them
    and, with `share`, submits them (their plans are made again: PyTorch's own is a candidate
    only where its workspace fits the kernel's limit). (shared, [(shape, framework ms,
    workspace bytes)]), or None: nothing to do."""
    unknown = [shape for shape, info in zip(shapes, kernel_infos(runtime, context, shapes))
               if info["framework_ms"] <= 0]
    if not unknown:
        return None
    timings = [time_framework(shape, device, workspace=True) for shape in unknown]
    shared = share
    if share:
        try:
            context.submit_framework_timings(unknown, [t[0] for t in timings],
                                             [t[1] for t in timings], [t[2] for t in timings])
        except _lib.ShapeError:
            shared = False  # no server or token: this process decides alone (decide_locally)
    return shared, [(shape, t[0], t[2]) for shape, t in zip(unknown, timings)]


def time_framework_and_plan(runtime, context, device, shapes, wait_ms, measure_framework):
    """prepare()'s kernels of one context once the planner has answered them: with
    `measure_framework`, PyTorch's own timed for those whose plan does not know it and submitted
    (the plans are made again with it as a candidate), then up to `wait_ms` for the new answers;
    where the times could not be shared (no server or token), they decide for this process alone
    (decide_locally). Nothing is timed while a plan of `shapes` is still coming (PLANS_COMING: no
    answer within wait_ms, or a problem still being benchmarked): a worker may be benchmarking
    it on this very device, and times taken meanwhile are the shared device's (VGG-16 fp32's: 2x
    on an H100); they are timed when the step's route is decided (pending.py). (kernels timed,
    whether their times were shared: False where they decided locally)."""
    if not measure_framework or plans_coming(runtime, context, shapes):
        return 0, True
    timed = measure_framework_times(runtime, context, device, shapes,
                                    share=runtime.has_server())
    if timed is None:
        return 0, True
    shared, measured = timed
    context.wait_for_plans(wait_ms)
    if not shared:
        decide_locally(runtime, context, measured)
    return len(measured), shared


def framework_fit_limit(limit, info, benchmarks, ceiling=None):
    """Under liveness budgets, the limit a kernel gets so that PyTorch's own fits it, or None
    where its limit stays: where its plan (`info`, Context.kernel_info() at `limit`) is slower
    than PyTorch's own (beats_framework) and PyTorch's workspace is known and exceeds the limit.
    Native's step takes that workspace at the same point of the step, so the converted step's
    peak stays within native's there, and the layer is never slower than native for want of the
    memory native uses (VGG-16 fp32's backward-filter 512x14x14: PyTorch's own 0.654 ms with
    115 MiB, the plan within its 42 MiB liveness limit 0.852 ms; docs/results.md). Never
    above `ceiling`, the bytes the process may take above the step's peak without workspace:
    under a memory cap native's own cannot take its unlimited workspace either, and the
    profiled step's headroom is not the job's to the byte (the optimizer's state comes after
    it), so only memory the process has beyond that peak is given."""
    workspace = info.get("framework_workspace_bytes", 0)
    if (info["state"] != "planned" or info["framework_ms"] <= 0 or workspace <= limit or
            (ceiling is not None and workspace > ceiling) or
            beats_framework(info["predicted_ms"], info["framework_ms"], benchmarks)):
        return None
    return workspace


def fit_framework(runtime, context, shapes, ceiling):
    """prepare(budget="liveness"): each kernel's limit raised to framework_fit_limit() where it
    applies, within `ceiling` (StepBudget.ceiling(); rank 0's allowance) (in the runtime's
    kernel_limits, which every rank computes alike from the cluster's timings) and those kernels
    asked for again; {shape key: raised limit}."""
    raised = {}
    for shape in shapes:
        limit = runtime.limit_of(shape)
        fitted = framework_fit_limit(limit, context.kernel_info(context.kernel(shape, limit)),
                                      runtime.framework_benchmarks, ceiling)
        if fitted is not None:
            runtime.kernel_limits[shape_key(shape)] = raised[shape_key(shape)] = fitted
    declare_at_limits(runtime, context, [s for s in shapes if shape_key(s) in raised])
    return raised


def decide_locally(runtime, context, measured):
    """PyTorch's own convolution for the kernels whose plan does not beat the measured time
    (beats_framework: by FRAMEWORK_MARGIN, or within it where ties go to ucudnn and the plan
    needs no more workspace than PyTorch's own), where PyTorch's workspace fits the kernel's
    limit: the planner's rule, applied in this process alone (a plan that comes later runs: its
    problem was being benchmarked, and PyTorch's time then was the shared device's)."""
    for shape, framework_ms, workspace in measured:
        limit = runtime.limit_of(shape)
        if limit and workspace > limit:
            continue
        kernel = context.kernel(shape, limit)
        info = context.kernel_info(kernel)
        benchmarks = runtime.framework_benchmarks
        if benchmarks and not beats_framework(info["predicted_ms"], framework_ms) and (
                (context.kernel_workspace_size(kernel) or 0) > workspace):
            benchmarks = False  # a tie goes to ucudnn only within PyTorch's own workspace
        # A kernel without a plan runs PyTorch's own until one comes, which then runs.
        if info["state"] == "planned" and not beats_framework(info["predicted_ms"],
                                                               framework_ms, benchmarks):
            runtime.local_framework.add(shape_key(shape))


def operands_of(shape, device):
    """Random (not zero) operands of `shape`'s forward problem: x, w, dy in its dtype and layout
    (5-d for a 3-D shape), and its geometry."""
    dtype = TORCH_DTYPES[shape.data_type]
    x_size, w_size, y_size, stride, padding, dilation = problem_tensors(shape)
    memory_format = memory_format_of(len(x_size), shape.layout == _lib.NHWC)

    def rand(size):
        return torch.randn(*size, device=device, dtype=dtype).contiguous(
            memory_format=memory_format)

    return rand(x_size), rand(w_size), rand(y_size), (stride, padding, dilation, shape.groups)


def framework_call(shape, x, w, dy, geometry):
    """PyTorch's own op of `shape` as a closure: a transposed layer's forward is the backward-data
    of its forward problem, which is what PyTorch's own runs in cuDNN for it."""
    stride, padding, dilation, groups = geometry
    op = shape.op
    if op == _lib.FORWARD:
        return lambda: torch_convolution(x, w, None, stride, padding, dilation, groups, False,
                                         None)
    mask = [op == _lib.BACKWARD_DATA, op == _lib.BACKWARD_FILTER, False]
    return lambda: torch.ops.aten.convolution_backward(
        dy, x, w, None, list(stride), list(padding), list(dilation), False, [0] * len(stride),
        groups, mask)


def framework_output(shape, operands):
    """PyTorch's own result of `shape` on `operands`: y, dx or dw."""
    x, w, dy, geometry = operands
    result = framework_call(shape, x, w, dy, geometry)()
    if shape.op == _lib.FORWARD:
        return result
    return result[0] if shape.op == _lib.BACKWARD_DATA else result[1]


def relative_error(got, expected):
    """||got - expected|| / ||expected||, in fp32."""
    expected = expected.float()
    return float((got.float() - expected).norm() / expected.norm().clamp_min(1e-30))


class TF32Setting:
    """PyTorch's cuDNN TF32 switch as the shape's math mode says, for a measurement."""

    def __init__(self, shape):
        self.allow = shape.math != _lib.MATH_FMA

    def __enter__(self):
        self.saved = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = self.allow

    def __exit__(self, *exc):
        torch.backends.cudnn.allow_tf32 = self.saved


# How long hold_device() keeps the device busy: the host issues a measurement's calls meanwhile.
_HOLD_MS = 20.0


_sleep_cycles_per_ms = {}


def hold_device(device):
    """Queues a kernel that keeps `device` busy for about _HOLD_MS (torch.cuda._sleep; nothing
    where the PyTorch has none)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    cycles = _sleep_cycles_per_ms.get(index)
    if cycles is None:
        # The clock rate in kHz is cycles per ms; 1.5 GHz where the property is missing.
        properties = torch.cuda.get_device_properties(index)
        cycles = _sleep_cycles_per_ms[index] = getattr(properties, "clock_rate", 0) or 1_500_000
    sleep(int(cycles * _HOLD_MS))


def time_call(call, device, repeats, flush=None):
    """(median ms, interquartile spread ms) of `call` alone, after warm-up (which includes
    PyTorch's own cuDNN benchmark at the first call). With `flush` (l2_flusher()), the device's
    L2 is overwritten before each timed call, untimed: its operands come from memory, as a
    step's do where they were written long before."""
    for _ in range(3):
        call()
    samples = []
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)]
        # Device time, as the worker measures a plan's: the calls queue up behind a sleeping
        # kernel while the host issues them, so the device runs them back to back and a small
        # kernel's time is not the host's time to launch it.
        hold_device(device)
        for start, end in events:
            if flush is not None:
                flush.zero_()
            start.record()
            call()
            end.record()
        torch.cuda.synchronize(device)
        samples = sorted(start.elapsed_time(end) for start, end in events)
    else:
        for _ in range(repeats):
            begin = time.perf_counter()
            call()
            samples.append((time.perf_counter() - begin) * 1e3)
        samples.sort()
    quarter = len(samples) // 4
    return samples[len(samples) // 2], samples[-1 - quarter] - samples[quarter]


def host_us_per_call(call, device, repeats):
    """The host's time to issue one call of `call` (us, the mean of `repeats` issued back to back
    after warm-up): on CUDA behind a sleeping kernel, so that no call waits for the device and
    what is timed is the host's work alone (what a host-bound step pays per call)."""
    for _ in range(3):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        hold_device(device)
    begin = time.perf_counter()
    for _ in range(repeats):
        call()
    elapsed = time.perf_counter() - begin
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return elapsed / repeats * 1e6


def time_framework(shape, device, repeats=15, operands=None, workspace=False, flush=None):
    """PyTorch's own time for `shape` at its full batch: (median ms, spread ms), and with
    `workspace` its workspace bytes third; on `operands` (operands_of()) or new ones; `flush` as
    time_call's."""
    x, w, dy, geometry = operands or operands_of(shape, device)
    call = framework_call(shape, x, w, dy, geometry)
    with TF32Setting(shape), torch.no_grad():
        ms, spread = time_call(call, device, repeats, flush)
        return (ms, spread, framework_workspace(call, device)) if workspace else (ms, spread)


def framework_workspace(call, device):
    """The bytes one call of PyTorch's own (after its benchmark) takes from the caching allocator
    beyond its results: cuDNN's workspace. 0 off CUDA. Resets the device's peak counter."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    results = call()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    results = results if isinstance(results, (tuple, list)) else (results,)
    kept = sum(t.numel() * t.element_size() for t in results if torch.is_tensor(t))
    return max(0, peak - before - kept)


def l2_flusher(device):
    """A buffer twice the size of the device's L2 cache, which time_call zeroes before each timed
    call; None off CUDA or where this PyTorch does not report the L2's size."""
    if device.type != "cuda":
        return None
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return torch.empty(2 * size, dtype=torch.uint8, device=device) if size else None


def compare_kernels(model, *sample_inputs, repeats=10, autocast=None, device_type="cuda",
                    flush_l2=False):
    """Where the time goes: every kernel of a step of `model`, PyTorch's own op against the
    library's plan, each timed alone at the full batch (after prepare()). With `flush_l2`, the
    L2 is overwritten before each timed call (a kernel timed back to back finds its operands
    there; in a step, a backward's were written long before). A list of dicts, each with
    "calls": how many times the step runs the kernel, "l2_flushed": whether the L2 was
    flushed (never off CUDA), and "framework_host_us"/"plan_host_us": the host's time to issue
    one call of each (host_us_per_call; the plan's is the library's call alone)."""
    rows = []
    if autocast is not None:
        with torch.autocast(device_type, dtype=autocast):
            recorded = kernels(model, *sample_inputs)
    else:
        recorded = kernels(model, *sample_inputs)
    for (runtime, device), shapes in recorded.items():
        context = runtime.context(device)
        flush = l2_flusher(device) if flush_l2 else None
        calls = collections.Counter(shape_key(shape) for shape in shapes)
        for shape in unique_shapes(shapes):
            kernel = context.kernel(shape, runtime.limit_of(shape))
            operands = operands_of(shape, device)
            x, w, dy, _ = operands
            a, b, out = {_lib.FORWARD: (x, w, torch.empty_like(dy)),
                         _lib.BACKWARD_DATA: (dy, w, torch.empty_like(x)),
                         _lib.BACKWARD_FILTER: (x, dy, torch.empty_like(w))}[shape.op]
            framework_ms, framework_spread = time_framework(shape, device, repeats, operands,
                                                             flush=flush)
            with TF32Setting(shape), torch.no_grad():
                framework_host_us = host_us_per_call(framework_call(shape, *operands), device,
                                                     repeats)
            info = context.kernel_info(kernel)
            needed = context.kernel_workspace_size(kernel)
            plan_ms = first_error = plan_error = plan_host_us = None
            expected = framework_output(shape, operands)
            if needed is not None:
                workspace = torch.empty(max(needed, 1), dtype=torch.uint8, device=device)
                stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" \
                    else None

                def plan_call():
                    status = runtime.library.ShapeKernelRun(
                        kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream,
                        workspace.data_ptr(), needed)
                    if status != SUCCESS:
                        raise _lib.ShapeError("ucudnnShapeKernelRun", status, "")

                try:
                    # The first call runs through every check, later ones on the bound plan:
                    # each one's output against PyTorch's own.
                    plan_call()
                    first_error = relative_error(out, expected)
                    plan_ms, _ = time_call(plan_call, device, repeats, flush)
                    plan_host_us = host_us_per_call(plan_call, device, repeats)
                    plan_call()
                    plan_error = relative_error(out, expected)
                except _lib.ShapeError:
                    plan_ms = None
            rows.append({
                "shape": dict(zip([n for n, _ in _lib.ConvShape._fields_], shape_key(shape))),
                "framework_ms": framework_ms, "framework_spread_ms": framework_spread,
                "plan_ms": plan_ms, "plan_workspace_bytes": needed,
                "framework_host_us": framework_host_us, "plan_host_us": plan_host_us,
                "plan_first_call_rel_error": first_error, "plan_rel_error": plan_error,
                "calls": calls[shape_key(shape)], "l2_flushed": flush is not None, **{
                    f"info_{k}": v for k, v in info.items()},
            })
    return rows
