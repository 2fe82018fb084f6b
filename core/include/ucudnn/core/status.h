// Errors as values: every fallible function in the libraries returns a Status or a Result<T>.
// Codes mirror gRPC's so the service edge maps them one to one (server/grpc_status.h).
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace ucudnn {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong; the message names the field
  kNotFound,            // the thing asked for does not exist
  kAlreadyExists,       //
  kFailedPrecondition,  // the system is not in a state to do it (e.g. database schema too new)
  kUnsupported,         // the backend cannot run this algorithm for this problem
  kResourceExhausted,   // out of memory, workspace, or a configured bound
  kDeadlineExceeded,    //
  kUnavailable,         // a dependency (database, server, GPU) is away; retrying may help
  kUnauthenticated,     //
  kInternal,            // a bug or a failed library call (CUDA/cuDNN status in the message)
  kDeviceLost,          // the GPU's context is unusable (a sticky CUDA error such as an illegal
                        // address): nothing more can run in this process on that device
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: kernels[2].problem.c: must be positive, got 0"
  std::string ToString() const;
  // Prefixes the message with where it happened: "kernels[2]: " + message.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status DeviceLost(std::string m) { return {StatusCode::kDeviceLost, std::move(m)}; }

// A value or the Status that explains why there is none (std::expected is C++23).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "a Result holding a Status must hold an error");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ucudnn

// Returns early from the enclosing function when `expr` (a Status) is an error.
#define UCUDNN_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::ucudnn::Status ucudnn_status_ = (expr);        \
    if (!ucudnn_status_.ok()) return ucudnn_status_; \
  } while (0)

#define UCUDNN_CONCAT_INNER_(a, b) a##b
#define UCUDNN_CONCAT_(a, b) UCUDNN_CONCAT_INNER_(a, b)
// `UCUDNN_ASSIGN_OR_RETURN(auto x, ComputeX());` binds the value or returns the error.
#define UCUDNN_ASSIGN_OR_RETURN(lhs, expr) \
  UCUDNN_ASSIGN_OR_RETURN_IMPL_(UCUDNN_CONCAT_(ucudnn_result_, __LINE__), lhs, expr)
#define UCUDNN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
