// The drop-in handle: a cuDNN handle whose convolutions run as the planner's micro-batches.
//
//   cudnnHandle_t cudnn;                       // the framework's own handle
//   cudnnCreate(&cudnn);
//   ucudnn::Handle handle(cudnn);              // configured from UCUDNN_* variables
//   cudnnSetStream(handle, stream);            // converts to cudnnHandle_t for every other call
//   cudnnConvolutionForward(handle, &alpha, xDesc, x, wDesc, w, convDesc, algo, ws, wsBytes,
//                           &beta, yDesc, y);  // the overload below: planned, or undivided
//
// The convolution calls take cuDNN's own arguments in cuDNN's order. The algorithm the framework
// passes is overridden: by the plan when there is one that fits the workspace given, else by
// cuDNN's best algorithm within that workspace (the step never waits for the planner). In
// per-kernel mode the workspace passed is the kernel's limit; in the total modes the library
// owns the workspace of its planned kernels.
//
// Thread safety: as a cudnnHandle_t's (one thread at a time). Plans arrive on a background
// thread and are published without locks; a call costs one hash lookup on top of cuDNN's.
// Errors are cuDNN statuses: no function of the handle lets an exception out.
//
// Part of the public API (include prefix ucudnn/client/): cuDNN and standard C++ only.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "ucudnn/client/config.h"
#include "ucudnn/client/stats.h"

namespace ucudnn {

class Handle {
 public:
  // Wraps `cudnn`, which the caller keeps alive and destroys after this handle. Never fails: when
  // the library cannot start (no GPU visible to the runtime, say), it logs why and passes every
  // call to cuDNN unchanged.
  explicit Handle(cudnnHandle_t cudnn,
                  const ClientConfig& config = ClientConfig::FromEnvironment());
  ~Handle();
  Handle(Handle&&) noexcept;
  Handle& operator=(Handle&&) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  cudnnHandle_t cudnn() const { return cudnn_; }
  // So that every other cuDNN function takes the handle as it is.
  operator cudnnHandle_t() const { return cudnn_; }  // NOLINT(google-explicit-constructor)

  // cudnnConvolutionForward without the handle.
  cudnnStatus_t ConvolutionForward(const void* alpha, cudnnTensorDescriptor_t xDesc, const void* x,
                                   cudnnFilterDescriptor_t wDesc, const void* w,
                                   cudnnConvolutionDescriptor_t convDesc,
                                   cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                   size_t workSpaceSizeInBytes, const void* beta,
                                   cudnnTensorDescriptor_t yDesc, void* y);
  // cudnnConvolutionBackwardData without the handle.
  cudnnStatus_t ConvolutionBackwardData(const void* alpha, cudnnFilterDescriptor_t wDesc,
                                        const void* w, cudnnTensorDescriptor_t dyDesc,
                                        const void* dy, cudnnConvolutionDescriptor_t convDesc,
                                        cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                        size_t workSpaceSizeInBytes, const void* beta,
                                        cudnnTensorDescriptor_t dxDesc, void* dx);
  // cudnnConvolutionBackwardFilter without the handle.
  cudnnStatus_t ConvolutionBackwardFilter(const void* alpha, cudnnTensorDescriptor_t xDesc,
                                          const void* x, cudnnTensorDescriptor_t dyDesc,
                                          const void* dy, cudnnConvolutionDescriptor_t convDesc,
                                          cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                          size_t workSpaceSizeInBytes, const void* beta,
                                          cudnnFilterDescriptor_t dwDesc, void* dw);

  // The workspace-size queries declare the kernel to the library (its plan is asked for at
  // once) and answer what the framework should pass: at least cuDNN's answer for `algo`, and in
  // per-kernel mode with ClientConfig::workspace_bytes set, at least that limit.
  cudnnStatus_t GetConvolutionForwardWorkspaceSize(cudnnTensorDescriptor_t xDesc,
                                                   cudnnFilterDescriptor_t wDesc,
                                                   cudnnConvolutionDescriptor_t convDesc,
                                                   cudnnTensorDescriptor_t yDesc,
                                                   cudnnConvolutionFwdAlgo_t algo,
                                                   size_t* sizeInBytes);
  cudnnStatus_t GetConvolutionBackwardDataWorkspaceSize(cudnnFilterDescriptor_t wDesc,
                                                        cudnnTensorDescriptor_t dyDesc,
                                                        cudnnConvolutionDescriptor_t convDesc,
                                                        cudnnTensorDescriptor_t dxDesc,
                                                        cudnnConvolutionBwdDataAlgo_t algo,
                                                        size_t* sizeInBytes);
  cudnnStatus_t GetConvolutionBackwardFilterWorkspaceSize(cudnnTensorDescriptor_t xDesc,
                                                          cudnnTensorDescriptor_t dyDesc,
                                                          cudnnConvolutionDescriptor_t convDesc,
                                                          cudnnFilterDescriptor_t dwDesc,
                                                          cudnnConvolutionBwdFilterAlgo_t algo,
                                                          size_t* sizeInBytes);

  // One convolution of the network, described as its calls will describe it (for Prepare).
  struct ConvolutionKernel {
    enum class Op { kForward, kBackwardData, kBackwardFilter };
    Op op = Op::kForward;
    // The input-shaped tensor: x for forward and backward-filter, dx for backward-data.
    cudnnTensorDescriptor_t xDesc = nullptr;
    // The filter: w, or dw for backward-filter.
    cudnnFilterDescriptor_t wDesc = nullptr;
    cudnnConvolutionDescriptor_t convDesc = nullptr;
    // The output-shaped tensor: y for forward, dy for the backward ops.
    cudnnTensorDescriptor_t yDesc = nullptr;
    // Per-kernel mode: the workspace its calls will pass, which is its limit; 0 takes
    // ClientConfig::workspace_bytes, and when that is 0 too the kernel is planned at its first
    // call instead. Total modes: unused (the network shares the budget).
    size_t workspaceSizeInBytes = 0;
    // A label for reports and logs (the framework's layer name); may be null. Copied.
    const char* name = nullptr;
  };

  // Total modes: the kernels declared so far (workspace-size queries, calls) are the whole
  // network; plan them together now instead of after ClientConfig::collect_quiet_ms.
  // With contribution on (ClientConfig::contribute) this is a quiet point: it waits for the
  // server's answers and benchmarks what is missing, which can take minutes.
  void Prepare();
  // Declares `kernels` (the descriptors are read now and not kept) and plans now: in the total
  // modes these and every kernel declared before are the network; in per-kernel mode each is
  // asked for with its limit. Kernels whose descriptors the library does not model are skipped
  // (their calls go to cuDNN unchanged). CUDNN_STATUS_BAD_PARAM for a null array with a count
  // or a null descriptor; otherwise CUDNN_STATUS_SUCCESS. A quiet point like Prepare().
  cudnnStatus_t Prepare(const ConvolutionKernel* kernels, size_t count);
  cudnnStatus_t Prepare(const std::vector<ConvolutionKernel>& kernels) {
    return Prepare(kernels.data(), kernels.size());
  }
  // Blocks until no kernel waits for an answer from the server, at most `timeout_ms`; true when
  // none waits. For tools and tests: a training step never needs it. With contribution on, a
  // quiet point: missing timings are benchmarked here (no new problem is started after the
  // timeout) and the plans asked for again are waited for in what is left of the timeout.
  bool WaitForPlans(int64_t timeout_ms);
  // Contribution at a quiet point the caller chooses (between epochs, after a checkpoint): with
  // ClientConfig::contribute on, waits for the answers on their way, then, when the server lacks
  // timings for some kernels and no live worker serves this GPU model, waits for the device to
  // be idle, benchmarks those problems with the library's own cuDNN handle and stream on the same
  // device, submits the timings with the token and asks for the plans again. Blocks while it
  // measures (seconds per problem). `problems_submitted` (may be null) gets the number of
  // problems submitted. CUDNN_STATUS_SUCCESS also when there was nothing to do or contribution
  // is off; CUDNN_STATUS_EXECUTION_FAILED when the server could not be asked or no backend
  // could be made (the log says why). The calling thread's current device is left as it was.
  cudnnStatus_t Contribute(int* problems_submitted = nullptr);

  ClientStats Stats() const;
  std::vector<KernelReport> Kernels() const;
  const ClientConfig& config() const;
  // False when the library is disabled or could not start (every call passes through).
  bool active() const;

 private:
  struct Impl;
  cudnnStatus_t PrepareKernels(const ConvolutionKernel* kernels, size_t count);
  cudnnStatus_t ContributeUnguarded(int* problems_submitted);
  cudnnHandle_t cudnn_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ucudnn

// cuDNN's convolution functions taking the drop-in handle: code written against cuDNN keeps its
// calls and changes only the handle's type.
inline cudnnStatus_t cudnnConvolutionForward(ucudnn::Handle& handle, const void* alpha,
                                             cudnnTensorDescriptor_t xDesc, const void* x,
                                             cudnnFilterDescriptor_t wDesc, const void* w,
                                             cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             cudnnTensorDescriptor_t yDesc, void* y) {
  return handle.ConvolutionForward(alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                                   workSpaceSizeInBytes, beta, yDesc, y);
}

inline cudnnStatus_t cudnnConvolutionBackwardData(
    ucudnn::Handle& handle, const void* alpha, cudnnFilterDescriptor_t wDesc, const void* w,
    cudnnTensorDescriptor_t dyDesc, const void* dy, cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionBwdDataAlgo_t algo, void* workSpace, size_t workSpaceSizeInBytes,
    const void* beta, cudnnTensorDescriptor_t dxDesc, void* dx) {
  return handle.ConvolutionBackwardData(alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace,
                                        workSpaceSizeInBytes, beta, dxDesc, dx);
}

inline cudnnStatus_t cudnnConvolutionBackwardFilter(
    ucudnn::Handle& handle, const void* alpha, cudnnTensorDescriptor_t xDesc, const void* x,
    cudnnTensorDescriptor_t dyDesc, const void* dy, cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace, size_t workSpaceSizeInBytes,
    const void* beta, cudnnFilterDescriptor_t dwDesc, void* dw) {
  return handle.ConvolutionBackwardFilter(alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace,
                                          workSpaceSizeInBytes, beta, dwDesc, dw);
}

inline cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    ucudnn::Handle& handle, cudnnTensorDescriptor_t xDesc, cudnnFilterDescriptor_t wDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  return handle.GetConvolutionForwardWorkspaceSize(xDesc, wDesc, convDesc, yDesc, algo,
                                                   sizeInBytes);
}

inline cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    ucudnn::Handle& handle, cudnnFilterDescriptor_t wDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  return handle.GetConvolutionBackwardDataWorkspaceSize(wDesc, dyDesc, convDesc, dxDesc, algo,
                                                        sizeInBytes);
}

inline cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    ucudnn::Handle& handle, cudnnTensorDescriptor_t xDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnFilterDescriptor_t dwDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* sizeInBytes) {
  return handle.GetConvolutionBackwardFilterWorkspaceSize(xDesc, dyDesc, convDesc, dwDesc, algo,
                                                          sizeInBytes);
}
