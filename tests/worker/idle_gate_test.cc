// The idle gate (worker/idle_gate.h) and the benchmark's use of it (measurement_gate.h): its pure
// decisions, and a benchmark on the CPU backend whose gate is fed by a scripted probe: the device
// turns busy mid-table, the benchmark pauses without running anything, resumes where it stopped,
// and measures each configuration exactly once; disturbed measurements are taken again, and stored
// as contended (never a time the planner uses) when they stay so. No GPU, no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ucudnn/core/dp.h"
#include "ucudnn/engine/benchmark.h"
#include "ucudnn/worker/idle_gate.h"
#include "worker/worker_test_util.h"

namespace ucudnn::worker {
namespace {

using namespace ucudnn::worker::testing;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

constexpr uint32_t kSelf = 1000;
constexpr uint32_t kTrainer = 2000;

GpuActivitySample Idle() { return {{kSelf}, 0, {}}; }
GpuActivitySample Busy() { return {{kSelf, kTrainer}, 90, {kSelf, kTrainer}}; }
// A training job that holds a context but runs nothing (waiting in prepare() for the plans the
// worker is to measure): no contention.
GpuActivitySample IdleHolder() { return {{kSelf, kTrainer}, 0, {}}; }

// Answers the scripted samples in order, then `rest` forever; remembers whether the last answer
// showed another process (what the device is doing "now").
class ScriptedProbe : public GpuActivityProbe {
 public:
  ScriptedProbe(std::deque<GpuActivitySample> script, GpuActivitySample rest)
      : script_(std::move(script)), rest_(std::move(rest)) {}
  std::string_view name() const override { return "scripted"; }
  Result<GpuActivitySample> Sample() override {
    ++samples_;
    GpuActivitySample s = rest_;
    if (!script_.empty()) {
      s = script_.front();
      script_.pop_front();
    }
    busy_now_ = OtherProcesses(s.busy_pids, kSelf, true) > 0;
    return s;
  }
  bool busy_now() const { return busy_now_; }
  int samples() const { return samples_; }

 private:
  std::deque<GpuActivitySample> script_;
  GpuActivitySample rest_;
  bool busy_now_ = false;
  int samples_ = 0;
};

// The CPU backend, recording every timed call and failing the test if one is issued while the
// probe last saw another process on the device.
class RecordingBackend : public RenamedCpuBackend {
 public:
  explicit RecordingBackend(const ScriptedProbe* probe)
      : RenamedCpuBackend("gated cpu"), probe_(probe) {}
  Result<std::vector<double>> TimeRunGroups(const ConvProblem& p, int64_t batch,
                                            const Algorithm& algo, const ConvOperands& operands,
                                            void* workspace, size_t workspace_bytes, int warmup,
                                            int samples, int group,
                                            bool device_time_only) override {
    EXPECT_FALSE(probe_->busy_now()) << "ran micro-batch " << batch << " while the GPU was busy";
    ++calls_[{batch, algo.id}];
    return RenamedCpuBackend::TimeRunGroups(p, batch, algo, operands, workspace, workspace_bytes,
                                            warmup, samples, group, device_time_only);
  }
  const std::map<std::pair<int64_t, int>, int>& calls() const { return calls_; }

 private:
  const ScriptedProbe* probe_;
  std::map<std::pair<int64_t, int>, int> calls_;
};

IdleGateConfig TestConfig() {
  IdleGateConfig c;
  c.self_pid = kSelf;
  c.self_has_context = true;
  c.max_utilization_percent = 10;
  c.poll = std::chrono::milliseconds(1);
  c.sample_interval = std::chrono::milliseconds(0);
  c.resume_quiet_looks = 1;  // the tests below that count looks to resume set their own
  return c;
}

// One timed call per configuration (no probe pass): the calls count measurements.
BenchmarkOptions OneCallPerConfiguration() {
  BenchmarkOptions o = FastBenchmarkOptions();
  o.short_run_ms = 0;
  o.config_time_budget_ms = 60'000;
  return o;
}

// A benchmark of TinyProblem(fwd, 4) up to `max_micro_batch` whose gate answers `script`, then
// idle; the table, how many pauses the gate made, and the timed calls per configuration.
struct GatedRun {
  Result<TimingTable> table = TimingTable{};
  int64_t pauses = 0;
  std::map<std::pair<int64_t, int>, int> calls;
};
GatedRun RunGated(std::deque<GpuActivitySample> script, int64_t max_micro_batch,
                  BatchPolicy policy) {
  auto probe = std::make_unique<ScriptedProbe>(std::move(script), Idle());
  RecordingBackend backend(probe.get());
  IdleGate gate(std::move(probe), TestConfig());
  BenchmarkOptions options = OneCallPerConfiguration();
  options.gate = &gate;
  GatedRun run;
  run.table =
      BenchmarkProblem(backend, TinyProblem(ConvOp::kForward, 4), max_micro_batch, policy, options);
  run.pauses = gate.pauses();
  run.calls = backend.calls();
  return run;
}

TEST(IdleGateLogicTest, OtherProcessesLeaveOutTheWorkerItself) {
  EXPECT_EQ(OtherProcesses({}, kSelf, true), 0);
  EXPECT_EQ(OtherProcesses({kSelf}, kSelf, true), 0);
  EXPECT_EQ(OtherProcesses({kSelf, kTrainer}, kSelf, true), 1);
  EXPECT_EQ(OtherProcesses({kTrainer}, kSelf, false), 1);
  // In a container NVML lists host pids: the worker's context is one of them, not its own pid.
  EXPECT_EQ(OtherProcesses({4242}, kSelf, true), 0);
  EXPECT_EQ(OtherProcesses({4242, 4343}, kSelf, true), 1);
}

TEST(IdleGateLogicTest, ClaimsOnlyWithoutOthersAndUnderTheUtilizationThreshold) {
  const IdleGateConfig c = TestConfig();
  EXPECT_TRUE(IdleForClaim({Idle(), Idle(), Idle()}, c, true));
  EXPECT_FALSE(IdleForClaim({Idle(), Busy(), Idle()}, c, true));
  // A process that holds a context and runs nothing does not stop a claim (a job waiting for
  // these very plans would otherwise wait for ever); one that runs does, in a container too
  // (host pids: the trainer's is not the worker's own, which ran nothing for a while).
  EXPECT_TRUE(IdleForClaim({IdleHolder(), IdleHolder(), IdleHolder()}, c, true));
  EXPECT_FALSE(IdleForClaim({{{4242, 4343}, 5, {4343}}}, c, true));
  EXPECT_TRUE(IdleForClaim({{{4242, 4343}, 5, {}}}, c, true));
  // No other process listed, yet the GPU is used (e.g. a job in another container NVML cannot
  // attribute): the mean utilization over the window decides.
  EXPECT_FALSE(IdleForClaim({{{kSelf}, 60, {}}, {{kSelf}, 40, {}}, {{kSelf}, 50, {}}}, c, true));
  EXPECT_TRUE(
      IdleForClaim({{{kSelf}, 0, {}}, {{kSelf}, 30, {}}, {{kSelf}, 0, {}}}, c, true));  // mean 10
  EXPECT_TRUE(IdleForClaim({{{kSelf}, -1, {}}}, c, true));  // unknown: not busy
  // Right after our own job the utilization is ours: only the processes decide.
  EXPECT_TRUE(IdleForClaim({{{kSelf}, 95, {}}}, c, false));
  EXPECT_FALSE(IdleForClaim({Busy()}, c, false));
}

TEST(IdleGateLogicTest, ContentionBySpreadNeedsEnoughSamplesAndByOthersAlways) {
  DeviceActivity idle;
  idle.known = true;
  DeviceActivity busy = idle;
  busy.other_processes = 1;
  EXPECT_TRUE(Contended(busy, 0.0, 1, kContendedRelativeSpread));
  EXPECT_FALSE(Contended(idle, 0.02, 10, kContendedRelativeSpread));
  EXPECT_TRUE(Contended(idle, 0.40, 10, kContendedRelativeSpread));
  EXPECT_FALSE(Contended(idle, 0.40, 3, kContendedRelativeSpread));  // no IQR worth judging
  EXPECT_FALSE(Contended(idle, 0.40, 10, 0));                        // spread not judged
  EXPECT_FALSE(Contended(DeviceActivity{}, 0.0, 1, 0));              // probe blind: not busy
}

TEST(IdleGateLogicTest, ConditionsAreAJsonObjectSayingWhatWasSeen) {
  MeasurementConditions c;
  c.gate = "nvml";
  c.after.known = true;
  c.after.other_processes = 2;
  c.after.utilization_percent = 87;
  c.relative_spread = 0.5;
  c.remeasured = 2;
  c.contended = true;
  EXPECT_EQ(ConditionsJson(c),
            "{\"idle_gate\":\"nvml\",\"device_known\":true,\"busy_after\":true,"
            "\"other_processes\":2,\"utilization_percent\":87,\"relative_spread\":0.5,"
            "\"remeasured\":2,\"contended\":true}");
  EXPECT_EQ(ConditionsJson({}),
            "{\"idle_gate\":\"off\",\"device_known\":false,\"relative_spread\":0,"
            "\"remeasured\":0,\"contended\":false}");
}

TEST(IdleGateTest, WaitPausesWhileBusyAndStopsWhenCancelled) {
  auto probe = std::make_unique<ScriptedProbe>(
      std::deque<GpuActivitySample>{Busy(), Busy(), Idle()}, Busy());
  ScriptedProbe& p = *probe;
  int sleeps = 0;
  IdleGate gate(std::move(probe), TestConfig(), [&](std::chrono::milliseconds) { ++sleeps; });
  EXPECT_TRUE(gate.WaitUntilIdle(nullptr));
  EXPECT_EQ(sleeps, 2);
  EXPECT_EQ(gate.pauses(), 1);
  EXPECT_EQ(p.samples(), 3);
  // Busy for good: only a cancel ends the wait.
  std::atomic<bool> cancel{false};
  int polls = 0;
  IdleGate cancelling(std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{}, Busy()),
                      TestConfig(), [&](std::chrono::milliseconds) {
                        if (++polls == 5) cancel = true;
                      });
  EXPECT_FALSE(cancelling.WaitUntilIdle(&cancel));
  EXPECT_EQ(polls, 5);
  EXPECT_FALSE(cancelling.paused());
  EXPECT_FALSE(gate.paused());
}

// A paused benchmark resumes only once the device is quiet as well: NVML's per-process samples
// can miss a job that runs work (the driver samples at its own period), while the device's
// utilization, ours being nil while paused, still shows it.
TEST(IdleGateTest, APausedBenchmarkWaitsForTheDeviceToBeQuietToo) {
  const GpuActivitySample unsampled_busy{{kSelf, kTrainer}, 90, {}};
  auto probe = std::make_unique<ScriptedProbe>(
      std::deque<GpuActivitySample>{Busy(), unsampled_busy, unsampled_busy, Busy(), unsampled_busy},
      IdleHolder());
  ScriptedProbe& p = *probe;
  int sleeps = 0;
  IdleGate gate(std::move(probe), TestConfig(), [&](std::chrono::milliseconds) { ++sleeps; });
  EXPECT_TRUE(gate.WaitUntilIdle(nullptr));
  EXPECT_EQ(sleeps, 5);  // resumed at the first quiet device, not at the first quiet sample
  EXPECT_EQ(p.samples(), 6);
  EXPECT_EQ(gate.pauses(), 1);
}

// ... and only after several quiet looks in a row: a job's first step and its host-side pauses
// leave the device quiet for a look at a time while the job runs.
TEST(IdleGateTest, APausedBenchmarkResumesAfterQuietLooksInARow) {
  IdleGateConfig config = TestConfig();
  config.resume_quiet_looks = 3;
  auto probe = std::make_unique<ScriptedProbe>(
      std::deque<GpuActivitySample>{Busy(), Idle(), Idle(), Busy(), Idle(), Idle()}, Idle());
  ScriptedProbe& p = *probe;
  int sleeps = 0;
  IdleGate gate(std::move(probe), config, [&](std::chrono::milliseconds) { ++sleeps; });
  EXPECT_TRUE(gate.WaitUntilIdle(nullptr));
  EXPECT_EQ(p.samples(), 7);  // the quiet run of three: looks 5, 6 and 7
  EXPECT_EQ(sleeps, 6);
  EXPECT_EQ(gate.pauses(), 1);
  // Quiet at the first look: nothing paused, nothing waited.
  IdleGate idle(std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{}, Idle()), config,
                [&](std::chrono::milliseconds) { ADD_FAILURE() << "slept while idle"; });
  EXPECT_TRUE(idle.WaitUntilIdle(nullptr));
  EXPECT_EQ(idle.pauses(), 0);
}

// Looks between configurations within look_reuse of the last sample reuse it (NVML's samples come
// at the driver's period, and each costs about as much as probing a small configuration); a
// paused benchmark asks afresh at every poll, so that it still resumes on the device's own word.
TEST(IdleGateTest, LooksReuseARecentSampleButAPausedOneAsksAgain) {
  IdleGateConfig config = TestConfig();
  config.look_reuse = std::chrono::hours(1);
  config.resume_quiet_looks = 1;
  auto probe =
      std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{Idle(), Busy()}, Idle());
  ScriptedProbe& p = *probe;
  int sleeps = 0;
  IdleGate gate(std::move(probe), config, [&](std::chrono::milliseconds) { ++sleeps; });
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(gate.WaitUntilIdle(nullptr));
    EXPECT_EQ(gate.Look().other_processes, 0);
  }
  EXPECT_EQ(p.samples(), 1);
  EXPECT_EQ(sleeps, 0);
  // Without reuse every look asks: the busy sample comes, and the wait asks again while paused.
  config.look_reuse = std::chrono::milliseconds(0);
  auto fresh_probe =
      std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{Idle(), Busy()}, Idle());
  ScriptedProbe& fresh = *fresh_probe;
  IdleGate asking(std::move(fresh_probe), config, [&](std::chrono::milliseconds) { ++sleeps; });
  EXPECT_EQ(asking.Look().other_processes, 0);
  EXPECT_TRUE(asking.WaitUntilIdle(nullptr));
  EXPECT_EQ(asking.pauses(), 1);
  EXPECT_EQ(fresh.samples(), 3);
  EXPECT_EQ(sleeps, 1);
}

// A job that holds a context and waits (for these very plans) neither pauses a benchmark nor
// makes its measurements contended: only a process that runs work does.
TEST(IdleGateTest, AContextHolderThatRunsNothingIsNoContention) {
  int sleeps = 0;
  IdleGate gate(std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{}, IdleHolder()),
                TestConfig(), [&](std::chrono::milliseconds) { ++sleeps; });
  EXPECT_TRUE(gate.WaitUntilIdle(nullptr));
  EXPECT_EQ(sleeps, 0);
  EXPECT_EQ(gate.pauses(), 0);
  EXPECT_EQ(gate.Look().other_processes, 0);
  EXPECT_TRUE(gate.IdleForClaim());
}

// The worker's compile helpers are its own: their GPU work (a helper starting up) neither pauses a
// benchmark nor stops a claim; a process that is not theirs still does.
TEST(IdleGateTest, TheWorkersOwnHelpersAreNotOtherWork) {
  constexpr uint32_t kHelper = 4242;
  const GpuActivitySample helper_busy{{kSelf, kHelper}, 0, {kSelf, kHelper}};
  int sleeps = 0;
  IdleGate gate(std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{}, helper_busy),
                TestConfig(), [&](std::chrono::milliseconds) { ++sleeps; });
  EXPECT_EQ(gate.Look().other_processes, 1) << "before the gate knows the helper";
  gate.SetOwnProcesses([] { return std::vector<uint32_t>{kHelper}; });
  EXPECT_TRUE(gate.WaitUntilIdle(nullptr));
  EXPECT_EQ(sleeps, 0);
  EXPECT_TRUE(gate.IdleForClaim());

  IdleGate other(
      std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{},
                                      GpuActivitySample{{kSelf, kTrainer}, 0, {kSelf, kTrainer}}),
      TestConfig(), [](std::chrono::milliseconds) {});
  other.SetOwnProcesses([] { return std::vector<uint32_t>{kHelper}; });
  EXPECT_EQ(other.Look().other_processes, 1);
  EXPECT_FALSE(other.IdleForClaim());
}

// Between consecutive jobs the utilization NVML reports is our own benchmark's: the next claim
// is judged by the processes alone (one sample); a worker idle for a while judges both.
TEST(IdleGateTest, OwnRecentWorkIsNotOtherWork) {
  auto probe = std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{},
                                               GpuActivitySample{{kSelf}, 95, {}});
  ScriptedProbe& p = *probe;
  IdleGate gate(std::move(probe), TestConfig(), [](std::chrono::milliseconds) {});
  EXPECT_FALSE(gate.IdleForClaim());  // never worked: 95% is someone else's
  EXPECT_EQ(p.samples(), 3);
  gate.Look();  // our benchmark's look after a measurement
  EXPECT_TRUE(gate.IdleForClaim());
  EXPECT_EQ(p.samples(), 5);
}

TEST(IdleGateTest, GivesUpAfterTheMaximumPause) {
  IdleGateConfig config = TestConfig();
  config.poll = std::chrono::milliseconds(10);
  config.max_pause = std::chrono::milliseconds(40);
  int polls = 0;
  IdleGate gate(std::make_unique<ScriptedProbe>(std::deque<GpuActivitySample>{}, Busy()), config,
                [&](std::chrono::milliseconds) { ++polls; });
  EXPECT_FALSE(gate.WaitUntilIdle(nullptr));
  EXPECT_TRUE(gate.gave_up());
  EXPECT_EQ(polls, 4);
}

// The device turns busy in the middle of the table: the benchmark pauses (nothing runs while it
// is busy), resumes, and every configuration is measured exactly once, none lost.
TEST(IdleGateBenchmarkTest, BusyPausesIdleResumesNothingLostNothingTwice) {
  // Per configuration the gate looks twice: before (wait) and after (contention). Samples 0-3
  // cover two configurations; the third's wait finds the GPU busy three times in a row.
  const GatedRun run = RunGated({Idle(), Idle(), Idle(), Idle(), Busy(), Busy(), Busy()}, 4,
                                BatchPolicy::kPowerOfTwo);
  ASSERT_TRUE(run.table.ok()) << run.table.status().ToString();
  EXPECT_EQ(run.pauses, 1);
  auto backend = std::move(MakeBackend("cpu")).value();
  ASSERT_EQ(run.table->entries.size(), ExpectedTimings(*backend, TinyProblem(ConvOp::kForward, 4),
                                                       4, BatchPolicy::kPowerOfTwo));
  for (const Timing& t : run.table->entries) {
    EXPECT_EQ(t.status, TimingStatus::kOk) << t.error;
    EXPECT_EQ((run.calls.at({t.micro_batch, t.algo})), 1)
        << "micro-batch " << t.micro_batch << " algo " << t.algo;
    EXPECT_THAT(t.conditions, HasSubstr("\"idle_gate\":\"scripted\""));
    EXPECT_THAT(t.conditions, HasSubstr("\"contended\":false"));
  }
  EXPECT_EQ(run.calls.size(), run.table->entries.size());
}

// Another process seen right after a measurement: taken again once the device is idle, and the
// stored time is the undisturbed one.
TEST(IdleGateBenchmarkTest, AMeasurementDisturbedOnceIsTakenAgain) {
  // Wait (idle), after (busy) -> again: wait (idle), after (idle).
  const GatedRun run = RunGated({Idle(), Busy(), Idle(), Idle()}, 1, BatchPolicy::kUndivided);
  ASSERT_TRUE(run.table.ok()) << run.table.status().ToString();
  const Timing& first = run.table->entries.front();
  EXPECT_EQ(first.status, TimingStatus::kOk);
  EXPECT_EQ((run.calls.at({first.micro_batch, first.algo})), 2);
  EXPECT_THAT(first.conditions, HasSubstr("\"remeasured\":1"));
  for (size_t i = 1; i < run.table->entries.size(); ++i) {
    const Timing& t = run.table->entries[i];
    EXPECT_EQ((run.calls.at({t.micro_batch, t.algo})), 1);
    EXPECT_THAT(t.conditions, HasSubstr("\"remeasured\":0"));
  }
}

// Still disturbed after kContentionRemeasures more tries: stored kFailed as contended, a worker
// limit (never planned with, never replacing a measurement), with its conditions.
TEST(IdleGateBenchmarkTest, AMeasurementThatStaysDisturbedIsStoredContended) {
  std::deque<GpuActivitySample> script;
  for (int i = 0; i <= kContentionRemeasures; ++i) {
    script.push_back(Idle());  // wait
    script.push_back(Busy());  // after
  }
  const GatedRun run = RunGated(std::move(script), 1, BatchPolicy::kUndivided);
  ASSERT_TRUE(run.table.ok()) << run.table.status().ToString();
  const Timing& first = run.table->entries.front();
  EXPECT_EQ(first.status, TimingStatus::kFailed);
  EXPECT_TRUE(IsWorkerLimit(first));
  EXPECT_THAT(first.error, HasSubstr(std::string(kContendedError)));
  EXPECT_THAT(first.conditions, HasSubstr("\"contended\":true"));
  EXPECT_EQ((run.calls.at({first.micro_batch, first.algo})), kContentionRemeasures + 1);
  for (size_t i = 1; i < run.table->entries.size(); ++i) {
    EXPECT_EQ(run.table->entries[i].status, TimingStatus::kOk);
  }
}

// Without a gate nothing changes but the record: the conditions say the gate was off.
TEST(IdleGateBenchmarkTest, WithoutAGateTheConditionsSaySo) {
  auto backend = std::move(MakeBackend("cpu")).value();
  auto table = BenchmarkProblem(*backend, TinyProblem(ConvOp::kForward, 4), 2,
                                BatchPolicy::kPowerOfTwo, OneCallPerConfiguration());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  for (const Timing& t : table->entries) {
    EXPECT_THAT(t.conditions, HasSubstr("\"idle_gate\":\"off\""));
  }
}

}  // namespace
}  // namespace ucudnn::worker
