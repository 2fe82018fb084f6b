// What the client library did: counters and a per-kernel report, for logs, dashboards and tests.
//
// Part of the public API (include prefix ucudnn/client/): standard C++ only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ucudnn {

struct ClientStats {
  uint64_t kernels = 0;          // distinct kernels tracked
  uint64_t kernels_planned = 0;  // of those, with a plan in use
  // Calls run as the plan's micro-batches.
  uint64_t planned_calls = 0;
  // Calls run undivided with the backend's best algorithm within the workspace given: no plan
  // yet, no plan possible, or a plan that needs more workspace than given.
  uint64_t fallback_calls = 0;
  // Of the fallback calls, those that had a plan needing more workspace than the call had.
  uint64_t rejected_plan_calls = 0;
  // Calls passed on unchanged (library disabled, or descriptors the library does not model).
  uint64_t passthrough_calls = 0;
  // Calls of kernels beyond ClientConfig::max_kernels (run undivided, untracked).
  uint64_t untracked_calls = 0;
  uint64_t plan_requests = 0;          // GetPlan calls sent to the server
  uint64_t plan_request_failures = 0;  // of those, failed (down, deadline, error answer)
  uint64_t plans_received = 0;         // kernel plans taken from the server's answers
  uint64_t plans_from_cache = 0;       // kernel plans taken from the local cache file
  // Plans that failed while running here (cuDNN declining a planned algorithm, say): each is
  // dropped, logged once, and its kernel runs undivided from then on.
  uint64_t failed_plans = 0;
  // Calls whose plan failed while running, completed by the fallback (also in fallback_calls).
  uint64_t recovered_calls = 0;
  // Contribution (ClientConfig::contribute): problems benchmarked here and submitted, timings
  // submitted, and benchmark or submission attempts that failed.
  uint64_t contributed_problems = 0;
  uint64_t contributed_timings = 0;
  uint64_t contribution_failures = 0;
  // Calls of kernels whose plan is the framework's own convolution (ClientConfig::framework):
  // the shape-level API answered UCUDNN_SHAPE_FRAMEWORK, the drop-in handle ran cuDNN's own
  // choice undivided. Not fallback calls.
  uint64_t framework_calls = 0;
};

// One kernel as the library sees it.
struct KernelReport {
  enum class State {
    kWaiting,     // no plan yet: asked for, or to be asked (runs undivided meanwhile)
    kPlanned,     // a plan is in use
    kMissing,     // the server lacks timings and is benchmarking; asked again later
    kInfeasible,  // no configuration fits the workspace; runs undivided
    kNoServer,    // no server configured and nothing cached; runs undivided
    kPlanFailed,  // its plan failed while running here; runs undivided
  };
  std::string name;     // the framework's label when it gave one, else "<op> <shape>"
  std::string problem;  // canonical key of the convolution (batch excluded)
  std::string op;       // "fwd", "bwd_data", "bwd_filter"
  int64_t mini_batch = 0;
  State state = State::kWaiting;
  std::string reason;            // why kMissing / kInfeasible / the last failure
  uint64_t workspace_limit = 0;  // the limit (per kernel) or budget (total) it is planned for
  uint64_t plan_workspace_bytes = 0;
  double predicted_ms = 0;  // the plan's predicted time (0 without a plan)
  double undivided_ms = 0;  // the planner's undivided baseline (0 when unknown)
  // The plan's segments in execution order: micro-batch size and algorithm (a legacy algorithm's
  // number, or -1 and an engine configuration's key, or -2 and the framework's identity when the
  // plan is the framework's own convolution, as in ucudnn::Segment).
  struct Segment {
    int64_t micro_batch = 0;
    int algo = 0;
    std::string engine_config;
  };
  std::vector<Segment> segments;
  bool from_cache = false;
  uint64_t planned_calls = 0;
  uint64_t fallback_calls = 0;
  uint64_t framework_calls = 0;
  // The framework's measured time for this kernel known to the server (0 when unknown).
  double framework_ms = 0;
};

std::string_view ToString(KernelReport::State state);  // "waiting", "planned", ...

}  // namespace ucudnn
