#!/usr/bin/env python3
"""Real models trained as a user would, native PyTorch against ucudnn.torch.convert (issue 20).

torchvision models with random weights (no downloads), SGD and cross-entropy on random data,
`torch.backends.cudnn.benchmark = True` on both sides, each configuration in a process of its own
(time to the first fast step counts from a new process; a process memory cap binds from its
start), native and converted runs alternated and repeated so that a ratio is not noise.

    torch_models.py run --model resnet50 --precision amp|fp32 --mode native|ucudnn
                        [--compile default|reduce-overhead] [--cap-gib G] [--batch N]
                        [--option server=h:p ...] [--prepare-wait-s S] [--json-out F]
        one configuration: median step, device-level peak memory, time to the first fast step,
        the library's counters (which calls ran ucudnn plans and which the framework's own)
    torch_models.py kernels --model M --precision P --option server=h:p [--flush-l2] [--json-out F]
        where the time goes: every convolution kernel of the model's step, PyTorch's own
        convolution against the ucudnn plan, each timed alone at the full batch in one process
    torch_models.py paired --model M --precision P --option server=h:p [--rounds 8] [--steps 8]
        native and converted models in one process, steps interleaved in rounds (alternating
        which side goes first): the ratio per round pair, without the run-to-run noise of a
        host-bound model on a shared machine (both sides meet the same machine state)
    torch_models.py plot [--json bench/results/h100/torch_models.json] [--svg docs/img/torch_models.svg]
        the rows as SVG for docs/results.md
    torch_models.py warm --server h:p --runs-dir DIR --rows resnet50:amp ...
        only the suite's warm-up (every plan in the database, PyTorch's own timed), say for the
        next machine's --warm-db
    torch_models.py suite --server h:p --out DIR --rows resnet50:amp resnet50:fp32:compile ...
        each row native against converted (alternating, --repeats each), DIR/torch_models.json:
        {"device", "rows": [{"model", "family", "precision", "compiled", "cap_gib", "batch",
        "native_ms", "converted_ms", "ratio", "native_peak_mib", "converted_peak_mib",
        "native_first_fast_s", "converted_first_fast_s", ...}]}. A row is MODEL:PRECISION
        [:COMPILE][:cap]; "cap" runs both capped just above native's unlimited peak; "wide" (or
        "wide:fp32") is issue 37's fixed list of models (WIDE_ROWS).

scripts/gpu_torch_models.sh runs the suite on the GPU machine with the stack (PostgreSQL, planner,
worker) from a bundle, in one command.
"""

import time

PROCESS_START = time.monotonic()  # before importing torch: time to the first fast step

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plots  # noqa: E402  (the plot subcommand; matplotlib loaded only when it runs)
import torch_common  # noqa: E402
REPO = os.path.dirname(HERE)
# The source tree's package (ucudnn.torch imported where a run converts; ucudnn._cache anywhere).
sys.path.insert(0, os.path.join(REPO, "python"))
from ucudnn import _cache  # noqa: E402  (no PyTorch, no library loaded)
from nd_models import ND_MODELS  # noqa: E402  (bench/: no PyTorch imported)

# model -> (family, default batch). torchvision's constructors with weights=None; "timm-NAME" is
# timm.create_model(NAME, pretrained=False) where timm is installed (the GPU machine's PyTorch).
MODELS = {
    "resnet50": ("residual", 256),
    "vgg16": ("plain", 128),
    "densenet121": ("dense", 128),
    "efficientnet_b0": ("inverted-residual depthwise", 128),
    "mobilenet_v3_large": ("inverted-residual depthwise", 128),
    "convnext_tiny": ("7x7 depthwise", 128),
    "resnext50_32x4d": ("grouped", 128),
    "regnet_y_1_6gf": ("grouped", 128),
    # Issue 37's wider list: families no session tuned the adapter on.
    "shufflenet_v2_x1_0": ("channel shuffle", 256),
    "googlenet": ("inception", 128),
    "mnasnet1_0": ("searched inverted-residual", 128),
    "efficientnet_v2_s": ("fused inverted-residual", 96),
    "wide_resnet50_2": ("wide residual", 128),
    "squeezenet1_1": ("fire", 256),
    "timm-cspresnet50": ("cross-stage partial", 128),
    "timm-dla34": ("deep layer aggregation", 128),
    "timm-res2net50_26w_4s": ("multi-scale residual", 128),
    "timm-ghostnet_100": ("ghost", 256),
    "timm-repvgg_a2": ("re-parameterised plain", 128),
    "timm-dpn68": ("dual path", 128),
    "timm-rexnet_100": ("rank-expansion", 128),
    "timm-hrnet_w18_small": ("high-resolution", 96),
}
# Issue 39's models of 1-D, 3-D and transposed convolutions (bench/nd_models.py).
MODELS.update({name: entry[:2] for name, entry in ND_MODELS.items()})
# Issue 37's fixed list, one row each, most never tuned on, in the order they are run (the
# worker's warm-up reaches the first ones first; depthwise models, slow to benchmark, last): a
# row "wide" (or "wide:PRECISION", AMP by default) stands for all of them.
WIDE_ROWS = ("resnet50", "timm-repvgg_a2", "googlenet", "timm-dla34", "timm-cspresnet50",
             "timm-res2net50_26w_4s", "shufflenet_v2_x1_0", "efficientnet_v2_s",
             "timm-ghostnet_100", "mnasnet1_0", "wide_resnet50_2", "convnext_tiny")


def expand_rows(rows):
    """The rows with "wide[:PRECISION]" replaced by WIDE_ROWS at that precision (default amp)."""
    expanded = []
    for row in rows:
        name, _, precision = row.partition(":")
        if name == "wide":
            expanded += [f"{model}:{precision or 'amp'}" for model in WIDE_ROWS]
        else:
            expanded.append(row)
    return expanded
PRECISIONS = ("fp32", "amp", "bf16")
COMPILE_MODES = ("", "default", "reduce-overhead")
# How long a measured converted run's prepare() may wait for its plans.
CONVERTED_WAIT_S = 30
# A capped row's cap: native's unlimited peak (PyTorch's counter) times this.
CAP_MARGIN = 1.02


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def step_args(p):
        """What a run and the suite share: the step's batch, image size and device, and the
        converted side's options."""
        p.add_argument("--batch", type=int, default=0, help="0: the model's default")
        p.add_argument("--image-size", type=int, default=224)
        p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
        p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="ucudnn.torch.convert option, e.g. server=h:p (repeatable)")
        p.add_argument("--cpus", default="", metavar="LIST",
                       help="run on these CPUs only, e.g. 4-7 or 2,3 (os.sched_setaffinity; "
                       "a suite's runs inherit it): a host-bound step's time depends on the "
                       "cores it lands on")

    def model_args(p):
        step_args(p)
        p.add_argument("--model", required=True, choices=sorted(MODELS))
        p.add_argument("--precision", default="amp", choices=PRECISIONS,
                       help="fp32: TF32 allowed, NCHW; amp: autocast fp16, channels-last; "
                       "bf16: autocast bf16, channels-last, no loss scaling")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--prepare-wait-s", type=float, default=0.0,
                       help="ucudnn: wait this long for plans after prepare()")
        p.add_argument("--min-layer-gain-us", type=float, default=None,
                       help="ucudnn: convert()'s per-layer threshold (default: convert()'s)")
        p.add_argument("--json-out", default="")

    def route_arg(p, why):
        p.add_argument("--route", default="auto", choices=("auto", "measure", "rule"),
                       help=f"ucudnn: prepare()'s route decision ({why})")

    run = sub.add_parser("run", help="one configuration, JSON out")
    model_args(run)
    run.add_argument("--mode", default="native", choices=("native", "ucudnn"))
    run.add_argument("--steps", type=int, default=30)
    run.add_argument("--compile", default="", choices=COMPILE_MODES)
    run.add_argument("--cap-gib", type=float, default=0.0,
                     help="PyTorch's process memory cap (set_per_process_memory_fraction)")
    run.add_argument("--budget", default="auto", choices=("auto", "fixed", "liveness"),
                     help="ucudnn: prepare()'s per-kernel budgets (default: prepare()'s)")
    host_bound_arg(run)
    run.add_argument("--with-library", action="store_true",
                     help="native: the library loaded and a context of it running on the device "
                     "(a converted 1x1 layer called once), the model itself unconverted")
    run.add_argument("--memory-trace", action="store_true",
                     help="ucudnn, eager: after the timed steps, the memory in use at each op of "
                     "one more step against the profiles liveness budgets come from "
                     "(memory_trace)")
    run.add_argument("--cudnn-benchmark", default="on", choices=("on", "off"),
                     help="torch.backends.cudnn.benchmark for the run (off: cuDNN's heuristics "
                     "choose each convolution's algorithm, nothing searched in the first step)")
    route_arg(run, "the suite's warm-up: rule, so that no route is recorded while the worker "
              "shares the GPU")
    run.add_argument("--no-measure-framework", action="store_true",
                     help="ucudnn: prepare() does not time PyTorch's own convolution (the "
                     "suite's first warm pass, while the worker still shares the GPU)")

    kernels = sub.add_parser("kernels", help="per kernel: PyTorch's own against the plan")
    model_args(kernels)
    kernels.add_argument("--repeats", type=int, default=10)
    kernels.add_argument("--flush-l2", action="store_true",
                         help="also time every kernel with the L2 overwritten before each run")

    grads = sub.add_parser("grads", help="one step's gradients, converted against native")
    model_args(grads)

    context = sub.add_parser("context-memory", help="the device memory the library's context "
                             "takes, by stage, in one process: a cuDNN handle, the library, a "
                             "context on its own handle and on PyTorch's")
    step_args(context)
    context.add_argument("--json-out", default="")

    paired = sub.add_parser("paired", help="native and converted in one process, their steps "
                            "interleaved in rounds (a host-bound model's ratio)")
    model_args(paired)
    paired.add_argument("--rounds", type=int, default=8, help="rounds of each side")
    paired.add_argument("--steps", type=int, default=8, help="timed steps per side and round")
    paired.add_argument("--variant", default="",
                        choices=("", "device-bound") + tuple(OPTIONS_OF_VARIANT) +
                        tuple(MIN_LAYER_GAIN_OF_VARIANT),
                        help="as a row's: the library disabled, the per-layer threshold at "
                        "infinity or 0, or prepare(host_bound=False)")
    paired.add_argument("--compile", default="", choices=COMPILE_MODES,
                        help="both sides under torch.compile in this mode")
    route_arg(paired, "rule: the plans' step as each layer's rule routes it, where the suite's "
              "jobs may have measured it slower and run PyTorch's own")
    paired.add_argument("--host-profile", action="store_true",
                        help="also where each side's time goes: PyTorch's ops per step "
                        "(torch.profiler), on CUDA the device's kernels, and the converted "
                        "step's Python functions (cProfile); with --json-out, each side's "
                        "step as a Chrome trace beside it (NAME_SIDE_trace.json.gz)")

    curve = sub.add_parser("curve", help="the step's time-memory curve (issue 21): JSON, and "
                           "with --svg a picture")
    model_args(curve)
    curve.add_argument("--native-peak-mib", type=float, default=0.0,
                       help="native's step peak (PyTorch's counter), for the native point")
    curve.add_argument("--svg", default="", help="also draw the curve into this file")
    curve.add_argument("--check", action="store_true",
                       help="also measure the step's convolution time (torch.profiler) with the "
                       "plans of three budgets on the curve and of the fixed per-kernel limit, "
                       "against what they predict, and native's against PyTorch's own times; "
                       "the per-layer rule at 0 unless --min-layer-gain-us says otherwise (every "
                       "planned kernel runs its plan, as the curve counts it)")

    warm = sub.add_parser("warm", help="only the suite's warm-up: every plan of the rows' "
                          "models in the database, PyTorch's own timed")
    warm.add_argument("--server", required=True, help="planner HOST:PORT")
    warm.add_argument("--runs-dir", required=True, help="each run's JSON and runs.log")
    warm.add_argument("--rows", nargs="+", required=True, metavar="MODEL:PRECISION")
    step_args(warm)
    warm.add_argument("--warm-wait-s", type=float, default=240.0)
    warm.add_argument("--run-timeout-s", type=float, default=240.0)
    warm.add_argument("--python", default=sys.executable)
    warm.add_argument("--deadline-s", type=float, default=0.0,
                      help="end the warm-up within this many seconds: no run starts past it, "
                      "and the one running waits for its plans only till then (0: none)")
    warm.add_argument("--no-framework", action="store_true",
                      help="only the pass that waits for the plans, not the one timing PyTorch's "
                      "own (a worker's time to know a model: scripts/gpu_search.sh)")

    plot = sub.add_parser("plot", help="draw the results JSON as SVG (docs/results.md)")
    plots.add_arguments(plot, "torch_models")
    suite = sub.add_parser("suite", help="rows of native against converted")
    suite.add_argument("--server", required=True, help="planner HOST:PORT")
    suite.add_argument("--out", required=True,
                       help="torch_models.json, rewritten after every row")
    suite.add_argument("--runs-dir", default="",
                       help="each run's JSON and runs.log (default: --out)")
    suite.add_argument("--rows", nargs="+", required=True,
                       metavar="MODEL:PRECISION[:COMPILE][:VARIANT]",
                       help="the rows; \"wide[:PRECISION]\" stands for issue 37's fixed list")
    suite.add_argument("--repeats", type=int, default=2, help="runs of each side per row")
    suite.add_argument("--steps", type=int, default=30)
    step_args(suite)
    suite.add_argument("--warm-wait-s", type=float, default=0.0,
                       help="before the rows, per model and precision: one converted run "
                       "waiting this long for every plan (the worker benchmarks cold kernels "
                       "meanwhile), then one that times PyTorch's own on the idle GPU")
    suite.add_argument("--run-timeout-s", type=float, default=240.0)
    suite.add_argument("--converted-wait-s", type=float, default=CONVERTED_WAIT_S,
                       help="how long a converted job's prepare() and the server may wait for "
                       "plans (0 with no worker running: what is missing runs PyTorch's own)")
    suite.add_argument("--server-wait-s", type=float, default=None,
                       help="how long the server may hold a converted job's request for the "
                       "worker's benchmarks (default: --converted-wait-s; 0 once the worker is "
                       "stopped, where holding it only delays the job's start)")
    suite.add_argument("--deadline-s", type=float, default=0.0,
                       help="start no row after this many seconds, nor one whose jobs (the "
                       "median job so far, times their number) would end past it (0: none)")
    suite.add_argument("--cap-gib", type=float, default=0.0,
                       help="a \"cap\" row's process memory cap (default: native's unlimited "
                       "peak, measured by one more native run, times %(cap)s)"
                       % {"cap": CAP_MARGIN})
    suite.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    for option in getattr(args, "option", []):
        if "=" not in option:
            parser.error(f"--option {option!r}: expected KEY=VALUE")
    args.cpu_set = None
    if getattr(args, "cpus", ""):
        try:
            cpus = args.cpu_set = parse_cpus(args.cpus)
        except ValueError as e:
            parser.error(str(e))
        if not cpus <= available_cpus():
            parser.error(f"--cpus {args.cpus}: this machine's CPUs are "
                         f"{format_cpus(available_cpus())}")
    if args.command == "paired":
        if args.rounds < 2 or args.steps < 1:
            parser.error("paired: --rounds must be >= 2 and --steps >= 1")
        args.option += OPTIONS_OF_VARIANT.get(args.variant, [])
        args.host_bound = "no" if args.variant == "device-bound" else "auto"
        if args.variant in MIN_LAYER_GAIN_OF_VARIANT:
            args.min_layer_gain_us = float(MIN_LAYER_GAIN_OF_VARIANT[args.variant])
    if args.command == "run" and args.steps < 4:
        parser.error("--steps must be >= 4 (the first steps are never steady ones)")
    if args.command in ("suite", "warm"):
        args.rows = expand_rows(args.rows)
        for row in args.rows:
            try:
                parse_row(row)
            except ValueError as e:
                parser.error(str(e))
    if args.command == "suite" and args.server_wait_s is not None and args.server_wait_s < 0:
        parser.error("--server-wait-s must be >= 0")
    return args


# A row's fourth field: "cap" runs both sides capped just above native's unlimited peak;
# "fallback" runs the converted side with the library disabled (every layer PyTorch's own
# through the adapter: its host cost alone).
# "liveness" plans each kernel with the memory free at its point of the step
# (prepare(budget="liveness"), issue 21). "all-framework" and "all-plans" set the per-layer rule's
# "device-bound" tells prepare() the step is not host-bound (host_bound=False: a compiled
# model's plans that only save device time are kept, which prepare() otherwise traces as
# PyTorch's own). "all-framework" and "all-plans" set the per-layer rule's
# threshold (convert()'s min_layer_gain_us) to infinity and to 0: every layer decided for
# PyTorch's own with the library planning (the decided route's host cost alone), and every
# planned kernel running its plan (what the rule saves). "library" runs native on both sides, the
# "converted" one with the library loaded and a context of it running (run --with-library): what
# its presence in the process costs.
ROW_VARIANTS = ("", "cap", "fallback", "liveness", "all-framework", "all-plans", "library",
                "cold", "machine", "own-handle", "recipe", "device-bound")
MIN_LAYER_GAIN_OF_VARIANT = {"all-framework": "inf", "all-plans": "0"}
# The converted side's convert() options. cold: without the compiled-plan cache, as the first
# job on a machine whose worker compiled nothing (every runtime-compiled plan compiled in the
# job); machine: the machine's own cache (the library's default path, where the stack's worker
# keeps the plans it compiled benchmarking: the first job on a machine after its worker);
# own-handle: the library's contexts make their own cuDNN handle rather than borrow PyTorch's;
# recipe: the README's job on a cluster that may not know the model yet (issue 40): the server
# answers at once, without holding the request while its worker benchmarks, so prepare() waits
# for answers only and a step whose plans are still coming runs PyTorch's own until they are in
# (ucudnn/torch/pending.py).
OPTIONS_OF_VARIANT = {
    "fallback": ["disable=1"], "cold": ["compiled_plan_cache=off"],
    "machine": [f"compiled_plan_cache="
                f"{_cache.cache_path('UCUDNN_COMPILED_PLAN_CACHE', 'compiled_plans') or 'off'}"],
    "own-handle": ["cudnn_handle=own"], "recipe": ["server_wait_ms=0"]}


def converted_options_of(args):
    """The converted runs' convert() options: the suite's server, no plan cache file (every run
    asks the server), the suite's own compiled-plan cache (filled by the warm-up's runs, as a
    machine's earlier jobs fill it; none before), then --option."""
    return [f"server={args.server}", "cache_path=off",
            f"compiled_plan_cache={os.path.join(args.runs_dir, 'compiled_plans')}"] + args.option


def compiled_plans_in(options):
    """How many compiled plans the cache of `options` (--option values) holds, None without one."""
    directory = dict(option.split("=", 1) for option in options).get("compiled_plan_cache", "")
    return None if _cache.is_off(directory) else len(_cache.compiled_plan_files(directory))


def config_of(args):
    """A run's arguments as its JSON records them (not the subcommand, the output file or what
    parse_args derived)."""
    return {k: v for k, v in vars(args).items() if k not in ("command", "json_out", "cpu_set")}


def parse_cpus(text):
    """'4-7,9' -> {4, 5, 6, 7, 9}; ValueError naming what is wrong."""
    cpus = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"--cpus {text!r}: expected CPU numbers and ranges, e.g. 4-7,9")
        if first < 0 or last < first:
            raise ValueError(f"--cpus {text!r}: {part!r} is not a range of CPU numbers")
        cpus.update(range(first, last + 1))
    return cpus


def format_cpus(cpus):
    return ",".join(str(c) for c in sorted(cpus))


def available_cpus():
    """The CPUs this process may run on."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(
        range(os.cpu_count() or 1))


def host_probe_ms(repeats=5):
    """The median time (ms) of a fixed piece of pure-Python work: how fast this process's host
    side runs where it landed, beside each run's step times (a host-bound step moves with it)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(100_000):
            total += i * i
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def parse_row(text):
    """'resnet50:amp:default:cap' -> (model, precision, compile mode, variant)."""
    parts = text.split(":") + ["", "", ""]
    model, precision, compile_mode, cap = parts[0], parts[1] or "amp", parts[2], parts[3]
    if model not in MODELS:
        raise ValueError(f"row {text!r}: unknown model {model!r} (known: {', '.join(MODELS)})")
    if precision not in PRECISIONS:
        raise ValueError(f"row {text!r}: precision must be one of {PRECISIONS}")
    if compile_mode == "compile":
        compile_mode = "default"
    if compile_mode not in COMPILE_MODES:
        raise ValueError(f"row {text!r}: compile mode must be one of {COMPILE_MODES[1:]}")
    if cap not in ROW_VARIANTS:
        raise ValueError(f"row {text!r}: the fourth field is one of {ROW_VARIANTS[1:]} or "
                         "nothing")
    return model, precision, compile_mode, cap


# ---- one process -------------------------------------------------------------------------------
def build(args):
    """(torch, model, data, labels, device, amp dtype or None, memory format)."""
    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_models.py: --device cuda but CUDA is not available")
    torch.backends.cudnn.benchmark = getattr(args, "cudnn_benchmark", "on") == "on"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(args.seed)
    batch = args.batch or MODELS[args.model][1]
    model = make_model(args.model).to(device)
    generator = torch.Generator().manual_seed(args.seed + 1)
    sample = (ND_MODELS[args.model][2] if args.model in ND_MODELS else
              (3, args.image_size, args.image_size))
    data = torch.randn(batch, *sample, generator=generator)
    labels = torch.randint(0, 1000, (batch,), generator=generator)
    data, labels = data.to(device), labels.to(device)
    amp = None
    if args.precision in ("amp", "bf16"):
        # fp16 on CUDA; the CPU's autocast has bf16 only.
        amp = torch.float16 if args.precision == "amp" and device.type == "cuda" else torch.bfloat16
        # Channels-last of the input's rank (NHWC, NDHWC; a 1-D model's input has none).
        memory_format = {4: torch.channels_last, 5: torch.channels_last_3d}.get(data.dim())
        if memory_format is not None:
            model = model.to(memory_format=memory_format)
            data = data.contiguous(memory_format=memory_format)
    return torch, model, data, labels, device, amp, batch


def make_model(name):
    """The model of a MODELS name, random weights, 1000 classes, in training mode."""
    if name in ND_MODELS:
        return ND_MODELS[name][3]()
    if name.startswith("timm-"):
        import timm
        return timm.create_model(name[len("timm-"):], pretrained=False, num_classes=1000)
    import torchvision
    kwargs = {"aux_logits": False, "init_weights": False} if name == "googlenet" else {}
    return torchvision.models.get_model(name, weights=None, num_classes=1000, **kwargs)


def loss_of(F, output, targets):
    """A step's loss: cross-entropy where the output is (batch, classes), else the output's mean
    square (a decoder's image or volume, per-frame scores)."""
    if output.dim() == 2:
        return F.cross_entropy(output, targets)
    return output.float().pow(2).mean()


def training_step(torch, model, net, device, amp):
    """step(inputs, targets) -> loss: one SGD step (momentum, cross-entropy, AMP's loss scaling
    where amp is set on CUDA) of `model`'s parameters through `net` (the model, or it
    compiled)."""
    import torch.nn.functional as F

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    # Loss scaling for fp16 only: bf16 has fp32's range.
    scaling = amp == torch.float16 and device.type == "cuda"
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):  # PyTorch >= 2.3
        scaler = torch.amp.GradScaler(device.type, enabled=scaling)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=scaling)

    def step(inputs, targets):
        optimizer.zero_grad(set_to_none=True)
        with autocast(torch, device, amp):
            loss = loss_of(F, net(inputs), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss
    return step


def autocast(torch, device, amp):
    """Autocast to `amp` on the device, or nothing (fp32)."""
    return torch.autocast(device.type, dtype=amp) if amp is not None else contextlib.nullcontext()


def convert(ut, model, args):
    """ut.convert(model) with the run's --option values and --min-layer-gain-us."""
    options = dict(option.split("=", 1) for option in args.option)
    if args.min_layer_gain_us is not None:
        options["min_layer_gain_us"] = args.min_layer_gain_us
    return ut.convert(model, **options)


def load_adapter():
    import ucudnn.torch as ut
    return ut


def adapter_modules():
    """The adapter's modules FirstCalls times the entry points of: (conv, autograd, custom_ops,
    module)."""
    from ucudnn.torch import autograd, conv, custom_ops, module
    return conv, autograd, custom_ops, module


def run_one(args):
    torch, model, data, labels, device, amp, batch = build(args)

    # The model and data are on the device: what follows is what a training job spends before
    # its steps are fast (PyTorch's benchmark in the first steps; the adapter's prepare()).
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    model_ready = time.monotonic()

    if cuda and args.cap_gib > 0:
        total = torch.cuda.get_device_properties(device).total_memory
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gib * 2**30 / total), index)
    stages = []  # (stage, device MiB outside PyTorch's allocator, PyTorch's reserved MiB)
    if cuda:
        free, total = torch.cuda.mem_get_info(device)
        baseline_used = total - free  # the CUDA context and whatever else is on the card
        baseline_outside = baseline_used - torch.cuda.memory_reserved(device)
        stages.append(memory_stage(torch, device, "ready", baseline_used))
    ut = None
    prepare_s = 0.0
    prepared = None
    library_loaded = None
    compiled_at_start = compiled_plans_in(args.option) if args.mode == "ucudnn" else None
    if args.with_library and args.mode == "native":
        # What the library's presence costs the process apart from the model's layers: its
        # context (planner thread, cuDNN handle, the planner's channel) made by one call.
        loaded = load_adapter()
        probe = convert(loaded, torch.nn.Conv2d(3, 3, 1).to(device), args)
        with torch.no_grad():
            probe(torch.randn(1, 3, 8, 8, device=device))
        from ucudnn import _lib
        library_loaded = {"path": _lib.load().path,
                          "kernels": loaded.stats(probe)["kernels"]}
    if args.mode == "ucudnn":
        ut = load_adapter()
        convert(ut, model, args)
    # The compiled model shares the converted one's modules and parameters; prepare() is given
    # it, as a compiled job calls it (no eager training step of its own).
    net = torch.compile(model, mode=args.compile) if args.compile else model
    first_calls = None
    if ut is not None:
        start = time.monotonic()
        # UCUDNN_BENCH_FIRST_CALLS=1: where prepare()'s and the first step's time goes, call by
        # call (a diagnostic run: each op synchronised, and the step taken as not host-bound,
        # which the syncs would fake).
        if os.environ.get("UCUDNN_BENCH_FIRST_CALLS") == "1" and cuda:
            first_calls = FirstCalls(torch, adapter_modules()).__enter__()
        host_bound = host_bound_option(args)
        if first_calls:
            host_bound = {"host_bound": False}
        with autocast(torch, device, amp):
            prepared = ut.prepare(net, data, wait_ms=int(args.prepare_wait_s * 1000),
                                  budget=args.budget, route=args.route,
                                  measure_framework=not args.no_measure_framework, **host_bound)
        prepare_s = time.monotonic() - start
        if cuda:
            stages.append(memory_stage(torch, device, "prepared"))
    step = training_step(torch, model, net, device, amp)
    tracing = ut is not None and args.memory_trace and cuda and not args.compile
    profile_before = None
    if tracing:  # the profile as prepare() took it: before the optimizer's first step
        with autocast(torch, device, amp):
            profile_before = ut.memory_profile(model, data)

    stats_before = None
    probe_before = host_probe_ms()
    losses, step_ms, ends, used, outside = [], [], [], [], []
    first_half_peak = 0
    for i in range(args.steps):
        if i == args.steps // 2:
            if ut is not None:
                stats_before = ut.stats(model)
            if cuda:
                # The steady steps' own peak apart: the first steps' include PyTorch's cuDNN
                # benchmark, whose trial workspaces the allocator's counter keeps.
                first_half_peak = torch.cuda.max_memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = step(data, labels)
        losses.append(loss.item())  # synchronizes
        if cuda:
            torch.cuda.synchronize()
        end = time.perf_counter()
        step_ms.append((end - start) * 1e3)
        ends.append(time.monotonic())
        if first_calls is not None and i == 0:
            first_calls.__exit__(None, None, None)  # prepare() and the first step
        if cuda:
            free, total = torch.cuda.mem_get_info(device)
            used.append(total - free)
            outside.append(total - free - torch.cuda.memory_reserved(device))
            if i == 0:
                stages.append(memory_stage(torch, device, "first step", total - free))
    if cuda:
        stages.append(memory_stage(torch, device, "last step"))
    fast_index, fast_s = torch_common.first_fast_step(step_ms, ends, PROCESS_START)
    steady = torch_common.steady_steps(step_ms)
    result = {
        "config": config_of(args),
        "batch": batch,
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "cudnn_version": torch.backends.cudnn.version() if cuda else None,
        "losses": losses,
        "step_ms": step_ms,
        "median_step_ms": statistics.median(steady),
        "steady_spread_ms": max(steady) - min(steady),
        "first_fast_step": fast_index,
        "time_to_first_fast_step_s": fast_s,
        # The same, counted from the model and data on the device (the imports, the CUDA
        # context and the model's construction are common to both sides).
        "model_ready_to_first_fast_step_s": fast_s - (model_ready - PROCESS_START),
        "prepare_s": prepare_s,
        "prepare": prepared,  # prepare()'s answer: kernels, measured, budget, above_peak
        "cpus": format_cpus(available_cpus()),
        # The host's speed before and after the steps (host_probe_ms): a slow process of a
        # host-bound model on a slow host shows it here.
        "host_probe_ms": [probe_before, host_probe_ms()],
        "library_loaded": library_loaded,  # --with-library: the library and its probe's kernels
        # The compiled-plan cache's plans when the run began (None: no cache, or a native run).
        "compiled_plans_at_start": compiled_at_start,
        # PyTorch's cuDNN benchmark after the steps (--cudnn-benchmark; a converted run's
        # prepare() turns it off where the step is host-bound).
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }
    if cuda:
        result.update({
            "max_memory_allocated_mib": max(first_half_peak,
                                            torch.cuda.max_memory_allocated(device)) / 2**20,
            "steady_max_memory_allocated_mib": torch.cuda.max_memory_allocated(device) / 2**20,
            "steady_max_memory_reserved_mib": torch.cuda.max_memory_reserved(device) / 2**20,
            # Device level (the driver's count, every allocation of the process: PyTorch's
            # cached blocks, cuDNN's, the library's own), less what was there before the model.
            "device_peak_mib": (max(used) - baseline_used) / 2**20,
            "device_baseline_mib": baseline_used / 2**20,
            # The device memory outside PyTorch's allocator at its most over the steps, less
            # that before the model: the CUDA modules loaded (PyTorch's kernels and cuDNN's), the
            # cuDNN handles, the library's own. With steady_max_memory_reserved_mib it tells a
            # peak's difference of allocator layout from one of the library's context.
            "device_outside_allocator_mib": (max(outside) - baseline_outside) / 2**20,
            "memory_stages": stages,
        })
        # After the timed steps: the device's work per step, which a host-bound step's time
        # hides (a step's kernels chosen otherwise: PyTorch's heuristics against its benchmark).
        result.update(device_time_per_step(torch, step, data, labels))
    if args.compile:
        from torch._dynamo.utils import counters
        result["graph_breaks"] = sum(counters["graph_break"].values())
        result["graph_break_reasons"] = sorted(counters["graph_break"])[:20]
    if ut is not None:
        after = ut.stats(model)
        result["stats"] = after
        result["calls_per_step"] = calls_per_step(stats_before, after,
                                                  args.steps - args.steps // 2)
        if hasattr(ut, "report"):
            result["kernels"] = ut.report(model)
    if first_calls is not None:
        result["first_calls"] = first_calls.summary()
    if tracing:
        with autocast(torch, device, amp):
            result["memory_trace"] = memory_trace(torch, ut, model, step, data, labels,
                                                  profile_before)
    return result


def context_memory_one(args):
    """Where the library's device memory goes, stage by stage in one process (device memory
    outside PyTorch's allocator, MiB): after PyTorch's own convolution (its handle and kernels),
    the library loaded, a converted layer's step (--option cudnn_handle=...), a context on
    PyTorch's handle (made, a kernel declared, closed), the same on a handle of its own, and a
    bare cuDNN handle made and destroyed."""
    import ctypes

    import torch

    device = torch.device(args.device)
    if device.type != "cuda":
        raise SystemExit("torch_models.py context-memory: needs --device cuda")
    torch.backends.cudnn.benchmark = True
    ut = load_adapter()
    from ucudnn import _lib

    stages = []

    def stage(name):
        torch.cuda.synchronize(device)
        stages.append(memory_stage(torch, device, name)[:2])

    stage("CUDA context")
    x = torch.randn(8, 16, 32, 32, device=device, requires_grad=True)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1).to(device)
    conv(x).sum().backward()
    stage("PyTorch's convolution")
    library = _lib.load()
    stage("library loaded")
    given = dict(option.split("=", 1) for option in args.option)
    from ucudnn.torch.options import library_options
    options = library_options({k: v for k, v in given.items() if k != "cudnn_handle"})
    borrowed = ut.framework_cudnn_handle()
    shape = _lib.ConvShape(_lib.FORWARD, 8, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1,
                           _lib.FLOAT, _lib.NCHW, _lib.MATH_DEFAULT)
    converted = ut.convert(torch.nn.Conv2d(16, 16, 3, padding=1).to(device), **given)
    converted(x).sum().backward()
    stage(f"a converted layer's step (cudnn_handle={given.get('cudnn_handle', 'framework')})")
    # PyTorch's handle first: a cuDNN handle's memory stays with cuDNN after cudnnDestroy (for
    # the next handle), so what came after a handle of our own would read as free.
    for name, handle_value in (("PyTorch's handle", borrowed), ("own handle", None)):
        context = _lib.Context(library, "cudnn", options, handle_value)
        stage(f"context on {name} (borrowed: {context.borrowed})")
        context.workspace_size(shape)
        stage(f"context on {name}, a kernel declared")
        context.close()
        stage(f"context on {name} closed")
    cudnn = ctypes.CDLL("libcudnn.so.9")  # the instance PyTorch loaded (same soname)
    handle = ctypes.c_void_p()
    assert cudnn.cudnnCreate(ctypes.byref(handle)) == 0
    stage("a bare cudnnCreate")
    assert cudnn.cudnnDestroy(handle) == 0
    stage("its cudnnDestroy")
    deltas = {stages[i][0]: round(stages[i][1] - stages[i - 1][1], 1)
              for i in range(1, len(stages))}
    return {"device_name": torch.cuda.get_device_name(device),
            "torch": torch.__version__, "cudnn_version": torch.backends.cudnn.version(),
            "framework_handle": borrowed is not None, "stages": stages, "deltas_mib": deltas}


def memory_stage(torch, device, stage, used=None):
    """(stage, MiB in use on the device outside PyTorch's allocator, MiB it reserves): where a
    run's device memory is at one point."""
    if used is None:
        free, total = torch.cuda.mem_get_info(device)
        used = total - free
    reserved = torch.cuda.memory_reserved(device)
    return (stage, round((used - reserved) / 2**20, 1), round(reserved / 2**20, 1))


def memory_trace(torch, ut, model, step, data, labels, before):
    """--memory-trace: the memory in use (MiB) at the start of each op that asks the library in
    one more training step (ut.trace_memory) against the memory profiles liveness budgets come
    from: `before` (taken as prepare() takes it, before the optimizer's first step) and one
    taken now (the optimizer's state in). Each op labelled op:c:h:k."""
    with ut.trace_memory(model) as traced:
        step(data, labels)
        torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)  # as the job's next step starts
    try:
        after = ut.memory_profile(model, data)
    except getattr(torch, "OutOfMemoryError", RuntimeError) as e:  # the run's figures stay
        after = {"calls": [], "error": str(e).splitlines()[0]}

    def side(profile):
        return {"ops": [f"{key[0]}:{key[2]}:{key[3]}:{key[5]}" for key, _, _ in profile["calls"]],
                "in_use_mib": [round(in_use / 2**20, 1) for _, in_use, _ in profile["calls"]],
                "peak_mib": round(max((u + o for _, u, o in profile["calls"]), default=0)
                                  / 2**20, 1)}
    return {"step": side(traced), "profile_before": side(before),
            "profile_after": dict(side(after), error=after.get("error"))}


class FirstCalls:
    """UCUDNN_BENCH_FIRST_CALLS: times each convolution op of the adapter while active (prepare()
    and the first step of a run), the device
    synchronised around it: the library's plan runs (LayerConv.run: a plan's first call builds its
    execution plan, compiling a runtime-compiled engine) apart from the whole op (PyTorch's own
    where no plan runs: its first call searches). summary(): seconds by kind and the slowest
    calls."""

    SLOW_MS = 20.0

    def __init__(self, torch, ut):
        self.torch, self.ut, self.calls = torch, ut, []
        self.saved = []

    def _wrap(self, owner, name, kind, describe):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            self.torch.cuda.synchronize()
            begin = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.torch.cuda.synchronize()
                self.calls.append((kind, describe(*args), (time.perf_counter() - begin) * 1e3))
        self.saved.append((owner, name, original))
        setattr(owner, name, timed)

    def __enter__(self):
        # The adapter's three entry points, wherever a module of the package calls them (each
        # imports them by name): LayerConv.run (a plan's call), the forward and backward ops.
        conv, autograd, custom_ops, module = self.ut
        self._wrap(conv.LayerConv, "run", "plan",
                   lambda layer, op, *_: (op, layer.dims, layer.groups))
        for owner in (autograd, custom_ops, module):
            self._wrap(owner, "conv_forward", "forward op",
                       lambda x, w, layer: (0, layer.dims, layer.groups))
        for owner in (autograd, custom_ops):
            self._wrap(owner, "conv_backward", "backward op",
                       lambda layer, *_: ("bwd", layer.dims, layer.groups))
        return self

    def __exit__(self, *exc):
        for owner, name, original in reversed(self.saved):
            setattr(owner, name, original)

    def summary(self):
        seconds = {}
        for kind, _, ms in self.calls:
            seconds[kind] = seconds.get(kind, 0.0) + ms / 1e3
        slow = sorted((c for c in self.calls if c[2] >= self.SLOW_MS), key=lambda c: -c[2])
        return {"seconds": seconds, "calls": len(self.calls),
                "slowest": [{"kind": k, "what": list(map(str, w)), "ms": round(ms, 1)}
                            for k, w, ms in slow[:40]]}


# ---- per kernel ----------------------------------------------------------------------------------
def kernels_one(args):
    """ut.compare_kernels() of the model's step: each kernel timed alone, PyTorch's own against
    the plan; the totals over the step's calls (a kernel that runs twice, twice) as well as over
    its distinct kernels. With --flush-l2, a second pass with the L2 overwritten before each
    timed call ("l2_flushed": those rows and totals), beside the step's measured convolution time
    (curve --check) a test of how far back-to-back timings flatter a kernel."""
    torch, model, data, labels, device, amp, batch = build(args)
    ut = load_adapter()
    convert(ut, model, args)
    with autocast(torch, device, amp):
        ut.prepare(model, data, wait_ms=int(args.prepare_wait_s * 1000))

    def totals(rows):
        plan = [r["plan_ms"] if r["plan_ms"] else r["framework_ms"] for r in rows]
        return {"framework_total_ms": sum(r["framework_ms"] for r in rows),
                "plan_total_ms": sum(plan),
                "framework_step_ms": sum(r["calls"] * r["framework_ms"] for r in rows),
                "plan_step_ms": sum(r["calls"] * ms for r, ms in zip(rows, plan)),
                # The host's time to issue the step's convolutions, each side alone.
                "framework_step_host_ms": sum(r["calls"] * r["framework_host_us"]
                                              for r in rows) / 1e3,
                "plan_step_host_ms": sum(r["calls"] * (r["plan_host_us"] or r["framework_host_us"])
                                         for r in rows) / 1e3}

    result = {
        "config": config_of(args),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    for flush in (False, True) if args.flush_l2 else (False,):
        rows = ut.compare_kernels(model, data, repeats=args.repeats, autocast=amp,
                                  device_type=device.type, flush_l2=flush)
        if flush:
            result["l2_flushed"] = dict(totals(rows), kernels=rows)
        else:
            result.update(totals(rows), kernels=rows)
    return result


def warm_options(wait_s, server_wait_s=None):
    """A converted run's arguments to wait up to wait_s for every plan: the server holds the
    request while its worker benchmarks what is missing, for server_wait_s (default: wait_s)."""
    wait_ms = int(wait_s * 1000)
    server_wait_ms = wait_ms if server_wait_s is None else int(server_wait_s * 1000)
    return ["--prepare-wait-s", str(wait_s), f"--option=server_wait_ms={server_wait_ms}",
            f"--option=deadline_ms={wait_ms + 30000}"]


# ---- gradients -----------------------------------------------------------------------------------
# Relative L2 error of a converted model's gradient against native's, per precision: different
# cuDNN kernels sum in different orders; TF32 and fp16 round their inputs.
GRAD_RTOL = {"fp32": 2e-2, "amp": 5e-2, "bf16": 1e-1}


def host_bound_arg(parser):
    parser.add_argument("--host-bound", default="auto", choices=("auto", "yes", "no"),
                        help="ucudnn: prepare()'s host_bound (auto: prepare()'s default)")


def host_bound_option(args):
    """prepare()'s host_bound keyword from --host-bound (none for auto: prepare() decides)."""
    return {} if args.host_bound == "auto" else {"host_bound": args.host_bound == "yes"}


def paired_one(args):
    """Native and converted copies of one model (same weights and data) in one process, each with
    its own optimizer; after warm-up, rounds of --steps steps per side, alternating which goes
    first. Each round pair's ratio is native's median step over converted's: the two sides of a
    pair meet the same machine state, which separate processes of a host-bound model on a
    shared machine do not. Peaks are not measured (two models on the device)."""
    import copy

    torch, native, data, labels, device, amp, batch = build(args)
    cuda = device.type == "cuda"
    converted = copy.deepcopy(native)
    ut = load_adapter()
    convert(ut, converted, args)
    nets = {model: torch.compile(model, mode=args.compile) if args.compile else model
            for model in (native, converted)}
    with autocast(torch, device, amp):
        prepared = ut.prepare(nets[converted], data, wait_ms=int(args.prepare_wait_s * 1000),
                              route=args.route, **host_bound_option(args))

    def trainer(model):
        net = nets[model]
        train = training_step(torch, model, net, device, amp)

        def step():
            train(data, labels)
            if cuda:
                torch.cuda.synchronize(device)
        return step

    sides = {"native": trainer(native), "converted": trainer(converted)}

    def timed(step, count):
        times = []
        for _ in range(count):
            start = time.perf_counter()
            step()
            times.append((time.perf_counter() - start) * 1e3)
        return times

    # PyTorch keeps its first choice of a kernel for the process, for both sides (the same
    # shapes): native's warm-up goes first, with the benchmark on as native's jobs have it, and
    # the converted side runs those choices whatever prepare() did with the flag.
    searching = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    for step in sides.values():  # PyTorch's benchmark, the plans' first calls, compiling
        timed(step, 3)
    torch.backends.cudnn.benchmark = searching
    stats_before = ut.stats(converted)
    rounds = {"native": [], "converted": []}
    for i in range(args.rounds):
        for name in (("native", "converted") if i % 2 == 0 else ("converted", "native")):
            rounds[name].append(statistics.median(timed(sides[name], args.steps)))
    after = ut.stats(converted)
    ratios = [n / c for n, c in zip(rounds["native"], rounds["converted"])]
    trace_prefix = args.json_out[:-len(".json")] if args.json_out.endswith(".json") else ""
    profiles = host_profiles(torch, sides, cuda, trace_prefix) if args.host_profile else None
    graph_breaks = None
    if args.compile:
        from torch._dynamo.utils import counters
        graph_breaks = sum(counters["graph_break"].values())
    return {
        "host_profile": profiles,
        "graph_breaks": graph_breaks,
        "config": config_of(args),
        "batch": batch,
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "prepare": prepared,
        "native_round_ms": rounds["native"],
        "converted_round_ms": rounds["converted"],
        "native_ms": statistics.median(rounds["native"]),
        "converted_ms": statistics.median(rounds["converted"]),
        "ratio": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "calls_per_step": calls_per_step(stats_before, after, args.rounds * args.steps),
    }


def calls_per_step(before, after, steps):
    """The adapter's counters (ut.stats) over `steps` steps, per step (the calls by route, and
    any other that moved); and the layers on the native route at the end (a gauge: their calls
    there are counted nowhere)."""
    per_step = {k: (after[k] - before.get(k, 0)) / steps for k in after
                if k != "native_route_layers" and isinstance(after[k], (int, float)) and (
                    k in ("planned_calls", "fallback_calls", "framework_calls") or
                    after[k] != before.get(k, 0))}
    if "native_route_layers" in after:
        per_step["native_route_layers"] = after["native_route_layers"]
    return per_step


def host_profiles(torch, sides, cuda, trace_prefix=""):
    """Where each side's time goes in one step: PyTorch's ops (count and host time per step,
    torch.profiler), on CUDA the device's kernels too (every kernel of the step, the library's
    included: their device time in all, and the top ones), and for the converted side the
    Python functions by their own time (cProfile); the top entries. With `trace_prefix`, each
    side's profiled step, Python calls included, also as a gzipped Chrome trace
    (PREFIX_SIDE_trace.json.gz: where a step's host time goes between the ops)."""
    import gzip
    import shutil
    import tempfile

    import cProfile
    import io
    import pstats

    from torch.profiler import profile

    result = {}
    for name, step in sides.items():
        with profile(activities=profiler_activities(torch, cuda),
                     with_stack=bool(trace_prefix)) as prof:
            step()
        if trace_prefix:
            with tempfile.NamedTemporaryFile(suffix=".json") as raw:
                prof.export_chrome_trace(raw.name)
                with open(raw.name, "rb") as src, \
                        gzip.open(f"{trace_prefix}_{name}_trace.json.gz", "wb") as dst:
                    shutil.copyfileobj(src, dst)
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        result[f"{name}_ops"] = [
            {"op": e.key, "count": e.count, "self_cpu_us": round(e.self_cpu_time_total, 1)}
            for e in ops[:40]]
        result[f"{name}_op_count"] = sum(e.count for e in ops)
        if cuda:
            try:
                result.update(device_kernels(torch, prof, name, top=100))
            except (AttributeError, TypeError) as e:  # the profiler's event API of this PyTorch
                result[f"{name}_device_error"] = repr(e)
    profiler = cProfile.Profile()
    profiler.enable()
    sides["converted"]()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    result["converted_python"] = text.getvalue().splitlines()[:60]
    return result


def device_time_per_step(torch, step, data, labels, steps=2):
    """{"device_ms_per_step": the device kernels' time per step of `step` (torch.profiler),
    "device_kernels": the top ones}, or {"device_profile_error"} where this PyTorch's profiler
    cannot say."""
    from torch.profiler import profile
    try:
        with profile(activities=profiler_activities(torch, True)) as prof:
            for _ in range(steps):
                step(data, labels)
            torch.cuda.synchronize()
        kernels = device_kernels(torch, prof, "step")
    except (AttributeError, TypeError, RuntimeError) as e:
        return {"device_profile_error": repr(e)}
    return {"device_ms_per_step": kernels["step_device_us"] / steps / 1e3,
            "device_kernels": kernels["step_kernels"][:10]}


def profiler_activities(torch, cuda):
    """torch.profiler's activities for a step: the host's, and the device's on CUDA."""
    from torch.profiler import ProfilerActivity
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])


def device_us(event):
    """A torch.profiler event's device time (us), its children's included, under the name of
    this PyTorch (device_time_total since 2.4, cuda_time_total before)."""
    return (event.device_time_total if hasattr(event, "device_time_total")
            else event.cuda_time_total)


def device_kernels(torch, prof, name, top=25):
    """The device kernels of a profiled step (torch.profiler with CUDA): their count, device
    time in all, and the `top` ones by time."""
    cuda = torch.autograd.DeviceType.CUDA
    by_name = {}
    count = 0
    for e in prof.events():
        if e.device_type != cuda:
            continue
        time_us = device_us(e)
        calls, total = by_name.get(e.name, (0, 0.0))
        by_name[e.name] = (calls + 1, total + time_us)
        count += 1
    return {
        f"{name}_device_us": round(sum(t for _, t in by_name.values()), 1),
        f"{name}_kernel_count": count,
        f"{name}_kernels": [{"kernel": k[:120], "count": c, "device_us": round(t, 1)}
                            for k, (c, t) in sorted(by_name.items(), key=lambda i: -i[1][1])[:top]],
    }


def grads_one(args):
    """One step of the converted model and of native on the same weights and data (plans in):
    every parameter's gradient compared (relative L2 error)."""
    import copy

    torch, model, data, labels, device, amp, batch = build(args)
    import torch.nn.functional as F

    native = copy.deepcopy(model)
    ut = load_adapter()
    convert(ut, model, args)
    with autocast(torch, device, amp):
        ut.prepare(model, data, wait_ms=int(args.prepare_wait_s * 1000))
    results = {}
    for name, net in (("native", native), ("converted", model)):
        net.zero_grad(set_to_none=True)
        # The same random draws on both sides: ConvNeXt's stochastic depth drops whole blocks in
        # training mode (a different draw gave 0.71 relative errors, call 50).
        torch.manual_seed(args.seed)
        with autocast(torch, device, amp):
            loss = loss_of(F, net(data), labels)
        # A fixed scale as GradScaler's would be: fp16 gradients need it.
        (loss * (1024.0 if amp is not None else 1.0)).backward()
        results[name] = {n: p.grad.detach().double() for n, p in net.named_parameters()}
    worst, errors = 0.0, {}
    for name, reference in results["native"].items():
        got = results["converted"][name]
        error = ((got - reference).norm() / reference.norm().clamp_min(1e-30)).item()
        if error != error:
            error = float("inf")
        errors[name] = error
        worst = max(worst, error)
    stats = ut.stats(model)
    return {"config": config_of(args),
            "worst_rel_error": worst, "tolerance": GRAD_RTOL[args.precision],
            "ok": worst <= GRAD_RTOL[args.precision], "planned_calls": stats["planned_calls"],
            "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:10]),
            "errors_in_order": errors}


# ---- the step's time-memory curve ----------------------------------------------------------------
# The profiler's ops that are a step's convolutions, by pass: PyTorch's own (forward: the
# backend's op, after autocast's casts; backward: both gradients in one op) and the adapter's
# planned path (its autograd Function, and that Function's backward node). Nested ones count
# once, the outermost.
CONV_OPS = {
    "aten::cudnn_convolution": "forward", "aten::_conv_depthwise2d": "forward",
    "aten::mkldnn_convolution": "forward", "aten::_slow_conv2d_forward": "forward",
    "ConvFunction": "forward",
    "aten::convolution_backward": "backward", "ConvFunctionBackward": "backward"}
# curve --check's budgets above the step's peak without workspace, each a point of the curve.
CHECK_BUDGETS = (("0", 0), ("64 MiB", 64 << 20), ("unlimited", None))


def conv_time_ms(events, cuda):
    """The time of a profiled span's convolutions (ms; the device's on CUDA, else the host's),
    {"forward", "backward"}: each outermost CONV_OPS event of torch.profiler's `events`, with
    everything it ran."""
    total_us = {"forward": 0.0, "backward": 0.0}
    for e in events:
        if e.name not in CONV_OPS:
            continue
        parent = e.cpu_parent
        while parent is not None and parent.name not in CONV_OPS:
            parent = parent.cpu_parent
        if parent is None:
            total_us[CONV_OPS[e.name]] += device_us(e) if cuda else e.cpu_time_total
    return {name: us / 1e3 for name, us in total_us.items()}


def measured_conv_ms(torch, step, cuda, steps=3):
    """(convolution ms by pass as conv_time_ms, every kernel's device ms) per step of `step`
    (which synchronizes), profiled over `steps` steps."""
    from torch.profiler import profile

    with profile(activities=profiler_activities(torch, cuda)) as prof:
        for _ in range(steps):
            step()
    kernels_us = device_kernels(torch, prof, "step")["step_device_us"] if cuda else 0.0
    by_pass = conv_time_ms(prof.events(), cuda)
    return {name: ms / steps for name, ms in by_pass.items()}, kernels_us / 1e3 / steps


def predicted_conv_ms(ut, model, profile):
    """What the library predicts for the step's convolutions, by ut.report(): each call of
    memory_profile()'s `profile` (a kernel that runs twice, twice) at its plan's predicted time
    where a plan runs it, else at PyTorch's own time. {"predicted_ms", "predicted_forward_ms"
    (the forward calls' share), "framework_ms" and "framework_forward_ms" (every call at
    PyTorch's own), "planned_calls", "unknown_calls" (no figure: counted as 0)}."""
    from ucudnn import _lib
    rows = {(row["op"], tuple(row["dims"]), row["groups"]): row for row in ut.report(model)}
    out = {"predicted_ms": 0.0, "predicted_forward_ms": 0.0, "framework_ms": 0.0,
           "framework_forward_ms": 0.0, "planned_calls": 0, "unknown_calls": 0}
    for key, _, _ in profile["calls"]:
        shape = _lib.ConvShape(*key)
        dims = (shape.n, shape.c, shape.h, shape.w, shape.k, shape.r, shape.s)
        row = rows.get((shape.op, dims, shape.groups), {})
        framework = row.get("framework_ms") or 0.0
        planned = row.get("route") == "plan" and (row.get("predicted_ms") or 0.0) > 0
        ms = row["predicted_ms"] if planned else framework
        out["predicted_ms"] += ms
        out["framework_ms"] += framework
        if shape.op == _lib.FORWARD:
            out["predicted_forward_ms"] += ms
            out["framework_forward_ms"] += framework
        out["planned_calls"] += planned
        out["unknown_calls"] += ms <= 0 or framework <= 0
    return out


def curve_one(args):
    """ucudnn.torch.step_curve() of the model's step: the predicted convolution time at each
    budget above the step's peak without workspace, the native point (PyTorch's own time of
    every call of the step, from the cluster's timings, at --native-peak-mib) marked; with
    --check, those predictions against the measured step (check_curve)."""
    import copy

    torch, model, data, labels, device, amp, batch = build(args)
    ut = load_adapter()
    from ucudnn import curve as ucurve
    native = copy.deepcopy(model) if args.check else None
    if args.check and args.min_layer_gain_us is None:
        args.min_layer_gain_us = 0.0
    convert(ut, model, args)
    wait_ms = int(args.prepare_wait_s * 1000)
    with autocast(torch, device, amp):
        ut.prepare(model, data, wait_ms=wait_ms)
        profile = ut.memory_profile(model, data)
        result = ut.step_curve(model, data, wait_ms=wait_ms, profile=profile)
    predicted = predicted_conv_ms(ut, model, profile)
    if args.native_peak_mib > 0 and predicted["framework_ms"] > 0 and not (
            predicted["unknown_calls"]):
        result["native"] = {"peak_bytes": int(args.native_peak_mib * 2**20),
                            "conv_ms": predicted["framework_ms"]}
    elif predicted["unknown_calls"]:
        # A sum without some calls would mark native faster than it is: no native point.
        result["native_unknown_calls"] = predicted["unknown_calls"]
    title = f"{args.model} {args.precision} batch {batch}: predicted convolution time of a step"
    if args.svg:
        with open(args.svg, "w") as f:
            f.write(ucurve.format_svg(result, title))
    table = ucurve.format_table(result)
    print(table, file=sys.stderr)
    out = {"config": config_of(args),
           "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "batch": batch, "calls": len(profile["calls"]), "curve": result, "table": table}
    if args.check:
        out["check"] = check_curve(torch, ut, model, native, data, labels, device, amp, profile,
                                   result, wait_ms)
        for row in out["check"]:
            print(f"[torch_models] check {row['budget']}: predicted {row['predicted_ms']:.2f} "
                  f"ms, measured {row['measured_ms']:.2f} ms ({row['error']:+.1%})",
                  file=sys.stderr)
    return out


def check_curve(torch, ut, model, native, data, labels, device, amp, profile, curve, wait_ms):
    """The curve's predictions against the step (issue 21's "within 5% at three budgets"): for
    each of CHECK_BUDGETS, the model prepared at that budget (liveness, the step taken as not
    host-bound so that every plan the rule keeps runs), its predicted convolution time
    (predicted_conv_ms; the curve's point beside it) and the measured one (measured_conv_ms);
    then the same at the fixed per-kernel limit, and native's step against PyTorch's own times.
    A list of rows: {"budget", "predicted_ms", "curve_predicted_ms", "measured_ms", "error"
    (measured / predicted - 1), "curve_error" (measured / the curve's - 1),
    "predicted_forward_ms" and "measured_forward_ms" (the forward pass's share: its operands
    were just written, a backward's long before), "step_device_ms",
    "planned_calls" (the prediction's), "planned_calls_per_step" (the library's counter over
    the measured steps), "unknown_calls"}."""
    from ucudnn import curve as ucurve

    cuda = device.type == "cuda"

    def measure(net):
        train = training_step(torch, net, net, device, amp)

        def step():
            train(data, labels)
            if cuda:
                torch.cuda.synchronize(device)
        for _ in range(3):  # the plans' first calls, PyTorch's benchmark for its own
            step()
        before = ut.stats(model)["planned_calls"]
        conv_ms, device_ms = measured_conv_ms(torch, step, cuda, steps=3)
        return conv_ms, device_ms, (ut.stats(model)["planned_calls"] - before) / 3

    def row(label, predicted, by_pass, device_ms, curve_ms=None, planned_per_step=None):
        conv_ms = by_pass["forward"] + by_pass["backward"]
        return {"budget": label, "predicted_ms": predicted["predicted_ms"],
                "predicted_forward_ms": predicted["predicted_forward_ms"],
                "curve_predicted_ms": curve_ms, "measured_ms": conv_ms,
                "measured_forward_ms": by_pass["forward"],
                "error": conv_ms / predicted["predicted_ms"] - 1
                if predicted["predicted_ms"] > 0 else None,
                "curve_error": conv_ms / curve_ms - 1 if curve_ms else None,
                "step_device_ms": device_ms, "planned_calls": predicted["planned_calls"],
                "planned_calls_per_step": planned_per_step,
                "unknown_calls": predicted["unknown_calls"]}

    points = {p["budget_bytes"]: p["predicted_ms"] for p in curve["points"]}
    rows = []
    for label, budget in CHECK_BUDGETS + (("fixed per kernel", "fixed"),):
        with autocast(torch, device, amp):
            if budget == "fixed":
                ut.prepare(model, data, wait_ms=wait_ms, budget="fixed", host_bound=False)
            else:
                above = ucurve.UNLIMITED_BYTES if budget is None else budget
                ut.prepare(model, data, wait_ms=wait_ms, budget="liveness", above_peak=above,
                           host_bound=False)
        conv_ms, device_ms, planned = measure(model)
        # After the steps: each op's route is set at its first call.
        rows.append(row(label, predicted_conv_ms(ut, model, profile), conv_ms, device_ms,
                        points.get(budget) if budget != "fixed" else None, planned))
    framework = predicted_conv_ms(ut, model, profile)
    conv_ms, device_ms, _ = measure(native)
    rows.append(row("native", {"predicted_ms": framework["framework_ms"],
                               "predicted_forward_ms": framework["framework_forward_ms"],
                               "planned_calls": 0, "unknown_calls": framework["unknown_calls"]},
                    conv_ms, device_ms))
    return rows


# ---- the suite -----------------------------------------------------------------------------------
def run_process(args, name, run_args, timeout_s=None):
    json_path = os.path.join(args.runs_dir, f"{name}.json")
    log_path = os.path.join(args.runs_dir, "runs.log")
    command = [args.python, os.path.abspath(__file__)] + run_args + ["--json-out", json_path]
    print(f"[torch_models {time.strftime('%T')}] {name}", file=sys.stderr, flush=True)
    with open(log_path, "a") as log:
        log.write(f"==== {name}: {' '.join(command)}\n")
        log.flush()
        # The suite's own host-bound records (prepare() remembers its answers on the machine),
        # as its compiled plans: filled by its first converted run of each step.
        env = dict(os.environ)
        env.setdefault("UCUDNN_HOST_BOUND_CACHE", os.path.join(args.runs_dir, "host_bound.json"))
        # And its own route decisions: a row's first converted job decides, the others apply.
        env.setdefault("UCUDNN_ROUTE_CACHE", os.path.join(args.runs_dir, "routes.json"))
        # Each run compiles from scratch: torch.compile's caches (inductor's FX graphs, Triton's
        # kernels) are per user and machine, so a run after another of the same graph would
        # load its compilation (call 73: a converted compiled run after its native one).
        compile_cache = os.path.join(args.runs_dir, "compile_caches", name)
        env["TORCHINDUCTOR_CACHE_DIR"] = compile_cache
        env["TRITON_CACHE_DIR"] = os.path.join(compile_cache, "triton")
        try:
            rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                timeout=timeout_s or args.run_timeout_s).returncode
        except subprocess.TimeoutExpired:
            return {"error": f"{name}: timed out after {timeout_s or args.run_timeout_s:.0f} s"}
    if rc != 0 or not os.path.exists(json_path):
        return {"error": f"{name}: exit {rc} (see runs.log)"}
    with open(json_path) as f:
        return json.load(f)


def host_bound_of(run):
    """A converted run's host-bound answer from prepare(): "yes" or "no", "(remembered)" when it
    came from the machine's records, ", heuristics" where PyTorch's benchmark was off after it;
    None where prepare() gave none (native, compiled)."""
    prepared = run.get("prepare") or {}
    bound = prepared.get("host_bound")
    if not isinstance(bound, dict) or "host_ms" not in bound and "remembered" not in bound:
        return None
    return ("yes" if bound["host_bound"] else "no") + (
        " (remembered)" if bound.get("remembered") else "") + (
        ", heuristics" if prepared.get("cudnn_benchmark") is False else "")


def route_of(run):
    """A converted run's step route from prepare() ("plans (measured)", "native (recorded)", ...)
    with its reason, None where prepare() gave none (native runs); "then": the route its steps
    ended on where that differs (a step whose plans were still coming, decided between steps:
    ucudnn/torch/pending.py)."""
    decided = (run.get("prepare") or {}).get("route")
    if not isinstance(decided, dict):
        return None
    route = {"route": decided.get("route"), "source": decided.get("source"),
             "why": decided.get("why")}
    final = (run.get("stats") or {}).get("route")
    if isinstance(final, dict) and (final.get("route"), final.get("source")) != (
            route["route"], route["source"]):
        route["then"] = {"route": final.get("route"), "source": final.get("source"),
                         "why": final.get("why")}
    return route


def summarise(side):
    """Median over a side's runs of each run's figures."""
    good = [r for r in side if "median_step_ms" in r]
    if not good:
        return None

    def med(key):
        values = [r[key] for r in good if r.get(key) is not None]
        return statistics.median(values) if values else None

    out = {
        "ms": med("median_step_ms"),
        "runs_ms": [r["median_step_ms"] for r in good],
        "host_probe_ms": [r.get("host_probe_ms") for r in good],
        "peak_mib": med("device_peak_mib"),
        "peaks_mib": [r.get("device_peak_mib") for r in good],
        "memory_stages": [r.get("memory_stages") for r in good],
        "allocated_peak_mib": med("max_memory_allocated_mib"),
        "steady_allocated_peak_mib": med("steady_max_memory_allocated_mib"),
        "reserved_peak_mib": med("steady_max_memory_reserved_mib"),
        "outside_allocator_mib": med("device_outside_allocator_mib"),
        "first_fast_s": med("time_to_first_fast_step_s"),
        "ready_to_fast_s": med("model_ready_to_first_fast_step_s"),
        "device_ms": med("device_ms_per_step"),
        "compiled_plans_at_start": [r.get("compiled_plans_at_start") for r in good],
        "host_bound": [host_bound_of(r) for r in good],
        "routes": [route_of(r) for r in good],
    }
    last = good[-1]
    if "calls_per_step" in last:
        out["calls_per_step"] = last["calls_per_step"]
        out["kernels"] = last.get("kernels")
    out["losses"] = last["losses"]
    return out


# A warm-up run with a deadline stops waiting for its plans this long before it: its process
# starting, its steps, its exit (a converted run of a model at its default batch: 10-20 s).
WARM_GRACE_S = 20.0


def warm_up(args, converted_options, deadline_s=0.0):
    """Every plan of the rows' models in the database before any row is timed, so that no row
    shares the GPU with the worker: per model and precision, one converted run that waits for its
    plans (the worker benchmarks what is missing), and, once the worker is idle, one that times
    PyTorch's own convolution for the kernels nobody has (submitted; the plans weigh it).
    With deadline_s, all of it within that many seconds. A list of errors."""
    errors = []
    began = time.monotonic()
    pairs = list(dict.fromkeys(parse_row(row)[:2] for row in args.rows))
    passes = (False,) if getattr(args, "no_framework", False) else (False, True)
    for measure_framework in passes:
        for model, precision in pairs:
            tag = f"{model}_{precision}_" + ("framework" if measure_framework else "warm")
            wait_s, timeout_s = args.warm_wait_s, args.warm_wait_s + args.run_timeout_s
            if deadline_s:
                # Held to the deadline by the run itself (its wait for plans ends WARM_GRACE_S
                # before it, time to submit what it has), not only by a signal from outside.
                left = deadline_s - (time.monotonic() - began)
                if left <= WARM_GRACE_S:
                    errors.append(f"{tag}: not run (the warm-up's deadline: {max(left, 0):.0f} s "
                                  "left)")
                    continue
                wait_s, timeout_s = min(wait_s, left - WARM_GRACE_S), min(timeout_s, left)
            run_args = ["run", "--model", model, "--precision", precision, "--device",
                        args.device, "--image-size", str(args.image_size), "--steps", "4",
                        "--mode", "ucudnn"] + [f"--option={o}" for o in converted_options]
            if args.batch:
                run_args += ["--batch", str(args.batch)]
            if not measure_framework:
                run_args.append("--no-measure-framework")
            run_args += ["--route", "rule"]  # routes are decided by the measured jobs
            result = run_process(args, tag, run_args + warm_options(wait_s),
                                 timeout_s=timeout_s)
            if "error" in result:
                errors.append(result["error"])
    return errors


def run_suite(args):
    args.runs_dir = args.runs_dir or args.out
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.runs_dir, exist_ok=True)
    began = time.monotonic()
    rows, errors = [], []
    device_name = None
    converted_options = converted_options_of(args)
    if args.warm_wait_s > 0:
        errors += warm_up(args, converted_options)
    job_seconds = []  # each run's wall time so far: what the next row's jobs are expected to take
    for row_text in args.rows:
        if args.deadline_s:
            left = args.deadline_s - (time.monotonic() - began)
            expected = row_seconds(job_seconds, args.repeats)
            if left <= 0 or expected > left:
                # A row cut by the deadline is device time spent on no ratio: not started.
                errors.append(f"{row_text}: not run (the suite's deadline: {max(left, 0):.0f} s "
                              f"left, its {2 * args.repeats} jobs expected to take "
                              f"{expected:.0f} s)")
                continue
        model, precision, compile_mode, variant = parse_row(row_text)
        capped = variant == "cap"
        tag = row_text.replace(":", "_")
        common = ["--model", model, "--precision", precision, "--device", args.device,
                  "--image-size", str(args.image_size), "--steps", str(args.steps)]
        if args.batch:
            common += ["--batch", str(args.batch)]
        # As a user would: prepare() waits for the plans (from the warm database, at once), so
        # that each layer's decision is in before the first step and before torch.compile.
        mode = ["--mode", "native", "--with-library"] if variant == "library" else [
            "--mode", "ucudnn"]
        converted = mode + [f"--option={o}" for o in converted_options] + (
            warm_options(args.converted_wait_s, args.server_wait_s)) + (
            [f"--option={o}" for o in OPTIONS_OF_VARIANT.get(variant, [])]) + (
            ["--budget", "liveness"] if variant == "liveness" else []) + (
            ["--host-bound", "no"] if variant == "device-bound" else []) + (
            ["--min-layer-gain-us", MIN_LAYER_GAIN_OF_VARIANT[variant]]
            if variant in MIN_LAYER_GAIN_OF_VARIANT else [])
        cap_gib = args.cap_gib if capped else 0.0
        if capped and not cap_gib:
            probe = run_process(args, f"{tag}_native_unlimited", ["run"] + common)
            if "error" in probe:
                errors.append(probe["error"])
                continue
            cap_gib = probe["max_memory_allocated_mib"] * CAP_MARGIN / 1024
        extra = (["--compile", compile_mode] if compile_mode else []) + (
            ["--cap-gib", f"{cap_gib:.3f}"] if capped else [])
        sides = {"native": [], "converted": []}
        for i in range(args.repeats):
            order = ("native", "converted") if i % 2 == 0 else ("converted", "native")
            for side in order:
                run_args = ["run"] + common + extra + (converted if side == "converted" else [])
                started = time.monotonic()
                result = run_process(args, f"{tag}_{side}_{i}", run_args)
                job_seconds.append(time.monotonic() - started)
                if "error" in result:
                    errors.append(result["error"])
                else:
                    device_name = device_name or result.get("device_name")
                sides[side].append(result)
        native, conv = summarise(sides["native"]), summarise(sides["converted"])
        if native is None or conv is None:
            errors.append(f"{row_text}: no complete run on one side")
            continue
        batch = args.batch or MODELS[model][1]
        entry = {
            "model": model, "family": MODELS[model][0], "precision": precision,
            "compiled": compile_mode or False, "cap_gib": round(cap_gib, 3) if capped else None,
            "variant": variant or "plans",
            "batch": batch,
            "native_ms": native["ms"], "converted_ms": conv["ms"],
            "ratio": native["ms"] / conv["ms"],
            "native_runs_ms": native["runs_ms"], "converted_runs_ms": conv["runs_ms"],
            "native_host_probe_ms": native["host_probe_ms"],
            "converted_host_probe_ms": conv["host_probe_ms"],
            # The spread of the ratio: the slowest converted run against the fastest native
            # run, and the other way round.
            "ratio_range": [min(native["runs_ms"]) / max(conv["runs_ms"]),
                            max(native["runs_ms"]) / min(conv["runs_ms"])],
            # Each side's slowest job over its fastest: the noise of one job against another
            # of the same code (native against native), which a per-job ratio cannot beat.
            "native_jobs_spread": torch_common.spread(native["runs_ms"]),
            "converted_jobs_spread": torch_common.spread(conv["runs_ms"]),
            "native_peak_mib": native["peak_mib"], "converted_peak_mib": conv["peak_mib"],
            # Per job: a job that measured its route and one that applied the record lay out
            # PyTorch's cache from different histories ("memory ≤ native's" is asked of each).
            "native_peaks_by_job_mib": native["peaks_mib"],
            "converted_peaks_by_job_mib": conv["peaks_mib"],
            # Per converted job: (stage, MiB outside PyTorch's allocator, PyTorch's reserved
            # MiB) at "ready", "prepared", the first and the last step: what prepare() left.
            "converted_memory_stages": conv["memory_stages"],
            "native_allocated_peak_mib": native["allocated_peak_mib"],
            "converted_allocated_peak_mib": conv["allocated_peak_mib"],
            "native_steady_allocated_peak_mib": native["steady_allocated_peak_mib"],
            "converted_steady_allocated_peak_mib": conv["steady_allocated_peak_mib"],
            "native_reserved_peak_mib": native["reserved_peak_mib"],
            "converted_reserved_peak_mib": conv["reserved_peak_mib"],
            "native_outside_allocator_mib": native["outside_allocator_mib"],
            "converted_outside_allocator_mib": conv["outside_allocator_mib"],
            "native_first_fast_s": native["first_fast_s"],
            "converted_first_fast_s": conv["first_fast_s"],
            # From the model on the device (imports and construction, common to both, left out).
            "native_ready_to_fast_s": native["ready_to_fast_s"],
            "converted_ready_to_fast_s": conv["ready_to_fast_s"],
            # The device's kernel time per step (torch.profiler, after the timed steps): the
            # device work a host-bound step's time hides.
            "native_device_ms": native["device_ms"], "converted_device_ms": conv["device_ms"],
            "converted_calls_per_step": conv.get("calls_per_step"),
            # Per converted run: the compiled plans its machine had before it (None: no cache).
            "converted_compiled_plans_at_start": conv["compiled_plans_at_start"],
            # Per converted run: whether prepare() found the step host-bound (every layer whose
            # plans only save device time then runs PyTorch's own), and whether remembered.
            "converted_host_bound": conv["host_bound"],
            # Per converted job: the step's route prepare() took, where from and why (the first
            # job measures and records it, the others apply the record).
            "converted_routes": conv["routes"],
            # Per job pair (alternating native and converted jobs): native's step over converted's.
            "ratios_by_job": [n / c for n, c in zip(native["runs_ms"], conv["runs_ms"])],
            # The first step's loss is the same function of the same weights and data.
            "loss_native_first": native["losses"][0], "loss_converted_first": conv["losses"][0],
            "loss_native_last": native["losses"][-1], "loss_converted_last": conv["losses"][-1],
        }
        if conv.get("kernels") is not None:
            entry["converted_kernels"] = conv["kernels"]
        rows.append(entry)
        write_suite(args, device_name, rows, errors)
        print(f"[torch_models] {row_text}: native {native['ms']:.2f} ms, converted "
              f"{conv['ms']:.2f} ms, ratio {entry['ratio']:.3f}", file=sys.stderr, flush=True)
    write_suite(args, device_name, rows, errors)
    print_table(rows)
    for error in errors:
        print(f"[torch_models] ERROR: {error}", file=sys.stderr)
    return 1 if errors else 0


def row_seconds(job_seconds, repeats):
    """The seconds a row's 2 x `repeats` jobs are expected to take: the median job of the suite
    so far times their number (0 before any job ran: the first row always starts)."""
    return statistics.median(job_seconds) * 2 * repeats if job_seconds else 0.0


def write_suite(args, device_name, rows, errors):
    with open(os.path.join(args.out, "torch_models.json"), "w") as f:
        json.dump({"device": device_name, "rows": rows, "errors": errors}, f, indent=1)


def print_table(rows):
    print("| model | precision | compiled | variant | cap GiB | batch | native ms | converted ms "
          "| ratio | native jobs max/min "
          "| native peak MiB | converted peak MiB | native first fast s | converted first fast s "
          "| native ready→fast s | converted ready→fast s | device ms native / converted |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cap = f"{r['cap_gib']:.1f}" if r["cap_gib"] else "-"
        print(f"| {r['model']} | {r['precision']} | {r['compiled'] or 'eager'} | {r['variant']} | "
              f"{cap} | "
              f"{r['batch']} | {r['native_ms']:.2f} | {r['converted_ms']:.2f} | "
              f"{r['ratio']:.3f} | {r['native_jobs_spread']:.3f} | "
              f"{r['native_peak_mib'] or 0:.0f} | "
              f"{r['converted_peak_mib'] or 0:.0f} | {r['native_first_fast_s']:.1f} | "
              f"{r['converted_first_fast_s']:.1f} | {r['native_ready_to_fast_s'] or 0:.1f} | "
              f"{r['converted_ready_to_fast_s'] or 0:.1f} | "
              f"{r.get('native_device_ms') or 0:.2f} / {r.get('converted_device_ms') or 0:.2f} |")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.cpu_set:
        os.sched_setaffinity(0, args.cpu_set)  # inherited by a suite's runs
    if args.command in ("suite", "warm"):
        # A `timeout` around the suite stops its current run too (subprocess.run kills its child
        # on the exception), not only the suite.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.command == "plot":
        return plots.run("torch_models", args)
    if args.command == "suite":
        return run_suite(args)
    if args.command == "warm":
        os.makedirs(args.runs_dir, exist_ok=True)
        errors = warm_up(args, converted_options_of(args), args.deadline_s)
        for error in errors:
            print(f"[torch_models] ERROR: {error}", file=sys.stderr)
        return 1 if errors else 0
    result = {"run": run_one, "kernels": kernels_one, "grads": grads_one,
              "curve": curve_one, "paired": paired_one,
              "context-memory": context_memory_one}[args.command](args)
    torch_common.emit(result, args.json_out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
