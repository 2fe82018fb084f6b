// The operator's `ucudnn` commands against a live cluster (PostgreSQL, server, CPU worker): each
// prints what the catalog holds, and a failed call exits non-zero with the gRPC status named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <fstream>
#include <string>
#include <vector>

#include "e2e/e2e_fixture.h"

namespace ucudnn::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

class OperatorCliTest : public E2eTest {
 protected:
  CliRun RunCli(std::vector<std::string> args) {
    args.insert(args.begin(), CliBinary());
    std::string error;
    auto process = ChildProcess::Spawn(args, LogPath("cli" + std::to_string(++runs_)), &error);
    EXPECT_NE(process, nullptr) << error;
    if (process == nullptr) return {};
    CliRun run;
    const std::optional<int> status = process->WaitExit(seconds(150));
    EXPECT_TRUE(status.has_value()) << "ucudnn " << args[1] << " did not exit";
    if (status.has_value() && WIFEXITED(*status)) run.exit_code = WEXITSTATUS(*status);
    run.output = process->Log();
    std::remove(process->log_path().c_str());
    return run;
  }
  int runs_ = 0;
};

TEST_F(OperatorCliTest, CommandsReadTheClusterAndFailuresNameTheStatus) {
  ServerProcess* server = StartServer("s1");
  ASSERT_NE(server, nullptr);
  WorkerProcess* worker = StartWorker("w1");
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(1));
  const std::string net = ::testing::TempDir() + "operator_cli_net.csv";
  {
    std::ofstream out(net);
    out << "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups\n"
           "stem,3,10,10,8,3,3,1,1,1,1,1,1,1\n";
  }
  const std::vector<std::string> at = {"--server", server->address()};
  auto with = [&](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };

  CliRun health = RunCli(with({"health"}, at));
  EXPECT_EQ(health.exit_code, 0) << health.output;
  EXPECT_THAT(health.output, HasSubstr(server->address() + ": SERVING"));

  CliRun devices = RunCli(with({"devices"}, at));
  EXPECT_EQ(devices.exit_code, 0) << devices.output;
  EXPECT_THAT(devices.output, HasSubstr(CpuDevice().name));

  // A plan for the catalog's device 0 (the worker's), waiting for its benchmarks.
  const std::vector<std::string> plan_args = {
      "--device", "0", "--network", net, "--batch", "4", "--workspace", "1MiB", "--policy", "all"};
  CliRun plan = RunCli(with(with({"plan"}, at), with(plan_args, {"--wait", "2m"})));
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("Plan: 3 kernels (fp32 nchw), policy all"));
  // Segments name the CPU backend's algorithms.
  EXPECT_THAT(plan.output,
              ::testing::ContainsRegex("stem/bwd_filter .* [0-9]+x[0-9]+@(direct|im2col_gemm)"));
  EXPECT_THAT(plan.output, HasSubstr("total"));

  CliRun explain = RunCli(with(with({"explain"}, at), plan_args));
  EXPECT_EQ(explain.exit_code, 0) << explain.output;
  EXPECT_THAT(explain.output,
              ::testing::ContainsRegex("stem/fwd .* [0-9]+x[0-9]+@(direct|im2col_gemm)"));

  CliRun workers = RunCli(with({"workers"}, at));
  EXPECT_EQ(workers.exit_code, 0) << workers.output;
  EXPECT_THAT(workers.output, HasSubstr(worker->worker_id()));

  CliRun jobs = RunCli(with({"jobs", "--state", "done"}, at));
  EXPECT_EQ(jobs.exit_code, 0) << jobs.output;
  EXPECT_THAT(jobs.output, HasSubstr("done"));
  EXPECT_THAT(jobs.output, HasSubstr("queue depth: 0"));
  EXPECT_THAT(jobs.output, Not(HasSubstr("failed")));

  CliRun retry = RunCli(with({"jobs", "--retry", "987654", "--token", kToken}, at));
  EXPECT_NE(retry.exit_code, 0) << retry.output;
  EXPECT_THAT(retry.output, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(retry.output, HasSubstr("job 987654"));

  CliRun bad = RunCli(with({"jobs", "--state", "sleeping"}, at));
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(bad.output, HasSubstr("state: must be one of"));

  CliRun away = RunCli({"devices", "--server", "127.0.0.1:1", "--deadline-ms", "2000"});
  EXPECT_NE(away.exit_code, 0) << away.output;
  EXPECT_THAT(away.output, HasSubstr("UNAVAILABLE: 127.0.0.1:1"));
  std::remove(net.c_str());
}

// Issue 11 item 5: a network planned in bf16 channels-last end to end. The CLI puts the precision
// into every kernel, the server stores the problems (the schema's CHECKs), the CPU worker
// benchmarks them (widened to fp32 around its kernels), and the plan comes back complete; and
// `--mode total` is the shared-workspace model.
TEST_F(OperatorCliTest, PlansANetworkInBf16ChannelsLastOnTheCpuWorker) {
  ServerProcess* server = StartServer("s1");
  ASSERT_NE(server, nullptr);
  WorkerProcess* worker = StartWorker("w1");
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(1));
  const std::string net = ::testing::TempDir() + "operator_cli_bf16_net.csv";
  {
    std::ofstream out(net);
    out << "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups\n"
           "stem,3,10,10,8,3,3,1,1,1,1,1,1,1\n"
           "block,8,10,10,8,1,1,0,0,1,1,1,1,1\n";
  }
  const std::vector<std::string> args = {
      "plan",    "--server", server->address(), "--device", "0",       "--network", net,
      "--batch", "4",        "--workspace",     "1MiB",     "--dtype", "bf16",      "--layout",
      "nhwc",    "--mode",   "total",           "--wait",   "2m"};
  CliRun plan = RunCli(args);
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("Plan: 6 kernels (bf16 nhwc)"));
  EXPECT_THAT(plan.output, HasSubstr("shared (kernels run one after another in one workspace)"));
  EXPECT_THAT(plan.output,
              ::testing::ContainsRegex("block/bwd_filter .* [0-9]+x[0-9]+@(direct|im2col_gemm)"));
  EXPECT_THAT(plan.output, Not(HasSubstr("MISSING")));
  EXPECT_THAT(plan.output, Not(HasSubstr("INFEASIBLE")));

  // The catalog holds the problems in bf16 NHWC with fp32 compute and tensor-op math.
  CliRun problems = RunCli({"problem", "--network", net, "--batch", "4", "--dtype", "bf16"});
  EXPECT_EQ(problems.exit_code, 0) << problems.output;
  EXPECT_THAT(problems.output, HasSubstr("dtype=bf16;ctype=fp32;layout=nhwc;math=tensor_op"));
  Result<int64_t> stored =
      QueryInt(url(),
               "SELECT count(*) FROM problems WHERE data_type = 'bf16' AND layout = 'nhwc' AND "
               "compute_type = 'fp32' AND math = 'tensor_op'");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(*stored, 6);  // two layers, three ops each
  Result<int64_t> timed = QueryInt(url(),
                                   "SELECT count(*) FROM timings t JOIN problems p ON "
                                   "p.id = t.problem_id WHERE p.data_type = 'bf16' AND "
                                   "t.status = 'ok' AND t.time_ms > 0");
  ASSERT_TRUE(timed.ok()) << timed.status().ToString();
  EXPECT_GT(*timed, 0);
  std::remove(net.c_str());
}

}  // namespace
}  // namespace ucudnn::e2e
