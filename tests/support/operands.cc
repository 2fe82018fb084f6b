#include "support/operands.h"

#include "ucudnn/core/random_fill.h"

namespace ucudnn::test_support {

ConvOperands BindOperands(ConvOp op, const float* first_input, const float* second_input,
                          float* output) {
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

std::vector<float> RandomVector(size_t count, uint64_t seed) {
  std::vector<float> v(count);
  GenerateRandom(v.data(), count, DataType::kFloat32, seed);
  return v;
}

ConvOperands HostOperands::Bind(ConvOp op) {
  return op == ConvOp::kBackwardData     ? BindOperands(op, dy.data(), w.data(), out.data())
         : op == ConvOp::kBackwardFilter ? BindOperands(op, x.data(), dy.data(), out.data())
                                         : BindOperands(op, x.data(), w.data(), out.data());
}

HostOperands MakeOperands(const ConvProblem& p, int64_t batch, uint64_t seed) {
  const auto x_n = static_cast<size_t>(batch * p.input_elements_per_sample());
  const auto y_n = static_cast<size_t>(batch * p.output_elements_per_sample());
  const auto w_n = static_cast<size_t>(p.filter_elements());
  return {RandomVector(x_n, seed), RandomVector(w_n, seed + 1), RandomVector(y_n, seed + 2),
          RandomVector(OpSizes(p, batch).output, seed + 3)};
}

}  // namespace ucudnn::test_support
