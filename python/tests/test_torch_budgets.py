"""ucudnn.torch against the client library's CPU backend: prepare()'s workspace budgets: liveness,
allowance, the step's corrections.

Run through ctest (tests/python.cmake), which sets UCUDNN_LIBRARY and the plan-cache tool's path."""

import contextlib
import copy
import itertools
import os
import unittest
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

import ucudnn.torch as ut
from ucudnn.torch import autograd as ut_autograd
from ucudnn.torch import budgets as ut_budgets
from ucudnn.torch import conv as ut_conv
from ucudnn.torch import declare as ut_declare
from ucudnn.torch import measure as ut_measure
from ucudnn.torch import module as ut_module
from ucudnn.torch import preparation as ut_preparation
from ucudnn.torch import steps as ut_steps
from ucudnn import _lib


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
        with mock.patch.object(F, "conv2d", side_effect=no_conv), \
                mock.patch.object(torch.ops.aten, "convolution_backward", side_effect=no_conv), \
                mock.patch.object(ut_autograd, "torch_backward", side_effect=no_conv):
            recorded = ut.kernels(model, x)
            profile = ut.memory_profile(model, x, reader=lambda: 0)
        self.assertEqual([[ut_conv.shape_key(s) for s in g] for g in recorded.values()],
                         [[ut_conv.shape_key(s) for s in g] for g in expected.values()])
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
        shapes = ut_declare.unique_shapes([s for g in ut.kernels(model, x).values() for s in g])
        fake = {"base": 0, "calls": [(ut_conv.shape_key(s), i * self.MIB, 0)
                                     for i, s in enumerate(shapes)]}
        declared = []
        real_prepare = _lib.Context.prepare
        with mock.patch.object(ut_budgets, "memory_profile", return_value=fake), \
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
            asked[ut_conv.shape_key(shape)] = limit
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
        self.assertIsNone(ut_budgets.memory_allowance((x,)), "no CUDA input: no bound")
        shapes = ut_declare.unique_shapes([s for g in ut.kernels(model, x).values() for s in g])
        fake = {"base": 0, "calls": [(ut_conv.shape_key(s), i * self.MIB, 0)
                                     for i, s in enumerate(shapes)]}
        peak = (len(shapes) - 1) * self.MIB
        cases = ((None, 32 * self.MIB), (peak + 100 * self.MIB, 32 * self.MIB),
                 (peak + 5 * self.MIB, 5 * self.MIB), (peak, 0))
        for allowance, above_peak in cases:
            with mock.patch.object(ut_budgets, "memory_profile", return_value=fake), \
                    mock.patch.object(ut_budgets, "memory_allowance", return_value=allowance):
                result = ut.prepare(model, x, budget="liveness")
            self.assertEqual(result["above_peak"], above_peak, f"allowance {allowance}")
            self.assertEqual(ut_module.runtimes_of(model)[0].kernel_limits,
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
        shapes = ut_declare.unique_shapes([s for g in ut.kernels(model, x).values() for s in g])
        base = 100 * mib
        fake = {"base": base, "calls": [(ut_conv.shape_key(s), base + i * mib, 0)
                                        for i, s in enumerate(shapes)]}
        peak = base + (len(shapes) - 1) * mib
        with mock.patch.object(ut_budgets, "memory_profile", return_value=fake), \
                mock.patch.object(ut_budgets, "memory_allowance", return_value=peak + 40 * mib):
            self.assertEqual(ut.prepare(model, x, budget="liveness")["above_peak"], 32 * mib)
        budget = model._ucudnn_step_budget
        self.assertIn(ut_budgets.check_step_budget, model._forward_pre_hooks.values())
        runtime = ut_module.runtimes_of(model)[0]
        self.assertEqual(runtime.kernel_limits, ut.liveness_limits(fake, 32 * mib))
        declared = []

        def prepare(context, group, limit):
            declared.append((len(group), limit))

        convs = list(ut_module.layer_convs(model))
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
        budget = ut_budgets.StepBudget(fake, 8 * mib, 50 * mib + 100 * mib, torch.device("cpu"))
        budget.raised = {("a",): 120 * mib}
        self.assertEqual(budget.ceiling(), 100 * mib)
        self.assertNotEqual(budget.limits()[("a",)], 120 * mib, "over the ceiling")
        budget.raised = {("a",): 90 * mib}
        self.assertEqual(budget.limits()[("a",)], 90 * mib)
        budget.shift = 20 * mib  # the job holds 20 MiB more: the ceiling is 80 MiB
        self.assertNotEqual(budget.limits()[("a",)], 90 * mib)
        # Without a bound on the process (off CUDA) what the job holds changes nothing.
        unbound = ut_budgets.StepBudget(fake, 8 * mib, None, torch.device("cpu"))
        model = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off")
        self.assertFalse(unbound.check(model, 500 * mib))
        self.assertEqual(unbound.checks_left, unbound.CHECKS - 1)

    def test_a_kernel_gets_the_workspace_of_pytorchs_faster_own(self):
        mib = self.MIB

        def info(predicted, framework, workspace, state="planned"):
            return {"state": state, "predicted_ms": predicted, "framework_ms": framework,
                    "framework_workspace_bytes": workspace}

        fit = ut_measure.framework_fit_limit
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
        shapes = ut_declare.unique_shapes([s for g in ut.kernels(model, x).values() for s in g])
        fake = {"base": 0, "calls": [(ut_conv.shape_key(s), i * self.MIB, 0)
                                     for i, s in enumerate(shapes)]}
        target = ut_conv.shape_key(shapes[1])
        wide = 300 * self.MIB  # above every liveness limit
        handles = {}
        declared = []
        real_kernel, real_prepare = _lib.Context.kernel, _lib.Context.prepare

        def kernel(context, shape, limit=0):
            handle = real_kernel(context, shape, limit)
            handles[handle] = (ut_conv.shape_key(shape), limit)
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
            with mock.patch.object(ut_budgets, "memory_profile", return_value=fake), \
                    mock.patch.object(ut_budgets, "memory_allowance", return_value=allowance), \
                    mock.patch.object(_lib.Context, "kernel", autospec=True,
                                      side_effect=kernel), \
                    mock.patch.object(_lib.Context, "kernel_info", autospec=True,
                                      side_effect=kernel_info), \
                    mock.patch.object(_lib.Context, "prepare", autospec=True,
                                      side_effect=lambda ctx, group, limit: declared.append(
                                          (limit, [ut_conv.shape_key(s) for s in group])) or
                                      real_prepare(ctx, group, limit)):
                return ut.prepare(model, x, budget="liveness", wait_ms=50,
                                  measure_framework=False, host_bound=False)

        result = prepared()
        self.assertEqual(result["framework_fitted"], 1)
        limits = ut_module.runtimes_of(model)[0].kernel_limits
        expected = ut.liveness_limits(fake, 32 * self.MIB)
        self.assertEqual(limits[target], wide)
        self.assertEqual({k: v for k, v in limits.items() if k != target},
                         {k: v for k, v in expected.items() if k != target})
        self.assertEqual(declared[-1], (wide, [target]), "asked for again at the raised limit")
        # The layers hold the kernel declared at the raised limit (prepare() decided them).
        held = {handles[k] for conv in ut_module.layer_convs(model) for k in conv.kernels if k is not None}
        self.assertIn((target, wide), held)
        self.assertNotIn(target, {key for key, limit in held if limit != wide})
        # Under a memory cap that leaves the process less than PyTorch's workspace: not raised.
        peak = (len(shapes) - 1) * self.MIB
        capped = prepared(allowance=peak + 200 * self.MIB)
        self.assertEqual(capped["framework_fitted"], 0)
        self.assertLess(ut_module.runtimes_of(model)[0].kernel_limits[target], wide)
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
        self.assertEqual(ut_budgets.auto_budget(model, (x,)), "fixed")
        self.assertEqual(ut_budgets.auto_budget(model, (x.as_subclass(OnCuda),)), "liveness")
        self.assertEqual(ut_budgets.auto_budget(total, (x.as_subclass(OnCuda),)), "fixed")
        with mock.patch.dict(os.environ, {"UCUDNN_WORKSPACE_MODE": "total_sum"}):
            self.assertEqual(ut_budgets.auto_budget(model, (x.as_subclass(OnCuda),)), "fixed",
                             "the environment's mode counts too")
        # A step whose output is no tensor cannot be profiled without loss_fn: fixed, warned.
        with mock.patch.object(ut_preparation, "auto_budget", return_value="liveness"), \
                mock.patch.object(ut_budgets, "memory_profile",
                                  side_effect=AttributeError("'dict' has no attribute 'float'")):
            with self.assertWarnsRegex(UserWarning, "could not be profiled"):
                result = ut.prepare(model, x)
        self.assertEqual(result["budget"], "fixed")


class ReleaseCachedMemoryTest(unittest.TestCase):
    def test_only_a_cache_the_passes_grew_is_emptied_after_the_cublas_workspaces(self):
        calls = []
        x = torch.randn(1, 3, 4, 4)
        reserved = [100]
        with mock.patch.object(ut_steps, "clear_cublas_workspaces",
                               lambda: calls.append("cublas")), \
                mock.patch.object(ut_steps.torch.cuda, "empty_cache",
                                  lambda: calls.append("empty_cache")), \
                mock.patch.object(ut_steps.torch.cuda, "memory_reserved",
                                  lambda device: reserved[0]):
            # CPU inputs: nothing measured, nothing to release.
            self.assertIsNone(ut_steps.reserved_memory((x,)))
            ut_steps.release_cached_memory((x,), None)
            self.assertEqual(calls, [])
            with mock.patch.object(ut_steps, "inputs_on_cuda", return_value=True):
                before = ut_steps.reserved_memory((x,))
                self.assertEqual(before, 100)
                # A route recorded native: the cache as the job had it, not emptied.
                ut_steps.release_cached_memory((x,), before)
                self.assertEqual(calls, [])
                reserved[0] = 300  # the measuring passes grew it
                ut_steps.release_cached_memory((x,), before)
                self.assertEqual(calls, ["cublas", "empty_cache"])
                calls.clear()
                # A PyTorch without the call: the cache is still emptied.
                with mock.patch.object(ut_steps, "clear_cublas_workspaces", None):
                    ut_steps.release_cached_memory((x,), before)
                self.assertEqual(calls, ["empty_cache"])


class CacheKeptTest(unittest.TestCase):
    """cache_kept() on the CPU with PyTorch's memory-pool calls stood in for."""

    def run_pass(self, reserved_once_released):
        """The events of one pass in cache_kept(): the cache holds 100 before it, 900 with the
        pass's blocks, `reserved_once_released` once its pool is gone."""
        events, reserved = [], [100]

        class Pool:  # torch.cuda.MemPool's stand-in: its blocks go (or stay) when it goes
            def __del__(self):
                events.append("pool released")
                reserved[0] = reserved_once_released

        @contextlib.contextmanager
        def use_pool(pool, device):
            events.append(("routed", type(pool).__name__))
            yield
            events.append("unrouted")

        with mock.patch.object(ut_steps, "inputs_on_cuda", return_value=True), \
                mock.patch.object(ut_steps.torch.cuda, "MemPool", Pool, create=True), \
                mock.patch.object(ut_steps.torch.cuda, "use_mem_pool", use_pool, create=True), \
                mock.patch.object(ut_steps.torch.cuda, "device",
                                  lambda device: contextlib.nullcontext()), \
                mock.patch.object(ut_steps.torch.cuda, "memory_reserved",
                                  lambda device: reserved[0]), \
                mock.patch.object(ut_steps, "clear_cublas_workspaces",
                                  lambda: events.append("cublas")), \
                mock.patch.object(ut_steps.torch.cuda, "empty_cache",
                                  lambda: events.append("empty_cache")):
            with ut_steps.cache_kept((torch.randn(2, 3),)):
                events.append("pass")
                reserved[0] = 900  # the pass's blocks, cached in its pool
        return events

    def test_the_pass_allocates_in_a_pool_given_back_with_its_cublas_workspaces(self):
        # The pool's memory went back with it: nothing else of the job's cache is touched.
        self.assertEqual(self.run_pass(reserved_once_released=100),
                         [("routed", "Pool"), "pass", "unrouted", "cublas", "pool released"])

    def test_a_pool_whose_memory_stays_empties_the_cache(self):
        self.assertEqual(self.run_pass(reserved_once_released=900),
                         [("routed", "Pool"), "pass", "unrouted", "cublas", "pool released",
                          "empty_cache"])

    def test_nothing_is_routed_without_pools_or_off_cuda(self):
        ran = []
        with ut_steps.cache_kept((torch.randn(2, 3),)):  # CPU inputs
            ran.append("cpu")
        with mock.patch.object(ut_steps, "inputs_on_cuda", return_value=True), \
                mock.patch.object(ut_steps.torch.cuda, "MemPool", None, create=True):
            with ut_steps.cache_kept((torch.randn(2, 3),)):
                ran.append("no pools")
        self.assertEqual(ran, ["cpu", "no pools"])

    def test_kernels_runs_its_pass_with_the_cache_kept(self):
        model = ut.convert(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))
        x = torch.randn(2, 3, 8, 8)
        entered = []

        @contextlib.contextmanager
        def kept(sample_inputs):
            entered.append(sample_inputs)
            yield
        with mock.patch.object(ut_declare, "cache_kept", kept):
            shapes = ut_declare.kernels(model, x)
        self.assertEqual(len(entered), 1)
        self.assertIs(entered[0][0], x)
        # The layer's forward and backward-filter (its input needs no gradient).
        self.assertEqual(sum(len(s) for s in shapes.values()), 2)


if __name__ == "__main__":
    unittest.main()
