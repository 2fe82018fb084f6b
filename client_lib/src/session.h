// The backend-generic core of the client library. A Session executes kernels on a ConvBackend:
// as the plan's micro-batches when a plan that fits is published, else undivided with the
// backend's best algorithm within the workspace given. Plans come from a background planner
// thread (PlanSource, normally the gRPC planner) and the local plan cache; the calling thread
// never waits for them.
//
// Hot path (a kernel already seen): one hash lookup in a lock-free table, one atomic load of the
// plan pointer, relaxed counter increments; no allocation, no lock, no synchronisation.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernel_table.h"
#include "plan_cache.h"
#include "plan_source.h"
#include "ucudnn/client/config.h"
#include "ucudnn/client/stats.h"
#include "ucudnn/core/backend.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"

namespace ucudnn::client {

// How one call runs undivided. The session chooses the algorithm once per kernel and workspace
// size (through ChooseAlgorithm) and caches the choice.
class UndividedRunner {
 public:
  virtual ~UndividedRunner() = default;
  // The backend's own best algorithm for this call within `workspace_bytes`.
  virtual Result<int> ChooseAlgorithm(size_t workspace_bytes) = 0;
  virtual Status Run(int algo, void* workspace, size_t workspace_bytes) = 0;
};

// Undivided on a ConvBackend. The choice is the workspace rule: of the algorithms that run this
// problem within the workspace, the one that needs the most (on the CPU backend, and mostly on
// cuDNN, more workspace buys speed); ties go to the lower id.
class BackendUndividedRunner final : public UndividedRunner {
 public:
  BackendUndividedRunner(ConvBackend& backend, const ConvProblem& problem, int64_t batch,
                         const ConvOperands& operands, float alpha, float beta)
      : backend_(backend),
        problem_(problem),
        batch_(batch),
        operands_(operands),
        alpha_(alpha),
        beta_(beta) {}
  Result<int> ChooseAlgorithm(size_t workspace_bytes) override;
  Status Run(int algo, void* workspace, size_t workspace_bytes) override;

 private:
  ConvBackend& backend_;
  const ConvProblem& problem_;
  int64_t batch_;
  const ConvOperands& operands_;
  float alpha_;
  float beta_;
};

class Session {
 public:
  // `backend` outlives the session; it is used only on the threads that call Execute()/Declare()
  // (and here, for the library's workspace in the total modes). `source` stands in for the gRPC
  // planner (tests); when null, the planner at config.server is used, or none when it is empty.
  static std::unique_ptr<Session> Create(ConvBackend& backend, const ClientConfig& config,
                                         std::unique_ptr<PlanSource> source = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs the kernel (problem at `batch`) over `operands`. `workspace` is the caller's: the
  // kernel's limit in per-kernel mode, and what undivided fallbacks use in every mode. `runner`
  // runs undivided calls; null runs them on the backend.
  Status Execute(const ConvProblem& problem, int64_t batch, const ConvOperands& operands,
                 void* workspace, size_t workspace_bytes, float alpha, float beta,
                 UndividedRunner* runner = nullptr);

  // Declares a kernel before its first call (a framework's workspace query, or setup): its plan
  // is looked up or asked for now, for `limit` in per-kernel mode.
  void Declare(const ConvProblem& problem, int64_t batch, uint64_t limit,
               std::string_view name = {});
  // Total modes: declares `kernels` (their problems and mini-batches) and plans the network of
  // every kernel declared so far now. Per-kernel mode: declares them with the configured limit.
  void Prepare(const std::vector<Kernel>& kernels);
  // Total modes: the kernels declared so far are the network; plan it now.
  void Prepare();

  // Blocks until no kernel waits for a server answer (or collection), at most `timeout`.
  bool WaitForPlans(std::chrono::milliseconds timeout);

  ClientStats Stats() const;
  std::vector<KernelReport> Kernels() const;
  // Counted by callers that pass a call on without the session (disabled, unmodelled).
  void CountPassthrough() { passthrough_calls_.fetch_add(1, std::memory_order_relaxed); }

  const ClientConfig& config() const { return config_; }
  // The mode in force (a total mode without a budget or workspace runs per kernel).
  WorkspaceMode workspace_mode() const { return mode_; }
  ConvBackend& backend() { return backend_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    KernelState* kernel = nullptr;
    int attempts = 0;
    Clock::time_point due;
  };

  Session(ConvBackend& backend, const ClientConfig& config, std::unique_ptr<PlanSource> source);

  // Rare path: first sight of a kernel. Takes the mutex; nullptr when the table is full.
  KernelState* Register(const ConvProblem& problem, int64_t batch, uint64_t hash, uint64_t limit,
                        std::string_view name);
  // The workspace the plan needs here; fills the plan's verification cache.
  int64_t Verify(const PlanEntry& plan, const ConvProblem& problem);
  Result<int> FallbackAlgorithm(KernelState* kernel, size_t workspace_bytes,
                                UndividedRunner& runner);

  void PlannerLoop();
  // Each returns with the lock held. They drop it around the call to the source.
  void RunPerKernelRequest(std::unique_lock<std::mutex>& lock, std::vector<Pending> batch);
  void RunNetworkRequest(std::unique_lock<std::mutex>& lock);
  void SaveCache(std::unique_lock<std::mutex>& lock);
  // With the mutex held.
  void Publish(KernelState* kernel, std::unique_ptr<PlanEntry> entry);
  std::unique_ptr<PlanEntry> MakeEntry(const KernelPlan& plan, uint64_t limit, bool from_cache);
  // Publishes a total-mode plan: each planned kernel's slice of the library workspace.
  void PublishNetwork(const std::vector<KernelState*>& kernels, const NetworkPlan& plan,
                      bool from_cache);
  Clock::duration Backoff(int attempts);
  bool AnyWaiting() const;
  PlanRequest MakeRequest(uint64_t limit) const;

  ConvBackend& backend_;
  const ClientConfig config_;
  const DeviceFingerprint device_;
  WorkspaceMode mode_ = WorkspaceMode::kPerKernel;
  BatchPolicy policy_ = BatchPolicy::kPowerOfTwo;
  KernelTable table_;
  std::unique_ptr<BackendBuffer> library_workspace_;
  char* library_workspace_base_ = nullptr;
  size_t library_workspace_bytes_ = 0;

  std::atomic<uint64_t> passthrough_calls_{0};
  std::atomic<uint64_t> untracked_calls_{0};
  std::atomic<uint64_t> plan_requests_{0};
  std::atomic<uint64_t> plan_request_failures_{0};
  std::atomic<uint64_t> plans_received_{0};
  std::atomic<uint64_t> plans_from_cache_{0};

  // Everything below is guarded by mutex_.
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;              // wakes the planner thread
  mutable std::condition_variable answered_cv_;  // wakes WaitForPlans()
  std::unique_ptr<PlanSource> source_;
  PlanCache cache_;
  bool cache_dirty_ = false;
  std::vector<std::unique_ptr<PlanEntry>> plans_;  // every entry ever published, kept alive
  std::vector<Pending> pending_;                   // per-kernel mode
  std::vector<KernelState*> collected_;            // total modes: the network, in order
  uint64_t collected_generation_ = 0;              // bumped per new kernel
  uint64_t planned_generation_ = 0;                // generation of the last network answer
  bool network_retry_ = false;                     // the last answer lacked kernels
  bool prepared_ = false;
  Clock::time_point last_new_kernel_{};
  Clock::time_point network_due_{};
  int network_attempts_ = 0;
  bool table_full_warned_ = false;
  bool unavailable_warned_ = false;
  bool stop_ = false;
  std::minstd_rand jitter_;
  std::thread planner_;
};

}  // namespace ucudnn::client
