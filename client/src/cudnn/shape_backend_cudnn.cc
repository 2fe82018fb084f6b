// shape_backend.h for builds with the cuDNN backend: "cpu" and "cudnn".
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "cudnn/descriptors.h"
#include "cudnn/device.h"
#include "log.h"
#include "shape_backend.h"
#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/backends/cudnn_engines.h"

namespace ucudnn::client {
namespace {

// A cuDNN handle on the device current at creation, the library's own or the caller's (a
// framework's: then the library adds no handle to the device), bound at each call to the caller's
// stream (PyTorch's current stream), so that its work is ordered with the framework's as if the
// framework had issued it.
class CudnnShapeBackend final : public ShapeBackend {
 public:
  // `borrowed`: the caller's handle; null: one of the library's own.
  static Result<std::unique_ptr<ShapeBackend>> Create(cudnnHandle_t borrowed) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      return Unavailable("backend 'cudnn': no GPU visible");
    }
    std::unique_ptr<CudnnShapeBackend> shape(new CudnnShapeBackend());
    if (borrowed != nullptr) {
      // A handle of another cuDNN instance, or none at all, fails here rather than at a call.
      cudaStream_t stream = nullptr;
      const cudnnStatus_t read = cudnnGetStream(borrowed, &stream);
      if (read != CUDNN_STATUS_SUCCESS) {
        return InvalidArgument(std::string("cudnn_handle: cudnnGetStream: ") +
                               cudnnGetErrorString(read));
      }
      shape->handle_ = borrowed;
      shape->owns_handle_ = false;
    } else {
      const cudnnStatus_t created = cudnnCreate(&shape->handle_);
      if (created != CUDNN_STATUS_SUCCESS) {
        shape->handle_ = nullptr;
        return Unavailable(std::string("backend 'cudnn': cudnnCreate: ") +
                           cudnnGetErrorString(created));
      }
    }
    UCUDNN_ASSIGN_OR_RETURN(shape->backend_, CudnnBackend::Wrap(shape->handle_));
    shape->binder_ = std::make_unique<CudnnPlanBinder>(shape->handle_);
    return std::unique_ptr<ShapeBackend>(std::move(shape));
  }

  ~CudnnShapeBackend() override {
    backend_.reset();
    if (handle_ != nullptr) {
      ForgetSharedEnginePlans(handle_);
      if (!owns_handle_) return;
      const cudnnStatus_t destroyed = cudnnDestroy(handle_);
      if (destroyed != CUDNN_STATUS_SUCCESS) {
        Log().warn("cudnnDestroy: {}", cudnnGetErrorString(destroyed));
      }
    }
  }

  ConvBackend& backend() override { return *backend_; }
  SessionHooks hooks() override {
    SessionHooks hooks;
    hooks.binder = binder_.get();
    hooks.contribution_backend = [device = backend_->device_index()] {
      return MakeContributionBackend(device);
    };
    return hooks;
  }
  Status UseStream(void* stream) override {
    // A borrowed handle's owner sets its own stream between our calls.
    if (owns_handle_ && stream == stream_) return Status::Ok();
    const cudnnStatus_t set = cudnnSetStream(handle_, static_cast<cudaStream_t>(stream));
    if (set != CUDNN_STATUS_SUCCESS) {
      return Internal(std::string("cudnnSetStream: ") + cudnnGetErrorString(set));
    }
    stream_ = stream;
    return Status::Ok();
  }
  void UseCompiledPlans(const std::string& directory) override {
    SetCompiledPlanDirectory(directory);
  }
  void AtQuietPoint(const std::function<void()>& body) override {
    CurrentDeviceGuard device;
    body();
  }

 private:
  CudnnShapeBackend() = default;

  cudnnHandle_t handle_ = nullptr;
  bool owns_handle_ = true;
  void* stream_ = nullptr;  // the legacy default stream until a call binds another
  std::unique_ptr<CudnnBackend> backend_;
  // Destroyed before the backend and handle; the session (destroyed first, by the context) holds
  // the runners it made.
  std::unique_ptr<CudnnPlanBinder> binder_;
};

}  // namespace

Result<std::unique_ptr<ShapeBackend>> MakeShapeBackend(std::string_view name) {
  if (name == "cpu") return MakeCpuShapeBackend();
  if (name == "cudnn") return CudnnShapeBackend::Create(nullptr);
  return UnknownShapeBackend(name);
}

Result<std::unique_ptr<ShapeBackend>> MakeBorrowedCudnnShapeBackend(void* cudnn_handle) {
  return CudnnShapeBackend::Create(static_cast<cudnnHandle_t>(cudnn_handle));
}

}  // namespace ucudnn::client
