"""LayerConv: one converted layer at one input signature, its kernels, routes and calls into the
library."""

import warnings

import torch

from .. import _lib
from .. import curve as _curve
from .decision import NATIVE
from .options import DATA_TYPES, INFINITY
from .routing import (RECHECK_FRAMEWORK_S, RECHECK_NO_PLAN_S, ROUTE_ASK, ROUTE_FRAMEWORK,
                      ROUTE_NO_PLAN, ROUTE_PLAN, beats_framework)


SUCCESS = _lib.SUCCESS


CHANNELS_LAST = torch.channels_last


# What the hot path asks PyTorch, through the cheapest call each version has: these run per
# convolution call, and the public wrappers cost microseconds (torch.cuda.current_stream makes a
# Stream object, torch.backends.cudnn.allow_tf32 goes through a module property).
allow_tf32_now = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (
    lambda: torch.backends.cudnn.allow_tf32)


raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


current_device = getattr(torch._C, "_cuda_getDevice", None) or (
    lambda: torch.cuda.current_device())


def is_channels_last(t):
    return not t.is_contiguous() and t.is_contiguous(memory_format=CHANNELS_LAST)


def channels_last_call(x, weight):
    """PyTorch's cuDNN convolution's layout rule: channels-last when either operand is (the
    layout of a call's outputs, which the custom op's fake implementation must predict too)."""
    return is_channels_last(x) or is_channels_last(weight)


def math_mode(dtype, is_cuda, allow_tf32):
    if dtype != torch.float32:
        return _lib.MATH_TENSOR_OP
    # PyTorch's cuDNN math for fp32: TF32 allowed (default math) or strict fp32 (FMA).
    return _lib.MATH_FMA if is_cuda and not allow_tf32 else _lib.MATH_DEFAULT


def shape_key(shape):
    return tuple(getattr(shape, name) for name, _ in _lib.ConvShape._fields_)


class LayerConv:
    """One convolution of one module at one input signature (shape, dtype, device, layout, math):
    its geometry (padding already symmetric), output size, and per op the library's kernel
    handle, the route last learnt and the workspace its plan needs. Made once per signature
    (ConvCache), so that a call reads no shape and builds no ctypes structure."""

    __slots__ = ("runtime", "context", "run_kernel", "device", "index", "stride", "padding",
                 "dilation", "groups", "memory_format", "out_size", "dims", "data_type", "layout",
                 "math", "kernels", "routes", "recheck", "workspace_bytes", "local", "ops",
                 "framework_layer", "layer_recheck", "why")

    def __init__(self, runtime, context, x, weight, dtype, geometry, channels_last, math):
        self.runtime, self.context = runtime, context
        self.run_kernel = runtime.library.ShapeKernelRun
        self.device = x.device
        self.index = x.get_device() if x.is_cuda else -1
        self.stride, self.padding, self.dilation, self.groups = geometry
        self.memory_format = CHANNELS_LAST if channels_last else torch.contiguous_format
        self.layout = _lib.NHWC if channels_last else _lib.NCHW
        self.data_type = DATA_TYPES[dtype]  # the call's, after autocast
        self.math = math
        n, c, h, w = x.shape
        k, _, r, s = weight.shape
        self.dims = (n, c, h, w, k, r, s)
        self.out_size = output_size(self.dims, self.stride, self.padding, self.dilation)
        self.kernels = [None, None, None]  # by op
        self.routes = [ROUTE_ASK, ROUTE_ASK, ROUTE_ASK]
        self.recheck = [0.0, 0.0, 0.0]
        self.workspace_bytes = [0, 0, 0]
        self.local = [False, False, False]
        self.ops = None  # the ops a training step runs (record(), prepare())
        # The layer's plans save less than the library's path costs on the host: the whole
        # layer runs PyTorch's own, as unconverted (decide_layer(), until layer_recheck).
        self.framework_layer = False
        self.layer_recheck = 0.0
        self.why = "not decided yet (prepare() decides)"

    def shape(self, op):
        """The ucudnnConvShape_t of `op`."""
        return _lib.ConvShape(op, *self.dims, self.padding[0], self.padding[1], self.stride[0],
                              self.stride[1], self.dilation[0], self.dilation[1], self.groups,
                              self.data_type, self.layout, self.math)

    def _routed(self, op, now):
        """Whether `op` runs PyTorch's own without asking the library (its route, until its
        recheck time; past it the library is asked again and sets the route anew)."""
        return self.routes[op] >= ROUTE_NO_PLAN and now < self.recheck[op]

    def _count_routed(self, op):
        self.runtime.skipped[self.routes[op] - ROUTE_NO_PLAN] += 1

    def framework_now(self, op):
        """True when `op` runs PyTorch's own convolution without asking the library now."""
        if not self._routed(op, self.runtime.clock()):
            return False
        self._count_routed(op)
        return True

    def framework_until(self, need_x, need_w):
        """When every op of this call runs PyTorch's own now (each counted as such): until when
        that holds without asking the library (the layer's decision or the ops' routes, till
        their recheck); else 0.0."""
        ops = (_lib.FORWARD,) + ((_lib.BACKWARD_DATA,) if need_x else ()) + (
            (_lib.BACKWARD_FILTER,) if need_w else ())
        now = self.runtime.clock()
        if now >= self.layer_recheck:
            self.decide_layer(ops, now)
        if self.framework_layer:
            self.runtime.skipped[1] += len(ops)
            return self.layer_recheck
        if not all(self._routed(op, now) for op in ops):
            return 0.0
        for op in ops:
            self._count_routed(op)
        return min(self.recheck[op] for op in ops)

    def run(self, op, a, b, out):
        """Runs `op` through the library into `out` (every operand dense in the signature's
        layout): True when its plan ran, False when the caller must run PyTorch's own."""
        kernel = self.kernels[op] or self.declare(op)
        if self.local[op]:  # this process measured PyTorch's own faster (not shared)
            self._route(op, ROUTE_FRAMEWORK)
            self._count_routed(op)
            return False
        index = self.index
        stream = None
        if index >= 0:
            if current_device() != index:
                # cuDNN runs on the current device: the context's (the tensors') for the call.
                with torch.cuda.device(index):
                    return self.run(op, a, b, out)
            stream = raw_stream(index)
        needed = self.workspace_bytes[op]
        tracing = self.runtime.tracing
        if tracing is not None:
            tracing.add(self, op, tracing.reader(), 0)
        # From PyTorch's caching allocator for this call, on its stream: a large workspace late
        # in the backward pass never sits in memory at the step's peak.
        try:
            workspace = torch.empty(needed, dtype=torch.uint8,
                                    device=self.device) if needed else None
        except OUT_OF_MEMORY_ERRORS:
            return self._workspace_out_of_memory(op, needed)
        status = self.run_kernel(kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream,
                                 workspace.data_ptr() if needed else None, needed)
        if status == SUCCESS:
            self.routes[op] = ROUTE_PLAN
            return True
        return self._not_run(op, status, kernel, a, b, out, stream)

    def declare(self, op):
        shape = self.shape(op)
        kernel = self.kernels[op] = self.context.kernel(shape, self.runtime.limit_of(shape))
        self.local[op] = bool(self.runtime.local_framework) and (
            shape_key(shape) in self.runtime.local_framework)
        return kernel

    def _route(self, op, route):
        self.routes[op] = route
        delay = RECHECK_FRAMEWORK_S if route == ROUTE_FRAMEWORK else RECHECK_NO_PLAN_S
        self.recheck[op] = self.runtime.clock() + delay

    def _not_run(self, op, status, kernel, a, b, out, stream):
        """run() past a call that did not run the plan: once more with the workspace the plan
        needs (its first call, or a plan that changed), else the route to PyTorch's own."""
        if status == _lib.WORKSPACE_TOO_SMALL:
            needed = self.context.kernel_workspace_size(kernel) or 0
            self.workspace_bytes[op] = needed
            try:
                workspace = torch.empty(needed, dtype=torch.uint8, device=self.device)
            except OUT_OF_MEMORY_ERRORS:
                return self._workspace_out_of_memory(op, needed)
            status = self.run_kernel(kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), stream,
                                     workspace.data_ptr(), needed)
            if status == SUCCESS:
                self.routes[op] = ROUTE_PLAN
                return True
        if status == _lib.FRAMEWORK:
            self._route(op, ROUTE_FRAMEWORK)
            return False
        # WORKSPACE_TOO_SMALL again: the plan changed meanwhile (not counted as a fallback).
        if status in (_lib.NO_PLAN, _lib.WORKSPACE_TOO_SMALL):
            self._route(op, ROUTE_NO_PLAN)
            return False
        self.runtime.library.check("ucudnnShapeKernelRun", status)  # raises
        return False

    def _workspace_out_of_memory(self, op, needed):
        """run() when PyTorch's allocator cannot give the plan's `needed` bytes of workspace (the
        memory in use at this point of the step is more than the kernel's limit assumed: a
        profile that was not the job's step, a memory cap set after prepare()): False, this call
        runs PyTorch's own (which finds an algorithm within the memory left, as unconverted), and
        the kernel is planned again at a smaller limit (lowered_limit), so a plan's workspace
        never fails a step. A RuntimeWarning says so; stats() counts them
        ("workspace_out_of_memory")."""
        shape = self.shape(op)
        runtime = self.runtime
        current = runtime.limit_of(shape)
        # 0 is the configured limit (not none): then the workspace that failed is the bound.
        limit = lowered_limit(min(needed, current) if current else needed)
        runtime.workspace_out_of_memory += 1
        key = shape_key(shape)
        runtime.lowered_limits[key] = limit
        for cache in list(runtime.conv_caches.values()):  # the layers of this shape, at once
            for conv in cache.values():
                if conv is not None:
                    conv.forget_kernel(key)
        self.forget_kernel(key)  # this layer too where it is not registered (a copy)
        in_use = (f" ({torch.cuda.memory_allocated(self.device)} bytes in use)"
                  if self.device.type == "cuda" else "")
        warnings.warn(f"ucudnn.torch: a {needed}-byte workspace did not fit{in_use}; op {op} of "
                      f"{self.dims} planned again within {limit} bytes", RuntimeWarning)
        self._route(op, ROUTE_NO_PLAN)
        return False

    def forget_kernel(self, key):
        """Its op whose kernel is `key` (a shape key) declared anew at its next call (another
        layer's plan of that shape did not find its workspace: its limit was lowered)."""
        for op in range(3):
            if self.kernels[op] is not None and shape_key(self.shape(op)) == key:
                self.kernels[op] = None
                self.workspace_bytes[op] = 0
                self.routes[op] = ROUTE_ASK

    def record(self, needs_x, needs_w):
        """prepare(): the kernels this convolution will run in a training step."""
        ops = [_lib.FORWARD]
        if needs_x:
            ops.append(_lib.BACKWARD_DATA)
        if needs_w:
            ops.append(_lib.BACKWARD_FILTER)
        self.ops = tuple(ops)
        recorded = self.runtime.recording.setdefault(self.device, [])
        recorded.extend(self.shape(op) for op in ops)

    def forget_kernels(self):
        """Its kernels declared anew at the next call (prepare(): the limits changed), with the
        workspace their plans need learnt anew (a plan at a smaller limit needs less)."""
        self.kernels = [None, None, None]
        self.workspace_bytes = [0, 0, 0]
        self.routes = [ROUTE_ASK, ROUTE_ASK, ROUTE_ASK]
        self.local = [False, False, False]
        self.framework_layer = False
        self.layer_recheck = 0.0

    def decide_layer(self, ops, now):
        """Whether the layer runs PyTorch's own whole: its plans for `ops` save only device time
        of a step that prepare() found host-bound, or, where PyTorch does not benchmark in the
        job, save less per step than the runtime's min_layer_gain_us (the library's host cost
        per layer). Where it benchmarks (Runtime.framework_benchmarks) a layer with a plan keeps
        it in a step that is not host-bound: the planner gave it the ties, whose plans spare the
        job PyTorch's benchmark, and the library's host cost is hidden behind the device's work.
        By the cluster's timings and rank 0's measurement, so every rank decides alike;
        undecided (the per-op routes) while a plan or PyTorch's time is missing."""
        runtime = self.runtime
        if runtime.decided_route == NATIVE:  # prepare()'s route for the step (route.py)
            self.framework_layer = True
            self.layer_recheck = INFINITY
            self.why = f"step route native: {runtime.decided_why}"
            return
        gain, planned = self.plan_gain_ms(ops)
        if gain is None:
            self.framework_layer = False
            self.why = "a plan or PyTorch's time is not in yet: each op asks again soon"
        elif gain == INFINITY:
            self.framework_layer = False
            self.why = ("a plan is kept for memory: PyTorch's own needs more workspace than the "
                        "limit")
        elif runtime.host_bound:
            # The device's saving does not reach a host-bound step.
            self.framework_layer = runtime.min_layer_gain_us > 0
            self.why = ("the step is host-bound: the plans' device-time saving would not shorten it"
                        if self.framework_layer else "host-bound, but min_layer_gain_us is 0")
        elif runtime.framework_benchmarks and planned and runtime.min_layer_gain_us != INFINITY:
            self.framework_layer = False
            self.why = (f"the plans save {gain * 1e3:.0f} us a step and spare PyTorch's benchmark "
                        "of the layer")
        else:
            self.framework_layer = gain * 1e3 < runtime.min_layer_gain_us
            self.why = (f"the plans save {gain * 1e3:.0f} us a step, "
                        f"{'under' if self.framework_layer else 'over'} min_layer_gain_us "
                        f"({runtime.min_layer_gain_us:.0f})")
        self.layer_recheck = now + (RECHECK_NO_PLAN_S if gain is None else RECHECK_FRAMEWORK_S)

    def plan_gain_ms(self, ops):
        """(what this layer's plans of `ops` save per call against PyTorch's own, device time,
        negative for ties that went to ucudnn; how many of `ops` run a plan), the saving None
        while one has no plan or no PyTorch time yet, infinite where a plan is kept for memory."""
        gain = 0.0
        planned = 0
        for op in ops:
            kernel = self.kernels[op] or self.declare(op)
            info = self.context.kernel_info(kernel)
            if info["state"] == "framework" or self.local[op]:
                continue
            if info["state"] != "planned" or info["framework_ms"] <= 0:
                return None, planned
            planned += 1
            if not beats_framework(info["predicted_ms"], info["framework_ms"],
                                    self.runtime.framework_benchmarks):
                # The plan was chosen though PyTorch's own is faster: PyTorch's needs more
                # workspace than the kernel's limit. The layer keeps its plans.
                return INFINITY, planned
            gain += info["framework_ms"] - info["predicted_ms"]
        return gain, planned


# What PyTorch raises when its allocator has not the bytes (torch.OutOfMemoryError from 2.1,
# torch.cuda.OutOfMemoryError from 1.13, a RuntimeError before).
OUT_OF_MEMORY_ERRORS = (getattr(torch, "OutOfMemoryError", None) or
                  getattr(torch.cuda, "OutOfMemoryError", None) or RuntimeError)


def lowered_limit(failed):
    """A kernel's limit after a workspace of `failed` bytes (or its limit, if smaller) did not
    fit: a quarter of it rounded down to a power of two, at least no workspace
    (curve.NO_WORKSPACE), so that a kernel reaches a plan that fits in a few steps, each of
    which costs the allocator a synchronizing retry."""
    quarter = failed // 4
    return max(_curve.NO_WORKSPACE, 1 << (quarter.bit_length() - 1) if quarter > 0 else 0)


def output_size(dims, stride, padding, dilation):
    n, _, h, w, k, r, s = dims
    sizes = [n, k]
    for i, extent in enumerate((h, w)):
        span = dilation[i] * ((r, s)[i] - 1) + 1
        sizes.append((extent + 2 * padding[i] - span) // stride[i] + 1)
    return sizes


class ConvCache(dict):
    """A module's LayerConv per input signature. Neither copied nor pickled (its kernel handles
    belong
    to this process's contexts): a copy starts empty."""

    MAX_SIGNATURES = 64  # beyond this (inputs of ever new sizes) it starts over

    def __reduce__(self):
        return (ConvCache, ())
