// The shape-level C API (ucudnn_shape.h): a Session over a ShapeBackend. A kernel without a usable
// plan is not run here: the session's undivided runner is replaced by one that only records that
// it was asked (DecliningRunner), and the caller is told to run its own convolution. Kernel
// handles (ucudnnShapeGetKernel) hold the session's entry of their kernel, so that a call through
// one (ucudnnShapeKernelRun) reads no shape and looks nothing up.
#include "ucudnn/client/ucudnn_shape.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "c_stats.h"
#include "guard_core.h"
#include "log.h"
#include "session.h"
#include "shape_backend.h"
#include "shape_problem.h"
#include "ucudnn/client/config.h"
#include "ucudnn/core/engine_config.h"

struct ucudnnShapeKernelImpl {
  ucudnnShapeContextImpl* context = nullptr;
  // The session's entry; null when the context has no session (disabled) or the session's table
  // is full: every call then declines.
  ucudnn::client::KernelState* state = nullptr;
};

struct ucudnnShapeContextImpl {
  ucudnn::ClientConfig config;
  // Destroyed after the session (declared first), which uses it.
  std::unique_ptr<ucudnn::client::ShapeBackend> backend;
  std::unique_ptr<ucudnn::client::Session> session;
  // The backend runs one call at a time (a cuDNN handle is not thread-safe, and its stream is
  // bound per call); the framework may call from its autograd threads too. Also guards `kernels`.
  std::mutex call_mutex;
  // One handle per kernel of the session (at most its table's size), and the one of every kernel
  // without an entry.
  std::unordered_map<const ucudnn::client::KernelState*, std::unique_ptr<ucudnnShapeKernelImpl>>
      kernels;
  ucudnnShapeKernelImpl untracked{this, nullptr};
};

namespace {

using ucudnn::Status;
using ucudnn::StatusCode;
using ucudnn::client::Guard;

// Per-kernel mode without UCUDNN_WORKSPACE_BYTES: the limit kernels are planned for. The caller
// of this API allocates what the plan asks (from its own allocator) rather than offering a
// workspace, so it needs a default; 64 MiB is the cap the project's benchmarks use.
constexpr uint64_t kDefaultShapeLimit = uint64_t{64} << 20;

thread_local std::string last_error;

ucudnnShapeStatus_t Fail(ucudnnShapeStatus_t code, std::string message) {
  last_error = std::move(message);
  return code;
}

ucudnnShapeStatus_t FromStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return UCUDNN_SHAPE_SUCCESS;
    case StatusCode::kInvalidArgument:
      return Fail(UCUDNN_SHAPE_BAD_PARAM, status.message());
    case StatusCode::kUnavailable:
      return Fail(UCUDNN_SHAPE_UNAVAILABLE, status.message());
    case StatusCode::kResourceExhausted:
      return UCUDNN_SHAPE_ALLOC_FAILED;
    default:
      return UCUDNN_SHAPE_EXECUTION_FAILED;
  }
}

// The library's exception boundary for this API.
template <typename Body>
ucudnnShapeStatus_t Guarded(const char* function, Body&& body) noexcept {
  return Guard(function, UCUDNN_SHAPE_INTERNAL_ERROR, body);
}

// Stands in for the undivided run: the caller runs its own convolution instead. Its algorithm
// choice is a constant, so the session caches it and the no-plan path allocates nothing.
class DecliningRunner final : public ucudnn::client::UndividedRunner {
 public:
  ucudnn::Result<int> ChooseAlgorithm(size_t /*workspace_bytes*/) override { return 0; }
  Status Run(int /*algo*/, void* /*workspace*/, size_t /*workspace_bytes*/) override {
    declined_ = true;
    return Status::Ok();
  }
  void NoteFramework() override { framework_ = true; }
  bool declined() const { return declined_; }
  bool framework() const { return framework_; }

 private:
  bool declined_ = false;
  bool framework_ = false;
};

// The per-kernel limit a declaration asks its plan for.
uint64_t LimitOf(const ucudnnShapeContextImpl& context, size_t limit) {
  if (limit != 0) return limit;
  return context.config.workspace_bytes != 0 ? context.config.workspace_bytes : kDefaultShapeLimit;
}

ucudnn::Result<ucudnn::client::ShapeKernel> ReadShape(const ucudnnConvShape_t* shape) {
  if (shape == nullptr) return ucudnn::InvalidArgument("shape: must not be NULL");
  return ucudnn::client::ToShapeKernel(*shape);
}

// `count` shapes; the error names the one that is wrong ("shapes[2]: ...").
ucudnn::Result<std::vector<ucudnn::client::ShapeKernel>> ReadShapes(const ucudnnConvShape_t* shapes,
                                                                    size_t count) {
  std::vector<ucudnn::client::ShapeKernel> kernels;
  kernels.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    auto kernel = ReadShape(&shapes[i]);
    if (!kernel.ok()) return kernel.status().WithContext("shapes[" + std::to_string(i) + "]");
    kernels.push_back(*kernel);
  }
  return kernels;
}

// The checks every convolution entry makes of its pointers.
ucudnnShapeStatus_t CheckOperands(const void* a, const void* b, const void* out,
                                  const void* workspace, size_t workspace_bytes) {
  if (a == nullptr || b == nullptr || out == nullptr) {
    return Fail(UCUDNN_SHAPE_BAD_PARAM, "operands: a, b and out must not be NULL");
  }
  if (workspace == nullptr && workspace_bytes > 0) {
    return Fail(UCUDNN_SHAPE_BAD_PARAM, "workspace: NULL with workspace_bytes > 0");
  }
  return UCUDNN_SHAPE_SUCCESS;
}

ucudnn::ConvOperands OperandsOf(ucudnn::ConvOp op, const void* a, const void* b, void* out) {
  ucudnn::ConvOperands operands;
  switch (op) {
    case ucudnn::ConvOp::kForward:
      operands.x = a;
      operands.w = b;
      operands.y = out;
      break;
    case ucudnn::ConvOp::kBackwardData:
      operands.dy = a;
      operands.w = b;
      operands.dx = out;
      break;
    case ucudnn::ConvOp::kBackwardFilter:
      operands.x = a;
      operands.dy = b;
      operands.dw = out;
      break;
  }
  return operands;
}

// With the context's call mutex held: binds `stream`, then `execute(runner)` runs the kernel
// through the session with a DecliningRunner for its undivided calls.
template <typename Execute>
ucudnnShapeStatus_t RunLocked(const char* function, ucudnnShapeContextImpl& context, void* stream,
                              Execute&& execute) {
  if (Status bound = context.backend->UseStream(stream); !bound.ok()) {
    ucudnn::client::Log().error("{}: {}", function, bound.ToString());
    return UCUDNN_SHAPE_EXECUTION_FAILED;
  }
  DecliningRunner own_convolution;
  const Status status = execute(own_convolution);
  if (!status.ok()) {
    ucudnn::client::Log().error("{}: {}", function, status.ToString());
    return FromStatus(status);
  }
  if (!own_convolution.declined()) return UCUDNN_SHAPE_SUCCESS;
  return own_convolution.framework() ? UCUDNN_SHAPE_FRAMEWORK : UCUDNN_SHAPE_NO_PLAN;
}

// The answer to a workspace query of PlannedWorkspace()/PlanWorkspace()'s `needed`.
ucudnnShapeStatus_t WorkspaceAnswer(int64_t needed, size_t* bytes) {
  if (needed == ucudnn::client::Session::kFrameworkPlan) return UCUDNN_SHAPE_FRAMEWORK;
  if (needed < 0) return UCUDNN_SHAPE_NO_PLAN;
  *bytes = static_cast<size_t>(needed);
  return UCUDNN_SHAPE_SUCCESS;
}

// ucudnnShapeCreate and ucudnnShapeCreateOnHandle: the configuration (the UCUDNN_* environment,
// then `options`), the backend `make_backend` makes, and the session over it.
template <typename MakeBackend>
ucudnnShapeStatus_t CreateContext(ucudnnShapeContext_t* context, const char* options,
                                  MakeBackend&& make_backend) {
  auto made = std::make_unique<ucudnnShapeContextImpl>();
  made->config = ucudnn::ClientConfig::FromEnvironment();
  if (options != nullptr && options[0] != '\0') made->config = made->config.WithOptions(options);
  // A framework identity that cannot be sent is refused here rather than planned without.
  if (!made->config.framework.empty()) {
    if (Status valid = ucudnn::CheckFrameworkIdentity("UCUDNN_FRAMEWORK", made->config.framework);
        !valid.ok()) {
      return FromStatus(valid);
    }
  }
  ucudnn::Result<std::unique_ptr<ucudnn::client::ShapeBackend>> shape_backend = make_backend();
  if (!shape_backend.ok()) return FromStatus(shape_backend.status());
  made->backend = std::move(*shape_backend);
  if (made->config.enabled) {
    made->backend->UseCompiledPlans(made->config.compiled_plan_cache);
    ucudnn::client::SessionHooks hooks = made->backend->hooks();
    hooks.kernels_by_limit = true;  // every call names its kernel's limit
    made->session = ucudnn::client::Session::Create(made->backend->backend(), made->config, nullptr,
                                                    std::move(hooks));
  } else {
    ucudnn::client::Log().info(
        "disabled (UCUDNN_DISABLE); every kernel runs the caller's own "
        "convolution");
  }
  *context = made.release();
  return UCUDNN_SHAPE_SUCCESS;
}

}  // namespace

extern "C" {

ucudnnShapeStatus_t ucudnnShapeCreate(ucudnnShapeContext_t* context, const char* backend,
                                      const char* options) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  *context = nullptr;
  if (backend == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "backend: must not be NULL");
  return Guarded("ucudnnShapeCreate", [&] {
    return CreateContext(context, options,
                         [&] { return ucudnn::client::MakeShapeBackend(backend); });
  });
}

ucudnnShapeStatus_t ucudnnShapeCreateOnHandle(ucudnnShapeContext_t* context, void* cudnn_handle,
                                              const char* options) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  *context = nullptr;
  if (cudnn_handle == nullptr) {
    return Fail(UCUDNN_SHAPE_BAD_PARAM, "cudnn_handle: must not be NULL");
  }
  return Guarded("ucudnnShapeCreateOnHandle", [&] {
    return CreateContext(context, options, [&] {
      return ucudnn::client::MakeBorrowedCudnnShapeBackend(cudnn_handle);
    });
  });
}

ucudnnShapeStatus_t ucudnnShapeDestroy(ucudnnShapeContext_t context) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  return Guarded("ucudnnShapeDestroy", [&] {
    delete context;
    return UCUDNN_SHAPE_SUCCESS;
  });
}

ucudnnShapeStatus_t ucudnnShapeWorkspaceSize(ucudnnShapeContext_t context,
                                             const ucudnnConvShape_t* shape, size_t limit,
                                             size_t* bytes) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  if (bytes == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "bytes: must not be NULL");
  *bytes = 0;
  return Guarded("ucudnnShapeWorkspaceSize", [&] {
    const auto kernel = ReadShape(shape);
    if (!kernel.ok()) return FromStatus(kernel.status());
    if (context->session == nullptr) return UCUDNN_SHAPE_NO_PLAN;
    std::lock_guard lock(context->call_mutex);
    return WorkspaceAnswer(context->session->PlannedWorkspace(kernel->problem, kernel->batch,
                                                              LimitOf(*context, limit)),
                           bytes);
  });
}

ucudnnShapeStatus_t ucudnnShapeConvolution(ucudnnShapeContext_t context,
                                           const ucudnnConvShape_t* shape, const void* a,
                                           const void* b, void* out, void* stream, void* workspace,
                                           size_t workspace_bytes, float alpha, float beta) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  if (ucudnnShapeStatus_t checked = CheckOperands(a, b, out, workspace, workspace_bytes);
      checked != UCUDNN_SHAPE_SUCCESS) {
    return checked;
  }
  return Guarded("ucudnnShapeConvolution", [&] {
    const auto kernel = ReadShape(shape);
    if (!kernel.ok()) return FromStatus(kernel.status());
    if (context->session == nullptr) return UCUDNN_SHAPE_NO_PLAN;
    const ucudnn::ConvOperands operands = OperandsOf(kernel->problem.op, a, b, out);
    std::lock_guard lock(context->call_mutex);
    return RunLocked(
        "ucudnnShapeConvolution", *context, stream, [&](DecliningRunner& own_convolution) {
          return context->session->Execute(kernel->problem, kernel->batch, operands, workspace,
                                           workspace_bytes, alpha, beta, &own_convolution);
        });
  });
}

ucudnnShapeStatus_t ucudnnShapeCheck(const ucudnnConvShape_t* shape) {
  return Guarded("ucudnnShapeCheck", [&] {
    const auto read = ReadShape(shape);
    return read.ok() ? UCUDNN_SHAPE_SUCCESS : FromStatus(read.status());
  });
}

ucudnnShapeStatus_t ucudnnShapeGetKernel(ucudnnShapeContext_t context,
                                         const ucudnnConvShape_t* shape, size_t limit,
                                         ucudnnShapeKernel_t* kernel) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  if (kernel == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "kernel: must not be NULL");
  *kernel = nullptr;
  return Guarded("ucudnnShapeGetKernel", [&] {
    const auto read = ReadShape(shape);
    if (!read.ok()) return FromStatus(read.status());
    std::lock_guard lock(context->call_mutex);
    ucudnn::client::KernelState* state =
        context->session == nullptr
            ? nullptr
            : context->session->FindKernel(read->problem, read->batch, LimitOf(*context, limit));
    if (state == nullptr) {
      *kernel = &context->untracked;
      return UCUDNN_SHAPE_SUCCESS;
    }
    std::unique_ptr<ucudnnShapeKernelImpl>& handle = context->kernels[state];
    if (handle == nullptr) handle.reset(new ucudnnShapeKernelImpl{context, state});
    *kernel = handle.get();
    return UCUDNN_SHAPE_SUCCESS;
  });
}

ucudnnShapeStatus_t ucudnnShapeKernelWorkspaceSize(ucudnnShapeKernel_t kernel, size_t* bytes) {
  if (kernel == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "kernel: must not be NULL");
  if (bytes == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "bytes: must not be NULL");
  *bytes = 0;
  return Guarded("ucudnnShapeKernelWorkspaceSize", [&] {
    if (kernel->state == nullptr) return UCUDNN_SHAPE_NO_PLAN;
    std::lock_guard lock(kernel->context->call_mutex);
    return WorkspaceAnswer(kernel->context->session->PlanWorkspace(*kernel->state), bytes);
  });
}

ucudnnShapeStatus_t ucudnnShapeKernelRun(ucudnnShapeKernel_t kernel, const void* a, const void* b,
                                         void* out, void* stream, void* workspace,
                                         size_t workspace_bytes) {
  if (kernel == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "kernel: must not be NULL");
  if (ucudnnShapeStatus_t checked = CheckOperands(a, b, out, workspace, workspace_bytes);
      checked != UCUDNN_SHAPE_SUCCESS) {
    return checked;
  }
  return Guarded("ucudnnShapeKernelRun", [&] {
    ucudnnShapeContextImpl& context = *kernel->context;
    if (kernel->state == nullptr) {
      if (context.session != nullptr) context.session->CountUntracked();
      return UCUDNN_SHAPE_NO_PLAN;
    }
    ucudnn::client::KernelState& state = *kernel->state;
    ucudnn::client::Session& session = *context.session;
    const ucudnn::ConvOperands operands = OperandsOf(state.problem.op, a, b, out);
    std::lock_guard lock(context.call_mutex);
    const int64_t needed = session.PlannedWorkspace(state);
    if (needed == ucudnn::client::Session::kFrameworkPlan) return UCUDNN_SHAPE_FRAMEWORK;
    if (needed < 0) return UCUDNN_SHAPE_NO_PLAN;
    if (static_cast<uint64_t>(needed) > workspace_bytes) return UCUDNN_SHAPE_WORKSPACE_TOO_SMALL;
    return RunLocked("ucudnnShapeKernelRun", context, stream,
                     [&](DecliningRunner& own_convolution) {
                       return session.Execute(state, operands, workspace, workspace_bytes, 1.0f,
                                              0.0f, own_convolution);
                     });
  });
}

ucudnnShapeStatus_t ucudnnShapePrepare(ucudnnShapeContext_t context,
                                       const ucudnnConvShape_t* shapes, size_t count,
                                       size_t limit) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  if (shapes == nullptr && count > 0) {
    return Fail(UCUDNN_SHAPE_BAD_PARAM, "shapes: NULL with count > 0");
  }
  return Guarded("ucudnnShapePrepare", [&] {
    const auto read = ReadShapes(shapes, count);
    if (!read.ok()) return FromStatus(read.status());
    const std::vector<ucudnn::client::ShapeKernel>& kernels = *read;
    if (context->session == nullptr) return UCUDNN_SHAPE_SUCCESS;
    std::lock_guard lock(context->call_mutex);
    ucudnn::client::Session& session = *context->session;
    for (const ucudnn::client::ShapeKernel& kernel : kernels) {
      session.Declare(kernel.problem, kernel.batch, LimitOf(*context, limit));
    }
    context->backend->AtQuietPoint([&] { session.Prepare(); });
    return UCUDNN_SHAPE_SUCCESS;
  });
}

ucudnnShapeStatus_t ucudnnShapeWaitForPlans(ucudnnShapeContext_t context, int64_t timeout_ms) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  return Guarded("ucudnnShapeWaitForPlans", [&] {
    if (context->session == nullptr) return UCUDNN_SHAPE_SUCCESS;
    bool answered = false;
    context->backend->AtQuietPoint([&] {
      answered = context->session->WaitForPlans(
          std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 0));
      // The plans' first calls' work now, not in the job's first step.
      std::lock_guard lock(context->call_mutex);
      (void)context->session->BindPlans();
    });
    return answered ? UCUDNN_SHAPE_SUCCESS : UCUDNN_SHAPE_NO_PLAN;
  });
}

ucudnnShapeStatus_t ucudnnShapeGetStats(ucudnnShapeContext_t context, ucudnnStats_t* stats) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  if (stats == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "stats: must not be NULL");
  return Guarded("ucudnnShapeGetStats", [&] {
    *stats = context->session != nullptr ? ucudnn::client::ToCStats(context->session->Stats())
                                         : ucudnnStats_t{};
    return UCUDNN_SHAPE_SUCCESS;
  });
}

ucudnnShapeStatus_t ucudnnShapeGetKernelInfo(ucudnnShapeKernel_t kernel,
                                             ucudnnShapeKernelInfo_t* info) {
  if (kernel == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "kernel: must not be NULL");
  if (info == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "info: must not be NULL");
  *info = ucudnnShapeKernelInfo_t{};
  return Guarded("ucudnnShapeGetKernelInfo", [&] {
    if (kernel->state == nullptr) {
      info->state = static_cast<int32_t>(ucudnn::client::KernelInfo::State::kNoPlan);
      return UCUDNN_SHAPE_SUCCESS;
    }
    const ucudnn::client::KernelInfo got = kernel->context->session->Info(*kernel->state);
    info->state = static_cast<int32_t>(got.state);
    info->segments = got.segments;
    info->predicted_ms = got.predicted_ms;
    info->framework_ms = got.framework_ms;
    info->undivided_ms = got.undivided_ms;
    info->workspace_bytes = got.workspace_bytes;
    return UCUDNN_SHAPE_SUCCESS;
  });
}

ucudnnShapeStatus_t ucudnnShapeGetKernelFrameworkWorkspace(ucudnnShapeKernel_t kernel,
                                                           uint64_t* workspace_bytes) {
  if (kernel == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "kernel: must not be NULL");
  if (workspace_bytes == nullptr) {
    return Fail(UCUDNN_SHAPE_BAD_PARAM, "workspace_bytes: must not be NULL");
  }
  *workspace_bytes = 0;
  return Guarded("ucudnnShapeGetKernelFrameworkWorkspace", [&] {
    if (kernel->state != nullptr) {
      *workspace_bytes = kernel->context->session->Info(*kernel->state).framework_workspace_bytes;
    }
    return UCUDNN_SHAPE_SUCCESS;
  });
}

ucudnnShapeStatus_t ucudnnShapeSubmitFrameworkTimings(
    ucudnnShapeContext_t context, const ucudnnConvShape_t* shapes, const double* time_ms,
    const double* spread_ms, const uint64_t* workspace_bytes, size_t count) {
  if (context == nullptr) return Fail(UCUDNN_SHAPE_BAD_PARAM, "context: must not be NULL");
  if (count > 0 && (shapes == nullptr || time_ms == nullptr)) {
    return Fail(UCUDNN_SHAPE_BAD_PARAM, "shapes and time_ms: NULL with count > 0");
  }
  return Guarded("ucudnnShapeSubmitFrameworkTimings", [&] {
    const auto read = ReadShapes(shapes, count);
    if (!read.ok()) return FromStatus(read.status());
    std::vector<ucudnn::client::FrameworkTiming> timings;
    timings.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      timings.push_back({(*read)[i].problem, (*read)[i].batch, time_ms[i],
                         spread_ms != nullptr ? spread_ms[i] : 0.0,
                         workspace_bytes != nullptr ? workspace_bytes[i] : 0});
    }
    if (context->session == nullptr) {
      return Fail(UCUDNN_SHAPE_UNAVAILABLE, "the library is disabled (UCUDNN_DISABLE)");
    }
    // Not under the call mutex: the submission waits for the server.
    return FromStatus(context->session->SubmitFrameworkTimings(timings));
  });
}

const char* ucudnnShapeLastError(void) { return last_error.c_str(); }

const char* ucudnnShapeGetVersion(void) { return UCUDNN_VERSION_STRING; }

}  // extern "C"
