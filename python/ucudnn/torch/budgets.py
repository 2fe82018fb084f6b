"""prepare()'s workspace budgets: fixed, liveness (the step's memory profile) and allowance."""

import logging

import torch

from .. import _lib
from .. import curve as _curve
from .options import parse_bytes
from .handle import rank0s
from .custom_ops import is_compiling
from .module import layer_convs, require_per_kernel, runtimes_of
from .declare import declare_at_limits
from .memory import liveness_limits, memory_profile
from .outputs import inputs_on_cuda, tensors_in


_log = logging.getLogger("ucudnn.torch")


def allowance_limit(sample_inputs):
    """prepare(budget="allowance"): every kernel's limit, the memory the process may take
    (memory_allowance, rank 0's) rounded down to a power of two, so that few distinct limits
    reach the planner; None (the configured limit) off CUDA."""
    allowance = memory_allowance(sample_inputs)
    return None if not allowance else 1 << (allowance.bit_length() - 1)


def auto_budget(model, sample_inputs):
    """prepare(budget="auto"): "liveness" when every converted layer plans per kernel and the step
    runs on CUDA (the memory profile reads PyTorch's CUDA counter), else "fixed"."""
    per_kernel = all(r.workspace_mode() == "per_kernel" for r in runtimes_of(model))
    cuda = inputs_on_cuda(sample_inputs)
    return "liveness" if per_kernel and cuda else "fixed"


def liveness_budgets(model, sample_inputs, above_peak, loss_fn):
    """prepare(budget="liveness"): the StepBudget of one profiled step, `above_peak` bytes over
    the step's peak without workspace allowed (default: the configured workspace_bytes, else
    64 MiB), within what the process may take (memory_allowance)."""
    require_per_kernel(model, "prepare: budget='liveness'")
    if above_peak is None:
        configured = runtimes_of(model)[0].config.get("workspace_bytes")
        above_peak = parse_bytes(configured) if configured is not None else 64 << 20
    above_peak = parse_bytes(above_peak, "above_peak")
    profile = memory_profile(model, *sample_inputs, loss_fn=loss_fn)
    devices = [t.device for t in tensors_in(sample_inputs)]
    return StepBudget(profile, above_peak, memory_allowance(sample_inputs), devices[0])


class StepBudget:
    """prepare(budget="liveness")'s budgets, kept so that the job's first steps correct them.
    The profiled step runs before the optimizer's first step, whose state (SGD's momentum, Adam's
    moments) the job holds through every step after it: a step's in-use memory is then the
    profile's plus that, everywhere (VGG-16 fp32: 527 MiB, traced op by op; docs/results.md,
    session 29). Each kernel's headroom below the peak stays; what the process may take above
    the peak (its allowance) shrinks by as much, and with it `above_peak` and the framework
    fit's ceiling. So the model's forward pre-hook (check_step_budget) reads the memory in use
    at the start of its first CHECKS forwards, and where it has grown past the profile's by more
    than TOLERANCE, the kernels whose limits change are planned again (check())."""

    # The forwards after prepare() that are read: the optimizer's state comes with its first
    # step (the second forward), later where gradients accumulate over several forwards.
    CHECKS = 16
    # A growth below this is the allocator's rounding, not worth new plans.
    TOLERANCE = 16 << 20

    def __init__(self, profile, above_peak, allowance, device):
        self.profile = profile
        self.requested = above_peak
        self.allowance = allowance  # None: no bound (off CUDA)
        self.device = device
        self.shift = 0  # bytes the job's steps hold beyond the profiled step's
        self.raised = {}  # shape key -> PyTorch's workspace (the framework fit)
        self.checks_left = self.CHECKS
        self.wait_ms = 0

    def __reduce__(self):
        return (type(None), ())  # a copy or a pickle of the model leaves it behind

    def _allowance(self):
        return None if self.allowance is None else self.allowance - self.shift

    def above_peak(self):
        """The bytes above the step's peak without workspace the kernels may take."""
        return _curve.above_peak_within(self.profile, self.requested, self._allowance())

    def ceiling(self):
        """The most the process may take above that peak (the framework fit's ceiling)."""
        return _curve.above_peak_within(self.profile, _curve.UNLIMITED_BYTES, self._allowance())

    def limits(self):
        """{shape key: limit}: each kernel's liveness limit, or PyTorch's workspace where the
        framework fit raised it and it stays within the ceiling."""
        limits = liveness_limits(self.profile, self.above_peak())
        ceiling = self.ceiling()
        for key, workspace in self.raised.items():
            if limits.get(key, 0) < workspace <= ceiling:
                limits[key] = workspace
        return limits

    def check(self, model, in_use):
        """A forward of `model` starts with `in_use` bytes allocated: where that is more than
        TOLERANCE over the profile's start, and the limits change with it, every kernel is
        declared again at its new limit and its plans are waited for (up to prepare()'s
        wait_ms; a kernel without its plan meanwhile runs PyTorch's own). Whether they
        changed."""
        self.checks_left -= 1
        shift = in_use - self.profile["base"]
        if shift < self.shift + self.TOLERANCE:
            return False
        before = self.limits()
        self.shift = shift
        limits = self.limits()
        if limits == before:
            return False
        _log.info("ucudnn.torch: the step holds %d MiB more than the profiled one (the "
                  "optimizer's state): %d kernels planned again within %d MiB above the peak",
                  shift >> 20, sum(limits[k] != before.get(k) for k in limits),
                  self.above_peak() >> 20)
        shapes = [_lib.ConvShape(*key) for key in limits]
        runtimes = runtimes_of(model)
        runtimes[0].budget_replans += 1  # once for the model: stats() sums its runtimes
        for runtime in runtimes:
            runtime.kernel_limits = limits
            context = runtime.context(self.device)
            if context is not None:
                declare_at_limits(runtime, context, shapes)
                if self.wait_ms > 0:
                    context.wait_for_plans(self.wait_ms)
        for conv in layer_convs(model):
            conv.forget_kernels()  # their kernels found again at the new limits
        return True


def check_step_budget(module, args):
    """A prepared model's forward pre-hook: its first forwards correct prepare()'s liveness
    budgets by the memory the job's steps hold (StepBudget; rank 0's in a torch.distributed
    job, whose ranks run their forwards in step). Nothing under torch.compile."""
    if is_compiling():
        return None
    budget = module.__dict__.get("_ucudnn_step_budget")
    if budget is not None:
        if budget.checks_left <= 0:
            module.__dict__.pop("_ucudnn_step_budget", None)
        elif budget.device.type == "cuda":
            # Rank 0's reading in a torch.distributed job: every rank plans alike.
            budget.check(module, rank0s(torch.cuda.memory_allocated(budget.device),
                                         budget.device))
        else:
            budget.check(module, budget.profile["base"])
    return None


# Of the memory the process may take, the share that liveness budgets count on: the rest is left
# to the caching allocator's rounding (what the job holds beyond the profiled step, such as the
# optimizer's state, StepBudget reads from its steps).
_ALLOWANCE_SHARE = 0.98


def memory_allowance(sample_inputs):
    """The bytes PyTorch's allocator may hold at most on the CUDA device of `sample_inputs`: what
    it holds plus what the device has free, and no more than the process's cap
    (set_per_process_memory_fraction, where PyTorch reads it back); times _ALLOWANCE_SHARE; rank
    0's in a torch.distributed job. None without a CUDA input."""
    devices = [t.device for t in tensors_in(sample_inputs) if t.is_cuda]
    if not devices:
        return None
    index = devices[0].index if devices[0].index is not None else torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    allowance = free + torch.cuda.memory_reserved(index)
    get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if get_fraction is not None:
        allowance = min(allowance, int(total * get_fraction(index)))
    # Rank 0's: the budgets it gives (liveness, allowance) are then every rank's.
    return rank0s(int(allowance * _ALLOWANCE_SHARE), devices[0])
