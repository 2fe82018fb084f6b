"""ucudnn-doctor (python -m ucudnn): what this Python environment finds, in one command.

    ucudnn-doctor [--server HOST:PORT] [--wait-s 5] [--json]

Says which client library it loads (and why that one), the library's version, the PyTorch and
device it would run on, whether the planner server answers, whether a plan arrives for a probe
kernel (a 3x3 convolution of ResNet-50 at batch 32, on this device), and what the machine's
caches hold (the plan cache, the compiled plans, prepare()'s host-bound answers). Exit 0 when the
library loads and, with a server, the server answers; 1 otherwise. The server and token come from
--server or UCUDNN_SERVER and UCUDNN_TOKEN, as the adapter's do.
"""

import argparse
import json
import os
import sys

from . import _cache
from . import _lib


def _library():
    source = ("UCUDNN_LIBRARY" if os.environ.get("UCUDNN_LIBRARY") else
              "UCUDNN_BUNDLE" if os.environ.get("UCUDNN_BUNDLE") else "search")
    try:
        library = _lib.load()
    except (_lib.LibraryNotFound, OSError) as e:
        return {"ok": False, "error": str(e)}, None
    return {"ok": True, "path": library.path, "found_through": source,
            "version": library.version() or "unknown (a library without ucudnnShapeGetVersion)"}, \
        library


def _torch():
    try:
        import torch
    except ImportError:
        return {"ok": False, "error": "PyTorch is not installed (ucudnn.torch needs it)"}, None
    info = {"ok": True, "version": torch.__version__, "cuda": torch.cuda.is_available()}
    if info["cuda"]:
        info["device"] = torch.cuda.get_device_name()
        info["cudnn"] = torch.backends.cudnn.version()
    from .torch import framework_identity
    info["framework_identity"] = framework_identity()
    return info, torch


def _probe(library, backend, server, wait_s):
    """Declares one kernel on `backend` and waits for its plan: what came back."""
    options = f"UCUDNN_SERVER={server};UCUDNN_CACHE_PATH=off"
    try:
        context = _lib.Context(library, backend, options)
    except _lib.ShapeError as e:
        return {"ok": False, "error": str(e)}
    layout, data_type, math = ((_lib.NHWC, _lib.HALF, _lib.MATH_TENSOR_OP) if backend == "cudnn"
                               else (_lib.NCHW, _lib.FLOAT, _lib.MATH_DEFAULT))
    shape = _lib.ConvShape(_lib.FORWARD, 32, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1,
                           data_type, layout, math)
    context.prepare([shape], 0)
    answered = context.wait_for_plans(int(wait_s * 1000))
    stats = context.stats()
    context.close()
    reached = stats["plans_received"] > 0 or (stats["plan_requests"] > 0 and
                                              stats["plan_request_failures"] == 0 and answered)
    return {
        "ok": reached,
        "server": server,
        "answered_within_wait": answered,
        "plan_requests": stats["plan_requests"],
        "plan_request_failures": stats["plan_request_failures"],
        "probe_kernel_planned": stats["kernels_planned"] > 0,
    }


def _caches():
    """Each cache's path (None: off) and what it holds; nothing is read beyond sizes and the
    record files' counts (prepare()'s host-bound answers and route decisions)."""
    def size(path):
        return os.path.getsize(path) if path and os.path.isfile(path) else None

    plans = _cache.cache_path("UCUDNN_CACHE_PATH", "plans.bin")
    compiled = _cache.cache_path("UCUDNN_COMPILED_PLAN_CACHE", "compiled_plans")
    files = _cache.compiled_plan_files(compiled)
    def records(path):  # the record files' count (ucudnn/torch/records.py's format)
        try:
            with open(path) as f:
                return len(json.load(f))
        except (TypeError, OSError, ValueError):
            return None

    answers = _cache.cache_path("UCUDNN_HOST_BOUND_CACHE", "host_bound.json")
    routes = _cache.cache_path("UCUDNN_ROUTE_CACHE", "routes.json")
    return {"plan_cache": {"path": plans, "bytes": size(plans)},
            "compiled_plans": {"path": compiled, "plans": len(files),
                               "bytes": sum(size(f) or 0 for f in files)},
            "host_bound_answers": {"path": answers, "records": records(answers)},
            "route_decisions": {"path": routes, "records": records(routes)}}


def diagnose(server, wait_s):
    report = {}
    report["library"], library = _library()
    report["torch"], torch = _torch()
    backend = "cudnn" if torch is not None and report["torch"].get("cuda") else "cpu"
    report["backend"] = backend
    if library is not None and server:
        report["server"] = _probe(library, backend, server, wait_s)
    else:
        report["server"] = {"ok": None, "note": "no server given (--server or UCUDNN_SERVER): "
                            "convolutions run PyTorch's own"}
    report["caches"] = _caches()
    return report


def _megabytes(count):
    return "none yet" if count is None else f"{count / 1e6:.1f} MB"


def _print(report):
    lib = report["library"]
    print(f"library:  {lib.get('path') or 'NOT FOUND'}" +
          (f" (through {lib['found_through']})" if lib["ok"] else f"\n          {lib['error']}"))
    if lib["ok"]:
        print(f"version:  {lib['version']}")
    t = report["torch"]
    if t["ok"]:
        device = f"{t.get('device')} (cuDNN {t.get('cudnn')})" if t["cuda"] else "no CUDA device"
        print(f"torch:    {t['version']}; {device}; plans as {t['framework_identity']}")
    else:
        print(f"torch:    {t['error']}")
    s = report["server"]
    if s["ok"] is None:
        print(f"server:   {s['note']}")
    elif "error" in s:
        print(f"server:   {s['error']}")
    else:
        state = "answers" if s["ok"] else "DOES NOT ANSWER"
        print(f"server:   {s['server']} {state} ({s['plan_requests']} requests, "
              f"{s['plan_request_failures']} failed)")
        if s["ok"]:
            plans = ("a plan arrived for the probe kernel" if s["probe_kernel_planned"] else
                     "no plan yet for the probe kernel (no timings for this device: is a worker "
                     "serving it, and does the token let requests queue benchmarks?)")
            print(f"plans:    {plans}")
    c = report["caches"]
    plan_cache, compiled, answers = (c["plan_cache"], c["compiled_plans"],
                                     c["host_bound_answers"])
    print("caches:   plan cache " + (f"{plan_cache['path']} ({_megabytes(plan_cache['bytes'])})"
                                     if plan_cache["path"] else "off"))
    print("          compiled plans " +
          (f"{compiled['path']} ({compiled['plans']} plans, {_megabytes(compiled['bytes'])})"
           if compiled["path"] else "off"))
    print("          host-bound answers " +
          (f"{answers['path']} ({answers['records'] or 0} steps)" if answers["path"] else "off"))
    routes = c["route_decisions"]
    print("          route decisions " +
          (f"{routes['path']} ({routes['records'] or 0} steps)" if routes["path"] else "off"))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ucudnn-doctor", description=__doc__.split("\n\n")[0],
                                     epilog="python -m ucudnn curve --help (ucudnn-curve): the "
                                     "step's time-memory curve from a recorded memory profile")
    parser.add_argument("--server", default=os.environ.get("UCUDNN_SERVER", ""),
                        help="planner HOST:PORT (default: $UCUDNN_SERVER)")
    parser.add_argument("--wait-s", type=float, default=5.0,
                        help="how long to wait for the probe kernel's plan")
    parser.add_argument("--json", action="store_true", help="the report as JSON")
    args = parser.parse_args(argv)
    if args.wait_s < 0:
        parser.error("--wait-s must be >= 0")
    report = diagnose(args.server, args.wait_s)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    healthy = report["library"]["ok"] and report["server"]["ok"] is not False
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
