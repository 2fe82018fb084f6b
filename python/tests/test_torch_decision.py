"""ucudnn.torch.decision: the one route per step, from measurements compared with their noise,
kept on the machine (issue 37). Pure logic and the record file; no library, no device."""

import json
import os
import tempfile
import unittest
import warnings
from unittest import mock

from support import planned  # (python/ and bench/ on the path)
from ucudnn.torch import decision, records


class ChooseTest(unittest.TestCase):
    def test_plans_faster_beyond_the_noise_are_kept(self):
        route, why = decision.choose([40.0, 40.3, 40.1], [44.0, 44.2, 43.9])
        self.assertEqual(route, decision.PLANS)
        self.assertIn("beyond the noise", why)
        self.assertIn("40.10", why)  # the plans' median, in the reason
        self.assertIn("44.00", why)

    def test_a_gain_within_the_noise_keeps_pytorchs_own(self):
        # Median gain 1.0 ms, but the rounds move by 1.5 and 1.0 ms: chance could give it.
        route, why = decision.choose([40.0, 41.5, 40.5], [41.5, 42.0, 41.0])
        self.assertEqual(route, decision.NATIVE)
        self.assertIn("within the noise", why)

    def test_a_gain_under_the_minimum_share_keeps_pytorchs_own(self):
        # 0.3 ms of 50 (0.6%) with no noise at all: no user would see it.
        route, _ = decision.choose([49.7, 49.7, 49.7], [50.0, 50.0, 50.0])
        self.assertEqual(route, decision.NATIVE)
        route, _ = decision.choose([49.7, 49.7, 49.7], [50.0, 50.0, 50.0], min_gain=0.001)
        self.assertEqual(route, decision.PLANS)

    def test_slower_plans_are_never_taken(self):
        route, why = decision.choose([50.0, 50.0, 50.0], [40.0, 40.0, 40.0])
        self.assertEqual(route, decision.NATIVE)
        self.assertIn("as fast or faster", why)

    def test_a_tie_goes_to_pytorchs_own(self):
        self.assertEqual(decision.choose([40.0], [40.0])[0], decision.NATIVE)

    def test_both_sides_must_be_measured(self):
        with self.assertRaises(ValueError):
            decision.choose([], [40.0])
        with self.assertRaises(ValueError):
            decision.choose([40.0], [])

    def test_noise_is_the_spread_of_the_round_medians(self):
        self.assertEqual(decision.noise_ms([3.0, 1.0, 2.0]), 2.0)
        self.assertEqual(decision.noise_ms([5.0]), 0.0)

    def test_plans_slower_beyond_the_noise_after_two_rounds_settle_it(self):
        self.assertFalse(decision.settled([50.0], [40.0]))  # one order of the sides only
        self.assertTrue(decision.settled([50.0, 50.5], [40.0, 40.2]))
        # Slower, but within the noise: a third round could still tell otherwise.
        self.assertFalse(decision.settled([42.0, 48.0], [40.0, 44.0]))
        # Faster: only choose() may keep the plans, after every round.
        self.assertFalse(decision.settled([40.0, 40.1], [50.0, 50.2]))


class MeasureRoundsTest(unittest.TestCase):
    """route.measure_rounds with the steps stood in for: each side's step takes a fixed time."""

    def measure(self, plans_ms, native_ms):
        from ucudnn.torch import route

        clock, side, steps = [0.0], [None], []

        def set_routes(model, layer_routes):
            side[0] = "native" if all(r == "framework" for r in layer_routes) else "plans"

        def training_pass(model, sample_inputs, loss_fn):
            steps.append(side[0])
            clock[0] += (plans_ms if side[0] == "plans" else native_ms) / 1e3

        with mock.patch.object(route, "set_routes", set_routes), \
                mock.patch.object(route, "training_pass", training_pass), \
                mock.patch.object(route, "inputs_device", return_value=mock.Mock(type="cpu")), \
                mock.patch.object(route.time, "perf_counter", lambda: clock[0]):
            plans, native = route.measure_rounds(mock.MagicMock(), (), None, ["plan"])
        return plans, native, steps

    def test_plans_that_lost_beyond_the_noise_stop_the_rounds(self):
        plans, native, steps = self.measure(plans_ms=48.0, native_ms=43.0)
        self.assertEqual((len(plans), len(native)), (2, 2))
        self.assertEqual(len(steps), 2 * (1 + 2 * decision.STEPS_PER_ROUND))
        self.assertEqual(decision.choose(plans, native)[0], decision.NATIVE)

    def test_plans_that_could_win_take_every_round(self):
        plans, native, steps = self.measure(plans_ms=40.0, native_ms=43.0)
        self.assertEqual((len(plans), len(native)), (decision.ROUNDS, decision.ROUNDS))
        self.assertEqual(len(steps), 2 * (1 + decision.ROUNDS * decision.STEPS_PER_ROUND))


class RecordTest(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.directory.name, "sub", "routes.json")

    def tearDown(self):
        self.directory.cleanup()

    def test_a_written_record_is_read_back_and_applies(self):
        record = decision.make_record(decision.PLANS, "why", ["plan", "framework"], [1.0],
                                      [2.0], now=1000.0)
        self.assertTrue(decision.write_record(self.path, "k", record))
        read = records.read_records(self.path)["k"]
        self.assertEqual(read, record)
        self.assertTrue(decision.valid(read, now=1000.0 + 3600))

    def test_an_old_or_malformed_record_does_not_apply(self):
        record = decision.make_record(decision.NATIVE, "why", [], [1.0], [1.0], now=0.0)
        self.assertFalse(decision.valid(record, now=decision.RECORD_DAYS * 86400 + 1.0))
        self.assertTrue(decision.valid(record, now=decision.RECORD_DAYS * 86400 - 1.0))
        for broken in (None, [], {"route": "plans"}, dict(record, route="sometimes"),
                       dict(record, version=0), dict(record, layers="plan")):
            self.assertFalse(decision.valid(broken, now=1.0), broken)

    def test_a_file_that_is_not_ours_reads_as_no_records(self):
        os.makedirs(os.path.dirname(self.path))
        for text in ("not json", "[1, 2]"):
            with open(self.path, "w") as f:
                f.write(text)
            self.assertEqual(records.read_records(self.path), {})
        self.assertEqual(records.read_records(self.path + ".missing"), {})

    def test_only_the_newest_records_are_kept(self):
        for i in range(decision.RECORDS + 5):
            decision.write_record(self.path, f"k{i}", decision.make_record(
                decision.NATIVE, "", [], [1.0], [1.0], now=float(i)))
        kept = records.read_records(self.path)
        self.assertEqual(len(kept), decision.RECORDS)
        self.assertNotIn("k0", kept)
        self.assertIn(f"k{decision.RECORDS + 4}", kept)

    def test_an_unwritable_place_is_a_warning_not_an_error(self):
        blocker = os.path.join(self.directory.name, "file")
        with open(blocker, "w") as f:
            f.write("")

        class Log:
            messages = []

            def warning(self, *args):
                self.messages.append(args[0] % args[1:])

        log = Log()
        record = decision.make_record(decision.NATIVE, "", [], [1.0], [1.0])
        self.assertFalse(decision.write_record(os.path.join(blocker, "routes.json"), "k",
                                               record, log))
        self.assertIn("cannot keep the route decision", log.messages[0])

    def test_keys_differ_with_what_the_step_depends_on(self):
        base = ["host", "H200", "2.11", "model", "(256, 3, 224, 224)", "bf16"]
        key = decision.step_key(base)
        self.assertEqual(key, decision.step_key(list(base)))
        for i in range(len(base)):
            changed = list(base)
            changed[i] += "x"
            self.assertNotEqual(decision.step_key(changed), key)
        self.assertEqual(len(json.dumps(key)), 66)  # sha256 hex, quoted


if __name__ == "__main__":
    unittest.main()


class PrepareRouteTest(unittest.TestCase):
    """prepare()'s route for the step on the CPU backend (route="measure": the rounds run here as
    on CUDA), kept on the machine and applied alike by every later job."""

    def setUp(self):
        import torch
        from torch import nn

        self.torch, self.nn = torch, nn
        self.directory = tempfile.TemporaryDirectory()
        self.records = os.path.join(self.directory.name, "routes.json")
        self.environ = mock.patch.dict(os.environ, {"UCUDNN_ROUTE_CACHE": self.records})
        self.environ.start()

    def tearDown(self):
        self.environ.stop()
        self.directory.cleanup()

    def job(self, seed=0):
        """A new job's model (the same architecture and input), converted with micro-batched
        plans for every kernel, and its input."""
        torch, nn = self.torch, self.nn
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                              nn.Conv2d(8, 8, 3, padding=1))
        x = torch.randn(4, 3, 16, 16)
        planned(model, x, self.directory.name)
        return model, x

    def test_the_first_job_measures_and_every_later_job_takes_its_route(self):
        import ucudnn.torch as ut

        model, x = self.job()
        first = ut.prepare(model, x, route="measure")["route"]
        self.assertEqual(first["source"], "measured")
        # The plans' side ran its plans in every round, not only in its warm-up step (a layer
        # the native side had put on the native route comes back to the adapter's).
        record = next(iter(records.read_records(self.records).values()))
        # Every round, or two where the plans already lost beyond the noise (decision.settled).
        rounds = len(record["plans_ms"])
        self.assertEqual(len(record["native_ms"]), rounds)
        self.assertTrue(rounds == decision.ROUNDS or (
            rounds == 2 and decision.settled(record["plans_ms"], record["native_ms"])), record)
        rounds_steps = rounds * decision.STEPS_PER_ROUND
        self.assertGreaterEqual(ut.stats(model)["planned_calls"], 2 * (rounds_steps + 1))
        self.assertIn(first["route"], (decision.PLANS, decision.NATIVE))
        self.assertIn(f"over {rounds} rounds", first["why"])
        self.assertEqual(len(first["layers"]), 2)
        self.assertEqual((record["route"], record["layers"]), (first["route"], first["layers"]))
        for seed in (1, 2):  # later jobs: other weights, same step
            again, x = self.job(seed)
            answer = ut.prepare(again, x, route="measure")["route"]
            self.assertEqual(answer["source"], "recorded")
            self.assertEqual((answer["route"], answer["layers"], answer["why"]),
                             (first["route"], first["layers"], first["why"]))
            stats = ut.stats(again)
            self.assertEqual(stats["route"], {"route": first["route"], "source": "recorded",
                                              "why": first["why"]})
            again(x).sum().backward()
            routes = ut.routes(again)
            self.assertEqual(len(routes), 2)
            expected = ["framework"] * 2 if first["route"] == decision.NATIVE else [
                "framework" if r == "framework" else "plan" for r in first["layers"]]
            self.assertEqual([r["route"] for r in routes], expected)
            self.assertTrue(all(first["route"] in r["why"] for r in routes), routes)

    def test_a_memory_cap_gets_a_record_of_its_own(self):
        # Under a cap PyTorch's own may lose its fast, large-workspace algorithms while plans
        # micro-batch to fit (issue 39): the uncapped job's answer must not be reused.
        from ucudnn.torch import route as step_route

        torch = self.torch
        model, x = self.job()
        uncapped = step_route.step_key(model, (x,), None)
        with mock.patch.object(step_route, "memory_cap", return_value=0.5):
            self.assertNotEqual(step_route.step_key(model, (x,), None), uncapped)
        self.assertEqual(step_route.step_key(model, (x,), None), uncapped)
        cuda = torch.device("cuda", 0)
        for fraction, expected in ((0.25, 0.25), (0.66666, 0.667), (1.0, None)):
            with mock.patch.object(torch.cuda, "get_per_process_memory_fraction",
                                   return_value=fraction, create=True):
                self.assertEqual(step_route.memory_cap(cuda), expected)
                self.assertIsNone(step_route.memory_cap(torch.device("cpu")))

    def test_a_recorded_native_route_runs_pytorchs_own_everywhere(self):
        import ucudnn.torch as ut
        from ucudnn.torch import route as step_route

        model, x = self.job()
        key = step_route.step_key(model, (x,), None)
        decision.write_record(self.records, key, decision.make_record(
            decision.NATIVE, "measured slower here", ["plan", "plan"], [2.0], [1.0]))
        answer = ut.prepare(model, x)["route"]  # "auto": a record applies on any device
        self.assertEqual((answer["route"], answer["source"]), (decision.NATIVE, "recorded"))
        before = ut.stats(model)["planned_calls"]
        reference = self.nn.Sequential(*[m for m in model])  # the same layers
        y = model(x)
        y.sum().backward()
        self.assertEqual(ut.stats(model)["planned_calls"], before)  # no plan ran
        self.assertEqual(ut.stats(model)["layer_routes"], {"plan": 0, "framework": 2,
                                                           "undecided": 0})
        self.assertTrue(self.torch.equal(y, reference(x)))

    def test_a_recorded_native_route_profiles_no_budget(self):
        import ucudnn.torch as ut
        from ucudnn.torch import preparation
        from ucudnn.torch import route as step_route

        # Where "auto" budgets are liveness (CUDA), a step with no record is profiled; one this
        # machine recorded native is not (no plan of it runs): fixed limits, no profiling pass.
        profiled = []

        def liveness(model, sample_inputs, above_peak, loss_fn):
            profiled.append(model)
            raise TypeError("profiled (a stand-in: the CPU has no liveness budgets)")

        with mock.patch.object(preparation, "auto_budget", return_value="liveness"), \
                mock.patch.object(preparation, "liveness_budgets", side_effect=liveness), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, x = self.job()
            self.assertEqual(ut.prepare(model, x)["budget"], "fixed")  # fell back after it
            self.assertEqual(len(profiled), 1)
            key = step_route.step_key(model, (x,), None)
            decision.write_record(self.records, key, decision.make_record(
                decision.NATIVE, "measured slower here", ["plan", "plan"], [2.0], [1.0]))
            again, x = self.job(1)
            answer = ut.prepare(again, x)
        self.assertEqual((answer["route"]["route"], answer["route"]["source"]),
                         (decision.NATIVE, "recorded"))
        self.assertEqual(answer["budget"], "fixed")
        self.assertEqual(len(profiled), 1, "a step recorded native was profiled for budgets")

    def test_a_recorded_native_route_waits_for_no_plan(self):
        import socket
        import time
        import ucudnn.torch as ut
        from torch import nn
        from ucudnn.torch import route as step_route

        # A planner that never answers (it takes connections and says nothing): prepare() waits
        # its wait_ms for the plans, unless the step was recorded native on this machine, whose
        # job runs PyTorch's own whatever arrives.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        self.addCleanup(silent.close)
        server = f"127.0.0.1:{silent.getsockname()[1]}"
        x = self.torch.randn(2, 3, 8, 8)

        def converted():
            self.torch.manual_seed(0)
            model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 1))
            return ut.convert(model, server=server, cache_path="off")

        def prepare_seconds(model):
            started = time.perf_counter()
            answer = ut.prepare(model, x, wait_ms=1500, measure_framework=False)
            return time.perf_counter() - started, answer

        waited, _ = prepare_seconds(converted())
        self.assertGreaterEqual(waited, 1.4, "the silent planner was not waited for")
        model = converted()
        ut.kernels(model, x)  # the layers' ops, for the record's layer count
        key = step_route.step_key(model, (x,), None)
        decision.write_record(self.records, key, decision.make_record(
            decision.NATIVE, "measured slower here", ["plan", "plan"], [2.0], [1.0]))
        waited, answer = prepare_seconds(model)
        self.assertLess(waited, 1.0, "waited for plans a native step will not run")
        self.assertEqual((answer["route"]["route"], answer["route"]["source"]),
                         (decision.NATIVE, "recorded"))

    def test_a_pending_step_is_decided_by_its_training_forwards(self):
        import ucudnn.torch as ut
        from ucudnn.torch import pending
        from ucudnn.torch.declare import unique_shapes

        # The step's plans are in (a plan cache); its route is left pending, as prepare() leaves
        # a step whose plans were still coming (the e2e PythonJobTest makes them come late).
        model, x = self.job()
        step = [(runtime, device, unique_shapes(shapes))
                for (runtime, device), shapes in ut.kernels(model, x).items()]
        pending.wait_for_route(model, step, (x,), None, wait_ms=0, measure_framework=False)
        self.assertIsNone(ut.stats(model)["route"])

        def forwards(count, inputs, train=True, grad=True):
            model.train(train)
            with self.torch.set_grad_enabled(grad):
                for _ in range(count):
                    model(inputs)
            model.train(True)

        # Not a training step of the prepared inputs: never decided there, never counted.
        forwards(pending.CHECK_EVERY, x, train=False)
        forwards(pending.CHECK_EVERY, x, grad=False)
        forwards(pending.CHECK_EVERY - 1, self.torch.randn(2, 3, 16, 16))
        self.assertIsNone(ut.stats(model)["route"])
        self.assertEqual(records.read_records(self.records), {})
        # In a torch.distributed job where another rank still waits for a plan (the all-reduce's
        # minimum is 0), no rank decides.
        torch = self.torch
        reduced = []
        with mock.patch.object(torch.distributed, "is_available", return_value=True), \
                mock.patch.object(torch.distributed, "is_initialized", return_value=True), \
                mock.patch.object(torch.distributed, "all_reduce",
                                  side_effect=lambda t, op: reduced.append(op) or t.fill_(0)):
            forwards(pending.CHECK_EVERY, x)
        self.assertEqual(reduced, [torch.distributed.ReduceOp.MIN])
        self.assertIsNone(ut.stats(model)["route"])
        # The prepared inputs' training forwards: decided at the CHECK_EVERY-th, measured and
        # recorded, then applied before that forward ran.
        forwards(pending.CHECK_EVERY - 1, x)
        self.assertIsNone(ut.stats(model)["route"])
        forwards(1, x)
        route = ut.stats(model)["route"]
        self.assertEqual(route["source"], "measured")
        self.assertEqual(len(records.read_records(self.records)), 1)
        # Every round, or two where the plans already lost beyond the noise (decision.settled).
        record = next(iter(records.read_records(self.records).values()))
        rounds = len(record["plans_ms"])
        self.assertTrue(rounds == decision.ROUNDS or (
            rounds == 2 and decision.settled(record["plans_ms"], record["native_ms"])), record)
        self.assertIn(f"over {rounds} rounds", route["why"])
        self.assertNotIn("_ucudnn_pending_route", model.__dict__)
        # A copy or a pickle of a pending model leaves the pending state behind.
        pending.wait_for_route(model, step, (x,), None, wait_ms=0, measure_framework=False)
        import copy
        self.assertIsNone(copy.deepcopy(model).__dict__.get("_ucudnn_pending_route"))

    def test_without_a_record_or_measurement_each_layer_keeps_its_rule(self):
        import ucudnn.torch as ut

        model, x = self.job()
        self.assertIsNone(ut.prepare(model, x)["route"])  # CPU, wait_ms=0: nothing measured
        self.assertEqual(records.read_records(self.records), {})
        self.assertIsNone(ut.prepare(model, x, route="rule")["route"])
        with self.assertRaisesRegex(ValueError, "route must be one of auto, measure, rule"):
            ut.prepare(model, x, route="sometimes")
