// The C API: thin over ucudnn::Handle. Nothing may unwind through a C caller, so every entry
// point that can allocate catches at this boundary.
#include <spdlog/spdlog.h>

#include <exception>
#include <new>

#include "ucudnn/client/handle.h"
#include "ucudnn/client/ucudnn_c.h"

struct ucudnnContext {
  explicit ucudnnContext(cudnnHandle_t cudnn, const ucudnn::ClientConfig& config)
      : handle(cudnn, config) {}
  ucudnn::Handle handle;
};

namespace {

cudnnStatus_t Create(ucudnnHandle_t* handle, cudnnHandle_t cudnn, const char* options) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *handle = nullptr;
  if (cudnn == nullptr) return CUDNN_STATUS_BAD_PARAM;
  try {
    ucudnn::ClientConfig config = ucudnn::ClientConfig::FromEnvironment();
    if (options != nullptr && options[0] != '\0') config = config.WithOptions(options);
    *handle = new ucudnnContext(cudnn, config);
    return CUDNN_STATUS_SUCCESS;
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  } catch (const std::exception& e) {
    spdlog::error("ucudnn: ucudnnCreate: {}", e.what());
    return CUDNN_STATUS_INTERNAL_ERROR;
  }
}

}  // namespace

extern "C" {

cudnnStatus_t ucudnnCreate(ucudnnHandle_t* handle, cudnnHandle_t cudnn) {
  return Create(handle, cudnn, nullptr);
}

cudnnStatus_t ucudnnCreateWithOptions(ucudnnHandle_t* handle, cudnnHandle_t cudnn,
                                      const char* options) {
  return Create(handle, cudnn, options);
}

cudnnStatus_t ucudnnDestroy(ucudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
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
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  try {
    return handle->handle.ConvolutionForward(alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                                             workSpaceSizeInBytes, beta, yDesc, y);
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
}

cudnnStatus_t ucudnnConvolutionBackwardData(ucudnnHandle_t handle, const void* alpha,
                                            cudnnFilterDescriptor_t wDesc, const void* w,
                                            cudnnTensorDescriptor_t dyDesc, const void* dy,
                                            cudnnConvolutionDescriptor_t convDesc,
                                            cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                            size_t workSpaceSizeInBytes, const void* beta,
                                            cudnnTensorDescriptor_t dxDesc, void* dx) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  try {
    return handle->handle.ConvolutionBackwardData(alpha, wDesc, w, dyDesc, dy, convDesc, algo,
                                                  workSpace, workSpaceSizeInBytes, beta, dxDesc,
                                                  dx);
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
}

cudnnStatus_t ucudnnConvolutionBackwardFilter(ucudnnHandle_t handle, const void* alpha,
                                              cudnnTensorDescriptor_t xDesc, const void* x,
                                              cudnnTensorDescriptor_t dyDesc, const void* dy,
                                              cudnnConvolutionDescriptor_t convDesc,
                                              cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                              size_t workSpaceSizeInBytes, const void* beta,
                                              cudnnFilterDescriptor_t dwDesc, void* dw) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  try {
    return handle->handle.ConvolutionBackwardFilter(alpha, xDesc, x, dyDesc, dy, convDesc, algo,
                                                    workSpace, workSpaceSizeInBytes, beta, dwDesc,
                                                    dw);
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
}

cudnnStatus_t ucudnnGetConvolutionForwardWorkspaceSize(
    ucudnnHandle_t handle, cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  try {
    return handle->handle.GetConvolutionForwardWorkspaceSize(xDesc, wDesc, convDesc, yDesc, algo,
                                                             sizeInBytes);
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
}

cudnnStatus_t ucudnnGetConvolutionBackwardDataWorkspaceSize(
    ucudnnHandle_t handle, cudnnFilterDescriptor_t wDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  try {
    return handle->handle.GetConvolutionBackwardDataWorkspaceSize(wDesc, dyDesc, convDesc, dxDesc,
                                                                  algo, sizeInBytes);
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
}

cudnnStatus_t ucudnnGetConvolutionBackwardFilterWorkspaceSize(
    ucudnnHandle_t handle, cudnnTensorDescriptor_t xDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnFilterDescriptor_t dwDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* sizeInBytes) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  try {
    return handle->handle.GetConvolutionBackwardFilterWorkspaceSize(xDesc, dyDesc, convDesc, dwDesc,
                                                                    algo, sizeInBytes);
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_ALLOC_FAILED;
  }
}

cudnnStatus_t ucudnnPrepare(ucudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->handle.Prepare();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t ucudnnWaitForPlans(ucudnnHandle_t handle, int64_t timeout_ms) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return handle->handle.WaitForPlans(timeout_ms) ? CUDNN_STATUS_SUCCESS
                                                 : CUDNN_STATUS_EXECUTION_FAILED;
}

cudnnStatus_t ucudnnGetStats(ucudnnHandle_t handle, ucudnnStats_t* stats) {
  if (handle == nullptr || stats == nullptr) return CUDNN_STATUS_BAD_PARAM;
  const ucudnn::ClientStats s = handle->handle.Stats();
  stats->kernels = s.kernels;
  stats->kernels_planned = s.kernels_planned;
  stats->planned_calls = s.planned_calls;
  stats->fallback_calls = s.fallback_calls;
  stats->rejected_plan_calls = s.rejected_plan_calls;
  stats->passthrough_calls = s.passthrough_calls;
  stats->untracked_calls = s.untracked_calls;
  stats->plan_requests = s.plan_requests;
  stats->plan_request_failures = s.plan_request_failures;
  stats->plans_received = s.plans_received;
  stats->plans_from_cache = s.plans_from_cache;
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
