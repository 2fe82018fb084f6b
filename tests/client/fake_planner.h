// A stand-in PlannerService for the client library's tests: real gRPC on an ephemeral loopback
// port, answers chosen by the test (plans that split the batch as told, errors, MISSING, or a
// handler that holds the call until the test releases it).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/proto_convert.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::testing {

// What the fake answers for each kernel: segments of `micro_batch` samples (the last one takes
// the rest) with `algo`; workspaces are asked of `backend`, so they are real.
struct FakePlanChoice {
  int64_t micro_batch = 2;
  int algo = 1;
};

class FakePlanner final : public v1::PlannerService::Service {
 public:
  enum class Behaviour {
    kPlan,     // a plan for every kernel
    kMissing,  // every kernel MISSING
    kError,    // an INTERNAL error
  };

  explicit FakePlanner(ConvBackend& backend) : backend_(backend) {}
  ~FakePlanner() override { Stop(); }

  // Starts on 127.0.0.1 on a free port.
  void Start() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
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
    {
      std::unique_lock lock(mutex_);
      requests_.push_back(*request);
      cv_.wait(lock, [&] { return !held_ || context->IsCancelled(); });
      choice = choice_;
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
    for (const Kernel& kernel : parsed->kernels) {
      KernelPlan kp;
      kp.kernel = kernel;
      if (behaviour_ == Behaviour::kMissing) {
        kp.status = KernelPlanStatus::kMissing;
        kp.reason = "fake planner: no timings";
        plan.kernels.push_back(kp);
        continue;
      }
      kp.status = KernelPlanStatus::kPlanned;
      int64_t left = kernel.mini_batch;
      while (left > 0) {
        Segment s;
        s.micro_batch = std::min(left, choice.micro_batch);
        s.algo = choice.algo;
        s.time_ms = 0.5 * static_cast<double>(s.micro_batch);
        Result<size_t> ws = backend_.WorkspaceSize(kernel.problem, s.micro_batch, s.algo);
        if (!ws.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, ws.status().message());
        s.workspace_bytes = *ws;
        kp.config.segments.push_back(s);
        kp.config.time_ms += s.time_ms;
        kp.config.workspace_bytes = std::max(kp.config.workspace_bytes, s.workspace_bytes);
        left -= s.micro_batch;
      }
      Segment undivided{kernel.mini_batch, 0, 1.0 * static_cast<double>(kernel.mini_batch), 0};
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
  ConvBackend& backend_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<Behaviour> behaviour_{Behaviour::kPlan};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool held_ = false;
  FakePlanChoice choice_;
  std::vector<v1::GetPlanRequest> requests_;
  std::atomic<int> calls_{0};
  std::atomic<int> in_handler_{0};
};

}  // namespace ucudnn::testing
