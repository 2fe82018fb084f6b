"""ucudnn.torch against the client library's CPU backend: each layer's route: the native route,
PyTorch's own as a plan's candidate.

Run through ctest (tests/python.cmake), which sets UCUDNN_LIBRARY and the plan-cache tool's path."""

import contextlib
import copy
import os
import pickle
import tempfile
import time
import types
import unittest
from unittest import mock

import torch
from torch import nn

from support import LIMIT, TOOL, assert_same_step, closed_port, without_seconds
import ucudnn.torch as ut
from ucudnn.torch import autograd as ut_autograd
from ucudnn.torch import conv as ut_conv
from ucudnn.torch import declare as ut_declare
from ucudnn.torch import measure as ut_measure
from ucudnn.torch import module as ut_module
from ucudnn.torch import routing as ut_routing
from ucudnn import _lib

import torch_adapter  # noqa: E402  (bench/torch_adapter.py: the plan cache helper)


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
        with mock.patch.object(ut_conv.LayerConv, "run", autospec=True,
                               side_effect=AssertionError("asked the library")):
            assert_same_step(self, model, reference, x)  # routed: the library is not called
            self.assertEqual(ut.stats(model)["fallback_calls"], calls + 3, "still counted")
            # Every op routed: the layer's next calls are nn.Conv2d's own till the recheck.
            self.assertIs(type(model), ut_module.NativeRoutedConv2d)
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
        shapes = ut_declare.unique_shapes([s for g in ut.kernels(model, x).values() for s in g])
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
        with mock.patch.object(ut_autograd.ConvFunction, "apply",
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
                                  "route": None, "compiled": False, "cudnn_benchmark": False})
        self.assertEqual(len(model[0]._ucudnn_runtime.local_framework), count)
        assert_same_step(self, model, reference, x)
        stats = ut.stats(model)
        self.assertEqual(stats["planned_calls"], 0, stats)
        # The 5 kernels, and layer 1's backward-data (step()'s input needs a gradient): the
        # layer is PyTorch's own whole.
        self.assertEqual(stats["framework_calls"], count + 1, stats)

    def test_nothing_is_timed_while_plans_are_missing(self):
        # The server answers "missing" (a worker benchmarks the problems, maybe on this device)
        # until wait_ms: PyTorch's times taken then would be this process's alone, and every job
        # of a new model would pay them again, so none are taken.
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
        self.assertEqual(result["measured"], 0)
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
                                          {"host_bound": bound}, "route": None,
                                          "compiled": False, "cudnn_benchmark": False})
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
        self.assertEqual([type(model[0]), type(model[2])], [ut_module.NativeRoutedConv2d] * 2)
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
        runtime = model[0]._ucudnn_runtime
        runtime.clock = lambda: float("inf")  # the layers' rechecks are all due
        try:
            with mock.patch.object(ut.UcudnnConv2d, "_ucudnn_conv_of", autospec=True,
                                   side_effect=lambda *a: looked_up.append(a[0]) or
                                   real_conv_of(*a)):
                assert_same_step(self, model, reference, x)
        finally:
            runtime.clock = time.monotonic
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
        with mock.patch.object(ut_measure, "shape_key", side_effect=lambda shape: shape[0]):
            ut_measure.decide_locally(runtime, Context(), measured)
            self.assertEqual(runtime.local_framework, {"more", "slower"})
            runtime.local_framework.clear()
            runtime.framework_benchmarks = False  # ties to PyTorch: only the outright win
            ut_measure.decide_locally(runtime, Context(), measured)
            self.assertEqual(runtime.local_framework, {"tie", "more", "slower"})

    def test_the_tie_rule_mirrors_the_planners(self):
        self.assertTrue(ut.framework_benchmarks("torch-2.11.0+cu130/benchmark"))
        self.assertTrue(ut.framework_benchmarks("torch-2.11.0+cu130/benchmark-deterministic"))
        self.assertFalse(ut.framework_benchmarks("torch-2.11.0+cu130/heuristic"))
        self.assertFalse(ut.framework_benchmarks("benchmark"))
        self.assertFalse(ut.framework_benchmarks(""))
        # 3% either way: ucudnn's 4.0 against PyTorch's 4.1 and 3.9 (cf. the planner's tests).
        self.assertFalse(ut_routing.beats_framework(4.0, 4.1))
        self.assertTrue(ut_routing.beats_framework(4.0, 4.2))
        self.assertTrue(ut_routing.beats_framework(4.0, 4.1, True))
        self.assertTrue(ut_routing.beats_framework(4.0, 3.9, True))
        self.assertFalse(ut_routing.beats_framework(4.0, 3.85, True))
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


if __name__ == "__main__":
    unittest.main()
