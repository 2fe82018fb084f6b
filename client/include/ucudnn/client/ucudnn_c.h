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

#include "ucudnn/client/ucudnn_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ucudnnContext* ucudnnHandle_t;

/* One convolution of the network, as ucudnn::Handle::ConvolutionKernel: xDesc is the
 * input-shaped tensor (x, or dx for backward-data), wDesc the filter (w or dw), yDesc the
 * output-shaped tensor (y, or dy for the backward ops). workspaceSizeInBytes: per-kernel mode,
 * the workspace its calls will pass (0: UCUDNN_WORKSPACE_BYTES; both 0: planned at its first
 * call); unused in the total modes. name: a label for reports, may be NULL. */
typedef struct ucudnnKernel {
  ucudnnConvolutionOp_t op;
  cudnnTensorDescriptor_t xDesc;
  cudnnFilterDescriptor_t wDesc;
  cudnnConvolutionDescriptor_t convDesc;
  cudnnTensorDescriptor_t yDesc;
  size_t workspaceSizeInBytes;
  const char* name;
} ucudnnKernel_t;

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

/* Total modes: plan the kernels declared so far together, now. With UCUDNN_CONTRIBUTE=1 a quiet
 * point (see ucudnnContribute). */
cudnnStatus_t ucudnnPrepare(ucudnnHandle_t handle);
/* Declares `count` kernels (descriptors read now, not kept) and plans now, as
 * ucudnn::Handle::Prepare(kernels): kernels whose descriptors the library does not model are
 * skipped. CUDNN_STATUS_BAD_PARAM for a null handle, a NULL array with count > 0, a null
 * descriptor or an unknown op. */
cudnnStatus_t ucudnnPrepareKernels(ucudnnHandle_t handle, const ucudnnKernel_t* kernels,
                                   size_t count);
/* Waits up to timeout_ms for every kernel's answer from the server; CUDNN_STATUS_SUCCESS when
 * none is still waiting, CUDNN_STATUS_EXECUTION_FAILED on timeout. Not for training steps. With
 * UCUDNN_CONTRIBUTE=1 a quiet point (see ucudnnContribute). */
cudnnStatus_t ucudnnWaitForPlans(ucudnnHandle_t handle, int64_t timeout_ms);
/* Contribution at a quiet point the caller chooses (UCUDNN_CONTRIBUTE=1 and UCUDNN_TOKEN): when
 * the server lacks timings for some kernels and no live worker serves this GPU model, waits for
 * the device to be idle, benchmarks them with the library's own cuDNN handle and stream, submits
 * the timings and asks for the plans again. Blocks while it measures. *problemsSubmitted (may be
 * NULL) gets the number of problems submitted. CUDNN_STATUS_SUCCESS also when there was nothing
 * to do; CUDNN_STATUS_EXECUTION_FAILED when the server could not be asked (see the log). */
cudnnStatus_t ucudnnContribute(ucudnnHandle_t handle, int* problemsSubmitted);
cudnnStatus_t ucudnnGetStats(ucudnnHandle_t handle, ucudnnStats_t* stats);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* UCUDNN_CLIENT_UCUDNN_C_H_ */
