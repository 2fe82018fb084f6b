"""Where a kernel runs: the routes, and the rules that weigh a plan against PyTorch's own
convolution."""


# Routes of one op of one signature, as last learnt from the library.
ROUTE_ASK = 0        # unknown: call the library


ROUTE_PLAN = 1       # ucudnn's plan runs


ROUTE_NO_PLAN = 2    # no plan now: PyTorch's own, ask again after RECHECK_NO_PLAN_S


ROUTE_FRAMEWORK = 3  # the plan chose PyTorch's own: ask again after RECHECK_FRAMEWORK_S


RECHECK_NO_PLAN_S = 0.25  # plans arrive in the background: pick them up soon


RECHECK_FRAMEWORK_S = 5.0  # re-planned only when timings change


# Within this share of each other PyTorch's time and ucudnn's are a tie: the planner's
# kFrameworkMargin, applied here where the decision cannot be shared or is read back.
FRAMEWORK_MARGIN = 0.03


def framework_benchmarks(identity):
    """The planner's FrameworkBenchmarks: whether the framework of `identity` (framework_identity())
    benchmarks its own convolution in every job (its mode, after the last '/', begins with
    "benchmark"). Ties then go to ucudnn, whose plans spare the job that benchmark."""
    slash = identity.rfind("/")
    return slash >= 0 and identity[slash + 1:].startswith("benchmark")


def beats_framework(ucudnn_ms, framework_ms, benchmarks=False):
    """The planner's BeatsFramework: ucudnn's time under PyTorch's less the margin, or, where ties
    go to ucudnn (`benchmarks`), under PyTorch's plus it (PyTorch's own kept only where faster
    than ucudnn's by the margin)."""
    if benchmarks:
        return ucudnn_ms < framework_ms / (1 - FRAMEWORK_MARGIN)
    return ucudnn_ms < framework_ms * (1 - FRAMEWORK_MARGIN)


# convert()'s default min_layer_gain_us: what the library's path costs on the host per layer and
# step over PyTorch's own (the autograd Function, the ctypes calls, the workspace): 38 us on the
# H100 machine (bench/torch_adapter.py overhead, docs/results.md), 17 us on a CPU.
MIN_LAYER_GAIN_US = 40.0


# A step is host-bound when its device work ends within this share of the step after the host
# has launched its last kernel: the device waits for the host, so a plan's device-time saving
# does not shorten the step while its path's host cost lengthens it (step_is_host_bound()). On
# the H100 machine (docs/results.md): EfficientNet-B0 AMP 3-15% (host-bound: its
# planned layer cost its step), ResNet-50 AMP and ConvNeXt-T 50-52%.
HOST_BOUND_LAG = 0.25


# A step with cuDNN's heuristic choices within this share of the step a host-bound record was
# measured on keeps them (heuristics_keep_pace): the run-to-run spread of a device-bound step.
HEURISTICS_MARGIN = 0.02


def is_host_bound(host_s, total_s):
    """Whether a step that took `host_s` to launch and `total_s` to finish on the device is
    host-bound (HOST_BOUND_LAG)."""
    return total_s > 0 and (total_s - host_s) < HOST_BOUND_LAG * total_s
