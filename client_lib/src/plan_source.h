// Where plans come from: the planner server over gRPC (grpc_plan_source.cc), or a test's stand-in.
// Only the session's planner thread calls GetPlan(); the caller threads never wait on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/status.h"

namespace ucudnn::client {

class PlanSource {
 public:
  virtual ~PlanSource() = default;
  // One attempt, bounded by the source's deadline. The answer's kernels are in request order;
  // a plan for another device is an error.
  virtual Result<NetworkPlan> GetPlan(const PlanRequest& request) = 0;
  // From any thread: aborts the call in flight and makes later calls fail at once (shutdown).
  virtual void Cancel() = 0;
  // "grpc planner:7000", for logs.
  virtual std::string Describe() const = 0;
};

struct GrpcPlanSourceOptions {
  std::string address;  // host:port
  std::string token;    // sent as "authorization: Bearer TOKEN" when not empty
  int64_t deadline_ms = 2000;
  uint32_t server_wait_ms = 0;  // GetPlanRequest.max_wait_ms
};

std::unique_ptr<PlanSource> MakeGrpcPlanSource(const GrpcPlanSourceOptions& options);

}  // namespace ucudnn::client
