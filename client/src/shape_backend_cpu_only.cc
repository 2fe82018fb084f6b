// shape_backend.h for builds without the cuDNN backend: only "cpu".
#include "shape_backend.h"

namespace ucudnn::client {

Result<std::unique_ptr<ShapeBackend>> MakeShapeBackend(std::string_view name) {
  if (name == "cpu") return MakeCpuShapeBackend();
  if (name == "cudnn") return Unavailable("backend: this build has no cuDNN backend");
  return UnknownShapeBackend(name);
}

Result<std::unique_ptr<ShapeBackend>> MakeBorrowedCudnnShapeBackend(void* /*cudnn_handle*/) {
  return Unavailable("backend: this build has no cuDNN backend");
}

}  // namespace ucudnn::client
