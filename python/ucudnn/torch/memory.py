"""The step's memory: profile, trace and the time-memory curve."""

import contextlib

import torch

from .. import curve as _curve
from .. import profile as _profile
from .recording import StepProfile
from .module import require_per_kernel, runtimes_of
from .steps import model_kept, training_pass
from .outputs import inputs_on_cuda, tensors_in


def memory_profile(model, *sample_inputs, loss_fn=None, reader=None):
    """One training step of `model` on `sample_inputs` (forward, `loss_fn(output)` or the output's
    sum, backward), every converted convolution computing nothing (zero outputs and gradients of
    the real ones' shapes, ShapeOnlyConvFunction: the memory is the step's, with no
    workspace and no PyTorch benchmark), recording for each convolution op the device memory in
    use at its start (PyTorch's counter: `reader`, default torch.cuda.memory_allocated) and its
    output's bytes. A model whose control flow reads its activations' values is profiled on
    zeros. The model is left as it was (gradients
    and buffers restored). {"calls": [(shape key, in use, output bytes), ...], "base": in use
    before the step}, in the order the step runs them; deterministic for a model, batch and
    precision, so every rank computes the same budgets."""
    runtimes = runtimes_of(model)
    if reader is None:
        if not inputs_on_cuda(sample_inputs):
            raise ValueError("ucudnn.torch.memory_profile: the step's memory is a CUDA device's; "
                             "give CUDA inputs (or a reader)")
        reader = torch.cuda.memory_allocated
    profile = StepProfile(reader)
    for runtime in runtimes:
        runtime.restore_native()
        runtime.profiling = profile
    try:
        with model_kept(model):
            base = reader()
            training_pass(model, sample_inputs, loss_fn)
    finally:
        for runtime in runtimes:
            runtime.profiling = None
    return {"calls": profile.calls, "base": base}


@contextlib.contextmanager
def trace_memory(model, reader=None):
    """Within the block, each op that a converted layer of `model` runs through the library
    records the memory in use at its start (`reader`, default torch.cuda.memory_allocated): the
    job's own steps, to hold against memory_profile()'s, from which liveness limits are
    computed (ops on PyTorch's own route are not asked, so not recorded). Yields {"calls":
    [(shape key, in use, 0), ...]}, memory_profile()'s form, filled as the block runs."""
    profile = StepProfile(reader or torch.cuda.memory_allocated)
    runtimes = runtimes_of(model)
    for runtime in runtimes:
        runtime.tracing = profile
    traced = {"calls": profile.calls}
    try:
        yield traced
    finally:
        for runtime in runtimes:
            runtime.tracing = None


# The one home of the limits is the pure module; ucudnn.torch.liveness_limits stays its name here.
liveness_limits = _curve.liveness_limits


def step_curve(model, *sample_inputs, budgets=None, wait_ms=30000, loss_fn=None, profile=None,
               native=None):
    """The step's time-memory curve (issue 21): for each budget above the step's peak without
    workspace (bytes; default curve.DEFAULT_BUDGETS, None is unlimited), each kernel's liveness
    limit (liveness_limits), its plan at that limit (asked for here, waiting up to wait_ms), and
    the step's predicted convolution time and peak (curve.curve_points). `profile`:
    memory_profile()'s, taken here when None. `native`: {"peak_bytes", "conv_ms"} of the native
    step when known, marked by curve.format_table and curve.format_svg. Returns
    {"base_peak_bytes", "points", "native"}."""
    require_per_kernel(model, "step_curve")
    runtime = runtimes_of(model)[0]
    budgets = _curve.checked_budgets(budgets, "ucudnn.torch.step_curve")
    devices = [t.device for t in tensors_in(sample_inputs)]
    if not devices:
        raise ValueError("ucudnn.torch.step_curve: give the step's sample inputs")
    if profile is None:
        profile = memory_profile(model, *sample_inputs, loss_fn=loss_fn)
    context = runtime.context(devices[0])
    if context is None:
        raise ValueError(f"ucudnn.torch.step_curve: no backend for {devices[0]}")
    return _profile.plan_curve(context, profile, budgets, wait_ms, native)
