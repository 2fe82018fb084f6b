#include "ucudnn/server/services.h"

#include <exception>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>

#include <spdlog/spdlog.h>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/proto_convert.h"
#include "ucudnn/core/text.h"
#include "ucudnn/planner/plan_table.h"
#include "ucudnn/server/grpc_status.h"

namespace ucudnn::server {
namespace {

constexpr int kDefaultJobLimit = 100;
constexpr int kMaxJobLimit = 10000;
constexpr int kMaxTimingsPerSubmit = 100000;
constexpr size_t kMaxMeasuredByBytes = 128;

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

// Reads a required message field into `out`, or records its errors under `field`.
template <typename T, typename Message>
void ReadField(bool present, const Message& message, std::string_view field, FieldErrors& errors,
               T& out) {
  if (!present) {
    errors.AddField(field, "required");
    return;
  }
  auto parsed = FromProto(message);
  if (parsed.ok()) {
    out = std::move(parsed).value();
  } else {
    errors.Add(field, parsed.status());
  }
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

}  // namespace

// ---- PlannerService ----------------------------------------------------------------------------

bool BlockingCallRunner::Acquire() {
  std::lock_guard lock(mu_);
  if (in_flight_ >= max_in_flight_) return false;
  ++in_flight_;
  return true;
}

void BlockingCallRunner::Release() {
  // Notified under the lock, so Drain() cannot return (and the runner go away) before the
  // releasing thread has let go of it.
  std::lock_guard lock(mu_);
  --in_flight_;
  idle_.notify_all();
}

void BlockingCallRunner::Ticket::Release() {
  if (runner_ != nullptr) std::exchange(runner_, nullptr)->Release();
}

BlockingCallRunner::Ticket BlockingCallRunner::TryAdmit() {
  return Acquire() ? Ticket(this) : Ticket();
}

bool BlockingCallRunner::TryRun(std::function<void()> work) {
  if (!Acquire()) return false;
  try {
    std::thread([this, work = std::move(work)] {
      work();
      Release();
    }).detach();
  } catch (const std::system_error& e) {  // out of threads: refuse rather than crash
    spdlog::error("cannot start a thread for a plan request: {}", e.what());
    Release();
    return false;
  }
  return true;
}

void BlockingCallRunner::Drain() {
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

grpc::ServerUnaryReactor* PlannerServiceImpl::GetPlan(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto finish = [this, reactor, start](const grpc::Status& status) {
    metrics_->RecordRpc(
        "GetPlan", status.error_code(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    reactor->Finish(status);
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
  try {
    if (auto plan = coordinator_->TryServeFromMemo(raw)) {
      *response = GetPlanResponseBuffer(std::move(plan), /*from_cache=*/true, 0);
      finish(grpc::Status::OK);
      return reactor;
    }
  } catch (const std::exception& e) {  // std::bad_alloc: nothing else throws here
    spdlog::error("GetPlan: unexpected exception: {}", e.what());
    finish(grpc::Status(grpc::StatusCode::INTERNAL, "internal error"));
    return reactor;
  }
  auto work = [this, context, response, finish, identity = *caller,
               raw_request = std::string(raw)] {
    finish(Guarded("GetPlan", [&]() -> Status {
      v1::GetPlanRequest message;
      if (!message.ParseFromString(raw_request)) {
        return InvalidArgument("request: not a valid ucudnn.v1.GetPlanRequest");
      }
      PlanCall call;
      call.request = &message;
      call.raw_request = raw_request;
      call.may_write = MayEnqueue(identity.role);
      call.may_register_device = identity.may_register_devices;
      call.deadline = context->deadline();
      call.cancelled = [context] { return context->IsCancelled(); };
      UCUDNN_ASSIGN_OR_RETURN(PlanOutcome outcome, coordinator_->Plan(call));
      *response = GetPlanResponseBuffer(outcome.plan_bytes, outcome.from_cache, outcome.waited_ms);
      return Status::Ok();
    }));
  };
  if (!runner_.TryRun(std::move(work))) finish(ToGrpcStatus(TooManyCalls()));
  return reactor;
}

grpc::Status PlannerServiceImpl::StreamPlan(grpc::ServerContext* context,
                                            const v1::StreamPlanRequest* request,
                                            grpc::ServerWriter<v1::StreamPlanResponse>* writer) {
  RpcTimer timer(*metrics_, "StreamPlan");
  return timer.Finish(Guarded("StreamPlan", [&]() -> Status {
    UCUDNN_ASSIGN_OR_RETURN(const Caller caller,
                            Identify(*auth_, *metrics_, *context, "StreamPlan"));
    if (!request->has_request()) return InvalidArgument("request: required");
    // Held for the whole call: a stream may wait for benchmarks for minutes on this thread.
    const BlockingCallRunner::Ticket ticket = runner_.TryAdmit();
    if (!ticket) return TooManyCalls();
    int last_ready = 0;
    int last_total = 0;
    bool client_gone = false;
    PlanCall call;
    call.request = &request->request();
    call.field_path = "request";
    call.may_write = MayEnqueue(caller.role);
    call.may_register_device = caller.may_register_devices;
    call.deadline = context->deadline();
    call.on_progress = [&](int ready, int total) {
      last_ready = ready;
      last_total = total;
      v1::StreamPlanResponse progress;
      progress.set_problems_ready(ready);
      progress.set_problems_total(total);
      if (!writer->Write(progress)) client_gone = true;
    };
    call.cancelled = [&] { return client_gone || context->IsCancelled(); };
    auto outcome = coordinator_->Plan(call);
    if (!outcome.ok()) return outcome.status();
    v1::StreamPlanResponse last;
    last.set_problems_ready(last_ready);
    last.set_problems_total(last_total);
    UCUDNN_ASSIGN_OR_RETURN(*last.mutable_plan(), outcome->ParsePlan());
    last.set_done(true);
    if (!writer->Write(last)) return Unavailable("client went away before the plan was sent");
    return Status::Ok();
  }));
}

// ---- CatalogService ----------------------------------------------------------------------------

grpc::Status CatalogServiceImpl::ListDevices(grpc::ServerContext* context,
                                             const v1::ListDevicesRequest*,
                                             v1::ListDevicesResponse* response) {
  RpcTimer timer(*metrics_, "ListDevices");
  return timer.Finish(Guarded("ListDevices", [&]() -> Status {
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
  }));
}

grpc::Status CatalogServiceImpl::ListWorkers(grpc::ServerContext* context,
                                             const v1::ListWorkersRequest* request,
                                             v1::ListWorkersResponse* response) {
  RpcTimer timer(*metrics_, "ListWorkers");
  return timer.Finish(Guarded("ListWorkers", [&]() -> Status {
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
  }));
}

grpc::Status CatalogServiceImpl::ListJobs(grpc::ServerContext* context,
                                          const v1::ListJobsRequest* request,
                                          v1::ListJobsResponse* response) {
  RpcTimer timer(*metrics_, "ListJobs");
  return timer.Finish(Guarded("ListJobs", [&]() -> Status {
    UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "ListJobs").status());
    FieldErrors errors;
    const std::string& state = request->state();
    if (!state.empty() && state != "expired" && !store::ParseJobState(state).ok()) {
      errors.AddField("state", "must be one of queued, running, expired, done, failed, got " +
                                   QuoteForError(state));
    }
    int limit = request->limit();
    if (limit < 0 || limit > kMaxJobLimit) {
      errors.AddField("limit", "must be in [0, " + std::to_string(kMaxJobLimit) + "], got " +
                                   std::to_string(limit));
    }
    UCUDNN_RETURN_IF_ERROR(errors.ToStatus());
    if (limit == 0) limit = kDefaultJobLimit;
    UCUDNN_ASSIGN_OR_RETURN(auto jobs, store_->ListJobs(state, limit));
    UCUDNN_ASSIGN_OR_RETURN(const int64_t depth, store_->QueueDepth());
    for (const auto& job : jobs) *response->add_jobs() = ToProto(job);
    response->set_queue_depth(depth);
    return Status::Ok();
  }));
}

grpc::Status CatalogServiceImpl::GetTimings(grpc::ServerContext* context,
                                            const v1::GetTimingsRequest* request,
                                            v1::GetTimingsResponse* response) {
  RpcTimer timer(*metrics_, "GetTimings");
  return timer.Finish(Guarded("GetTimings", [&]() -> Status {
    UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "GetTimings").status());
    FieldErrors errors;
    DeviceFingerprint device;
    ConvProblem problem;
    ReadField(request->has_device(), request->device(), "device", errors, device);
    ReadField(request->has_problem(), request->problem(), "problem", errors, problem);
    UCUDNN_RETURN_IF_ERROR(errors.ToStatus());
    UCUDNN_ASSIGN_OR_RETURN(auto records, store_->GetTimingRecords(device, problem));
    for (const auto& record : records) {
      v1::Timing* m = response->add_timings();
      *m = ToProto(record.timing);
      m->set_measured_by(record.measured_by);
      m->set_measured_at(record.measured_at);
    }
    response->set_problem_hash(HashHex(StableHash(problem)));
    return Status::Ok();
  }));
}

grpc::Status CatalogServiceImpl::GetParetoFront(grpc::ServerContext* context,
                                                const v1::GetParetoFrontRequest* request,
                                                v1::GetParetoFrontResponse* response) {
  RpcTimer timer(*metrics_, "GetParetoFront");
  return timer.Finish(Guarded("GetParetoFront", [&]() -> Status {
    UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "GetParetoFront").status());
    FieldErrors errors;
    DeviceFingerprint device;
    Kernel kernel;
    ReadField(request->has_device(), request->device(), "device", errors, device);
    ReadField(request->has_kernel(), request->kernel(), "kernel", errors, kernel);
    BatchPolicy policy = BatchPolicy::kPowerOfTwo;
    if (auto parsed = FromProto(request->policy()); parsed.ok()) {
      policy = *parsed;
    } else {
      errors.Add(parsed.status());
    }
    UCUDNN_RETURN_IF_ERROR(errors.ToStatus());
    UCUDNN_ASSIGN_OR_RETURN(auto timings, coordinator_->LoadTimings(device, kernel.problem));
    if (timings->table.entries.empty()) {
      return NotFound("no timings for problem " + HashHex(StableHash(kernel.problem)) +
                      " on device " + HashHex(device.Hash()) +
                      " (GetPlan enqueues a benchmark for it)");
    }
    for (const auto& config : ParetoFront(timings->table, kernel.mini_batch, policy)) {
      v1::ParetoPoint* point = response->add_points();
      point->set_time_ms(config.time_ms);
      point->set_workspace_bytes(config.workspace_bytes);
      for (const auto& segment : config.segments) *point->add_segments() = ToProto(segment);
    }
    return Status::Ok();
  }));
}

grpc::Status CatalogServiceImpl::ExplainPlan(grpc::ServerContext* context,
                                             const v1::ExplainPlanRequest* request,
                                             v1::ExplainPlanResponse* response) {
  RpcTimer timer(*metrics_, "ExplainPlan");
  return timer.Finish(Guarded("ExplainPlan", [&]() -> Status {
    UCUDNN_RETURN_IF_ERROR(Identify(*auth_, *metrics_, *context, "ExplainPlan").status());
    if (!request->has_request()) return InvalidArgument("request: required");
    // It plans (an ILP may take seconds) on this thread: within the planner's bound.
    const BlockingCallRunner::Ticket ticket = runner_->TryAdmit();
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
      response->set_text(FormatPlanTable(*outcome->network_plan,
                                         AlgorithmNamerFor(request->request().device().backend())));
    }
    return Status::Ok();
  }));
}

grpc::Status CatalogServiceImpl::RetryJob(grpc::ServerContext* context,
                                          const v1::RetryJobRequest* request,
                                          v1::RetryJobResponse* response) {
  RpcTimer timer(*metrics_, "RetryJob");
  const Result<Caller> caller = Identify(*auth_, *metrics_, *context, "RetryJob");
  if (!caller.ok()) return timer.Finish(ToGrpcStatus(caller.status()));
  if (!MayRetryJobs(caller->role)) {
    return timer.Finish(
        Denied(*metrics_, *context, "RetryJob", caller->role, "retry jobs (role admin)"));
  }
  return timer.Finish(Guarded("RetryJob", [&]() -> Status {
    if (request->job_id() < 1) {
      return InvalidArgument("job_id: must be positive, got " + std::to_string(request->job_id()));
    }
    UCUDNN_ASSIGN_OR_RETURN(const store::Job job, store_->RetryJob(request->job_id()));
    spdlog::info("RetryJob: job {} re-queued at the request of {}", job.id, context->peer());
    *response->mutable_job() = ToProto(job);
    return Status::Ok();
  }));
}

grpc::Status CatalogServiceImpl::CancelJobs(grpc::ServerContext* context,
                                            const v1::CancelJobsRequest* request,
                                            v1::CancelJobsResponse* response) {
  RpcTimer timer(*metrics_, "CancelJobs");
  const Result<Caller> caller = Identify(*auth_, *metrics_, *context, "CancelJobs");
  if (!caller.ok()) return timer.Finish(ToGrpcStatus(caller.status()));
  // Taking work out of the queue is an operator's act, as re-queueing it is (role admin).
  if (!MayRetryJobs(caller->role)) {
    return timer.Finish(
        Denied(*metrics_, *context, "CancelJobs", caller->role, "cancel jobs (role admin)"));
  }
  return timer.Finish(Guarded("CancelJobs", [&]() -> Status {
    if (request->all_queued() == (request->job_id() != 0)) {
      return InvalidArgument("job_id, all_queued: give exactly one (job_id " +
                             std::to_string(request->job_id()) + ", all_queued " +
                             (request->all_queued() ? "true" : "false") + ")");
    }
    if (request->job_id() < 0) {
      return InvalidArgument("job_id: must be positive, got " + std::to_string(request->job_id()));
    }
    std::optional<uint64_t> device;
    if (!request->device_hash().empty()) {
      if (!request->all_queued()) return InvalidArgument("device_hash: only with all_queued");
      UCUDNN_ASSIGN_OR_RETURN(device, ParseHashHex(request->device_hash(), "device_hash"));
    }
    UCUDNN_ASSIGN_OR_RETURN(const auto cancelled,
                            store_->CancelQueuedJobs(request->job_id(), device));
    spdlog::info("CancelJobs: {} queued job(s) cancelled at the request of {}", cancelled.size(),
                 context->peer());
    for (const store::Job& job : cancelled) *response->add_cancelled() = ToProto(job);
    return Status::Ok();
  }));
}

// ---- TimingService -----------------------------------------------------------------------------

Result<ValidatedSubmission> ValidateSubmission(const v1::SubmitTimingsRequest& request) {
  ValidatedSubmission out;
  FieldErrors errors;
  ReadField(request.has_device(), request.device(), "device", errors, out.device);
  ReadField(request.has_problem(), request.problem(), "problem", errors, out.problem);
  const int count = request.timings_size();
  if (count < 1 || count > kMaxTimingsPerSubmit) {
    errors.AddField("timings", "must hold 1 to " + std::to_string(kMaxTimingsPerSubmit) +
                                   " timings, got " + std::to_string(count));
  } else {
    out.timings.reserve(static_cast<size_t>(count));
    std::set<std::tuple<int64_t, int, std::string>> seen;
    for (int i = 0; i < count; ++i) {
      const std::string field = "timings[" + std::to_string(i) + "]";
      auto timing = FromProto(request.timings(i));
      if (!timing.ok()) {
        errors.Add(field, timing.status());
        continue;
      }
      if (!seen.emplace(timing->micro_batch, timing->algo, timing->engine_config).second) {
        errors.AddField(field, "duplicate (micro_batch " + std::to_string(timing->micro_batch) +
                                   ", algo " + AlgorithmText(AlgorithmOf(*timing)) + ")");
        continue;
      }
      out.timings.push_back(std::move(timing).value());
    }
  }
  if (request.measured_by().size() > kMaxMeasuredByBytes) {
    errors.AddField("measured_by", "at most " + std::to_string(kMaxMeasuredByBytes) +
                                       " bytes, got " +
                                       std::to_string(request.measured_by().size()));
  }
  UCUDNN_RETURN_IF_ERROR(errors.ToStatus());
  out.measured_by = request.measured_by().empty() ? "api" : request.measured_by();
  return out;
}

grpc::Status TimingServiceImpl::SubmitTimings(grpc::ServerContext* context,
                                              const v1::SubmitTimingsRequest* request,
                                              v1::SubmitTimingsResponse* response) {
  RpcTimer timer(*metrics_, "SubmitTimings");
  // The token before anything else: an unauthenticated caller learns nothing about its input.
  const Result<Caller> caller = Identify(*auth_, *metrics_, *context, "SubmitTimings");
  if (!caller.ok()) return timer.Finish(ToGrpcStatus(caller.status()));
  if (!MaySubmitTimings(caller->role)) {
    return timer.Finish(Denied(*metrics_, *context, "SubmitTimings", caller->role,
                               "submit timings (role submit or admin)"));
  }
  return timer.Finish(Guarded("SubmitTimings", [&]() -> Status {
    UCUDNN_ASSIGN_OR_RETURN(auto submission, ValidateSubmission(*request));
    UCUDNN_RETURN_IF_ERROR(store_->PutTimings(submission.device, submission.problem,
                                              submission.timings, submission.measured_by));
    metrics_->RecordTimingsStored(static_cast<int64_t>(submission.timings.size()));
    response->set_stored(static_cast<int32_t>(submission.timings.size()));
    return Status::Ok();
  }));
}

}  // namespace ucudnn::server
