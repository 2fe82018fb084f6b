// Which micro-batch sizes a workspace limit can use (issue 40: time sizes where the planner can
// use them). Splitting a mini-batch pays in two cases: the fastest configuration of a size needs
// more workspace than the limit (a smaller size may run a fast one within it), or a size's runs
// are faster per sample than the size they split (cuDNN's kernels are not equally efficient at
// every size). A search for one limit times a size's split only where one of those holds, or
// could (the mini-batch's first splits are always timed); ucudnn-bench-engine --replay-sizes
// measures what that saves and what it costs the plans on exhaustive tables. Pure: no backend,
// no database.
#pragma once

#include <cstdint>
#include <vector>

#include "ucudnn/core/timing.h"

namespace ucudnn {

// How many times the mini-batch is split before the rule decides whether to split again
// (SizesForLimit). On the exhaustive tables (ucudnn-bench-engine --replay-sizes), one split lost
// up to 1.06% of the plans' step, two up to 0.18%, three nothing.
inline constexpr int kSplitsAlwaysTimed = 2;

// Whether micro-batch sizes smaller than `size` can beat it under `workspace_limit`: no
// configuration of `table` ran at `size` (kOk, the framework's own aside), or its fastest one
// needs more workspace than the limit.
bool SmallerSizesCanHelp(const TimingTable& table, int64_t size, uint64_t workspace_limit);

// The sizes of `sizes` that a search for `workspace_limit` times to plan `mini_batch`, largest
// first: the mini-batch (or, where it is not one of `sizes`, the largest-first sum of sizes that
// makes it); below each timed size, the largest-first sum of smaller sizes that makes it, wherever
// smaller sizes can still pay: where the size's fastest configuration does not fit the limit
// (SmallerSizesCanHelp), or where the size ran faster per sample within the limit than the size
// it splits. The first kSplitsAlwaysTimed splits of the mini-batch are timed
// whatever they show. `table` holds the times the search has taken.
std::vector<int64_t> SizesForLimit(const TimingTable& table, const std::vector<int64_t>& sizes,
                                   int64_t mini_batch, uint64_t workspace_limit);

// A search for `workspace_limit` in rounds (the worker's, BenchmarkForLimit): the sizes to time
// next given `table`'s, every size with an entry in it counting as timed (an entry of the
// framework's own convolution aside). Those SizesForLimit
// reaches whose deciding sizes are timed (the always-timed ones need none) and that are not timed
// yet, largest first; empty once the table holds every size SizesForLimit asks of it (what a
// planner checks before it plans the limit from the table).
std::vector<int64_t> NextSizesForLimit(const TimingTable& table, const std::vector<int64_t>& sizes,
                                       int64_t mini_batch, uint64_t workspace_limit);

// Which entries of `table` a plan for `mini_batch` could use, were each one `margin` (a fraction)
// faster than it reads: an entry (kOk, the framework's own aside) is usable where running it once
// at time / (1 + margin), the rest of the mini-batch planned by the DP over the table's sizes
// within the same workspace limit, is no slower than the fastest plan at that limit, at some
// limit no smaller than the entry's workspace (each distinct workspace of the table is one). The
// benchmark (engine/benchmark.h) takes the full protocol only of usable entries, judged on their
// probes, which read up to 1.3x a short run's time (and measurements then rank within a few
// percent): a micro-batch of 1 that no plan of 256 uses needs no five samples of twenty runs. The
// slack is the entry's own (what its probe's error could hide), not the plan's: a tiny
// micro-batch costs a plan little in absolute time whatever its speed. One flag per entry of
// `table`, in its order.
std::vector<bool> UsableEntries(const TimingTable& table, int64_t mini_batch, double margin);

}  // namespace ucudnn
