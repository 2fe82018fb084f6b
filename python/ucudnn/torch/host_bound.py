"""Whether a step is host-bound, and the answers remembered on the machine."""

import hashlib
import logging
import platform
import time

import torch

from .. import _cache
from .handle import process_rank, rank0s, restore_framework_search, turn_off_framework_search
from .routing import HEURISTICS_MARGIN, is_host_bound
from .autograd import autocast_dtype
from .module import layer_convs
from .steps import model_kept, training_pass
from .outputs import inputs_device, inputs_signature
from .records import keep_record, read_records


_log = logging.getLogger("ucudnn.torch")


def median_step(samples):
    """Of steps measured as (host_s, total_s), the one whose lag (the device's time after the
    host's launches, as a fraction of the step) is the median: one step alone flips on a loaded
    host (ConvNeXt-T: 42 ms of host time in a 53 ms step in one run, 25 of 51 in the next,
    docs/results.md)."""
    def lag(sample):
        host, total = sample
        return (total - host) / total if total > 0 else 0.0
    ranked = sorted(samples, key=lag)
    return ranked[len(ranked) // 2]


def allocator_syncs(before, after):
    """Of two torch.cuda.memory_stats() readings, the allocator's synchronizing events between
    them: retries after a failed cudaMalloc and cudaFree calls (each waits for the device). A
    step that has them is bound by its memory, and its host time holds those waits."""
    return sum(max(0, after.get(name, 0) - before.get(name, 0))
               for name in ("num_alloc_retries", "num_device_free"))


def step_is_host_bound(model, *sample_inputs, loss_fn=None, steps=4):
    """Whether a training step of `model` (forward, `loss_fn(output)` or the output's sum,
    backward; CUDA) is host-bound: of `steps` steps, the first left out, the median one's
    launch time (until backward() returns) against its time until the device finishes
    (median_step, is_host_bound; a CPU step is all host). Never where PyTorch's allocator
    synchronized in the measured steps (allocator_syncs: a step under a memory cap whose host
    waited on cudaFree, VGG-16 fp32 at 13.1 GiB: host 94 of 104 ms, judged host-bound, every
    layer then PyTorch's own at 126 ms against 103 with plans). The model is left as it was
    (gradients and buffers). In a torch.distributed job every rank gets rank 0's answer.
    {"host_bound", "host_ms", "step_ms", "allocator_syncs"}."""
    device = inputs_device(sample_inputs)
    cuda = device.type == "cuda"
    samples = []
    stats = [{}, {}]
    with model_kept(model):
        for i in range(max(2, steps)):  # the first: PyTorch's benchmark, the plans' first calls
            if cuda:
                torch.cuda.synchronize(device)
                if i == 1:
                    stats[0] = torch.cuda.memory_stats(device)
            start = time.perf_counter()
            training_pass(model, sample_inputs, loss_fn)
            host = time.perf_counter() - start
            if cuda:
                torch.cuda.synchronize(device)
            samples.append((host, time.perf_counter() - start))
        if cuda:
            stats[1] = torch.cuda.memory_stats(device)
    host, total = median_step(samples[1:])
    syncs = allocator_syncs(*stats)
    bound = bool(rank0s(int(is_host_bound(host, total) and syncs == 0), device))
    return {"host_bound": bound, "host_ms": host * 1e3, "step_ms": total * 1e3,
            "allocator_syncs": syncs}


# prepare()'s host-bound answers, remembered on the machine (UCUDNN_HOST_BOUND_CACHE, a JSON file;
# default $XDG_CACHE_HOME/ucudnn/host_bound.json or ~/.cache/ucudnn/host_bound.json; "off" for
# none): a later job of the same step skips the measuring steps (DenseNet-121 AMP: 4.0-4.7 s of
# its start on an H100, docs/results.md), and near the threshold every job of the
# machine decides alike (one measure flipped between runs of ConvNeXt-T and ResNeXt-50, calls
# 56-60). Keyed by the host, the GPU, PyTorch's version, the model (its repr), the inputs,
# autocast, loss_fn and the layers' routes; the newest HOST_BOUND_RECORDS are kept, each for
# HOST_BOUND_RECORD_DAYS (an answer taken on a busy host does not stand for good). Delete the
# file (or pass host_bound=) to decide again.
HOST_BOUND_RECORDS = 256


HOST_BOUND_RECORD_DAYS = 7


def host_bound_records_path():
    """Where prepare() remembers host-bound answers, or None for nowhere."""
    return _cache.cache_path("UCUDNN_HOST_BOUND_CACHE", "host_bound.json")


def host_bound_key(model, sample_inputs, loss_fn):
    """What a host-bound answer holds for: this host and GPU, PyTorch, the model, its inputs,
    autocast, loss_fn and which layers run PyTorch's own (the step as it will run)."""
    device = inputs_device(sample_inputs)
    inputs = inputs_signature(sample_inputs)
    autocast = str(autocast_dtype(device.type == "cuda"))
    routes = "".join("f" if conv.framework_layer else "p" for conv in layer_convs(model))
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    parts = [platform.node(), gpu, torch.__version__,
             hashlib.sha256(repr(model).encode()).hexdigest(), repr(inputs), autocast,
             getattr(loss_fn, "__qualname__", repr(loss_fn)) if loss_fn is not None else "sum",
             routes]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def remember_host_bound(path, key, answer):
    """Adds `answer` to the file (records.keep_record: atomically, the newest
    HOST_BOUND_RECORDS kept; a file that cannot be written is a warning in the log)."""
    keep_record(path, key, dict(answer, remembered_at=time.time()), "remembered_at",
                HOST_BOUND_RECORDS, _log, "host-bound answer")


# A host-bound step gains nothing from PyTorch's cuDNN benchmark (the device waits for the host
# whichever algorithm runs), and its first step loses the search of every kernel. Native
# PyTorch, AMP, on an H100, each run its own process, benchmark on / off (docs/results.md,
# call 75): EfficientNet-B0 (batch 128) 44.6-51.2 / 43.3-45.1 ms a step, 18.4-47.1 / 4.7-5.4 s
# from the model on the device to the first fast step; DenseNet-121 72.3-77.6 / 71.6-80.6 ms,
# 11.7-18.3 / 1.5 s; MobileNet-V3-Large 35.6-39.9 / 29.0-34.0 ms, 22.6-23.0 / 5.5-6.4 s;
# ResNeXt-50 37.9-39.9 / 36.3-37.3 ms, 8.6-13.9 / 0.9-1.1 s. prepare(host_bound_search=...).
HOST_BOUND_SEARCHES = ("heuristics", "benchmark")


# A host-bound record's "framework_search": how the step's PyTorch convolutions choose their
# algorithms in the machine's jobs. "heuristics": the benchmark turned off, the step measured
# host-bound with the benchmark's choices (the job that measured it had run them already: PyTorch
# keeps a kernel's first choice for the process), so the next job measures it with cuDNN's
# heuristic choices; "heuristics-checked": host-bound with them too, or as fast as the recorded
# step (heuristics_keep_pace); "benchmark": neither, or a job that keeps the benchmark. A record
# without it (older) is "heuristics".
HOST_BOUND_NONE, HOST_BOUND_NO, HOST_BOUND_BENCHMARK, HOST_BOUND_UNCHECKED, \
    HOST_BOUND_CHECKED = -1, 0, 1, 2, 3


HOST_BOUND_CODES = {"benchmark": HOST_BOUND_BENCHMARK, "heuristics": HOST_BOUND_UNCHECKED,
                     "heuristics-checked": HOST_BOUND_CHECKED}


def host_bound_code(record):
    """A remembered record (or None) as the one int rank 0 sends every rank (_HOST_BOUND_*)."""
    if record is None:
        return HOST_BOUND_NONE
    if not record["host_bound"]:
        return HOST_BOUND_NO
    return HOST_BOUND_CODES.get(record.get("framework_search"), HOST_BOUND_UNCHECKED)


def heuristics_keep_pace(step_ms, recorded_ms):
    """Whether a step taken with cuDNN's heuristic choices (`step_ms`) is as fast as the one a
    host-bound record was measured on (`recorded_ms`: with the plans, or PyTorch's benchmarked
    choices; None: unknown, so no) within HEURISTICS_MARGIN."""
    return (isinstance(recorded_ms, (int, float)) and recorded_ms > 0 and
            step_ms <= recorded_ms * (1 + HEURISTICS_MARGIN))


def host_bound_answer(model, sample_inputs, loss_fn, search="heuristics"):
    """prepare()'s host-bound answer: remembered for this step on this machine (rank 0's record
    decides for every rank of a torch.distributed job, so that all measure or none do), else
    measured (step_is_host_bound) and remembered, unless PyTorch's allocator synchronized in the
    measured steps (a memory-bound step's answer is not kept). With `search` "heuristics" and
    PyTorch benchmarking, a host-bound step turns the benchmark off (HOST_BOUND_CODES: the job
    after the one that measured it measures it again with cuDNN's heuristic choices, and keeps
    the benchmark where the step is neither host-bound with them nor as fast as the recorded
    one)."""
    device = inputs_device(sample_inputs)
    path = host_bound_records_path()
    key = host_bound_key(model, sample_inputs, loss_fn) if path else None
    record = read_records(path).get(key) if key else None
    if (not isinstance(record, dict) or not isinstance(record.get("host_bound"), bool)
            or not isinstance(record.get("remembered_at"), (int, float))
            or time.time() - record["remembered_at"] > HOST_BOUND_RECORD_DAYS * 86400):
        record = None
    code = rank0s(host_bound_code(record), device)
    heuristics = search == "heuristics" and torch.backends.cudnn.benchmark

    def remember(answer):
        if key and not answer["allocator_syncs"] and process_rank() == 0:
            remember_host_bound(path, key, answer)
        return answer

    if code == HOST_BOUND_UNCHECKED and heuristics:
        turn_off_framework_search()
        bound = step_is_host_bound(model, *sample_inputs, loss_fn=loss_fn)
        if bound["host_bound"]:
            return remember(dict(bound, framework_search="heuristics-checked"))
        before = record.get("step_ms") if record else None
        if heuristics_keep_pace(bound["step_ms"], before):
            # Device-bound with the heuristics' choices, but their step is the recorded one's
            # (the plans', or PyTorch's benchmarked choices): the layers run PyTorch's own with
            # them, and no job searches (ConvNeXt-T on an H100: 51.8 ms against 52.1 with the
            # plans, docs/results.md).
            return remember(dict(bound, host_bound=True, framework_search="heuristics-checked",
                                 recorded_step_ms=before))
        # Slower with the heuristics' choices than the step the record was measured on: later
        # jobs keep the benchmark; this one keeps the choices made (PyTorch's, for the process).
        restore_framework_search()
        _log.warning("ucudnn.torch: the step is not host-bound with cuDNN's heuristic choices "
                     "(%.1f ms launched in a %.1f ms step, %s ms with the recorded choices): "
                     "PyTorch's benchmark stays on in this machine's later jobs",
                     bound["host_ms"], bound["step_ms"],
                     "?" if before is None else f"{before:.1f}")
        remember(dict(record or {}, host_bound=True, framework_search="benchmark",
                      allocator_syncs=bound["allocator_syncs"]))
        return bound
    if code != HOST_BOUND_NONE:
        if code == HOST_BOUND_CHECKED and heuristics:
            turn_off_framework_search()
        answer = {k: v for k, v in (record or {}).items() if k != "remembered_at"}
        return dict(answer, host_bound=code != HOST_BOUND_NO, remembered=True)
    bound = step_is_host_bound(model, *sample_inputs, loss_fn=loss_fn)
    if bound["host_bound"]:
        if heuristics:
            turn_off_framework_search()
        bound["framework_search"] = ("heuristics" if heuristics else "benchmark"
                                     if torch.backends.cudnn.benchmark else "heuristics-checked")
    return remember(bound)
