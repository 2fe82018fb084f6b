// Host tensors of one convolution call, shared by the tests (library `ucudnn_test_support`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/problem.h"

namespace ucudnn::test_support {

// The operands of an op and their element counts: core's (backend.h).
using ucudnn::BindOperands;
using ucudnn::OpSizes;
using ucudnn::OpTensorSizes;

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
