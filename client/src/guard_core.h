// The backend-generic half of the client library's exception boundary (cudnn/guard.h adds the
// cuDNN-status form): nothing the library throws may unwind into the framework or a C caller.
#pragma once

#include <exception>

#include "log.h"

namespace ucudnn::client {

// `body`'s answer; `on_error` when it throws (logged with the function's name).
template <typename T, typename Body>
T Guard(const char* function, T on_error, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    client::Log().error("{}: {}", function, e.what());
  } catch (...) {
    client::Log().error("{}: unknown exception", function);
  }
  return on_error;
}

}  // namespace ucudnn::client
