// The worker's flags and environment variables: pure logic.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/worker/options.h"
#include "ucudnn/worker/worker_main.h"

namespace ucudnn::worker {
namespace {

using ::testing::HasSubstr;

// Sets an environment variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    had_old_ = old != nullptr;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_old_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_old_ = false;
};

Result<CommandLine> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ucudnn-worker");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

class OptionsTest : public ::testing::Test {
 protected:
  // The variables the parser reads must not leak in from the environment of the test run.
  ScopedEnv url_{"UCUDNN_DATABASE_URL", nullptr};
  ScopedEnv level_{"UCUDNN_LOG_LEVEL", nullptr};
  ScopedEnv backend_{"UCUDNN_WORKER_BACKEND", nullptr};
  ScopedEnv lease_{"UCUDNN_WORKER_LEASE_SECONDS", nullptr};
  ScopedEnv plans_{"UCUDNN_COMPILED_PLAN_CACHE", nullptr};
  ScopedEnv xdg_{"XDG_CACHE_HOME", "/x/cache"};
};

TEST_F(OptionsTest, CompiledPlansGoWhereTheMachinesJobsLookForThem) {
  // The client's default and variable: a worker and the jobs of one user share the directory.
  auto by_default = Parse({"--database-url", "postgresql://h/db"});
  ASSERT_TRUE(by_default.ok()) << by_default.status().ToString();
  EXPECT_EQ(by_default->options.compiled_plan_cache, "/x/cache/ucudnn/compiled_plans");
  ScopedEnv shared("UCUDNN_COMPILED_PLAN_CACHE", "/srv/ucudnn/plans");
  auto from_env = Parse({"--database-url", "postgresql://h/db"});
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->options.compiled_plan_cache, "/srv/ucudnn/plans");
  for (const char* off : {"off", "None", "0"}) {
    auto none = Parse({"--database-url", "postgresql://h/db", "--compiled-plan-cache", off});
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->options.compiled_plan_cache, "") << off;
  }
  auto flag = Parse({"--database-url", "postgresql://h/db", "--compiled-plan-cache", " /tmp/p "});
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(flag->options.compiled_plan_cache, "/tmp/p");
}

TEST_F(OptionsTest, FlagsAreParsedWithUnitsAndLists) {
  auto cl = Parse({"--database-url",
                   "postgresql://db/ucudnn",
                   "--backend=cpu",
                   "--lease-seconds",
                   "2.5",
                   "--heartbeat-seconds",
                   "0.5",
                   "--drain-seconds",
                   "7",
                   "--max-attempts",
                   "5",
                   "--workspace-cap",
                   "512MiB",
                   "--log-level",
                   "debug",
                   "--once",
                   "--worker-id-prefix",
                   "node7",
                   "--short-run-us",
                   "20",
                   "--short-runs-device-time-only"});
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  const WorkerOptions& o = cl->options;
  EXPECT_FALSE(cl->help);
  EXPECT_EQ(o.database_url, "postgresql://db/ucudnn");
  EXPECT_EQ(o.backend, "cpu");
  EXPECT_DOUBLE_EQ(o.lease_seconds, 2.5);
  EXPECT_DOUBLE_EQ(o.heartbeat_seconds, 0.5);
  EXPECT_DOUBLE_EQ(o.drain_seconds, 7);
  EXPECT_EQ(o.max_attempts, 5);
  EXPECT_EQ(o.workspace_cap_bytes, uint64_t{512} << 20);
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_TRUE(o.once);
  EXPECT_EQ(o.worker_id_prefix, "node7");

  const DaemonConfig config = MakeDaemonConfig(o);
  EXPECT_EQ(config.id_prefix, "node7");
  EXPECT_EQ(config.lease, std::chrono::milliseconds(2500));
  EXPECT_EQ(config.drain, std::chrono::milliseconds(7000));
  EXPECT_EQ(config.benchmark.workspace_cap_bytes, uint64_t{512} << 20);
  EXPECT_DOUBLE_EQ(config.benchmark.short_run_ms, 0.02);
  EXPECT_TRUE(config.benchmark.short_runs_device_time_only);
  EXPECT_LE(config.retry_max, config.lease / 3);
  EXPECT_TRUE(Validate(config).ok());
}

TEST_F(OptionsTest, EnvironmentFillsFlagsAndFlagsWin) {
  ScopedEnv url("UCUDNN_DATABASE_URL", "postgresql://from-env/db");
  ScopedEnv level("UCUDNN_LOG_LEVEL", "warn");
  ScopedEnv lease("UCUDNN_WORKER_LEASE_SECONDS", "3");
  auto from_env = Parse({"--backend", "cpu"});
  ASSERT_TRUE(from_env.ok()) << from_env.status().ToString();
  EXPECT_EQ(from_env->options.database_url, "postgresql://from-env/db");
  EXPECT_EQ(from_env->options.log_level, "warn");
  EXPECT_DOUBLE_EQ(from_env->options.lease_seconds, 3);

  auto flags = Parse(
      {"--database-url", "postgresql://flag/db", "--log-level", "error", "--lease-seconds", "9"});
  ASSERT_TRUE(flags.ok()) << flags.status().ToString();
  EXPECT_EQ(flags->options.database_url, "postgresql://flag/db");
  EXPECT_EQ(flags->options.log_level, "error");
  EXPECT_DOUBLE_EQ(flags->options.lease_seconds, 9);
}

TEST_F(OptionsTest, ErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string flag;
  };
  const std::vector<Case> cases = {
      {{"--backend", "cpu"}, "--database-url"},
      {{"--database-url", "x", "--lease-seconds", "0"}, "--lease-seconds"},
      {{"--database-url", "x", "--max-attempts", "0"}, "--max-attempts"},
      // The probe run that decides how to sample a configuration must not be its first run.
      {{"--database-url", "x", "--warmup-runs", "0"}, "--warmup-runs"},
      {{"--database-url", "x", "--workspace-cap", "lots"}, "--workspace-cap"},
      {{"--database-url", "x", "--short-run-us", "-1"}, "--short-run-us"},
      {{"--database-url", "x", "--gpus", "0,x"}, "--gpus"},
      {{"--database-url", "x", "--backend", "cpu", "--gpus", "0"}, "--gpus"},
      {{"--database-url", "x", "--log-level", "loud"}, "--log-level"},
      {{"--database-url", "x", "--backend", "tpu"}, "--backend"},
      {{"--database-url", "x", "--network", "resnet50"}, "--network"},
      {{"--offline", "--batch", "8", "--output", "t.csv"}, "--network"},
      {{"--offline", "--network", "resnet50", "--output", "t.csv"}, "--batch"},
      {{"--offline", "--network", "resnet50", "--batch", "8"}, "--output"},
      {{"--offline", "--network", "r", "--batch", "8", "--output", "o", "--policy", "odd"},
       "--policy"},
      {{"--database-url", "x", "--no-such-flag"}, "--no-such-flag"},
      // A line break in the prefix would forge log lines (issue 22).
      {{"--database-url", "x", "--worker-id-prefix", "n1\n[error] forged"}, "--worker-id-prefix"},
      {{"--database-url", "x", "--worker-id-prefix", "n1\x1b[2J"}, "--worker-id-prefix"},
  };
  for (const Case& c : cases) {
    auto cl = Parse(c.args);
    ASSERT_FALSE(cl.ok()) << ::testing::PrintToString(c.args);
    EXPECT_EQ(cl.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(cl.status().message(), HasSubstr(c.flag)) << ::testing::PrintToString(c.args);
  }
}

TEST_F(OptionsTest, IdleGateFlagsAndTheExhaustiveSearch) {
  ScopedEnv gate("UCUDNN_WORKER_IDLE_GATE", "off");
  auto parsed = Parse({"--database-url", "postgresql://h/db"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->options.idle_gate, "off");
  parsed =
      Parse({"--database-url", "postgresql://h/db", "--idle-gate", "nvml", "--idle-max-utilization",
             "25", "--idle-poll-seconds", "0.5", "--contended-spread", "0.3", "--exhaustive"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->options.idle_gate, "nvml");
  EXPECT_EQ(parsed->options.idle_max_utilization, 25);
  EXPECT_EQ(parsed->options.idle_poll_seconds, 0.5);
  const BenchmarkOptions exhaustive = MakeBenchmarkOptions(parsed->options);
  EXPECT_LT(exhaustive.prune_margin, 0);
  EXPECT_EQ(exhaustive.skip_factor, 0);
  EXPECT_EQ(exhaustive.contended_relative_spread, 0.3);

  // The spread's default: judged on GPUs, not on the CPU backend's host timings.
  parsed = Parse({"--database-url", "postgresql://h/db"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(MakeBenchmarkOptions(parsed->options).contended_relative_spread,
            kContendedRelativeSpread);
  EXPECT_GT(MakeBenchmarkOptions(parsed->options).prune_margin, 0);
  parsed = Parse({"--database-url", "postgresql://h/db", "--backend", "cpu"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(MakeBenchmarkOptions(parsed->options).contended_relative_spread, 0);

  EXPECT_THAT(Parse({"--database-url", "x", "--idle-gate", "maybe"}).status().message(),
              HasSubstr("--idle-gate"));
  EXPECT_THAT(Parse({"--database-url", "x", "--idle-max-utilization", "101"}).status().message(),
              HasSubstr("--idle-max-utilization"));
  EXPECT_THAT(
      Parse({"--database-url", "x", "--backend", "cpu", "--idle-gate", "nvml"}).status().message(),
      HasSubstr("--idle-gate nvml"));
}

TEST_F(OptionsTest, OfflineNeedsNoDatabase) {
  auto cl = Parse({"--offline", "--network", "resnet50", "--batch", "256", "--policy", "all",
                   "--output", "timings.csv", "--backend", "cpu", "--dtype", "fp32"});
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  EXPECT_TRUE(cl->options.offline);
  EXPECT_EQ(cl->options.network, "resnet50");
  EXPECT_EQ(cl->options.batch, 256);
  EXPECT_EQ(cl->options.policy, BatchPolicy::kAll);
  EXPECT_EQ(cl->options.output, "timings.csv");
}

TEST_F(OptionsTest, HelpDocumentsFlagsAndVariables) {
  auto cl = Parse({"--help"});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->help);
  for (const char* needle : {"--database-url",
                             "UCUDNN_DATABASE_URL",
                             "--backend",
                             "--gpus",
                             "--compiled-plan-cache",
                             "UCUDNN_COMPILED_PLAN_CACHE",
                             "--lease-seconds",
                             "--heartbeat-seconds",
                             "--drain-seconds",
                             "--max-attempts",
                             "--workspace-cap",
                             "--log-level",
                             "UCUDNN_LOG_LEVEL",
                             "--once",
                             "--offline",
                             "--network",
                             "--batch",
                             "--policy",
                             "--output",
                             "--short-run-us",
                             "--short-runs-device-time-only",
                             "SIGTERM"}) {
    EXPECT_THAT(cl->help_text, HasSubstr(needle));
  }
  EXPECT_EQ(cl->help_text, HelpText());
}

TEST(BenchmarkDevicesTest, CpuOnRequestAndAutoRefusedWithoutAGpu) {
  WorkerOptions options;
  options.backend = "cpu";
  auto cpu = MakeBenchmarkDevices(options);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  ASSERT_EQ(cpu->size(), 1u);
  EXPECT_EQ(cpu->front().slot, "cpu");
  EXPECT_EQ(cpu->front().backend->fingerprint().backend, "cpu");

  if (GpuCount() > 0) GTEST_SKIP() << "a GPU is visible: auto would choose cudnn";
  options.backend = "auto";
  auto refused = MakeBenchmarkDevices(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("--backend cpu"));
}

TEST(GpuListTest, ParsesAndRejects) {
  auto gpus = ParseGpuList("0, 2,3");
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(*gpus, (std::vector<int>{0, 2, 3}));
  for (const char* bad : {"", "1,", "a", "-1", "1,1", "1.5"}) {
    EXPECT_FALSE(ParseGpuList(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace ucudnn::worker
