#include "ucudnn/client/handle.h"
#include "log.h"

#include <spdlog/spdlog.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cudnn/descriptors.h"
#include "cudnn/device.h"
#include "cudnn/guard.h"
#include "session.h"
#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/backends/cudnn_engines.h"

namespace ucudnn {
namespace {

using client::Guard;
using client::GuardStatus;

using client::CurrentDeviceGuard;
using client::MakeContributionBackend;
using client::ParsedConvolution;

cudnnStatus_t ToCudnnStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return CUDNN_STATUS_SUCCESS;
    case StatusCode::kInvalidArgument:
      return CUDNN_STATUS_BAD_PARAM;
    case StatusCode::kUnsupported:
      return CUDNN_STATUS_NOT_SUPPORTED;
    case StatusCode::kResourceExhausted:
      return CUDNN_STATUS_ALLOC_FAILED;
    default:
      return CUDNN_STATUS_EXECUTION_FAILED;
  }
}

// One call's undivided run: straight to cuDNN with the framework's own descriptors, so the answer
// is cuDNN's own status. The algorithm is cuDNN's heuristic best within the workspace.
class CudnnUndividedRunner final : public client::UndividedRunner {
 public:
  CudnnUndividedRunner(cudnnHandle_t handle, ConvOp op, cudnnTensorDescriptor_t input,
                       cudnnFilterDescriptor_t filter, cudnnConvolutionDescriptor_t conv,
                       cudnnTensorDescriptor_t output, const void* alpha, const void* beta,
                       const ConvOperands& operands)
      : handle_(handle),
        op_(op),
        input_(input),
        filter_(filter),
        conv_(conv),
        output_(output),
        alpha_(alpha),
        beta_(beta),
        operands_(operands) {}

  Result<int> ChooseAlgorithm(size_t workspace_bytes) override {
    switch (op_) {
      case ConvOp::kForward:
        return Choose<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
            workspace_bytes,
            [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
              return cudnnGetConvolutionForwardAlgorithm_v7(handle_, input_, filter_, conv_,
                                                            output_, count, returned, perf);
            },
            [&](int algo, size_t* bytes) {
              return cudnnGetConvolutionForwardWorkspaceSize(
                  handle_, input_, filter_, conv_, output_,
                  static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
            });
      case ConvOp::kBackwardData:
        return Choose<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
            workspace_bytes,
            [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
              return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, filter_, output_, conv_,
                                                                 input_, count, returned, perf);
            },
            [&](int algo, size_t* bytes) {
              return cudnnGetConvolutionBackwardDataWorkspaceSize(
                  handle_, filter_, output_, conv_, input_,
                  static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
            });
      case ConvOp::kBackwardFilter:
        return Choose<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
            workspace_bytes,
            [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
              return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle_, input_, output_, conv_,
                                                                   filter_, count, returned, perf);
            },
            [&](int algo, size_t* bytes) {
              return cudnnGetConvolutionBackwardFilterWorkspaceSize(
                  handle_, input_, output_, conv_, filter_,
                  static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
            });
    }
    return InvalidArgument("op: unknown");
  }

  Status Run(int algo, void* workspace, size_t workspace_bytes) override {
    switch (op_) {
      case ConvOp::kForward:
        status_ =
            cudnnConvolutionForward(handle_, alpha_, input_, operands_.x, filter_, operands_.w,
                                    conv_, static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace,
                                    workspace_bytes, beta_, output_, operands_.y);
        break;
      case ConvOp::kBackwardData:
        status_ = cudnnConvolutionBackwardData(
            handle_, alpha_, filter_, operands_.w, output_, operands_.dy, conv_,
            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), workspace, workspace_bytes, beta_,
            input_, operands_.dx);
        break;
      case ConvOp::kBackwardFilter:
        status_ = cudnnConvolutionBackwardFilter(
            handle_, alpha_, input_, operands_.x, output_, operands_.dy, conv_,
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), workspace, workspace_bytes, beta_,
            filter_, operands_.dw);
        break;
    }
    ran_ = true;
    if (status_ == CUDNN_STATUS_SUCCESS) return Status::Ok();
    return Status(StatusCode::kInternal, std::string("cuDNN: ") + cudnnGetErrorString(status_));
  }

  // cuDNN's own answer when the call ended in an undivided run.
  bool ran() const { return ran_; }
  cudnnStatus_t status() const { return status_; }

 private:
  // The heuristics' best algorithm whose workspace fits; the workspace is asked again, exactly,
  // since the heuristics' memory figure is an estimate. Algorithm 0 of every op needs none.
  template <typename Perf, int kCount, typename Query, typename Size>
  Result<int> Choose(size_t workspace_bytes, Query query, Size size) {
    Perf perf[kCount];
    int returned = 0;
    if (query(kCount, &returned, perf) == CUDNN_STATUS_SUCCESS) {
      for (int i = 0; i < returned; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > workspace_bytes) continue;
        const int algo = static_cast<int>(perf[i].algo);
        size_t bytes = 0;
        if (size(algo, &bytes) == CUDNN_STATUS_SUCCESS && bytes <= workspace_bytes) return algo;
      }
    }
    return 0;
  }

  cudnnHandle_t handle_;
  ConvOp op_;
  cudnnTensorDescriptor_t input_;
  cudnnFilterDescriptor_t filter_;
  cudnnConvolutionDescriptor_t conv_;
  cudnnTensorDescriptor_t output_;
  const void* alpha_;
  const void* beta_;
  const ConvOperands& operands_;
  bool ran_ = false;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
};

ConvOp ToConvOp(Handle::ConvolutionKernel::Op op) {
  switch (op) {
    case Handle::ConvolutionKernel::Op::kBackwardData:
      return ConvOp::kBackwardData;
    case Handle::ConvolutionKernel::Op::kBackwardFilter:
      return ConvOp::kBackwardFilter;
    case Handle::ConvolutionKernel::Op::kForward:
      break;
  }
  return ConvOp::kForward;
}

}  // namespace

struct Handle::Impl {
  ClientConfig config;
  std::unique_ptr<CudnnBackend> backend;
  // Destroyed after the session, whose plan entries hold the runners it made.
  std::unique_ptr<client::CudnnPlanBinder> binder;
  std::unique_ptr<client::Session> session;  // null: every call passes through
  std::atomic<uint64_t> passthrough_calls{0};
  std::atomic<bool> unmodelled_warned{false};

  // Counts a call that goes to cuDNN unchanged.
  void CountPassthrough() {
    if (session != nullptr) {
      session->CountPassthrough();
    } else {
      passthrough_calls.fetch_add(1, std::memory_order_relaxed);
    }
  }
  void NoteUnmodelled(const char* why) {
    if (!unmodelled_warned.exchange(true, std::memory_order_relaxed)) {
      client::Log().info("a convolution goes to cuDNN unchanged: {} (said once)", why);
    }
  }

  cudnnStatus_t Execute(cudnnHandle_t cudnn, ConvOp op, const ParsedConvolution& parsed,
                        cudnnTensorDescriptor_t input, cudnnFilterDescriptor_t filter,
                        cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t output,
                        const void* alpha, const void* beta, const ConvOperands& operands,
                        void* workspace, size_t workspace_bytes) {
    // cuDNN scales float, half and bfloat16 data by float factors.
    const float a = *static_cast<const float*>(alpha);
    const float b = *static_cast<const float*>(beta);
    CudnnUndividedRunner runner(cudnn, op, input, filter, conv, output, alpha, beta, operands);
    return GuardStatus("convolution", [&] {
      const Status status = session->Execute(parsed.problem, parsed.batch, operands, workspace,
                                             workspace_bytes, a, b, &runner);
      if (runner.ran()) return runner.status();
      return ToCudnnStatus(status);
    });
  }

  // The workspace to ask the framework for, and the kernel declared to the session. cuDNN's
  // own answer stands when anything goes wrong here.
  void Declare(ConvOp op, cudnnTensorDescriptor_t input, cudnnFilterDescriptor_t filter,
               cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t output, size_t* size) {
    const size_t cudnn_answer = *size;
    const bool declared = Guard("workspace query", false, [&] {
      DeclareUnguarded(op, input, filter, conv, output, size);
      return true;
    });
    if (!declared) *size = cudnn_answer;
  }
  void DeclareUnguarded(ConvOp op, cudnnTensorDescriptor_t input, cudnnFilterDescriptor_t filter,
                        cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t output,
                        size_t* size) {
    if (session == nullptr) return;
    ParsedConvolution parsed;
    const char* why = "";
    if (!ParseConvolution(op, input, filter, conv, output, &parsed, &why)) return;
    if (session->workspace_mode() == WorkspaceMode::kPerKernel) {
      // Without a configured limit, the limit is the workspace of the first call.
      if (config.workspace_bytes == 0) return;
      *size = std::max<size_t>(*size, config.workspace_bytes);
    }
    session->Declare(parsed.problem, parsed.batch, *size);
  }
};

Handle::Handle(cudnnHandle_t cudnn, const ClientConfig& config)
    : cudnn_(cudnn), impl_(std::make_unique<Impl>()) {
  impl_->config = config;
  if (!config.enabled) {
    client::Log().info("disabled (UCUDNN_DISABLE); convolutions go to cuDNN unchanged");
    return;
  }
  if (cudnn == nullptr) {
    client::Log().warn("null cuDNN handle; convolutions go to cuDNN unchanged");
    return;
  }
  Result<std::unique_ptr<CudnnBackend>> backend = CudnnBackend::Wrap(cudnn);
  if (!backend.ok()) {
    client::Log().warn("cannot start ({}); convolutions go to cuDNN unchanged",
                       backend.status().ToString());
    return;
  }
  impl_->backend = std::move(*backend);
  SetCompiledPlanDirectory(config.compiled_plan_cache);
  const bool started = Guard("Handle", false, [&] {
    impl_->binder = std::make_unique<client::CudnnPlanBinder>(cudnn);
    client::SessionHooks hooks;
    hooks.binder = impl_->binder.get();
    hooks.contribution_backend = [device = impl_->backend->device_index()] {
      return MakeContributionBackend(device);
    };
    impl_->session = client::Session::Create(*impl_->backend, config, nullptr, std::move(hooks));
    return true;
  });
  if (!started) {
    client::Log().warn("cannot start; convolutions go to cuDNN unchanged");
    impl_->session.reset();
  }
}

Handle::~Handle() {
  // The caller may destroy its cuDNN handle next, and a new one may get its address.
  if (impl_ != nullptr && cudnn_ != nullptr) ForgetSharedEnginePlans(cudnn_);
}
Handle::Handle(Handle&&) noexcept = default;
Handle& Handle::operator=(Handle&&) noexcept = default;

cudnnStatus_t Handle::ConvolutionForward(const void* alpha, cudnnTensorDescriptor_t xDesc,
                                         const void* x, cudnnFilterDescriptor_t wDesc,
                                         const void* w, cudnnConvolutionDescriptor_t convDesc,
                                         cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                         size_t workSpaceSizeInBytes, const void* beta,
                                         cudnnTensorDescriptor_t yDesc, void* y) {
  ParsedConvolution parsed;
  const char* why = "library disabled";
  if (impl_ != nullptr && impl_->session != nullptr && alpha != nullptr && beta != nullptr &&
      client::ParseConvolution(ConvOp::kForward, xDesc, wDesc, convDesc, yDesc, &parsed, &why)) {
    ConvOperands operands;
    operands.x = x;
    operands.w = w;
    operands.y = y;
    return impl_->Execute(cudnn_, ConvOp::kForward, parsed, xDesc, wDesc, convDesc, yDesc, alpha,
                          beta, operands, workSpace, workSpaceSizeInBytes);
  }
  if (impl_ != nullptr) {
    impl_->CountPassthrough();
    if (impl_->session != nullptr) impl_->NoteUnmodelled(why);
  }
  return cudnnConvolutionForward(cudnn_, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                                 workSpaceSizeInBytes, beta, yDesc, y);
}

cudnnStatus_t Handle::ConvolutionBackwardData(const void* alpha, cudnnFilterDescriptor_t wDesc,
                                              const void* w, cudnnTensorDescriptor_t dyDesc,
                                              const void* dy, cudnnConvolutionDescriptor_t convDesc,
                                              cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                              size_t workSpaceSizeInBytes, const void* beta,
                                              cudnnTensorDescriptor_t dxDesc, void* dx) {
  ParsedConvolution parsed;
  const char* why = "library disabled";
  if (impl_ != nullptr && impl_->session != nullptr && alpha != nullptr && beta != nullptr &&
      client::ParseConvolution(ConvOp::kBackwardData, dxDesc, wDesc, convDesc, dyDesc, &parsed,
                               &why)) {
    ConvOperands operands;
    operands.dy = dy;
    operands.w = w;
    operands.dx = dx;
    return impl_->Execute(cudnn_, ConvOp::kBackwardData, parsed, dxDesc, wDesc, convDesc, dyDesc,
                          alpha, beta, operands, workSpace, workSpaceSizeInBytes);
  }
  if (impl_ != nullptr) {
    impl_->CountPassthrough();
    if (impl_->session != nullptr) impl_->NoteUnmodelled(why);
  }
  return cudnnConvolutionBackwardData(cudnn_, alpha, wDesc, w, dyDesc, dy, convDesc, algo,
                                      workSpace, workSpaceSizeInBytes, beta, dxDesc, dx);
}

cudnnStatus_t Handle::ConvolutionBackwardFilter(
    const void* alpha, cudnnTensorDescriptor_t xDesc, const void* x, cudnnTensorDescriptor_t dyDesc,
    const void* dy, cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    void* workSpace, size_t workSpaceSizeInBytes, const void* beta, cudnnFilterDescriptor_t dwDesc,
    void* dw) {
  ParsedConvolution parsed;
  const char* why = "library disabled";
  if (impl_ != nullptr && impl_->session != nullptr && alpha != nullptr && beta != nullptr &&
      client::ParseConvolution(ConvOp::kBackwardFilter, xDesc, dwDesc, convDesc, dyDesc, &parsed,
                               &why)) {
    ConvOperands operands;
    operands.x = x;
    operands.dy = dy;
    operands.dw = dw;
    return impl_->Execute(cudnn_, ConvOp::kBackwardFilter, parsed, xDesc, dwDesc, convDesc, dyDesc,
                          alpha, beta, operands, workSpace, workSpaceSizeInBytes);
  }
  if (impl_ != nullptr) {
    impl_->CountPassthrough();
    if (impl_->session != nullptr) impl_->NoteUnmodelled(why);
  }
  return cudnnConvolutionBackwardFilter(cudnn_, alpha, xDesc, x, dyDesc, dy, convDesc, algo,
                                        workSpace, workSpaceSizeInBytes, beta, dwDesc, dw);
}

cudnnStatus_t Handle::GetConvolutionForwardWorkspaceSize(cudnnTensorDescriptor_t xDesc,
                                                         cudnnFilterDescriptor_t wDesc,
                                                         cudnnConvolutionDescriptor_t convDesc,
                                                         cudnnTensorDescriptor_t yDesc,
                                                         cudnnConvolutionFwdAlgo_t algo,
                                                         size_t* sizeInBytes) {
  const cudnnStatus_t status = cudnnGetConvolutionForwardWorkspaceSize(
      cudnn_, xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes);
  if (status == CUDNN_STATUS_SUCCESS && impl_ != nullptr) {
    impl_->Declare(ConvOp::kForward, xDesc, wDesc, convDesc, yDesc, sizeInBytes);
  }
  return status;
}

cudnnStatus_t Handle::GetConvolutionBackwardDataWorkspaceSize(cudnnFilterDescriptor_t wDesc,
                                                              cudnnTensorDescriptor_t dyDesc,
                                                              cudnnConvolutionDescriptor_t convDesc,
                                                              cudnnTensorDescriptor_t dxDesc,
                                                              cudnnConvolutionBwdDataAlgo_t algo,
                                                              size_t* sizeInBytes) {
  const cudnnStatus_t status = cudnnGetConvolutionBackwardDataWorkspaceSize(
      cudnn_, wDesc, dyDesc, convDesc, dxDesc, algo, sizeInBytes);
  if (status == CUDNN_STATUS_SUCCESS && impl_ != nullptr) {
    impl_->Declare(ConvOp::kBackwardData, dxDesc, wDesc, convDesc, dyDesc, sizeInBytes);
  }
  return status;
}

cudnnStatus_t Handle::GetConvolutionBackwardFilterWorkspaceSize(
    cudnnTensorDescriptor_t xDesc, cudnnTensorDescriptor_t dyDesc,
    cudnnConvolutionDescriptor_t convDesc, cudnnFilterDescriptor_t dwDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* sizeInBytes) {
  const cudnnStatus_t status = cudnnGetConvolutionBackwardFilterWorkspaceSize(
      cudnn_, xDesc, dyDesc, convDesc, dwDesc, algo, sizeInBytes);
  if (status == CUDNN_STATUS_SUCCESS && impl_ != nullptr) {
    impl_->Declare(ConvOp::kBackwardFilter, xDesc, dwDesc, convDesc, dyDesc, sizeInBytes);
  }
  return status;
}

void Handle::Prepare() {
  if (impl_ == nullptr || impl_->session == nullptr) return;
  CurrentDeviceGuard device;
  Guard("Prepare", false, [&] {
    impl_->session->Prepare();
    return true;
  });
}

cudnnStatus_t Handle::Prepare(const ConvolutionKernel* kernels, size_t count) {
  return GuardStatus("Prepare", [&] { return PrepareKernels(kernels, count); });
}

cudnnStatus_t Handle::PrepareKernels(const ConvolutionKernel* kernels, size_t count) {
  if (kernels == nullptr && count > 0) return CUDNN_STATUS_BAD_PARAM;
  for (size_t i = 0; i < count; ++i) {
    const ConvolutionKernel& k = kernels[i];
    if (k.xDesc == nullptr || k.wDesc == nullptr || k.convDesc == nullptr || k.yDesc == nullptr) {
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  if (impl_ == nullptr || impl_->session == nullptr) return CUDNN_STATUS_SUCCESS;
  client::Session& session = *impl_->session;
  for (size_t i = 0; i < count; ++i) {
    const ConvolutionKernel& k = kernels[i];
    ParsedConvolution parsed;
    const char* why = "";
    if (!client::ParseConvolution(ToConvOp(k.op), k.xDesc, k.wDesc, k.convDesc, k.yDesc, &parsed,
                                  &why)) {
      impl_->NoteUnmodelled(why);  // its calls will go to cuDNN unchanged
      continue;
    }
    uint64_t limit = k.workspaceSizeInBytes;
    if (session.workspace_mode() == WorkspaceMode::kPerKernel) {
      if (limit == 0) limit = impl_->config.workspace_bytes;
      // No limit known yet: the kernel's first call gives it.
      if (limit == 0) continue;
    }
    session.Declare(parsed.problem, parsed.batch, limit, k.name != nullptr ? k.name : "");
  }
  CurrentDeviceGuard device;
  session.Prepare();
  return CUDNN_STATUS_SUCCESS;
}

bool Handle::WaitForPlans(int64_t timeout_ms) {
  if (impl_ == nullptr || impl_->session == nullptr) return true;
  CurrentDeviceGuard device;
  return Guard("WaitForPlans", false, [&] {
    return impl_->session->WaitForPlans(
        std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms)));
  });
}

cudnnStatus_t Handle::Contribute(int* problems_submitted) {
  if (problems_submitted != nullptr) *problems_submitted = 0;
  return GuardStatus("Contribute", [&] { return ContributeUnguarded(problems_submitted); });
}

cudnnStatus_t Handle::ContributeUnguarded(int* problems_submitted) {
  if (impl_ == nullptr || impl_->session == nullptr) return CUDNN_STATUS_SUCCESS;
  client::Session& session = *impl_->session;
  if (!session.contribution_enabled()) return CUDNN_STATUS_SUCCESS;
  CurrentDeviceGuard device;
  // The answers still on their way first: they say what is missing.
  (void)session.WaitForAnswers(std::chrono::steady_clock::now() +
                               std::chrono::milliseconds(impl_->config.deadline_ms) +
                               std::chrono::seconds(1));
  Result<int> submitted = session.Contribute();
  if (!submitted.ok()) return CUDNN_STATUS_EXECUTION_FAILED;
  if (problems_submitted != nullptr) *problems_submitted = *submitted;
  return CUDNN_STATUS_SUCCESS;
}

ClientStats Handle::Stats() const {
  if (impl_ == nullptr) return ClientStats{};
  ClientStats stats;
  if (impl_->session != nullptr) {
    stats = Guard("Stats", ClientStats{}, [&] { return impl_->session->Stats(); });
  }
  stats.passthrough_calls += impl_->passthrough_calls.load(std::memory_order_relaxed);
  return stats;
}

std::vector<KernelReport> Handle::Kernels() const {
  if (impl_ == nullptr || impl_->session == nullptr) return {};
  return Guard("Kernels", std::vector<KernelReport>{}, [&] { return impl_->session->Kernels(); });
}

const ClientConfig& Handle::config() const {
  static const ClientConfig kMovedFrom;
  return impl_ != nullptr ? impl_->config : kMovedFrom;
}

bool Handle::active() const { return impl_ != nullptr && impl_->session != nullptr; }

}  // namespace ucudnn
