// The shape-level C API's problem description (ucudnnConvShape_t) in the problem model's terms.
// Pure: no I/O, tested alone.
#pragma once

#include <cstdint>

#include "ucudnn/client/ucudnn_shape.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn::client {

struct ShapeKernel {
  ConvProblem problem;
  int64_t batch = 0;
};

// Every field checked (enums in range, dimensions as Validate() and ValidateBatch() want them);
// the error names the field: "shape.groups: must divide c (64) and k (32)".
Result<ShapeKernel> ToShapeKernel(const ucudnnConvShape_t& shape);

}  // namespace ucudnn::client
