// The README's operator recipes, run verbatim against a live cluster (PostgreSQL, server, CPU
// worker) the way a new user runs them against the demo: from a directory that has the demo's
// `.run/token` and `build/` (a link to this build), with the shell blocks copied out of README.md
// at test time, so a recipe that stops working fails here. The only substitutions are the demo's
// addresses (127.0.0.1:50051 and :9464) by this server's; grpcurl lines run through `buf curl`
// (tests/tools/grpcurl_via_buf.sh: Debian has no grpcurl).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "e2e/e2e_fixture.h"

namespace ucudnn::e2e {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The body of the first ```sh block after the first line of `readme` that contains `marker`;
// empty when there is none.
std::string ShellBlockAfter(const std::string& readme, const std::string& marker) {
  const size_t at = readme.find(marker);
  if (at == std::string::npos) return "";
  const std::string open = "\n```sh\n";
  const size_t start = readme.find(open, at);
  if (start == std::string::npos) return "";
  const size_t body = start + open.size();
  const size_t end = readme.find("\n```", body);
  if (end == std::string::npos) return "";
  return readme.substr(body, end - body + 1);
}

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

struct ScriptRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr, with bash's trace of each command
};

class ReadmeRecipesTest : public BufE2eTest {
 protected:
  void SetUp() override {
    BufE2eTest::SetUp();
    if (IsSkipped()) return;
    readme_ = ReadFile(fs::path(UCUDNN_SOURCE_DIR) / "README.md");
    ASSERT_FALSE(readme_.empty());
    // The user's directory: the demo's token and build/ where the README expects them.
    home_ = fs::path(::testing::TempDir()) / ("readme_recipes_" + std::to_string(getpid()));
    fs::remove_all(home_);
    fs::create_directories(home_ / ".run");
    fs::create_directories(home_ / "shim");
    std::ofstream(home_ / ".run/token") << kToken << "\n";
    fs::create_directory_symlink(UCUDNN_BINARY_DIR, home_ / "build");
    fs::create_symlink(fs::path(UCUDNN_SOURCE_DIR) / "tests/tools/grpcurl_via_buf.sh",
                       home_ / "shim/grpcurl");
  }
  void TearDown() override {
    if (!home_.empty()) fs::remove_all(home_);
    E2eTest::TearDown();
  }

  // Runs `block` with bash in the user's directory, stopping at the first failing command.
  ScriptRun RunBlock(const std::string& block, const std::string& server,
                     const std::string& metrics) {
    std::string script = ReplaceAll(block, "127.0.0.1:50051", server);
    script = ReplaceAll(script, "127.0.0.1:9464", metrics);
    const std::string prologue =
        "set -euxo pipefail\ncd '" + home_.string() + "'\nexport PATH=\"$PWD/shim:$PATH\" BUF='" +
        buf_ + "' S='" + server + "'\n" +
        // `ucudnn plan` exits 3 while the plan is incomplete (README), which it is here: the
        // worker measures nothing. Every other failure stops the block.
        "ucudnn() { local rc=0; command ucudnn \"$@\" || rc=$?; "
        "if [ \"$1\" = plan ] && [ $rc -eq 3 ]; then echo '(exit 3: incomplete plan)'; "
        "return 0; fi; return $rc; }\n";
    std::string error;
    auto process = ChildProcess::Spawn({"/bin/bash", "-c", prologue + script},
                                       LogPath("block" + std::to_string(++blocks_)), &error);
    EXPECT_NE(process, nullptr) << error;
    if (process == nullptr) return {};
    ScriptRun run;
    const std::optional<int> status = process->WaitExit(seconds(150));
    EXPECT_TRUE(status.has_value()) << "the block did not finish:\n" << process->LogTail();
    if (status.has_value() && WIFEXITED(*status)) run.exit_code = WEXITSTATUS(*status);
    run.output = process->Log();
    std::remove(process->log_path().c_str());
    return run;
  }

  fs::path home_;
  std::string readme_;
  int blocks_ = 0;
};

TEST_F(ReadmeRecipesTest, OperatorRecipesRunAgainstALiveCluster) {
  ServerProcess* server = StartServer("s1", {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_NE(server, nullptr);
  std::string metrics;
  ASSERT_TRUE(WaitUntil([&] {
    std::smatch match;
    const std::string log = server->process().Log();
    static const std::regex kMetrics(R"(metrics at http://127\.0\.0\.1:([0-9]+)/metrics)");
    if (!std::regex_search(log, match, kMetrics)) return false;
    metrics = "127.0.0.1:" + match[1].str();
    return true;
  })) << server->process().Log();
  WorkerProcess* worker = StartWorker("w1");
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(WaitWorkersRegistered(1));
  // The demo has measured alexnet at mini-batch 8 when a user reads on; the recipes read the
  // timings of its layer features.3, so the worker measures that one layer first.
  {
    const fs::path net = home_ / "features3.csv";
    std::ofstream(net) << "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,"
                          "dilation_w,groups\nfeatures.3,64,27,27,192,5,5,2,2,1,1,1,1,1\n";
    std::string error;
    auto plan = ChildProcess::Spawn(
        {CliBinary(), "plan", "--server", server->address(), "--token", kToken, "--backend", "cpu",
         "--network", net.string(), "--batch", "8", "--wait", "120s"},
        LogPath("measure_features3"), &error);
    ASSERT_NE(plan, nullptr) << error;
    const std::optional<int> status = plan->WaitExit(seconds(150));
    ASSERT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << plan->Log();
    std::remove(plan->log_path().c_str());
  }
  // Registered is all the recipes need of it (the device they read); stopped, it claims none of
  // the jobs the recipes queue, so they stay queued for `jobs --all-queued`, and it leaves the
  // CPU to the test.
  worker->process().Signal(SIGSTOP);

  const std::string cli = ShellBlockAfter(readme_, "Against the demo, from the repository");
  ASSERT_THAT(cli, HasSubstr("ucudnn plan")) << "README: the CLI block is gone";
  const ScriptRun cli_run = RunBlock(cli, server->address(), metrics);
  EXPECT_EQ(cli_run.exit_code, 0) << cli_run.output;
  EXPECT_THAT(cli_run.output, HasSubstr("SERVING"));
  EXPECT_THAT(cli_run.output,
              HasSubstr("features.0/fwd"));  // the plan table names alexnet's kernels
  EXPECT_THAT(cli_run.output, HasSubstr("cancelled"));

  const std::string grpcurl = ShellBlockAfter(readme_, "With grpcurl");
  ASSERT_THAT(grpcurl, HasSubstr("GetPlan")) << "README: the grpcurl block is gone";
  const ScriptRun grpcurl_run = RunBlock(grpcurl, server->address(), metrics);
  EXPECT_EQ(grpcurl_run.exit_code, 0) << grpcurl_run.output;
  EXPECT_THAT(grpcurl_run.output, HasSubstr("ucudnn.v1.PlannerService"));
  EXPECT_THAT(grpcurl_run.output, HasSubstr("\"fingerprint\""));
  EXPECT_THAT(grpcurl_run.output, HasSubstr("\"kernels\""));  // GetPlan's answer
  EXPECT_THAT(grpcurl_run.output, HasSubstr("ucudnn_rpc_requests_total"));

  // The buf block sends the files the grpcurl block wrote.
  const std::string buf = ShellBlockAfter(readme_, "takes the same JSON");
  ASSERT_THAT(buf, HasSubstr("curl --protocol grpc")) << "README: the buf block is gone";
  const ScriptRun buf_run = RunBlock(buf, server->address(), metrics);
  EXPECT_EQ(buf_run.exit_code, 0) << buf_run.output;
  EXPECT_THAT(buf_run.output, HasSubstr("\"kernels\""));

  // What the recipes submitted is in the store: the README's two timings of its problem.
  const Result<int64_t> submitted =
      Query("SELECT count(*) FROM timings WHERE measured_by = 'readme'");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  EXPECT_EQ(*submitted, 2);
  // ... for the throw-away device, never for the worker's, which plans are made for (issue 22).
  EXPECT_EQ(QueryOr("SELECT count(*) FROM timings t JOIN devices d ON d.id = t.device_id "
                    "WHERE t.measured_by = 'readme' AND d.name <> 'readme-example'"),
            0);
  worker->process().Signal(SIGCONT);
}

}  // namespace
}  // namespace ucudnn::e2e
