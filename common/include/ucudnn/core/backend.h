// One interface over the convolution implementations: cuDNN on a GPU, the CPU reference backend.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn {

// The operands of one call, in the op's own terms (pointers into device memory for cuDNN,
// host memory for the CPU backend). Tensors along the batch start at sample 0 of the call.
//   kForward:        x (in), w (in), y (out)      y  = alpha * conv(x, w)   + beta * y
//   kBackwardData:   dy (in), w (in), dx (out)    dx = alpha * convT(dy, w) + beta * dx
//   kBackwardFilter: x (in), dy (in), dw (out)    dw = alpha * corr(x, dy)  + beta * dw
struct ConvOperands {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* dy = nullptr;
  void* y = nullptr;
  void* dx = nullptr;
  void* dw = nullptr;
};

struct AlgorithmInfo {
  int id = 0;        // the backend's own number (cuDNN's enum value for cudnn)
  std::string name;  // "IMPLICIT_PRECOMP_GEMM", "direct", "im2col_gemm"
};

// Memory a backend's Run() can use (device memory for cuDNN, host memory for the CPU).
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
};

class ConvBackend {
 public:
  virtual ~ConvBackend() = default;

  virtual const DeviceFingerprint& fingerprint() const = 0;
  // Every algorithm the backend has for `op`, whether or not it supports a given problem.
  virtual std::vector<AlgorithmInfo> Algorithms(ConvOp op) const = 0;
  // Workspace bytes `algo` needs for `problem` at `batch`; kUnsupported when it cannot run it.
  virtual Result<size_t> WorkspaceSize(const ConvProblem& problem, int64_t batch, int algo) = 0;
  // Runs the op on `batch` samples. `workspace` holds at least WorkspaceSize() bytes.
  virtual Status Run(const ConvProblem& problem, int64_t batch, int algo,
                     const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                     float alpha, float beta) = 0;
  // Blocks until work issued by Run() has finished (no-op on the CPU).
  virtual Status Synchronize() = 0;

  // Memory for operands and workspace; a zero-byte request gives a valid empty buffer.
  virtual Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) = 0;
  virtual Status CopyToDevice(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual Status CopyToHost(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Runs the op `warmup` times untimed, then `runs` times, each timed on the device's own clock
  // (CUDA events for cuDNN, a steady clock for the CPU); milliseconds per run.
  virtual Result<std::vector<double>> TimeRuns(const ConvProblem& problem, int64_t batch, int algo,
                                               const ConvOperands& operands, void* workspace,
                                               size_t workspace_bytes, int warmup, int runs) = 0;
};

}  // namespace ucudnn
