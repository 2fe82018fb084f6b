#include "support/operands.h"

#include "ucudnn/core/random_fill.h"

namespace ucudnn::test_support {

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
