// A stand-in PlannerService for the client library's tests: real gRPC on an ephemeral loopback
// port, answers chosen by the test (plans that split the batch as told, errors, MISSING, or a
// handler that holds the call until the test releases it). For contribution it also serves
// CatalogService.ListDevices (live workers as told) and TimingService.SubmitTimings (bearer token
// checked), and can plan from the timings submitted to it with the real per-kernel DP.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ucudnn/client/config.h"
#include "ucudnn/core/backend.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::testing {

// A client configuration that talks to a fake planner at `server`: no plan cache file, a
// generous deadline, quick retries.
inline ClientConfig FakePlannerConfig(const std::string& server) {
  ClientConfig config;
  config.server = server;
  config.cache_path = "";
  config.deadline_ms = 20000;
  config.retry_initial_ms = 20;
  config.retry_max_ms = 200;
  return config;
}

// What the fake answers for each kernel: segments of `micro_batch` samples (the last one takes
// the rest) with `algo`; workspaces are asked of `backend`, so they are real.
struct FakePlanChoice {
  int64_t micro_batch = 2;
  int algo = 1;
  std::string engine_config;  // set: plan this engine configuration (algo kEngineAlgo)
};

class FakePlanner final : public v1::PlannerService::Service {
 public:
  enum class Behaviour {
    kPlan,         // a plan for every kernel (MISSING for the problems set_missing() names)
    kMissing,      // every kernel MISSING
    kError,        // an INTERNAL error
    kFromTimings,  // the DP over the timings submitted; MISSING until they cover the policy
  };

  explicit FakePlanner(ConvBackend& backend)
      : backend_(backend), catalog_(*this), timing_service_(*this) {}
  ~FakePlanner() override { Stop(); }

  // Starts on 127.0.0.1 on a free port; plaintext unless `credentials` say otherwise.
  void Start(
      std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials()) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port_);
    builder.RegisterService(this);
    builder.RegisterService(&catalog_);
    builder.RegisterService(&timing_service_);
    server_ = builder.BuildAndStart();
  }
  void Stop() {
    Release();
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_.reset();
    }
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void set_behaviour(Behaviour b) { behaviour_ = b; }
  // Answers as a server older than Kernel.workspace_limit_bytes: the field unknown, every kernel
  // planned under the request's limit and echoed without one.
  void set_ignore_kernel_limits(bool ignore) { ignore_kernel_limits_ = ignore; }
  // Set: every kernel is planned as the framework's own convolution of this identity (one
  // segment, kFrameworkAlgo), whatever the choice.
  void set_framework_choice(std::string identity) {
    std::lock_guard lock(mutex_);
    framework_choice_ = std::move(identity);
  }
  // Every planned kernel also reports the framework's own as known: its time and workspace.
  void set_known_framework(double ms, uint64_t workspace_bytes) {
    std::lock_guard lock(mutex_);
    known_framework_ms_ = ms;
    known_framework_workspace_ = workspace_bytes;
  }
  void set_choice(FakePlanChoice c) {
    std::lock_guard lock(mutex_);
    choice_ = c;
  }
  // Calls wait in the handler until Release() (or the server stops).
  void Hold() {
    std::lock_guard lock(mutex_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard lock(mutex_);
      held_ = false;
    }
    cv_.notify_all();
  }

  // Problems answered MISSING under kPlan.
  void set_missing(std::vector<ConvProblem> problems) {
    std::lock_guard lock(mutex_);
    missing_ = std::move(problems);
  }
  // Contribution: what ListDevices says of the backend's device, the token SubmitTimings wants.
  void set_live_workers(int n) { live_workers_ = n; }
  void set_token(std::string token) {
    std::lock_guard lock(mutex_);
    token_ = std::move(token);
  }
  int list_devices_calls() const { return list_devices_calls_.load(); }
  int submissions() const { return submissions_.load(); }
  int refused_submissions() const { return refused_submissions_.load(); }
  // The timings stored for `problem` (every submission's, later ones replacing earlier ones).
  std::vector<Timing> timings(const ConvProblem& problem) const {
    std::lock_guard lock(mutex_);
    auto it = timings_.find(StableHash(problem));
    return it == timings_.end() ? std::vector<Timing>{} : it->second;
  }
  std::vector<v1::SubmitTimingsRequest> submitted() const {
    std::lock_guard lock(mutex_);
    return submitted_;
  }

  int calls() const { return calls_.load(); }
  int calls_in_handler() const { return in_handler_.load(); }
  std::vector<v1::GetPlanRequest> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

  grpc::Status GetPlan(grpc::ServerContext* context, const v1::GetPlanRequest* request,
                       v1::GetPlanResponse* response) override {
    ++calls_;
    ++in_handler_;
    FakePlanChoice choice;
    std::string framework_choice;
    double known_framework_ms = 0;
    uint64_t known_framework_workspace = 0;
    {
      std::unique_lock lock(mutex_);
      requests_.push_back(*request);
      cv_.wait(lock, [&] { return !held_ || context->IsCancelled(); });
      choice = choice_;
      framework_choice = framework_choice_;
      known_framework_ms = known_framework_ms_;
      known_framework_workspace = known_framework_workspace_;
    }
    --in_handler_;
    if (behaviour_ == Behaviour::kError) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "fake planner: told to fail");
    }
    Result<PlanRequest> parsed = FromProto(*request);
    if (!parsed.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad request");
    NetworkPlan plan;
    plan.policy = parsed->policy;
    plan.workspace_mode = parsed->workspace_mode;
    plan.workspace_budget_bytes = parsed->workspace_bytes;
    plan.complete = behaviour_ == Behaviour::kPlan;
    if (behaviour_ == Behaviour::kFromTimings) return PlanFromTimings(*parsed, response);
    std::vector<ConvProblem> missing;
    {
      std::lock_guard lock(mutex_);
      missing = missing_;
    }
    for (const Kernel& kernel : parsed->kernels) {
      KernelPlan kp;
      kp.kernel = kernel;
      if (ignore_kernel_limits_) kp.kernel.workspace_limit.reset();
      if (behaviour_ == Behaviour::kMissing ||
          std::find(missing.begin(), missing.end(), kernel.problem) != missing.end()) {
        kp.status = KernelPlanStatus::kMissing;
        kp.reason = "fake planner: no timings";
        plan.complete = false;
        plan.kernels.push_back(kp);
        continue;
      }
      kp.status = KernelPlanStatus::kPlanned;
      kp.framework_ms = known_framework_ms;
      kp.framework_workspace_bytes = known_framework_workspace;
      int64_t left = kernel.mini_batch;
      if (!framework_choice.empty()) {
        const double ms = 0.25 * static_cast<double>(kernel.mini_batch);
        kp.config.segments = {Segment{kernel.mini_batch, kFrameworkAlgo, ms, 0, framework_choice}};
        kp.config.time_ms = ms;
        kp.framework_ms = ms;
        left = 0;
      }
      while (left > 0) {
        Segment s;
        s.micro_batch = std::min(left, choice.micro_batch);
        s.algo = choice.engine_config.empty() ? choice.algo : kEngineAlgo;
        s.engine_config = choice.engine_config;
        s.time_ms = 0.5 * static_cast<double>(s.micro_batch);
        Result<size_t> ws = backend_.WorkspaceSize(kernel.problem, s.micro_batch, AlgorithmOf(s));
        if (!ws.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, ws.status().message());
        s.workspace_bytes = *ws;
        kp.config.segments.push_back(s);
        kp.config.time_ms += s.time_ms;
        kp.config.workspace_bytes = std::max(kp.config.workspace_bytes, s.workspace_bytes);
        left -= s.micro_batch;
      }
      Segment undivided{kernel.mini_batch, 0, 1.0 * static_cast<double>(kernel.mini_batch), 0, {}};
      kp.undivided = undivided;
      plan.total_time_ms += kp.config.time_ms;
      plan.total_undivided_ms += undivided.time_ms;
      plan.total_workspace_bytes += kp.config.workspace_bytes;
      plan.kernels.push_back(kp);
    }
    *response->mutable_plan() = ToProto(plan, parsed->device);
    return grpc::Status::OK;
  }

 private:
  class Catalog final : public v1::CatalogService::Service {
   public:
    explicit Catalog(FakePlanner& fake) : fake_(fake) {}
    grpc::Status ListDevices(grpc::ServerContext*, const v1::ListDevicesRequest*,
                             v1::ListDevicesResponse* response) override {
      ++fake_.list_devices_calls_;
      // Another device with workers first: only the matching fingerprint hash counts.
      DeviceFingerprint other = fake_.backend_.fingerprint();
      other.name += " (another model)";
      v1::Device* d = response->add_devices();
      *d->mutable_fingerprint() = ToProto(other);
      d->set_fingerprint_hash(HashHex(other.Hash()));
      d->set_live_workers(3);
      const DeviceFingerprint& mine = fake_.backend_.fingerprint();
      d = response->add_devices();
      *d->mutable_fingerprint() = ToProto(mine);
      d->set_fingerprint_hash(HashHex(mine.Hash()));
      d->set_live_workers(fake_.live_workers_.load());
      return grpc::Status::OK;
    }

   private:
    FakePlanner& fake_;
  };

  class Timings final : public v1::TimingService::Service {
   public:
    explicit Timings(FakePlanner& fake) : fake_(fake) {}
    grpc::Status SubmitTimings(grpc::ServerContext* context,
                               const v1::SubmitTimingsRequest* request,
                               v1::SubmitTimingsResponse* response) override {
      std::string authorization;
      auto it = context->client_metadata().find("authorization");
      if (it != context->client_metadata().end()) {
        authorization.assign(it->second.data(), it->second.size());
      }
      std::lock_guard lock(fake_.mutex_);
      if (fake_.token_.empty() || authorization != "Bearer " + fake_.token_) {
        ++fake_.refused_submissions_;
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "fake planner: bad token");
      }
      Result<ConvProblem> problem = FromProto(request->problem());
      if (!problem.ok() || request->timings_size() == 0) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "fake planner: bad submission");
      }
      std::vector<Timing>& stored = fake_.timings_[StableHash(*problem)];
      for (const v1::Timing& m : request->timings()) {
        Result<Timing> t = FromProto(m);
        if (!t.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad timing");
        std::erase_if(stored, [&](const Timing& old) {
          return old.micro_batch == t->micro_batch && old.algo == t->algo;
        });
        stored.push_back(*t);
      }
      fake_.submitted_.push_back(*request);
      ++fake_.submissions_;
      response->set_stored(request->timings_size());
      return grpc::Status::OK;
    }

   private:
    FakePlanner& fake_;
  };

  // kFromTimings: what the server does, in small: a problem is covered when its timings have
  // every micro-batch size of the policy up to its largest mini-batch in the request; a covered
  // kernel gets the DP's configuration within the request's limit.
  grpc::Status PlanFromTimings(const PlanRequest& request, v1::GetPlanResponse* response) {
    NetworkPlan plan;
    plan.policy = request.policy;
    plan.workspace_mode = request.workspace_mode;
    plan.workspace_budget_bytes = request.workspace_bytes;
    plan.complete = true;
    for (const Kernel& kernel : request.kernels) {
      int64_t max_batch = 0;
      for (const Kernel& k : request.kernels) {
        if (k.problem == kernel.problem) max_batch = std::max(max_batch, k.mini_batch);
      }
      TimingTable table;
      table.entries = timings(kernel.problem);
      bool covered = !table.entries.empty();
      for (int64_t size : MicroBatchSizes(request.policy, max_batch)) {
        covered = covered && std::any_of(table.entries.begin(), table.entries.end(),
                                         [&](const Timing& t) { return t.micro_batch == size; });
      }
      KernelPlan kp;
      kp.kernel = kernel;
      if (!covered) {
        kp.status = KernelPlanStatus::kMissing;
        kp.reason = "fake planner: timings missing";
        plan.complete = false;
      } else if (Result<KernelConfig> config = SolveKernelDp(
                     table, kernel.mini_batch, request.policy, request.workspace_bytes);
                 config.ok()) {
        kp.status = KernelPlanStatus::kPlanned;
        kp.config = *config;
        Result<Segment> undivided =
            FastestUndivided(table, kernel.mini_batch, request.workspace_bytes);
        if (undivided.ok()) kp.undivided = *undivided;
        plan.total_time_ms += kp.config.time_ms;
        plan.total_workspace_bytes += kp.config.workspace_bytes;
      } else {
        kp.status = KernelPlanStatus::kInfeasible;
        kp.reason = config.status().message();
        plan.complete = false;
      }
      plan.kernels.push_back(kp);
    }
    *response->mutable_plan() = ToProto(plan, request.device);
    return grpc::Status::OK;
  }

  ConvBackend& backend_;
  Catalog catalog_;
  Timings timing_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<Behaviour> behaviour_{Behaviour::kPlan};
  std::atomic<bool> ignore_kernel_limits_{false};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool held_ = false;
  FakePlanChoice choice_;
  std::string framework_choice_;
  double known_framework_ms_ = 0;
  uint64_t known_framework_workspace_ = 0;
  std::vector<v1::GetPlanRequest> requests_;
  std::atomic<int> calls_{0};
  std::atomic<int> in_handler_{0};
  std::vector<ConvProblem> missing_;
  std::atomic<int> live_workers_{0};
  std::string token_;
  std::map<uint64_t, std::vector<Timing>> timings_;
  std::vector<v1::SubmitTimingsRequest> submitted_;
  std::atomic<int> list_devices_calls_{0};
  std::atomic<int> submissions_{0};
  std::atomic<int> refused_submissions_{0};
};

}  // namespace ucudnn::testing
