// Where the executables log: standard error, so that standard output carries only what a
// command prints (tables, --json documents) and can be piped. Every main calls this first.
#pragma once

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

namespace ucudnn {

// Makes a colour-on-a-terminal stderr logger named `name` the default one (spdlog's own default
// writes to stdout). Idempotent: a second call keeps the first logger.
inline void LogToStderr(const std::string& name) {
  auto logger = spdlog::get(name);
  if (!logger) logger = spdlog::stderr_color_mt(name);
  spdlog::set_default_logger(logger);
}

}  // namespace ucudnn
