// The training-step example on a GPU: plain cuDNN calls, then the same calls through the drop-in
// ucudnn::Handle (cuDNN's own function names, the handle's type changed).
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

#include <spdlog/spdlog.h>

#include "train_step_engine.h"
#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/client/handle.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/random_fill.h"

namespace ucudnn::example {
namespace {

Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(e));
}
Status Check(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": " + cudnnGetErrorString(s));
}
#define EXAMPLE_CHECK(call) UCUDNN_RETURN_IF_ERROR(Check((call), #call))
// For teardown, where there is no caller to return a failure to: logged, never ignored.
#define EXAMPLE_LOG_FAILURE(call)                                           \
  do {                                                                      \
    const Status example_status = Check((call), #call);                     \
    if (!example_status.ok()) spdlog::warn("{}", example_status.message()); \
  } while (false)

cudnnDataType_t CudnnType(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return CUDNN_DATA_HALF;
    case DataType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case DataType::kFloat32:
      break;
  }
  return CUDNN_DATA_FLOAT;
}

// One distinct kernel's descriptors, as a framework would hold them.
struct GpuKernel {
  Kernel kernel;
  cudnnTensorDescriptor_t x = nullptr;  // the convolution's input (x or dx)
  cudnnTensorDescriptor_t y = nullptr;  // its output (y or dy)
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ~GpuKernel() {
    if (x) EXAMPLE_LOG_FAILURE(cudnnDestroyTensorDescriptor(x));
    if (y) EXAMPLE_LOG_FAILURE(cudnnDestroyTensorDescriptor(y));
    if (w) EXAMPLE_LOG_FAILURE(cudnnDestroyFilterDescriptor(w));
    if (conv) EXAMPLE_LOG_FAILURE(cudnnDestroyConvolutionDescriptor(conv));
  }

  Status Init() {
    const ConvProblem& p = kernel.problem;
    const cudnnTensorFormat_t format =
        p.layout == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const cudnnDataType_t type = CudnnType(p.data_type);
    auto i = [](int64_t v) { return static_cast<int>(v); };
    EXAMPLE_CHECK(cudnnCreateTensorDescriptor(&x));
    EXAMPLE_CHECK(cudnnCreateTensorDescriptor(&y));
    EXAMPLE_CHECK(cudnnCreateFilterDescriptor(&w));
    EXAMPLE_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    EXAMPLE_CHECK(
        cudnnSetTensor4dDescriptor(x, format, type, i(kernel.mini_batch), i(p.c), i(p.h), i(p.w)));
    EXAMPLE_CHECK(cudnnSetTensor4dDescriptor(y, format, type, i(kernel.mini_batch), i(p.k),
                                             i(p.out_h()), i(p.out_w())));
    EXAMPLE_CHECK(
        cudnnSetFilter4dDescriptor(w, type, format, i(p.k), i(p.c / p.groups), i(p.r), i(p.s)));
    EXAMPLE_CHECK(cudnnSetConvolution2dDescriptor(
        conv, i(p.pad_h), i(p.pad_w), i(p.stride_h), i(p.stride_w), i(p.dilation_h),
        i(p.dilation_w), CUDNN_CROSS_CORRELATION, CudnnType(p.compute_type)));
    EXAMPLE_CHECK(cudnnSetConvolutionGroupCount(conv, i(p.groups)));
    const cudnnMathType_t math = p.math == MathMode::kTensorOp ? CUDNN_TENSOR_OP_MATH
                                 : p.math == MathMode::kTensorOpAllowConversion
                                     ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                                 : p.math == MathMode::kFma ? CUDNN_FMA_MATH
                                                            : CUDNN_DEFAULT_MATH;
    EXAMPLE_CHECK(cudnnSetConvolutionMathType(conv, math));
    return Status::Ok();
  }
};

class CudnnEngine final : public StepEngine {
 public:
  explicit CudnnEngine(const EngineOptions& options) : options_(options) {}
  ~CudnnEngine() override {
    for (void* p : {x_, y_, w_, dw_, ws_}) {
      if (p != nullptr) EXAMPLE_LOG_FAILURE(cudaFree(p));
    }
    kernels_.clear();
    if (cudnn_ != nullptr) EXAMPLE_LOG_FAILURE(cudnnDestroy(cudnn_));
  }

  Status Init() {
    EXAMPLE_CHECK(cudaSetDevice(0));
    UCUDNN_ASSIGN_OR_RETURN(fingerprint_, GpuFingerprint(0));
    EXAMPLE_CHECK(cudnnCreate(&cudnn_));
    size_t x_bytes = 0, y_bytes = 0, w_bytes = 0;
    for (const Kernel& k : UniqueKernels(options_.step)) {
      auto gpu = std::make_unique<GpuKernel>();
      gpu->kernel = k;
      UCUDNN_RETURN_IF_ERROR(gpu->Init());
      const size_t element = ElementSize(k.problem.data_type);
      x_bytes = std::max(x_bytes, k.mini_batch * k.problem.input_elements_per_sample() * element);
      y_bytes = std::max(y_bytes, k.mini_batch * k.problem.output_elements_per_sample() * element);
      w_bytes = std::max(w_bytes, k.problem.filter_elements() * element);
      kernels_[Key(k)] = std::move(gpu);
    }
    for (const Kernel& k : options_.step) step_.push_back(kernels_.at(Key(k)).get());
    // A step has one precision (NetworkKernels): the data are made in its element type.
    const DataType type =
        options_.step.empty() ? DataType::kFloat32 : options_.step.front().problem.data_type;
    UCUDNN_RETURN_IF_ERROR(AllocateRandom(&x_, x_bytes, type, 1));
    UCUDNN_RETURN_IF_ERROR(AllocateRandom(&y_, y_bytes, type, 2));
    UCUDNN_RETURN_IF_ERROR(AllocateRandom(&w_, w_bytes, type, 3));
    UCUDNN_RETURN_IF_ERROR(AllocateRandom(&dw_, w_bytes, type, 4));
    return Status::Ok();
  }

  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }

  Result<StepTiming> TimeWithoutLibrary(uint64_t limit) override {
    UCUDNN_RETURN_IF_ERROR(EnsureWorkspace(limit));
    std::map<const GpuKernel*, int> algos;
    for (const auto& [key, k] : kernels_) {
      UCUDNN_ASSIGN_OR_RETURN(algos[k.get()], BestUndivided(*k, limit));
    }
    UCUDNN_ASSIGN_OR_RETURN(StepTiming timing, TimeSteps([&]() -> Status {
                              for (const GpuKernel* k : step_) {
                                UCUDNN_RETURN_IF_ERROR(Run(k, cudnn_, algos.at(k), ws_, limit));
                              }
                              return Status::Ok();
                            }));
    UCUDNN_RETURN_IF_ERROR(
        TimeKernels([&](const GpuKernel* k) { return Run(k, cudnn_, algos.at(k), ws_, limit); },
                    &timing.kernel_ms));
    return timing;
  }

  Result<LibraryRun> TimeWithLibrary(const ClientConfig& config, int64_t plan_wait_ms) override {
    Handle handle(cudnn_, config);
    const bool per_kernel = config.workspace_mode == ClientConfig::WorkspaceMode::kPerKernel;
    const uint64_t passed = per_kernel ? config.workspace_bytes : 0;
    UCUDNN_RETURN_IF_ERROR(EnsureWorkspace(passed));
    // What a framework does at setup: ask each kernel's workspace (this declares it).
    for (const auto& [key, k] : kernels_) {
      size_t bytes = 0;
      UCUDNN_RETURN_IF_ERROR(Declare(handle, *k, &bytes));
    }
    handle.Prepare();
    handle.WaitForPlans(plan_wait_ms);
    auto step = [&]() -> Status {
      for (const GpuKernel* k : step_) {
        UCUDNN_RETURN_IF_ERROR(RunThrough(handle, k, passed > 0 ? ws_ : nullptr, passed));
      }
      return Status::Ok();
    };
    for (int i = 0; i < options_.warmup_steps; ++i) UCUDNN_RETURN_IF_ERROR(step());
    EXAMPLE_CHECK(cudaDeviceSynchronize());
    const ClientStats before = handle.Stats();
    LibraryRun run;
    UCUDNN_ASSIGN_OR_RETURN(run.timing, TimeSteps(step, /*warmup=*/false));
    run.stats = handle.Stats();
    run.stats.planned_calls -= before.planned_calls;
    run.stats.fallback_calls -= before.fallback_calls;
    run.stats.rejected_plan_calls -= before.rejected_plan_calls;
    run.stats.passthrough_calls -= before.passthrough_calls;
    run.kernels = handle.Kernels();
    UCUDNN_RETURN_IF_ERROR(TimeKernels(
        [&](const GpuKernel* k) {
          return RunThrough(handle, k, passed > 0 ? ws_ : nullptr, passed);
        },
        &run.timing.kernel_ms));
    return run;
  }

 private:
  static std::string Key(const Kernel& k) { return KernelKey(k.problem, k.mini_batch); }

  // Each distinct kernel alone: the mean of a few calls after one warm-up call.
  template <typename Call>
  Status TimeKernels(Call call, std::map<std::string, double>* out) {
    if (!options_.per_kernel) return Status::Ok();
    constexpr int kCalls = 5;
    for (const auto& [key, k] : kernels_) {
      UCUDNN_RETURN_IF_ERROR(call(k.get()));
      EXAMPLE_CHECK(cudaDeviceSynchronize());
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) UCUDNN_RETURN_IF_ERROR(call(k.get()));
      EXAMPLE_CHECK(cudaDeviceSynchronize());
      const auto end = std::chrono::steady_clock::now();
      (*out)[key] = std::chrono::duration<double, std::milli>(end - start).count() / kCalls;
    }
    return Status::Ok();
  }

  // Non-zero finite data in the tensors' own element type (fp16 and bf16 included).
  Status AllocateRandom(void** dst, size_t bytes, DataType type, uint64_t seed) {
    EXAMPLE_CHECK(cudaMalloc(dst, std::max<size_t>(bytes, 1)));
    constexpr size_t kChunk = size_t{1} << 22;  // elements
    const size_t element = ElementSize(type);
    std::vector<unsigned char> host(kChunk * element);
    const size_t count = bytes / element;
    for (size_t first = 0; first < count; first += kChunk) {
      const size_t n = std::min(kChunk, count - first);
      GenerateRandom(host.data(), n, type, seed, first);
      EXAMPLE_CHECK(cudaMemcpy(static_cast<unsigned char*>(*dst) + first * element, host.data(),
                               n * element, cudaMemcpyHostToDevice));
    }
    return Status::Ok();
  }

  Status EnsureWorkspace(uint64_t bytes) {
    if (bytes <= ws_bytes_) return Status::Ok();
    if (ws_ != nullptr) {
      void* old = ws_;
      ws_ = nullptr;
      ws_bytes_ = 0;
      EXAMPLE_CHECK(cudaFree(old));
    }
    EXAMPLE_CHECK(cudaMalloc(&ws_, bytes));
    ws_bytes_ = bytes;
    return Status::Ok();
  }

  // cuDNN's own best undivided algorithm within `limit`: the heuristics' first choice that fits
  // (what the library's fallback uses), or with --find-baseline the fastest measured one.
  Result<int> BestUndivided(const GpuKernel& k, uint64_t limit) {
    const ConvProblem& p = k.kernel.problem;
    int returned = 0;
    if (p.op == ConvOp::kForward) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      if (options_.find_baseline) {
        EXAMPLE_CHECK(cudnnFindConvolutionForwardAlgorithmEx(cudnn_, k.x, x_, k.w, w_, k.conv, k.y,
                                                             y_, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                             &returned, perf, ws_, limit));
      } else {
        EXAMPLE_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
            cudnn_, k.x, k.w, k.conv, k.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
      }
      for (int i = 0; i < returned; ++i) {
        size_t bytes = 0;
        if (perf[i].status == CUDNN_STATUS_SUCCESS &&
            cudnnGetConvolutionForwardWorkspaceSize(cudnn_, k.x, k.w, k.conv, k.y, perf[i].algo,
                                                    &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= limit) {
          return static_cast<int>(perf[i].algo);
        }
      }
    } else if (p.op == ConvOp::kBackwardData) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      if (options_.find_baseline) {
        EXAMPLE_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            cudnn_, k.w, w_, k.y, y_, k.conv, k.x, x_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
            &returned, perf, ws_, limit));
      } else {
        EXAMPLE_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            cudnn_, k.w, k.y, k.conv, k.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
      }
      for (int i = 0; i < returned; ++i) {
        size_t bytes = 0;
        if (perf[i].status == CUDNN_STATUS_SUCCESS &&
            cudnnGetConvolutionBackwardDataWorkspaceSize(
                cudnn_, k.w, k.y, k.conv, k.x, perf[i].algo, &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= limit) {
          return static_cast<int>(perf[i].algo);
        }
      }
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      if (options_.find_baseline) {
        EXAMPLE_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            cudnn_, k.x, x_, k.y, y_, k.conv, k.w, dw_, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
            &returned, perf, ws_, limit));
      } else {
        EXAMPLE_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            cudnn_, k.x, k.y, k.conv, k.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned,
            perf));
      }
      for (int i = 0; i < returned; ++i) {
        size_t bytes = 0;
        if (perf[i].status == CUDNN_STATUS_SUCCESS &&
            cudnnGetConvolutionBackwardFilterWorkspaceSize(
                cudnn_, k.x, k.y, k.conv, k.w, perf[i].algo, &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= limit) {
          return static_cast<int>(perf[i].algo);
        }
      }
    }
    return 0;  // algorithm 0 of every op needs no workspace
  }

  // Plain cuDNN.
  Status Run(const GpuKernel* k, cudnnHandle_t h, int algo, void* ws, size_t ws_bytes) {
    const float alpha = 1.0f, beta = 0.0f;
    switch (k->kernel.problem.op) {
      case ConvOp::kForward:
        EXAMPLE_CHECK(cudnnConvolutionForward(h, &alpha, k->x, x_, k->w, w_, k->conv,
                                              static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws,
                                              ws_bytes, &beta, k->y, y_));
        break;
      case ConvOp::kBackwardData:
        EXAMPLE_CHECK(cudnnConvolutionBackwardData(h, &alpha, k->w, w_, k->y, y_, k->conv,
                                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                                   ws, ws_bytes, &beta, k->x, x_));
        break;
      case ConvOp::kBackwardFilter:
        EXAMPLE_CHECK(cudnnConvolutionBackwardFilter(
            h, &alpha, k->x, x_, k->y, y_, k->conv,
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, ws_bytes, &beta, k->w, dw_));
        break;
    }
    return Status::Ok();
  }

  // The same calls with the drop-in handle: only the handle's type differs. The algorithm
  // passed (0) is overridden by the library.
  Status RunThrough(Handle& h, const GpuKernel* k, void* ws, size_t ws_bytes) {
    const float alpha = 1.0f, beta = 0.0f;
    switch (k->kernel.problem.op) {
      case ConvOp::kForward:
        EXAMPLE_CHECK(cudnnConvolutionForward(h, &alpha, k->x, x_, k->w, w_, k->conv,
                                              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, ws,
                                              ws_bytes, &beta, k->y, y_));
        break;
      case ConvOp::kBackwardData:
        EXAMPLE_CHECK(cudnnConvolutionBackwardData(h, &alpha, k->w, w_, k->y, y_, k->conv,
                                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, ws, ws_bytes,
                                                   &beta, k->x, x_));
        break;
      case ConvOp::kBackwardFilter:
        EXAMPLE_CHECK(cudnnConvolutionBackwardFilter(h, &alpha, k->x, x_, k->y, y_, k->conv,
                                                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, ws,
                                                     ws_bytes, &beta, k->w, dw_));
        break;
    }
    return Status::Ok();
  }

  Status Declare(Handle& h, const GpuKernel& k, size_t* bytes) {
    switch (k.kernel.problem.op) {
      case ConvOp::kForward:
        EXAMPLE_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
            h, k.x, k.w, k.conv, k.y, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, bytes));
        break;
      case ConvOp::kBackwardData:
        EXAMPLE_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, k.w, k.y, k.conv, k.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, bytes));
        break;
      case ConvOp::kBackwardFilter:
        EXAMPLE_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, k.x, k.y, k.conv, k.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, bytes));
        break;
    }
    return Status::Ok();
  }

  template <typename Step>
  Result<StepTiming> TimeSteps(Step step, bool warmup = true) {
    if (warmup) {
      for (int i = 0; i < options_.warmup_steps; ++i) UCUDNN_RETURN_IF_ERROR(step());
    }
    EXAMPLE_CHECK(cudaDeviceSynchronize());
    StepTiming timing;
    for (int i = 0; i < options_.timed_steps; ++i) {
      const auto start = std::chrono::steady_clock::now();
      UCUDNN_RETURN_IF_ERROR(step());
      EXAMPLE_CHECK(cudaDeviceSynchronize());
      const auto end = std::chrono::steady_clock::now();
      timing.steps_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
    timing.ms_per_step = Median(timing.steps_ms);
    return timing;
  }

  EngineOptions options_;
  DeviceFingerprint fingerprint_;
  cudnnHandle_t cudnn_ = nullptr;
  std::map<std::string, std::unique_ptr<GpuKernel>> kernels_;
  std::vector<const GpuKernel*> step_;
  void *x_ = nullptr, *y_ = nullptr, *w_ = nullptr, *dw_ = nullptr, *ws_ = nullptr;
  uint64_t ws_bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<StepEngine>> MakeCudnnEngine(const EngineOptions& options) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return Unavailable("no GPU visible to the CUDA runtime");
  }
  auto engine = std::make_unique<CudnnEngine>(options);
  UCUDNN_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<StepEngine>(std::move(engine));
}

}  // namespace ucudnn::example
