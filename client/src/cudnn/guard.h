// The client library's exception boundary: nothing it throws (std::bad_alloc when registering a
// kernel, say) may unwind into the framework or through a C caller. Used by every entry point of
// the C++ handle and the C API.
#pragma once

#include <cudnn.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <new>

#include "guard_core.h"
#include "log.h"

namespace ucudnn::client {

// `body`'s status; std::bad_alloc is CUDNN_STATUS_ALLOC_FAILED, anything else
// CUDNN_STATUS_INTERNAL_ERROR, logged with the function's name.
template <typename Body>
cudnnStatus_t GuardStatus(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    client::Log().error("{}: out of host memory", function);
    return CUDNN_STATUS_ALLOC_FAILED;
  } catch (const std::exception& e) {
    client::Log().error("{}: {}", function, e.what());
  } catch (...) {
    client::Log().error("{}: unknown exception", function);
  }
  return CUDNN_STATUS_INTERNAL_ERROR;
}

}  // namespace ucudnn::client
