"""PyTorch adapter: a model's convolution layers run through ucudnn plans where they are faster.

    import ucudnn.torch
    model = ucudnn.torch.convert(model, server="planner:50051", workspace_bytes="64MiB")
    ucudnn.torch.prepare(model, sample_input)   # declare, plan and decide every layer's route
    loss = loss_fn(model(x), y); loss.backward()   # convolutions run as planned micro-batches

convert() swaps each torch.nn.Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d and
ConvTranspose3d for its UcudnnConv1d ... UcudnnConvTranspose3d in place (same parameters, buffers
and state_dict keys: a converted model saves and loads like the original; unconvert() undoes it).
A 1-D convolution is planned as a 2-D one of height 1 (as PyTorch runs it through cuDNN), a
transposed one as the backward-data of its forward problem (its backward passes are that
forward and a backward-filter).
Its forward, backward-data and backward-filter call the client library's shape-level C API on
PyTorch's current CUDA stream and PyTorch's own cuDNN handle (or, for CPU tensors, on the
library's CPU backend), with the workspace a plan asks for taken from PyTorch's caching allocator
for the call and given back after it.

PyTorch's own convolution is a candidate of every plan, and prepare() keeps the plans' routes only
where the step with them is measured faster than the step without them, beyond the noise between
rounds; the answer is kept on the machine, so every later job of the same step takes the same
route (decision.py). A kernel whose plan chose the framework, or that has no plan (yet, or the
server is away), runs PyTorch's own convolution, so a converted model is never slower than the
original beyond that noise, and a step never fails or waits for the planner. A model new to the
cluster runs PyTorch's own while the cluster benchmarks it, and its step's route is decided
between two training steps once every plan is in (pending.py).

Under torch.compile (PyTorch 2.4 and later: torch.library custom ops) a converted layer is one op
of the graph, ucudnn::convolution, with a fake (meta) implementation and its autograd, so compiling
breaks no graph; older PyTorch keeps the eager path.

Configuration is the C++ library's: the UCUDNN_* environment, overridden by keyword arguments
(server="h:p" is UCUDNN_SERVER, workspace_mode="total" is UCUDNN_WORKSPACE_MODE, ...), validated
when convert() is called.

The package, one concern a module (decision, outputs and records import none of the others):
    options     convert()'s options, their checks, the library's option block, data types
    handle      PyTorch's cuDNN handle lent to the library, its benchmark flag, torch.distributed
    routing     the routes and the rules that weigh a plan against PyTorch's own
    conv        LayerConv: one layer at one input signature, its kernels and library calls
    autograd    the autograd Function of a converted layer
    custom_ops  the torch.library ops torch.compile traces, the registry of converted modules
    recording   the shape-only pass kernels() and memory_profile() read a step with
    module      the converted layers (UcudnnConv2d and kin), Runtime, convert(), unconvert()
    reporting   stats(), routes() and report(): what ran where, and why
    outputs     the tensors of any model output, the default loss of prepare()'s passes
    steps       a training pass of prepare()'s measurements, the model kept as it was
    declare     kernels(): a step's convolutions declared to the library, waiting for plans
    memory      the step's memory profile, trace and time-memory curve
    budgets     prepare()'s workspace budgets (fixed, liveness, allowance)
    records     the machine's record files (route decisions, host-bound answers)
    host_bound  whether a step is host-bound (prepare(host_bound_search="heuristics"))
    decision    one route per step and machine, from rounds measured against their noise
    route       the step's route: read from the record, or measured and recorded; applied
    pending     a step whose plans are still coming: PyTorch's own, decided between steps
    measure     timing PyTorch's own convolution against the plans, kernel by kernel
    preparation prepare(): declares, plans and decides every layer's route
"""

from .custom_ops import custom_ops_available
from .declare import kernels
from .handle import framework_cudnn_handle
from .host_bound import (HOST_BOUND_RECORD_DAYS, HOST_BOUND_RECORDS, allocator_syncs,
                         heuristics_keep_pace, median_step, step_is_host_bound)
from .measure import compare_kernels
from .memory import liveness_limits, memory_profile, step_curve, trace_memory
from .module import (NATIVE_OF_CONVERTED, Runtime, UcudnnConv1d, UcudnnConv2d, UcudnnConv3d,
                     UcudnnConvolution, UcudnnConvTranspose1d, UcudnnConvTranspose2d,
                     UcudnnConvTranspose3d, convert, unconvert)
from .options import CONFIG_KEYS, framework_identity, parse_bytes
from .outputs import output_tensors
from .preparation import prepare, wait_for_plans
from .reporting import report, routes, stats
from .routing import (FRAMEWORK_MARGIN, HEURISTICS_MARGIN, HOST_BOUND_LAG, MIN_LAYER_GAIN_US,
                      framework_benchmarks, is_host_bound)
from .conv import lowered_limit

# Pickles of converted models name their classes by these paths (a checkpoint written before the
# adapter was a package, or by this version, loads in either).
CONVERTED_LAYERS = (UcudnnConv1d, UcudnnConv2d, UcudnnConv3d, UcudnnConvTranspose1d,
                    UcudnnConvTranspose2d, UcudnnConvTranspose3d)
for _converted in CONVERTED_LAYERS + (UcudnnConvolution, Runtime):
    _converted.__module__ = __name__
del _converted

__all__ = ["UcudnnConvolution", "UcudnnConv1d", "UcudnnConv2d", "UcudnnConv3d",
           "UcudnnConvTranspose1d", "UcudnnConvTranspose2d", "UcudnnConvTranspose3d", "convert",
           "unconvert", "kernels", "prepare", "stats", "report",
           "routes", "wait_for_plans", "compare_kernels", "framework_identity", "memory_profile",
           "liveness_limits", "step_curve", "framework_benchmarks", "framework_cudnn_handle",
           "output_tensors", "CONFIG_KEYS", "parse_bytes", "trace_memory", "custom_ops_available",
           "is_host_bound", "step_is_host_bound", "median_step", "allocator_syncs",
           "heuristics_keep_pace", "lowered_limit", "Runtime", "FRAMEWORK_MARGIN",
           "HEURISTICS_MARGIN", "HOST_BOUND_LAG", "MIN_LAYER_GAIN_US", "HOST_BOUND_RECORDS",
           "HOST_BOUND_RECORD_DAYS"]

# Pickles name these by their paths in the adapter's single-module days (ucudnn.torch._X): a layer
# pickled while on the native route, a layer's per-signature cache, the forward hooks convert()
# and prepare() put on the model. They keep those paths, so that checkpoints load either way.
from .budgets import check_step_budget as _check_step_budget  # noqa: E402
from .conv import ConvCache as _ConvCache  # noqa: E402
from .module import recheck_native_routes as _recheck_native_routes  # noqa: E402

for _pickled in (_check_step_budget, _ConvCache, _recheck_native_routes,
                 *NATIVE_OF_CONVERTED.values()):
    _pickled.__module__ = __name__
    _pickled.__qualname__ = "_" + _pickled.__name__.lstrip("_")
    globals()[_pickled.__qualname__] = _pickled
del _pickled
