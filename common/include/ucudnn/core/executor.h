// Runs one kernel as its configuration's micro-batches on a backend.
#pragma once

#include <span>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

// Executes `segments` (sizes summing to `mini_batch`) one after another on `backend`, with the
// operands offset per micro-batch. Forward and backward-data write disjoint slices of the
// output; backward-filter accumulates: the first segment uses `beta`, the rest beta = 1.
// `workspace` must hold the largest segment's workspace. Validates everything first and runs
// nothing on bad input.
Status ExecuteMicroBatched(ConvBackend& backend, const ConvProblem& problem, int64_t mini_batch,
                           std::span<const Segment> segments, const ConvOperands& operands,
                           void* workspace, size_t workspace_bytes, float alpha, float beta);

}  // namespace ucudnn
