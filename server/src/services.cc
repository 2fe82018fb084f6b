#include "ucudnn/server/services.h"

#include <deque>
#include <exception>
#include <optional>

#include <spdlog/spdlog.h>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/text.h"
#include "ucudnn/planner/plan_table.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/server/grpc_status.h"
#include "ucudnn/server/request_validation.h"

namespace ucudnn::server {
namespace {

Status TooManyCalls() { return ResourceExhausted("too many plan requests in flight; retry later"); }

// Runs a handler body, turning anything thrown (a bug, or std::bad_alloc) into INTERNAL: no
// exception crosses into gRPC's threads.
template <typename Body>
grpc::Status Guarded(std::string_view method, Body&& body) {
  try {
    return ToGrpcStatus(body());
  } catch (const std::exception& e) {
    spdlog::error("{}: unexpected exception: {}", method, e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
  }
}

v1::Job ToProto(const store::Job& job) {
  v1::Job m;
  m.set_id(job.id);
  m.set_state(job.lease_expired ? std::string("expired") : std::string(store::ToString(job.state)));
  m.set_device_hash(HashHex(job.device_hash));
  *m.mutable_problem() = ucudnn::ToProto(job.problem);
  m.set_max_micro_batch(job.max_micro_batch);
  m.set_policy(ucudnn::ToProto(job.policy));
  if (job.workspace_limit) m.set_workspace_limit_bytes(*job.workspace_limit);
  m.set_worker_id(job.worker_id);
  m.set_attempts(job.attempts);
  m.set_error(job.error);
  m.set_created_at(job.created_at);
  m.set_updated_at(job.updated_at);
  return m;
}

std::string_view AuthorizationOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

// The caller's role from its bearer token, or the anonymous role; a refusal (a wrong token, or
// no token where anonymous callers are refused) is counted and logged.
Result<Caller> Identify(const TokenAuthenticator& auth, ServerMetrics& metrics,
                        const grpc::ServerContextBase& context, std::string_view method) {
  Result<Caller> caller = auth.Identify(AuthorizationOf(context));
  if (!caller.ok()) {
    metrics.RecordAuthFailure();
    spdlog::warn("{} refused from {}: {}", method, context.peer(), caller.status().message());
  }
  return caller;
}

// A caller whose role lacks a permission: UNAUTHENTICATED without a token (present one),
// PERMISSION_DENIED with one (a gRPC code the ucudnn Status has no counterpart for).
grpc::Status Denied(ServerMetrics& metrics, const grpc::ServerContextBase& context,
                    std::string_view method, Role role, std::string_view needs) {
  metrics.RecordAuthFailure();
  const bool anonymous = AuthorizationOf(context).empty();
  spdlog::warn("{} refused from {}: {} {}", method, context.peer(),
               anonymous ? "a caller without a token may not" : "its token's role may not", needs);
  if (anonymous) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        std::string(method) + ": needs 'authorization: Bearer TOKEN' of a token " +
                            "allowed to " + std::string(needs));
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, std::string(method) + ": role " +
                                                               std::string(RoleName(role)) +
                                                               " may not " + std::string(needs));
}

// Catalog and timing calls waiting for a pool thread beyond this are refused (plan calls have
// their own bound, --max-waiting-calls).
constexpr size_t kMaxQueuedCalls = 4096;

// Finishes a unary callback call with `status`, recording it in the metrics.
void FinishRecorded(grpc::ServerUnaryReactor* reactor, ServerMetrics& metrics,
                    std::string_view method, std::chrono::steady_clock::time_point start,
                    const grpc::Status& status) {
  metrics.RecordRpcSince(method, status.error_code(), start);
  reactor->Finish(status);
}

// Runs `body` (returning grpc::Status) of a unary callback method on the pool and finishes the
// call with its status; RESOURCE_EXHAUSTED at once when too many calls wait for the pool.
template <typename Body>
grpc::ServerUnaryReactor* RunOnPool(grpc::CallbackServerContext* context, ThreadPool& pool,
                                    ServerMetrics& metrics, std::string_view method, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const auto start = std::chrono::steady_clock::now();
  if (pool.queued() >= kMaxQueuedCalls) {
    FinishRecorded(reactor, metrics, method, start,
                   ToGrpcStatus(ResourceExhausted("server busy; retry later")));
    return reactor;
  }
  pool.Post([reactor, &metrics, method, start, body = std::move(body)]() mutable {
    FinishRecorded(reactor, metrics, method, start, body());
  });
  return reactor;
}

}  // namespace

// ---- PlannerService ----------------------------------------------------------------------------

CallLimiter::Ticket CallLimiter::TryAdmit() {
  std::lock_guard lock(mu_);
  if (in_flight_ >= max_in_flight_) return Ticket();
  ++in_flight_;
  return Ticket(this);
}

void CallLimiter::Release() {
  // Notified under the lock, so Drain() cannot return (and the limiter go away) before the
  // releasing thread has let go of it.
  std::lock_guard lock(mu_);
  --in_flight_;
  idle_.notify_all();
}

void CallLimiter::Ticket::Release() {
  if (limiter_ != nullptr) std::exchange(limiter_, nullptr)->Release();
}

void CallLimiter::Drain() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return in_flight_ == 0; });
}

grpc::ByteBuffer GetPlanResponseBuffer(std::shared_ptr<const std::string> plan_bytes,
                                       bool from_cache, uint32_t waited_ms) {
  auto [prefix, suffix] = GetPlanResponseFraming(plan_bytes->size(), from_cache, waited_ms);
  auto* holder = new std::shared_ptr<const std::string>(std::move(plan_bytes));
  grpc::Slice slices[3] = {
      grpc::Slice(prefix),
      grpc::Slice(
          const_cast<char*>((*holder)->data()), (*holder)->size(),
          [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, holder),
      grpc::Slice(suffix)};
  return grpc::ByteBuffer(slices, suffix.empty() ? 2 : 3);
}

namespace {

// A GetPlan call between its arrival and its answer: the request (which PlanCall points into)
// and its admission.
struct GetPlanCall {
  std::string raw_request;
  v1::GetPlanRequest message;
  CallLimiter::Ticket ticket;
};

}  // namespace

grpc::ServerUnaryReactor* PlannerServiceImpl::GetPlan(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [metrics = metrics_, reactor, start](const grpc::Status& status) {
    FinishRecorded(reactor, *metrics, "GetPlan", start, status);
  };
  const Result<Caller> caller = Identify(*auth_, *metrics_, *context, "GetPlan");
  if (!caller.ok()) {
    finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  grpc::Slice slice;
  if (!request->DumpToSingleSlice(&slice).ok()) {
    finish(grpc::Status(grpc::StatusCode::INTERNAL, "cannot read the request"));
    return reactor;
  }
  const std::string_view raw(reinterpret_cast<const char*>(slice.begin()), slice.size());
  std::shared_ptr<GetPlanCall> call;
  try {
    if (auto plan = coordinator_->TryServeFromMemo(raw)) {
      *response = GetPlanResponseBuffer(std::move(plan), /*from_cache=*/true, 0);
      finish(grpc::Status::OK);
      return reactor;
    }
    call = std::make_shared<GetPlanCall>();
    call->raw_request = std::string(raw);
  } catch (const std::exception& e) {  // std::bad_alloc: nothing else throws here
    spdlog::error("GetPlan: unexpected exception: {}", e.what());
    finish(grpc::Status(grpc::StatusCode::INTERNAL, "internal error"));
    return reactor;
  }
  call->ticket = limiter_.TryAdmit();
  if (!call->ticket) {
    finish(ToGrpcStatus(TooManyCalls()));
    return reactor;
  }
  pool_->Post([this, context, response, finish, call, start, identity = *caller] {
    if (!call->message.ParseFromString(call->raw_request)) {
      call->ticket.Release();
      finish(ToGrpcStatus(InvalidArgument("request: not a valid ucudnn.v1.GetPlanRequest")));
      return;
    }
    PlanCall plan_call;
    plan_call.request = &call->message;
    plan_call.raw_request = call->raw_request;
    plan_call.may_write = MayEnqueue(identity.role);
    plan_call.may_register_device = identity.may_register_devices;
    plan_call.deadline = context->deadline();
    plan_call.cancelled = [context] { return context->IsCancelled(); };
    plan_call.received = start;
    coordinator_->PlanAsync(
        plan_call, pool_, [call, response, finish](Result<PlanOutcome> outcome) {
          call->ticket.Release();
          if (!outcome.ok()) {
            finish(ToGrpcStatus(outcome.status()));
            return;
          }
          *response =
              GetPlanResponseBuffer(outcome->plan_bytes, outcome->from_cache, outcome->waited_ms);
          finish(grpc::Status::OK);
        });
  });
  return reactor;
}

namespace {

// StreamPlan's writer: progress messages as the planning reports them (from a pool thread), one
// write in flight at a time, then the plan, then the status.
class StreamPlanReactor final : public grpc::ServerWriteReactor<v1::StreamPlanResponse> {
 public:
  explicit StreamPlanReactor(ServerMetrics* metrics)
      : metrics_(metrics), start_(std::chrono::steady_clock::now()) {}

  // Queues `message` for writing.
  void Send(v1::StreamPlanResponse message) {
    std::unique_lock lock(mu_);
    if (gone_) return;
    queue_.push_back(std::move(message));
    if (writing_) return;
    writing_ = true;
    const v1::StreamPlanResponse* next = &queue_.front();
    lock.unlock();
    StartWrite(next);
  }

  // Progress: problems ready of total (the final message repeats the last count).
  void Progress(int ready, int total) {
    {
      std::lock_guard lock(mu_);
      ready_ = ready;
      total_ = total;
    }
    v1::StreamPlanResponse progress;
    progress.set_problems_ready(ready);
    progress.set_problems_total(total);
    Send(std::move(progress));
  }

  // The last message: the plan, with the last count.
  void SendPlan(v1::Plan plan) {
    v1::StreamPlanResponse last;
    {
      std::lock_guard lock(mu_);
      last.set_problems_ready(ready_);
      last.set_problems_total(total_);
    }
    *last.mutable_plan() = std::move(plan);
    last.set_done(true);
    Send(std::move(last));
  }

  // Finishes with `status` once the queued messages are written.
  void Close(const grpc::Status& status) {
    std::unique_lock lock(mu_);
    closing_ = status;
    if (writing_) return;
    lock.unlock();
    FinishNow();
  }

  bool client_gone() {
    std::lock_guard lock(mu_);
    return gone_;
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mu_);
    queue_.pop_front();
    if (!ok) {
      gone_ = true;
      queue_.clear();
    }
    if (!queue_.empty()) {
      const v1::StreamPlanResponse* next = &queue_.front();
      lock.unlock();
      StartWrite(next);
      return;
    }
    writing_ = false;
    const bool closing = closing_.has_value();
    lock.unlock();
    if (closing) FinishNow();
  }

  void OnDone() override { delete this; }

 private:
  void FinishNow() {
    grpc::Status status;
    {
      std::lock_guard lock(mu_);
      status = *closing_;
      if (gone_ && status.ok()) {
        status = ToGrpcStatus(Unavailable("client went away before the plan was sent"));
      }
    }
    metrics_->RecordRpcSince("StreamPlan", status.error_code(), start_);
    Finish(status);
  }

  ServerMetrics* metrics_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::deque<v1::StreamPlanResponse> queue_;  // front: being written
  bool writing_ = false;
  bool gone_ = false;
  std::optional<grpc::Status> closing_;
  int ready_ = 0;
  int total_ = 0;
};

}  // namespace

grpc::ServerWriteReactor<v1::StreamPlanResponse>* PlannerServiceImpl::StreamPlan(
    grpc::CallbackServerContext* context, const v1::StreamPlanRequest* request) {
  auto* reactor = new StreamPlanReactor(metrics_);
  const Result<Caller> caller = Identify(*auth_, *metrics_, *context, "StreamPlan");
  if (!caller.ok()) {
    reactor->Close(ToGrpcStatus(caller.status()));
    return reactor;
  }
  if (!request->has_request()) {
    reactor->Close(ToGrpcStatus(InvalidArgument("request: required")));
    return reactor;
  }
  // Held for the whole call: a stream may wait for benchmarks for minutes.
  auto ticket = std::make_shared<CallLimiter::Ticket>(limiter_.TryAdmit());
  if (!*ticket) {
    reactor->Close(ToGrpcStatus(TooManyCalls()));
    return reactor;
  }
  PlanCall call;
  call.request = &request->request();
  call.field_path = "request";
  call.may_write = MayEnqueue(caller->role);
  call.may_register_device = caller->may_register_devices;
  call.deadline = context->deadline();
  call.on_progress = [reactor](int ready, int total) { reactor->Progress(ready, total); };
  call.cancelled = [reactor, context] { return reactor->client_gone() || context->IsCancelled(); };
  call.received = std::chrono::steady_clock::now();
  coordinator_->PlanAsync(call, pool_, [reactor, ticket](Result<PlanOutcome> outcome) {
    ticket->Release();
    Result<v1::Plan> plan = outcome.ok() ? outcome->ParsePlan() : outcome.status();
    if (plan.ok()) reactor->SendPlan(std::move(plan).value());
    reactor->Close(ToGrpcStatus(plan.status()));
  });
  return reactor;
}

// ---- CatalogService ----------------------------------------------------------------------------

grpc::ServerUnaryReactor* CatalogServiceImpl::ListDevices(grpc::CallbackServerContext* context,
                                                          const v1::ListDevicesRequest*,
                                                          v1::ListDevicesResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "ListDevices", [=, this] {
    return Guarded("ListDevices", [&]() -> Status {
      UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "ListDevices").status());
      UCUDNN_ASSIGN_OR_RETURN(auto devices, store_->ListDevices());
      for (const auto& d : devices) {
        v1::Device* m = response->add_devices();
        m->set_id(static_cast<int64_t>(d.hash));
        *m->mutable_fingerprint() = ToProto(d.fingerprint);
        m->set_fingerprint_hash(HashHex(d.hash));
        m->set_timing_count(d.timing_count);
        m->set_live_workers(d.live_workers);
      }
      return Status::Ok();
    });
  });
}

grpc::ServerUnaryReactor* CatalogServiceImpl::ListWorkers(grpc::CallbackServerContext* context,
                                                          const v1::ListWorkersRequest* request,
                                                          v1::ListWorkersResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "ListWorkers", [=, this] {
    return Guarded("ListWorkers", [&]() -> Status {
      UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "ListWorkers").status());
      UCUDNN_ASSIGN_OR_RETURN(auto workers, store_->ListWorkers(request->alive_only()));
      for (const auto& w : workers) {
        v1::Worker* m = response->add_workers();
        m->set_id(w.id);
        m->set_host(w.host);
        *m->mutable_device() = ToProto(w.device);
        m->set_last_heartbeat(w.last_heartbeat);
        m->set_alive(w.alive);
        m->set_jobs_done(w.jobs_done);
      }
      return Status::Ok();
    });
  });
}

grpc::ServerUnaryReactor* CatalogServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                       const v1::ListJobsRequest* request,
                                                       v1::ListJobsResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "ListJobs", [=, this] {
    return Guarded("ListJobs", [&]() -> Status {
      UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "ListJobs").status());
      UCUDNN_ASSIGN_OR_RETURN(const JobListing listing, ValidateListJobs(*request));
      UCUDNN_ASSIGN_OR_RETURN(auto jobs, store_->ListJobs(listing.state, listing.limit));
      UCUDNN_ASSIGN_OR_RETURN(const int64_t depth, store_->QueueDepth());
      for (const auto& job : jobs) *response->add_jobs() = ToProto(job);
      response->set_queue_depth(depth);
      return Status::Ok();
    });
  });
}

grpc::ServerUnaryReactor* CatalogServiceImpl::GetTimings(grpc::CallbackServerContext* context,
                                                         const v1::GetTimingsRequest* request,
                                                         v1::GetTimingsResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "GetTimings", [=, this] {
    return Guarded("GetTimings", [&]() -> Status {
      UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "GetTimings").status());
      UCUDNN_ASSIGN_OR_RETURN(const TimingsQuery query, ValidateGetTimings(*request));
      UCUDNN_ASSIGN_OR_RETURN(auto records, store_->GetTimingRecords(query.device, query.problem));
      for (const auto& record : records) {
        v1::Timing* m = response->add_timings();
        *m = ToProto(record.timing);
        m->set_measured_by(record.measured_by);
        m->set_measured_at(record.measured_at);
      }
      response->set_problem_hash(HashHex(StableHash(query.problem)));
      return Status::Ok();
    });
  });
}

grpc::ServerUnaryReactor* CatalogServiceImpl::GetParetoFront(
    grpc::CallbackServerContext* context, const v1::GetParetoFrontRequest* request,
    v1::GetParetoFrontResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "GetParetoFront", [=, this] {
    return Guarded("GetParetoFront", [&]() -> Status {
      UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "GetParetoFront").status());
      UCUDNN_ASSIGN_OR_RETURN(const ParetoQuery query, ValidateGetParetoFront(*request));
      UCUDNN_ASSIGN_OR_RETURN(auto timings,
                              coordinator_->LoadTimings(query.device, query.kernel.problem));
      if (timings->table.entries.empty()) {
        return NotFound("no timings for problem " + HashHex(StableHash(query.kernel.problem)) +
                        " on device " + HashHex(query.device.Hash()) +
                        " (GetPlan enqueues a benchmark for it)");
      }
      for (const auto& config :
           ParetoFront(timings->table, query.kernel.mini_batch, query.policy)) {
        v1::ParetoPoint* point = response->add_points();
        point->set_time_ms(config.time_ms);
        point->set_workspace_bytes(config.workspace_bytes);
        for (const auto& segment : config.segments) *point->add_segments() = ToProto(segment);
      }
      return Status::Ok();
    });
  });
}

grpc::ServerUnaryReactor* CatalogServiceImpl::ExplainPlan(grpc::CallbackServerContext* context,
                                                          const v1::ExplainPlanRequest* request,
                                                          v1::ExplainPlanResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "ExplainPlan", [=, this] {
    return Guarded("ExplainPlan", [&]() -> Status {
      UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "ExplainPlan").status());
      if (!request->has_request()) return InvalidArgument("request: required");
      // It plans (an ILP may take seconds) on this thread: within the planner's bound.
      const CallLimiter::Ticket ticket = limiter_->TryAdmit();
      if (!ticket) return TooManyCalls();
      PlanCall call;
      call.request = &request->request();
      call.field_path = "request";
      call.deadline = context->deadline();
      call.enqueue_and_wait = false;  // a read: nothing is enqueued, nothing is waited for
      call.use_plan_cache = false;    // the table needs the computed plan
      auto outcome = coordinator_->Plan(call);
      if (!outcome.ok()) return outcome.status();
      UCUDNN_ASSIGN_OR_RETURN(*response->mutable_plan(), outcome->ParsePlan());
      if (outcome->network_plan) {
        response->set_text(FormatPlanTable(
            *outcome->network_plan, AlgorithmNamerFor(request->request().device().backend())));
      }
      return Status::Ok();
    });
  });
}

grpc::ServerUnaryReactor* CatalogServiceImpl::RetryJob(grpc::CallbackServerContext* context,
                                                       const v1::RetryJobRequest* request,
                                                       v1::RetryJobResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "RetryJob", [=, this]() -> grpc::Status {
    const Result<Caller> caller = Identify(*auth_, *metrics_, *context, "RetryJob");
    if (!caller.ok()) return ToGrpcStatus(caller.status());
    if (!MayRetryJobs(caller->role)) {
      return Denied(*metrics_, *context, "RetryJob", caller->role, "retry jobs (role admin)");
    }
    return Guarded("RetryJob", [&]() -> Status {
      UCUDNN_ASSIGN_OR_RETURN(const int64_t job_id, ValidateRetryJob(*request));
      UCUDNN_ASSIGN_OR_RETURN(const store::Job job, store_->RetryJob(job_id));
      spdlog::info("RetryJob: job {} re-queued at the request of {} (last error: {})", job.id,
                   context->peer(), job.error);
      *response->mutable_job() = ToProto(job);
      return Status::Ok();
    });
  });
}

grpc::ServerUnaryReactor* CatalogServiceImpl::CancelJobs(grpc::CallbackServerContext* context,
                                                         const v1::CancelJobsRequest* request,
                                                         v1::CancelJobsResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "CancelJobs", [=, this]() -> grpc::Status {
    const Result<Caller> caller = Identify(*auth_, *metrics_, *context, "CancelJobs");
    if (!caller.ok()) return ToGrpcStatus(caller.status());
    // Taking work out of the queue is an operator's act, as re-queueing it is (role admin).
    if (!MayRetryJobs(caller->role)) {
      return Denied(*metrics_, *context, "CancelJobs", caller->role, "cancel jobs (role admin)");
    }
    return Guarded("CancelJobs", [&]() -> Status {
      UCUDNN_ASSIGN_OR_RETURN(const JobCancellation cancel, ValidateCancelJobs(*request));
      UCUDNN_ASSIGN_OR_RETURN(const auto cancelled,
                              store_->CancelQueuedJobs(cancel.job_id, cancel.device_hash));
      spdlog::info("CancelJobs: {} queued job(s) cancelled at the request of {}", cancelled.size(),
                   context->peer());
      for (const store::Job& job : cancelled) *response->add_cancelled() = ToProto(job);
      return Status::Ok();
    });
  });
}

// ---- TimingService -----------------------------------------------------------------------------

grpc::ServerUnaryReactor* TimingServiceImpl::SubmitTimings(grpc::CallbackServerContext* context,
                                                           const v1::SubmitTimingsRequest* request,
                                                           v1::SubmitTimingsResponse* response) {
  return RunOnPool(context, *pool_, *metrics_, "SubmitTimings", [=, this]() -> grpc::Status {
    // The token before anything else: an unauthenticated caller learns nothing about its input.
    const Result<Caller> caller = Identify(*auth_, *metrics_, *context, "SubmitTimings");
    if (!caller.ok()) return ToGrpcStatus(caller.status());
    if (!MaySubmitTimings(caller->role)) {
      return Denied(*metrics_, *context, "SubmitTimings", caller->role,
                    "submit timings (role submit or admin)");
    }
    return Guarded("SubmitTimings", [&]() -> Status {
      UCUDNN_ASSIGN_OR_RETURN(auto submission, ValidateSubmission(*request));
      UCUDNN_RETURN_IF_ERROR(store_->PutTimings(submission.device, submission.problem,
                                                submission.timings, submission.measured_by));
      if (timings_cache_ != nullptr) {
        timings_cache_->Invalidate({submission.device.Hash(), StableHash(submission.problem)});
      }
      metrics_->RecordTimingsStored(static_cast<int64_t>(submission.timings.size()));
      response->set_stored(static_cast<int32_t>(submission.timings.size()));
      return Status::Ok();
    });
  });
}

}  // namespace ucudnn::server
