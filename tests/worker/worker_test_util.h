// Helpers of the worker daemon's integration tests: tiny problems, a CPU backend under another
// device name, child processes of the real ucudnn-worker binary, polling.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ucudnn/core/backend_factory.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/worker/benchmark.h"
#include "ucudnn/worker/daemon.h"

extern char** environ;

namespace ucudnn::worker::testing {

// A 3x3 convolution small enough that its table takes milliseconds on the CPU backend.
inline ConvProblem TinyProblem(ConvOp op, int64_t channels) {
  ConvProblem p;
  p.op = op;
  p.c = channels;
  p.h = 8;
  p.w = 8;
  p.k = 4;
  p.r = 3;
  p.s = 3;
  p.pad_h = 1;
  p.pad_w = 1;
  return p;
}

// A problem whose table takes a few seconds with SlowFlags() (the direct algorithm dominates).
inline ConvProblem SlowProblem() {
  ConvProblem p;
  p.op = ConvOp::kBackwardFilter;
  p.c = 32;
  p.h = 16;
  p.w = 16;
  p.k = 32;
  p.r = 3;
  p.s = 3;
  p.pad_h = 1;
  p.pad_w = 1;
  return p;
}
inline constexpr int64_t kSlowMaxMicroBatch = 12;
inline constexpr BatchPolicy kSlowPolicy = BatchPolicy::kAll;  // 12 sizes x 3 algorithms

// Benchmark settings of the child process on SlowProblem(): many runs per configuration.
inline std::vector<std::string> SlowFlags() {
  return {"--warmup-runs", "2",  "--min-runs",         "10",
          "--max-runs",    "10", "--config-budget-ms", "5000"};
}

// As few runs as the engine allows: tests check bookkeeping, not timings.
inline BenchmarkOptions FastBenchmarkOptions() {
  BenchmarkOptions o;
  o.warmup_runs = 0;
  o.min_runs = 1;
  o.max_runs = 1;
  o.config_time_budget_ms = 50;
  return o;
}

inline size_t ExpectedTimings(ConvBackend& backend, const ConvProblem& p, int64_t max_micro_batch,
                              BatchPolicy policy) {
  return MicroBatchSizes(policy, max_micro_batch).size() * backend.Algorithms(p.op).size();
}

// The CPU backend presented under another device name, so tests can have several device
// models (one fingerprint each) on one machine. Still backend "cpu": never presented as a GPU.
class RenamedCpuBackend : public ConvBackend {
 public:
  explicit RenamedCpuBackend(const std::string& name) {
    inner_ = std::move(MakeBackend("cpu")).value();
    fingerprint_ = inner_->fingerprint();
    fingerprint_.name = name;
  }
  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }
  std::vector<AlgorithmInfo> Algorithms(ConvOp op) const override { return inner_->Algorithms(op); }
  Result<size_t> WorkspaceSize(const ConvProblem& p, int64_t batch, int algo) override {
    return inner_->WorkspaceSize(p, batch, algo);
  }
  Status Run(const ConvProblem& p, int64_t batch, int algo, const ConvOperands& operands,
             void* workspace, size_t workspace_bytes, float alpha, float beta) override {
    return inner_->Run(p, batch, algo, operands, workspace, workspace_bytes, alpha, beta);
  }
  Status Synchronize() override { return inner_->Synchronize(); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override {
    if (fail_allocations_) return ResourceExhausted("out of device memory (test)");
    return inner_->Allocate(bytes);
  }
  // Every allocation fails from now on: a device in a bad state.
  void FailAllocations() { fail_allocations_ = true; }
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return inner_->CopyToDevice(dst, src, bytes);
  }
  Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return inner_->CopyToHost(dst, src, bytes);
  }
  Result<std::vector<double>> TimeRuns(const ConvProblem& p, int64_t batch, int algo,
                                       const ConvOperands& operands, void* workspace,
                                       size_t workspace_bytes, int warmup, int runs) override {
    return inner_->TimeRuns(p, batch, algo, operands, workspace, workspace_bytes, warmup, runs);
  }

 private:
  std::unique_ptr<ConvBackend> inner_;
  DeviceFingerprint fingerprint_;
  bool fail_allocations_ = false;
};

inline std::vector<BenchmarkDevice> CpuDevice(const std::string& slot = "cpu") {
  std::vector<BenchmarkDevice> devices;
  devices.push_back({slot, std::move(MakeBackend("cpu")).value()});
  return devices;
}

inline DaemonConfig FastConfig(const std::string& prefix) {
  DaemonConfig c;
  c.id_prefix = prefix;
  c.host = "test-host";
  c.lease = std::chrono::milliseconds(3000);
  c.heartbeat = std::chrono::milliseconds(500);
  c.poll = std::chrono::milliseconds(50);
  c.drain = std::chrono::milliseconds(5000);
  c.retry_initial = std::chrono::milliseconds(50);
  c.retry_max = std::chrono::milliseconds(500);
  c.benchmark = FastBenchmarkOptions();
  return c;
}

// Polls `done` every 50 ms for at most `limit`; true when it held. The limit only bounds a hung
// test: it is generous, not a timing assertion.
inline bool WaitUntil(const std::function<bool()>& done,
                      std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// The binary of this build; UCUDNN_WORKER_BINARY overrides it (tests run from a bundle).
inline std::string WorkerBinary() {
  if (const char* path = std::getenv("UCUDNN_WORKER_BINARY")) return path;
  return std::string(UCUDNN_BINARY_DIR) + "/bin/ucudnn-worker";
}

// The real ucudnn-worker as a child process, its stdout and stderr in a log file.
class ChildWorker {
 public:
  ChildWorker(const std::vector<std::string>& args, std::string log_path)
      : log_path_(std::move(log_path)) {
    std::vector<std::string> all = {WorkerBinary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ChildWorker() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ChildWorker(const ChildWorker&) = delete;
  ChildWorker& operator=(const ChildWorker&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  void Signal(int signal_number) {
    if (pid_ > 0 && !exited_) kill(pid_, signal_number);
  }
  // The wait status once the child exited within `limit`; std::nullopt if it is still running.
  std::optional<int> WaitExit(std::chrono::milliseconds limit) {
    if (exited_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = status;
        return status;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace ucudnn::worker::testing
