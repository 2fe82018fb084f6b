// Content hashes behind the plan cache. A plan is a pure function of the request and the timings
// it was computed from, so (request canonical form + digests of the timing tables used) names it
// on every replica; a cached plan can never be stale, only unused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/timing.h"

namespace ucudnn::server {

// Bumped whenever the planning code changes what it answers for the same input, so that plans
// cached by an older server are not served by a newer one.
inline constexpr int kPlannerRevision = 1;

// FNV-1a over the table's entries in (micro_batch, algo) order, every field exactly (times by
// their bit patterns): equal tables, in any entry order, give equal digests.
uint64_t TimingTableDigest(const TimingTable& table);

// The request as text, fixed field order: device key, policy, workspace mode and bytes, then
// each kernel's problem key, mini-batch and length-prefixed name. The ILP time limit is not part
// of it (see PlanCoordinator on which ILP results are cached).
std::string CanonicalPlanRequest(const PlanRequest& request);

// The cache key: hash of the canonical request, the planner revision and, per kernel in request
// order, the digest of the table it was planned from (nullopt: treated as missing).
uint64_t PlanContentHash(const PlanRequest& request,
                         const std::vector<std::optional<uint64_t>>& kernel_table_digests);

}  // namespace ucudnn::server
