// Plan decoding as a client does it: arbitrary bytes parsed as a GetPlanResponse, its plan
// converted with FromProto. Rejections are clean errors naming a field; an accepted plan is
// internally consistent (segments sum to the mini-batch, workspace is the largest segment's) and
// converts back to a message that is accepted again with the same kernels.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz_check.h"
#include "ucudnn/proto/proto_convert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ucudnn;        // NOLINT(google-build-using-namespace)
  using namespace ucudnn::fuzz;  // NOLINT(google-build-using-namespace)
  v1::GetPlanResponse response;
  if (!response.ParseFromArray(data, static_cast<int>(size))) return 0;
  const v1::Plan& message = response.plan();
  auto plan = FromProto(message);
  if (!plan.ok()) {
    RequireCleanRejection(plan.status(), /*allow_failed_precondition=*/true);
    return 0;
  }
  auto device = FromProto(message.device());
  Require(device.ok(), "an accepted plan has an invalid device", device.status().ToString());
  for (const KernelPlan& k : plan->kernels) {
    if (k.status != KernelPlanStatus::kPlanned) continue;
    int64_t samples = 0;
    uint64_t workspace = 0;
    for (const Segment& s : k.config.segments) {
      Require(s.micro_batch >= 1, "empty segment");
      samples += s.micro_batch;
      workspace = std::max<uint64_t>(workspace, s.workspace_bytes);
    }
    Require(samples == k.kernel.mini_batch, "segments do not sum to the mini-batch");
    Require(workspace == k.config.workspace_bytes, "workspace is not the largest segment's");
  }
  const v1::Plan back = ToProto(*plan, *device);
  auto again = FromProto(back);
  Require(again.ok(), "an accepted plan is rejected after ToProto", again.status().ToString());
  Require(again->kernels.size() == plan->kernels.size(), "kernel count changed");
  for (size_t i = 0; i < plan->kernels.size(); ++i) {
    Require(again->kernels[i].kernel == plan->kernels[i].kernel &&
                again->kernels[i].status == plan->kernels[i].status,
            "a kernel plan changed in the round trip");
  }
  return 0;
}
