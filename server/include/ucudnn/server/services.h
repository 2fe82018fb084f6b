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
#include "ucudnn/server/request_validation.h"
#include "ucudnn/server/server_metrics.h"
#include "ucudnn/server/thread_pool.h"
#include "ucudnn/server/timings_cache.h"
#include "ucudnn/store/store.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::server {

// Bounds the plan calls (GetPlan, StreamPlan, ExplainPlan) in flight, computing or waiting for
// benchmarks, so a flood is refused (RESOURCE_EXHAUSTED) rather than queued without end.
class CallLimiter {
 public:
  explicit CallLimiter(int max_in_flight) : max_in_flight_(max_in_flight) {}
  ~CallLimiter() { Drain(); }
  CallLimiter(const CallLimiter&) = delete;
  CallLimiter& operator=(const CallLimiter&) = delete;

  // One admitted call; releases its place when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    explicit Ticket(CallLimiter* limiter) : limiter_(limiter) {}
    Ticket(Ticket&& other) noexcept : limiter_(std::exchange(other.limiter_, nullptr)) {}
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        Release();
        limiter_ = std::exchange(other.limiter_, nullptr);
      }
      return *this;
    }
    ~Ticket() { Release(); }
    explicit operator bool() const { return limiter_ != nullptr; }
    void Release();

   private:
    CallLimiter* limiter_ = nullptr;
  };

  // An empty ticket when max_in_flight calls are admitted already.
  Ticket TryAdmit();
  // Waits until every ticket is released.
  void Drain();

 private:
  void Release();

  const int max_in_flight_;
  std::mutex mu_;
  std::condition_variable idle_;
  int in_flight_ = 0;
};

// Every method is a callback (asynchronous) method whose work runs on one fixed ThreadPool, so
// the server's threads do not grow with the calls in flight. GetPlan is raw: a repeated request
// is answered on gRPC's own thread from the request memo with the cached plan's bytes, without
// parsing the request or serialising the plan (PlanCoordinator::TryServeFromMemo); other
// GetPlan and StreamPlan calls plan through PlanCoordinator::PlanAsync, which waits for
// benchmarks without holding a thread. StreamPlan writes its progress as it comes.
class PlannerServiceImpl final
    : public v1::PlannerService::WithRawCallbackMethod_GetPlan<
          v1::PlannerService::WithCallbackMethod_StreamPlan<v1::PlannerService::Service>> {
 public:
  PlannerServiceImpl(PlanCoordinator* coordinator, ServerMetrics* metrics,
                     const TokenAuthenticator* auth, ThreadPool* pool, int max_plan_calls)
      : coordinator_(coordinator),
        metrics_(metrics),
        auth_(auth),
        pool_(pool),
        limiter_(max_plan_calls) {}

  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<v1::StreamPlanResponse>* StreamPlan(
      grpc::CallbackServerContext* context, const v1::StreamPlanRequest* request) override;
  // Waits for every admitted plan call (GetPlan, StreamPlan, ExplainPlan) to end (shutdown).
  void Drain() { limiter_.Drain(); }
  // The bound shared with CatalogService.ExplainPlan.
  CallLimiter* limiter() { return &limiter_; }

 private:
  PlanCoordinator* coordinator_;
  ServerMetrics* metrics_;
  const TokenAuthenticator* auth_;
  ThreadPool* pool_;
  CallLimiter limiter_;
};

// A GetPlanResponse as a ByteBuffer around already serialised plan bytes, which the buffer keeps
// alive and does not copy.
grpc::ByteBuffer GetPlanResponseBuffer(std::shared_ptr<const std::string> plan_bytes,
                                       bool from_cache, uint32_t waited_ms);

// ExplainPlan plans, so it is admitted by the planner's CallLimiter; RetryJob and CancelJobs
// write, so they need a bearer token like TimingService.
class CatalogServiceImpl final : public v1::CatalogService::CallbackService {
 public:
  CatalogServiceImpl(store::Store* store, PlanCoordinator* coordinator, ServerMetrics* metrics,
                     ThreadPool* pool, CallLimiter* limiter, const TokenAuthenticator* auth)
      : store_(store),
        coordinator_(coordinator),
        metrics_(metrics),
        pool_(pool),
        limiter_(limiter),
        auth_(auth) {}

  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* context,
                                        const v1::ListDevicesRequest* request,
                                        v1::ListDevicesResponse* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const v1::ListWorkersRequest* request,
                                        v1::ListWorkersResponse* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* GetTimings(grpc::CallbackServerContext* context,
                                       const v1::GetTimingsRequest* request,
                                       v1::GetTimingsResponse* response) override;
  grpc::ServerUnaryReactor* GetParetoFront(grpc::CallbackServerContext* context,
                                           const v1::GetParetoFrontRequest* request,
                                           v1::GetParetoFrontResponse* response) override;
  grpc::ServerUnaryReactor* ExplainPlan(grpc::CallbackServerContext* context,
                                        const v1::ExplainPlanRequest* request,
                                        v1::ExplainPlanResponse* response) override;
  grpc::ServerUnaryReactor* RetryJob(grpc::CallbackServerContext* context,
                                     const v1::RetryJobRequest* request,
                                     v1::RetryJobResponse* response) override;
  grpc::ServerUnaryReactor* CancelJobs(grpc::CallbackServerContext* context,
                                       const v1::CancelJobsRequest* request,
                                       v1::CancelJobsResponse* response) override;

 private:
  store::Store* store_;
  PlanCoordinator* coordinator_;
  ServerMetrics* metrics_;
  ThreadPool* pool_;
  CallLimiter* limiter_;
  const TokenAuthenticator* auth_;
};

class TimingServiceImpl final : public v1::TimingService::CallbackService {
 public:
  // `timings_cache` may be null. A submission drops its table from it at once (the notification
  // does the same on every replica, later): the submitter's next plan request on this replica
  // sees what it submitted, also where it replaces a complete plan's timings (the framework's own).
  TimingServiceImpl(store::Store* store, const TokenAuthenticator* auth, ServerMetrics* metrics,
                    ThreadPool* pool, TimingsCache* timings_cache = nullptr)
      : store_(store), auth_(auth), metrics_(metrics), pool_(pool), timings_cache_(timings_cache) {}

  grpc::ServerUnaryReactor* SubmitTimings(grpc::CallbackServerContext* context,
                                          const v1::SubmitTimingsRequest* request,
                                          v1::SubmitTimingsResponse* response) override;

 private:
  store::Store* store_;
  const TokenAuthenticator* auth_;
  ServerMetrics* metrics_;
  ThreadPool* pool_;
  TimingsCache* timings_cache_;
};

}  // namespace ucudnn::server
