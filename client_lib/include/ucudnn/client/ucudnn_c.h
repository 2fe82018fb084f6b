/* The C API of the ucudnn client library, over the same handle as ucudnn/client/handle.h, for
 * use from other languages (ctypes, cffi, JNI, Rust's bindgen).
 *
 *   cudnnHandle_t cudnn;  cudnnCreate(&cudnn);
 *   ucudnnHandle_t h;     ucudnnCreate(&h, cudnn);          configured from UCUDNN_* variables
 *   ucudnnConvolutionForward(h, &alpha, xDesc, x, wDesc, w, convDesc, algo, ws, wsBytes,
 *                            &beta, yDesc, y);              cuDNN's arguments, ucudnn handle first
 *   ucudnnDestroy(h);     cudnnDestroy(cudnn);
 *
 * Every function returns a cudnnStatus_t: CUDNN_STATUS_BAD_PARAM for a null handle or pointer,
 * otherwise what cuDNN answered (or the mapping of the library's own failure).
 *
 * Part of the public API (include prefix ucudnn/client/): C and cuDNN only. */
#ifndef UCUDNN_CLIENT_UCUDNN_C_H_
#define UCUDNN_CLIENT_UCUDNN_C_H_

#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ucudnnContext* ucudnnHandle_t;

/* Counters, as ucudnn::ClientStats. */
typedef struct ucudnnStats {
  uint64_t kernels;
  uint64_t kernels_planned;
  uint64_t planned_calls;
  uint64_t fallback_calls;
  uint64_t rejected_plan_calls;
  uint64_t passthrough_calls;
  uint64_t untracked_calls;
  uint64_t plan_requests;
  uint64_t plan_request_failures;
  uint64_t plans_received;
  uint64_t plans_from_cache;
} ucudnnStats_t;

/* Wraps `cudnn` (kept alive by the caller until ucudnnDestroy), configured from the
 * environment. */
cudnnStatus_t ucudnnCreate(ucudnnHandle_t* handle, cudnnHandle_t cudnn);
/* Same, with `options` overriding the environment: "NAME=value" pairs using the environment
 * variables' names, separated by ';' or newlines, e.g. "UCUDNN_SERVER=planner:7000;
 * UCUDNN_WORKSPACE_MODE=total;UCUDNN_WORKSPACE_BYTES=2GiB". NULL or "" is the environment alone.
 * Invalid entries are ignored with a warning in the log. */
cudnnStatus_t ucudnnCreateWithOptions(ucudnnHandle_t* handle, cudnnHandle_t cudnn,
                                      const char* options);
cudnnStatus_t ucudnnDestroy(ucudnnHandle_t handle);
/* The wrapped cuDNN handle (for every other cuDNN call), NULL for a null handle. */
cudnnHandle_t ucudnnGetCudnnHandle(ucudnnHandle_t handle);

cudnnStatus_t ucudnnConvolutionForward(ucudnnHandle_t handle, const void* alpha,
                                       cudnnTensorDescriptor_t xDesc, const void* x,
                                       cudnnFilterDescriptor_t wDesc, const void* w,
                                       cudnnConvolutionDescriptor_t convDesc,
                                       cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                       size_t workSpaceSizeInBytes, const void* beta,
                                       cudnnTensorDescriptor_t yDesc, void* y);
cudnnStatus_t ucudnnConvolutionBackwardData(ucudnnHandle_t handle, const void* alpha,
                                            cudnnFilterDescriptor_t wDesc, const void* w,
                                            cudnnTensorDescriptor_t dyDesc, const void* dy,
                                            cudnnConvolutionDescriptor_t convDesc,
                                            cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                            size_t workSpaceSizeInBytes, const void* beta,
                                            cudnnTensorDescriptor_t dxDesc, void* dx);
cudnnStatus_t ucudnnConvolutionBackwardFilter(ucudnnHandle_t handle, const void* alpha,
                                              cudnnTensorDescriptor_t xDesc, const void* x,
                                              cudnnTensorDescriptor_t dyDesc, const void* dy,
                                              cudnnConvolutionDescriptor_t convDesc,
                                              cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                              size_t workSpaceSizeInBytes, const void* beta,
                                              cudnnFilterDescriptor_t dwDesc, void* dw);

cudnnStatus_t ucudnnGetConvolutionForwardWorkspaceSize(
    ucudnnHandle_t handle, cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes);
cudnnStatus_t ucudnnGetConvolutionBackwardDataWorkspaceSize(
    ucudnnHandle_t handle, cudnnFilterDescriptor_t wDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes);
cudnnStatus_t ucudnnGetConvolutionBackwardFilterWorkspaceSize(
    ucudnnHandle_t handle, cudnnTensorDescriptor_t xDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnFilterDescriptor_t dwDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* sizeInBytes);

/* Total modes: plan the kernels declared so far together, now. */
cudnnStatus_t ucudnnPrepare(ucudnnHandle_t handle);
/* Waits up to timeout_ms for every kernel's answer from the server; CUDNN_STATUS_SUCCESS when
 * none is still waiting, CUDNN_STATUS_EXECUTION_FAILED on timeout. Not for training steps. */
cudnnStatus_t ucudnnWaitForPlans(ucudnnHandle_t handle, int64_t timeout_ms);
cudnnStatus_t ucudnnGetStats(ucudnnHandle_t handle, ucudnnStats_t* stats);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* UCUDNN_CLIENT_UCUDNN_C_H_ */
