// The C API: thin over ucudnn::Handle. Nothing may unwind through a C caller: every entry point
// runs its body inside GuardStatus() (cudnn/guard.h), which turns whatever escapes into a cuDNN
// status.
#include <spdlog/spdlog.h>

#include <exception>
#include <new>
#include <vector>

#include "c_stats.h"
#include "cudnn/guard.h"
#include "ucudnn/client/handle.h"
#include "ucudnn/client/ucudnn_c.h"

struct ucudnnContext {
  explicit ucudnnContext(cudnnHandle_t cudnn, const ucudnn::ClientConfig& config)
      : handle(cudnn, config) {}
  ucudnn::Handle handle;
};

namespace {

using ucudnn::client::GuardStatus;

// GuardStatus() for the functions of an existing handle: a null handle is CUDNN_STATUS_BAD_PARAM.
template <typename Body>
cudnnStatus_t WithHandle(const char* function, ucudnnHandle_t handle, Body&& body) noexcept {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return GuardStatus(function, [&] { return body(handle->handle); });
}

cudnnStatus_t Create(const char* function, ucudnnHandle_t* handle, cudnnHandle_t cudnn,
                     const char* options) noexcept {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *handle = nullptr;
  if (cudnn == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return GuardStatus(function, [&] {
    ucudnn::ClientConfig config = ucudnn::ClientConfig::FromEnvironment();
    if (options != nullptr && options[0] != '\0') config = config.WithOptions(options);
    *handle = new ucudnnContext(cudnn, config);
    return CUDNN_STATUS_SUCCESS;
  });
}

ucudnn::Handle::ConvolutionKernel::Op ToOp(ucudnnConvolutionOp_t op, bool* ok) {
  *ok = true;
  switch (op) {
    case UCUDNN_CONVOLUTION_FORWARD:
      return ucudnn::Handle::ConvolutionKernel::Op::kForward;
    case UCUDNN_CONVOLUTION_BACKWARD_DATA:
      return ucudnn::Handle::ConvolutionKernel::Op::kBackwardData;
    case UCUDNN_CONVOLUTION_BACKWARD_FILTER:
      return ucudnn::Handle::ConvolutionKernel::Op::kBackwardFilter;
  }
  *ok = false;
  return ucudnn::Handle::ConvolutionKernel::Op::kForward;
}

}  // namespace

extern "C" {

cudnnStatus_t ucudnnCreate(ucudnnHandle_t* handle, cudnnHandle_t cudnn) {
  return Create("ucudnnCreate", handle, cudnn, nullptr);
}

cudnnStatus_t ucudnnCreateWithOptions(ucudnnHandle_t* handle, cudnnHandle_t cudnn,
                                      const char* options) {
  return Create("ucudnnCreateWithOptions", handle, cudnn, options);
}

cudnnStatus_t ucudnnDestroy(ucudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return GuardStatus("ucudnnDestroy", [&] {
    delete handle;
    return CUDNN_STATUS_SUCCESS;
  });
}

cudnnHandle_t ucudnnGetCudnnHandle(ucudnnHandle_t handle) {
  return handle == nullptr ? nullptr : handle->handle.cudnn();
}

cudnnStatus_t ucudnnConvolutionForward(ucudnnHandle_t handle, const void* alpha,
                                       cudnnTensorDescriptor_t xDesc, const void* x,
                                       cudnnFilterDescriptor_t wDesc, const void* w,
                                       cudnnConvolutionDescriptor_t convDesc,
                                       cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                       size_t workSpaceSizeInBytes, const void* beta,
                                       cudnnTensorDescriptor_t yDesc, void* y) {
  return WithHandle("ucudnnConvolutionForward", handle, [&](ucudnn::Handle& h) {
    return h.ConvolutionForward(alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                                workSpaceSizeInBytes, beta, yDesc, y);
  });
}

cudnnStatus_t ucudnnConvolutionBackwardData(ucudnnHandle_t handle, const void* alpha,
                                            cudnnFilterDescriptor_t wDesc, const void* w,
                                            cudnnTensorDescriptor_t dyDesc, const void* dy,
                                            cudnnConvolutionDescriptor_t convDesc,
                                            cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                            size_t workSpaceSizeInBytes, const void* beta,
                                            cudnnTensorDescriptor_t dxDesc, void* dx) {
  return WithHandle("ucudnnConvolutionBackwardData", handle, [&](ucudnn::Handle& h) {
    return h.ConvolutionBackwardData(alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace,
                                     workSpaceSizeInBytes, beta, dxDesc, dx);
  });
}

cudnnStatus_t ucudnnConvolutionBackwardFilter(ucudnnHandle_t handle, const void* alpha,
                                              cudnnTensorDescriptor_t xDesc, const void* x,
                                              cudnnTensorDescriptor_t dyDesc, const void* dy,
                                              cudnnConvolutionDescriptor_t convDesc,
                                              cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                              size_t workSpaceSizeInBytes, const void* beta,
                                              cudnnFilterDescriptor_t dwDesc, void* dw) {
  return WithHandle("ucudnnConvolutionBackwardFilter", handle, [&](ucudnn::Handle& h) {
    return h.ConvolutionBackwardFilter(alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace,
                                       workSpaceSizeInBytes, beta, dwDesc, dw);
  });
}

cudnnStatus_t ucudnnGetConvolutionForwardWorkspaceSize(
    ucudnnHandle_t handle, cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  return WithHandle("ucudnnGetConvolutionForwardWorkspaceSize", handle, [&](ucudnn::Handle& h) {
    return h.GetConvolutionForwardWorkspaceSize(xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes);
  });
}

cudnnStatus_t ucudnnGetConvolutionBackwardDataWorkspaceSize(
    ucudnnHandle_t handle, cudnnFilterDescriptor_t wDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  return WithHandle("ucudnnGetConvolutionBackwardDataWorkspaceSize", handle,
                    [&](ucudnn::Handle& h) {
                      return h.GetConvolutionBackwardDataWorkspaceSize(wDesc, dyDesc, convDesc,
                                                                       dxDesc, algo, sizeInBytes);
                    });
}

cudnnStatus_t ucudnnGetConvolutionBackwardFilterWorkspaceSize(
    ucudnnHandle_t handle, cudnnTensorDescriptor_t xDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnFilterDescriptor_t dwDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* sizeInBytes) {
  return WithHandle("ucudnnGetConvolutionBackwardFilterWorkspaceSize", handle,
                    [&](ucudnn::Handle& h) {
                      return h.GetConvolutionBackwardFilterWorkspaceSize(xDesc, dyDesc, convDesc,
                                                                         dwDesc, algo, sizeInBytes);
                    });
}

cudnnStatus_t ucudnnPrepare(ucudnnHandle_t handle) {
  return WithHandle("ucudnnPrepare", handle, [](ucudnn::Handle& h) {
    h.Prepare();
    return CUDNN_STATUS_SUCCESS;
  });
}

cudnnStatus_t ucudnnPrepareKernels(ucudnnHandle_t handle, const ucudnnKernel_t* kernels,
                                   size_t count) {
  if (kernels == nullptr && count > 0) return CUDNN_STATUS_BAD_PARAM;
  return WithHandle("ucudnnPrepareKernels", handle, [&](ucudnn::Handle& h) {
    std::vector<ucudnn::Handle::ConvolutionKernel> converted(count);
    for (size_t i = 0; i < count; ++i) {
      bool ok = false;
      converted[i].op = ToOp(kernels[i].op, &ok);
      if (!ok) return CUDNN_STATUS_BAD_PARAM;
      converted[i].xDesc = kernels[i].xDesc;
      converted[i].wDesc = kernels[i].wDesc;
      converted[i].convDesc = kernels[i].convDesc;
      converted[i].yDesc = kernels[i].yDesc;
      converted[i].workspaceSizeInBytes = kernels[i].workspaceSizeInBytes;
      converted[i].name = kernels[i].name;
    }
    return h.Prepare(converted);
  });
}

cudnnStatus_t ucudnnWaitForPlans(ucudnnHandle_t handle, int64_t timeout_ms) {
  return WithHandle("ucudnnWaitForPlans", handle, [&](ucudnn::Handle& h) {
    return h.WaitForPlans(timeout_ms) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
  });
}

cudnnStatus_t ucudnnContribute(ucudnnHandle_t handle, int* problemsSubmitted) {
  return WithHandle("ucudnnContribute", handle,
                    [&](ucudnn::Handle& h) { return h.Contribute(problemsSubmitted); });
}

cudnnStatus_t ucudnnGetStats(ucudnnHandle_t handle, ucudnnStats_t* stats) {
  if (stats == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return WithHandle("ucudnnGetStats", handle, [&](ucudnn::Handle& h) {
    *stats = ucudnn::client::ToCStats(h.Stats());
    return CUDNN_STATUS_SUCCESS;
  });
}

}  // extern "C"
