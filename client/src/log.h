// The client library's logger. A library inside someone's training binary must not take over the
// application's logging: this logger writes to standard error (never stdout, which the
// application may use for its own output), is named "ucudnn", and is not registered with spdlog,
// so the application's default logger and its registry stay its own. UCUDNN_LOG_LEVEL (trace,
// debug, info, warn, error, critical, off; default info) sets its level.
#pragma once

#include <spdlog/spdlog.h>

namespace ucudnn::client {

spdlog::logger& Log();

}  // namespace ucudnn::client
