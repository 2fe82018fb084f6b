#include "ucudnn/core/executor.h"

#include <fmt/format.h>

#include <cstdint>

namespace ucudnn {
namespace {

Status CheckOperand(const void* p, const char* name, ConvOp op) {
  if (p != nullptr) return Status::Ok();
  return InvalidArgument(fmt::format("operands.{}: null, but {} needs it", name, ToString(op)));
}

Status CheckOperands(ConvOp op, const ConvOperands& o) {
  switch (op) {
    case ConvOp::kForward:
      UCUDNN_RETURN_IF_ERROR(CheckOperand(o.x, "x", op));
      UCUDNN_RETURN_IF_ERROR(CheckOperand(o.w, "w", op));
      return CheckOperand(o.y, "y", op);
    case ConvOp::kBackwardData:
      UCUDNN_RETURN_IF_ERROR(CheckOperand(o.dy, "dy", op));
      UCUDNN_RETURN_IF_ERROR(CheckOperand(o.w, "w", op));
      return CheckOperand(o.dx, "dx", op);
    case ConvOp::kBackwardFilter:
      UCUDNN_RETURN_IF_ERROR(CheckOperand(o.x, "x", op));
      UCUDNN_RETURN_IF_ERROR(CheckOperand(o.dy, "dy", op));
      return CheckOperand(o.dw, "dw", op);
  }
  return InvalidArgument("problem.op: unknown convolution op");
}

// The operands shifted by `first` samples, for per-sample sizes already computed.
ConvOperands Shift(const ConvOperands& o, int64_t first, size_t x_sample_bytes,
                   size_t y_sample_bytes) {
  auto in = [first](const void* p, size_t sample_bytes) -> const void* {
    return p == nullptr ? nullptr : static_cast<const char*>(p) + first * sample_bytes;
  };
  auto out = [first](void* p, size_t sample_bytes) -> void* {
    return p == nullptr ? nullptr : static_cast<char*>(p) + first * sample_bytes;
  };
  ConvOperands shifted = o;
  shifted.x = in(o.x, x_sample_bytes);
  shifted.dy = in(o.dy, y_sample_bytes);
  shifted.y = out(o.y, y_sample_bytes);
  shifted.dx = out(o.dx, x_sample_bytes);
  return shifted;
}

// Each segment on the backend at its own micro-batch size.
class BackendMicroBatchRunner final : public MicroBatchRunner {
 public:
  BackendMicroBatchRunner(ConvBackend& backend, const ConvProblem& problem)
      : backend_(backend), problem_(problem) {}
  Status RunMicroBatch(size_t, const Segment& segment, const ConvOperands& operands,
                       void* workspace, size_t workspace_bytes, float alpha, float beta) override {
    return backend_.Run(problem_, segment.micro_batch, AlgorithmOf(segment), operands, workspace,
                        workspace_bytes, alpha, beta);
  }

 private:
  ConvBackend& backend_;
  const ConvProblem& problem_;
};

}  // namespace

ConvOperands OffsetOperands(const ConvProblem& problem, const ConvOperands& operands,
                            int64_t first) {
  const size_t element = ElementSize(problem.data_type);
  return Shift(operands, first, static_cast<size_t>(problem.input_elements_per_sample()) * element,
               static_cast<size_t>(problem.output_elements_per_sample()) * element);
}

ConvOperands TimedRunOperands(const ConvProblem& problem, const ConvOperands& operands,
                              int64_t batch, int64_t run) {
  const int64_t slices = batch > 0 ? operands.samples / batch : 0;
  if (slices <= 1) return operands;
  return OffsetOperands(problem, operands, (run % slices) * batch);
}

Status RunMicroBatches(MicroBatchRunner& runner, const ConvProblem& problem,
                       std::span<const Segment> segments, const ConvOperands& operands,
                       void* workspace, size_t workspace_bytes, float alpha, float beta,
                       size_t* completed) {
  const size_t element = ElementSize(problem.data_type);
  const size_t x_sample_bytes = static_cast<size_t>(problem.input_elements_per_sample()) * element;
  const size_t y_sample_bytes = static_cast<size_t>(problem.output_elements_per_sample()) * element;
  int64_t done = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& segment = segments[i];
    const ConvOperands shifted = Shift(operands, done, x_sample_bytes, y_sample_bytes);
    Status status = runner.RunMicroBatch(i, segment, shifted, workspace, workspace_bytes, alpha,
                                         SegmentBeta(problem.op, i, beta));
    if (!status.ok()) {
      if (completed != nullptr) *completed = i;
      return status.WithContext(fmt::format("segments[{}]", i));
    }
    done += segment.micro_batch;
  }
  if (completed != nullptr) *completed = segments.size();
  return Status::Ok();
}

Status RunMicroBatches(ConvBackend& backend, const ConvProblem& problem,
                       std::span<const Segment> segments, const ConvOperands& operands,
                       void* workspace, size_t workspace_bytes, float alpha, float beta,
                       size_t* completed) {
  BackendMicroBatchRunner runner(backend, problem);
  return RunMicroBatches(runner, problem, segments, operands, workspace, workspace_bytes, alpha,
                         beta, completed);
}

Status ValidateMicroBatched(ConvBackend& backend, const ConvProblem& problem, int64_t mini_batch,
                            std::span<const Segment> segments, const ConvOperands& operands,
                            void* workspace, size_t workspace_bytes) {
  UCUDNN_RETURN_IF_ERROR(Validate(problem).WithContext("problem"));
  UCUDNN_RETURN_IF_ERROR(ValidateBatch(mini_batch).WithContext("mini_batch"));
  if (segments.empty()) return InvalidArgument("segments: empty, need at least one");
  int64_t total = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const int64_t size = segments[i].micro_batch;
    if (size < 1 || size > mini_batch) {
      return InvalidArgument(
          fmt::format("segments[{}].micro_batch: must be in [1, {}], got {}", i, mini_batch, size));
    }
    total += size;  // no overflow: each term <= mini_batch <= kMaxBatch, and we stop past it
    if (total > mini_batch) break;
  }
  if (total != mini_batch) {
    return InvalidArgument(
        fmt::format("segments: micro-batch sizes must sum to the mini-batch {}, got {}{}",
                    mini_batch, total, total > mini_batch ? " or more" : ""));
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    Result<size_t> needed = backend.WorkspaceSize(problem, seg.micro_batch, AlgorithmOf(seg));
    if (!needed.ok()) return needed.status().WithContext(fmt::format("segments[{}]", i));
    if (*needed > workspace_bytes) {
      return InvalidArgument(fmt::format(
          "workspace_bytes: segments[{}] (algo {}, micro-batch {}) needs {} bytes, got {}", i,
          AlgorithmText(AlgorithmOf(seg)), seg.micro_batch, *needed, workspace_bytes));
    }
    if (*needed > 0 && workspace == nullptr) {
      return InvalidArgument(
          fmt::format("workspace: null, but segments[{}] needs {} bytes", i, *needed));
    }
  }
  return CheckOperands(problem.op, operands);
}

Status ExecuteMicroBatched(ConvBackend& backend, const ConvProblem& problem, int64_t mini_batch,
                           std::span<const Segment> segments, const ConvOperands& operands,
                           void* workspace, size_t workspace_bytes, float alpha, float beta,
                           size_t* completed) {
  if (completed != nullptr) *completed = 0;
  // Everything is checked before the first segment runs: a bad plan must not leave a half-written
  // output behind.
  UCUDNN_RETURN_IF_ERROR(ValidateMicroBatched(backend, problem, mini_batch, segments, operands,
                                              workspace, workspace_bytes));
  return RunMicroBatches(backend, problem, segments, operands, workspace, workspace_bytes, alpha,
                         beta, completed);
}

}  // namespace ucudnn
