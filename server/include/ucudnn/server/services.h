// The gRPC services: thin adapters from messages to PlanCoordinator and the store, answering
// every Status through ToGrpcStatus and recording every call in the metrics.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <grpcpp/support/byte_buffer.h>

#include "ucudnn/server/auth.h"
#include "ucudnn/server/plan_coordinator.h"
#include "ucudnn/server/server_metrics.h"
#include "ucudnn/store/store.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::server {

// Runs blocking work (waiting for benchmarks, planning) off gRPC's callback threads, one thread
// per call: such calls spend nearly all their time asleep on a notification. It also admits the
// synchronous planning calls (StreamPlan, ExplainPlan) that block gRPC's own threads, so all
// planning calls together stay within one bound and a flood is refused, not queued on threads.
class BlockingCallRunner {
 public:
  explicit BlockingCallRunner(int max_in_flight) : max_in_flight_(max_in_flight) {}
  ~BlockingCallRunner() { Drain(); }
  BlockingCallRunner(const BlockingCallRunner&) = delete;
  BlockingCallRunner& operator=(const BlockingCallRunner&) = delete;

  // One admitted call running on the caller's thread; releases its place when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    explicit Ticket(BlockingCallRunner* runner) : runner_(runner) {}
    Ticket(Ticket&& other) noexcept : runner_(std::exchange(other.runner_, nullptr)) {}
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        Release();
        runner_ = std::exchange(other.runner_, nullptr);
      }
      return *this;
    }
    ~Ticket() { Release(); }
    explicit operator bool() const { return runner_ != nullptr; }

   private:
    void Release();
    BlockingCallRunner* runner_ = nullptr;
  };

  // False (and nothing runs) when max_in_flight calls are running already.
  bool TryRun(std::function<void()> work);
  // An empty ticket when max_in_flight calls are running already.
  Ticket TryAdmit();
  // Waits until every started call has finished and every ticket is released.
  void Drain();

 private:
  bool Acquire();
  void Release();

  const int max_in_flight_;
  std::mutex mu_;
  std::condition_variable idle_;
  int in_flight_ = 0;
};

// GetPlan is a raw callback method: a repeated request is answered on gRPC's own thread from the
// request memo with the cached plan's bytes, without parsing the request or serialising the plan
// (PlanCoordinator::TryServeFromMemo); everything else runs on a BlockingCallRunner thread.
// StreamPlan is an ordinary synchronous method, admitted by the same runner (RESOURCE_EXHAUSTED
// beyond its bound).
class PlannerServiceImpl final
    : public v1::PlannerService::WithRawCallbackMethod_GetPlan<v1::PlannerService::Service> {
 public:
  PlannerServiceImpl(PlanCoordinator* coordinator, ServerMetrics* metrics,
                     const TokenAuthenticator* auth, int max_blocking_calls)
      : coordinator_(coordinator), metrics_(metrics), auth_(auth), runner_(max_blocking_calls) {}

  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::Status StreamPlan(grpc::ServerContext* context, const v1::StreamPlanRequest* request,
                          grpc::ServerWriter<v1::StreamPlanResponse>* writer) override;
  // Waits for GetPlan calls still running on their own threads, and for admitted StreamPlan and
  // ExplainPlan calls (shutdown).
  void Drain() { runner_.Drain(); }
  // The bound shared with CatalogService.ExplainPlan.
  BlockingCallRunner* runner() { return &runner_; }

 private:
  PlanCoordinator* coordinator_;
  ServerMetrics* metrics_;
  const TokenAuthenticator* auth_;
  BlockingCallRunner runner_;
};

// A GetPlanResponse as a ByteBuffer around already serialised plan bytes, which the buffer keeps
// alive and does not copy.
grpc::ByteBuffer GetPlanResponseBuffer(std::shared_ptr<const std::string> plan_bytes,
                                       bool from_cache, uint32_t waited_ms);

// ExplainPlan plans, so it is admitted by the planner's BlockingCallRunner; RetryJob and
// CancelJobs write, so they need a bearer token like TimingService.
class CatalogServiceImpl final : public v1::CatalogService::Service {
 public:
  CatalogServiceImpl(store::Store* store, PlanCoordinator* coordinator, ServerMetrics* metrics,
                     BlockingCallRunner* runner, const TokenAuthenticator* auth)
      : store_(store), coordinator_(coordinator), metrics_(metrics), runner_(runner), auth_(auth) {}

  grpc::Status ListDevices(grpc::ServerContext* context, const v1::ListDevicesRequest* request,
                           v1::ListDevicesResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status GetTimings(grpc::ServerContext* context, const v1::GetTimingsRequest* request,
                          v1::GetTimingsResponse* response) override;
  grpc::Status GetParetoFront(grpc::ServerContext* context,
                              const v1::GetParetoFrontRequest* request,
                              v1::GetParetoFrontResponse* response) override;
  grpc::Status ExplainPlan(grpc::ServerContext* context, const v1::ExplainPlanRequest* request,
                           v1::ExplainPlanResponse* response) override;
  grpc::Status RetryJob(grpc::ServerContext* context, const v1::RetryJobRequest* request,
                        v1::RetryJobResponse* response) override;
  grpc::Status CancelJobs(grpc::ServerContext* context, const v1::CancelJobsRequest* request,
                          v1::CancelJobsResponse* response) override;

 private:
  store::Store* store_;
  PlanCoordinator* coordinator_;
  ServerMetrics* metrics_;
  BlockingCallRunner* runner_;
  const TokenAuthenticator* auth_;
};

class TimingServiceImpl final : public v1::TimingService::Service {
 public:
  TimingServiceImpl(store::Store* store, const TokenAuthenticator* auth, ServerMetrics* metrics)
      : store_(store), auth_(auth), metrics_(metrics) {}

  grpc::Status SubmitTimings(grpc::ServerContext* context, const v1::SubmitTimingsRequest* request,
                             v1::SubmitTimingsResponse* response) override;

 private:
  store::Store* store_;
  const TokenAuthenticator* auth_;
  ServerMetrics* metrics_;
};

// Validates a SubmitTimingsRequest into the store's input, naming every invalid field at once
// ("2 invalid fields: problem.c: ...; timings[3].time_ms: ..."). Pure; exposed for tests.
struct ValidatedSubmission {
  DeviceFingerprint device;
  ConvProblem problem;
  std::vector<Timing> timings;
  std::string measured_by;
};
Result<ValidatedSubmission> ValidateSubmission(const v1::SubmitTimingsRequest& request);

}  // namespace ucudnn::server
