#include "cudnn/device.h"

#include <cuda_runtime_api.h>

#include <string>

#include "log.h"
#include "ucudnn/backends/cudnn_backend.h"

namespace ucudnn::client {

CurrentDeviceGuard::CurrentDeviceGuard() { saved_ = cudaGetDevice(&device_) == cudaSuccess; }

CurrentDeviceGuard::~CurrentDeviceGuard() {
  int now = -1;
  if (saved_ && cudaGetDevice(&now) == cudaSuccess && now != device_) {
    const cudaError_t error = cudaSetDevice(device_);
    if (error != cudaSuccess) {
      client::Log().error("cannot make device {} current again: {}", device_,
                          cudaGetErrorString(error));
    }
  }
}

Result<std::unique_ptr<ConvBackend>> MakeContributionBackend(int device) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) error = cudaDeviceSynchronize();
  if (error != cudaSuccess) {
    return Unavailable(std::string("waiting for the device to be idle: ") +
                       cudaGetErrorString(error));
  }
  UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<CudnnBackend> backend, CudnnBackend::Create(device));
  return std::unique_ptr<ConvBackend>(std::move(backend));
}

}  // namespace ucudnn::client
