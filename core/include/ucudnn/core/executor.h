// Runs one kernel as its configuration's micro-batches on a backend.
//
// One loop, two entry points: ExecuteMicroBatched() validates everything first, then runs;
// RunMicroBatches() only runs, for callers that validated the same plan before (the client
// library checks a plan once, then runs it on every call of a training step without asking the
// backend for workspace sizes again).
#pragma once

#include <cstddef>
#include <span>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

// Runs one micro-batch of a configuration. RunMicroBatches() calls it once per segment, in
// order, with the operands already offset to the segment's first sample and the segment's beta.
// Implementations may keep whatever they resolved for the configuration (the client library's
// cuDNN runner keeps one descriptor set per micro-batch size) and index it by `index`.
class MicroBatchRunner {
 public:
  virtual ~MicroBatchRunner() = default;
  virtual Status RunMicroBatch(size_t index, const Segment& segment, const ConvOperands& operands,
                               void* workspace, size_t workspace_bytes, float alpha,
                               float beta) = 0;
};

// The operands of the samples [first, ...): batch is the outermost dimension in NCHW and NHWC,
// so a micro-batch's tensors start `first` samples in. The filter is shared by every sample.
ConvOperands OffsetOperands(const ConvProblem& problem, const ConvOperands& operands,
                            int64_t first);

// The operands of timed run `run` (0, 1, ...) of `batch` samples: where the operands hold more
// samples than that (operands.samples), run i takes the (i mod slices)-th slice of `batch`
// samples, as the micro-batches of a segment take the batch's slices one after another. A
// micro-batch timed again and again on the same samples finds them in the device's L2 cache,
// which a step's micro-batches do not: on an H100, ConvNeXt-T's depthwise backward-data plans of
// 2-8 micro-batches ran 8-13% slower in the step than timed so (docs/results.md).
ConvOperands TimedRunOperands(const ConvProblem& problem, const ConvOperands& operands,
                              int64_t batch, int64_t run);

// The beta of segment `index`: backward-filter sums over the batch, so every micro-batch after
// the first adds onto the result (beta = 1); forward and backward-data write disjoint slices.
inline float SegmentBeta(ConvOp op, size_t index, float beta) {
  return op == ConvOp::kBackwardFilter && index > 0 ? 1.0f : beta;
}

// Runs `segments` one after another through `runner`, without any check: the caller validated
// this configuration (ExecuteMicroBatched, or its own check of the same plan) before. Micro-batch
// i starts at the sum of the earlier sizes. `completed` (when not null) receives the number of
// segments that ran successfully: all of them on success, the failing segment's index on error.
// The error names the failing segment.
Status RunMicroBatches(MicroBatchRunner& runner, const ConvProblem& problem,
                       std::span<const Segment> segments, const ConvOperands& operands,
                       void* workspace, size_t workspace_bytes, float alpha, float beta,
                       size_t* completed = nullptr);
// The same on `backend`: each segment is backend.Run() at its micro-batch size.
Status RunMicroBatches(ConvBackend& backend, const ConvProblem& problem,
                       std::span<const Segment> segments, const ConvOperands& operands,
                       void* workspace, size_t workspace_bytes, float alpha, float beta,
                       size_t* completed = nullptr);

// Checks what ExecuteMicroBatched() needs before it runs anything: the problem, the mini-batch,
// segment sizes summing to it, each segment's workspace (asked of `backend`) within
// `workspace_bytes` and present, and the op's operands.
Status ValidateMicroBatched(ConvBackend& backend, const ConvProblem& problem, int64_t mini_batch,
                            std::span<const Segment> segments, const ConvOperands& operands,
                            void* workspace, size_t workspace_bytes);

// ValidateMicroBatched(), then RunMicroBatches() on `backend`: forward and backward-data write
// disjoint slices of the output; backward-filter accumulates (the first segment uses `beta`,
// the rest beta = 1). `workspace` must hold the largest segment's workspace. Runs nothing on bad
// input (then `completed` is 0).
Status ExecuteMicroBatched(ConvBackend& backend, const ConvProblem& problem, int64_t mini_batch,
                           std::span<const Segment> segments, const ConvOperands& operands,
                           void* workspace, size_t workspace_bytes, float alpha, float beta,
                           size_t* completed = nullptr);

}  // namespace ucudnn
