// Commands that talk to a planner server over gRPC.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "commands.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "progress.h"
#include "ucudnn/core/backend_factory.h"
#include "ucudnn/core/proto_convert.h"
#include "ucudnn/core/units.h"
#include "ucudnn/planner/plan_table.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::cli {

int Fail(const Status& status);
Result<std::vector<Kernel>> ResolveKernels(const NetworkOptions& net);

namespace {

using v1::CatalogService;
using v1::PlannerService;

int FailGrpc(const grpc::Status& status, const ServerOptions& server) {
  return Fail(FromGrpc(status, server));
}

void PrintJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  std::printf("%s", json.c_str());
}

// The device a plan is for: a device of the catalog (--device: hash prefix or list index), or
// this machine's backend.
Result<DeviceFingerprint> ResolveDevice(const ServerOptions& server, const PlanOptions& options) {
  if (!options.device.empty()) {
    v1::ListDevicesResponse devices;
    grpc::Status s =
        CallUnary(server, &CatalogService::Stub::ListDevices, v1::ListDevicesRequest(), &devices);
    if (!s.ok()) return FromGrpc(s, server);
    for (int i = 0; i < devices.devices_size(); ++i) {
      const v1::Device& d = devices.devices(i);
      if (options.device == std::to_string(i) ||
          d.fingerprint_hash().rfind(options.device, 0) == 0) {
        return FromProto(d.fingerprint());
      }
    }
    return NotFound("--device " + options.device +
                    ": no such device in the catalog (see `ucudnn devices`)");
  }
  std::string backend = options.backend;
  if (backend == "auto") backend = GpuCount() > 0 ? "cudnn" : "cpu";
  UCUDNN_ASSIGN_OR_RETURN(auto local, MakeBackend(backend, 0));
  return local->fingerprint();
}

Result<v1::GetPlanRequest> BuildRequest(const ServerOptions& server, const PlanOptions& options) {
  PlanRequest request;
  UCUDNN_ASSIGN_OR_RETURN(request.kernels, ResolveKernels(options.net));
  UCUDNN_ASSIGN_OR_RETURN(request.device, ResolveDevice(server, options));
  UCUDNN_ASSIGN_OR_RETURN(request.policy, ParseBatchPolicy(options.policy));
  UCUDNN_ASSIGN_OR_RETURN(request.workspace_bytes, ParseByteSize(options.workspace));
  UCUDNN_ASSIGN_OR_RETURN(request.workspace_mode, ParseWorkspaceModeChoice("--mode", options.mode));
  UCUDNN_ASSIGN_OR_RETURN(int64_t wait_ms, ParseDurationMs(options.wait));
  if (wait_ms > 600000 * 3) return InvalidArgument("--wait: at most 30m");
  return ToProto(request, static_cast<uint32_t>(std::min<int64_t>(wait_ms, 600000)));
}

// The plan as a table (algorithms named as `backend`'s), or as JSON.
int PrintPlan(const v1::Plan& plan, const std::string& backend, bool json) {
  if (json) {
    PrintJson(plan);
    return 0;
  }
  auto decoded = FromProto(plan);
  if (!decoded.ok()) return Fail(decoded.status().WithContext("the server's plan"));
  std::printf("%s", FormatPlanTable(*decoded, AlgorithmNamerFor(backend)).c_str());
  for (const v1::MissingProblem& m : plan.missing()) {
    std::printf("missing: %s (job %lld, %s)\n", m.problem_hash().c_str(),
                static_cast<long long>(m.job_id()), m.job_state().c_str());
    if (m.job_state() == "failed") {
      std::printf("  error: %s\n  (`ucudnn jobs --retry %lld` re-queues it)\n", m.error().c_str(),
                  static_cast<long long>(m.job_id()));
    }
  }
  return plan.status() == v1::PLAN_STATUS_COMPLETE ? 0 : 3;
}

}  // namespace

int RunHealth(const ServerOptions& server) {
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(server));
  grpc::health::v1::HealthCheckResponse response;
  auto context = MakeContext(server, 3000);
  grpc::Status s = stub->Check(context.get(), grpc::health::v1::HealthCheckRequest(), &response);
  if (!s.ok()) return FailGrpc(s, server);
  const bool serving = response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  std::printf("%s: %s\n", server.address.c_str(), serving ? "SERVING" : "NOT_SERVING");
  return serving ? 0 : 1;
}

int RunDevices(const ServerOptions& server) {
  v1::ListDevicesResponse response;
  grpc::Status s =
      CallUnary(server, &CatalogService::Stub::ListDevices, v1::ListDevicesRequest(), &response);
  if (!s.ok()) return FailGrpc(s, server);
  std::printf("%-3s %-16s %-6s %-36s %-8s %-7s %10s %7s\n", "#", "hash", "backend", "name", "cudnn",
              "cc", "timings", "workers");
  for (int i = 0; i < response.devices_size(); ++i) {
    const v1::Device& d = response.devices(i);
    const v1::DeviceFingerprint& f = d.fingerprint();
    std::printf("%-3d %-16s %-6s %-36.36s %-8d %d.%-5d %10lld %7d\n", i,
                d.fingerprint_hash().c_str(), f.backend().c_str(), f.name().c_str(),
                f.cudnn_version(), f.cc_major(), f.cc_minor(),
                static_cast<long long>(d.timing_count()), d.live_workers());
  }
  return 0;
}

int RunWorkers(const ServerOptions& server, bool alive_only) {
  v1::ListWorkersRequest request;
  request.set_alive_only(alive_only);
  v1::ListWorkersResponse response;
  grpc::Status s = CallUnary(server, &CatalogService::Stub::ListWorkers, request, &response);
  if (!s.ok()) return FailGrpc(s, server);
  std::printf("%-40s %-6s %-32s %-28s %6s\n", "worker", "alive", "device", "last heartbeat",
              "done");
  for (const v1::Worker& w : response.workers()) {
    std::printf("%-40s %-6s %-32.32s %-28s %6lld\n", w.id().c_str(), w.alive() ? "yes" : "no",
                w.device().name().c_str(), w.last_heartbeat().c_str(),
                static_cast<long long>(w.jobs_done()));
  }
  return 0;
}

int RunJobs(const ServerOptions& server, const std::string& state, int limit) {
  v1::ListJobsRequest request;
  request.set_state(state);
  request.set_limit(limit);
  v1::ListJobsResponse response;
  grpc::Status s = CallUnary(server, &CatalogService::Stub::ListJobs, request, &response);
  if (!s.ok()) return FailGrpc(s, server);
  std::printf("%-8s %-8s %-16s %-8s %-36s %s\n", "job", "state", "device", "attempts", "worker",
              "problem");
  for (const v1::Job& j : response.jobs()) {
    auto problem = FromProto(j.problem());
    std::printf("%-8lld %-8s %-16s %-8d %-36.36s %s\n", static_cast<long long>(j.id()),
                j.state().c_str(), j.device_hash().c_str(), j.attempts(), j.worker_id().c_str(),
                problem.ok() ? CanonicalKey(*problem).c_str() : "?");
    if (j.state() == "failed" && !j.error().empty()) {
      std::printf("         error: %s\n", j.error().c_str());
    }
  }
  std::printf("queue depth: %lld\n", static_cast<long long>(response.queue_depth()));
  return 0;
}

int RunRetryJob(const ServerOptions& server, int64_t job_id) {
  v1::RetryJobRequest request;
  request.set_job_id(job_id);
  v1::RetryJobResponse response;
  grpc::Status s = CallUnary(server, &CatalogService::Stub::RetryJob, request, &response);
  if (!s.ok()) return FailGrpc(s, server);
  std::printf("job %lld is %s again (attempts reset)\n",
              static_cast<long long>(response.job().id()), response.job().state().c_str());
  return 0;
}

int RunPlan(const ServerOptions& server, const PlanOptions& options) {
  auto request = BuildRequest(server, options);
  if (!request.ok()) return Fail(request.status());
  auto stub = PlannerService::NewStub(MakeChannel(server));
  if (request->max_wait_ms() == 0) {
    v1::GetPlanResponse response;
    auto context = MakeContext(server);
    grpc::Status s = stub->GetPlan(context.get(), *request, &response);
    if (!s.ok()) return FailGrpc(s, server);
    return PrintPlan(response.plan(), request->device().backend(), options.json);
  }
  // Waiting for benchmarks: stream the progress.
  v1::StreamPlanRequest stream_request;
  *stream_request.mutable_request() = *request;
  auto context = MakeContext(server, int64_t{request->max_wait_ms()} + 30000);
  auto reader = stub->StreamPlan(context.get(), stream_request);
  v1::StreamPlanResponse update;
  v1::Plan plan;
  ProgressBar bar("benchmarks", 0);
  while (reader->Read(&update)) {
    bar.SetTotal(update.problems_total());
    bar.Update(update.problems_ready(), "problems timed");
    if (update.done()) plan = update.plan();
  }
  bar.Finish();
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FailGrpc(s, server);
  return PrintPlan(plan, request->device().backend(), options.json);
}

int RunExplain(const ServerOptions& server, const PlanOptions& options) {
  auto request = BuildRequest(server, options);
  if (!request.ok()) return Fail(request.status());
  v1::ExplainPlanRequest explain;
  *explain.mutable_request() = *request;
  v1::ExplainPlanResponse response;
  grpc::Status s = CallUnary(server, &CatalogService::Stub::ExplainPlan, explain, &response);
  if (!s.ok()) return FailGrpc(s, server);
  std::printf("%s", response.text().c_str());
  return 0;
}

int RunTimings(const ServerOptions& server, const PlanOptions& options) {
  auto kernels = ResolveKernels(options.net);
  if (!kernels.ok()) return Fail(kernels.status());
  auto device = ResolveDevice(server, options);
  if (!device.ok()) return Fail(device.status());
  auto stub = CatalogService::NewStub(MakeChannel(server));
  std::printf("%-32s %-16s %8s %6s %12s %10s %14s %s\n", "kernel", "problem", "micro", "algo",
              "median ms", "spread ms", "workspace", "status");
  std::set<std::string> seen;
  for (const Kernel& k : *kernels) {
    if (!seen.insert(CanonicalKey(k.problem)).second) continue;
    v1::GetTimingsRequest request;
    *request.mutable_device() = ToProto(*device);
    *request.mutable_problem() = ToProto(k.problem);
    v1::GetTimingsResponse response;
    auto context = MakeContext(server);
    grpc::Status s = stub->GetTimings(context.get(), request, &response);
    if (!s.ok()) return FailGrpc(s, server);
    for (const v1::Timing& t : response.timings()) {
      std::printf("%-32s %-16s %8lld %6d %12.4f %10.4f %14s %s\n", k.name.c_str(),
                  response.problem_hash().c_str(), static_cast<long long>(t.micro_batch()),
                  t.algo(), t.time_ms(), t.spread_ms(), FormatBytes(t.workspace_bytes()).c_str(),
                  v1::TimingStatus_Name(t.status()).c_str());
    }
  }
  return 0;
}

}  // namespace ucudnn::cli
