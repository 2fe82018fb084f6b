// Convolution problems and timings shared by the tests (library `ucudnn::test_support`).
#pragma once

#include <cstdint>

#include "ucudnn/core/problem.h"
#include "ucudnn/core/timing.h"

namespace ucudnn::test_support {

// A square `hw` x `hw` input with `c` channels, `k` filters of `rs` x `rs` padded by rs / 2 (the
// output keeps the size at stride 1), fp32 NCHW: the shape most tests need.
ConvProblem SquareConv(ConvOp op, int64_t c, int64_t hw, int64_t k, int64_t rs = 3,
                       int64_t stride = 1);

// A successful (kOk) timing of legacy algorithm `algo` at `micro_batch`.
Timing MakeTiming(int64_t micro_batch, int algo, double time_ms, uint64_t workspace_bytes = 0);

}  // namespace ucudnn::test_support
