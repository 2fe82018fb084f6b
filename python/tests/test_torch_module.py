"""ucudnn.torch against the client library's CPU backend: converted layers: planned micro-batches,
kernel handles, the hot path, fallbacks, checkpoints and state dicts.

Run through ctest (tests/python.cmake), which sets UCUDNN_LIBRARY and the plan-cache tool's path."""

import copy
import io
import itertools
import os
import re
import tempfile
import unittest
import warnings
import weakref
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from support import (CASES, LIMIT, TOOL, assert_close, assert_same_step, closed_port, planned, step,
                     write_plan_cache)
import ucudnn.torch as ut
from ucudnn.torch import budgets as ut_budgets
from ucudnn.torch import conv as ut_conv
from ucudnn.torch import module as ut_module
from ucudnn.torch import preparation as ut_preparation
from ucudnn.torch import routing as ut_routing
from ucudnn import _lib


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
            # Each side's host time to issue a call: measured, so more than nothing.
            self.assertGreater(row["plan_host_us"], 0.0, row)
            self.assertGreater(row["framework_host_us"], 0.0, row)

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
        with mock.patch.object(ut_preparation, "auto_budget", return_value="liveness"), \
                mock.patch.object(ut_budgets, "memory_allowance", return_value=allowance), \
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
                raise ut_conv.OUT_OF_MEMORY_ERRORS("CUDA out of memory (a test's)")
            return real_empty(*args, **kwargs)

        with mock.patch.object(torch, "empty", side_effect=no_workspace), \
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
                   if runtime.lowered_limits.get(ut_conv.shape_key(c.shape(op))) is not None]
        self.assertEqual(len(lowered), out_of_memory)
        for c in convs:
            for op in range(3):
                if runtime.lowered_limits.get(ut_conv.shape_key(c.shape(op))) is not None:
                    self.assertIsNone(c.kernels[op], "declared again at its new limit")
                    self.assertEqual(c.routes[op], ut_routing.ROUTE_NO_PLAN)
        for c in convs:  # each asks for its kernel at the lowered limit (0: the configured one)
            for op in range(3):
                lowered = runtime.lowered_limits.get(ut_conv.shape_key(c.shape(op)))
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
                raise ut_conv.OUT_OF_MEMORY_ERRORS("CUDA out of memory (a test's)")
            return real_empty(*args, **kwargs)

        with mock.patch.object(torch, "empty", side_effect=no_workspace), \
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

    def test_double_backward_as_native(self):
        # A gradient penalty (WGAN-GP, R1) differentiates the input's gradient again: that
        # backward runs PyTorch's own on the autograd graph, so the second derivative is
        # native's, while the plain step keeps the plans.
        torch.manual_seed(14)
        reference = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Tanh(),
                                  nn.ConvTranspose2d(4, 2, 2, 2))
        model = copy.deepcopy(reference)
        x = torch.randn(4, 3, 9, 9)
        planned(model, x.clone().requires_grad_(True), self.dir.name)

        def penalty_step(net):
            net.zero_grad(set_to_none=True)
            inputs = x.clone().requires_grad_(True)
            (grad_x,) = torch.autograd.grad(net(inputs).pow(2).sum(), inputs, create_graph=True)
            grad_x.pow(2).sum().backward()
            return grad_x.detach(), {n: p.grad for n, p in net.named_parameters()}
        grad_x, grads = penalty_step(model)
        expected_x, expected = penalty_step(reference)
        assert_close(self, grad_x, expected_x, "dx")
        for name in expected:
            assert_close(self, grads[name], expected[name], f"d{name} of the penalty")
        before = ut.stats(model)["planned_calls"]
        assert_same_step(self, model, reference, x)
        self.assertGreater(ut.stats(model)["planned_calls"], before, "plans in a plain step")

    def test_shapes_outside_the_librarys_limits_run_pytorchs_own(self):
        # An empty batch (a detection head with no region) and a Conv1d over 3 s of 16 kHz audio
        # (48,000 samples, over the library's 32,768): PyTorch's own, as unconverted.
        for reference, shape in ((nn.Conv2d(3, 4, 3, padding=1), (0, 3, 9, 9)),
                                 (nn.Conv1d(1, 4, 9, stride=4), (2, 1, 48000))):
            with self.subTest(shape=shape):
                torch.manual_seed(15)
                model = ut.convert(copy.deepcopy(reference), server="", cache_path="off")
                x = torch.randn(*shape)
                y, gx, grads = step(model, x)
                y_ref, gx_ref, grads_ref = step(reference, x)
                self.assertEqual(y.shape, y_ref.shape)
                self.assertTrue(torch.equal(y, y_ref))
                self.assertTrue(torch.equal(gx, gx_ref))
                for name in grads_ref:
                    self.assertTrue(torch.equal(grads[name], grads_ref[name]), name)
                self.assertEqual(ut.stats(model)["kernels"], 0, "nothing declared")
                self.assertEqual(ut.prepare(model, x)["kernels"], 0)


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
                mock.patch.object(ut_module, "cast_operands", side_effect=AssertionError("cast")):
            y, y_ref = model(x), reference(x)
        self.assertTrue(torch.equal(y, y_ref))


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
            self.assertNotIn(type(module), (ut.UcudnnConv2d, ut_module.NativeRoutedConv2d))
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
