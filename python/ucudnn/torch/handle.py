"""PyTorch's cuDNN handle lent to the library, PyTorch's cuDNN benchmark flag, and the ranks of a
torch.distributed job."""

import ctypes
import logging
import os
import re

import torch


_log = logging.getLogger("ucudnn.torch")


# at::native::getCudnnHandle(), exported by libtorch_cuda (ATen/cudnn/Handle.h) since PyTorch 1.x.
_GET_CUDNN_HANDLE = "_ZN2at6native14getCudnnHandleEv"


CUDNN_HANDLE_CHOICES = ("framework", "own")


_MAIN_CUDNN = re.compile(r"libcudnn\.so(\.\d+)*$")


def cudnn_instances(maps="/proc/self/maps"):
    """The distinct cuDNN libraries (libcudnn.so*, not its sub-libraries) mapped into this
    process, by real path; None where that cannot be read (not Linux)."""
    try:
        with open(maps) as f:
            fields = [line.split(None, 5) for line in f]
    except OSError:
        return None
    paths = {f[5].strip() for f in fields if len(f) == 6}
    return {os.path.realpath(p) for p in paths if _MAIN_CUDNN.search(os.path.basename(p))}


def framework_cudnn_handle():
    """PyTorch's cuDNN handle of the calling thread on the current device, as an int, for the
    library to run its plans on (it then adds no cuDNN handle of its own to the device: measured
    on an H100, docs/results.md); None where it cannot be borrowed safely: no CUDA build of
    PyTorch loaded, no such symbol, or not exactly one cuDNN library in the process (a handle of
    one instance passed to another would crash). The handle is the calling thread's: the
    library's calls from autograd's thread use it while that thread waits on the backward pass,
    as a training loop does; a job whose thread runs other cuDNN work of PyTorch's meanwhile
    converts with cudnn_handle="own"."""
    if not (torch.cuda.is_available() and torch.backends.cudnn.is_available()):
        return None
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
    try:
        torch_cuda = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # only if loaded
        get = getattr(torch_cuda, _GET_CUDNN_HANDLE)
    except (OSError, AttributeError):
        return None
    instances = cudnn_instances()
    if instances is None or len(instances) != 1:
        return None
    get.argtypes = []
    get.restype = ctypes.c_void_p
    return get() or None


# The benchmark flag as a prepare() found it before turning it off (None: untouched).
_benchmark_before = None


def turn_off_framework_search():
    """PyTorch's cuDNN benchmark off for the process (the value before kept for
    restore_framework_search)."""
    global _benchmark_before
    if torch.backends.cudnn.benchmark:
        if _benchmark_before is None:
            _benchmark_before = True
            _log.info("ucudnn.torch: the step is host-bound: PyTorch's cuDNN benchmark is off for "
                      "this process, cuDNN's heuristics choose (prepare(host_bound_search="
                      "'benchmark') keeps it)")
        torch.backends.cudnn.benchmark = False


def restore_framework_search():
    """PyTorch's cuDNN benchmark as it was before a prepare() turned it off."""
    global _benchmark_before
    if _benchmark_before is not None:
        torch.backends.cudnn.benchmark = _benchmark_before
        _benchmark_before = None


def distributed_job():
    """torch.distributed when this process is in an initialized job, else None."""
    distributed = getattr(torch, "distributed", None)
    if distributed is None or not distributed.is_available() or not distributed.is_initialized():
        return None
    return distributed


def process_rank():
    """This process's rank in a torch.distributed job, 0 outside one."""
    distributed = distributed_job()
    return distributed.get_rank() if distributed is not None else 0


def every_rank(flag, device):
    """Whether `flag` holds on every rank of a torch.distributed job (the minimum over the ranks);
    `flag` itself outside such a job."""
    distributed = distributed_job()
    if distributed is None:
        return bool(flag)
    held = torch.tensor([int(bool(flag))], dtype=torch.int64, device=device)
    distributed.all_reduce(held, op=distributed.ReduceOp.MIN)
    return bool(held.item())


def rank0s(value, device):
    """`value` (an int) as rank 0 of a torch.distributed job has it, so that every rank plans
    alike; `value` itself outside such a job."""
    distributed = distributed_job()
    if distributed is None:
        return value
    held = torch.tensor([value], dtype=torch.int64, device=device)
    distributed.broadcast(held, 0)
    return int(held.item())
