// The training-step example on the CPU backend, through the library's backend-generic session
// (the drop-in handle is cuDNN's): small batches, so that the example runs on any machine.
#include <algorithm>
#include <chrono>
#include <map>

#include "session.h"
#include "train_step_engine.h"
#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/random_fill.h"

namespace ucudnn::example {
namespace {

class CpuEngine final : public StepEngine {
 public:
  explicit CpuEngine(const EngineOptions& options) : options_(options) {
    for (const Kernel& k : options_.step) {
      const size_t n = static_cast<size_t>(k.mini_batch);
      x_elements_ = std::max(x_elements_, n * k.problem.input_elements_per_sample());
      y_elements_ = std::max(y_elements_, n * k.problem.output_elements_per_sample());
      w_elements_ = std::max(w_elements_, static_cast<size_t>(k.problem.filter_elements()));
    }
    x_.resize(x_elements_);
    y_.resize(y_elements_);
    w_.resize(w_elements_);
    dw_.resize(w_elements_);
    GenerateRandom(x_.data(), x_.size(), DataType::kFloat32, 1);
    GenerateRandom(y_.data(), y_.size(), DataType::kFloat32, 2);
    GenerateRandom(w_.data(), w_.size(), DataType::kFloat32, 3);
  }

  const DeviceFingerprint& fingerprint() const override { return backend_.fingerprint(); }

  Result<StepTiming> TimeWithoutLibrary(uint64_t workspace_limit) override {
    std::vector<char> workspace(workspace_limit);
    std::vector<int> algos;
    for (const Kernel& k : options_.step) {
      const ConvOperands operands = Operands(k.problem.op);
      client::BackendUndividedRunner runner(backend_, k.problem, k.mini_batch, operands, 1.0f,
                                            0.0f);
      UCUDNN_ASSIGN_OR_RETURN(const int algo, runner.ChooseAlgorithm(workspace_limit));
      algos.push_back(algo);
    }
    auto run = [&](size_t i) {
      const Kernel& k = options_.step[i];
      return backend_.Run(k.problem, k.mini_batch, algos[i], Operands(k.problem.op),
                          workspace.data(), workspace.size(), 1.0f, 0.0f);
    };
    UCUDNN_ASSIGN_OR_RETURN(StepTiming timing, TimeSteps([&]() -> Status {
                              for (size_t i = 0; i < options_.step.size(); ++i) {
                                UCUDNN_RETURN_IF_ERROR(run(i));
                              }
                              return Status::Ok();
                            }));
    UCUDNN_RETURN_IF_ERROR(TimeKernels(run, &timing.kernel_ms));
    return timing;
  }

  Result<LibraryRun> TimeWithLibrary(const ClientConfig& config, int64_t plan_wait_ms) override {
    auto session = client::Session::Create(backend_, config);
    const bool per_kernel = session->workspace_mode() == WorkspaceMode::kPerKernel;
    const uint64_t passed = per_kernel ? config.workspace_bytes : 0;
    std::vector<char> workspace(passed);
    for (const Kernel& k : UniqueKernels(options_.step)) {
      session->Declare(k.problem, k.mini_batch, passed, k.name);
    }
    session->Prepare();
    session->WaitForPlans(std::chrono::milliseconds(plan_wait_ms));
    auto step = [&]() -> Status {
      for (const Kernel& k : options_.step) {
        UCUDNN_RETURN_IF_ERROR(session->Execute(k.problem, k.mini_batch, Operands(k.problem.op),
                                                workspace.data(), workspace.size(), 1.0f, 0.0f));
      }
      return Status::Ok();
    };
    for (int i = 0; i < options_.warmup_steps; ++i) UCUDNN_RETURN_IF_ERROR(step());
    const ClientStats before = session->Stats();
    LibraryRun run;
    UCUDNN_ASSIGN_OR_RETURN(run.timing, TimeSteps(step, /*warmup=*/false));
    run.stats = session->Stats();
    run.stats.planned_calls -= before.planned_calls;
    run.stats.fallback_calls -= before.fallback_calls;
    run.stats.rejected_plan_calls -= before.rejected_plan_calls;
    run.kernels = session->Kernels();
    UCUDNN_RETURN_IF_ERROR(TimeKernels(
        [&](size_t i) {
          const Kernel& k = options_.step[i];
          return session->Execute(k.problem, k.mini_batch, Operands(k.problem.op), workspace.data(),
                                  workspace.size(), 1.0f, 0.0f);
        },
        &run.timing.kernel_ms));
    return run;
  }

 private:
  ConvOperands Operands(ConvOp op) {
    ConvOperands o;
    switch (op) {
      case ConvOp::kForward:
        o.x = x_.data(), o.w = w_.data(), o.y = y_.data();
        break;
      case ConvOp::kBackwardData:
        o.dy = y_.data(), o.w = w_.data(), o.dx = x_.data();
        break;
      case ConvOp::kBackwardFilter:
        o.x = x_.data(), o.dy = y_.data(), o.dw = dw_.data();
        break;
    }
    return o;
  }

  // Each distinct kernel of the step alone (`call` runs step kernel i): mean of a few calls.
  template <typename Call>
  Status TimeKernels(Call call, std::map<std::string, double>* out) {
    if (!options_.per_kernel) return Status::Ok();
    constexpr int kCalls = 3;
    for (size_t i = 0; i < options_.step.size(); ++i) {
      const Kernel& k = options_.step[i];
      const std::string key = KernelKey(k.problem, k.mini_batch);
      if (out->count(key) > 0) continue;
      const auto start = std::chrono::steady_clock::now();
      for (int c = 0; c < kCalls; ++c) UCUDNN_RETURN_IF_ERROR(call(i));
      const auto end = std::chrono::steady_clock::now();
      (*out)[key] = std::chrono::duration<double, std::milli>(end - start).count() / kCalls;
    }
    return Status::Ok();
  }

  template <typename Step>
  Result<StepTiming> TimeSteps(Step step, bool warmup = true) {
    if (warmup) {
      for (int i = 0; i < options_.warmup_steps; ++i) UCUDNN_RETURN_IF_ERROR(step());
    }
    StepTiming timing;
    for (int i = 0; i < options_.timed_steps; ++i) {
      const auto start = std::chrono::steady_clock::now();
      UCUDNN_RETURN_IF_ERROR(step());
      const auto end = std::chrono::steady_clock::now();
      timing.steps_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
    timing.ms_per_step = Median(timing.steps_ms);
    return timing;
  }

  EngineOptions options_;
  CpuBackend backend_;
  size_t x_elements_ = 0, y_elements_ = 0, w_elements_ = 0;
  std::vector<float> x_, y_, w_, dw_;
};

}  // namespace

Result<std::unique_ptr<StepEngine>> MakeCpuEngine(const EngineOptions& options) {
  for (const Kernel& k : options.step) {
    if (k.problem.data_type != DataType::kFloat32 || k.problem.layout != Layout::kNCHW) {
      return InvalidArgument("the CPU backend runs fp32 NCHW only");
    }
  }
  return std::unique_ptr<StepEngine>(new CpuEngine(options));
}

}  // namespace ucudnn::example
