// Builds without the cuDNN backend: the example runs on the CPU backend only.
#include "train_step_engine.h"

namespace ucudnn::example {

Result<std::unique_ptr<StepEngine>> MakeCudnnEngine(const EngineOptions&) {
  return Unavailable(
      "this build has no cuDNN backend (UCUDNN_ENABLE_CUDNN=OFF); use --backend cpu");
}

}  // namespace ucudnn::example
