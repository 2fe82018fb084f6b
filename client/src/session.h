// The backend-generic core of the client library. A Session executes kernels on a ConvBackend:
// as the plan's micro-batches when a plan that fits is published, else undivided with the
// backend's best algorithm within the workspace given. Plans come from a background planner
// thread (PlanSource, normally the gRPC planner) and the local plan cache; the calling thread
// never waits for them.
//
// Hot path (a kernel already seen): one hash lookup in a lock-free table, one atomic load of the
// plan pointer, relaxed counter increments; no allocation, no lock, no synchronisation.
//
// One class in four files: session.cc (construction, registration, waits, reports),
// session_hot_path.cc (the calling threads), session_planner.cc (the plan fetcher: the planner
// thread, publication, the local cache) and session_contribution.cc (contribution).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
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
#include "ucudnn/core/executor.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/engine/benchmark.h"

namespace ucudnn::client {

// How one call runs undivided. The session chooses the algorithm once per kernel and workspace
// size (through ChooseAlgorithm) and caches the choice.
class UndividedRunner {
 public:
  virtual ~UndividedRunner() = default;
  // The backend's own best algorithm for this call within `workspace_bytes`.
  virtual Result<int> ChooseAlgorithm(size_t workspace_bytes) = 0;
  virtual Status Run(int algo, void* workspace, size_t workspace_bytes) = 0;
  // Called before Run() when the call runs undivided because the kernel's plan is the
  // framework's own convolution (not for lack of a plan).
  virtual void NoteFramework() {}
};

// Undivided on a ConvBackend. The choice is the workspace rule: of the algorithms that run this
// problem within the workspace, the one that needs the most (on the CPU backend, and mostly on
// cuDNN, more workspace buys speed); ties go to the lower id. `algorithms` are the ids to
// consider (the session passes the list it keeps, so that choosing allocates nothing); empty:
// every algorithm of backend.Algorithms().
class BackendUndividedRunner final : public UndividedRunner {
 public:
  BackendUndividedRunner(ConvBackend& backend, const ConvProblem& problem, int64_t batch,
                         const ConvOperands& operands, float alpha, float beta,
                         std::span<const int> algorithms = {})
      : backend_(backend),
        problem_(problem),
        batch_(batch),
        operands_(operands),
        alpha_(alpha),
        beta_(beta),
        algorithms_(algorithms) {}
  Result<int> ChooseAlgorithm(size_t workspace_bytes) override;
  Status Run(int algo, void* workspace, size_t workspace_bytes) override;

 private:
  ConvBackend& backend_;
  const ConvProblem& problem_;
  int64_t batch_;
  const ConvOperands& operands_;
  float alpha_;
  float beta_;
  std::span<const int> algorithms_;
};

// Resolves once per plan what its runs need on the backend, so that a planned call costs no
// lookup beyond the kernel table's (the cuDNN handle binds one descriptor set per micro-batch
// size; without a binder, segments go through the backend's Run()). Called on caller threads.
class PlanBinder {
 public:
  virtual ~PlanBinder() = default;
  // A runner for `segments` of `problem`; on error the plan runs through the backend.
  virtual Result<std::unique_ptr<MicroBatchRunner>> Bind(const ConvProblem& problem,
                                                         std::span<const Segment> segments) = 0;
};

// The backend contribution benchmarks run on: the library's own (on cuDNN a handle and stream
// of its own on the job's device, never the caller's), made on the contributing thread for one
// contribution and destroyed after it. Its fingerprint must be the session backend's.
using ContributionBackendFactory = std::function<Result<std::unique_ptr<ConvBackend>>()>;

// What a front end (the cuDNN handle, a test) adds to a session.
struct SessionHooks {
  PlanBinder* binder = nullptr;  // outlives the session
  // Per-kernel mode: a kernel is its problem, batch and limit, so one declared at another limit
  // is another kernel with a plan of its own (the shape API, whose callers name each kernel's
  // limit: a budget changed by prepare(), a curve's limits side by side). Otherwise (the cuDNN
  // handle, whose calls pass whatever workspace the framework has) a kernel keeps the limit of
  // its first declaration or call.
  bool kernels_by_limit = false;
  ContributionBackendFactory contribution_backend;
  // Benchmark effort of contributions (the worker's defaults unless a test lowers them).
  BenchmarkOptions benchmark;
};

// The framework's own measured time of one kernel at its full mini-batch, to submit.
struct FrameworkTiming {
  ConvProblem problem;
  int64_t batch = 0;
  double time_ms = 0;
  double spread_ms = 0;
  uint64_t workspace_bytes = 0;
};

// Where a kernel stands, for the shape-level C API's ucudnnShapeGetKernelInfo.
struct KernelInfo {
  // kMissing: no plan while the cluster benchmarks its problem (asked again later); kNoPlan: no
  // plan for another reason (infeasible, disabled, no server, failed).
  enum class State { kWaiting = 0, kPlanned = 1, kFramework = 2, kNoPlan = 3, kMissing = 4 };
  State state = State::kWaiting;
  int32_t segments = 0;
  double predicted_ms = 0;
  double framework_ms = 0;
  double undivided_ms = 0;
  uint64_t workspace_bytes = 0;
  uint64_t framework_workspace_bytes = 0;
};

class Session {
 public:
  // PlanWorkspace() and PlannedWorkspace(): the kernel's plan is the framework's own convolution.
  static constexpr int64_t kFrameworkPlan = -3;
  // `backend` outlives the session; it is used only on the threads that call Execute()/Declare()
  // (and here, for the library's workspace in the total modes). `source` stands in for the gRPC
  // planner (tests); when null, the planner at config.server is used, or none when it is empty.
  static std::unique_ptr<Session> Create(ConvBackend& backend, const ClientConfig& config,
                                         std::unique_ptr<PlanSource> source = nullptr,
                                         SessionHooks hooks = {});
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
  // For callers that run a kernel without a plan themselves (the shape-level C API): declares
  // the kernel as Declare() does, then the workspace the caller must pass for its plan to run
  // (0 when the plan runs in the library's workspace, total modes), or -1 when it has no plan
  // that can run here now; the caller then runs the call itself, and it is counted as this
  // kernel's fallback call (passthrough when disabled, untracked beyond the table); or
  // kFrameworkPlan when the plan is the framework's own convolution (counted as a framework call:
  // the caller runs its own). Allocation-free once the kernel is known.
  int64_t PlannedWorkspace(const ConvProblem& problem, int64_t batch, uint64_t limit);

  // The same three for a kernel looked up once (the shape-level C API's kernel handles), so that
  // a call costs no hash lookup. Kernel(): the kernel's entry, registered with `limit` at first
  // sight; nullptr when disabled or the table is full (the caller then runs every call itself,
  // counting it with CountUntracked()). Entries live as long as the session.
  KernelState* FindKernel(const ConvProblem& problem, int64_t batch, uint64_t limit);
  // PlannedWorkspace() of `kernel` (a fallback call counted when it answers -1).
  int64_t PlannedWorkspace(KernelState& kernel);
  // The workspace `kernel`'s plan needs from the caller now, counting nothing: negative when it
  // has no plan that can run here (kFrameworkPlan when the plan is the framework's own).
  int64_t PlanWorkspace(KernelState& kernel);
  Status Execute(KernelState& kernel, const ConvOperands& operands, void* workspace,
                 size_t workspace_bytes, float alpha, float beta, UndividedRunner& runner);
  void CountUntracked() { untracked_calls_.fetch_add(1, std::memory_order_relaxed); }
  KernelInfo Info(const KernelState& kernel) const;

  // Submits the framework's own times of `timings` (algo kFrameworkAlgo, this session's
  // framework identity) through the contribution path, then asks for those kernels' plans again
  // in the background, whatever their state. kUnavailable without a server, a framework identity
  // or a token, or when the server refuses; kInvalidArgument for a bad timing.
  Status SubmitFrameworkTimings(const std::vector<FrameworkTiming>& timings);
  // The framework identity plans are asked with (ClientConfig::framework when valid, else empty).
  const std::string& framework() const { return framework_; }
  // Total modes: declares `kernels` (their problems and mini-batches) and plans the network of
  // every kernel declared so far now. Per-kernel mode: declares them with the configured limit.
  void Prepare(const std::vector<Kernel>& kernels);
  // Total modes: the kernels declared so far are the network; plan it now. With contribution on,
  // this is a quiet point: it waits for the server's answers (about one deadline) and
  // contributes the missing timings (Contribute()).
  void Prepare();

  // Blocks until no kernel waits for a server answer (or collection), at most `timeout`. With
  // contribution on, a quiet point: missing timings are then benchmarked and submitted (problems
  // are not started once `timeout` has passed), and the re-asked plans waited for in what is
  // left of `timeout`.
  bool WaitForPlans(std::chrono::milliseconds timeout);
  // Builds, at a quiet point, what the first call of each plan published so far would: its
  // workspace query and bound runner (execution plans; a runtime-compiled engine's takes 0.3-1 s
  // to build), so that the steps after it run at full speed from the first. Calls the backend:
  // the caller keeps other calls of this session out meanwhile. Returns the plans verified.
  size_t BindPlans();
  // The same wait without contribution: until no kernel waits for an answer, at most until
  // `deadline`.
  bool WaitForAnswers(std::chrono::steady_clock::time_point deadline);

  // Contribution, on the calling thread, which must be at a quiet point (no training work in
  // flight on the device). When contribution is on and the server reported missing timings for
  // some kernels: asks the server whether a live worker serves this device; if none does,
  // benchmarks each missing problem (up to its largest mini-batch, with the session's batch-size
  // policy) on the hooks' contribution backend, submits the timings and asks for those kernels'
  // plans again. The number of problems submitted (0: contribution off, nothing missing, or a
  // worker serves the device); an error when the server could not be asked. Problems are not
  // started after `deadline`.
  Result<int> Contribute(std::chrono::steady_clock::time_point deadline =
                             std::chrono::steady_clock::time_point::max());
  // Whether contribution is on (configured, with a token, a server and a backend to measure on).
  bool contribution_enabled() const { return contribution_enabled_; }

  ClientStats Stats() const;
  std::vector<KernelReport> Kernels() const;
  // Counted by callers that pass a call on without the session (disabled, unmodelled).
  void CountPassthrough() { passthrough_calls_.fetch_add(1, std::memory_order_relaxed); }

  const ClientConfig& config() const { return config_; }
  // The mode in force (a total mode without a budget or workspace runs per kernel).
  WorkspaceMode workspace_mode() const { return mode_; }
  ConvBackend& backend() { return backend_; }
  // The plan in use for a kernel (of `limit` where kernels are by limit), or null; for tests
  // (workspace slices, failure flags).
  const PlanEntry* PlanOf(const ConvProblem& problem, int64_t batch, uint64_t limit = 0) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    KernelState* kernel = nullptr;
    int attempts = 0;
    Clock::time_point due;
  };

  Session(ConvBackend& backend, const ClientConfig& config, std::unique_ptr<PlanSource> source,
          SessionHooks hooks);

  // ---- session.cc: construction, registration, waits and reports.
  // The constructor's phases: the gRPC planner at config.server (unless a source was given);
  // contribution when its needs are met; the library workspace of the total modes (per kernel
  // instead when there is none).
  void ConnectPlanner();
  void EnableContribution();
  void AllocateLibraryWorkspace();
  // Rare path: first sight of a kernel. Takes the mutex; nullptr when the table is full.
  KernelState* Register(const ConvProblem& problem, int64_t batch, uint64_t hash, uint64_t limit,
                        std::string_view name);
  bool AnyWaiting() const;

  // ---- session_hot_path.cc: the calling threads.
  // The kernel's entry, registered (with `limit`) at first sight; nullptr when the table is full.
  KernelState* FindOrRegister(const ConvProblem& problem, int64_t batch, uint64_t limit,
                              std::string_view name = {});
  // The workspace the plan needs here; fills the plan's verification cache.
  int64_t Verify(const PlanEntry& plan, const ConvProblem& problem);
  Result<int> FallbackAlgorithm(KernelState* kernel, size_t workspace_bytes,
                                UndividedRunner& runner);
  // Rare path: `plan` failed while running after `completed` segments. Drops the plan (logged
  // once) and finishes the call undivided when that gives the right result: the whole batch again
  // when nothing was written yet or beta = 0 (the output is rewritten whole); otherwise the
  // samples the plan did not reach, accumulated onto what it wrote (see session_hot_path.cc).
  Status RecoverFailedPlan(KernelState* kernel, const PlanEntry& plan, const Status& failure,
                           size_t completed, const ConvProblem& problem, int64_t batch,
                           const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                           void* plan_workspace, size_t plan_workspace_bytes, float alpha,
                           float beta, UndividedRunner& undivided);
  // The micro-batches [first segment `from`, end) as one undivided call on the backend.
  Status RunRemainder(const ConvProblem& problem, int64_t batch, const PlanEntry& plan, size_t from,
                      const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                      float alpha, float beta);
  // The algorithm ids of `op`, kept so that choosing one allocates nothing.
  std::span<const int> AlgorithmIds(ConvOp op) const;

  // ---- session_planner.cc: the plan fetcher (the planner thread).
  // PlannerLoop(), restarted after anything it throws.
  void PlannerMain();
  void PlannerLoop();
  // With mutex_ held: takes the due per-kernel requests out of pending_ (at most one request's
  // worth; of one limit only where the source answered without per-kernel limits); `wake`
  // becomes the earliest time a kernel left there is due.
  std::vector<Pending> TakeDueKernels(Clock::time_point now, Clock::time_point& wake);
  // Each returns with the lock held. They drop it around the call to the source.
  void RunPerKernelRequest(std::unique_lock<std::mutex>& lock, std::vector<Pending>& batch);
  void RunNetworkRequest(std::unique_lock<std::mutex>& lock);
  void SaveCache(std::unique_lock<std::mutex>& lock);
  // Counts and sends `request` with the lock dropped (AskSource); nullopt when the session
  // stopped meanwhile. `asked_epoch`: contribution_epoch_ when it was sent.
  std::optional<Result<NetworkPlan>> SendRequest(std::unique_lock<std::mutex>& lock,
                                                 const PlanRequest& request, uint64_t& asked_epoch);
  // GetPlan with exceptions turned into errors and the answer's size checked.
  Result<NetworkPlan> AskSource(const PlanRequest& request);
  // With mutex_ held from here on.
  // The source's answer for one kernel of a per-kernel request (at `position`; the request's
  // limit `request_limit`): published, waiting again, or infeasible.
  void AcceptKernelPlan(Pending& pending, const KernelPlan& kernel_plan, size_t position,
                        uint64_t request_limit, uint64_t asked_epoch);
  // A failed request counted, warned about once until the source answers again (`what`: "plans",
  // "network plan"); NoteRequestAnswered() ends the warning.
  void NoteRequestFailed(const Status& failure, std::string_view what);
  void NoteRequestAnswered();
  // The network is asked for again after the backoff.
  void RetryNetworkLater();
  // The network is asked for again at once, its backoff reset.
  void AskNetworkAgainNow();
  // Publishes the local cache's plan of exactly `request_kernels`, if it has one.
  bool PublishCachedNetwork(const std::vector<KernelState*>& kernels,
                            const std::vector<Kernel>& request_kernels);
  // Publishes the source's network plan for `answered`, then settles what comes next: asked
  // again at once (stale), cached (complete), or asked again later (timings missing).
  void AcceptNetworkPlan(const std::vector<KernelState*>& answered, const NetworkPlan& answer,
                         uint64_t asked_epoch, uint64_t generation);
  void Publish(KernelState* kernel, std::unique_ptr<PlanEntry> entry);
  void Unpublish(KernelState* kernel);
  std::unique_ptr<PlanEntry> MakeEntry(const KernelPlan& plan, uint64_t limit, bool from_cache);
  // Publishes a total-mode plan: each planned kernel's slice of the library workspace.
  // `asked_epoch` is contribution_epoch_ when the request was sent; returns whether a kernel the
  // answer calls missing had its timings contributed since (the answer is stale for it: it stays
  // waiting, to be asked again at once).
  bool PublishNetwork(const std::vector<KernelState*>& kernels, const NetworkPlan& plan,
                      bool from_cache, uint64_t asked_epoch);
  // Whether `kernel`'s timings were contributed after a request sent at `asked_epoch`.
  bool ContributedSince(const KernelState* kernel, uint64_t asked_epoch) const {
    return kernel->contributed_epoch > asked_epoch;
  }
  // Up to the configured maximum, or `max_ms` where that is less.
  Clock::duration Backoff(int attempts, int64_t max_ms = INT64_MAX);
  PlanRequest MakeRequest(uint64_t limit) const;

  // ---- session_contribution.cc: Contribute()'s phases.
  // A problem the server lacks timings for, with every micro-batch size of the policy that one
  // of its kernels needs.
  struct MissingProblem {
    ConvProblem problem;
    std::set<int64_t> sizes;
  };
  // What the server reported missing, less what this session already submitted. Takes mutex_.
  std::vector<MissingProblem> MissingProblems() const;
  // How many live workers serve this device (the server's answer); an error when it cannot say.
  Result<int> LiveWorkersOfDevice();
  // The backend contribution measures on, checked to be the job's device.
  Result<std::unique_ptr<ConvBackend>> OpenContributionBackend();
  // Benchmarks `missing` on `bench`, submits the timings that speak for the device and asks its
  // kernels' plans again; whether anything was submitted.
  bool ContributeProblem(ConvBackend& bench, const MissingProblem& missing,
                         const std::string& measured_by);
  // SubmitTimings through the source, with what it throws turned into an error; a failure is
  // logged.
  Result<int> SubmitTimings(const ConvProblem& problem, const std::vector<Timing>& timings,
                            const std::string& measured_by);
  // With mutex_ held: after timings of `problem` were submitted, its kernels that lacked them
  // (with `planned_too`, every kernel of it: the framework's own timings may change any plan)
  // are asked for again at once.
  void AskAgainAfterContribution(const ConvProblem& problem, bool planned_too = false);

  // Slices of the library's workspace start on this boundary (cuDNN wants aligned workspaces).
  static constexpr size_t kSliceAlignment = 256;

  ConvBackend& backend_;
  const ClientConfig config_;
  const DeviceFingerprint device_;
  WorkspaceMode mode_ = WorkspaceMode::kPerKernel;
  BatchPolicy policy_ = BatchPolicy::kPowerOfTwo;
  AlgorithmSpace algorithms_ = AlgorithmSpace::kAll;
  std::string framework_;  // framework()
  // The local plan cache's records are keyed without the algorithm space: only the default uses it.
  bool UsesPlanCache() const { return algorithms_ == AlgorithmSpace::kAll; }
  KernelTable table_;
  // Set once the table refused a kernel: later unknown kernels skip registration (no lock, no
  // allocation) and run untracked.
  std::atomic<bool> table_full_{false};
  std::array<std::vector<int>, 3> algorithm_ids_;  // by ConvOp
  PlanBinder* binder_ = nullptr;
  bool kernels_by_limit_ = false;  // SessionHooks::kernels_by_limit; KeyLimit()
  // Whether a kernel's limit is part of its identity (kernels by limit, per-kernel mode).
  bool KernelsByLimit() const { return kernels_by_limit_ && mode_ == WorkspaceMode::kPerKernel; }
  // The limit that is part of a kernel's identity: `limit` where kernels are by limit, none
  // otherwise.
  std::optional<uint64_t> KeyLimit(uint64_t limit) const {
    return KernelsByLimit() ? std::optional(limit) : std::nullopt;
  }
  ContributionBackendFactory contribution_backend_;
  BenchmarkOptions benchmark_options_;
  bool contribution_enabled_ = false;
  std::unique_ptr<BackendBuffer> library_workspace_;
  char* library_workspace_base_ = nullptr;
  size_t library_workspace_bytes_ = 0;

  std::atomic<uint64_t> passthrough_calls_{0};
  std::atomic<uint64_t> untracked_calls_{0};
  std::atomic<uint64_t> plan_requests_{0};
  std::atomic<uint64_t> plan_request_failures_{0};
  std::atomic<uint64_t> plans_received_{0};
  std::atomic<uint64_t> plans_from_cache_{0};
  std::atomic<uint64_t> failed_plans_{0};
  std::atomic<uint64_t> contributed_problems_{0};
  std::atomic<uint64_t> contributed_timings_{0};
  std::atomic<uint64_t> contribution_failures_{0};

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
  bool network_skip_cache_ = false;                // the next network request goes to the source
  // The source answered a kernel's own limit without echoing it (a server older than
  // Kernel.workspace_limit_bytes): one request per limit from then on.
  bool one_limit_per_request_ = false;
  bool prepared_ = false;
  Clock::time_point last_new_kernel_{};
  Clock::time_point network_due_{};
  int network_attempts_ = 0;
  bool table_full_warned_ = false;
  bool unavailable_warned_ = false;
  // Contribution: (problem, micro-batch size) already benchmarked and submitted by this session.
  std::vector<std::pair<ConvProblem, int64_t>> contributed_;
  uint64_t contribution_epoch_ = 0;  // bumped per submitted problem
  std::mutex contribute_mutex_;      // one contribution at a time; never taken with mutex_ held
  bool stop_ = false;
  std::minstd_rand jitter_;
  std::thread planner_;
};

}  // namespace ucudnn::client
