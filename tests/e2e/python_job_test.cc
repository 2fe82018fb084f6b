// A converted PyTorch job (tests/e2e/cold_job.py, Debian's python3 and torch) against the real
// server and a CPU worker: on a cold cluster it runs PyTorch's own at once and switches to its
// measured route between steps once the worker has benchmarked its model (issue 40).

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "e2e/e2e_fixture.h"

namespace ucudnn::e2e {
namespace {

// The job's JSON line of `phase` in its output, or null.
nlohmann::json Phase(const std::string& log, const std::string& phase) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.front() != '{') continue;
    auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded() && parsed.value("phase", "") == phase) return parsed;
  }
  return nullptr;
}

using PythonJobTest = E2eTest;

TEST_F(PythonJobTest, AColdJobRunsPyTorchsOwnThenSwitchesToItsRouteBetweenSteps) {
  ServerProcess* server = StartServer("cold");
  ASSERT_NE(server, nullptr);
  const std::string records = LogPath("routes.json");
  std::remove(records.c_str());
  std::string error;
  auto job = ChildProcess::Spawn(
      {"/usr/bin/env", "PYTHONPATH=" UCUDNN_SOURCE_DIR "/python",
       "UCUDNN_LIBRARY=" UCUDNN_TEST_CLIENT_LIBRARY, "UCUDNN_ROUTE_CACHE=" + records,
       "UCUDNN_LOG_LEVEL=warn", "OMP_NUM_THREADS=1", UCUDNN_TEST_PYTHON3,
       UCUDNN_SOURCE_DIR "/tests/e2e/cold_job.py", server->address(), kToken},
      LogPath("cold_job"), &error);
  ASSERT_NE(job, nullptr) << error;

  // No worker until the job is prepared: no timing of its model can exist before then.
  ASSERT_TRUE(WaitUntil([&] { return !Phase(job->Log(), "prepared").is_null() || !job->Running(); },
                        seconds(120)));
  const nlohmann::json prepared = Phase(job->Log(), "prepared");
  ASSERT_FALSE(prepared.is_null()) << job->LogTail();
  // prepare(wait_ms=30000) waits for the planner's answers, not for benchmarks.
  EXPECT_LT(prepared["seconds"].get<double>(), 20.0) << "prepare() waited for the benchmarks";
  EXPECT_EQ(prepared["route"]["route"], "native");
  EXPECT_EQ(prepared["route"]["source"], "plans missing");
  EXPECT_EQ(prepared["stats"]["route"]["source"], "plans missing");
  EXPECT_EQ(prepared["stats"]["planned_calls"], 0);

  ASSERT_NE(StartWorker("cold"), nullptr);
  const auto status = job->WaitExit(seconds(150));
  ASSERT_TRUE(status.has_value()) << "the job did not end\n" << job->LogTail();
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << job->LogTail();
  const std::string log = job->Log();

  // PyTorch's own ran every step until the plans came; then the step's route was measured
  // between two steps and recorded.
  const nlohmann::json switched = Phase(log, "switched");
  ASSERT_FALSE(switched.is_null()) << log;
  EXPECT_EQ(switched["route"]["source"], "measured") << switched.dump();
  EXPECT_EQ(switched["planned_while_pending"], 0) << switched.dump();
  EXPECT_GE(switched["steps"].get<int>(), 16) << "decided before a look between steps";
  EXPECT_EQ(switched["layer_routes"]["undecided"], 0) << switched.dump();
  EXPECT_GT(QueryOr("SELECT count(*) FROM timings"), 0);

  // The next job of the same step takes that route from the record, with nothing pending.
  const nlohmann::json next = Phase(log, "next_job");
  ASSERT_FALSE(next.is_null()) << log;
  EXPECT_EQ(next["route"]["source"], "recorded");
  EXPECT_EQ(next["route"]["route"], switched["route"]["route"]);
  EXPECT_EQ(next["stats_route"]["source"], "recorded");
}

}  // namespace
}  // namespace ucudnn::e2e
