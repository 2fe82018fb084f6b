#!/usr/bin/env python3
"""ucudnn.torch on a GPU: ResNet-50 (defined here, no downloads) training steps, native PyTorch
against the adapter, each configuration in a process of its own (cuDNN reads
CUDNN_CONV_WSCAP_DBG at start, and time to the first fast step counts from a new process).

    torch_adapter.py run   --device cuda --mode native|ucudnn [--amp] [--channels-last] ...
        one configuration; its JSON (losses, step times, time to the first fast step, the
        library's counters, the adapter's host time) to --json-out or stdout.
    torch_adapter.py overhead --device cpu|cuda [--plan-cache-tool TOOL | --option server=h:p]
        the adapter's own host time per convolution call: one tiny Conv2d (the convolution itself
        negligible), forward and backward (3 library calls: forward, backward-data,
        backward-filter) in a loop, native PyTorch against the converted layer running an
        undivided plan through the library, alternating rounds in one process; the overhead is
        the median of the rounds' differences. Fails unless every converted call ran the plan.
        --route framework: the layer decided for PyTorch's own instead (the per-layer rule's
        route, what a layer whose plans save little costs); --autocast: under autocast.
    torch_adapter.py suite --server HOST:PORT --out DIR [--batch 256 --steps 20]
        every configuration, compared: fp32 and AMP fp16 channels-last, native vs ucudnn at a
        64 MiB cap (losses must agree), native with CUDNN_CONV_WSCAP_DBG=64, native uncapped,
        ucudnn with undivided plans, and the overhead run on the device: the adapter's overhead
        per call times the ResNet-50 step's calls, against its step time (target < 1%).
        DIR/torch_adapter.json; exit 1 when a run failed or losses disagree.

scripts/gpu_torch.sh runs the suite from the bundle on the GPU machine with a warm database.
"""

import time

PROCESS_START = time.monotonic()  # before importing torch: time to the first fast step

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_common  # noqa: E402
REPO = os.path.dirname(HERE)

# Loss agreement, native vs converted, per step: relative to the native loss. Different cuDNN
# algorithms sum in different orders (and TF32 rounds), so trajectories drift slightly apart.
LOSS_RTOL = {"fp32": 2e-2, "amp": 5e-2}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="one configuration, JSON out")
    run.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    run.add_argument("--mode", default="native", choices=("native", "ucudnn"))
    run.add_argument("--batch", type=int, default=256)
    run.add_argument("--steps", type=int, default=20)
    run.add_argument("--image-size", type=int, default=224)
    run.add_argument("--amp", action="store_true", help="autocast fp16 (bf16 on cpu)")
    run.add_argument("--channels-last", action="store_true")
    run.add_argument("--benchmark", action="store_true", help="torch.backends.cudnn.benchmark")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="ucudnn.torch.convert option, e.g. server=h:p (repeatable)")
    run.add_argument("--prepare-wait-s", type=float, default=0.0,
                     help="ucudnn: wait this long for plans after prepare()")
    run.add_argument("--json-out", default="")

    over = sub.add_parser("overhead", help="the adapter's host time per call, JSON out")
    over.add_argument("--device", default="cpu", choices=("cuda", "cpu"))
    over.add_argument("--batch", type=int, default=2)
    over.add_argument("--channels", type=int, default=4)
    over.add_argument("--image-size", type=int, default=4)
    over.add_argument("--calls", type=int, default=1000, help="forward+backward steps a round")
    over.add_argument("--rounds", type=int, default=9, help="rounds of each, alternating")
    over.add_argument("--seed", type=int, default=0)
    over.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="ucudnn.torch.convert option, e.g. server=h:p (repeatable)")
    over.add_argument("--prepare-wait-s", type=float, default=0.0,
                      help="with a server: wait this long for the plans after prepare()")
    over.add_argument("--plan-cache-tool", default="",
                      help="instead of a server (CPU): undivided plans written into a local plan "
                      "cache by this ucudnn_test_write_plan_cache")
    over.add_argument("--route", default="plan", choices=("plan", "framework"),
                      help="plan: the layer runs its plan; framework: the layer decided for "
                      "PyTorch's own (the per-layer rule's route), forced after the warm-up")
    over.add_argument("--autocast", action="store_true",
                      help="the calls under autocast (bfloat16 on the CPU, float16 on CUDA)")
    over.add_argument("--adapter", default=os.path.join(REPO, "python"),
                      help="the directory holding the ucudnn package (another version's, to "
                      "compare; UCUDNN_LIBRARY names its library)")
    over.add_argument("--json-out", default="")

    suite = sub.add_parser("suite", help="every configuration, compared")
    suite.add_argument("--server", required=True, help="planner HOST:PORT (warm database)")
    suite.add_argument("--out", required=True)
    suite.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    suite.add_argument("--batch", type=int, default=256)
    suite.add_argument("--steps", type=int, default=20)
    suite.add_argument("--image-size", type=int, default=224)
    suite.add_argument("--warm-wait-s", type=float, default=200.0,
                       help="first run of a precision: how long to wait for every plan (cold "
                       "kernels)")
    suite.add_argument("--run-timeout-s", type=float, default=120.0,
                       help="per run, beyond its wait for plans")
    suite.add_argument("--python", default=sys.executable)
    suite.add_argument("--plan-cache-tool", default="",
                       help="the overhead run's plans from this tool instead of the server (CPU)")
    args = parser.parse_args(argv)
    for name in ("batch", "steps", "image_size", "channels", "calls", "rounds"):
        if getattr(args, name, 1) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.command == "run" and args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is never a steady one)")
    for option in getattr(args, "option", []):
        if "=" not in option:
            parser.error(f"--option {option!r}: expected KEY=VALUE")
    return args


# ---- ResNet-50 (torchvision's v1.5 layout: stride in the 3x3 of each bottleneck) ---------------
def resnet50(num_classes=1000):
    from torch import nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride):
            super().__init__()
            width = planes
            self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or inplanes != planes * 4:
                self.downsample = nn.Sequential(
                    nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes * 4))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    layers = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
              nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
    inplanes = 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
            inplanes = planes * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, num_classes)]
    return nn.Sequential(*layers)


# ---- one configuration ---------------------------------------------------------------------------
def run_one(args):
    import torch
    import torch.nn.functional as F

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_adapter.py: --device cuda but torch.cuda.is_available() is False")
    torch.backends.cudnn.benchmark = args.benchmark
    torch.manual_seed(args.seed)
    model = resnet50().to(device)
    generator = torch.Generator().manual_seed(args.seed + 1)
    data = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=generator)
    labels = torch.randint(0, 1000, (args.batch,), generator=generator)
    data, labels = data.to(device), labels.to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        data = data.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaling = args.amp and device.type == "cuda"
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # PyTorch >= 2.3
        scaler = torch.amp.GradScaler("cuda", enabled=scaling)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=scaling)

    host = {"seconds": 0.0, "calls": 0}
    ut = None
    if args.mode == "ucudnn":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import ucudnn.torch as ut

        options = dict(option.split("=", 1) for option in args.option)
        ut.convert(model, **options)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=args.amp):
            ut.prepare(model, data, wait_ms=int(args.prepare_wait_s * 1000))
        # The time in the adapter's library calls from here on (LayerConv.run: kernel handle,
        # stream, workspace, the C call with the library's cuDNN launches; issued
        # asynchronously). Its overhead against PyTorch's own convolution: the overhead run.
        from ucudnn.torch.conv import LayerConv
        original_run = LayerConv.run

        def timed_run(self, *a):
            start = time.perf_counter()
            try:
                return original_run(self, *a)
            finally:
                host["seconds"] += time.perf_counter() - start
                host["calls"] += 1

        LayerConv.run = timed_run

    losses, step_ms, ends, host_ms = [], [], [], []
    for _ in range(args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        host_before = host["seconds"]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=args.amp):
            loss = F.cross_entropy(model(data), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())  # synchronizes
        if device.type == "cuda":
            torch.cuda.synchronize()
        end = time.perf_counter()
        step_ms.append((end - start) * 1e3)
        ends.append(time.monotonic())
        host_ms.append((host["seconds"] - host_before) * 1e3)
    fast_index, fast_s = torch_common.first_fast_step(step_ms, ends, PROCESS_START)
    steady = torch_common.steady_steps(step_ms)
    result = {
        "config": {k: v for k, v in vars(args).items() if k not in ("command", "json_out")},
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cudnn_version": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "cudnn_wscap_dbg": os.environ.get("CUDNN_CONV_WSCAP_DBG", ""),
        "losses": losses,
        "step_ms": step_ms,
        "median_step_ms": statistics.median(steady),
        "first_fast_step": fast_index,
        "time_to_first_fast_step_s": fast_s,
    }
    if ut is not None:
        result["stats"] = ut.stats(model)
        result["adapter_host_ms_per_step"] = statistics.median(host_ms[len(host_ms) // 2:])
        result["adapter_calls"] = host["calls"]
    if device.type == "cuda":
        result["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    return result


# ---- the adapter's overhead per call ----------------------------------------------------------
LIBRARY_CALLS_PER_LAYER_STEP = 3  # forward, backward-data, backward-filter


def write_plan_cache(tool, path, shapes, limit, algos="1,2", split="halves", framework="",
                     framework_plans=None):
    """Plans for `shapes` (ConvShapes, each kernel once) written into the local plan cache file
    at `path` by `tool` (tests' ucudnn_test_write_plan_cache, CPU backend): micro-batched
    (halves) or undivided (split "whole"), their segments cycling through the CPU algorithms
    `algos`, for the per-kernel limit `limit`, asked as framework identity `framework`; a shape
    for which `framework_plans(shape)` is true gets the plan that chose the framework's own
    convolution instead. The number of kernels."""
    fields = [name for name, _ in type(shapes[0])._fields_] if shapes else []
    lines = sorted({" ".join(str(getattr(shape, name)) for name in fields) + (
        " framework" if framework_plans is not None and framework_plans(shape) else "")
        for shape in shapes})
    kernels_file = path + ".kernels"
    with open(kernels_file, "w") as f:
        f.write("\n".join(lines) + "\n")
    # Plans are kept per framework identity (UCUDNN_FRAMEWORK, which convert() sets).
    subprocess.run([tool, path, str(limit), kernels_file, algos, split] + (
        [framework] if framework else []), check=True, stdout=subprocess.DEVNULL)
    return len(lines)


def undivided_plan_cache(ut, model, sample, tool, directory):
    """Options that give `model`'s kernels undivided plans from a local plan cache written by
    `tool` (ucudnn_test_write_plan_cache), without a server."""
    ut.convert(model, server="", cache_path="off")
    shapes = [s for group in ut.kernels(model, sample).values() for s in group]
    cache = os.path.join(directory, "plans.bin")
    limit = 64 << 20  # the adapter's per-kernel limit when none is configured
    write_plan_cache(tool, cache, shapes, limit, algos="1", split="whole",
                     framework=ut.framework_identity())
    return {"server": "", "cache_path": cache, "policy": "undivided"}


def overhead_one(args):
    import copy
    import gc
    import tempfile

    sys.path.insert(0, args.adapter)
    import torch
    from torch import nn
    import ucudnn.torch as ut
    from ucudnn import _lib
    from ucudnn.torch.module import layer_convs

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_adapter.py: --device cuda but torch.cuda.is_available() is False")
    if device.type == "cpu":
        torch.set_num_threads(1)  # tiny tensors: no thread pool to wake, on either side
    torch.manual_seed(args.seed)
    # ResNet-50's convolutions have no bias; 1x1 keeps the convolution itself negligible.
    native = nn.Conv2d(args.channels, args.channels, 1, bias=False).to(device)
    converted = copy.deepcopy(native)
    x = torch.randn(args.batch, args.channels, args.image_size, args.image_size, device=device,
                    requires_grad=True)
    grad = torch.randn(args.batch, args.channels, args.image_size, args.image_size, device=device)
    options = dict(option.split("=", 1) for option in args.option)
    directory = tempfile.TemporaryDirectory()
    if args.plan_cache_tool:
        options.update(undivided_plan_cache(ut, converted, x, args.plan_cache_tool,
                                            directory.name))
    # The measured case is a layer running its plans, whatever they save.
    ut.convert(converted, min_layer_gain_us=0, **options)
    if not args.plan_cache_tool:
        # route "rule": the layer runs its plans, whatever a measured route would choose.
        ut.prepare(converted, x, wait_ms=int(args.prepare_wait_s * 1000), measure_framework=False,
                   route="rule")

    # On the CPU the whole step runs on this thread (autograd runs CPU backward passes on the
    # caller's): its CPU time, which other processes on a shared machine do not inflate. On a
    # GPU, backward runs on PyTorch's device threads: wall time, synchronized, while the host is
    # the bottleneck (tiny kernels).
    clock = time.thread_time if device.type == "cpu" else time.perf_counter

    autocast_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    autocast = ((lambda: torch.autocast(device.type, dtype=autocast_dtype)) if args.autocast
                else contextlib.nullcontext)
    grad_y = grad.to(autocast_dtype) if args.autocast else grad  # the output's dtype

    def time_round(model, calls):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = clock()
        for _ in range(calls):
            with autocast():
                y = model(x)
            y.backward(grad_y)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (clock() - start) / calls * 1e6

    def check_planned(steps):
        stats = ut.stats(converted)
        if args.route == "framework":
            return stats
        if (stats["planned_calls"] != LIBRARY_CALLS_PER_LAYER_STEP * steps or
                stats["fallback_calls"] != 0):
            raise SystemExit(
                "torch_adapter.py overhead: the library ran no plan for some of the layer's "
                f"calls (stats {stats}); the measured case is a kernel with a plan (give the "
                "server with policy=undivided, or --plan-cache-tool)")
        return stats

    warmup = max(10, args.calls // 10)
    for model in (native, converted):
        time_round(model, warmup)
    check_planned(warmup)
    if args.route == "framework":
        # The route prepare() gives a layer whose plans save less than min_layer_gain_us, forced
        # here (the decision needs PyTorch's timings from a cluster) and held for the run: the
        # native route from its next call on. The layer is the model here, so its once-a-step
        # hook (_recheck_native_routes) is in every call measured.
        for conv in layer_convs(converted):
            conv.framework_layer, conv.layer_recheck = True, float("inf")
    native_us, converted_us, differences = [], [], []
    gc.collect()
    gc.disable()
    try:
        for i in range(args.rounds):
            # Alternating which goes first, so that neither always runs on a warmer machine.
            if i % 2 == 0:
                native_us.append(time_round(native, args.calls))
                converted_us.append(time_round(converted, args.calls))
            else:
                converted_us.append(time_round(converted, args.calls))
                native_us.append(time_round(native, args.calls))
            differences.append(converted_us[-1] - native_us[-1])
    finally:
        gc.enable()
    stats = check_planned(warmup + args.rounds * args.calls)
    if args.route == "framework" and stats["native_route_layers"] != 1:
        raise SystemExit(f"torch_adapter.py overhead: the layer left the native route ({stats})")
    directory.cleanup()
    per_layer_step = statistics.median(differences)
    return {
        "config": {k: v for k, v in vars(args).items() if k not in ("command", "json_out")},
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "adapter": os.path.dirname(ut.__file__),
        "library": _lib.load().path,
        "clock": "thread CPU time" if device.type == "cpu" else "wall time",
        "library_calls_per_layer_step": LIBRARY_CALLS_PER_LAYER_STEP,
        "native_us_per_layer_step": statistics.median(native_us),
        "converted_us_per_layer_step": statistics.median(converted_us),
        "overhead_us_per_layer_step": per_layer_step,
        "overhead_us_per_call": per_layer_step / LIBRARY_CALLS_PER_LAYER_STEP,
        "rounds_us": {"native": native_us, "converted": converted_us},
        "stats": stats,
    }


# ---- the suite -----------------------------------------------------------------------------------
def suite_configs(args):
    """(name, run arguments, extra environment) of every configuration, in run order. The first
    ucudnn runs wait for every plan (their kernels may be cold in the database)."""
    server = f"server={args.server}"
    cap = [f"--option={server}", "--option=workspace_bytes=64MiB", "--option=cache_path=off"]
    common = ["--device", args.device, "--batch", str(args.batch), "--steps", str(args.steps),
              "--image-size", str(args.image_size)]
    # The server holds a request while its worker benchmarks what is missing (cold kernels).
    wait_ms = int(args.warm_wait_s * 1000)
    wait = ["--prepare-wait-s", str(args.warm_wait_s), f"--option=server_wait_ms={wait_ms}",
            f"--option=deadline_ms={wait_ms + 30000}"]
    warmup_steps = ["--steps", "2"]
    run = ["run"] + common
    configs = []
    for precision, flags in (("fp32", []), ("amp", ["--amp", "--channels-last"])):
        configs += [
            (f"{precision}_ucudnn_warmup",
             run + flags + ["--mode", "ucudnn"] + cap + wait + warmup_steps, {}),
            (f"{precision}_ucudnn_64mib", run + flags + ["--mode", "ucudnn"] + cap, {}),
            (f"{precision}_native_benchmark", run + flags + ["--benchmark"], {}),
            (f"{precision}_native_wscap64", run + flags + ["--benchmark"],
             {"CUDNN_CONV_WSCAP_DBG": "64"}),
        ]
    undivided = ["--option=policy=undivided"]
    configs.append(("fp32_ucudnn_undivided", run + ["--mode", "ucudnn"] + cap + undivided + wait,
                    {}))
    plans = (["--plan-cache-tool", args.plan_cache_tool] if args.plan_cache_tool else
             [f"--option={server}", "--option=cache_path=off"] + undivided + wait)
    configs.append(("overhead_undivided", ["overhead", "--device", args.device] + plans, {}))
    return configs


def run_config(args, name, run_args, env_extra, out_dir):
    timeout = args.run_timeout_s + (args.warm_wait_s if "--prepare-wait-s" in run_args else 0)
    json_path = os.path.join(out_dir, f"{name}.json")
    log_path = os.path.join(out_dir, f"{name}.log")
    env = dict(os.environ, **env_extra)
    command = ([args.python, os.path.abspath(__file__), run_args[0], "--json-out", json_path] +
               run_args[1:])
    print(f"[torch_adapter] {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    with open(log_path, "w") as log:
        try:
            rc = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s (see {log_path})"}
    if rc != 0 or not os.path.exists(json_path):
        with open(log_path) as log:
            tail = log.read()[-2000:]
        return {"error": f"exit {rc}; last output:\n{tail}"}
    with open(json_path) as f:
        return json.load(f)


def args_device(result):
    return result.get("config", {}).get("device", "cuda")


def compare(results):
    """The report's verdicts: loss agreement, speedups, overhead. (report, failures)."""
    report, failures = {}, []
    for name, result in results.items():
        if "error" in result:
            failures.append(f"{name}: {result['error']}")
    for precision in ("fp32", "amp"):
        native = results.get(f"{precision}_native_benchmark", {})
        mine = results.get(f"{precision}_ucudnn_64mib", {})
        capped = results.get(f"{precision}_native_wscap64", {})
        if "losses" not in native or "losses" not in mine:
            continue
        if args_device(mine) == "cuda" and mine["stats"]["kernels_planned"] == 0:
            failures.append(f"{precision}: no kernel has a plan (is the worker's device "
                            "fingerprint, cuDNN version included, the training process's? see "
                            "stack.log and the worker's log in logs.txt)")
        worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(mine["losses"], native["losses"]))
        ok = worst <= LOSS_RTOL[precision]
        if not ok:
            failures.append(f"{precision}: losses differ by {worst:.3g} relative "
                            f"(> {LOSS_RTOL[precision]})")
        entry = {
            "loss_max_rel_diff": worst,
            "losses_agree": ok,
            "step_ms": {"ucudnn_64mib": mine["median_step_ms"],
                        "native_uncapped": native["median_step_ms"],
                        "native_wscap64": capped.get("median_step_ms")},
            "planned_calls_per_step": mine["stats"]["planned_calls"] / max(1, len(mine["losses"])),
            "fallback_calls": mine["stats"]["fallback_calls"],
            "kernels_planned": f"{mine['stats']['kernels_planned']}/{mine['stats']['kernels']}",
            "time_to_first_fast_step_s": {
                "ucudnn_warm_database": mine["time_to_first_fast_step_s"],
                "native_cudnn_benchmark": native["time_to_first_fast_step_s"]},
        }
        if capped.get("median_step_ms"):
            entry["speedup_vs_wscap64"] = capped["median_step_ms"] / mine["median_step_ms"]
        entry["speedup_vs_uncapped"] = native["median_step_ms"] / mine["median_step_ms"]
        report[precision] = entry
    undivided = results.get("fp32_ucudnn_undivided", {})
    overhead = results.get("overhead_undivided", {})
    if "median_step_ms" in undivided:
        step_ms = undivided["median_step_ms"]
        # Every convolution call of a step, through the library or routed to PyTorch's own.
        counted = undivided["stats"]
        calls = sum(counted.get(k, 0) for k in ("planned_calls", "fallback_calls",
                                                 "framework_calls")) / max(1, len(undivided["losses"]))
        entry = {
            "step_ms": step_ms,
            "calls_per_step": calls,
            # Time in the adapter's library calls (_Conv.run) in the ResNet-50 step.
            "host_ms_per_step": undivided["adapter_host_ms_per_step"],
            "host_share_of_step": undivided["adapter_host_ms_per_step"] / step_ms,
        }
        if "overhead_us_per_call" in overhead:
            # The adapter's whole overhead against PyTorch's convolution (the overhead run),
            # at the step's number of calls.
            per_step_ms = overhead["overhead_us_per_call"] * calls / 1e3
            entry.update({
                "overhead_us_per_call": overhead["overhead_us_per_call"],
                "overhead_ms_per_step": per_step_ms,
                "overhead_share_of_step": per_step_ms / step_ms,
            })
        report["adapter_overhead_undivided"] = entry
    return report, failures


def run_suite(args):
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for name, run_args, env_extra in suite_configs(args):
        results[name] = run_config(args, name, run_args, env_extra, args.out)
    report, failures = compare(results)
    summary = {"report": report, "failures": failures, "runs": results}
    with open(os.path.join(args.out, "torch_adapter.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(report, indent=2))
    for failure in failures:
        print(f"[torch_adapter] FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "suite":
        return run_suite(args)
    result = run_one(args) if args.command == "run" else overhead_one(args)
    torch_common.emit(result, args.json_out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
