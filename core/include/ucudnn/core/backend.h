// One interface over the convolution implementations: cuDNN on a GPU, the CPU reference backend.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"

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
  // Samples that x and y (dx and dy) hold: 0 means the batch of the call. Timed runs of fewer
  // samples walk the slices these hold (TimedRunOperands), as a segment's micro-batches do.
  int64_t samples = 0;
};

// The operands of `op` from its two inputs in Run()'s order (forward: x, w; backward-data:
// dy, w; backward-filter: x, dy) and its output (y, dx or dw).
ConvOperands BindOperands(ConvOp op, const void* first_input, const void* second_input,
                          void* output);

// The element counts of an op's two inputs and its output at `batch`, in BindOperands' order.
struct OpTensorSizes {
  size_t first_input, second_input, output;
};
OpTensorSizes OpSizes(const ConvProblem& p, int64_t batch);

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
  // Every legacy algorithm the backend has for `op`, whether or not it supports a given problem.
  virtual std::vector<AlgorithmInfo> Algorithms(ConvOp op) const = 0;
  // What the benchmark engine measures for `problem` at `batch`: every legacy algorithm of
  // Algorithms(), then (cuDNN) the graph API's engine configurations its heuristics propose for
  // this problem and size. An engine configuration is {kEngineAlgo, key}; the keys live as long as
  // the backend. Errors of the engine query leave the legacy algorithms (and are logged).
  virtual std::vector<Timing> Candidates(const ConvProblem& problem, int64_t batch) {
    (void)batch;
    std::vector<Timing> out;
    for (const AlgorithmInfo& a : Algorithms(problem.op)) {
      Timing t;
      t.algo = a.id;
      out.push_back(std::move(t));
    }
    return out;
  }
  // Gets ready, ahead of Candidates() and WorkspaceSize(), what they need for each of `batches`
  // of `problem`, on up to `threads` threads where the backend can (cuDNN: the engine
  // heuristics and an execution plan for every candidate, the host-side work that dominates a
  // cold benchmark). Only a speed-up: without it the same work happens when those are called,
  // one size at a time, with the same results. The default does nothing.
  virtual void Prepare(const ConvProblem& problem, const std::vector<int64_t>& batches,
                       int threads) {
    (void)problem;
    (void)batches;
    (void)threads;
  }
  // The benchmark will not run `algos` of `problem` at micro-batch `batch` (a skip rule left them
  // out there): what Prepare() set going for them may stop (cuDNN: the compile helpers' queued
  // plans). Only a saving: a configuration asked for anyway is built as without it. The default
  // does nothing.
  virtual void WillNotRun(const ConvProblem& problem, int64_t batch,
                          const std::vector<Algorithm>& algos) {
    (void)problem;
    (void)batch;
    (void)algos;
  }
  // Whether `algo` runs code built for this batch size alone (cuDNN's runtime-compiled engines
  // compile each size's execution plan), so that its first run at `batch` loads that code even
  // after runs at other sizes, and is no measure of its time. The default: no.
  virtual bool BuildsCodePerSize(const ConvProblem& problem, int64_t batch, const Algorithm& algo) {
    (void)problem;
    (void)batch;
    (void)algo;
    return false;
  }
  // Workspace bytes `algo` needs for `problem` at `batch` in every call a plan makes, accumulating
  // ones too (a backward filter's later micro-batches, beta 1); kUnsupported when it cannot run
  // it.
  virtual Result<size_t> WorkspaceSize(const ConvProblem& problem, int64_t batch,
                                       const Algorithm& algo) = 0;
  // ... in a call that overwrites the output (beta 0), as timed runs do: at most WorkspaceSize().
  // Where the accumulating call is another plan (cuDNN's engines), asking for it costs building
  // that plan, a runtime compilation for depthwise engines; the benchmark asks it only of the
  // configurations a plan could use. By default the same.
  virtual Result<size_t> OverwritingWorkspaceSize(const ConvProblem& problem, int64_t batch,
                                                  const Algorithm& algo) {
    return WorkspaceSize(problem, batch, algo);
  }
  // Runs the op on `batch` samples. `workspace` holds at least WorkspaceSize() bytes.
  virtual Status Run(const ConvProblem& problem, int64_t batch, const Algorithm& algo,
                     const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                     float alpha, float beta) = 0;
  // Blocks until work issued by Run() has finished (no-op on the CPU).
  virtual Status Synchronize() = 0;

  // Memory for operands and workspace; a zero-byte request gives a valid empty buffer.
  virtual Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) = 0;
  virtual Status CopyToDevice(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual Status CopyToHost(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Copies within the backend's memory (non-overlapping ranges). kUnsupported by default: a
  // caller then falls back to copies through the host.
  virtual Status CopyWithinDevice(void* device_dst, const void* device_src, size_t bytes) {
    (void)device_dst;
    (void)device_src;
    (void)bytes;
    return Status(StatusCode::kUnsupported, "CopyWithinDevice: not supported by this backend");
  }
  // Sets `bytes` bytes at `device_dst` to `value`. By default through a host buffer and
  // CopyToDevice; a device backend sets them in place (a result check poisons outputs of
  // hundreds of MB: copied from the host, that was a large part of a check's time).
  virtual Status FillBytes(void* device_dst, unsigned char value, size_t bytes) {
    const std::vector<unsigned char> host(bytes, value);
    return CopyToDevice(device_dst, host.data(), bytes);
  }
  // Device-side numerics for the worker's result checks (engine/result_check.h), where the
  // backend has them; kUnsupported by default, and the caller does the same on the host.
  // WidenToFloat: `dst` (fp32, `count` elements, device) = `src` (`type`, device) converted.
  virtual Status WidenToFloat(void* dst, const void* src, DataType type, size_t count) {
    (void)dst, (void)src, (void)type, (void)count;
    return Status(StatusCode::kUnsupported, "WidenToFloat: not on this backend's device");
  }
  // The squared L2 norms {||got - want||^2, ||want||^2} of `got` (`type`) against `want` (fp32),
  // `count` elements each on the device: what a relative L2 error needs, without copying either
  // to the host. Not finite when `got` holds a NaN or an infinity.
  virtual Result<std::pair<double, double>> DifferenceNorms(const void* got, DataType type,
                                                            const void* want, size_t count) {
    (void)got, (void)type, (void)want, (void)count;
    return Status(StatusCode::kUnsupported, "DifferenceNorms: not on this backend's device");
  }
  // The algorithms that compute result checks' fp32 reference (engine/result_check.h), most
  // preferred first, each tried in turn until one runs: code apart from the tensor-core engines
  // the checks are for. Legacy 0 (cuDNN's implicit GEMM, the CPU backend's direct loop) by
  // default.
  virtual std::vector<Algorithm> ReferenceAlgorithms(ConvOp op) const {
    (void)op;
    return {Algorithm(0)};
  }
  // Runs the op `warmup` times untimed, then `runs` times, each timed on the device's own clock
  // (CUDA events for cuDNN, a steady clock for the CPU); milliseconds per run. Successive runs
  // take successive slices of the operands where they hold more samples than `batch`
  // (TimedRunOperands).
  virtual Result<std::vector<double>> TimeRuns(const ConvProblem& problem, int64_t batch,
                                               const Algorithm& algo, const ConvOperands& operands,
                                               void* workspace, size_t workspace_bytes, int warmup,
                                               int runs) = 0;
  // Like TimeRuns(), but each of the `samples` results brackets `group` back-to-back runs with one
  // pair of clock readings and is their mean (milliseconds per run): what a run costs in a
  // sequence of them, as the micro-batches of a segment run in a training step. A run timed
  // alone pays the device's wait for the host to issue it, which a sequence hides as long as the
  // device is the slower of the two; when the host is (runs shorter than the host's cost of
  // issuing one), a sequence runs at the host's pace, and so does a group. With
  // `device_time_only`, the group runs as fast as the device can (queued before it starts), for
  // a measurement of the device alone. The default averages TimeRuns() in groups, which is exact
  // for a backend that times on the host (the CPU).
  virtual Result<std::vector<double>> TimeRunGroups(const ConvProblem& problem, int64_t batch,
                                                    const Algorithm& algo,
                                                    const ConvOperands& operands, void* workspace,
                                                    size_t workspace_bytes, int warmup, int samples,
                                                    int group, bool device_time_only = false) {
    (void)device_time_only;
    if (samples < 1 || group < 1) {
      return Status(StatusCode::kInvalidArgument, "TimeRunGroups: samples and group must be >= 1");
    }
    Result<std::vector<double>> runs = TimeRuns(problem, batch, algo, operands, workspace,
                                                workspace_bytes, warmup, samples * group);
    if (!runs.ok() || group == 1) return runs;
    std::vector<double> means(static_cast<size_t>(samples), 0.0);
    for (size_t i = 0; i < runs->size(); ++i) means[i / static_cast<size_t>(group)] += (*runs)[i];
    for (double& m : means) m /= group;
    return means;
  }

  // One configuration's TimeRunGroups() within TimeRunBatch().
  struct TimedRunRequest {
    Algorithm algo;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    int warmup = 0;
    int samples = 1;
    int group = 1;
  };
  // TimeRunGroups() of several configurations of one problem and micro-batch, in order, each with
  // its own result (one that fails leaves the others their times). A backend on a device queues
  // them all and waits once (cuDNN): the device then runs one configuration's runs while the host
  // issues the next one's, instead of idling through the host's wait, wake-up and issue between
  // every two configurations, which cost a cold benchmark's probes (a run or two each, tens of
  // thousands of them for a network) more than their runs on an H200. The default calls
  // TimeRunGroups() for each (device_time_only as there).
  virtual std::vector<Result<std::vector<double>>> TimeRunBatch(
      const ConvProblem& problem, int64_t batch, const ConvOperands& operands,
      const std::vector<TimedRunRequest>& requests, bool device_time_only = false) {
    std::vector<Result<std::vector<double>>> out;
    out.reserve(requests.size());
    for (const TimedRunRequest& r : requests) {
      out.push_back(TimeRunGroups(problem, batch, r.algo, operands, r.workspace, r.workspace_bytes,
                                  r.warmup, r.samples, r.group, device_time_only));
    }
    return out;
  }

  // Whether the device can still run work. kOk, or kDeviceLost when its context is unusable (a
  // sticky CUDA error: illegal address, launch failure, uncorrectable ECC error, ...), after which
  // every later call fails and only a new process can use the device again; other errors are
  // failures of the check itself. A backend whose device cannot be lost (the CPU) keeps this
  // default. Callers ask after an operation failed, to tell a bad configuration from a dead
  // device.
  virtual Status Healthy() { return Status::Ok(); }
};

}  // namespace ucudnn
