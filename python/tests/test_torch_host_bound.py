"""ucudnn.torch against the client library's CPU backend: host-bound steps and the answers kept on
the machine (host_bound_search='heuristics').

Run through ctest (tests/python.cmake), which sets UCUDNN_LIBRARY and the plan-cache tool's path."""

import contextlib
import json
import os
import tempfile
import time
import unittest
from unittest import mock

import torch
from torch import nn

import ucudnn.torch as ut
from ucudnn.torch import handle as ut_handle
from ucudnn.torch import host_bound as ut_host_bound


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
                mock.patch.object(ut_host_bound, "step_is_host_bound", side_effect=measure):
            path = os.path.join(directory, "nested", "host_bound.json")
            with mock.patch.dict(os.environ, {"UCUDNN_HOST_BOUND_CACHE": path}):
                first = ut_host_bound.host_bound_answer(model, (x,), None)
                again = ut_host_bound.host_bound_answer(model, (x,), None)
                # The next measure would say False: the remembered True stands.
                self.assertEqual(len(measured), 1)
                self.assertTrue(first["host_bound"])
                self.assertNotIn("remembered", first)
                self.assertEqual(again, dict(first, remembered=True))
                # Another step (inputs, loss) is measured anew.
                other = ut_host_bound.host_bound_answer(model, (torch.randn(4, 3, 8, 8),), None)
                self.assertEqual((len(measured), other["host_bound"]), (2, False))
                ut_host_bound.host_bound_answer(model, (x,), lambda y: y.square().sum())
                self.assertEqual(len(measured), 3)
                # In a job, rank 0's record decides: its False reaches a rank that has True.
                with self._rank0_has(0):
                    ranked = ut_host_bound.host_bound_answer(model, (x,), None)
                self.assertEqual(len(measured), 3)
                self.assertFalse(ranked["host_bound"])
                # A damaged file is no record: measured again, and the file rewritten.
                with open(path, "w") as f:
                    f.write("{not json")
                ut_host_bound.host_bound_answer(model, (x,), None)
                self.assertEqual(len(measured), 4)
                with open(path) as f:
                    self.assertEqual(len(json.load(f)), 1)
                # A record older than HOST_BOUND_RECORD_DAYS is measured again and replaced.
                later = time.time() + ut.HOST_BOUND_RECORD_DAYS * 86400 + 60
                with mock.patch.object(time, "time", return_value=later):
                    self.assertTrue(ut_host_bound.host_bound_answer(model, (x,), None)["host_bound"])
                    self.assertEqual(len(measured), 5)
                    self.assertTrue(ut_host_bound.host_bound_answer(model, (x,), None)["remembered"])
                self.assertEqual(len(measured), 5)
            # Off: nothing read or written.
            with mock.patch.dict(os.environ, {"UCUDNN_HOST_BOUND_CACHE": "off"}):
                self.assertIsNone(ut_host_bound.host_bound_records_path())
                ut_host_bound.host_bound_answer(model, (x,), None)
                ut_host_bound.host_bound_answer(model, (x,), None)
                self.assertEqual(len(measured), 7)

    def test_a_memory_bound_answer_is_not_remembered(self):
        model = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off")
        x = torch.randn(2, 3, 8, 8)
        synced = {"host_bound": False, "host_ms": 1.0, "step_ms": 2.0, "allocator_syncs": 3}
        with tempfile.TemporaryDirectory() as directory, \
                mock.patch.object(ut_host_bound, "step_is_host_bound", return_value=synced) as measure, \
                mock.patch.dict(os.environ, {"UCUDNN_HOST_BOUND_CACHE":
                                             os.path.join(directory, "h.json")}):
            ut_host_bound.host_bound_answer(model, (x,), None)
            ut_host_bound.host_bound_answer(model, (x,), None)
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
                _benchmark_kept(), mock.patch.object(ut_host_bound, "step_is_host_bound") as measure:
            for bound in answers:
                bound, step_ms = bound if isinstance(bound, tuple) else (bound, 2.0)
                ut_handle.restore_framework_search()  # the job before ended
                torch.backends.cudnn.benchmark = True
                measure.reset_mock()
                measure.return_value = {"host_bound": bound, "host_ms": 1.0, "step_ms": step_ms,
                                        "allocator_syncs": 0}
                answer = ut_host_bound.host_bound_answer(model, (x,), None, search)
                self.assertEqual(measure.call_count, 0 if bound is None else 1, answer)
                with open(os.path.join(directory, "h.json")) as f:
                    record, = json.load(f).values()
                got.append((answer["host_bound"], torch.backends.cudnn.benchmark,
                            record.get("framework_search")))
            ut_handle.restore_framework_search()
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
        self.assertEqual(ut_host_bound.host_bound_code({"host_bound": True}), ut_host_bound.HOST_BOUND_UNCHECKED)
        self.assertEqual(ut_host_bound.host_bound_code({"host_bound": False}), ut_host_bound.HOST_BOUND_NO)
        self.assertEqual(ut_host_bound.host_bound_code(None), ut_host_bound.HOST_BOUND_NONE)

    def test_prepare_and_unconvert_give_the_benchmark_back(self):
        model = ut.convert(nn.Conv2d(3, 4, 3), server="", cache_path="off")
        x = torch.randn(2, 3, 8, 8)
        with _benchmark_kept():
            torch.backends.cudnn.benchmark = True
            ut_handle.turn_off_framework_search()
            self.assertFalse(torch.backends.cudnn.benchmark)
            got = ut.prepare(model, x)  # on the CPU: nothing measured, nothing turned off
            self.assertTrue(torch.backends.cudnn.benchmark)
            self.assertTrue(got["cudnn_benchmark"])
            ut_handle.turn_off_framework_search()
            ut.unconvert(model)
            self.assertTrue(torch.backends.cudnn.benchmark)
        with self.assertRaisesRegex(ValueError, "host_bound_search must be one of"):
            ut.prepare(model, x, host_bound_search="fast")

    def test_the_records_live_in_the_users_cache(self):
        environ = {k: v for k, v in os.environ.items()
                   if k not in ("UCUDNN_HOST_BOUND_CACHE", "XDG_CACHE_HOME")}
        with mock.patch.dict(os.environ, dict(environ, XDG_CACHE_HOME="/x/cache"), clear=True):
            self.assertEqual(ut_host_bound.host_bound_records_path(), "/x/cache/ucudnn/host_bound.json")
        with mock.patch.dict(os.environ, dict(environ, HOME="/home/u"), clear=True):
            self.assertEqual(ut_host_bound.host_bound_records_path(),
                             "/home/u/.cache/ucudnn/host_bound.json")

    def test_ranks_plan_with_rank_0s_figures(self):
        self.assertEqual(ut_handle.rank0s(5, torch.device("cpu")), 5, "no job: its own")
        with self._rank0_has(1 << 30):
            self.assertEqual(ut_handle.rank0s(5, torch.device("cpu")), 1 << 30)


@contextlib.contextmanager
def _benchmark_kept():
    """torch.backends.cudnn.benchmark as it was after the block (a module property mock.patch
    cannot delete)."""
    before = torch.backends.cudnn.benchmark
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


if __name__ == "__main__":
    unittest.main()
