"""LayerConv: one converted layer at one input signature, its kernels, routes and calls into the
library."""

import warnings

import torch
import torch.nn.functional as F

from .. import _lib
from .. import curve as _curve
from .decision import NATIVE
from .options import DATA_TYPES, INFINITY
from .routing import (RECHECK_FRAMEWORK_S, RECHECK_NO_PLAN_S, ROUTE_ASK, ROUTE_FRAMEWORK,
                      ROUTE_NO_PLAN, ROUTE_PLAN, beats_framework)


SUCCESS = _lib.SUCCESS


CHANNELS_LAST = torch.channels_last
# torch.nn's convolutions by the rank of their input.
CONV_FUNCTIONS = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}
TRANSPOSED_FUNCTIONS = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}
# Channels-last by tensor rank: NHWC for 2-D convolutions, NDHWC for 3-D; 1-D has none.
CHANNELS_LAST_OF_RANK = {4: torch.channels_last, 5: torch.channels_last_3d}


# What the hot path asks PyTorch, through the cheapest call each version has: these run per
# convolution call, and the public wrappers cost microseconds (torch.cuda.current_stream makes a
# Stream object, torch.backends.cudnn.allow_tf32 goes through a module property).
allow_tf32_now = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (
    lambda: torch.backends.cudnn.allow_tf32)


raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


current_device = getattr(torch._C, "_cuda_getDevice", None) or (
    lambda: torch.cuda.current_device())


def dense_strides(size, memory_format):
    """The strides of a dense tensor of `size` in `memory_format` (nothing allocated)."""
    return torch.empty(size, device="meta", memory_format=memory_format).stride()


def is_channels_last(t):
    """The eager layout rule's reading of an operand: dense channels-last and not contiguous. A
    tensor dense in both layouts (one channel, a 1x1 filter) counts as contiguous, where
    PyTorch's strides rule (pytorch_channels_last) may call it channels-last; see
    channels_last_call."""
    memory_format = CHANNELS_LAST_OF_RANK.get(t.dim())
    return (memory_format is not None and not t.is_contiguous() and
            t.is_contiguous(memory_format=memory_format))


def channels_last_call(x, weight):
    """The layout of an eager call: channels-last when either operand is (is_channels_last), the
    layout of its outputs. It differs from PyTorch's rule (pytorch_layout_call) only where an
    operand is dense in both layouts, and there it measured faster: nnU-Net's U-Net (bf16, an
    H200), whose first layer has one input channel and whose head is 1x1x1, trained 1.050x
    native with these layouts and 1.000x with PyTorch's, in one process each (session 43)."""
    return is_channels_last(x) or is_channels_last(weight)


def pytorch_channels_last(t):
    """Whether PyTorch takes `t` as channels-last (Tensor.suggest_memory_format(), which every
    convolution backend's layout rule reads), from its strides as PyTorch reads them
    (strides_like_channels_last): a 1-channel input or a 1x1 filter made channels-last is. A
    tensor contiguous and not channels-last is answered without the walk (the compiled op's
    implementation asks on every call)."""
    memory_format = CHANNELS_LAST_OF_RANK.get(t.dim())
    if memory_format is None:
        return False
    if t.is_contiguous() and not t.is_contiguous(memory_format=memory_format):
        return False
    return strides_like_channels_last(t.shape, t.stride())


def pytorch_layout_call(x, weight):
    """PyTorch's cuDNN convolution's layout rule (cudnn_conv_suggest_memory_format): channels-last
    when either operand's suggested format is. Under torch.compile the custom op follows it, so
    that inductor lays out the tensors around the op as around native's convolutions: with the
    eager rule the compiled U-Net's 1x1x1 head gave a contiguous output, its gradient came back
    contiguous, and the step ran 1.019x native against 1.148x with this rule (session 43)."""
    return pytorch_channels_last(x) or pytorch_channels_last(weight)


def strides_like_channels_last(sizes, strides):
    """PyTorch's is_channels_last_strides_2d_s4 / _3d_s5 (c10/core/MemoryFormat.h) for a 4-D or
    5-D tensor: the dimensions' strides, walked channels first, then the spatial ones from the
    last and the batch last, never decrease; ambiguous cases (a zero channel stride, a batch
    stride equal to the channel stride's bound) fall back to contiguous, as there."""
    if strides[1] == 0:
        return False
    bound = 0
    for d in (1,) + tuple(range(len(sizes) - 1, 1, -1)) + (0,):
        if sizes[d] == 0 or strides[d] < bound:
            return False
        if d == 0 and bound == strides[1]:
            return False
        bound = strides[d] * sizes[d] if sizes[d] > 1 else strides[d]
    return True


def memory_format_of(rank, channels_last):
    """The memory format of a call's tensors of `rank` dimensions (channels_last_call)."""
    return CHANNELS_LAST_OF_RANK[rank] if channels_last else torch.contiguous_format


def math_mode(dtype, is_cuda, allow_tf32):
    if dtype != torch.float32:
        return _lib.MATH_TENSOR_OP
    # PyTorch's cuDNN math for fp32: TF32 allowed (default math) or strict fp32 (FMA).
    return _lib.MATH_FMA if is_cuda and not allow_tf32 else _lib.MATH_DEFAULT


def shape_key(shape):
    return tuple(getattr(shape, name) for name, _ in _lib.ConvShape._fields_)


def problem_fields(n, c, sizes, k, kernel, stride, padding, dilation, groups):
    """The ucudnnConvShape_t fields (op, dtype, layout and math aside) of a convolution over 1, 2
    or 3 spatial axes: `sizes` the input's, `kernel` the filter's, the rest per axis. A 1-D
    convolution is a 2-D one of height 1 (as PyTorch runs it through cuDNN); a 3-D one sets the
    depth fields."""
    spatial = len(sizes)
    if spatial == 1:
        sizes, kernel = (1,) + tuple(sizes), (1,) + tuple(kernel)
        stride, padding, dilation = ((1,) + tuple(stride), (0,) + tuple(padding),
                                     (1,) + tuple(dilation))
    fields = dict(n=n, c=c, h=sizes[-2], w=sizes[-1], k=k, r=kernel[-2], s=kernel[-1],
                  pad_h=padding[-2], pad_w=padding[-1], stride_h=stride[-2], stride_w=stride[-1],
                  dilation_h=dilation[-2], dilation_w=dilation[-1], groups=groups)
    if spatial == 3:
        fields.update(d=sizes[0], t=kernel[0], pad_d=padding[0], stride_d=stride[0],
                      dilation_d=dilation[0])
    return fields


def shape_is_3d(shape):
    """Whether a ucudnnConvShape_t is 3-D (its depth fields other than a 2-D one's)."""
    return (max(shape.d, 1), max(shape.t, 1), shape.pad_d, max(shape.stride_d, 1),
            max(shape.dilation_d, 1)) != (1, 1, 0, 1, 1)


def problem_tensors(shape):
    """The torch-side geometry of a shape's forward problem: (x size, w size, y size, stride,
    padding, dilation), 5-d and per 3 axes for a 3-D shape, else 4-d and per 2."""
    if shape_is_3d(shape):
        sizes, kernel = (shape.d, shape.h, shape.w), (shape.t, shape.r, shape.s)
        stride = (shape.stride_d, shape.stride_h, shape.stride_w)
        padding = (shape.pad_d, shape.pad_h, shape.pad_w)
        dilation = (shape.dilation_d, shape.dilation_h, shape.dilation_w)
    else:
        sizes, kernel = (shape.h, shape.w), (shape.r, shape.s)
        stride, padding = (shape.stride_h, shape.stride_w), (shape.pad_h, shape.pad_w)
        dilation = (shape.dilation_h, shape.dilation_w)
    x = (shape.n, shape.c) + sizes
    w = (shape.k, shape.c // shape.groups) + kernel
    return x, w, conv_output_size(x, w, stride, padding, dilation), stride, padding, dilation


class LayerConv:
    """One convolution of one module at one input signature (shape, dtype, device, layout, math):
    its geometry (padding already symmetric), output size, and per op the library's kernel
    handle, the route last learnt and the workspace its plan needs. Made once per signature
    (ConvCache), so that a call reads no shape and builds no ctypes structure."""

    __slots__ = ("runtime", "context", "run_kernel", "device", "index", "stride", "padding",
                 "dilation", "groups", "output_padding", "transposed", "passes", "memory_format",
                 "out_size", "out_strides", "in_size", "in_strides", "dims", "fields",
                 "data_type", "layout", "math", "kernels", "routes", "recheck", "workspace_bytes",
                 "local", "ops", "framework_layer", "layer_recheck", "why", "shapes", "cast")

    def __init__(self, runtime, context, x, weight, dtype, geometry, channels_last, math,
                 transposed=False, cast=None):
        """`geometry`: (stride, padding, dilation, groups, output_padding), per spatial axis of
        x (1, 2 or 3 of them). `cast`: the autocast dtype the call's operands are cast to (None:
        as given). A transposed convolution (`transposed`) is planned as the
        backward-data of its forward problem, whose input is the transposed one's output: its
        passes run the library's (backward-data, forward, backward-filter)."""
        self.runtime, self.context = runtime, context
        self.run_kernel = runtime.library.ShapeKernelRun
        self.device = x.device
        self.index = x.get_device() if x.is_cuda else -1
        self.stride, self.padding, self.dilation, self.groups, self.output_padding = geometry
        self.transposed = transposed
        self.cast = cast
        self.memory_format = memory_format_of(x.dim(), channels_last)
        self.layout = _lib.NHWC if channels_last else _lib.NCHW
        self.data_type = DATA_TYPES[dtype]  # the call's, after autocast
        self.math = math
        self.out_size = output_size(x.shape, weight.shape, self.stride, self.padding,
                                    self.dilation, self.groups, transposed, self.output_padding)
        # The layer's input and output dense in the call's layout (the tensors the calls make).
        self.in_size = tuple(x.shape)
        self.in_strides = dense_strides(self.in_size, self.memory_format)
        self.out_strides = dense_strides(self.out_size, self.memory_format)
        if transposed:
            problem_x, problem_k = self.out_size, x.shape[1]
            self.passes = (_lib.BACKWARD_DATA, _lib.FORWARD, _lib.BACKWARD_FILTER)
        else:
            problem_x, problem_k = x.shape, weight.shape[0]
            self.passes = (_lib.FORWARD, _lib.BACKWARD_DATA, _lib.BACKWARD_FILTER)
        n, c, sizes, kernel = problem_x[0], problem_x[1], tuple(problem_x[2:]), tuple(
            weight.shape[2:])
        self.dims = (n, c) + sizes + (problem_k,) + kernel  # the forward problem's
        self.fields = problem_fields(n, c, sizes, problem_k, kernel, self.stride, self.padding,
                                     self.dilation, self.groups)
        self.kernels = [None, None, None]  # by op
        self.shapes = [None, None, None]  # by op, made at the first need
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
        """The ucudnnConvShape_t of `op` (one per op: the library reads it, never keeps it)."""
        shape = self.shapes[op]
        if shape is None:
            shape = self.shapes[op] = _lib.ConvShape(op=op, data_type=self.data_type,
                                                     layout=self.layout, math=self.math,
                                                     **self.fields)
        return shape

    def torch_forward(self, x, weight):
        """PyTorch's own convolution of the layer's forward pass (no bias)."""
        return torch_convolution(x, weight, None, self.stride, self.padding, self.dilation,
                                 self.groups, self.transposed, self.output_padding)

    def pass_ops(self, need_x, need_w):
        """The library's ops of a call's passes: its forward, then those of the gradients."""
        fwd, grad_x, grad_w = self.passes
        return (fwd,) + ((grad_x,) if need_x else ()) + ((grad_w,) if need_w else ())

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
        ops = self.pass_ops(need_x, need_w)
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
        ops = self.ops = self.pass_ops(needs_x, needs_w)
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


def conv_output_size(x_size, w_size, stride, padding, dilation):
    """The output size (n, k, spatial...) of a convolution of x by w."""
    sizes = [x_size[0], w_size[0]]
    for i, extent in enumerate(x_size[2:]):
        span = dilation[i] * (w_size[2 + i] - 1) + 1
        sizes.append((extent + 2 * padding[i] - span) // stride[i] + 1)
    return sizes


def output_size(x_size, w_size, stride, padding, dilation, groups, transposed, output_padding):
    """The output size of a layer's forward pass: its convolution's, or its transposed
    convolution's."""
    if transposed:
        return transposed_output_size(x_size, w_size, stride, padding, dilation, output_padding,
                                      groups)
    return conv_output_size(x_size, w_size, stride, padding, dilation)


def torch_convolution(x, weight, bias, stride, padding, dilation, groups, transposed,
                      output_padding):
    """PyTorch's own convolution (transposed or not) through torch.nn's function of x's rank:
    the cheapest call on the host."""
    if transposed:
        return TRANSPOSED_FUNCTIONS[x.dim()](x, weight, bias, stride, padding, output_padding,
                                             groups, dilation)
    return CONV_FUNCTIONS[x.dim()](x, weight, bias, stride, padding, dilation, groups)


def transposed_output_size(x_size, w_size, stride, padding, dilation, output_padding, groups):
    """The output size (n, c, spatial...) of a transposed convolution of x by w (w is
    c_in x c_out / groups x kernel): the input size of the convolution it is the backward-data
    of."""
    sizes = [x_size[0], w_size[1] * groups]
    for i, extent in enumerate(x_size[2:]):
        sizes.append((extent - 1) * stride[i] - 2 * padding[i] + dilation[i] * (w_size[2 + i] - 1)
                     + output_padding[i] + 1)
    return sizes


class ConvCache(dict):
    """A module's LayerConv per input signature. Neither copied nor pickled (its kernel handles
    belong
    to this process's contexts): a copy starts empty."""

    MAX_SIGNATURES = 64  # beyond this (inputs of ever new sizes) it starts over

    def __reduce__(self):
        return (ConvCache, ())
