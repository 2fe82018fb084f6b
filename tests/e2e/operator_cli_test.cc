// The operator's `ucudnn` commands against a live cluster (PostgreSQL, server, CPU worker): each
// prints what the catalog holds, and a failed call exits non-zero with the gRPC status named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
  // The token: a caller without one may not enqueue the benchmarks the plan below waits for.
  const std::vector<std::string> at = {"--server", server->address(), "--token", kToken};
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
  // Every size of the policy timed (the server's default --search-sizes all): no limit.
  EXPECT_THAT(jobs.output, ::testing::ContainsRegex("done +[0-9a-f]{16} +[0-9]+ +all +"));
  EXPECT_THAT(jobs.output, HasSubstr("queue depth: 0"));
  EXPECT_THAT(jobs.output, Not(HasSubstr("failed")));

  CliRun retry = RunCli(with({"jobs", "--retry", "987654"}, at));
  EXPECT_NE(retry.exit_code, 0) << retry.output;
  EXPECT_THAT(retry.output, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(retry.output, HasSubstr("job 987654"));

  CliRun bad = RunCli(with({"jobs", "--state", "sleeping"}, at));
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(bad.output, HasSubstr("state: must be one of"));

  // --json on every read command: one document that parses, holding what the table holds.
  const auto parsed = [&](const CliRun& run) {
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const nlohmann::json document = nlohmann::json::parse(run.output, nullptr, false);
    EXPECT_FALSE(document.is_discarded()) << run.output;
    return document;
  };
  const nlohmann::json devices_json = parsed(RunCli(with({"devices", "--json"}, at)));
  ASSERT_TRUE(devices_json.contains("devices")) << devices_json.dump();
  EXPECT_EQ(devices_json["devices"][0]["fingerprint"]["name"], CpuDevice().name);
  const nlohmann::json workers_json = parsed(RunCli(with({"workers", "--json"}, at)));
  EXPECT_EQ(workers_json["workers"][0]["id"], worker->worker_id());
  const nlohmann::json jobs_json = parsed(RunCli(with({"jobs", "--state", "done", "--json"}, at)));
  EXPECT_FALSE(jobs_json["jobs"].empty());
  EXPECT_EQ(jobs_json["jobs"][0]["state"], "done");
  const nlohmann::json plan_json = parsed(RunCli(with(with({"plan", "--json"}, at), plan_args)));
  EXPECT_EQ(plan_json["kernels"].size(), 3u);
  const nlohmann::json timings_json =
      parsed(RunCli(with(with({"timings", "--json"}, at), plan_args)));
  ASSERT_EQ(timings_json["problems"].size(), 3u);  // fwd, bwd_data, bwd_filter of the one layer
  EXPECT_FALSE(timings_json["problems"][0]["timings"].empty());
  // The worker checked every configuration's result before storing its timing: the CPU
  // backend's are right, so none is blocked.
  CliRun wrong = RunCli(with(with({"timings", "--wrong-results"}, at), plan_args));
  EXPECT_EQ(wrong.exit_code, 0) << wrong.output;
  EXPECT_THAT(wrong.output,
              HasSubstr("no configuration blocked for a wrong result among the 3 distinct"));
  const nlohmann::json wrong_json =
      parsed(RunCli(with(with({"timings", "--wrong-results", "--json"}, at), plan_args)));
  EXPECT_TRUE(wrong_json["problems"].empty()) << wrong_json.dump();
  const nlohmann::json explain_json =
      parsed(RunCli(with(with({"explain", "--json"}, at), plan_args)));
  ASSERT_EQ(explain_json["kernels"].size(), 3u);
  for (const auto& kernel : explain_json["kernels"]) {
    int chosen = 0;
    for (const auto& alternative : kernel["alternatives"]) chosen += alternative["chosen"] ? 1 : 0;
    EXPECT_EQ(chosen, 1) << kernel.dump();
  }

  // explain says what plan does not: each kernel's alternatives and why the chosen one won.
  EXPECT_THAT(explain.output, HasSubstr("Pareto-optimal configuration"));
  EXPECT_THAT(explain.output, HasSubstr("chosen: the fastest that fits the limit of 1 MiB"));
  EXPECT_THAT(plan.output, Not(HasSubstr("Pareto-optimal")));

  // No timings (a mini-batch never benchmarked): a sentence, not a bare header.
  const std::string unplanned_net = ::testing::TempDir() + "operator_cli_unplanned.csv";
  {
    std::ofstream out(unplanned_net);
    out << "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups\n"
           "never,5,10,10,8,3,3,1,1,1,1,1,1,1\n";
  }
  CliRun no_timings = RunCli(
      with(with({"timings"}, at), {"--device", "0", "--network", unplanned_net, "--batch", "4"}));
  std::remove(unplanned_net.c_str());
  EXPECT_EQ(no_timings.exit_code, 0) << no_timings.output;
  EXPECT_THAT(no_timings.output, HasSubstr("no timings stored for the 3 distinct problems"));

  // The curve: one line per limit, and the SVG drawn.
  const std::string svg = ::testing::TempDir() + "operator_cli_curve.svg";
  CliRun curve =
      RunCli(with(with({"curve"}, at), with(plan_args, {"--max-workspace", "1MiB", "--svg", svg})));
  EXPECT_EQ(curve.exit_code, 0) << curve.output;
  for (const char* limit : {"0 B", "64 KiB", "512 KiB", "1 MiB"}) {
    EXPECT_THAT(curve.output,
                ::testing::ContainsRegex(std::string(" ") + limit +
                                         " +[0-9.]+ +[0-9.n/a]+ +[0-9.n/ax]+ +[0-3]/3"))
        << limit;
  }
  {
    std::ifstream drawn(svg);
    const std::string text((std::istreambuf_iterator<char>(drawn)),
                           std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr("<svg xmlns="));
    EXPECT_THAT(text, HasSubstr("</svg>"));
  }
  std::remove(svg.c_str());
  const nlohmann::json curve_json = parsed(
      RunCli(with(with({"curve", "--json"}, at), with(plan_args, {"--max-workspace", "1MiB"}))));
  EXPECT_EQ(curve_json["points"].size(), 6u);  // 0, 64 KiB .. 1 MiB

  CliRun version = RunCli({"--version"});
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_THAT(version.output, ::testing::ContainsRegex("^ucudnn [0-9]+\\.[0-9]+\\.[0-9]+"));

  CliRun away = RunCli({"devices", "--server", "127.0.0.1:1", "--deadline-ms", "2000"});
  EXPECT_NE(away.exit_code, 0) << away.output;
  EXPECT_THAT(away.output, HasSubstr("UNAVAILABLE: 127.0.0.1:1"));
  std::remove(net.c_str());
}

TEST_F(OperatorCliTest, QueuedJobsAreCancelledWithATokenOneOrAllOfADevice) {
  ServerProcess* server = StartServer("s1");
  ASSERT_NE(server, nullptr);
  // No worker: a plan request leaves one queued job per distinct problem.
  v1::GetPlanResponse planned;
  auto context = ContextWithDeadline(seconds(30));
  const grpc::Status asked =
      server->Planner()->GetPlan(context.get(), PlanRequestFor(TinyNetwork(), 0), &planned);
  ASSERT_TRUE(asked.ok()) << Describe(asked);
  const std::string queued_sql = "SELECT count(*) FROM jobs WHERE state = 'queued'";
  ASSERT_EQ(*Query(queued_sql), static_cast<int64_t>(kTinyNetworkProblems));
  auto first = Query("SELECT min(id) FROM jobs");
  ASSERT_TRUE(first.ok());
  const std::vector<std::string> at = {"--server", server->address()};
  auto with = [&](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };

  // A write: refused without the token, and nothing is cancelled.
  CliRun anonymous = RunCli(with({"jobs", "--all-queued"}, at));
  EXPECT_NE(anonymous.exit_code, 0) << anonymous.output;
  EXPECT_THAT(anonymous.output, HasSubstr("UNAUTHENTICATED"));
  EXPECT_EQ(*Query(queued_sql), static_cast<int64_t>(kTinyNetworkProblems));

  // A flag beats the environment (issue 22): an exported admin token does not make a wrong
  // --token or --token-file right, and nothing is cancelled; without either flag the exported
  // token is used.
  const std::string token_file = ::testing::TempDir() + "operator_cli_token";
  std::ofstream(token_file) << "# the CLI's token\nadmin wrong-token\n";
  ::setenv("UCUDNN_TOKEN", kToken, 1);
  const std::string first_id = std::to_string(*first);
  CliRun wrong_flag = RunCli(with({"jobs", "--cancel", first_id, "--token", "wrong"}, at));
  CliRun wrong_file = RunCli(with({"jobs", "--cancel", first_id, "--token-file", token_file}, at));
  CliRun from_environment = RunCli(with({"jobs", "--cancel", "987654"}, at));
  ::unsetenv("UCUDNN_TOKEN");
  std::remove(token_file.c_str());
  for (const CliRun& wrong : {wrong_flag, wrong_file}) {
    EXPECT_NE(wrong.exit_code, 0) << wrong.output;
    EXPECT_THAT(wrong.output, HasSubstr("UNAUTHENTICATED"));
  }
  EXPECT_EQ(*Query(queued_sql), static_cast<int64_t>(kTinyNetworkProblems));
  EXPECT_THAT(from_environment.output, HasSubstr("NOT_FOUND"));  // authenticated, no such job

  CliRun one = RunCli(with({"jobs", "--cancel", std::to_string(*first), "--token", kToken}, at));
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_THAT(one.output, HasSubstr("cancelled job " + std::to_string(*first)));
  EXPECT_THAT(one.output, HasSubstr("1 queued job(s) cancelled"));
  EXPECT_EQ(*Query(queued_sql), static_cast<int64_t>(kTinyNetworkProblems) - 1);

  CliRun again = RunCli(with({"jobs", "--cancel", std::to_string(*first), "--token", kToken}, at));
  EXPECT_NE(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("NOT_FOUND"));

  CliRun unknown_device =
      RunCli(with({"jobs", "--all-queued", "--device", "ffff", "--token", kToken}, at));
  EXPECT_NE(unknown_device.exit_code, 0) << unknown_device.output;
  EXPECT_THAT(unknown_device.output, HasSubstr("--device ffff: no such device"));

  CliRun rest =
      RunCli(with({"jobs", "--all-queued", "--device", "0", "--token", kToken, "--json"}, at));
  EXPECT_EQ(rest.exit_code, 0) << rest.output;
  const nlohmann::json cancelled = nlohmann::json::parse(rest.output, nullptr, false);
  ASSERT_FALSE(cancelled.is_discarded()) << rest.output;
  EXPECT_EQ(cancelled["cancelled"].size(), kTinyNetworkProblems - 1);
  EXPECT_EQ(*Query(queued_sql), 0);

  // The enqueue and each cancellation are logged once, by the server (issue 22: twice).
  const std::string log = server->process().Log();
  const auto lines_with = [&](const std::string& text) {
    int count = 0;
    for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++count;
    return count;
  };
  EXPECT_EQ(lines_with("job(s) for device"), 1) << log;
  EXPECT_EQ(lines_with("job(s) cancelled"), 2) << log;
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
      "nhwc",    "--mode",   "total",           "--wait",   "2m",      "--token",   kToken};
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

// A network of 3-D convolutions (a video model's stem and block, NDHWC fp16) through the whole
// stack: the server stores its 3-D problems with their depth, the CPU worker checks and times
// them, the planner plans every kernel within the limit.
TEST_F(OperatorCliTest, PlansA3dNetworkThroughTheStack) {
  ServerProcess* server = StartServer("s1");
  ASSERT_NE(server, nullptr);
  WorkerProcess* worker = StartWorker("w1");
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(1));
  const std::string net = ::testing::TempDir() + "operator_cli_3d_net.csv";
  {
    std::ofstream out(net);
    out << "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups,d,t,"
           "pad_d,stride_d,dilation_d\n"
           "stem,3,8,8,8,3,3,1,1,2,2,1,1,1,6,3,1,1,1\n"
           "block,8,4,4,8,3,3,1,1,1,1,1,1,1,6,3,1,1,1\n";
  }
  std::vector<std::string> args = {
      "plan", "--server",    server->address(), "--device", "0",    "--network", net,    "--batch",
      "4",    "--workspace", "256KiB",          "--dtype",  "fp16", "--layout",  "nhwc", "--token",
      kToken};
  std::vector<std::string> waiting = args;
  waiting.insert(waiting.end(), {"--wait", "2m"});
  CliRun plan = RunCli(waiting);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_THAT(plan.output, HasSubstr("Plan: 6 kernels (fp16 nhwc)"));
  EXPECT_THAT(plan.output, HasSubstr("6x4x4 k8 3x3x3"));  // the block's shape, with its depth
  EXPECT_THAT(plan.output, Not(HasSubstr("MISSING")));
  EXPECT_THAT(plan.output, Not(HasSubstr("INFEASIBLE")));
  args.push_back("--json");  // every timing in now: the plan at once
  CliRun json = RunCli(args);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json parsed_plan = nlohmann::json::parse(json.output);
  ASSERT_EQ(parsed_plan["kernels"].size(), 6u) << json.output;
  for (const auto& kernel : parsed_plan["kernels"]) {
    EXPECT_EQ(kernel["status"], "KERNEL_PLAN_STATUS_PLANNED") << kernel.dump();
    EXPECT_LE(std::stoull(kernel.value("workspaceBytes", std::string("0"))), 256u << 10)
        << kernel.dump();
  }
  Result<int64_t> stored =
      QueryInt(url(),
               "SELECT count(*) FROM problems WHERE d = 6 AND t = 3 AND pad_d = 1 AND "
               "canonical_key LIKE '%;layout=ndhwc;%'");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(*stored, 6);  // two layers, three ops each, with their depth
  Result<int64_t> timed = QueryInt(url(),
                                   "SELECT count(*) FROM timings t JOIN problems p ON "
                                   "p.id = t.problem_id WHERE p.d = 6 AND t.status = 'ok' AND "
                                   "t.time_ms > 0");
  ASSERT_TRUE(timed.ok()) << timed.status().ToString();
  EXPECT_GT(*timed, 0);
  std::remove(net.c_str());
}

}  // namespace
}  // namespace ucudnn::e2e
