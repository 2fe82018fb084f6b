#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "plan_source.h"
#include "ucudnn/proto/grpc_status.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::client {
namespace {

Result<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const GrpcPlanSourceOptions& options) {
  if (!options.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!options.ca_file.empty()) {
    std::ifstream in(options.ca_file, std::ios::binary);
    std::ostringstream pem;
    pem << in.rdbuf();
    if (!in || pem.str().empty()) {
      return InvalidArgument("UCUDNN_CA_FILE: cannot read root certificates from '" +
                             options.ca_file + "'");
    }
    ssl.pem_root_certs = pem.str();
  }
  return grpc::SslCredentials(ssl);
}

class GrpcPlanSource final : public PlanSource {
 public:
  GrpcPlanSource(const GrpcPlanSourceOptions& options,
                 const std::shared_ptr<grpc::Channel>& channel)
      : options_(options),
        planner_(v1::PlannerService::NewStub(channel)),
        catalog_(v1::CatalogService::NewStub(channel)),
        timings_(v1::TimingService::NewStub(channel)) {}

  Result<NetworkPlan> GetPlan(const PlanRequest& request) override {
    grpc::ClientContext context;
    UCUDNN_RETURN_IF_ERROR(Begin(context));
    const v1::GetPlanRequest message = ToProto(request, options_.server_wait_ms);
    v1::GetPlanResponse response;
    const grpc::Status status = planner_->GetPlan(&context, message, &response);
    End(context);
    if (!status.ok()) return Failure("GetPlan", status);
    Result<DeviceFingerprint> device = FromProto(response.plan().device());
    if (!device.ok()) return device.status().WithContext("GetPlan answer: plan.device");
    if (!(*device == request.device)) {
      return Internal("GetPlan answer is for another device (" + device->Key() + ")");
    }
    Result<NetworkPlan> plan = FromProto(response.plan());
    if (!plan.ok()) return plan.status().WithContext("GetPlan answer");
    if (plan->kernels.size() != request.kernels.size()) {
      return Internal("GetPlan answer has " + std::to_string(plan->kernels.size()) +
                      " kernels for " + std::to_string(request.kernels.size()) + " asked");
    }
    return plan;
  }

  Result<int> LiveWorkers(const DeviceFingerprint& device) override {
    grpc::ClientContext context;
    UCUDNN_RETURN_IF_ERROR(Begin(context));
    v1::ListDevicesResponse response;
    const grpc::Status status =
        catalog_->ListDevices(&context, v1::ListDevicesRequest(), &response);
    End(context);
    if (!status.ok()) return Failure("ListDevices", status);
    const std::string hash = HashHex(device.Hash());
    for (const v1::Device& d : response.devices()) {
      if (d.fingerprint_hash() == hash) return std::max(0, d.live_workers());
    }
    return 0;
  }

  Result<int> SubmitTimings(const DeviceFingerprint& device, const ConvProblem& problem,
                            const std::vector<Timing>& timings,
                            const std::string& measured_by) override {
    grpc::ClientContext context;
    UCUDNN_RETURN_IF_ERROR(Begin(context));
    v1::SubmitTimingsRequest request;
    *request.mutable_device() = ToProto(device);
    *request.mutable_problem() = ToProto(problem);
    for (const Timing& t : timings) *request.add_timings() = ToProto(t);
    request.set_measured_by(measured_by);
    v1::SubmitTimingsResponse response;
    const grpc::Status status = timings_->SubmitTimings(&context, request, &response);
    End(context);
    if (!status.ok()) return Failure("SubmitTimings", status);
    return response.stored();
  }

  void Cancel() override {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    for (grpc::ClientContext* context : in_flight_) context->TryCancel();
  }

  std::string Describe() const override {
    return std::string(options_.tls ? "grpc+tls " : "grpc ") + options_.address;
  }

 private:
  // Every call carries the deadline and the token, and is cancellable until End().
  Status Begin(grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(options_.deadline_ms));
    if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
    std::lock_guard lock(mutex_);
    if (cancelled_) return Unavailable("planner client is shutting down");
    in_flight_.push_back(&context);
    return Status::Ok();
  }
  void End(grpc::ClientContext& context) {
    std::lock_guard lock(mutex_);
    in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), &context), in_flight_.end());
  }
  Status Failure(const char* call, const grpc::Status& status) const {
    return Status(FromGrpcCode(status.error_code()),
                  std::string(call) + " to " + options_.address + ": " + status.error_message());
  }

  GrpcPlanSourceOptions options_;
  std::unique_ptr<v1::PlannerService::Stub> planner_;
  std::unique_ptr<v1::CatalogService::Stub> catalog_;
  std::unique_ptr<v1::TimingService::Stub> timings_;
  std::mutex mutex_;
  bool cancelled_ = false;
  std::vector<grpc::ClientContext*> in_flight_;
};

}  // namespace

Result<std::unique_ptr<PlanSource>> MakeGrpcPlanSource(const GrpcPlanSourceOptions& options) {
  UCUDNN_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                          Credentials(options));
  return std::unique_ptr<PlanSource>(
      std::make_unique<GrpcPlanSource>(options, grpc::CreateChannel(options.address, credentials)));
}

}  // namespace ucudnn::client
