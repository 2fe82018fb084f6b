// What the shape-level C API (ucudnn_shape.h) needs of a backend beyond ConvBackend: the hooks its
// session takes, and binding the caller's stream before a call. Made by name; which names exist
// is decided in CMake (shape_backend_cpu_only.cc, or cudnn/shape_backend_cudnn.cc), as for
// MakeBackend().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "session.h"
#include "ucudnn/core/backend.h"

namespace ucudnn::client {

class ShapeBackend {
 public:
  virtual ~ShapeBackend() = default;
  virtual ConvBackend& backend() = 0;
  // Hooks for the session; what they point to lives as long as this object.
  virtual SessionHooks hooks() = 0;
  // Issues the next calls on `stream` (a cudaStream_t; ignored where there are no streams).
  virtual Status UseStream(void* stream) = 0;
  // Keeps the execution plans it compiles in `directory` (ClientConfig::compiled_plan_cache;
  // empty: none). Backends that compile nothing ignore it.
  virtual void UseCompiledPlans(const std::string& /*directory*/) {}
  // Runs `body` at a quiet point (Prepare, contribution), keeping the caller's current device.
  virtual void AtQuietPoint(const std::function<void()>& body) { body(); }
};

// "cpu", or "cudnn" on the calling thread's current GPU.
Result<std::unique_ptr<ShapeBackend>> MakeShapeBackend(std::string_view name);
// "cudnn" on the caller's cudnnHandle_t (borrowed: never destroyed here; its stream set at every
// call), on the calling thread's current GPU.
Result<std::unique_ptr<ShapeBackend>> MakeBorrowedCudnnShapeBackend(void* cudnn_handle);

// Shared by the factories: the CPU backend, and the error for a name no build knows.
std::unique_ptr<ShapeBackend> MakeCpuShapeBackend();
Status UnknownShapeBackend(std::string_view name);

}  // namespace ucudnn::client
