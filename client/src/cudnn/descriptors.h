// Reading a framework's cuDNN descriptors into the problem model, on every call: the getters
// are plain field reads inside cuDNN, and nothing here allocates. And the other way: the
// descriptors of a plan's micro-batches, built once per plan (CudnnPlanBinder).
//
// Why the framework's descriptors are read on every call rather than cached by pointer: a
// descriptor is an opaque cuDNN object the framework may change with cudnnSet*Descriptor between
// calls (PyTorch and TensorFlow reuse them across shapes) or destroy, after which cuDNN may hand
// the same address to a new one. A cache keyed by the pointer would need a check that the
// contents did not change, and the only sound check reads the same fields through the same six
// getters (cuDNN keeps no version counter and its struct layout is private), so it would save
// nothing: the parse is the validation.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "session.h"
#include "ucudnn/core/executor.h"
#include "ucudnn/core/problem.h"

namespace ucudnn::client {

struct ParsedConvolution {
  ConvProblem problem;
  int64_t batch = 0;
};

// The convolution of `op` given as cuDNN describes it: `input` is x (forward, backward-filter) or
// dx (backward-data), `output` is y or dy, `filter` is w or dw. False when the descriptors say
// something the model has no words for (neither 2-D nor 3-D, strided or padded tensors,
// CUDNN_CONVOLUTION mode, double data, mismatched types or shapes...): the call then goes to
// cuDNN unchanged, which also reports any error in them. `why` gets a static explanation.
bool ParseConvolution(ConvOp op, cudnnTensorDescriptor_t input, cudnnFilterDescriptor_t filter,
                      cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t output,
                      ParsedConvolution* parsed, const char** why);

// Binds plans on a cuDNN handle: for every distinct micro-batch size of the plan, the problem's
// descriptor set at that size (CudnnDescriptors, the cuDNN backend's own); a micro-batch then is
// one cuDNN call on them (RunCudnnConvolution), with no lookup. Work goes to `handle`'s stream at
// each call, as the framework's own calls do.
class CudnnPlanBinder final : public PlanBinder {
 public:
  explicit CudnnPlanBinder(cudnnHandle_t handle) : handle_(handle) {}
  Result<std::unique_ptr<MicroBatchRunner>> Bind(const ConvProblem& problem,
                                                 std::span<const Segment> segments) override;

 private:
  cudnnHandle_t handle_;
};

}  // namespace ucudnn::client
