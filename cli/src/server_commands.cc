// Commands that talk to a planner server over gRPC.
#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "commands.h"
#include "curve.h"
#include "explain_table.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "printable.h"
#include "progress.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/units.h"
#include "ucudnn/engine/result_check.h"
#include "ucudnn/planner/plan_table.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::cli {

Result<std::vector<Kernel>> ResolveKernels(const NetworkOptions& net);

namespace {

using v1::CatalogService;
using v1::PlannerService;

int FailGrpc(const grpc::Status& status, const ServerOptions& server) {
  return Fail(FromGrpc(status, server));
}

// A message in protobuf's JSON mapping (field names as in the .proto; 64-bit integers are
// strings, as that mapping says).
std::string MessageJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // an empty list prints as [], not as nothing
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

void PrintJson(const google::protobuf::Message& message) {
  std::printf("%s", MessageJson(message).c_str());
}

void PrintJson(const nlohmann::json& document) { std::printf("%s\n", document.dump(2).c_str()); }

// A device of the catalog named by a hash prefix or its index in `ucudnn devices`.
Result<v1::Device> FindCatalogDevice(const ServerOptions& server, const std::string& wanted) {
  v1::ListDevicesResponse devices;
  grpc::Status s =
      CallUnary(server, &CatalogService::Stub::ListDevices, v1::ListDevicesRequest(), &devices);
  if (!s.ok()) return FromGrpc(s, server);
  for (int i = 0; i < devices.devices_size(); ++i) {
    const v1::Device& d = devices.devices(i);
    if (wanted == std::to_string(i) || d.fingerprint_hash().rfind(wanted, 0) == 0) return d;
  }
  return NotFound("--device " + wanted + ": no such device in the catalog (see `ucudnn devices`)");
}

// The device a plan is for: a device of the catalog (--device: hash prefix or list index), or
// this machine's backend.
Result<DeviceFingerprint> ResolveDevice(const ServerOptions& server, const PlanOptions& options) {
  if (!options.device.empty()) {
    UCUDNN_ASSIGN_OR_RETURN(const v1::Device device, FindCatalogDevice(server, options.device));
    return FromProto(device.fingerprint());
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
  UCUDNN_ASSIGN_OR_RETURN(request.policy, ParseBatchPolicyChoice("--policy", options.policy));
  UCUDNN_ASSIGN_OR_RETURN(request.workspace_bytes, ParseByteSize(options.workspace));
  UCUDNN_ASSIGN_OR_RETURN(request.workspace_mode, ParseWorkspaceModeChoice("--mode", options.mode));
  UCUDNN_ASSIGN_OR_RETURN(request.algorithms,
                          ParseAlgorithmSpaceChoice("--algorithms", options.algorithms));
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
  int not_queued = 0;
  for (const v1::MissingProblem& m : plan.missing()) {
    if (m.job_id() == 0) {
      // The server made the plan read-only: nothing was enqueued for this problem.
      ++not_queued;
      std::printf("missing: %s (not queued)\n", Printable(m.problem_hash()).c_str());
      continue;
    }
    std::printf("missing: %s (job %lld, %s)\n", Printable(m.problem_hash()).c_str(),
                static_cast<long long>(m.job_id()), Printable(m.job_state()).c_str());
    if (m.job_state() == "failed") {
      std::printf("  error: %s\n  (`ucudnn jobs --retry %lld` re-queues it)\n",
                  Printable(m.error()).c_str(), static_cast<long long>(m.job_id()));
    }
  }
  if (not_queued > 0) {
    std::fprintf(stderr,
                 "ucudnn: %d problem(s) have no timings and no benchmark was queued for them: "
                 "the server lets this caller only read (queuing needs a `plan` token: --token, "
                 "--token-file or UCUDNN_TOKEN), so there was nothing to wait for\n",
                 not_queued);
  }
  return plan.status() == v1::PLAN_STATUS_COMPLETE ? 0 : 3;
}

}  // namespace

int RunHealth(const ServerOptions& server, bool json) {
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(server));
  grpc::health::v1::HealthCheckResponse response;
  auto context = MakeContext(server, 3000);
  grpc::Status s = stub->Check(context.get(), grpc::health::v1::HealthCheckRequest(), &response);
  if (!s.ok()) return FailGrpc(s, server);
  const bool serving = response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  const char* status = serving ? "SERVING" : "NOT_SERVING";
  if (json) {
    PrintJson(nlohmann::json{{"address", server.address}, {"status", status}});
  } else {
    std::printf("%s: %s\n", server.address.c_str(), status);
  }
  return serving ? 0 : 1;
}

int RunDevices(const ServerOptions& server, bool json) {
  v1::ListDevicesResponse response;
  grpc::Status s =
      CallUnary(server, &CatalogService::Stub::ListDevices, v1::ListDevicesRequest(), &response);
  if (!s.ok()) return FailGrpc(s, server);
  if (json) {
    PrintJson(response);
    return 0;
  }
  std::printf("%-3s %-16s %-6s %-36s %-8s %-7s %10s %7s\n", "#", "hash", "backend", "name", "cudnn",
              "cc", "timings", "workers");
  for (int i = 0; i < response.devices_size(); ++i) {
    const v1::Device& d = response.devices(i);
    const v1::DeviceFingerprint& f = d.fingerprint();
    std::printf("%-3d %-16s %-6s %-36.36s %-8d %d.%-5d %10lld %7d\n", i,
                Printable(d.fingerprint_hash()).c_str(), Printable(f.backend()).c_str(),
                Printable(f.name()).c_str(), f.cudnn_version(), f.cc_major(), f.cc_minor(),
                static_cast<long long>(d.timing_count()), d.live_workers());
  }
  return 0;
}

int RunWorkers(const ServerOptions& server, bool alive_only, bool json) {
  v1::ListWorkersRequest request;
  request.set_alive_only(alive_only);
  v1::ListWorkersResponse response;
  grpc::Status s = CallUnary(server, &CatalogService::Stub::ListWorkers, request, &response);
  if (!s.ok()) return FailGrpc(s, server);
  if (json) {
    PrintJson(response);
    return 0;
  }
  std::printf("%-40s %-6s %-32s %-28s %6s\n", "worker", "alive", "device", "last heartbeat",
              "done");
  for (const v1::Worker& w : response.workers()) {
    std::printf("%-40s %-6s %-32.32s %-28s %6lld\n", Printable(w.id()).c_str(),
                w.alive() ? "yes" : "no", Printable(w.device().name()).c_str(),
                Printable(w.last_heartbeat()).c_str(), static_cast<long long>(w.jobs_done()));
  }
  return 0;
}

int RunJobs(const ServerOptions& server, const std::string& state, int limit, bool json) {
  v1::ListJobsRequest request;
  request.set_state(state);
  request.set_limit(limit);
  v1::ListJobsResponse response;
  grpc::Status s = CallUnary(server, &CatalogService::Stub::ListJobs, request, &response);
  if (!s.ok()) return FailGrpc(s, server);
  if (json) {
    PrintJson(response);
    return 0;
  }
  // "sizes": every micro-batch size of the job's policy, or those a plan under its workspace
  // limit can use (the server's --search-sizes limit).
  std::printf("%-8s %-8s %-16s %-8s %-14s %-36s %s\n", "job", "state", "device", "attempts",
              "sizes", "worker", "problem");
  for (const v1::Job& j : response.jobs()) {
    auto problem = FromProto(j.problem());
    const std::string sizes = j.has_workspace_limit_bytes()
                                  ? "for " + FormatBytes(j.workspace_limit_bytes())
                                  : std::string("all");
    std::printf("%-8lld %-8s %-16s %-8d %-14s %-36.36s %s\n", static_cast<long long>(j.id()),
                Printable(j.state()).c_str(), Printable(j.device_hash()).c_str(), j.attempts(),
                sizes.c_str(), Printable(j.worker_id()).c_str(),
                problem.ok() ? CanonicalKey(*problem).c_str() : "?");
    if (j.state() == "failed" && !j.error().empty()) {
      std::printf("         error: %s\n", Printable(j.error()).c_str());
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
              static_cast<long long>(response.job().id()),
              Printable(response.job().state()).c_str());
  return 0;
}

int RunCancelJobs(const ServerOptions& server, std::optional<int64_t> job_id,
                  const std::string& device, bool json) {
  v1::CancelJobsRequest request;
  if (job_id) {
    request.set_job_id(*job_id);
  } else {
    request.set_all_queued(true);
  }
  if (!device.empty()) {
    auto found = FindCatalogDevice(server, device);
    if (!found.ok()) return Fail(found.status());
    request.set_device_hash(found->fingerprint_hash());
  }
  v1::CancelJobsResponse response;
  grpc::Status s = CallUnary(server, &CatalogService::Stub::CancelJobs, request, &response);
  if (!s.ok()) return FailGrpc(s, server);
  if (json) {
    PrintJson(response);
    return 0;
  }
  for (const v1::Job& j : response.cancelled()) {
    auto problem = FromProto(j.problem());
    std::printf("cancelled job %lld (device %s, problem %s)\n", static_cast<long long>(j.id()),
                Printable(j.device_hash()).c_str(),
                problem.ok() ? CanonicalKey(*problem).c_str() : "?");
  }
  std::printf("%d queued job(s) cancelled\n", response.cancelled_size());
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
  auto plan = FromProto(response.plan());
  if (!plan.ok()) return Fail(plan.status().WithContext("the server's plan"));
  const AlgorithmNamer names = AlgorithmNamerFor(request->device().backend());
  nlohmann::json kernels = nlohmann::json::array();
  std::string text;
  auto stub = CatalogService::NewStub(MakeChannel(server));
  for (const KernelPlan& kernel : plan->kernels) {
    v1::GetParetoFrontRequest front_request;
    *front_request.mutable_device() = request->device();
    *front_request.mutable_kernel() = ToProto(kernel.kernel);
    front_request.set_policy(request->policy());
    v1::GetParetoFrontResponse front_response;
    auto context = MakeContext(server);
    s = stub->GetParetoFront(context.get(), front_request, &front_response);
    // NOT_FOUND: no timings for this kernel yet (the plan lists it missing): no alternatives.
    if (!s.ok() && s.error_code() != grpc::StatusCode::NOT_FOUND) return FailGrpc(s, server);
    std::vector<KernelConfig> front;
    for (const v1::ParetoPoint& point : front_response.points()) {
      KernelConfig config;
      config.time_ms = point.time_ms();
      config.workspace_bytes = point.workspace_bytes();
      for (const v1::Segment& segment : point.segments()) {
        auto decoded = FromProto(segment);
        if (!decoded.ok()) return Fail(decoded.status().WithContext("the server's Pareto front"));
        config.segments.push_back(*decoded);
      }
      front.push_back(std::move(config));
    }
    const auto alternatives =
        ExplainAlternatives(kernel, front, plan->workspace_mode, request->workspace_bytes());
    text += FormatAlternatives(kernel, alternatives, names);
    nlohmann::json listed = nlohmann::json::array();
    for (const Alternative& a : alternatives) {
      listed.push_back(
          {{"workspace_bytes", a.config.workspace_bytes},
           {"time_ms", a.config.time_ms},
           {"segments", FormatSegments(a.config.segments, kernel.kernel.problem.op, names)},
           {"chosen", a.chosen},
           {"why", a.why}});
    }
    kernels.push_back({{"name", kernel.kernel.name}, {"alternatives", std::move(listed)}});
  }
  if (options.json) {
    PrintJson(nlohmann::json{{"plan", nlohmann::json::parse(MessageJson(response.plan()))},
                             {"kernels", std::move(kernels)}});
    return 0;
  }
  std::printf(
      "%s\nWhy each configuration (its Pareto front: no other is both faster and "
      "smaller; * chosen):\n%s",
      PrintableLines(response.text()).c_str(), text.c_str());
  return 0;
}

int RunTimings(const ServerOptions& server, const PlanOptions& options) {
  auto kernels = ResolveKernels(options.net);
  if (!kernels.ok()) return Fail(kernels.status());
  auto device = ResolveDevice(server, options);
  if (!device.ok()) return Fail(device.status());
  auto stub = CatalogService::NewStub(MakeChannel(server));
  nlohmann::json problems = nlohmann::json::array();
  std::string table;
  size_t timing_count = 0;
  std::set<std::string> seen;
  char line[512];
  for (const Kernel& k : *kernels) {
    if (!seen.insert(CanonicalKey(k.problem)).second) continue;
    v1::GetTimingsRequest request;
    *request.mutable_device() = ToProto(*device);
    *request.mutable_problem() = ToProto(k.problem);
    v1::GetTimingsResponse response;
    auto context = MakeContext(server);
    grpc::Status s = stub->GetTimings(context.get(), request, &response);
    if (!s.ok()) return FailGrpc(s, server);
    if (options.wrong_results) {
      // Only the configurations the worker found computing a wrong result.
      auto* timings = response.mutable_timings();
      timings->erase(std::remove_if(timings->begin(), timings->end(),
                                    [](const v1::Timing& t) {
                                      return t.error().rfind(kWrongResultError, 0) != 0;
                                    }),
                     timings->end());
      if (response.timings_size() == 0) continue;
    }
    timing_count += static_cast<size_t>(response.timings_size());
    nlohmann::json entry = nlohmann::json::parse(MessageJson(response));
    entry["kernel"] = k.name;
    problems.push_back(std::move(entry));
    for (const v1::Timing& t : response.timings()) {
      // The algorithm is the last column: an engine configuration's key ("eng34{k3=2;k14=-1}")
      // is longer than any width that suits the legacy numbers.
      const std::string algo = AlgorithmText({t.algo(), t.engine_config()});
      std::snprintf(line, sizeof(line), "%-32s %-16s %8lld %12.4f %10.4f %14s %-25s %s\n",
                    k.name.c_str(), response.problem_hash().c_str(),
                    static_cast<long long>(t.micro_batch()), t.time_ms(), t.spread_ms(),
                    FormatBytes(t.workspace_bytes()).c_str(),
                    v1::TimingStatus_Name(t.status()).c_str(), algo.c_str());
      table += line;
      if (options.wrong_results) table += "    " + Printable(t.error()) + "\n";
    }
  }
  const std::string device_hash = HashHex(device->Hash());
  if (options.json) {
    PrintJson(nlohmann::json{{"device_hash", device_hash}, {"problems", std::move(problems)}});
    return 0;
  }
  if (timing_count == 0) {
    std::printf("%s the %zu distinct problems of %s on device %s (%s)%s\n",
                options.wrong_results ? "no configuration blocked for a wrong result among"
                                      : "no timings stored for",
                seen.size(), options.net.network.c_str(), device_hash.c_str(),
                Printable(device->name).c_str(),
                options.wrong_results ? ""
                                      : "; their benchmarks may be queued (`ucudnn jobs`) or not "
                                        "asked for yet (`ucudnn plan`)");
    return 0;
  }
  std::printf("%-32s %-16s %8s %12s %10s %14s %-25s %s\n%s", "kernel", "problem", "micro",
              "median ms", "spread ms", "workspace", "status", "algo", table.c_str());
  return 0;
}

int RunCurve(const ServerOptions& server, const CurveOptions& options) {
  auto request = BuildRequest(server, options.plan);
  if (!request.ok()) return Fail(request.status());
  auto device = FromProto(request->device());
  if (!device.ok()) return Fail(device.status());
  auto max_bytes = ParseByteSize(options.max_workspace);
  if (!max_bytes.ok()) return Fail(max_bytes.status().WithContext("--max-workspace"));
  auto stub = PlannerService::NewStub(MakeChannel(server));
  std::vector<CurvePoint> points;
  nlohmann::json listed = nlohmann::json::array();
  for (const uint64_t limit : CurveLimits(*max_bytes)) {
    request->set_workspace_bytes(limit);
    v1::GetPlanResponse response;
    auto context = MakeContext(server);
    grpc::Status s = stub->GetPlan(context.get(), *request, &response);
    if (!s.ok()) return FailGrpc(s, server);
    auto plan = FromProto(response.plan());
    if (!plan.ok()) return Fail(plan.status().WithContext("the server's plan"));
    CurvePoint point;
    point.workspace_bytes = limit;
    point.predicted_ms = plan->total_time_ms;
    point.undivided_ms = plan->total_undivided_ms;
    point.kernels = static_cast<int>(plan->kernels.size());
    for (const KernelPlan& k : plan->kernels) {
      point.planned_kernels += k.status == KernelPlanStatus::kPlanned ? 1 : 0;
    }
    points.push_back(point);
    listed.push_back({{"workspace_bytes", point.workspace_bytes},
                      {"predicted_ms", point.predicted_ms},
                      {"undivided_ms", point.undivided_ms},
                      {"planned_kernels", point.planned_kernels},
                      {"kernels", point.kernels}});
  }
  if (!options.svg.empty()) {
    std::ofstream out(options.svg);
    out << FormatCurveSvg(points, options.plan.net.network + ", mini-batch " +
                                      std::to_string(options.plan.net.batch) + ", " +
                                      options.plan.mode + " on " + device->name);
    if (!out.good()) {
      return Fail(InvalidArgument("--svg: cannot write '" + options.svg + "'"));
    }
  }
  if (options.plan.json) {
    PrintJson(
        nlohmann::json{{"device_hash", HashHex(device->Hash())}, {"points", std::move(listed)}});
    return 0;
  }
  std::printf("%s", FormatCurveTable(points).c_str());
  if (!options.svg.empty()) std::printf("drawn into %s\n", options.svg.c_str());
  return 0;
}

}  // namespace ucudnn::cli
