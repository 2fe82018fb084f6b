#include "support/problems.h"

namespace ucudnn::test_support {

ConvProblem SquareConv(ConvOp op, int64_t c, int64_t hw, int64_t k, int64_t rs, int64_t stride) {
  ConvProblem p;
  p.op = op;
  p.c = c;
  p.h = p.w = hw;
  p.k = k;
  p.r = p.s = rs;
  p.pad_h = p.pad_w = rs / 2;
  p.stride_h = p.stride_w = stride;
  return p;
}

Timing MakeTiming(int64_t micro_batch, int algo, double time_ms, uint64_t workspace_bytes) {
  Timing t;
  t.micro_batch = micro_batch;
  t.algo = algo;
  t.time_ms = time_ms;
  t.workspace_bytes = workspace_bytes;
  return t;
}

}  // namespace ucudnn::test_support
