// The compile helpers' pool (compile_pool.h) with stand-in helpers (shell loops speaking the line
// protocol), and the protocol itself. The real helper builds cuDNN plans: the GPU runs cover it
// (docs/results.md, issue 40).
#include "ucudnn/worker/compile_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace ucudnn::worker {
namespace {

using std::chrono::milliseconds;
using Task = PlanCompiler::Task;

std::vector<Task> Tasks(int n, const std::string& problem = "p") {
  std::vector<Task> tasks;
  for (int i = 1; i <= n; ++i) tasks.push_back({problem, i, i % 2, "eng" + std::to_string(i)});
  return tasks;
}

// A stand-in helper: `body` runs as a POSIX shell loop over the task lines.
CompilePoolConfig ShellHelpers(const std::string& body, int processes) {
  CompilePoolConfig config;
  config.command = {"/bin/sh", "-c", body};
  config.processes = processes;
  config.idle_exit = milliseconds(200);
  config.await_timeout = milliseconds(20000);
  return config;
}

std::string TempFile(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid())))
      .string();
}

// The task lines stand-in helpers were sent (RecordingHelpers), in a file of the test's own that
// is removed at its end.
class SentLines {
 public:
  explicit SentLines(const std::string& name) : path_(TempFile(name)) {
    std::filesystem::remove(path_);
  }
  ~SentLines() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }
  std::vector<std::string> Read() const {
    std::ifstream in(path_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::string path_;
};

// Stand-in helpers that append each task line to `sent` and answer "ok" after `seconds`.
CompilePoolConfig RecordingHelpers(const SentLines& sent, const std::string& seconds,
                                   int processes) {
  return ShellHelpers("while read -r line; do echo \"$line\" >> " + sent.path() + "; sleep " +
                          seconds + "; echo ok; done",
                      processes);
}

std::vector<std::string> TaskLines(const std::vector<Task>& tasks) {
  std::vector<std::string> lines;
  for (const Task& task : tasks) lines.push_back(TaskLine(task));
  return lines;
}

// Queues `tasks`, awaits each, and says what the pool counted.
CompilePool::Counts BuildAll(CompilePool& pool, const std::vector<Task>& tasks) {
  pool.Queue(tasks);
  for (const Task& task : tasks) pool.Await(task);
  return pool.counts();
}

TEST(PlanCompilerProtocol, ATaskLineParsesBackToTheTask) {
  const Task task{"fwd|c96|h56", 128, 1, "eng5{k2=1}"};
  const std::string line = TaskLine(task);
  EXPECT_EQ(line, "fwd|c96|h56\t128\t1\teng5{k2=1}");
  Result<Task> parsed = ParseTaskLine(line);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->Key(), task.Key());
  EXPECT_NE(parsed->Key(), (Task{"fwd|c96|h56", 128, 0, "eng5{k2=1}"}.Key()));
  for (const char* bad : {"", "p\t1\t0", "p\t1\t0\tc\tx", "p\tx\t0\tc", "\t1\t0\tc", "p\t1\t0\t",
                          "p\t0\t0\tc", "p\t1\t2\tc", "p\t1\t-1\tc"}) {
    Result<Task> refused = ParseTaskLine(bad);
    EXPECT_FALSE(refused.ok()) << "'" << bad << "'";
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CompileProcessesTest, AutoFollowsTheCoresAndTheMemoryLimit) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_EQ(CompileProcesses(3, 2, 1 * kGiB), 3) << "asked for: as asked";
  EXPECT_EQ(CompileProcesses(0, 64, std::nullopt), 0);
  EXPECT_EQ(CompileProcesses(-1, 16, std::nullopt), 6);
  EXPECT_EQ(CompileProcesses(-1, 8, std::nullopt), 3);
  EXPECT_EQ(CompileProcesses(-1, 2, std::nullopt), 0) << "a two-core machine builds itself";
  EXPECT_EQ(CompileProcesses(-1, 16, 4 * kGiB), 2) << "a 4 GiB container";
  EXPECT_EQ(CompileProcesses(-1, 16, 2 * kGiB), 0);
  EXPECT_EQ(CompileProcesses(-1, 16, kGiB / 2), 0);
  EXPECT_EQ(CompileProcesses(-1, 16, 64 * kGiB), 6);
}

TEST(CompilePoolTest, EveryTaskIsSentOnceAndAwaitReturnsWhenItIsBuilt) {
  const SentLines sent("compile_pool_seen");
  CompilePool pool(RecordingHelpers(sent, "0.02", 3));
  const std::vector<Task> tasks = Tasks(12);
  pool.Queue(tasks);
  pool.Queue(tasks);  // known tasks are not queued twice
  for (const Task& task : tasks) EXPECT_TRUE(pool.Await(task));
  EXPECT_FALSE(pool.Await({"never", 1, 0, "queued"}));
  const CompilePool::Counts counts = pool.counts();
  EXPECT_EQ(counts.built, 12);
  EXPECT_EQ(counts.failed, 0);
  EXPECT_GE(counts.helpers_started, 1);
  EXPECT_LE(counts.helpers_started, 3);
  EXPECT_THAT(sent.Read(), ::testing::UnorderedElementsAreArray(TaskLines(tasks)));
}

TEST(CompilePoolTest, AwaitMovesItsTaskAheadOfTheQueue) {
  const SentLines sent("compile_pool_order");
  CompilePool pool(RecordingHelpers(sent, "0.05", 1));
  const std::vector<Task> tasks = Tasks(20);
  pool.Queue(tasks);
  pool.Await(tasks.back());
  // One helper: at most the task in hand when Await came went before it.
  const std::vector<std::string> lines = sent.Read();
  const auto at = std::find(lines.begin(), lines.end(), TaskLine(tasks.back()));
  ASSERT_NE(at, lines.end());
  EXPECT_LE(at - lines.begin(), 2) << "the awaited task waited behind the queue";
  for (const Task& task : tasks) pool.Await(task);
  EXPECT_EQ(pool.counts().built, 20);
}

TEST(CompilePoolTest, DroppedTasksAreNotBuilt) {
  // One slow helper: while it builds the first task, the benchmark leaves out the configurations
  // of eleven others, which are not sent; awaiting one says it was never queued.
  const SentLines sent("compile_pool_dropped");
  CompilePool pool(RecordingHelpers(sent, "0.2", 1));
  const std::vector<Task> tasks = Tasks(14);
  pool.Queue(tasks);
  const std::vector<Task> dropped(tasks.begin() + 2, tasks.begin() + 13);
  pool.Drop(dropped);
  pool.Drop(dropped);  // once is enough; unknown and finished tasks are ignored
  pool.Drop({{"never", 1, 0, "queued"}});
  for (const Task& task : dropped) EXPECT_FALSE(pool.Await(task));
  EXPECT_TRUE(pool.Await(tasks.back()));
  EXPECT_TRUE(pool.Await(tasks[1]));
  EXPECT_TRUE(pool.Await(tasks[0]));
  const CompilePool::Counts counts = pool.counts();
  EXPECT_EQ(counts.built, 3);
  EXPECT_EQ(counts.dropped, 11);
  EXPECT_THAT(sent.Read(),
              ::testing::UnorderedElementsAreArray(TaskLines({tasks[0], tasks[1], tasks.back()})));
}

TEST(CompilePoolTest, AHelperThatDiesFailsItsTaskAndAnotherTakesItsPlace) {
  // Each helper takes one task and exits without answering.
  CompilePool pool(ShellHelpers("read -r line; exit 3", 2));
  const CompilePool::Counts counts = BuildAll(pool, Tasks(5));
  EXPECT_EQ(counts.failed, 5);
  EXPECT_EQ(counts.built, 0);
  EXPECT_EQ(counts.helpers_started, 5);
}

TEST(CompilePoolTest, AnErrorAnswerFailsTheTaskAndTheHelperGoesOn) {
  CompilePool pool(ShellHelpers("while read -r line; do echo 'error: not this one'; done", 2));
  const CompilePool::Counts counts = BuildAll(pool, Tasks(6));
  EXPECT_EQ(counts.failed, 6);
  EXPECT_LE(counts.helpers_started, 2);
}

TEST(CompilePoolTest, WithoutAHelperEveryPlanIsLeftToTheCaller) {
  CompilePoolConfig config = ShellHelpers("", 2);
  config.command = {"/nonexistent/ucudnn-compile-helper"};
  CompilePool pool(config);
  const std::vector<Task> tasks = Tasks(3);
  pool.Queue(tasks);
  const auto start = std::chrono::steady_clock::now();
  for (const Task& task : tasks) pool.Await(task);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "Await waited for a helper that never started";
  EXPECT_EQ(pool.counts().built, 0);
  pool.Queue(Tasks(2, "q"));  // ignored from then on
  EXPECT_EQ(pool.counts().helpers_started, 0);
}

TEST(CompilePoolTest, IdleHelpersExitAndNewWorkStartsOthers) {
  CompilePool pool(ShellHelpers("while read -r line; do echo ok; done", 2));
  const int64_t started = BuildAll(pool, Tasks(2, "a")).helpers_started;
  std::this_thread::sleep_for(milliseconds(800));  // idle_exit is 200 ms
  const CompilePool::Counts counts = BuildAll(pool, Tasks(2, "b"));
  EXPECT_EQ(counts.built, 4);
  EXPECT_GT(counts.helpers_started, started) << "the idle helpers did not exit";
}

TEST(CompilePoolTest, StoppingDoesNotWaitForACompilationInHand) {
  const auto start = std::chrono::steady_clock::now();
  {
    // The helper's shell is stopped; its sleep does not hold the answer pipe.
    CompilePool pool(ShellHelpers(
        "while read -r line; do sleep 30 </dev/null >/dev/null 2>&1; echo ok; done", 2));
    pool.Queue(Tasks(4));
    std::this_thread::sleep_for(milliseconds(300));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace ucudnn::worker
