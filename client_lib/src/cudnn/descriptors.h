// Reading a framework's cuDNN descriptors into the problem model, on every call: the getters
// are plain field reads inside cuDNN, and nothing here allocates.
#pragma once

#include <cudnn.h>

#include <cstdint>

#include "ucudnn/core/problem.h"

namespace ucudnn::client {

struct ParsedConvolution {
  ConvProblem problem;
  int64_t batch = 0;
};

// The convolution of `op` given as cuDNN describes it: `input` is x (forward, backward-filter) or
// dx (backward-data), `output` is y or dy, `filter` is w or dw. False when the descriptors say
// something the model has no words for (not 2-D, strided or padded tensors, CUDNN_CONVOLUTION
// mode, double data, mismatched types or shapes...): the call then goes to cuDNN unchanged,
// which also reports any error in them. `why` gets a static explanation.
bool ParseConvolution(ConvOp op, cudnnTensorDescriptor_t input, cudnnFilterDescriptor_t filter,
                      cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t output,
                      ParsedConvolution* parsed, const char** why);

}  // namespace ucudnn::client
