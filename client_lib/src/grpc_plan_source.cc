#include <grpcpp/grpcpp.h>

#include <chrono>
#include <mutex>
#include <string>

#include "plan_source.h"
#include "ucudnn/core/grpc_status.h"
#include "ucudnn/core/proto_convert.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::client {
namespace {

class GrpcPlanSource final : public PlanSource {
 public:
  explicit GrpcPlanSource(const GrpcPlanSourceOptions& options)
      : options_(options),
        stub_(v1::PlannerService::NewStub(
            grpc::CreateChannel(options.address, grpc::InsecureChannelCredentials()))) {}

  Result<NetworkPlan> GetPlan(const PlanRequest& request) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(options_.deadline_ms));
    if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
    {
      std::lock_guard lock(mutex_);
      if (cancelled_) return Unavailable("planner client is shutting down");
      in_flight_ = &context;
    }
    const v1::GetPlanRequest message = ToProto(request, options_.server_wait_ms);
    v1::GetPlanResponse response;
    const grpc::Status status = stub_->GetPlan(&context, message, &response);
    {
      std::lock_guard lock(mutex_);
      in_flight_ = nullptr;
    }
    if (!status.ok()) {
      return Status(FromGrpcCode(status.error_code()),
                    "GetPlan to " + options_.address + ": " + status.error_message());
    }
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

  void Cancel() override {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }

  std::string Describe() const override { return "grpc " + options_.address; }

 private:
  GrpcPlanSourceOptions options_;
  std::unique_ptr<v1::PlannerService::Stub> stub_;
  std::mutex mutex_;
  bool cancelled_ = false;
  grpc::ClientContext* in_flight_ = nullptr;
};

}  // namespace

std::unique_ptr<PlanSource> MakeGrpcPlanSource(const GrpcPlanSourceOptions& options) {
  return std::make_unique<GrpcPlanSource>(options);
}

}  // namespace ucudnn::client
