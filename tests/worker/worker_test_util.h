// Helpers of the worker daemon's integration tests: tiny problems, a CPU backend under another
// device name, child processes of the real ucudnn-worker binary, polling.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/problems.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/engine/benchmark.h"
#include "ucudnn/worker/daemon.h"

extern char** environ;

namespace ucudnn::worker::testing {

// A 3x3 convolution small enough that its table takes milliseconds on the CPU backend.
inline ConvProblem TinyProblem(ConvOp op, int64_t channels) {
  return test_support::SquareConv(op, channels, 8, 4);
}

// A problem whose table takes a few seconds with SlowFlags() (the direct algorithm dominates).
// A measured row of a timing table: `algo` at micro-batch `b`, `ms` (5 samples), `workspace`.
inline Timing MeasuredEntry(int64_t b, int algo, double ms, uint64_t workspace = 0,
                            TimingStatus status = TimingStatus::kOk) {
  Timing t;
  t.micro_batch = b;
  t.algo = algo;
  t.time_ms = ms;
  t.samples = 5;
  t.workspace_bytes = workspace;
  t.status = status;
  return t;
}

inline ConvProblem SlowProblem() {
  return test_support::SquareConv(ConvOp::kBackwardFilter, 32, 16, 32);
}
inline constexpr int64_t kSlowMaxMicroBatch = 12;
inline constexpr BatchPolicy kSlowPolicy = BatchPolicy::kAll;  // 12 sizes x 3 algorithms

// Benchmark settings of the child process on SlowProblem(): many runs per configuration, and
// every configuration at every size (no probe pruning, no skipping), so that how long the job runs
// does not depend on which configurations the pruning rules leave out.
inline std::vector<std::string> SlowFlags() {
  return {"--warmup-runs",      "2",    "--min-runs",     "10", "--max-runs",    "10",
          "--config-budget-ms", "5000", "--prune-margin", "-1", "--skip-factor", "0"};
}

// As few runs as the engine allows: tests check bookkeeping, not timings.
inline BenchmarkOptions FastBenchmarkOptions() {
  BenchmarkOptions o;
  o.warmup_runs = 1;
  o.min_runs = 1;
  o.max_runs = 1;
  o.config_time_budget_ms = 50;
  // One run each already: no probe pass (the device-loss tests count runs), and no result check
  // (its runs are not timed ones; result_check_test.cc checks it).
  o.prune_margin = -1;
  o.check_results = false;
  return o;
}

inline size_t ExpectedTimings(ConvBackend& backend, const ConvProblem& p, int64_t max_micro_batch,
                              BatchPolicy policy) {
  return MicroBatchSizes(policy, max_micro_batch).size() * backend.Algorithms(p.op).size();
}

// The CPU backend presented under another device name, so tests can have several device
// models (one fingerprint each) on one machine. Still backend "cpu": never presented as a GPU.
// It can also play a GPU in trouble: allocations that fail (all of them, or those above a size,
// as out of device memory), and a device lost after a number of runs (a sticky CUDA error: from
// then on every call fails the way cuDNN calls do, kInternal, and only Healthy() says why).
class RenamedCpuBackend : public ConvBackend {
 public:
  explicit RenamedCpuBackend(const std::string& name) {
    inner_ = std::move(MakeBackend("cpu")).value();
    fingerprint_ = inner_->fingerprint();
    fingerprint_.name = name;
  }
  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }
  std::vector<AlgorithmInfo> Algorithms(ConvOp op) const override { return inner_->Algorithms(op); }
  Result<size_t> WorkspaceSize(const ConvProblem& p, int64_t batch,
                               const Algorithm& algo) override {
    return inner_->WorkspaceSize(p, batch, algo);
  }
  Status Run(const ConvProblem& p, int64_t batch, const Algorithm& algo,
             const ConvOperands& operands, void* workspace, size_t workspace_bytes, float alpha,
             float beta) override {
    UCUDNN_RETURN_IF_ERROR(CountRuns(1));
    return inner_->Run(p, batch, algo, operands, workspace, workspace_bytes, alpha, beta);
  }
  Status Synchronize() override {
    if (lost_) return LostCall("cudaStreamSynchronize");
    return inner_->Synchronize();
  }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override {
    if (lost_) return LostCall("cudaMalloc");
    if (fail_allocations_) return ResourceExhausted("out of device memory (test)");
    if (bytes > allocation_limit_) {
      return ResourceExhausted("out of device memory (test): " + std::to_string(bytes) +
                               " bytes asked, at most " + std::to_string(allocation_limit_));
    }
    return inner_->Allocate(bytes);
  }
  // Every allocation fails from now on: a device in a bad state.
  void FailAllocations() { fail_allocations_ = true; }
  // Allocations of more than `bytes` fail: a device with that much memory free.
  void FailAllocationsAbove(size_t bytes) { allocation_limit_ = bytes; }
  // The device is lost once `runs` more runs (warm-up and timed) have been issued.
  void LoseDeviceAfterRuns(int64_t runs) { runs_left_ = runs; }
  void LoseDeviceNow() { lost_ = true; }
  bool lost() const { return lost_; }
  Status Healthy() override {
    ++health_checks_;
    if (lost_) return DeviceLost("cudaDeviceSynchronize() failed: cudaErrorIllegalAddress (test)");
    return Status::Ok();
  }
  int health_checks() const { return health_checks_; }
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (lost_) return LostCall("cudaMemcpyAsync");
    return inner_->CopyToDevice(dst, src, bytes);
  }
  Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (lost_) return LostCall("cudaMemcpyAsync");
    return inner_->CopyToHost(dst, src, bytes);
  }
  Result<std::vector<double>> TimeRuns(const ConvProblem& p, int64_t batch, const Algorithm& algo,
                                       const ConvOperands& operands, void* workspace,
                                       size_t workspace_bytes, int warmup, int runs) override {
    UCUDNN_RETURN_IF_ERROR(CountRuns(warmup + runs));
    return inner_->TimeRuns(p, batch, algo, operands, workspace, workspace_bytes, warmup, runs);
  }
  Result<std::vector<double>> TimeRunGroups(const ConvProblem& p, int64_t batch,
                                            const Algorithm& algo, const ConvOperands& operands,
                                            void* workspace, size_t workspace_bytes, int warmup,
                                            int samples, int group,
                                            bool device_time_only) override {
    largest_group_ = std::max(largest_group_, group);
    return ConvBackend::TimeRunGroups(p, batch, algo, operands, workspace, workspace_bytes, warmup,
                                      samples, group, device_time_only);
  }
  int largest_group() const { return largest_group_; }

 private:
  static Status LostCall(const std::string& call) {
    return Internal(call + " failed: CUDNN_STATUS_EXECUTION_FAILED (test: device lost)");
  }
  Status CountRuns(int64_t runs) {
    if (lost_) return LostCall("cudnnConvolutionForward");
    if (runs_left_ < 0) return Status::Ok();
    runs_left_ -= runs;
    if (runs_left_ < 0) {
      lost_ = true;
      return LostCall("cudnnConvolutionForward");
    }
    return Status::Ok();
  }

  std::unique_ptr<ConvBackend> inner_;
  DeviceFingerprint fingerprint_;
  bool fail_allocations_ = false;
  size_t allocation_limit_ = SIZE_MAX;
  int64_t runs_left_ = -1;  // -1: never lost by counting
  std::atomic<bool> lost_{false};
  int health_checks_ = 0;
  int largest_group_ = 0;
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
