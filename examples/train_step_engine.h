// The training-step example's backends: each runs one step (every kernel of the network once)
// without the library and with it, and times it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ucudnn/client/config.h"
#include "ucudnn/client/stats.h"
#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn::example {

struct StepTiming {
  double ms_per_step = 0;  // median over the timed steps
  std::vector<double> steps_ms;
  // With EngineOptions::per_kernel: each distinct kernel timed alone (mean of a few calls), by
  // KernelKey().
  std::map<std::string, double> kernel_ms;
};

// "canonical key@mini-batch".
std::string KernelKey(const ConvProblem& problem, int64_t mini_batch);

struct LibraryRun {
  StepTiming timing;
  ClientStats stats;  // over the timed steps only
  std::vector<KernelReport> kernels;
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual const DeviceFingerprint& fingerprint() const = 0;
  // Plain backend calls, each kernel undivided with the backend's own best algorithm within
  // `workspace_limit` bytes (the workspace a framework without the library would pass).
  virtual Result<StepTiming> TimeWithoutLibrary(uint64_t workspace_limit) = 0;
  // Through the library configured by `config`: every kernel is declared first, the plans are
  // waited for (at most `plan_wait_ms`), then the steps are timed. Per-kernel mode passes
  // config.workspace_bytes to each call; the total modes pass none.
  virtual Result<LibraryRun> TimeWithLibrary(const ClientConfig& config, int64_t plan_wait_ms) = 0;
};

struct EngineOptions {
  std::vector<Kernel> step;  // the kernels of one step, in execution order
  int warmup_steps = 1;
  int timed_steps = 3;
  bool find_baseline = false;  // cuDNN: cudnnFind (measured) instead of the heuristics
  bool per_kernel = false;     // also time each distinct kernel alone
};

// The cuDNN engine through the drop-in ucudnn::Handle; kUnavailable in builds without cuDNN or
// on machines without a GPU (train_step_cudnn.cc or train_step_no_cudnn.cc, chosen in CMake).
Result<std::unique_ptr<StepEngine>> MakeCudnnEngine(const EngineOptions& options);
// The CPU engine through the library's backend-generic session.
Result<std::unique_ptr<StepEngine>> MakeCpuEngine(const EngineOptions& options);

// The median of `values` (which it sorts).
double Median(std::vector<double> values);

}  // namespace ucudnn::example
