// The job's GPU as the cuDNN front ends (the descriptor handle, the shape-level API) share it:
// keeping the caller's current device, and the backend contribution measures on.
#pragma once

#include <memory>

#include "ucudnn/core/backend.h"

namespace ucudnn::client {

// Restores the calling thread's current device on scope exit: contribution makes a backend of its
// own on the job's device, which sets that device current, and the framework's thread must find
// its device as it left it.
class CurrentDeviceGuard {
 public:
  CurrentDeviceGuard();
  ~CurrentDeviceGuard();
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  int device_ = 0;
  bool saved_ = false;
};

// Contribution's backend: a cuDNN handle and a stream of the library's own on the job's device
// (never the caller's handle or stream), made after the device went idle, so that the benchmarks
// measure the GPU alone and not the training step's kernels beside them.
Result<std::unique_ptr<ConvBackend>> MakeContributionBackend(int device);

}  // namespace ucudnn::client
