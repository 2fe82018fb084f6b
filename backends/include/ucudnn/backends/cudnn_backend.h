// The cuDNN backend: the legacy cuDNN convolution functions behind the ConvBackend interface.
// Available only in builds with UCUDNN_ENABLE_CUDNN (library ucudnn_cudnn); other code reaches
// it by name through backend_factory.h. The client library uses it directly, wrapping the
// training job's own cuDNN handle.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ucudnn/backends/cudnn_engines.h"
#include "ucudnn/core/backend.h"
#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/status.h"

namespace ucudnn {

// The cuDNN descriptors of one problem at one batch size: input-shaped (x or dx), output-shaped
// (y or dy), filter (w or dw) and convolution. Built and checked once (the output shape cuDNN
// computes must equal the model's), destroyed with the object. Shared by CudnnBackend's cache
// and the client library's bound plans.
struct CudnnDescriptors {
  // kUnsupported when the legacy API cannot describe the problem (bf16 compute, more than 2^31
  // elements per tensor); kInvalidArgument for an invalid problem or batch.
  static Result<std::unique_ptr<CudnnDescriptors>> Build(const ConvProblem& problem, int64_t batch);
  CudnnDescriptors() = default;
  CudnnDescriptors(const CudnnDescriptors&) = delete;
  CudnnDescriptors& operator=(const CudnnDescriptors&) = delete;
  ~CudnnDescriptors();

  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

// One convolution of `op` with algorithm `algo` (cuDNN's enum value for that op) over `d` on
// `handle`'s stream: alpha and beta as cuDNN takes them. The operands are not checked (the
// caller's job, once); a failure names the cuDNN call and status (gpu::CodeFor's code).
Status RunCudnnConvolution(cudnnHandle_t handle, ConvOp op, const CudnnDescriptors& d, int algo,
                           const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                           float alpha, float beta);

// Not thread-safe: use one CudnnBackend per thread (the worker runs one thread per GPU). All
// work is issued on stream(); Synchronize() and the copies wait for that stream only.
class CudnnBackend final : public ConvBackend {
 public:
  // Owns a new cuDNN handle bound to a new non-blocking stream on GPU `device_index`; makes that
  // device current on the calling thread (and again before each call that issues work).
  static Result<std::unique_ptr<CudnnBackend>> Create(int device_index);
  // Wraps a handle the caller owns and keeps alive for the backend's lifetime; the backend
  // never destroys it nor changes its stream or the current device. Work goes to whatever stream
  // the handle is bound to at each call. The handle's device is taken to be the current one.
  static Result<std::unique_ptr<CudnnBackend>> Wrap(cudnnHandle_t handle);

  ~CudnnBackend() override;
  CudnnBackend(const CudnnBackend&) = delete;
  CudnnBackend& operator=(const CudnnBackend&) = delete;

  cudnnHandle_t handle() const { return handle_; }
  // The stream the handle issues work on (cudnnGetStream; nullptr is the legacy default stream).
  cudaStream_t stream() const;
  int device_index() const { return device_index_; }
  bool owns_handle() const { return owns_handle_; }

  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }
  // Forward: the 8 cudnnConvolutionFwdAlgo_t values; backward-data: the 6
  // cudnnConvolutionBwdDataAlgo_t; backward-filter: the 7 cudnnConvolutionBwdFilterAlgo_t. The
  // id is cuDNN's enum value, the name its suffix ("IMPLICIT_PRECOMP_GEMM", "ALGO_1", "FFT").
  std::vector<AlgorithmInfo> Algorithms(ConvOp op) const override;
  // kUnsupported with cuDNN's reason when cuDNN declines `algo` for this problem (or when the
  // legacy API cannot describe it, e.g. bf16 compute or more than 2^31 elements per tensor).
  Result<size_t> WorkspaceSize(const ConvProblem& problem, int64_t batch,
                               const Algorithm& algo) override;
  Result<size_t> OverwritingWorkspaceSize(const ConvProblem& problem, int64_t batch,
                                          const Algorithm& algorithm) override;
  Status Run(const ConvProblem& problem, int64_t batch, const Algorithm& algo,
             const ConvOperands& operands, void* workspace, size_t workspace_bytes, float alpha,
             float beta) override;
  Status Synchronize() override;
  // Device memory from cudaMalloc, freed when the buffer is destroyed.
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override;
  // Ordered after the work already issued on stream(); they return when the copy is done.
  Status CopyToDevice(void* device_dst, const void* host_src, size_t bytes) override;
  Status CopyToHost(void* host_dst, const void* device_src, size_t bytes) override;
  Status CopyWithinDevice(void* device_dst, const void* device_src, size_t bytes) override;
  // Backward-data: legacy 1 before legacy 0. In strict fp32 on an H200 (NHWC, ResNet-50's shapes
  // at 256) legacy 0 took 98-144 ms, legacy 1 2.4-12 ms with 58 MiB to 1.15 GiB of workspace;
  // legacy 0 was 90% of a cold ResNet-50's 2.3 s of references.
  std::vector<Algorithm> ReferenceAlgorithms(ConvOp op) const override;
  // CUDA events around each run, all runs issued back to back before one wait (TimeRunBatch).
  Result<std::vector<double>> TimeRuns(const ConvProblem& problem, int64_t batch,
                                       const Algorithm& algo, const ConvOperands& operands,
                                       void* workspace, size_t workspace_bytes, int warmup,
                                       int runs) override;
  // CUDA events around each group of runs issued back to back (TimeRunBatch). With
  // device_time_only and group > 1, the groups are queued behind a host function that holds the
  // stream until they are all issued (at most 100 ms), so the device runs them back to back and
  // the events measure device time only.
  Result<std::vector<double>> TimeRunGroups(const ConvProblem& problem, int64_t batch,
                                            const Algorithm& algo, const ConvOperands& operands,
                                            void* workspace, size_t workspace_bytes, int warmup,
                                            int samples, int group,
                                            bool device_time_only = false) override;
  // Every request's runs and events queued on the stream, then one wait (device_time_only: the
  // default's one call per request, each behind its own stream gate).
  std::vector<Result<std::vector<double>>> TimeRunBatch(
      const ConvProblem& problem, int64_t batch, const ConvOperands& operands,
      const std::vector<TimedRunRequest>& requests, bool device_time_only = false) override;
  // cudaGetLastError() for a sticky error, then a wait for the device (an owned handle) or for
  // the handle's stream (a wrapped one), whose error is classified by gpu::CodeFor: kDeviceLost
  // for a sticky error.
  Status Healthy() override;
  // cudaMemsetAsync on the backend's stream.
  Status FillBytes(void* device_dst, unsigned char value, size_t bytes) override;
  // cudnnTransformTensor, and cudnnTransformTensor, cudnnOpTensor and cudnnReduceTensor (NORM2)
  // over chunks of the vectors seen as 1-D tensors.
  Status WidenToFloat(void* dst, const void* src, DataType type, size_t count) override;
  Result<std::pair<double, double>> DifferenceNorms(const void* got, DataType type,
                                                    const void* want, size_t count) override;

  // Legacy algorithms, then the engine configurations cuDNN's heuristics propose (modes instant
  // and fallback, filtered by the problem's math mode, runtime-compiled engines left out).
  std::vector<Timing> Candidates(const ConvProblem& problem, int64_t batch) override;
  // True for a runtime-compiled engine configuration (and, to be safe, for an engine
  // configuration the heuristics of that size do not describe).
  bool BuildsCodePerSize(const ConvProblem& problem, int64_t batch, const Algorithm& algo) override;
  // The engine heuristics and an execution plan of every candidate for each size not prepared
  // yet, sizes spread over up to `threads` threads, each with a cuDNN handle of its own (cuDNN is
  // thread-safe across handles) on this backend's stream; the results go into the caches that
  // Candidates(), WorkspaceSize() and the runs read. A plan runs on the handle it was built on.
  // Only for a backend that owns its handle (a wrapped handle's stream may change between calls).
  // With a plan compiler (SetPlanCompiler), the runtime-compiled plans of the sizes that the
  // benchmark will measure (grouped and depthwise problems) are then queued with it, smallest
  // size first: other processes build them while this one times the sizes before.
  void Prepare(const ConvProblem& problem, const std::vector<int64_t>& batches,
               int threads) override;
  // Drops the plan compiler's queued plans of `algos` at `batch` (both betas of a backward
  // filter): the sizes a skip rule left them out at.
  void WillNotRun(const ConvProblem& problem, int64_t batch,
                  const std::vector<Algorithm>& algos) override;
  // Whether Candidates() includes engine configurations (default yes; the worker's
  // --no-engines turns them off, for a legacy-only comparison).
  void set_engines_enabled(bool enabled) { engines_enabled_ = enabled; }

  // Descriptor sets currently cached (one per (problem shape, batch)); for tests.
  size_t cached_descriptor_sets() const;

 private:
  void PrepareOnThreads(const ConvProblem& problem, const std::vector<int64_t>& batches,
                        int threads);
  void QueueCompiles(const ConvProblem& problem, const std::vector<int64_t>& batches);
  // The plan compiler Prepare() queues with (SetPlanCompiler), or null: none set, engine
  // configurations off, or a handle this backend does not own.
  std::shared_ptr<PlanCompiler> PlanCompilerOfPrepare() const;
  class DescriptorCache;

  CudnnBackend();
  Status MakeDeviceCurrent() const;
  Result<const CudnnDescriptors*> GetDescriptors(const ConvProblem& problem, int64_t batch);
  Status EnsureEvents(size_t count);
  static Status CheckEngineScalars(float alpha, float beta);
  Result<const ConvGraph*> GetGraph(const ConvProblem& problem, int64_t batch, float beta);
  Result<EnginePlan*> GetEnginePlan(const ConvProblem& problem, int64_t batch,
                                    const Algorithm& algorithm, float beta);
  // The heuristics' candidates of `problem` at `batch` (cached).
  Result<const std::vector<EngineCandidate>*> GetEngineCandidates(const ConvProblem& problem,
                                                                  int64_t batch);
  // At least `count` helper handles for Prepare(), created on this thread one after the other.
  Status EnsureHelperHandles(size_t count);
  void ClearEngineCaches();
  // The timed runs of `algo` with alpha 1, beta 0, everything looked up beforehand: each call
  // runs once, on the next slice of `operands` (TimedRunOperands).
  Result<std::function<Status()>> ResolveTimedRuns(const ConvProblem& problem, int64_t batch,
                                                   const Algorithm& algo,
                                                   const ConvOperands& operands, void* workspace,
                                                   size_t workspace_bytes);

  // Bounds on the engine caches; past them the caches start again (a worker measures one problem
  // at a time, a client binds its plans once).
  static constexpr size_t kMaxCachedGraphs = 512;
  static constexpr size_t kMaxCachedEnginePlans = 4096;

  cudnnHandle_t handle_ = nullptr;
  cudaStream_t own_stream_ = nullptr;
  bool owns_handle_ = false;
  int device_index_ = 0;
  DeviceFingerprint fingerprint_;
  std::unique_ptr<DescriptorCache> descriptors_;
  std::vector<cudaEvent_t> events_;  // reused by TimeRuns: start/stop pairs
  // DifferenceNorms' scratch (two fp32 chunks, the norms, cuDNN's reduction workspace), kept
  // between calls and grown as needed: a worker checks a few dozen results a problem, and a
  // cudaMalloc/cudaFree pair each time costs milliseconds. At most about 512 MiB.
  std::unique_ptr<BackendBuffer> numerics_scratch_;
  bool engines_enabled_ = true;
  // Keys: CanonicalKey|batch|beta (graphs), that plus |config (plans, failures), CanonicalKey|batch
  // (candidates).
  std::map<std::string, std::unique_ptr<ConvGraph>> graphs_;
  std::map<std::string, std::shared_ptr<EnginePlan>> engine_plans_;
  std::map<std::string, Status> engine_plan_failures_;  // cuDNN's verdict, not asked again
  std::map<std::string, std::vector<EngineCandidate>> engine_candidates_;
  // Prepare()'s handles, bound to stream(); destroyed after the graphs and plans built on them.
  std::vector<cudnnHandle_t> helper_handles_;
};

// The fingerprint of GPU `device_index` with the versions of the libraries actually loaded:
// cudnnGetVersion() and cudaRuntimeGetVersion() at run time, not the headers' versions.
Result<DeviceFingerprint> GpuFingerprint(int device_index);

// Every visible GPU with its fingerprint.
struct GpuDevice {
  int index = 0;
  DeviceFingerprint fingerprint;
};
Result<std::vector<GpuDevice>> ListGpus();
// One fingerprint per distinct GPU model (equal fingerprints share timings), in device order:
// a node with two H100s and one A100 yields two.
std::vector<DeviceFingerprint> DistinctFingerprints(const std::vector<GpuDevice>& gpus);

}  // namespace ucudnn
