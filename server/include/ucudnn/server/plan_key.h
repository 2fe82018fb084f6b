// Content hashes behind the plan cache. A plan is a pure function of the request and the timings
// it was computed from, so (request canonical form + digests of the timing tables used) names it
// on every replica; a cached plan can never be stale, only unused. The key is a 64-bit hash, so a
// plan found under it is checked before use: in process against a second, independent hash of
// the same text (PlanContentCheck), from the database against the request it must answer
// (PlanAnswersRequest).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/timing.h"
#include "ucudnn/v1/ucudnn.pb.h"

namespace ucudnn::server {

// Bumped whenever the planning code changes what it answers for the same input, so that plans
// cached by an older server are not served by a newer one.
// 2: engine configurations, algorithm spaces; 3: the framework's own convolution a candidate;
// 4: ties with a framework that benchmarks in the job go to ucudnn (dp.h FrameworkBenchmarks);
// 5: such a tie only within the framework's own workspace; 6: KernelPlan.framework_workspace_bytes
// (a cached plan without it tells a client the framework's workspace is unknown)
inline constexpr int kPlannerRevision = 6;

// FNV-1a over the table's entries in (micro_batch, algo) order, every field exactly (times by
// their bit patterns): equal tables, in any entry order, give equal digests.
uint64_t TimingTableDigest(const TimingTable& table);

// The request as text, fixed field order: device key, policy, workspace mode and bytes, the ILP
// time limit (in mode total_sum only: the ILP may stop at it, so another limit is another
// answer), then each kernel's problem key, mini-batch and length-prefixed name.
std::string CanonicalPlanRequest(const PlanRequest& request);

// What the cache key hashes: the planner revision, the canonical request and, per kernel in
// request order, the digest of the table it was planned from (nullopt: treated as missing).
std::string PlanContentText(const PlanRequest& request,
                            const std::vector<std::optional<uint64_t>>& kernel_table_digests);
// The cache key: FNV-1a of PlanContentText, the same on every replica.
uint64_t PlanContentHash(const PlanRequest& request,
                         const std::vector<std::optional<uint64_t>>& kernel_table_digests);
// A second hash of the same text by an unrelated function, stable within one process only: an
// in-process cache entry must match both.
uint64_t PlanContentCheck(std::string_view content_text);

// Whether `plan` is the answer to `request`: the same device, policy, workspace mode and budget,
// and kernel for kernel the same problem, mini-batch and name. A plan found under a colliding
// key fails this and is treated as a miss.
bool PlanAnswersRequest(const v1::Plan& plan, const PlanRequest& request);

}  // namespace ucudnn::server
