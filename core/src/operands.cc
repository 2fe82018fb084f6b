#include "ucudnn/core/backend.h"

namespace ucudnn {

ConvOperands BindOperands(ConvOp op, const void* first_input, const void* second_input,
                          void* output) {
  ConvOperands o;
  switch (op) {
    case ConvOp::kForward:
      o.x = first_input;
      o.w = second_input;
      o.y = output;
      break;
    case ConvOp::kBackwardData:
      o.dy = first_input;
      o.w = second_input;
      o.dx = output;
      break;
    case ConvOp::kBackwardFilter:
      o.x = first_input;
      o.dy = second_input;
      o.dw = output;
      break;
  }
  return o;
}

OpTensorSizes OpSizes(const ConvProblem& p, int64_t batch) {
  const auto x = static_cast<size_t>(batch * p.input_elements_per_sample());
  const auto y = static_cast<size_t>(batch * p.output_elements_per_sample());
  const auto w = static_cast<size_t>(p.filter_elements());
  switch (p.op) {
    case ConvOp::kForward:
      return {x, w, y};
    case ConvOp::kBackwardData:
      return {y, w, x};
    case ConvOp::kBackwardFilter:
      return {x, y, w};
  }
  return {0, 0, 0};
}

}  // namespace ucudnn
