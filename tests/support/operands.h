// Host tensors of one convolution call, shared by the tests (library `ucudnn_test_support`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/problem.h"

namespace ucudnn::test_support {

// The operands of `op` from its two inputs, in the op's order (forward: x, w; backward data:
// dy, w; backward filter: x, dy), and its output (y, dx or dw).
ConvOperands BindOperands(ConvOp op, const float* first_input, const float* second_input,
                          float* output);

// The element counts of an op's two inputs and its output, in BindOperands' order.
struct OpTensorSizes {
  size_t first_input, second_input, output;
};
OpTensorSizes OpSizes(const ConvProblem& p, int64_t batch);

// `count` deterministic non-zero fp32 values from `seed`.
std::vector<float> RandomVector(size_t count, uint64_t seed);

// Every tensor of a call at some mini-batch; `out` is the op's output (y, dx or dw).
struct HostOperands {
  std::vector<float> x, w, dy, out;
  ConvOperands Bind(ConvOp op);
};

// Random x, w and dy (seeds `seed`, +1, +2) and a random initial output (+3), so that beta
// matters, for `p` at `batch`.
HostOperands MakeOperands(const ConvProblem& p, int64_t batch, uint64_t seed = 1);

}  // namespace ucudnn::test_support
