// backend_factory.h for builds without the cuDNN backend: only "cpu".
#include <cstdio>
#include <string>

#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/backends/cpu_backend.h"

namespace ucudnn {

Result<std::unique_ptr<ConvBackend>> MakeBackend(std::string_view name, int /*device_index*/) {
  // The CPU backend has one device; device_index selects a GPU and does not apply to it.
  if (name == "cpu") return std::unique_ptr<ConvBackend>(std::make_unique<CpuBackend>());
  if (name == "cudnn") return Unavailable("cudnn backend: this build has no cuDNN backend");
  return InvalidArgument("backend: unknown backend '" + std::string(name) +
                         "' (expected 'cpu' or 'cudnn')");
}

int GpuCount() { return 0; }

Result<std::string> GpuPciBusId(int /*device_index*/) {
  return Unavailable("GPU PCI bus id: this build has no cuDNN backend");
}

bool BuildHasCudnn() { return false; }

void UseCompiledPlanDirectory(const std::string& /*directory*/) {}

void UsePlanCompiler(std::shared_ptr<PlanCompiler> /*compiler*/) {}

int RunPlanCompileHelper(int /*gpu*/, const std::string& /*directory*/, std::FILE* /*in*/,
                         std::FILE* /*out*/) {
  std::fputs("compile helper: this build has no cuDNN backend\n", stderr);
  return 1;
}

}  // namespace ucudnn
