// Where plans come from: the planner server over gRPC (grpc_plan_source.cc), or a test's stand-in.
// Only the session's planner thread calls GetPlan(); the caller threads never wait on it. The
// contribution calls (LiveWorkers, SubmitTimings) come from the thread that contributes, at a
// quiet point, possibly while the planner thread is in GetPlan().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"

namespace ucudnn::client {

class PlanSource {
 public:
  virtual ~PlanSource() = default;
  // One attempt, bounded by the source's deadline. The answer's kernels are in request order;
  // a plan for another device is an error.
  virtual Result<NetworkPlan> GetPlan(const PlanRequest& request) = 0;
  // From any thread: aborts the calls in flight and makes later calls fail at once (shutdown).
  virtual void Cancel() = 0;
  // "grpc planner:7000", for logs.
  virtual std::string Describe() const = 0;

  // Contribution. Live workers serving `device` (CatalogService.ListDevices: the device whose
  // fingerprint hash matches; 0 for a device the store does not know).
  virtual Result<int> LiveWorkers(const DeviceFingerprint& device) {
    (void)device;
    return Unsupported(Describe() + " cannot list devices");
  }
  // Stores `timings` of `problem` measured on `device` (TimingService.SubmitTimings, with the
  // token); the number stored.
  virtual Result<int> SubmitTimings(const DeviceFingerprint& device, const ConvProblem& problem,
                                    const std::vector<Timing>& timings,
                                    const std::string& measured_by) {
    (void)device, (void)problem, (void)timings, (void)measured_by;
    return Unsupported(Describe() + " cannot take timings");
  }
};

struct GrpcPlanSourceOptions {
  std::string address;  // host:port
  std::string token;    // sent as "authorization: Bearer TOKEN" when not empty
  int64_t deadline_ms = 2000;
  uint32_t server_wait_ms = 0;  // GetPlanRequest.max_wait_ms
  bool tls = false;             // SSL channel credentials instead of plaintext
  std::string ca_file;          // PEM root certificates; empty: the system's
};

// kInvalidArgument when the TLS root certificates cannot be read: a source that would talk
// plaintext or trust nothing instead is never made.
Result<std::unique_ptr<PlanSource>> MakeGrpcPlanSource(const GrpcPlanSourceOptions& options);

}  // namespace ucudnn::client
