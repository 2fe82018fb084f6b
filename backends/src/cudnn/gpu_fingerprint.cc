// GPU fingerprints from the CUDA runtime and the cuDNN library actually loaded.
#include <algorithm>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "ucudnn/backends/cudnn_backend.h"

namespace ucudnn {

Result<DeviceFingerprint> GpuFingerprint(int device_index) {
  UCUDNN_RETURN_IF_ERROR(gpu::CheckDeviceIndex(device_index));
  cudaDeviceProp props{};
  UCUDNN_GPU_CHECK(cudaGetDeviceProperties(&props, device_index));
  DeviceFingerprint f;
  f.backend = "cudnn";
  f.name = props.name;
  UCUDNN_GPU_CHECK(
      cudaDeviceGetAttribute(&f.cc_major, cudaDevAttrComputeCapabilityMajor, device_index));
  UCUDNN_GPU_CHECK(
      cudaDeviceGetAttribute(&f.cc_minor, cudaDevAttrComputeCapabilityMinor, device_index));
  UCUDNN_GPU_CHECK(
      cudaDeviceGetAttribute(&f.sm_count, cudaDevAttrMultiProcessorCount, device_index));
  f.memory_bytes = props.totalGlobalMem;
  // The library loaded at run time, which may differ from the headers this was built with
  // (built against 9.19, run on a machine with 9.14): timings belong to the run-time version.
  f.cudnn_version = static_cast<int>(cudnnGetVersion());
  UCUDNN_GPU_CHECK(cudaRuntimeGetVersion(&f.cuda_runtime_version));
  UCUDNN_RETURN_IF_ERROR(
      Validate(f).WithContext("fingerprint of GPU " + std::to_string(device_index)));
  return f;
}

Result<std::vector<GpuDevice>> ListGpus() {
  int count = 0;
  UCUDNN_GPU_CHECK(cudaGetDeviceCount(&count));
  std::vector<GpuDevice> gpus;
  for (int i = 0; i < count; ++i) {
    UCUDNN_ASSIGN_OR_RETURN(DeviceFingerprint f, GpuFingerprint(i));
    gpus.push_back({i, std::move(f)});
  }
  return gpus;
}

std::vector<DeviceFingerprint> DistinctFingerprints(const std::vector<GpuDevice>& gpus) {
  std::vector<DeviceFingerprint> distinct;
  for (const GpuDevice& gpu : gpus) {
    if (std::find(distinct.begin(), distinct.end(), gpu.fingerprint) == distinct.end()) {
      distinct.push_back(gpu.fingerprint);
    }
  }
  return distinct;
}

}  // namespace ucudnn
