// The CPU convolution backend: the numerical reference of the system and the backend of machines
// without a GPU. Computes in fp32 NCHW (every math mode); fp16, bf16 and NHWC tensors are
// converted to and from fp32 NCHW copies around the computation (compute type fp32 only, as
// frameworks train). Convolutions are
// cross-correlations (cuDNN's CUDNN_CROSS_CORRELATION mode, what deep-learning frameworks use).
//
// Its algorithms mirror cuDNN's speed/workspace trade-off:
//   0 "direct"                  loops over the tensors, no workspace; 10-100x slower than the
//                               GEMM algorithms on dense layers (fastest only on depthwise ones).
//   1 "im2col_gemm"             im2col of the whole call's batch into the workspace, then one
//                               large OpenBLAS sgemm per group; workspace grows linearly with the
//                               batch. On small images (7x7, 14x14) the batch-wide GEMMs beat
//                               per-sample ones by up to 2x at batch 64 (forward, backward-data).
//   2 "im2col_gemm_per_sample"  im2col of one sample (and group) at a time, one sgemm each;
//                               workspace of one sample, whatever the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ucudnn/core/algorithm_names.h"  // kCpuAlgo*: the ids of the algorithms above
#include "ucudnn/core/backend.h"

namespace ucudnn {

struct CpuBackendOptions {
  // OpenBLAS threads, set process-wide when the backend is made (OpenBLAS has no per-call
  // setting). 1 keeps timings stable and leaves cores to other work; 0 keeps OpenBLAS's own
  // choice.
  int blas_threads = 1;
};

class CpuBackend : public ConvBackend {
 public:
  CpuBackend() : CpuBackend(CpuBackendOptions{}) {}
  explicit CpuBackend(const CpuBackendOptions& options);

  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }
  std::vector<AlgorithmInfo> Algorithms(ConvOp op) const override;
  Result<size_t> WorkspaceSize(const ConvProblem& problem, int64_t batch,
                               const Algorithm& algo) override;
  Status Run(const ConvProblem& problem, int64_t batch, const Algorithm& algo,
             const ConvOperands& operands, void* workspace, size_t workspace_bytes, float alpha,
             float beta) override;
  Status Synchronize() override { return Status::Ok(); }

  // Host memory, 64-byte aligned; uninitialised, like device memory.
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override;
  Status CopyToDevice(void* device_dst, const void* host_src, size_t bytes) override;
  Status CopyToHost(void* host_dst, const void* device_src, size_t bytes) override;
  Status CopyWithinDevice(void* device_dst, const void* device_src, size_t bytes) override;
  Result<std::vector<double>> TimeRuns(const ConvProblem& problem, int64_t batch,
                                       const Algorithm& algo, const ConvOperands& operands,
                                       void* workspace, size_t workspace_bytes, int warmup,
                                       int runs) override;
  // Host memory and the host's clock: nothing to lose.
  Status Healthy() override { return Status::Ok(); }

 private:
  // fp16, bf16 or NHWC tensors: Run() on fp32 NCHW copies, the result narrowed back.
  Status RunConverted(const ConvProblem& problem, int64_t batch, int algo,
                      const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                      float alpha, float beta);

  DeviceFingerprint fingerprint_;
};

}  // namespace ucudnn
