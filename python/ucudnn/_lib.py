"""The ctypes binding of libucudnn_client.so's shape-level C API (ucudnn_shape.h): no compiler and
no PyTorch headers needed, one C call per convolution through a kernel handle resolved once
(ucudnnShapeGetKernel, ucudnnShapeKernelRun; see the README's design note)."""

import ctypes
import os
import threading

# ucudnnShapeStatus_t
SUCCESS = 0
NO_PLAN = 1
BAD_PARAM = 2
UNAVAILABLE = 3
EXECUTION_FAILED = 4
ALLOC_FAILED = 5
INTERNAL_ERROR = 6
WORKSPACE_TOO_SMALL = 7
FRAMEWORK = 8
_STATUS_NAMES = {
    SUCCESS: "SUCCESS",
    NO_PLAN: "NO_PLAN",
    BAD_PARAM: "BAD_PARAM",
    UNAVAILABLE: "UNAVAILABLE",
    EXECUTION_FAILED: "EXECUTION_FAILED",
    ALLOC_FAILED: "ALLOC_FAILED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
    WORKSPACE_TOO_SMALL: "WORKSPACE_TOO_SMALL",
    FRAMEWORK: "FRAMEWORK",
}

# ucudnnConvolutionOp_t, ucudnnShapeDataType_t, ucudnnShapeLayout_t, ucudnnShapeMath_t
FORWARD, BACKWARD_DATA, BACKWARD_FILTER = 0, 1, 2
FLOAT, HALF, BFLOAT16 = 0, 1, 2
NCHW, NHWC = 0, 1
MATH_DEFAULT, MATH_TENSOR_OP, MATH_TENSOR_OP_ALLOW_CONVERSION, MATH_FMA = 0, 1, 2, 3

_LIBRARY_NAME = "libucudnn_client.so"


class ConvShape(ctypes.Structure):
    """ucudnnConvShape_t."""

    _fields_ = [("op", ctypes.c_int)] + [
        (name, ctypes.c_int64)
        for name in ("n", "c", "h", "w", "k", "r", "s", "pad_h", "pad_w", "stride_h", "stride_w",
                     "dilation_h", "dilation_w", "groups")
    ] + [("data_type", ctypes.c_int), ("layout", ctypes.c_int), ("math", ctypes.c_int)] + [
        (name, ctypes.c_int64) for name in ("d", "t", "pad_d", "stride_d", "dilation_d")]


STATS_FIELDS = ("kernels", "kernels_planned", "planned_calls", "fallback_calls",
                "rejected_plan_calls", "passthrough_calls", "untracked_calls", "plan_requests",
                "plan_request_failures", "plans_received", "plans_from_cache", "failed_plans",
                "recovered_calls", "contributed_problems", "contributed_timings",
                "contribution_failures", "framework_calls")


class KernelInfo(ctypes.Structure):
    """ucudnnShapeKernelInfo_t."""

    _fields_ = [("state", ctypes.c_int32), ("segments", ctypes.c_int32),
                ("predicted_ms", ctypes.c_double), ("framework_ms", ctypes.c_double),
                ("undivided_ms", ctypes.c_double), ("workspace_bytes", ctypes.c_uint64)]


# ucudnnShapeKernelInfo_t.state
KERNEL_STATES = ("waiting", "planned", "framework", "no_plan", "missing")


class Stats(ctypes.Structure):
    """ucudnnStats_t."""

    _fields_ = [(name, ctypes.c_uint64) for name in STATS_FIELDS]


class LibraryNotFound(OSError):
    pass


class ShapeError(RuntimeError):
    """A call of the C API failed; `status` is its ucudnnShapeStatus_t."""

    def __init__(self, function, status, detail):
        name = _STATUS_NAMES.get(status, str(status))
        super().__init__(f"{function}: {name}" + (f": {detail}" if detail else ""))
        self.status = status


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    bundle = os.environ.get("UCUDNN_BUNDLE")
    if bundle:
        yield os.path.join(bundle, "lib", _LIBRARY_NAME)
    yield os.path.join(here, "lib", _LIBRARY_NAME)          # installed beside the package
    yield os.path.join(here, "..", "..", "build", "lib", _LIBRARY_NAME)  # the source tree
    yield os.path.join(here, "..", "..", ".bundle", "lib", _LIBRARY_NAME)


def _from_system_loader():
    """The path the system loader resolves libucudnn_client.so to (after `cmake --install`, its
    lib directory on LD_LIBRARY_PATH or in ld.so.conf), or None."""
    try:
        library = ctypes.CDLL(_LIBRARY_NAME)
    except OSError:
        return None
    del library  # stays loaded: the path is read from the process's mappings
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if path.endswith(_LIBRARY_NAME) or f"/{_LIBRARY_NAME}." in path:
                return path
    return _LIBRARY_NAME  # loadable by name, though its path is not visible


def find_library():
    """The path of libucudnn_client.so: $UCUDNN_LIBRARY when set (it must exist), else
    $UCUDNN_BUNDLE/lib, beside the package, the source tree's build/lib or .bundle/lib, else
    wherever the system loader finds it (after `cmake --install`)."""
    explicit = os.environ.get("UCUDNN_LIBRARY")
    if explicit:
        if not os.path.isfile(explicit):
            raise LibraryNotFound(f"UCUDNN_LIBRARY={explicit}: no such file")
        return explicit
    tried = []
    for path in _candidates():
        path = os.path.normpath(path)
        if os.path.isfile(path):
            return path
        tried.append(path)
    system = _from_system_loader()
    if system:
        return system
    tried.append("the system loader")
    raise LibraryNotFound(
        f"{_LIBRARY_NAME} not found (tried {', '.join(tried)}); build it "
        "(cmake --preset default && cmake --build build), install it (cmake --install build "
        "--component client, with its lib directory on the loader's path), or set "
        "UCUDNN_LIBRARY to its path")


class Library:
    """The loaded library with typed entry points. One per process (load())."""

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(path)
        void_p, size_t, shape_p = ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ConvShape)
        signatures = {
            "ucudnnShapeCreate": [ctypes.POINTER(void_p), ctypes.c_char_p, ctypes.c_char_p],
            "ucudnnShapeDestroy": [void_p],
            "ucudnnShapeWorkspaceSize": [void_p, shape_p, size_t, ctypes.POINTER(size_t)],
            "ucudnnShapeConvolution": [void_p, shape_p, void_p, void_p, void_p, void_p, void_p,
                                       size_t, ctypes.c_float, ctypes.c_float],
            "ucudnnShapePrepare": [void_p, shape_p, size_t, size_t],
            "ucudnnShapeWaitForPlans": [void_p, ctypes.c_int64],
            "ucudnnShapeGetStats": [void_p, ctypes.POINTER(Stats)],
            "ucudnnShapeGetKernel": [void_p, shape_p, size_t, ctypes.POINTER(void_p)],
            "ucudnnShapeKernelWorkspaceSize": [void_p, ctypes.POINTER(size_t)],
            # The hot path: kernel, a, b, out, stream, workspace, workspace_bytes.
            "ucudnnShapeKernelRun": [void_p] * 6 + [size_t],
            "ucudnnShapeGetKernelInfo": [void_p, ctypes.POINTER(KernelInfo)],
            # context, shapes, time_ms, spread_ms, workspace_bytes, count.
            "ucudnnShapeSubmitFrameworkTimings": [void_p, shape_p, ctypes.POINTER(ctypes.c_double),
                                                  ctypes.POINTER(ctypes.c_double),
                                                  ctypes.POINTER(ctypes.c_uint64), size_t],
        }
        for name, argtypes in signatures.items():
            function = getattr(lib, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int
            setattr(self, name[len("ucudnn"):], function)
        lib.ucudnnShapeLastError.argtypes = []
        lib.ucudnnShapeLastError.restype = ctypes.c_char_p
        self._last_error = lib.ucudnnShapeLastError
        self._version = getattr(lib, "ucudnnShapeGetVersion", None)  # older libraries lack it
        self.ShapeCreateOnHandle = getattr(lib, "ucudnnShapeCreateOnHandle", None)  # older: none
        if self.ShapeCreateOnHandle is not None:
            self.ShapeCreateOnHandle.argtypes = [ctypes.POINTER(void_p), void_p, ctypes.c_char_p]
            self.ShapeCreateOnHandle.restype = ctypes.c_int
        self.ShapeGetKernelFrameworkWorkspace = getattr(  # older libraries lack it
            lib, "ucudnnShapeGetKernelFrameworkWorkspace", None)
        if self.ShapeGetKernelFrameworkWorkspace is not None:
            self.ShapeGetKernelFrameworkWorkspace.argtypes = [void_p,
                                                              ctypes.POINTER(ctypes.c_uint64)]
            self.ShapeGetKernelFrameworkWorkspace.restype = ctypes.c_int
        self.ShapeCheck = getattr(lib, "ucudnnShapeCheck", None)  # older libraries lack it
        if self.ShapeCheck is not None:
            self.ShapeCheck.argtypes = [ctypes.POINTER(ConvShape)]
            self.ShapeCheck.restype = ctypes.c_int
        if self._version is not None:
            self._version.argtypes = []
            self._version.restype = ctypes.c_char_p

    def version(self):
        """The library's version ("0.1.0"), or None for a library without ucudnnShapeGetVersion."""
        return self._version().decode() if self._version is not None else None

    def refusal(self, shape):
        """Why the library cannot plan `shape` (a ConvShape outside its limits: an empty batch,
        a spatial size over 32768), or None where it can (or, an older library, cannot say)."""
        if self.ShapeCheck is None or self.ShapeCheck(ctypes.byref(shape)) != BAD_PARAM:
            return None
        return (self._last_error() or b"").decode("utf-8", "replace")

    def check(self, function, status):
        """Raises ShapeError unless `status` is SUCCESS, NO_PLAN or FRAMEWORK (the plan chose
        the framework's own convolution); returns it."""
        if status in (SUCCESS, NO_PLAN, FRAMEWORK):
            return status
        detail = ""
        if status in (BAD_PARAM, UNAVAILABLE):
            detail = (self._last_error() or b"").decode("utf-8", "replace")
        raise ShapeError(function, status, detail)


_loaded = None
_load_lock = threading.Lock()


def load():
    """The process's Library, loaded at the first call."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            _loaded = Library(find_library())
        return _loaded


class Context:
    """A ucudnnShapeContext_t: a session on `backend` ("cudnn": the current GPU; "cpu"). On
    "cudnn", `cudnn_handle` (a cudnnHandle_t as an int, of the same cuDNN library instance) is
    the framework's handle the context borrows rather than making its own; None, or a library
    without ucudnnShapeCreateOnHandle: its own. `borrowed` says which it got."""

    def __init__(self, library, backend, options, cudnn_handle=None):
        self._lib = library
        handle = ctypes.c_void_p()
        self.borrowed = bool(cudnn_handle) and backend == "cudnn" and (
            library.ShapeCreateOnHandle is not None)
        if self.borrowed:
            library.check("ucudnnShapeCreateOnHandle",
                          library.ShapeCreateOnHandle(ctypes.byref(handle), cudnn_handle,
                                                      options.encode()))
        else:
            library.check("ucudnnShapeCreate",
                          library.ShapeCreate(ctypes.byref(handle), backend.encode(),
                                              options.encode()))
        self.handle = handle
        self.backend = backend

    def close(self):
        if self.handle:
            self._lib.check("ucudnnShapeDestroy", self._lib.ShapeDestroy(self.handle))
            self.handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the process is going away anyway
            pass

    def workspace_size(self, shape, limit=0):
        """Bytes the kernel's plan needs from the caller, or None when it has no plan now."""
        size = ctypes.c_size_t()
        status = self._lib.check(
            "ucudnnShapeWorkspaceSize",
            self._lib.ShapeWorkspaceSize(self.handle, ctypes.byref(shape), limit,
                                         ctypes.byref(size)))
        return None if status in (NO_PLAN, FRAMEWORK) else size.value

    def convolution(self, shape, a, b, out, stream, workspace, workspace_bytes, alpha=1.0,
                    beta=0.0):
        """True when the plan ran; False: no usable plan, the caller runs its own convolution."""
        status = self._lib.check(
            "ucudnnShapeConvolution",
            self._lib.ShapeConvolution(self.handle, ctypes.byref(shape), a, b, out, stream,
                                       workspace, workspace_bytes, alpha, beta))
        return status == SUCCESS

    def kernel(self, shape, limit=0):
        """The kernel handle of `shape` at `limit` (an int), declared at first sight: one per
        shape and limit, each planned at its own limit (per-kernel mode)."""
        handle = ctypes.c_void_p()
        self._lib.check("ucudnnShapeGetKernel",
                        self._lib.ShapeGetKernel(self.handle, ctypes.byref(shape), limit,
                                                 ctypes.byref(handle)))
        return handle.value

    def kernel_workspace_size(self, kernel):
        """Bytes the plan of `kernel` (a handle) needs from the caller now, or None: no plan."""
        size = ctypes.c_size_t()
        status = self._lib.check("ucudnnShapeKernelWorkspaceSize",
                                 self._lib.ShapeKernelWorkspaceSize(kernel, ctypes.byref(size)))
        return None if status in (NO_PLAN, FRAMEWORK) else size.value

    def prepare(self, shapes, limit=0):
        array = (ConvShape * len(shapes))(*shapes)
        self._lib.check("ucudnnShapePrepare",
                        self._lib.ShapePrepare(self.handle, array, len(shapes), limit))

    def wait_for_plans(self, timeout_ms):
        """True when no kernel still waits for the server's answer."""
        status = self._lib.check("ucudnnShapeWaitForPlans",
                                 self._lib.ShapeWaitForPlans(self.handle, int(timeout_ms)))
        return status == SUCCESS

    def kernel_info(self, kernel):
        """Where `kernel` (a handle) stands: a dict of ucudnnShapeKernelInfo_t's fields, with
        "state" one of KERNEL_STATES."""
        info = KernelInfo()
        self._lib.check("ucudnnShapeGetKernelInfo",
                        self._lib.ShapeGetKernelInfo(kernel, ctypes.byref(info)))
        result = {name: getattr(info, name) for name, _ in KernelInfo._fields_}
        result["state"] = KERNEL_STATES[info.state]
        # The workspace of the framework's time (0: unknown, or a library without the call).
        result["framework_workspace_bytes"] = 0
        if self._lib.ShapeGetKernelFrameworkWorkspace is not None:
            workspace = ctypes.c_uint64()
            self._lib.check("ucudnnShapeGetKernelFrameworkWorkspace",
                            self._lib.ShapeGetKernelFrameworkWorkspace(kernel,
                                                                       ctypes.byref(workspace)))
            result["framework_workspace_bytes"] = workspace.value
        return result

    def submit_framework_timings(self, shapes, times_ms, spreads_ms, workspaces):
        """Submits the framework's own times of `shapes` (full batch each) as this context's
        UCUDNN_FRAMEWORK; the kernels' plans are asked for again in the background."""
        count = len(shapes)
        if not len(times_ms) == len(spreads_ms) == len(workspaces) == count:
            raise ValueError("shapes, times_ms, spreads_ms and workspaces differ in length")
        self._lib.check(
            "ucudnnShapeSubmitFrameworkTimings",
            self._lib.ShapeSubmitFrameworkTimings(
                self.handle, (ConvShape * count)(*shapes),
                (ctypes.c_double * count)(*times_ms), (ctypes.c_double * count)(*spreads_ms),
                (ctypes.c_uint64 * count)(*workspaces), count))

    def stats(self):
        stats = Stats()
        self._lib.check("ucudnnShapeGetStats",
                        self._lib.ShapeGetStats(self.handle, ctypes.byref(stats)))
        return {name: getattr(stats, name) for name in STATS_FIELDS}
