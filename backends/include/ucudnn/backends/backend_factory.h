// Creating backends by name. Which backends exist is decided in CMake (UCUDNN_ENABLE_CUDNN): this
// header is the same either way, and asking for "cudnn" in a build without it is an error value.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "ucudnn/backends/plan_compiler.h"
#include "ucudnn/core/backend.h"

namespace ucudnn {

// "cpu", or "cudnn" on GPU `device_index`. kUnavailable when the build has no cuDNN backend or
// the machine has no such GPU.
Result<std::unique_ptr<ConvBackend>> MakeBackend(std::string_view name, int device_index = 0);
// GPUs visible to the cuDNN backend; 0 without cuDNN in the build or without a GPU.
int GpuCount();
// The PCI bus id of visible GPU `device_index` ("0000:3B:00.0"), which names the same GPU to NVML
// whatever CUDA_VISIBLE_DEVICES renumbers; kUnavailable without cuDNN in the build or without it.
Result<std::string> GpuPciBusId(int device_index);
// Whether this build has the cuDNN backend.
bool BuildHasCudnn();
// Where the cuDNN backend keeps the execution plans of runtime-compiled engines it builds, for
// this and later processes on the machine (SetCompiledPlanDirectory, cudnn_engines.h); empty for
// nowhere. Nothing in a build without cuDNN.
void UseCompiledPlanDirectory(const std::string& directory);
// Who builds the runtime-compiled plans that the cuDNN backend's Prepare() foresees and its
// benchmark then needs (SetPlanCompiler, cudnn_engines.h); null for the process itself. Nothing
// in a build without cuDNN.
void UsePlanCompiler(std::shared_ptr<PlanCompiler> compiler);

}  // namespace ucudnn
