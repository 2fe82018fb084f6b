// Per-kernel planning (pure): the μ-cuDNN dynamic program and the time/workspace Pareto front.
#pragma once

#include <cstdint>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

// Candidate micro-batch sizes for `policy` up to `mini_batch`, ascending. kUndivided: {B};
// kPowerOfTwo: 1, 2, 4, ... <= B, plus B itself; kAll: 1..B.
std::vector<int64_t> MicroBatchSizes(BatchPolicy policy, int64_t mini_batch);

// T(0) = 0, T(n) = min over allowed b <= n of t(b) + T(n - b), with t(b) the fastest kOk
// algorithm at micro-batch b whose workspace <= limit. Ties are broken deterministically
// (smaller workspace, then larger micro-batch, then lower algorithm id). kNotFound when no
// configuration fits, with the reason (no timings at all / nothing within the limit).
Result<KernelConfig> SolveKernelDp(const TimingTable& table, int64_t mini_batch, BatchPolicy policy,
                                   uint64_t workspace_limit);

// The fastest single kOk algorithm at the full mini-batch within the limit.
Result<Segment> FastestUndivided(const TimingTable& table, int64_t mini_batch,
                                 uint64_t workspace_limit);

// For every distinct workspace level of the table (up to `max_workspace`), the DP optimum at
// that level; dominated points (slower and no smaller) dropped. Sorted by workspace ascending,
// time strictly descending.
std::vector<KernelConfig> ParetoFront(const TimingTable& table, int64_t mini_batch,
                                      BatchPolicy policy, uint64_t max_workspace = UINT64_MAX);

}  // namespace ucudnn
