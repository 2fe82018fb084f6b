// backend_factory.h for builds with the cuDNN backend: "cpu" and "cudnn".
#include <spdlog/spdlog.h>

#include <string>

#include "cuda_check.h"
#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/backends/cudnn_engines.h"

namespace ucudnn {
namespace {

// The number of GPUs, or why there are none usable (no driver, no device).
Result<int> CountGpus() {
  int count = 0;
  UCUDNN_GPU_CHECK(cudaGetDeviceCount(&count));
  return count;
}

}  // namespace

Result<std::unique_ptr<ConvBackend>> MakeBackend(std::string_view name, int device_index) {
  if (name == "cpu") return std::unique_ptr<ConvBackend>(std::make_unique<CpuBackend>());
  if (name != "cudnn") {
    return InvalidArgument("backend: unknown backend '" + std::string(name) +
                           "' (expected 'cpu' or 'cudnn')");
  }
  if (device_index < 0) {
    return InvalidArgument("device_index: must be >= 0, got " + std::to_string(device_index));
  }
  Result<int> count = CountGpus();
  if (!count.ok()) {
    return Unavailable("cudnn backend: no usable GPU: " + count.status().message());
  }
  if (*count == 0) return Unavailable("cudnn backend: no GPU visible (cudaGetDeviceCount = 0)");
  if (device_index >= *count) {
    return Unavailable("cudnn backend: GPU " + std::to_string(device_index) + " does not exist (" +
                       std::to_string(*count) + " visible)");
  }
  UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<CudnnBackend> backend,
                          CudnnBackend::Create(device_index));
  return std::unique_ptr<ConvBackend>(std::move(backend));
}

int GpuCount() {
  Result<int> count = CountGpus();
  if (!count.ok()) {
    spdlog::debug("GpuCount: {}", count.status().message());
    return 0;
  }
  return *count;
}

Result<std::string> GpuPciBusId(int device_index) {
  UCUDNN_RETURN_IF_ERROR(gpu::CheckDeviceIndex(device_index));
  char id[32] = {};  // "dddd:bb:dd.f" and its terminator fit in 13 bytes
  UCUDNN_GPU_CHECK(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof(id)), device_index));
  return std::string(id);
}

bool BuildHasCudnn() { return true; }

void UseCompiledPlanDirectory(const std::string& directory) { SetCompiledPlanDirectory(directory); }

void UsePlanCompiler(std::shared_ptr<PlanCompiler> compiler) {
  SetPlanCompiler(std::move(compiler));
}

}  // namespace ucudnn
