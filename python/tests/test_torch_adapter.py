"""ucudnn.torch against the client library's CPU backend (Debian's python3-torch, CPU).

Planned kernels: the local plan cache file is written by ucudnn_test_write_plan_cache
($UCUDNN_TEST_PLAN_CACHE_TOOL) with micro-batched plans (halves, two algorithms) for exactly the
kernels the model runs, so the library really executes micro-batches; its counters prove it.
Run through ctest (tests/python.cmake), which sets UCUDNN_LIBRARY and the tool's path."""

import contextlib
import copy
import ctypes
import io
import itertools
import json
import os
import pickle
import re
import sys
import tempfile
import time
import types
import unittest
import warnings
import weakref
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

import support  # (python/ and bench/ on the path; shared helpers)
import ucudnn.torch as ut
from ucudnn import _lib

import torch_adapter  # noqa: E402  (bench/torch_adapter.py: the plan cache helper)

TOOL = support.TOOL
LIMIT = 64 << 20  # the adapter's default per-kernel limit


closed_port = support.closed_port


def write_plan_cache(path, shapes, algos="1,2"):
    """Micro-batched plans for `shapes` into the cache file at `path` (torch_adapter's helper)."""
    return torch_adapter.write_plan_cache(TOOL, path, shapes, LIMIT, algos,
                                          framework=ut.framework_identity())


def planned(model, sample, directory, algos="1,2"):
    """Converts `model` with a plan cache holding micro-batched plans of all its kernels."""
    ut.convert(model, server="", cache_path=os.path.join(directory, "unused.bin"))
    shapes = [s for group in ut.kernels(model, sample).values() for s in group]
    cache = os.path.join(directory, "plans.bin")
    count = write_plan_cache(cache, shapes, algos)
    ut.convert(model, server="", cache_path=cache)  # a new runtime: its sessions load the cache
    return count


def without_seconds(test, result):
    """prepare()'s answer without its "seconds" (each phase's time, checked here: three phases,
    none negative)."""
    result = dict(result)
    seconds = result.pop("seconds")
    test.assertEqual(sorted(seconds), ["budgets", "host_bound", "plans"])
    test.assertTrue(all(v >= 0 for v in seconds.values()), seconds)
    return result


def step(model, x):
    """Forward and backward of a sum-of-squares loss; (y, grad_x, {param: grad})."""
    x = x.detach().clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    y = model(x)
    (y.float() ** 2).sum().backward()
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in model.named_parameters()}


# Every Conv2d option: (constructor kwargs, input shape).
CASES = {
    "plain_3x3": (dict(in_channels=3, out_channels=8, kernel_size=3), (4, 3, 12, 12)),
    "stride_padding": (dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1),
                       (4, 4, 11, 11)),
    "tuple_options": (dict(in_channels=4, out_channels=6, kernel_size=(3, 5), stride=(2, 1),
                           padding=(1, 2), dilation=(1, 2)), (4, 4, 10, 13)),
    "same_odd": (dict(in_channels=4, out_channels=4, kernel_size=3, padding="same"),
                 (4, 4, 9, 9)),
    "same_even_dilated": (dict(in_channels=4, out_channels=4, kernel_size=4, padding="same",
                               dilation=1), (4, 4, 9, 8)),
    "same_dilated": (dict(in_channels=4, out_channels=4, kernel_size=3, padding="same",
                          dilation=2), (4, 4, 9, 9)),
    "valid": (dict(in_channels=4, out_channels=4, kernel_size=3, padding="valid"),
              (4, 4, 8, 8)),
    "groups": (dict(in_channels=8, out_channels=4, kernel_size=3, padding=1, groups=2),
               (4, 8, 7, 7)),
    "depthwise": (dict(in_channels=6, out_channels=6, kernel_size=3, padding=1, groups=6),
                  (4, 6, 7, 7)),
    "no_bias": (dict(in_channels=3, out_channels=5, kernel_size=1, bias=False), (4, 3, 6, 6)),
    "reflect": (dict(in_channels=3, out_channels=4, kernel_size=3, padding=1,
                     padding_mode="reflect"), (4, 3, 8, 8)),
    "replicate": (dict(in_channels=3, out_channels=4, kernel_size=3, padding=2,
                       padding_mode="replicate"), (4, 3, 8, 8)),
    "circular": (dict(in_channels=3, out_channels=4, kernel_size=3, padding=(1, 2),
                      padding_mode="circular"), (4, 3, 8, 8)),
    "odd_batch": (dict(in_channels=3, out_channels=4, kernel_size=3, padding=1), (5, 3, 6, 6)),
}


def assert_close(test, actual, expected, what):
    scale = max(1.0, expected.abs().max().item())
    test.assertEqual(actual.shape, expected.shape, what)
    error = (actual.double() - expected.double()).abs().max().item()
    test.assertLess(error, 1e-4 * scale, f"{what}: max error {error} (scale {scale})")


def assert_same_step(test, model, reference, x):
    """The output and every gradient of one step of `model` are `reference`'s."""
    y, gx, grads = step(model, x)
    y_ref, gx_ref, grads_ref = step(reference, x)
    assert_close(test, y, y_ref, "y")
    assert_close(test, gx, gx_ref, "dx")
    test.assertEqual(set(grads), set(grads_ref))
    for param in grads_ref:
        assert_close(test, grads[param], grads_ref[param], f"d{param}")


class OptionsTest(unittest.TestCase):
    def test_unknown_option_is_named(self):
        with self.assertRaisesRegex(TypeError, "unknown option 'sever'"):
            ut.convert(nn.Conv2d(1, 1, 1), sever="x:1")

    def test_not_a_module(self):
        with self.assertRaisesRegex(TypeError, "expected a torch.nn.Module"):
            ut.convert("resnet")

    def test_bad_workspace_limit(self):
        with self.assertRaisesRegex(ValueError, "workspace_limit"):
            ut.convert(nn.Conv2d(1, 1, 1), workspace_limit=-1)

    def test_bad_values_raise_naming_the_option(self):
        conv = nn.Conv2d(1, 1, 1)
        for config, pattern in (
                ({"workspace_bytes": "64XB"}, "workspace_bytes='64XB' is not a size"),
                ({"workspace_bytes": -1}, "workspace_bytes must be >= 0"),
                ({"workspace_bytes": "2TiB"}, "over 1 TiB"),
                ({"policy": "bogus"}, "policy='bogus' is not one of undivided"),
                ({"workspace_mode": "sum"}, "workspace_mode='sum'"),
                ({"algorithms": "cudnn"}, "algorithms='cudnn'"),
                ({"deadline_ms": "soon"}, "deadline_ms must be an int in"),
                ({"deadline_ms": 0}, "deadline_ms must be an int in"),
                ({"server_wait_ms": 600001}, "server_wait_ms must be an int in"),
                ({"tls": "maybe"}, "option 'tls' must be a bool"),
                ({"server": "a;UCUDNN_TOKEN=x"}, "must not contain ';'"),
                ({"framework": "torch\x1b[31m"}, "framework must be 1 to 128 printable"),
                ({"framework": "x" * 129}, "framework must be 1 to 128 printable")):
            with self.subTest(config=config), self.assertRaisesRegex(ValueError, pattern):
                ut.convert(conv, **config)
        self.assertIs(type(conv), nn.Conv2d, "a refused convert() changes nothing")

    def test_good_values_are_passed_as_the_library_reads_them(self):
        runtime = ut.convert(nn.Conv2d(1, 1, 1), workspace_bytes="64MiB", policy="all",
                             tls=False, deadline_ms=500, framework="torch-x/benchmark",
                             cache_path="off", server="")._ucudnn_runtime
        self.assertIn("UCUDNN_WORKSPACE_BYTES=67108864", runtime.options)
        self.assertIn("UCUDNN_POLICY=all", runtime.options)
        self.assertIn("UCUDNN_TLS=0", runtime.options)
        self.assertIn("UCUDNN_FRAMEWORK=torch-x/benchmark", runtime.options)
        self.assertEqual(ut.parse_bytes("1.5KiB"), 1536)
        self.assertEqual(ut.parse_bytes(4096), 4096)

    def test_framework_identity_names_version_and_benchmark_mode(self):
        saved = torch.backends.cudnn.benchmark
        try:
            torch.backends.cudnn.benchmark = True
            self.assertEqual(ut.framework_identity(), f"torch-{torch.__version__}/benchmark")
            torch.backends.cudnn.benchmark = False
            self.assertTrue(ut.framework_identity().endswith("/heuristic"))
        finally:
            torch.backends.cudnn.benchmark = saved
        runtime = ut.convert(nn.Conv2d(1, 1, 1), cache_path="off", server="")._ucudnn_runtime
        self.assertIn(f"UCUDNN_FRAMEWORK={ut.framework_identity()}", runtime.options)

    def test_the_library_names_its_version(self):
        self.assertRegex(_lib.load().version(), r"^\d+\.\d+\.\d+$")

    def test_bad_shape_is_named_by_the_library(self):
        context = _lib.Context(_lib.load(), "cpu", "UCUDNN_CACHE_PATH=off")
        shape = _lib.ConvShape(0, 2, 0, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0)  # c = 0
        with self.assertRaisesRegex(_lib.ShapeError, "BAD_PARAM: shape.c: "):
            context.workspace_size(shape)
        with self.assertRaisesRegex(_lib.ShapeError, "backend: unknown backend 'tpu'"):
            _lib.Context(_lib.load(), "tpu", "")

    def test_cudnn_handle_choice(self):
        with self.assertRaisesRegex(ValueError, "cudnn_handle must be one of framework, own"):
            ut.convert(nn.Conv2d(1, 1, 1), cudnn_handle="mine")
        model = ut.convert(nn.Conv2d(1, 1, 1), cudnn_handle="own", server="", cache_path="off")
        self.assertEqual(model._ucudnn_runtime.cudnn_handle, "own")
        loaded = pickle.loads(pickle.dumps(model))
        self.assertEqual(loaded._ucudnn_runtime.cudnn_handle, "own", "a checkpoint keeps it")
        self.assertEqual(ut.convert(nn.Conv2d(1, 1, 1), server="")._ucudnn_runtime.cudnn_handle,
                         "framework")
        # This PyTorch has no CUDA: nothing to borrow, each context makes its own.
        self.assertIsNone(ut.framework_cudnn_handle())

    def test_a_cudnn_handle_is_borrowed_only_from_the_one_cudnn_in_the_process(self):
        maps = os.path.join(tempfile.mkdtemp(), "maps")
        lines = [
            "7f00-7f01 r-xp 00000000 08:01 11 /opt/venv/nvidia/cudnn/lib/libcudnn.so.9",
            "7f01-7f02 r--p 00001000 08:01 11 /opt/venv/nvidia/cudnn/lib/libcudnn.so.9",
            "7f02-7f03 r-xp 00000000 08:01 12 /opt/venv/nvidia/cudnn/lib/libcudnn_graph.so.9",
            "7f03-7f04 rw-p 00000000 00:00 0 ",  # anonymous: five fields
            "7f04-7f05 rw-p 00000000 00:00 0",
            "7f05-7f06 r-xp 00000000 08:01 13 /usr/lib/libc.so.6",
        ]
        with open(maps, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.assertEqual(ut._cudnn_instances(maps),
                         {os.path.realpath("/opt/venv/nvidia/cudnn/lib/libcudnn.so.9")})
        with open(maps, "a") as f:  # the library's own copy beside PyTorch's
            f.write("7f06-7f07 r-xp 00000000 08:01 14 /usr/local/cuda/lib64/libcudnn.so.9.14.0\n")
        self.assertEqual(len(ut._cudnn_instances(maps)), 2)
        self.assertIsNone(ut._cudnn_instances(maps + ".missing"))

    def test_a_context_on_a_borrowed_handle_needs_the_cudnn_backend(self):
        library = _lib.load()
        self.assertIsNotNone(library.ShapeCreateOnHandle)
        # "cpu" never borrows: its context is the CPU backend's whatever the handle.
        context = _lib.Context(library, "cpu", "UCUDNN_CACHE_PATH=off", cudnn_handle=1234)
        self.assertFalse(context.borrowed)
        handle = ctypes.c_void_p()
        self.assertEqual(library.ShapeCreateOnHandle(ctypes.byref(handle), None, b""),
                         _lib.BAD_PARAM)
        self.assertIn(b"cudnn_handle: must not be NULL", library._last_error())
        # No GPU here: refused before the handle is read.
        status = library.ShapeCreateOnHandle(ctypes.byref(handle), 1234, b"")
        self.assertEqual(status, _lib.UNAVAILABLE, library._last_error())
        self.assertFalse(handle.value)

    def test_subclasses_are_left_alone(self):
        class Mine(nn.Conv2d):
            pass

        model = nn.Sequential(Mine(1, 1, 1), nn.Conv2d(1, 1, 1))
        ut.convert(model, server="", cache_path="off")
        self.assertIs(type(model[0]), Mine)
        self.assertIs(type(model[1]), ut.UcudnnConv2d)


class PlannedTest(unittest.TestCase):
    """Kernels with micro-batched plans: forward and both gradients through the library."""

    def setUp(self):
        self.assertTrue(TOOL and os.path.exists(TOOL), "UCUDNN_TEST_PLAN_CACHE_TOOL is not set")
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_every_conv2d_option(self):
        # Every CPU algorithm: the two im2col ones alternating, and the direct one.
        for (name, (kwargs, input_shape)), algos in itertools.product(CASES.items(), ("1,2", "0")):
            with self.subTest(f"{name} algorithms {algos}"):
                torch.manual_seed(1)
                reference = nn.Conv2d(**kwargs)
                model = copy.deepcopy(reference)
                x = torch.randn(*input_shape)
                kernels = planned(model, x.clone().requires_grad_(True), self.dir.name, algos)
                self.assertEqual(kernels, 3, "forward, backward-data and backward-filter")
                assert_same_step(self, model, reference, x)
                stats = ut.stats(model)
                self.assertEqual(stats["planned_calls"], 3, stats)
                self.assertEqual(stats["fallback_calls"], 0, stats)
                self.assertEqual(stats["plans_from_cache"], 3, stats)

    def test_compare_kernels_checks_each_plans_output(self):
        torch.manual_seed(3)
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                              nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2))
        x = torch.randn(4, 3, 9, 9, requires_grad=True)
        planned(model, x, self.dir.name)
        rows = ut.compare_kernels(model, x, repeats=2, device_type="cpu")
        self.assertEqual(len(rows), 6)
        for row in rows:
            self.assertIsNotNone(row["plan_ms"], row)
            # The first, checked call and a later, bound one, each against PyTorch's own.
            self.assertLess(row["plan_first_call_rel_error"], 1e-5, row)
            self.assertLess(row["plan_rel_error"], 1e-5, row)

    def test_input_gradient(self):
        torch.manual_seed(2)
        reference = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2))
        model = copy.deepcopy(reference)
        x = torch.randn(4, 3, 9, 9)
        # Layer 1 without backward-data (its input needs no gradient here), layer 2 with.
        self.assertEqual(planned(model, x, self.dir.name), 5)
        assert_same_step(self, model, reference, x)
        stats = ut.stats(model)
        # The step's x needs its gradient: layer 1's backward-data has no plan and runs
        # PyTorch's convolution.
        self.assertEqual(stats["planned_calls"], 5, stats)
        self.assertEqual(stats["fallback_calls"], 1, stats)

    def test_small_cnn_trains_like_the_original(self):
        torch.manual_seed(3)
        original = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding="same", padding_mode="reflect"), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
        converted = copy.deepcopy(original)
        data = torch.randn(8, 3, 12, 12)
        labels = torch.randint(0, 5, (8,))
        planned(converted, data, self.dir.name)

        def train(model):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            losses = []
            for _ in range(5):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(data), labels)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            return losses

        losses, reference = train(converted), train(original)
        self.assertLess(reference[-1], reference[0], "the original learns")
        for mine, theirs in zip(losses, reference):
            self.assertAlmostEqual(mine, theirs, delta=1e-4 * max(1.0, abs(theirs)))
        stats = ut.stats(converted)
        self.assertEqual(stats["planned_calls"], 5 * 8, stats)  # 3 fwd + 2 bwd-data + 3 bwd-filter
        self.assertEqual(stats["fallback_calls"], 0, stats)

    def test_autocast_bfloat16_channels_last(self):
        torch.manual_seed(15)
        reference = nn.Conv2d(4, 8, 3, padding=1).to(memory_format=torch.channels_last)
        model = copy.deepcopy(reference)
        x = torch.randn(4, 4, 7, 7).to(memory_format=torch.channels_last)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            kernels = planned(model, x.clone().requires_grad_(True), self.dir.name)
        self.assertEqual(kernels, 3, "bf16 NHWC forward, backward-data and backward-filter")
        results = []
        for module in (model, reference):
            xg = x.clone().requires_grad_(True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = module(xg)
            (y.float() ** 2).sum().backward()
            results.append((y, xg.grad, module.weight.grad, module.bias.grad))
        (y, *grads), (y_ref, *grads_ref) = results
        self.assertEqual(y.dtype, torch.bfloat16)
        self.assertTrue(y.is_contiguous(memory_format=torch.channels_last))
        # bf16 rounds to 8 bits: each side rounds its own sums (and the bias separately here).
        for what, mine, theirs in zip(("y", "dx", "dw", "db"), [y] + grads, [y_ref] + grads_ref):
            scale = max(1.0, theirs.float().abs().max().item())
            error = (mine.float() - theirs.float()).abs().max().item()
            self.assertLess(error, 3e-2 * scale, f"{what}: max error {error} (scale {scale})")
        stats = ut.stats(model)
        self.assertEqual((stats["planned_calls"], stats["fallback_calls"]), (3, 0), stats)

    def test_prepare_declares_the_step(self):
        torch.manual_seed(4)
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3))
        x = torch.randn(4, 3, 8, 8)
        planned(model, x, self.dir.name)
        ut.prepare(model, x)
        stats = ut.stats(model)
        self.assertEqual(stats["kernels"], 5, stats)  # fwd x2, bwd-filter x2, bwd-data of layer 2
        self.assertEqual(stats["kernels_planned"], 5, stats)
        self.assertEqual(stats["planned_calls"], 0, "prepare runs nothing through the library")

    def test_a_compiled_model_is_prepared_through_its_original_module(self):
        # torch.compile's OptimizedModule as prepare() sees it: the original under _orig_mod.
        # Its own forward (the compiled step) must not run: the kernels are declared through
        # the original, and a compiled step is taken as host-bound, not timed.
        class Compiled(nn.Module):
            def __init__(self, original):
                super().__init__()
                self._orig_mod = original

            def forward(self, *args):
                raise AssertionError("prepare() ran the compiled step")

        torch.manual_seed(4)
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3))
        x = torch.randn(4, 3, 8, 8)
        planned(model, x, self.dir.name)
        got = ut.prepare(Compiled(model), x, wait_ms=1000)
        self.assertTrue(got["compiled"], got)
        self.assertEqual((got["kernels"], got["budget"], got["host_bound"]),
                         (5, "fixed", {"host_bound": True, "assumed": "compiled"}))
        self.assertTrue(model[0]._ucudnn_runtime.host_bound)
        self.assertEqual(ut.stats(model)["kernels_planned"], 5)
        got = ut.prepare(Compiled(model), x, wait_ms=1000, host_bound=False)
        self.assertEqual(got["host_bound"], {"host_bound": False})
        self.assertFalse(model[0]._ucudnn_runtime.host_bound)
        self.assertFalse(ut.prepare(model, x)["compiled"])

    def test_a_compiled_model_on_cuda_plans_within_what_the_process_may_take(self):
        # An eager step's liveness is not the compiled step's: on CUDA in per-kernel mode, every
        # kernel of a compiled model may use the memory the process may take (rounded down to a
        # power of two), as PyTorch's own benchmark does; the eager model keeps liveness.
        class Compiled(nn.Module):
            def __init__(self, original):
                super().__init__()
                self._orig_mod = original

        mib = 1 << 20
        torch.manual_seed(4)
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3))
        x = torch.randn(4, 3, 8, 8)
        planned(model, x, self.dir.name)
        asked = set()
        real_prepare = _lib.Context.prepare

        def prepare(context, shapes, limit):
            asked.add(limit)
            return real_prepare(context, shapes, limit)

        allowance = 100 * mib
        with mock.patch.object(ut, "_auto_budget", return_value="liveness"), \
                mock.patch.object(ut, "_memory_allowance", return_value=allowance), \
                mock.patch.object(_lib.Context, "prepare", autospec=True, side_effect=prepare):
            got = ut.prepare(Compiled(model), x)
        self.assertEqual(got["budget"], "allowance")
        self.assertEqual(asked, {64 * mib})
        runtime = model[0]._ucudnn_runtime
        self.assertEqual((runtime.kernel_limits, runtime.budget_limit), ({}, 64 * mib))
        # Another budget afterwards drops the allowance; off CUDA it is the configured limit.
        self.assertEqual(ut.prepare(model, x, budget="fixed")["budget"], "fixed")
        self.assertIsNone(runtime.budget_limit)
        self.assertEqual(ut.prepare(model, x, budget="allowance")["budget"], "allowance")
        self.assertIsNone(runtime.budget_limit)

    def test_the_declaring_pass_keeps_no_activation(self):
        # A training forward keeps the first convolution's output for batch norm's backward;
        # kernels()' pass, which never runs a backward, frees it once the forward is past it.
        kept = {}
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                                         nn.Conv2d(4, 2, 3)), server="", cache_path="off")
        model[0].register_forward_hook(
            lambda module, args, out: kept.__setitem__("ref", weakref.ref(out)))
        model[3].register_forward_pre_hook(
            lambda module, args: kept.__setitem__("alive", kept["ref"]() is not None))
        x = torch.randn(2, 3, 8, 8)
        with torch.enable_grad():
            y = model(x)
        self.assertTrue(kept["alive"], "a training forward keeps it (the check can fail)")
        del y
        shapes = [s for found in ut.kernels(model, x).values() for s in found]
        self.assertFalse(kept["alive"])
        # The gradients the step needs are still declared: every op but layer 1's
        # backward-data (its input needs none).
        self.assertEqual(len(shapes), 5)


class KernelHandleTest(unittest.TestCase):
    """The C API's hot path through ctypes: a kernel resolved once, then one call per convolution
    (ucudnnShapeGetKernel, ucudnnShapeKernelRun, ucudnnShapeKernelWorkspaceSize)."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.lib = _lib.load()
        # Forward of x 4x3x6x6, w 5x3x3x3, padding 1: planned as two halves, im2col algorithms
        # (which need workspace).
        self.shape = _lib.ConvShape(_lib.FORWARD, 4, 3, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1,
                                    _lib.FLOAT, _lib.NCHW, _lib.MATH_DEFAULT)

    def tearDown(self):
        self.dir.cleanup()

    def context(self, options):
        # The plans of write_plan_cache() are this PyTorch's (convert()'s framework identity).
        return _lib.Context(self.lib, "cpu", f"UCUDNN_SERVER=;UCUDNN_FRAMEWORK="
                            f"{ut.framework_identity()};" + options)

    def run_kernel(self, kernel, x, w, y, workspace):
        pointer = workspace.data_ptr() if workspace.numel() else None
        return self.lib.ShapeKernelRun(kernel, x.data_ptr(), w.data_ptr(), y.data_ptr(), None,
                                       pointer, workspace.numel())

    def test_planned_kernel_asks_for_its_workspace_then_runs(self):
        cache = os.path.join(self.dir.name, "plans.bin")
        write_plan_cache(cache, [self.shape])
        context = self.context(f"UCUDNN_CACHE_PATH={cache}")
        kernel = context.kernel(self.shape)
        self.assertEqual(context.kernel(self.shape), kernel, "one handle per kernel")
        self.assertIsNotNone(self.lib.ShapeGetKernelFrameworkWorkspace)
        self.assertEqual(context.kernel_info(kernel)["framework_workspace_bytes"], 0,
                         "a cached plan knows no framework timing")
        torch.manual_seed(11)
        x, w = torch.randn(4, 3, 6, 6), torch.randn(5, 3, 3, 3)
        y = torch.full((4, 5, 6, 6), float("nan"))
        none = torch.empty(0, dtype=torch.uint8)
        self.assertEqual(self.run_kernel(kernel, x, w, y, none), _lib.WORKSPACE_TOO_SMALL)
        self.assertTrue(torch.isnan(y).all(), "nothing written")
        stats = context.stats()
        self.assertEqual((stats["planned_calls"], stats["fallback_calls"]), (0, 0), stats)
        needed = context.kernel_workspace_size(kernel)
        self.assertGreater(needed, 0)
        self.assertEqual(context.stats()["fallback_calls"], 0, "the query counts nothing")
        workspace = torch.empty(needed, dtype=torch.uint8)
        self.assertEqual(self.run_kernel(kernel, x, w, y, workspace), _lib.SUCCESS)
        assert_close(self, y, F.conv2d(x, w, padding=1), "y")
        stats = context.stats()
        self.assertEqual((stats["planned_calls"], stats["fallback_calls"]), (1, 0), stats)

    def test_kernel_without_plan_declines_and_counts_a_fallback(self):
        context = self.context("UCUDNN_CACHE_PATH=off")
        kernel = context.kernel(self.shape)
        self.assertIsNone(context.kernel_workspace_size(kernel))
        x, w, y = torch.randn(4, 3, 6, 6), torch.randn(5, 3, 3, 3), torch.empty(4, 5, 6, 6)
        self.assertEqual(self.run_kernel(kernel, x, w, y, torch.empty(0, dtype=torch.uint8)),
                         _lib.NO_PLAN)
        stats = context.stats()
        self.assertEqual((stats["kernels"], stats["fallback_calls"]), (1, 1), stats)

    def test_disabled_context_declines_without_counting(self):
        x, w, y = torch.randn(4, 3, 6, 6), torch.randn(5, 3, 3, 3), torch.empty(4, 5, 6, 6)
        disabled = self.context("UCUDNN_CACHE_PATH=off;UCUDNN_DISABLE=1")
        kernel = disabled.kernel(self.shape)
        self.assertEqual(self.run_kernel(kernel, x, w, y, torch.empty(0, dtype=torch.uint8)),
                         _lib.NO_PLAN)
        self.assertIsNone(disabled.kernel_workspace_size(kernel))
        self.assertEqual(disabled.stats()["kernels"], 0)

    def test_bad_arguments_are_named(self):
        context = self.context("UCUDNN_CACHE_PATH=off")
        bad = _lib.ConvShape(*[getattr(self.shape, name) for name, _ in _lib.ConvShape._fields_])
        bad.groups = 2
        with self.assertRaisesRegex(_lib.ShapeError, "BAD_PARAM: shape.groups: "):
            context.kernel(bad)
        self.assertEqual(self.lib.ShapeKernelRun(None, 1, 1, 1, None, None, 0), _lib.BAD_PARAM)
        self.assertIn(b"kernel: must not be NULL", self.lib._last_error())
        kernel = context.kernel(self.shape)
        self.assertEqual(self.lib.ShapeKernelRun(kernel, 1, None, 1, None, None, 0),
                         _lib.BAD_PARAM)
        self.assertIn(b"operands", self.lib._last_error())
        self.assertEqual(self.lib.ShapeKernelRun(kernel, 1, 1, 1, None, None, 8), _lib.BAD_PARAM)
        self.assertIn(b"workspace: NULL", self.lib._last_error())


class HotPathTest(unittest.TestCase):
    """What the adapter does per call once a step has run: nothing but the library's call."""

    def setUp(self):
        self.assertTrue(TOOL and os.path.exists(TOOL), "UCUDNN_TEST_PLAN_CACHE_TOOL is not set")
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def planned_pair(self, seed):
        """(reference, model, x, kernels): two layers made under `seed`, the model a copy of the
        reference with micro-batched plans of its kernels (im2col's need workspace)."""
        torch.manual_seed(seed)
        reference = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(4, 6, 3, stride=2, padding=1))
        model = copy.deepcopy(reference)
        x = torch.randn(4, 3, 9, 9)
        return reference, model, x, planned(model, x, self.dir.name)

    def test_kernels_are_resolved_once_and_workspace_taken_per_call(self):
        reference, model, x, count = self.planned_pair(12)
        self.assertEqual(count, 5)
        lookups, sizes = [], []
        real_kernel = _lib.Context.kernel
        real_size = _lib.Context.kernel_workspace_size
        with mock.patch.object(_lib.Context, "kernel", autospec=True,
                               side_effect=lambda *a: lookups.append(a) or real_kernel(*a)), \
                mock.patch.object(_lib.Context, "kernel_workspace_size", autospec=True,
                                  side_effect=lambda *a: sizes.append(a) or real_size(*a)), \
                mock.patch.object(_lib, "ConvShape", wraps=_lib.ConvShape) as shapes:
            assert_same_step(self, model, reference, x)
            first = (len(lookups), shapes.call_count)
            self.assertEqual(first, (6, 6), "each kernel resolved at its first call")
            self.assertGreaterEqual(len(sizes), 1, "the im2col plans need workspace")
            asked = len(sizes)
            for _ in range(3):
                assert_same_step(self, model, reference, x)
            self.assertEqual((len(lookups), shapes.call_count), first, "no lookup after step 1")
            self.assertEqual(len(sizes), asked, "a plan's workspace size is asked once")
        # The workspace is PyTorch's for the call: nothing of it is held between calls.
        runtime = model[0]._ucudnn_runtime
        self.assertFalse(hasattr(runtime, "workspaces"))
        convs = [c for m in (model[0], model[2]) for c in m._ucudnn_convs.values()]
        self.assertTrue(any(b > 0 for c in convs for b in c.workspace_bytes))
        stats = ut.stats(model)
        # x needs its gradient in step(): layer 1's backward-data has no plan (PyTorch's),
        # asked of the library once and then routed there directly, counted all the same.
        self.assertEqual(stats["planned_calls"], 4 * 5, stats)
        self.assertEqual(stats["fallback_calls"], 4 * 1, stats)

    def test_a_workspace_that_does_not_fit_runs_pytorchs_own_and_lowers_the_limit(self):
        reference, model, x, _ = self.planned_pair(15)
        real_empty = torch.empty

        def no_workspace(*args, **kwargs):  # the allocator has no bytes for a plan's workspace
            if kwargs.get("dtype") is torch.uint8 and args and args[0] > 0:
                raise ut._OUT_OF_MEMORY("CUDA out of memory (a test's)")
            return real_empty(*args, **kwargs)

        with mock.patch.object(ut.torch, "empty", side_effect=no_workspace), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert_same_step(self, model, reference, x)  # the step is not failed
        stats = ut.stats(model)
        out_of_memory = stats["workspace_out_of_memory"]
        self.assertGreaterEqual(out_of_memory, 1, stats)
        self.assertEqual(len([w for w in caught if "did not fit" in str(w.message)]),
                         out_of_memory)
        runtime = model[0]._ucudnn_runtime
        # Each kernel whose workspace did not fit is planned again within a quarter of it.
        self.assertEqual(len(runtime.lowered_limits), out_of_memory)
        convs = [c for m in (model[0], model[2]) for c in m._ucudnn_convs.values()]
        for limit in runtime.lowered_limits.values():
            self.assertTrue(limit == 1 or limit & (limit - 1) == 0, limit)
            self.assertLess(limit, LIMIT)
        # Planned at the configured limit (0): a quarter of the workspace that failed, not none.
        for w in caught:
            failed, lowered = re.search(r"a (\d+)-byte workspace.* within (\d+) bytes",
                                        str(w.message)).groups()
            self.assertEqual(int(lowered), ut.lowered_limit(int(failed)))
        lowered = [op for c in convs for op in range(3)
                   if runtime.lowered_limits.get(ut._shape_key(c.shape(op))) is not None]
        self.assertEqual(len(lowered), out_of_memory)
        for c in convs:
            for op in range(3):
                if runtime.lowered_limits.get(ut._shape_key(c.shape(op))) is not None:
                    self.assertIsNone(c.kernels[op], "declared again at its new limit")
                    self.assertEqual(c.routes[op], ut._ROUTE_NO_PLAN)
        for c in convs:  # each asks for its kernel at the lowered limit (0: the configured one)
            for op in range(3):
                lowered = runtime.lowered_limits.get(ut._shape_key(c.shape(op)))
                if lowered is not None:
                    self.assertEqual(runtime.limit_of(c.shape(op)), lowered)
        assert_same_step(self, model, reference, x)  # and the steps after it
        self.assertEqual(ut.stats(model)["workspace_out_of_memory"], out_of_memory)

    def test_a_lowered_limit_reaches_every_layer_of_that_shape(self):
        # Two layers of one shape: the second's kernels are declared anew when the first's
        # workspace does not fit, so each shape's workspace fails once, not once per layer.
        torch.manual_seed(16)
        reference = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(4, 4, 3, padding=1))
        model = copy.deepcopy(reference)
        x = torch.randn(4, 4, 9, 9)
        planned(model, x, self.dir.name)
        assert_same_step(self, model, reference, x)  # every layer holds its kernels
        self.assertEqual(ut.stats(model)["workspace_out_of_memory"], 0)
        real_empty = torch.empty

        def no_workspace(*args, **kwargs):  # then the memory runs short
            if kwargs.get("dtype") is torch.uint8 and args and args[0] > 0:
                raise ut._OUT_OF_MEMORY("CUDA out of memory (a test's)")
            return real_empty(*args, **kwargs)

        with mock.patch.object(ut.torch, "empty", side_effect=no_workspace), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_same_step(self, model, reference, x)
        runtime = model[0]._ucudnn_runtime
        self.assertGreaterEqual(len(runtime.lowered_limits), 1)
        self.assertEqual(ut.stats(model)["workspace_out_of_memory"], len(runtime.lowered_limits))

    def test_the_traced_step_records_each_op_that_asks_the_library(self):
        torch.manual_seed(16)
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 1))
        x = torch.randn(4, 3, 9, 9)
        planned(model, x, self.dir.name)
        readings = itertools.count(1000, 1000)
        with ut.trace_memory(model, reader=lambda: next(readings)) as traced:
            step(model, x)
        ops = [key[0] for key, _, _ in traced["calls"]]
        # Both forwards, then both layers' backward-data and backward-filter (x needs its
        # gradient in step()), each read once at its start, in order.
        self.assertEqual(ops[:2], [_lib.FORWARD, _lib.FORWARD])
        self.assertEqual(sorted(ops[2:]), [_lib.BACKWARD_DATA, _lib.BACKWARD_DATA,
                                           _lib.BACKWARD_FILTER, _lib.BACKWARD_FILTER])
        self.assertEqual([u for _, u, _ in traced["calls"]], list(range(1000, 7000, 1000)))
        step(model, x)
        self.assertEqual(len(traced["calls"]), 6, "nothing traced after the block")

    def test_a_lowered_limit_is_a_quarter_as_a_power_of_two(self):
        self.assertEqual(ut.lowered_limit(108 << 20), 16 << 20)
        self.assertEqual(ut.lowered_limit(64 << 20), 16 << 20)
        self.assertEqual(ut.lowered_limit(7), 1)
        self.assertEqual(ut.lowered_limit(3), 1)  # no workspace: the library reads 0 otherwise
        self.assertEqual(ut.lowered_limit(1), 1)

    def test_no_grad_calls_need_no_autograd_node(self):
        torch.manual_seed(13)
        reference = nn.Conv2d(3, 4, 3, padding=1)
        model = copy.deepcopy(reference)
        x = torch.randn(4, 3, 9, 9)
        planned(model, x, self.dir.name)
        with torch.no_grad():
            y = model(x)
        self.assertIsNone(y.grad_fn)
        assert_close(self, y, reference(x).detach(), "y")
        self.assertEqual(ut.stats(model)["planned_calls"], 1)

    def test_double_backward_is_refused(self):
        torch.manual_seed(14)
        model = nn.Conv2d(3, 4, 3, padding=1)
        x = torch.randn(4, 3, 9, 9, requires_grad=True)
        planned(model, x, self.dir.name)
        # First-order gradients with create_graph=True still come out right ...
        (grad_x,) = torch.autograd.grad(model(x).pow(2).sum(), x, create_graph=True)
        reference = nn.Conv2d(3, 4, 3, padding=1)
        reference.load_state_dict(model.state_dict())
        (expected,) = torch.autograd.grad(reference(x).pow(2).sum(), x)
        assert_close(self, grad_x.detach(), expected, "dx")
        # ... but they are not differentiable again through the library.
        with self.assertRaisesRegex(RuntimeError, "once_differentiable"):
            grad_x.sum().backward()


class FallbackTest(unittest.TestCase):
    """No plan: PyTorch's own convolution, and nothing fails or waits for the server."""

    def check_fallback(self, **config):
        torch.manual_seed(5)
        reference = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(4, 4, 3, groups=2))
        model = ut.convert(copy.deepcopy(reference), cache_path="off", **config)
        assert_same_step(self, model, reference, torch.randn(2, 3, 7, 7))
        stats = ut.stats(model)
        self.assertEqual(stats["kernels"], 6, stats)  # the library saw every kernel
        self.assertEqual(stats["planned_calls"], 0, stats)
        self.assertEqual(stats["fallback_calls"], 6, stats)
        return model

    def test_no_server(self):
        model = self.check_fallback(server="")
        self.assertEqual(ut.stats(model)["plan_requests"], 0)

    def test_server_down(self):
        model = self.check_fallback(server=f"127.0.0.1:{closed_port()}", deadline_ms=300)
        ut.wait_for_plans(model, 3000)
        stats = ut.stats(model)
        self.assertGreaterEqual(stats["plan_request_failures"], 1, stats)
        # The next step still runs, on PyTorch's convolution.
        step(model, torch.randn(2, 3, 7, 7))
        self.assertEqual(ut.stats(model)["planned_calls"], 0)

    def test_disabled(self):
        model = ut.convert(nn.Conv2d(2, 2, 3), cache_path="off", disable=True)
        x = torch.randn(1, 2, 5, 5)
        assert_close(self, model(x), F.conv2d(x, model.weight, model.bias), "y")
        self.assertEqual(ut.stats(model)["kernels"], 0)

    def test_float64_gradcheck(self):
        # float64 is not a type the library plans: the autograd wiring (padding modes, 'same'
        # with an odd total, groups) around PyTorch's convolution, checked numerically.
        for kwargs in (dict(kernel_size=3, padding="same", dilation=2, padding_mode="zeros"),
                       dict(kernel_size=4, padding="same"),
                       dict(kernel_size=3, padding=1, padding_mode="circular", stride=2),
                       dict(kernel_size=3, padding=(1, 2), padding_mode="reflect", groups=2)):
            with self.subTest(str(kwargs)):
                torch.manual_seed(6)
                conv = ut.convert(nn.Conv2d(2, 4, dtype=torch.float64, **kwargs), server="",
                                  cache_path="off")
                x = torch.randn(2, 2, 6, 7, dtype=torch.float64, requires_grad=True)
                self.assertTrue(torch.autograd.gradcheck(conv._conv_forward,
                                                         (x, conv.weight, conv.bias)))

    def test_channels_last_and_unbatched(self):
        torch.manual_seed(7)
        reference = nn.Conv2d(4, 8, 3, padding=1)
        model = ut.convert(copy.deepcopy(reference), server="", cache_path="off")
        x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
        y, y_ref = model(x), reference(x)
        assert_close(self, y, y_ref, "y")
        self.assertEqual(y.is_contiguous(memory_format=torch.channels_last),
                         y_ref.is_contiguous(memory_format=torch.channels_last))
        single = torch.randn(4, 6, 6)
        assert_close(self, model(single), reference(single), "unbatched y")

    def test_autocast_cpu_bfloat16(self):
        torch.manual_seed(8)
        reference = nn.Conv2d(3, 4, 3)
        model = ut.convert(copy.deepcopy(reference), server="", cache_path="off")
        x = torch.randn(2, 3, 6, 6)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, y_ref = model(x), reference(x)
        self.assertEqual(y.dtype, y_ref.dtype)
        self.assertEqual(y.dtype, torch.bfloat16)
        self.assertLess((y.float() - y_ref.float()).abs().max().item(), 1e-2)
        # Routed to PyTorch's own (no planner; the forward op asked once above), a call leaves
        # the cast to autocast inside F.conv2d, as an unconverted layer does: no cast in Python,
        # the same result exactly.
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), \
                mock.patch.object(ut, "_cast_operands", side_effect=AssertionError("cast")):
            y, y_ref = model(x), reference(x)
        self.assertTrue(torch.equal(y, y_ref))


@contextlib.contextmanager
def _benchmark_kept():
    """torch.backends.cudnn.benchmark as it was after the block (a module property mock.patch
    cannot delete)."""
    before = torch.backends.cudnn.benchmark
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


class HostBoundTest(unittest.TestCase):
    def test_a_step_whose_device_ends_with_its_launches_is_host_bound(self):
        self.assertTrue(ut.is_host_bound(0.040, 0.041))   # the device waited for the host
        self.assertFalse(ut.is_host_bound(0.015, 0.054))  # the host waited for the device
        self.assertFalse(ut.is_host_bound(0.0, 0.0))
        edge = 1.0 - ut.HOST_BOUND_LAG
        self.assertTrue(ut.is_host_bound(edge + 1e-6, 1.0))
        self.assertFalse(ut.is_host_bound(edge - 1e-6, 1.0))

    def test_one_step_on_a_loaded_host_does_not_decide(self):
        # (host s, total s): one step whose host was slowed looks host-bound; the median is not.
        samples = [(0.025, 0.051), (0.042, 0.053), (0.027, 0.052)]
        self.assertTrue(ut.is_host_bound(*samples[1]))
        self.assertEqual(ut.median_step(samples), (0.027, 0.052))
        self.assertFalse(ut.is_host_bound(*ut.median_step(samples)))
        # A host-bound model's steps are all close: the median is one of them.
        bound = [(0.040, 0.041), (0.045, 0.046), (0.039, 0.041)]
        self.assertTrue(ut.is_host_bound(*ut.median_step(bound)))

    def test_a_step_whose_allocator_waited_is_not_host_bound(self):
        before = {"num_alloc_retries": 1, "num_device_free": 3, "num_device_alloc": 9}
        self.assertEqual(ut.allocator_syncs(before, dict(before, num_device_alloc=20)), 0,
                         "cudaMalloc alone does not wait for the device")
        self.assertEqual(ut.allocator_syncs(before, {"num_alloc_retries": 2,
                                                     "num_device_free": 7}), 5)
        self.assertEqual(ut.allocator_syncs({}, {}), 0, "a PyTorch without these counters")

    def test_the_measured_steps_leave_the_model_as_it_was(self):
        torch.manual_seed(13)
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                                         nn.Conv2d(4, 2, 1)), server="", cache_path="off")
        x = torch.randn(2, 3, 8, 8)
        model(x).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        buffers = [b.clone() for b in model.buffers()]
        got = ut.step_is_host_bound(model, x, loss_fn=lambda y: y.square().sum())
        self.assertEqual(set(got), {"host_bound", "host_ms", "step_ms", "allocator_syncs"})
        self.assertEqual(got["allocator_syncs"], 0, "no CUDA allocator")
        self.assertTrue(got["host_bound"], got)  # on the CPU the step is all host
        self.assertGreater(got["step_ms"], 0)
        for p, grad in zip(model.parameters(), grads):
            self.assertTrue(torch.equal(p.grad, grad))
        for b, saved in zip(model.buffers(), buffers):
            self.assertTrue(torch.equal(b, saved))
        # In a torch.distributed job every rank takes rank 0's answer (here: not host-bound).
        with self._rank0_has(0):
            got = ut.step_is_host_bound(model, x, loss_fn=lambda y: y.square().sum())
        self.assertFalse(got["host_bound"], got)

    def _rank0_has(self, value):
        """torch.distributed as a job's rank whose rank 0 broadcasts `value`."""
        from contextlib import ExitStack
        stack = ExitStack()
        stack.enter_context(mock.patch.object(torch.distributed, "is_available",
                                              return_value=True))
        stack.enter_context(mock.patch.object(torch.distributed, "is_initialized",
                                              return_value=True))
        stack.enter_context(mock.patch.object(torch.distributed, "broadcast",
                                              side_effect=lambda t, src: t.fill_(value)))
        return stack

    def test_the_answer_is_remembered_for_the_same_step(self):
        torch.manual_seed(14)
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1)),
                           server="", cache_path="off")
        x = torch.randn(2, 3, 8, 8)
        measured = []

        def measure(model, *inputs, loss_fn=None):
            measured.append(model)
            return {"host_bound": len(measured) % 2 == 1, "host_ms": 1.0, "step_ms": 2.0,
                    "allocator_syncs": 0}

        with tempfile.TemporaryDirectory() as directory, \
                mock.patch.object(ut, "step_is_host_bound", side_effect=measure):
            path = os.path.join(directory, "nested", "host_bound.json")
            with mock.patch.dict(os.environ, {"UCUDNN_HOST_BOUND_CACHE": path}):
                first = ut._step_host_bound(model, (x,), None)
                again = ut._step_host_bound(model, (x,), None)
                # The next measure would say False: the remembered True stands.
                self.assertEqual(len(measured), 1)
                self.assertTrue(first["host_bound"])
                self.assertNotIn("remembered", first)
                self.assertEqual(again, dict(first, remembered=True))
                # Another step (inputs, loss) is measured anew.
                other = ut._step_host_bound(model, (torch.randn(4, 3, 8, 8),), None)
                self.assertEqual((len(measured), other["host_bound"]), (2, False))
                ut._step_host_bound(model, (x,), lambda y: y.square().sum())
                self.assertEqual(len(measured), 3)
                # In a job, rank 0's record decides: its False reaches a rank that has True.
                with self._rank0_has(0):
                    ranked = ut._step_host_bound(model, (x,), None)
                self.assertEqual(len(measured), 3)
                self.assertFalse(ranked["host_bound"])
                # A damaged file is no record: measured again, and the file rewritten.
                with open(path, "w") as f:
                    f.write("{not json")
                ut._step_host_bound(model, (x,), None)
                self.assertEqual(len(measured), 4)
                with open(path) as f:
                    self.assertEqual(len(json.load(f)), 1)
                # A record older than HOST_BOUND_RECORD_DAYS is measured again and replaced.
                later = time.time() + ut.HOST_BOUND_RECORD_DAYS * 86400 + 60
                with mock.patch.object(ut.time, "time", return_value=later):
                    self.assertTrue(ut._step_host_bound(model, (x,), None)["host_bound"])
                    self.assertEqual(len(measured), 5)
                    self.assertTrue(ut._step_host_bound(model, (x,), None)["remembered"])
                self.assertEqual(len(measured), 5)
            # Off: nothing read or written.
            with mock.patch.dict(os.environ, {"UCUDNN_HOST_BOUND_CACHE": "off"}):
                self.assertIsNone(ut._host_bound_records_path())
                ut._step_host_bound(model, (x,), None)
                ut._step_host_bound(model, (x,), None)
                self.assertEqual(len(measured), 7)

    def test_a_memory_bound_answer_is_not_remembered(self):
        model = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off")
        x = torch.randn(2, 3, 8, 8)
        synced = {"host_bound": False, "host_ms": 1.0, "step_ms": 2.0, "allocator_syncs": 3}
        with tempfile.TemporaryDirectory() as directory, \
                mock.patch.object(ut, "step_is_host_bound", return_value=synced) as measure, \
                mock.patch.dict(os.environ, {"UCUDNN_HOST_BOUND_CACHE":
                                             os.path.join(directory, "h.json")}):
            ut._step_host_bound(model, (x,), None)
            ut._step_host_bound(model, (x,), None)
            self.assertEqual(measure.call_count, 2)
            self.assertFalse(os.path.exists(os.path.join(directory, "h.json")))

    def _searching(self, answers, search="heuristics"):
        """_step_host_bound called once per answer of its measuring steps (None: the call should
        not measure), with PyTorch benchmarking before each call as a new job would be: [(its
        answer, the benchmark flag after it, the record's framework_search)]."""
        model = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off")
        x = torch.randn(2, 3, 8, 8)
        got = []
        with tempfile.TemporaryDirectory() as directory, \
                mock.patch.dict(os.environ, {"UCUDNN_HOST_BOUND_CACHE":
                                             os.path.join(directory, "h.json")}), \
                _benchmark_kept(), mock.patch.object(ut, "step_is_host_bound") as measure:
            for bound in answers:
                bound, step_ms = bound if isinstance(bound, tuple) else (bound, 2.0)
                ut._restore_framework_search()  # the job before ended
                torch.backends.cudnn.benchmark = True
                measure.reset_mock()
                measure.return_value = {"host_bound": bound, "host_ms": 1.0, "step_ms": step_ms,
                                        "allocator_syncs": 0}
                answer = ut._step_host_bound(model, (x,), None, search)
                self.assertEqual(measure.call_count, 0 if bound is None else 1, answer)
                with open(os.path.join(directory, "h.json")) as f:
                    record, = json.load(f).values()
                got.append((answer["host_bound"], torch.backends.cudnn.benchmark,
                            record.get("framework_search")))
            ut._restore_framework_search()
        return got

    def test_a_host_bound_step_turns_pytorchs_benchmark_off(self):
        # Measured host-bound with the benchmark's choices: off; the next job measures it with
        # the heuristics' choices, and the one after trusts that.
        self.assertEqual(self._searching([True, True, None, None]), [
            (True, False, "heuristics"), (True, False, "heuristics-checked"),
            (True, False, "heuristics-checked"), (True, False, "heuristics-checked")])
        # Not host-bound with the heuristics' choices and their step slower than the recorded
        # one (2.0 ms): that job and the later ones benchmark.
        with self.assertLogs("ucudnn.torch", "WARNING") as logged:
            self.assertEqual(self._searching([True, (False, 2.1), None]), [
                (True, False, "heuristics"), (False, True, "benchmark"),
                (True, True, "benchmark")])
        self.assertIn("not host-bound with cuDNN's heuristic choices (1.0 ms launched in a 2.1 "
                      "ms step, 2.0 ms with the recorded choices)", logged.output[0])
        # Not host-bound with them, but as fast as the recorded step (within 2%): the layers
        # run PyTorch's own with the heuristics' choices, and no later job searches.
        self.assertEqual(self._searching([True, (False, 2.03), None]), [
            (True, False, "heuristics"), (True, False, "heuristics-checked"),
            (True, False, "heuristics-checked")])
        self.assertTrue(ut.heuristics_keep_pace(51.8, 52.1))
        self.assertFalse(ut.heuristics_keep_pace(53.2, 52.1))
        self.assertFalse(ut.heuristics_keep_pace(1.0, None))
        # A step that is not host-bound keeps the benchmark; so does host_bound_search.
        self.assertEqual(self._searching([False, None]), [(False, True, None)] * 2)
        self.assertEqual(self._searching([True, None], search="benchmark"), [
            (True, True, "benchmark"), (True, True, "benchmark")])

    def test_an_older_record_is_checked_with_the_heuristics(self):
        self.assertEqual(ut._host_bound_code({"host_bound": True}), ut._HOST_BOUND_UNCHECKED)
        self.assertEqual(ut._host_bound_code({"host_bound": False}), ut._HOST_BOUND_NO)
        self.assertEqual(ut._host_bound_code(None), ut._HOST_BOUND_NONE)

    def test_prepare_and_unconvert_give_the_benchmark_back(self):
        model = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off")
        x = torch.randn(2, 3, 8, 8)
        with _benchmark_kept():
            torch.backends.cudnn.benchmark = True
            ut._turn_off_framework_search()
            self.assertFalse(torch.backends.cudnn.benchmark)
            got = ut.prepare(model, x)  # on the CPU: nothing measured, nothing turned off
            self.assertTrue(torch.backends.cudnn.benchmark)
            self.assertTrue(got["cudnn_benchmark"])
            ut._turn_off_framework_search()
            ut.unconvert(model)
            self.assertTrue(torch.backends.cudnn.benchmark)
        with self.assertRaisesRegex(ValueError, "host_bound_search must be one of"):
            ut.prepare(model, x, host_bound_search="fast")

    def test_the_records_live_in_the_users_cache(self):
        environ = {k: v for k, v in os.environ.items()
                   if k not in ("UCUDNN_HOST_BOUND_CACHE", "XDG_CACHE_HOME")}
        with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME="/x/cache"), clear=True):
            self.assertEqual(ut._host_bound_records_path(), "/x/cache/ucudnn/host_bound.json")
        with mock.patch.dict(os.environ, dict(environ, HOME="/home/u"), clear=True):
            self.assertEqual(ut._host_bound_records_path(),
                             "/home/u/.cache/ucudnn/host_bound.json")

    def test_ranks_plan_with_rank_0s_figures(self):
        self.assertEqual(ut._rank0s(5, torch.device("cpu")), 5, "no job: its own")
        with self._rank0_has(1 << 30):
            self.assertEqual(ut._rank0s(5, torch.device("cpu")), 1 << 30)


class CachesTest(unittest.TestCase):
    """The machine's caches: one path rule (core/src/files.cc, UserCachePath) for the library's
    and the adapter's, and ucudnn-doctor's report of them."""

    def test_paths_follow_the_library_rule(self):
        from ucudnn import _cache
        environ = {k: v for k, v in os.environ.items() if not k.startswith("UCUDNN_")}
        with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME="/c"), clear=True):
            self.assertEqual(_cache.cache_path("UCUDNN_COMPILED_PLAN_CACHE", "compiled_plans"),
                             "/c/ucudnn/compiled_plans")
        with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME="rel", HOME="/h"),
                             clear=True):
            self.assertEqual(_cache.cache_path("UCUDNN_CACHE_PATH", "plans.bin"),
                             "/h/.cache/ucudnn/plans.bin")
        for off in ("off", " None ", "0", ""):
            with mock.patch.dict(os.environ, dict(environ, UCUDNN_CACHE_PATH=off), clear=True):
                self.assertIsNone(_cache.cache_path("UCUDNN_CACHE_PATH", "plans.bin"), off)
        with mock.patch.dict(os.environ, dict(environ, UCUDNN_CACHE_PATH=" /p/x.bin "),
                             clear=True):
            self.assertEqual(_cache.cache_path("UCUDNN_CACHE_PATH", "plans.bin"), "/p/x.bin")

    def test_doctor_reports_what_the_caches_hold(self):
        from ucudnn import doctor
        with tempfile.TemporaryDirectory() as home:
            compiled = os.path.join(home, "ucudnn", "compiled_plans")
            os.makedirs(compiled)
            for name, data in (("a.plan", "12345"), ("b.plan", "678"), ("a.plan.tmp.1.0", "9")):
                with open(os.path.join(compiled, name), "w") as f:
                    f.write(data)
            with open(os.path.join(home, "ucudnn", "host_bound.json"), "w") as f:
                json.dump({"k1": {}, "k2": {}}, f)
            environ = {k: v for k, v in os.environ.items() if not k.startswith("UCUDNN_")}
            with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME=home), clear=True):
                caches = doctor._caches()
            with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME=home,
                                                  UCUDNN_COMPILED_PLAN_CACHE="off"), clear=True):
                off = doctor._caches()
        self.assertEqual(caches["plan_cache"],
                         {"path": os.path.join(home, "ucudnn", "plans.bin"), "bytes": None})
        self.assertEqual(caches["compiled_plans"], {"path": compiled, "plans": 2, "bytes": 8})
        self.assertEqual(caches["host_bound_answers"]["records"], 2)
        self.assertEqual(off["compiled_plans"], {"path": None, "plans": 0, "bytes": 0})


class RouteTest(unittest.TestCase):
    """A kernel the library declines is routed to PyTorch's own without asking it again at every
    call, and asked again later (plans arrive in the background)."""

    def test_declined_layer_takes_the_unconverted_path_then_asks_again(self):
        torch.manual_seed(21)
        reference = nn.Conv2d(3, 4, 3, padding=1)
        model = ut.convert(copy.deepcopy(reference), server="", cache_path="off")
        x = torch.randn(2, 3, 6, 6)
        assert_same_step(self, model, reference, x)
        calls = ut.stats(model)["fallback_calls"]
        library_calls = model._ucudnn_runtime.library
        with mock.patch.object(ut._Conv, "run", autospec=True,
                               side_effect=AssertionError("asked the library")):
            assert_same_step(self, model, reference, x)  # routed: the library is not called
            self.assertEqual(ut.stats(model)["fallback_calls"], calls + 3, "still counted")
            # Every op routed: the layer's next calls are nn.Conv2d's own till the recheck.
            self.assertIs(type(model), ut._NativeRoutedConv2d)
            assert_same_step(self, model, reference, x)
        self.assertEqual(ut.stats(model)["fallback_calls"], calls + 3, "not through the adapter")
        conv = next(iter(model._ucudnn_convs.values()))
        conv.recheck = [0.0, 0.0, 0.0]  # time to ask again
        model._ucudnn_runtime.native_until = 0.0
        assert_same_step(self, model, reference, x)
        self.assertEqual(ut.stats(model)["fallback_calls"], calls + 6)
        self.assertIs(model._ucudnn_runtime.library, library_calls)

    def test_custom_ops_only_where_torch_has_them(self):
        has = hasattr(torch.library, "register_fake") and hasattr(torch.library,
                                                                  "register_autograd")
        self.assertEqual(ut.custom_ops_available(), has)


class FrameworkPlanTest(unittest.TestCase):
    """Plans that chose PyTorch's own convolution (the framework candidate, issue 20): the
    kernel runs PyTorch's path, counted as a framework call, and only for the framework identity
    the plans were made for."""

    # PyTorch without its benchmark: ties go to PyTorch's own (the tests of the benchmark mode's
    # ties set their own).
    IDENTITY = "torch-test/heuristic"

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, model, x, framework_ops):
        """A plan cache for `model`'s kernels: micro-batched plans, except the kernels for which
        framework_ops(shape) is true, whose plans chose the framework."""
        ut.convert(model, server="", cache_path="off", framework=self.IDENTITY)
        shapes = ut._unique([s for g in ut.kernels(model, x).values() for s in g])
        cache = os.path.join(self.dir.name, "plans.bin")
        torch_adapter.write_plan_cache(TOOL, cache, shapes, LIMIT, framework=self.IDENTITY,
                                       framework_plans=framework_ops)
        return cache, len(shapes)

    def planned_copy(self, seed, make_reference, framework_ops, requires_grad=False):
        """(reference, model, x, plan cache, kernels): the reference made under `seed`, a copy of
        it and an input, with a plan cache for the copy's kernels (write())."""
        torch.manual_seed(seed)
        reference = make_reference()
        model = copy.deepcopy(reference)
        x = torch.randn(4, 3, 9, 9, requires_grad=requires_grad)
        cache, count = self.write(model, x, framework_ops)
        return reference, model, x, cache, count

    def test_a_framework_plan_runs_pytorchs_own(self):
        # Layer 2's forward (its input has 4 channels) chose the framework.
        reference, model, x, cache, count = self.planned_copy(
            31, lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(4, 6, 3, stride=2, padding=1)),
            lambda s: s.op == _lib.FORWARD and s.c == 4)
        self.assertEqual(count, 5)
        ut.convert(model, server="", cache_path=cache, framework=self.IDENTITY)
        for _ in range(3):
            assert_same_step(self, model, reference, x)
        stats = ut.stats(model)
        # Per step: 4 plans ran, layer 2's forward ran PyTorch's own as planned, and layer 1's
        # backward-data (x needs its gradient in step(), not in kernels()) had no plan.
        self.assertEqual(stats["planned_calls"], 3 * 4, stats)
        self.assertEqual(stats["framework_calls"], 3, stats)
        self.assertEqual(stats["fallback_calls"], 3, stats)

    def test_a_layer_all_framework_takes_the_unconverted_path(self):
        reference, model, x, cache, count = self.planned_copy(
            32, lambda: nn.Conv2d(3, 4, 3, padding=1), lambda s: True, requires_grad=True)
        self.assertEqual(count, 3)
        ut.convert(model, server="", cache_path=cache, framework=self.IDENTITY)
        assert_same_step(self, model, reference, x)  # learns the routes
        with mock.patch.object(ut._Conv2dFunction, "apply",
                               side_effect=AssertionError("through the adapter's function")):
            assert_same_step(self, model, reference, x)
        stats = ut.stats(model)
        # The first call's ops counted; its next calls on the native route, counted nowhere.
        self.assertEqual(stats["framework_calls"], 3, stats)
        self.assertEqual(stats["native_route_layers"], 1, stats)
        self.assertEqual(stats["planned_calls"], 0, stats)

    def two_planned_layers(self, seed):
        """(reference, model, x, plan cache, kernels): two layers, every kernel planned (at 1 ms
        a segment: far slower than PyTorch's own at these sizes)."""
        return self.planned_copy(
            seed, lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                        nn.Conv2d(4, 6, 1)), lambda s: False)

    @staticmethod
    def layer_timings(framework_ms_of):
        """The cluster's timings, mocked: every op planned at 0.1 ms, PyTorch's own at
        framework_ms_of(the op's input channels) (4: layer 2 of two_planned_layers)."""
        real_info, real_kernel = _lib.Context.kernel_info, _lib.Context.kernel
        channels = {}  # kernel handle -> its input's channels

        def kernel(context, shape, limit=0):
            handle = real_kernel(context, shape, limit)
            channels[handle] = shape.c
            return handle

        def info(context, handle):
            got = dict(real_info(context, handle))
            got.update(state="planned", predicted_ms=0.1,
                       framework_ms=framework_ms_of(channels[handle]))
            return got

        stack = contextlib.ExitStack()
        stack.enter_context(mock.patch.object(_lib.Context, "kernel_info", autospec=True,
                                              side_effect=info))
        stack.enter_context(mock.patch.object(_lib.Context, "kernel", autospec=True,
                                              side_effect=kernel))
        return stack

    def test_without_a_server_the_measurement_decides_for_this_process(self):
        reference, model, x, cache, count = self.two_planned_layers(34)
        ut.convert(model, server="", cache_path=cache, framework=self.IDENTITY)
        result = without_seconds(self, ut.prepare(model, x, wait_ms=200))
        self.assertEqual(result, {"kernels": count, "measured": count, "budget": "fixed",
                                  "above_peak": None, "framework_fitted": 0, "host_bound": None,
                                  "compiled": False, "cudnn_benchmark": False})
        self.assertEqual(len(model[0]._ucudnn_runtime.local_framework), count)
        assert_same_step(self, model, reference, x)
        stats = ut.stats(model)
        self.assertEqual(stats["planned_calls"], 0, stats)
        # The 5 kernels, and layer 1's backward-data (step()'s input needs a gradient): the
        # layer is PyTorch's own whole.
        self.assertEqual(stats["framework_calls"], count + 1, stats)

    def test_pytorchs_time_taken_while_plans_are_missing_is_not_shared(self):
        # The server answers "missing" (a worker benchmarks the problems, maybe on this device)
        # until wait_ms: PyTorch's times taken then are this process's alone.
        reference, model, x, cache, count = self.two_planned_layers(38)
        ut.convert(model, server=f"127.0.0.1:{closed_port()}", deadline_ms=100,
                   cache_path=os.path.join(self.dir.name, "none.bin"), framework=self.IDENTITY)
        self.assertTrue(model[0]._ucudnn_runtime.has_server())
        real_info = _lib.Context.kernel_info

        def missing(context, handle):
            return dict(real_info(context, handle), state="missing")

        with mock.patch.object(_lib.Context, "submit_framework_timings",
                               autospec=True) as submit, \
                mock.patch.object(_lib.Context, "kernel_info", autospec=True,
                                  side_effect=missing):
            started = time.monotonic()
            result = ut.prepare(model, x, wait_ms=400, host_bound=False)
            waited = time.monotonic() - started
        self.assertGreaterEqual(waited, 0.4, "waited for the plans")
        self.assertEqual(result["measured"], count)
        submit.assert_not_called()
        # No plan to weigh them against: nothing decided for this process, a plan that comes
        # later runs.
        self.assertEqual(model[0]._ucudnn_runtime.local_framework, set())
        assert_same_step(self, model, reference, x)

    def test_pytorchs_time_is_shared_once_the_plans_are_in(self):
        reference, model, x, cache, count = self.two_planned_layers(39)
        ut.convert(model, server=f"127.0.0.1:{closed_port()}", deadline_ms=100,
                   cache_path=cache, framework=self.IDENTITY)
        with mock.patch.object(_lib.Context, "submit_framework_timings",
                               autospec=True) as submit:
            result = ut.prepare(model, x, wait_ms=400, host_bound=False)
        self.assertEqual(result["measured"], count)
        submit.assert_called_once()
        self.assertEqual(len(submit.call_args.args[1]), count)

    def test_a_layer_whose_plans_save_little_runs_pytorchs_own_whole(self):
        reference, model, x, cache, count = self.two_planned_layers(35)
        # Layer 1's plans save 5 us an op, layer 2's 50 us an op.
        timings = lambda channels: 0.150 if channels == 4 else 0.105  # noqa: E731

        # A host-bound step (prepare()'s host_bound, else measured on CUDA): no layer's
        # device-time saving counts (a threshold of 0 still runs every plan not slower).
        for gain_us, routed_layers, bound in ((None, 1, None), (None, 2, True), (0.0, 0, True),
                                              (200.0, 2, False)):
            with self.subTest(min_layer_gain_us=gain_us, host_bound=bound):
                ut.convert(model, server="", cache_path=cache, framework=self.IDENTITY,
                           min_layer_gain_us=gain_us)
                with self.layer_timings(timings):
                    result = without_seconds(
                        self, ut.prepare(model, x, wait_ms=200, host_bound=bound))
                self.assertEqual(result, {"kernels": count, "measured": 0, "budget": "fixed",
                                          "above_peak": None, "framework_fitted": 0,
                                          "host_bound": None if bound is None else
                                          {"host_bound": bound}, "compiled": False,
                                          "cudnn_benchmark": False})
                # Kept on the module for torch.compile.
                self.assertEqual([model[0]._ucudnn_framework_layer,
                                  model[2]._ucudnn_framework_layer],
                                 [routed_layers >= 1, routed_layers == 2])
                assert_same_step(self, model, reference, x)
                stats = ut.stats(model)
                # 3 ops a layer in step(); layer 1's backward-data has no plan (prepare()'s
                # input needed no gradient): a fallback when the layer is not routed whole.
                self.assertEqual(stats["framework_calls"], 3 * routed_layers, stats)
                self.assertEqual(stats["planned_calls"], {0: 5, 1: 3, 2: 0}[routed_layers],
                                 stats)
                self.assertEqual(stats["fallback_calls"], 1 if routed_layers == 0 else 0,
                                 stats)
        # Both layers decided whole (the last subtest): their next calls are nn.Conv2d's own
        # (the native route), nothing of the adapter's in them and counted nowhere...
        self.assertEqual([type(model[0]), type(model[2])], [ut._NativeRoutedConv2d] * 2)
        self.assertEqual(ut.stats(model)["native_route_layers"], 2)
        before = ut.stats(model)
        with mock.patch.object(ut.UcudnnConv2d, "_ucudnn_conv",
                               side_effect=AssertionError("through the adapter")):
            assert_same_step(self, model, reference, x)
        self.assertEqual(ut.stats(model), before)
        # A copy, a pickle and convert() again start on the adapter's route.
        self.assertEqual(type(copy.deepcopy(model)[0]), ut.UcudnnConv2d)
        self.assertEqual(type(pickle.loads(pickle.dumps(model))[2]), ut.UcudnnConv2d)
        # ... until the decision's recheck: the model's next step asks the library again.
        looked_up = []
        real_conv_of = ut.UcudnnConv2d._ucudnn_conv_of
        with mock.patch.object(ut, "_monotonic", return_value=float("inf")), \
                mock.patch.object(ut.UcudnnConv2d, "_ucudnn_conv_of", autospec=True,
                                  side_effect=lambda *a: looked_up.append(a[0]) or
                                  real_conv_of(*a)):
            assert_same_step(self, model, reference, x)
        self.assertEqual(looked_up, [model[0], model[2]])
        # prepare() decides again: every call through the adapter until a call finds the
        # decision.
        ut.prepare(model, x)
        self.assertEqual([type(model[0]), type(model[2])], [ut.UcudnnConv2d] * 2)
        self.assertEqual(ut.stats(model)["native_route_layers"], 0)
        for bad in (-1, "30", True):
            with self.assertRaisesRegex(ValueError, "min_layer_gain_us must be a number >= 0"):
                ut.convert(model, min_layer_gain_us=bad)

    def test_where_pytorch_benchmarks_a_layer_keeps_the_plans_it_tied_with(self):
        self.IDENTITY = "torch-test/benchmark"
        reference, model, x, cache, count = self.two_planned_layers(37)
        # Layer 1's plans 1% slower than PyTorch's own (a tie the planner gave to ucudnn), layer
        # 2's 50 us faster an op.
        ties = lambda channels: 0.150 if channels == 4 else 0.099  # noqa: E731

        # Not host-bound: every plan runs, however little it saves, so no PyTorch benchmark runs
        # in the job; host-bound, or with an infinite threshold, both layers run PyTorch's own.
        for gain_us, bound, routed_layers in ((None, False, 0), (200.0, False, 0),
                                              (None, True, 2), (float("inf"), False, 2)):
            with self.subTest(min_layer_gain_us=gain_us, host_bound=bound):
                ut.convert(model, server="", cache_path=cache, framework=self.IDENTITY,
                           min_layer_gain_us=gain_us)
                self.assertTrue(model[0]._ucudnn_runtime.framework_benchmarks)
                with self.layer_timings(ties):
                    ut.prepare(model, x, wait_ms=200, host_bound=bound)
                self.assertEqual([model[0]._ucudnn_framework_layer,
                                  model[2]._ucudnn_framework_layer], [routed_layers == 2] * 2)
                assert_same_step(self, model, reference, x)
                stats = ut.stats(model)
                self.assertEqual(stats["planned_calls"], 5 if routed_layers == 0 else 0, stats)
                self.assertEqual(stats["framework_calls"], 3 * routed_layers, stats)
        # Where PyTorch does not benchmark the planner keeps its ties, and a layer whose plans
        # save little (layer 1's: 5 us an op) runs PyTorch's own whole.
        self.IDENTITY = "torch-test/heuristic"
        reference, model, x, cache, count = self.two_planned_layers(37)
        ut.convert(model, server="", cache_path=cache, framework=self.IDENTITY)
        self.assertFalse(model[0]._ucudnn_runtime.framework_benchmarks)
        with self.layer_timings(lambda channels: 0.150 if channels == 4 else 0.105):
            ut.prepare(model, x, wait_ms=200, host_bound=False)
        self.assertEqual([model[0]._ucudnn_framework_layer, model[2]._ucudnn_framework_layer],
                         [True, False])

    def test_without_a_server_a_tie_goes_to_ucudnn_within_pytorchs_workspace(self):
        class Context:  # each kernel's plan: 1.0 ms, its workspace as named
            def kernel(self, shape, limit):
                return shape

            def kernel_info(self, kernel):
                return {"state": "planned", "predicted_ms": 1.0}

            def kernel_workspace_size(self, kernel):
                return kernel[1]

        runtime = types.SimpleNamespace(limit_of=lambda shape: 0, local_framework=set(),
                                        framework_benchmarks=True)
        # (shape, PyTorch's ms, PyTorch's workspace): a tie within PyTorch's workspace (ucudnn's),
        # a tie needing more (PyTorch's), an outright win needing more (ucudnn's), PyTorch faster
        # by more than the margin (PyTorch's).
        measured = [(("tie", 100), 0.99, 100), (("more", 200), 1.01, 100),
                    (("win", 300), 1.2, 100), (("slower", 0), 0.9, 100)]
        with mock.patch.object(ut, "_shape_key", side_effect=lambda shape: shape[0]):
            ut._decide_locally(runtime, Context(), measured)
            self.assertEqual(runtime.local_framework, {"more", "slower"})
            runtime.local_framework.clear()
            runtime.framework_benchmarks = False  # ties to PyTorch: only the outright win
            ut._decide_locally(runtime, Context(), measured)
            self.assertEqual(runtime.local_framework, {"tie", "more", "slower"})

    def test_the_tie_rule_mirrors_the_planners(self):
        self.assertTrue(ut.framework_benchmarks("torch-2.11.0+cu130/benchmark"))
        self.assertTrue(ut.framework_benchmarks("torch-2.11.0+cu130/benchmark-deterministic"))
        self.assertFalse(ut.framework_benchmarks("torch-2.11.0+cu130/heuristic"))
        self.assertFalse(ut.framework_benchmarks("benchmark"))
        self.assertFalse(ut.framework_benchmarks(""))
        # 3% either way: ucudnn's 4.0 against PyTorch's 4.1 and 3.9 (cf. the planner's tests).
        self.assertFalse(ut._beats_framework(4.0, 4.1))
        self.assertTrue(ut._beats_framework(4.0, 4.2))
        self.assertTrue(ut._beats_framework(4.0, 4.1, True))
        self.assertTrue(ut._beats_framework(4.0, 3.9, True))
        self.assertFalse(ut._beats_framework(4.0, 3.85, True))
        torch.backends.cudnn.benchmark, saved = True, torch.backends.cudnn.benchmark
        try:
            self.assertTrue(ut.framework_benchmarks(ut.framework_identity()))
        finally:
            torch.backends.cudnn.benchmark = saved

    def test_a_plan_chosen_for_memory_keeps_its_layer(self):
        reference, model, x, cache, _ = self.planned_copy(
            36, lambda: nn.Conv2d(3, 4, 3, padding=1), lambda s: False)
        real_info = _lib.Context.kernel_info

        def info(context, handle):
            # Slower than PyTorch's own, planned all the same: PyTorch's workspace did not fit.
            got = dict(real_info(context, handle))
            got.update(state="planned", predicted_ms=0.2, framework_ms=0.1)
            return got

        ut.convert(model, server="", cache_path=cache, framework=self.IDENTITY,
                   min_layer_gain_us=1000.0)
        with mock.patch.object(_lib.Context, "kernel_info", autospec=True, side_effect=info):
            ut.prepare(model, x, wait_ms=200, measure_framework=False)
            self.assertFalse(model._ucudnn_framework_layer)
            assert_same_step(self, model, reference, x)
        stats = ut.stats(model)
        self.assertEqual(stats["framework_calls"], 0, stats)
        self.assertGreater(stats["planned_calls"], 0, stats)

    def test_plans_of_another_framework_are_not_used(self):
        reference, model, x, cache, _ = self.planned_copy(
            33, lambda: nn.Conv2d(3, 4, 3, padding=1), lambda s: s.op == _lib.FORWARD)
        ut.convert(model, server="", cache_path=cache, framework="torch-other/heuristic")
        assert_same_step(self, model, reference, x)
        stats = ut.stats(model)
        self.assertEqual((stats["planned_calls"], stats["framework_calls"]), (0, 0), stats)


class LivenessTest(unittest.TestCase):
    """Per-kernel budgets from the step's memory (issue 21): the headroom computation on recorded
    profiles, the profiled step on the CPU with a stand-in memory counter, and prepare()'s use of
    them."""

    MIB = 1 << 20

    def test_limits_from_a_profile_whose_peak_is_in_the_backward_pass(self):
        mib = self.MIB
        profile = {"base": 0, "calls": [
            ("a0", 100 * mib, 50 * mib),   # forward of layer a
            ("b0", 150 * mib, 50 * mib),   # forward of layer b
            ("b1", 300 * mib, 60 * mib),   # backward-data of b: the step's peak, 360 MiB
            ("b2", 300 * mib, 1 * mib),    # backward-filter of b
            ("a2", 200 * mib, 1 * mib),    # backward-filter of a, late: much is free
            ("a0", 340 * mib, 10 * mib),   # a's forward again (a repeated block) near the peak
        ]}
        exact = ut.liveness_limits(profile, above_peak=64 * mib, quantize=False)
        self.assertEqual(exact, {
            "a0": 64 * mib + 10 * mib,     # the smaller of its two points: 360 - 350
            "b0": 64 * mib + 160 * mib,    # 360 - 200
            "b1": 64 * mib,                # at the peak: only what the user allows above it
            "b2": 64 * mib + 59 * mib,
            "a2": 64 * mib + 159 * mib,
        })
        quantized = ut.liveness_limits(profile, above_peak=64 * mib)
        self.assertEqual(quantized["b0"], 128 * mib)   # 224 MiB rounded down
        self.assertEqual(quantized["b1"], 64 * mib)
        self.assertEqual(quantized["a0"], 64 * mib)    # 74 MiB rounded down, not below the floor
        for key in exact:
            self.assertLessEqual(quantized[key], exact[key], "never above the headroom")
        self.assertEqual(ut.liveness_limits({"base": 0, "calls": []}, 64 * mib), {})

    def test_the_profiled_step_records_every_op_and_leaves_the_model_as_it_was(self):
        torch.manual_seed(41)
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
                                         nn.ReLU(), nn.Conv2d(4, 6, 3, stride=2)),
                           server="", cache_path="off")
        x = torch.randn(4, 3, 9, 9)
        model(x).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        running = model[1].running_mean.clone()
        readings = itertools.count(1000, 1000)
        profile = ut.memory_profile(model, x, reader=lambda: next(readings))
        ops = [key[0] for key, _, _ in profile["calls"]]
        # Forward in order, then the backward of the last layer first (x needs no gradient:
        # layer 1 has no backward-data).
        self.assertEqual(ops, [_lib.FORWARD, _lib.FORWARD, _lib.BACKWARD_DATA,
                               _lib.BACKWARD_FILTER, _lib.BACKWARD_FILTER])
        in_use = [u for _, u, _ in profile["calls"]]
        # Read once at each forward and each layer's backward, in order; layer 2's
        # backward-filter runs with its backward-data's gradient (4x4x9x9 fp32) still held.
        self.assertEqual(in_use, [2000, 3000, 4000, 4000 + 4 * 4 * 9 * 9 * 4, 5000])  # 1000: base
        self.assertEqual(profile["calls"][0][2], 4 * 4 * 9 * 9 * 4, "layer 1's output bytes")
        for name, p in model.named_parameters():
            self.assertTrue(torch.equal(p.grad, grads[name]), f"{name}'s gradient restored")
        self.assertTrue(torch.equal(model[1].running_mean, running), "batch norm restored")
        with self.assertRaisesRegex(ValueError, "CUDA device"):
            ut.memory_profile(model, x)

    def test_the_profiled_and_recorded_passes_run_no_convolution(self):
        # No cuDNN call in them: PyTorch's benchmark is left to the layers that run its own.
        torch.manual_seed(43)
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
                                         nn.ReLU(), nn.Conv2d(4, 6, 3, stride=2, bias=False)),
                           server="", cache_path="off").to(memory_format=torch.channels_last)
        x = torch.randn(4, 3, 9, 9, requires_grad=True).contiguous(
            memory_format=torch.channels_last)
        expected = ut.kernels(model, x)  # the shapes, as the library is asked for them
        no_conv = AssertionError("a convolution ran")
        with mock.patch.object(ut.F, "conv2d", side_effect=no_conv), \
                mock.patch.object(torch.ops.aten, "convolution_backward", side_effect=no_conv), \
                mock.patch.object(ut, "_torch_backward", side_effect=no_conv):
            recorded = ut.kernels(model, x)
            profile = ut.memory_profile(model, x, reader=lambda: 0)
        self.assertEqual([[ut._shape_key(s) for s in g] for g in recorded.values()],
                         [[ut._shape_key(s) for s in g] for g in expected.values()])
        # Each op's output bytes are the real output's: y1 4x4x9x9, y2 4x6x4x4, then the
        # gradients of layer 2's input and weight, of layer 1's input and weight (fp32).
        self.assertEqual([out for _, _, out in profile["calls"]],
                         [4 * 4 * 9 * 9 * 4, 4 * 6 * 4 * 4 * 4, 4 * 4 * 9 * 9 * 4,
                          6 * 4 * 3 * 3 * 4, 4 * 3 * 9 * 9 * 4, 4 * 3 * 3 * 3 * 4])

    def test_prepare_declares_each_kernel_with_its_budget(self):
        torch.manual_seed(42)
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                         nn.Conv2d(4, 6, 3)), server="", cache_path="off",
                           workspace_bytes="32MiB")
        x = torch.randn(4, 3, 9, 9)
        shapes = ut._unique([s for g in ut.kernels(model, x).values() for s in g])
        fake = {"base": 0, "calls": [(ut._shape_key(s), i * self.MIB, 0)
                                     for i, s in enumerate(shapes)]}
        declared = []
        real_prepare = _lib.Context.prepare
        with mock.patch.object(ut, "memory_profile", return_value=fake), \
                mock.patch.object(_lib.Context, "prepare", autospec=True,
                                  side_effect=lambda ctx, group, limit: declared.append(
                                      (limit, len(group))) or real_prepare(ctx, group, limit)):
            ut.prepare(model, x, budget="liveness")
        expected = ut.liveness_limits(fake, 32 * self.MIB)
        self.assertEqual(sum(n for _, n in declared), len(shapes))
        self.assertEqual(sorted({limit for limit, _ in declared}), sorted(set(expected.values())))
        # The step runs the kernels declared with those limits, not the configured one.
        asked = {}
        real_kernel = _lib.Context.kernel

        def kernel(context, shape, limit=0):
            asked[ut._shape_key(shape)] = limit
            return real_kernel(context, shape, limit)

        with mock.patch.object(_lib.Context, "kernel", autospec=True, side_effect=kernel):
            model(x).sum().backward()
        self.assertEqual(asked, expected)
        with self.assertRaisesRegex(ValueError, "budget must be one of auto, fixed, liveness"):
            ut.prepare(model, x, budget="peak")
        total = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off",
                           workspace_mode="total")
        with self.assertRaisesRegex(ValueError, "needs workspace_mode='per_kernel'"):
            ut.prepare(total, x, budget="liveness")

    def test_liveness_budgets_fit_the_memory_the_process_may_take(self):
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                         nn.Conv2d(4, 6, 3)), server="", cache_path="off",
                           workspace_bytes="32MiB")
        x = torch.randn(4, 3, 9, 9)
        self.assertIsNone(ut._memory_allowance((x,)), "no CUDA input: no bound")
        shapes = ut._unique([s for g in ut.kernels(model, x).values() for s in g])
        fake = {"base": 0, "calls": [(ut._shape_key(s), i * self.MIB, 0)
                                     for i, s in enumerate(shapes)]}
        peak = (len(shapes) - 1) * self.MIB
        cases = ((None, 32 * self.MIB), (peak + 100 * self.MIB, 32 * self.MIB),
                 (peak + 5 * self.MIB, 5 * self.MIB), (peak, 0))
        for allowance, above_peak in cases:
            with mock.patch.object(ut, "memory_profile", return_value=fake), \
                    mock.patch.object(ut, "_memory_allowance", return_value=allowance):
                result = ut.prepare(model, x, budget="liveness")
            self.assertEqual(result["above_peak"], above_peak, f"allowance {allowance}")
            self.assertEqual(ut._runtimes(model)[0].kernel_limits,
                             ut.liveness_limits(fake, above_peak))
        self.assertIsNone(ut.prepare(model, x, budget="fixed")["above_peak"])

    def test_the_jobs_steps_correct_the_budgets_by_the_memory_they_hold(self):
        # The profiled step has no optimizer's state; the job's steps hold it from its first
        # step on: what the process may take above the peak shrinks by as much.
        mib = self.MIB
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                         nn.Conv2d(4, 6, 3)), server="", cache_path="off",
                           workspace_bytes="32MiB")
        x = torch.randn(4, 3, 9, 9)
        shapes = ut._unique([s for g in ut.kernels(model, x).values() for s in g])
        base = 100 * mib
        fake = {"base": base, "calls": [(ut._shape_key(s), base + i * mib, 0)
                                        for i, s in enumerate(shapes)]}
        peak = base + (len(shapes) - 1) * mib
        with mock.patch.object(ut, "memory_profile", return_value=fake), \
                mock.patch.object(ut, "_memory_allowance", return_value=peak + 40 * mib):
            self.assertEqual(ut.prepare(model, x, budget="liveness")["above_peak"], 32 * mib)
        budget = model._ucudnn_step_budget
        self.assertIn(ut._check_step_budget, model._forward_pre_hooks.values())
        runtime = ut._runtimes(model)[0]
        self.assertEqual(runtime.kernel_limits, ut.liveness_limits(fake, 32 * mib))
        declared = []

        def prepare(context, group, limit):
            declared.append((len(group), limit))

        convs = list(ut._convs(model))
        for conv in convs:  # the workspaces their plans at the old limits needed
            conv.workspace_bytes = [5 * mib] * 3
        with mock.patch.object(_lib.Context, "prepare", autospec=True, side_effect=prepare):
            self.assertFalse(budget.check(model, base + 8 * mib), "within the tolerance")
            self.assertEqual(declared, [])
            self.assertTrue(budget.check(model, base + 30 * mib))
            self.assertEqual(budget.above_peak(), 10 * mib)
            self.assertEqual(runtime.kernel_limits, ut.liveness_limits(fake, 10 * mib))
            self.assertEqual(sum(n for n, _ in declared), len(shapes), "every kernel again")
            for conv in convs:
                self.assertEqual(conv.kernels, [None] * 3)
                self.assertEqual(conv.workspace_bytes, [0] * 3, "learnt anew from the new plans")
            self.assertEqual(ut.stats(model)["budget_replans"], 1)
            # Beyond the allowance: each kernel its headroom below the peak alone.
            self.assertTrue(budget.check(model, base + 300 * mib))
            self.assertEqual(budget.above_peak(), 0)
            self.assertEqual(runtime.kernel_limits, ut.liveness_limits(fake, 0))
            self.assertFalse(budget.check(model, base), "budgets never grow back")
        self.assertEqual(ut.stats(model)["budget_replans"], 2)
        self.assertIsNone(copy.deepcopy(model).__dict__.get("_ucudnn_step_budget"),
                          "a copy has no budget of its own")
        for _ in range(budget.checks_left):
            model(x)
        self.assertIn("_ucudnn_step_budget", model.__dict__)
        model(x)  # the checks are spent: the budget is dropped
        self.assertNotIn("_ucudnn_step_budget", model.__dict__)

    def test_a_raised_limit_stays_only_within_the_ceiling(self):
        mib = self.MIB
        fake = {"base": 0, "calls": [(("a",), 10 * mib, 0), (("b",), 50 * mib, 0)]}
        budget = ut._StepBudget(fake, 8 * mib, 50 * mib + 100 * mib, torch.device("cpu"))
        budget.raised = {("a",): 120 * mib}
        self.assertEqual(budget.ceiling(), 100 * mib)
        self.assertNotEqual(budget.limits()[("a",)], 120 * mib, "over the ceiling")
        budget.raised = {("a",): 90 * mib}
        self.assertEqual(budget.limits()[("a",)], 90 * mib)
        budget.shift = 20 * mib  # the job holds 20 MiB more: the ceiling is 80 MiB
        self.assertNotEqual(budget.limits()[("a",)], 90 * mib)
        # Without a bound on the process (off CUDA) what the job holds changes nothing.
        unbound = ut._StepBudget(fake, 8 * mib, None, torch.device("cpu"))
        model = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off")
        self.assertFalse(unbound.check(model, 500 * mib))
        self.assertEqual(unbound.checks_left, unbound.CHECKS - 1)

    def test_a_kernel_gets_the_workspace_of_pytorchs_faster_own(self):
        mib = self.MIB

        def info(predicted, framework, workspace, state="planned"):
            return {"state": state, "predicted_ms": predicted, "framework_ms": framework,
                    "framework_workspace_bytes": workspace}

        fit = ut._framework_fit_limit
        # VGG-16 fp32's backward-filter 512x14x14: plan 0.852 ms at 42 MiB, PyTorch's own 0.654
        # ms with 115 MiB.
        self.assertEqual(fit(42 * mib, info(0.852, 0.654, 115 * mib), True), 115 * mib)
        self.assertIsNone(fit(128 * mib, info(0.852, 0.654, 115 * mib), True), "it fits already")
        self.assertIsNone(fit(42 * mib, info(0.640, 0.654, 115 * mib), True), "the plan wins")
        self.assertIsNone(fit(42 * mib, info(0.66, 0.654, 115 * mib), True),
                          "a tie goes to ucudnn where PyTorch benchmarks")
        self.assertEqual(fit(42 * mib, info(0.66, 0.654, 115 * mib), False), 115 * mib)
        self.assertIsNone(fit(42 * mib, info(0.852, 0.0, 115 * mib), True), "no PyTorch time")
        self.assertIsNone(fit(42 * mib, info(0.852, 0.654, 0), True), "workspace unknown")
        self.assertIsNone(fit(42 * mib, info(0.654, 0.654, 115 * mib, "framework"), True))
        self.assertIsNone(fit(42 * mib, info(0.0, 0.654, 115 * mib, "no plan"), True))
        self.assertEqual(fit(42 * mib, info(0.852, 0.654, 115 * mib), True, 115 * mib), 115 * mib)
        self.assertIsNone(fit(42 * mib, info(0.852, 0.654, 115 * mib), True, 100 * mib),
                          "beyond what the process may give the kernel (a memory cap)")

    def test_prepare_raises_the_limit_where_pytorchs_own_is_faster_but_larger(self):
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                         nn.Conv2d(4, 6, 3)), server="", cache_path="off",
                           workspace_bytes="32MiB", framework="torch-test/benchmark")
        x = torch.randn(4, 3, 9, 9)
        shapes = ut._unique([s for g in ut.kernels(model, x).values() for s in g])
        fake = {"base": 0, "calls": [(ut._shape_key(s), i * self.MIB, 0)
                                     for i, s in enumerate(shapes)]}
        target = ut._shape_key(shapes[1])
        wide = 300 * self.MIB  # above every liveness limit
        handles = {}
        declared = []
        real_kernel, real_prepare = _lib.Context.kernel, _lib.Context.prepare

        def kernel(context, shape, limit=0):
            handle = real_kernel(context, shape, limit)
            handles[handle] = (ut._shape_key(shape), limit)
            return handle

        def kernel_info(context, handle):
            key, limit = handles[handle]
            if key == target and limit < wide:  # a plan slower than PyTorch's own, 300 MiB
                return {"state": "planned", "predicted_ms": 2.0, "framework_ms": 1.0,
                        "framework_workspace_bytes": wide}
            return {"state": "planned", "predicted_ms": 1.0, "framework_ms": 2.0,
                    "framework_workspace_bytes": wide}

        def prepared(allowance=None):
            """prepare() under liveness budgets on the stand-ins, the process allowed
            `allowance` bytes (None: no bound)."""
            with mock.patch.object(ut, "memory_profile", return_value=fake), \
                    mock.patch.object(ut, "_memory_allowance", return_value=allowance), \
                    mock.patch.object(_lib.Context, "kernel", autospec=True,
                                      side_effect=kernel), \
                    mock.patch.object(_lib.Context, "kernel_info", autospec=True,
                                      side_effect=kernel_info), \
                    mock.patch.object(_lib.Context, "prepare", autospec=True,
                                      side_effect=lambda ctx, group, limit: declared.append(
                                          (limit, [ut._shape_key(s) for s in group])) or
                                      real_prepare(ctx, group, limit)):
                return ut.prepare(model, x, budget="liveness", wait_ms=50,
                                  measure_framework=False, host_bound=False)

        result = prepared()
        self.assertEqual(result["framework_fitted"], 1)
        limits = ut._runtimes(model)[0].kernel_limits
        expected = ut.liveness_limits(fake, 32 * self.MIB)
        self.assertEqual(limits[target], wide)
        self.assertEqual({k: v for k, v in limits.items() if k != target},
                         {k: v for k, v in expected.items() if k != target})
        self.assertEqual(declared[-1], (wide, [target]), "asked for again at the raised limit")
        # The layers hold the kernel declared at the raised limit (prepare() decided them).
        held = {handles[k] for conv in ut._convs(model) for k in conv.kernels if k is not None}
        self.assertIn((target, wide), held)
        self.assertNotIn(target, {key for key, limit in held if limit != wide})
        # Under a memory cap that leaves the process less than PyTorch's workspace: not raised.
        peak = (len(shapes) - 1) * self.MIB
        capped = prepared(allowance=peak + 200 * self.MIB)
        self.assertEqual(capped["framework_fitted"], 0)
        self.assertLess(ut._runtimes(model)[0].kernel_limits[target], wide)
        # Fixed budgets are the user's limit: never raised.
        with mock.patch.object(_lib.Context, "kernel_info", autospec=True,
                               side_effect=lambda ctx, handle: {
                                   "state": "planned", "predicted_ms": 2.0, "framework_ms": 1.0,
                                   "framework_workspace_bytes": wide}):
            result = ut.prepare(model, x, budget="fixed", wait_ms=50, measure_framework=False,
                                host_bound=False)
        self.assertEqual(result["framework_fitted"], 0)

    def test_auto_is_liveness_on_cuda_in_per_kernel_mode(self):
        class OnCuda(torch.Tensor):  # a CPU tensor that says it is on CUDA
            @property
            def is_cuda(self):
                return True

        model = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off")
        total = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off",
                           workspace_mode="total")
        x = torch.randn(2, 3, 5, 5)
        self.assertEqual(ut._auto_budget(model, (x,)), "fixed")
        self.assertEqual(ut._auto_budget(model, (x.as_subclass(OnCuda),)), "liveness")
        self.assertEqual(ut._auto_budget(total, (x.as_subclass(OnCuda),)), "fixed")
        with mock.patch.dict(os.environ, {"UCUDNN_WORKSPACE_MODE": "total_sum"}):
            self.assertEqual(ut._auto_budget(model, (x.as_subclass(OnCuda),)), "fixed",
                             "the environment's mode counts too")
        # A step whose output is no tensor cannot be profiled without loss_fn: fixed, warned.
        with mock.patch.object(ut, "_auto_budget", return_value="liveness"), \
                mock.patch.object(ut, "memory_profile",
                                  side_effect=AttributeError("'dict' has no attribute 'float'")):
            with self.assertWarnsRegex(UserWarning, "could not be profiled"):
                result = ut.prepare(model, x)
        self.assertEqual(result["budget"], "fixed")


class ReadmeTest(unittest.TestCase):
    def test_the_readmes_snippet_runs_as_written(self):
        with open(os.path.join(support.REPO, "README.md")) as f:
            readme = f.read()
        section = readme[readme.index("## PyTorch\n"):]
        start = section.index("```python\n") + len("```python\n")
        code = section[start:section.index("```\n", start)]
        output = io.StringIO()
        with mock.patch.dict(os.environ, {"UCUDNN_SERVER": "", "UCUDNN_CACHE_PATH": "off"}), \
                mock.patch("sys.stdout", output):
            exec(compile(code, "README.md (PyTorch)", "exec"), {})
        self.assertIn("calls ran plans", output.getvalue())


class CheckpointTest(unittest.TestCase):
    def test_checkpoint_holds_no_token_or_server_and_loads_working(self):
        torch.manual_seed(11)
        original = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1))
        secret = "s3cr3t-token-value"
        converted = ut.convert(copy.deepcopy(original), server=f"127.0.0.1:{closed_port()}",
                               token=secret, cache_path="off", policy="all", deadline_ms=200)
        buffer = io.BytesIO()
        torch.save(converted, buffer)
        self.assertNotIn(secret.encode(), buffer.getvalue())
        self.assertNotIn(b"127.0.0.1", buffer.getvalue())
        buffer.seek(0)
        with mock.patch.dict(os.environ, {"UCUDNN_SERVER": ""}):
            loaded = torch.load(buffer)
            x = torch.randn(2, 3, 6, 6)
            assert_close(self, loaded(x), original(x), "loaded")
        runtime = loaded[0]._ucudnn_runtime
        self.assertNotIn("TOKEN", runtime.options)
        self.assertIn("UCUDNN_POLICY=all", runtime.options, "other options are kept")

    def test_unconvert_restores_plain_conv2d(self):
        torch.manual_seed(12)
        original = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1))
        model = ut.unconvert(ut.convert(copy.deepcopy(original), server="", cache_path="off"))
        for module in model.modules():
            self.assertNotIn(type(module), (ut.UcudnnConv2d, ut._NativeRoutedConv2d))
            self.assertFalse([k for k in vars(module) if k.startswith("_ucudnn")])
            self.assertFalse(module._forward_pre_hooks)
        x = torch.randn(2, 3, 6, 6)
        assert_close(self, model(x), original(x), "unconverted")
        self.assertEqual(list(model.state_dict()), list(original.state_dict()))

class StateDictTest(unittest.TestCase):
    def test_round_trip(self):
        torch.manual_seed(9)
        original = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1))
        converted = ut.convert(copy.deepcopy(original), server="", cache_path="off")
        self.assertEqual(list(converted.state_dict()), list(original.state_dict()))
        buffer = io.BytesIO()
        torch.save(converted.state_dict(), buffer)
        buffer.seek(0)
        fresh = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1))
        fresh.load_state_dict(torch.load(buffer))
        original.eval(), fresh.eval(), converted.eval()
        x = torch.randn(2, 3, 6, 6)
        assert_close(self, fresh(x), original(x), "loaded into a plain model")
        again = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4),
                                         nn.Conv2d(4, 2, 1)), server="", cache_path="off")
        again.load_state_dict(original.state_dict())
        again.eval()
        assert_close(self, again(x), original(x), "loaded into a converted model")

    def test_whole_model_copy_and_pickle(self):
        torch.manual_seed(10)
        original = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1))
        converted = ut.convert(copy.deepcopy(original), server="", cache_path="off")
        x = torch.randn(2, 3, 6, 6)
        copied = copy.deepcopy(converted)
        assert_close(self, copied(x), original(x), "deep copy")
        buffer = io.BytesIO()
        torch.save(converted, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer)
        self.assertIs(type(loaded[0]), ut.UcudnnConv2d)
        assert_close(self, loaded(x), original(x), "pickled whole")
        self.assertEqual(ut.stats(loaded)["kernels"], 2)


if __name__ == "__main__":
    unittest.main()
