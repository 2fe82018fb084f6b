#include "c_stats.h"

namespace ucudnn::client {

ucudnnStats_t ToCStats(const ClientStats& s) {
  ucudnnStats_t c{};
  c.kernels = s.kernels;
  c.kernels_planned = s.kernels_planned;
  c.planned_calls = s.planned_calls;
  c.fallback_calls = s.fallback_calls;
  c.rejected_plan_calls = s.rejected_plan_calls;
  c.passthrough_calls = s.passthrough_calls;
  c.untracked_calls = s.untracked_calls;
  c.plan_requests = s.plan_requests;
  c.plan_request_failures = s.plan_request_failures;
  c.plans_received = s.plans_received;
  c.plans_from_cache = s.plans_from_cache;
  c.failed_plans = s.failed_plans;
  c.recovered_calls = s.recovered_calls;
  c.contributed_problems = s.contributed_problems;
  c.contributed_timings = s.contributed_timings;
  c.contribution_failures = s.contribution_failures;
  c.framework_calls = s.framework_calls;
  return c;
}

}  // namespace ucudnn::client
