#include "shape_backend.h"

#include <string>

#include "ucudnn/backends/cpu_backend.h"

namespace ucudnn::client {
namespace {

class CpuShapeBackend final : public ShapeBackend {
 public:
  ConvBackend& backend() override { return backend_; }
  SessionHooks hooks() override {
    SessionHooks hooks;
    // Contribution measures on a CPU backend of its own, as the worker would.
    hooks.contribution_backend = []() -> Result<std::unique_ptr<ConvBackend>> {
      return std::unique_ptr<ConvBackend>(std::make_unique<CpuBackend>());
    };
    return hooks;
  }
  Status UseStream(void* /*stream*/) override { return Status::Ok(); }

 private:
  CpuBackend backend_;
};

}  // namespace

std::unique_ptr<ShapeBackend> MakeCpuShapeBackend() { return std::make_unique<CpuShapeBackend>(); }

Status UnknownShapeBackend(std::string_view name) {
  return InvalidArgument("backend: unknown backend '" + std::string(name) +
                         "' (expected 'cpu' or 'cudnn')");
}

}  // namespace ucudnn::client
