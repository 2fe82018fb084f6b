#include "log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace ucudnn::client {

spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto made = std::make_shared<spdlog::logger>(
        "ucudnn", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    spdlog::level::level_enum level = spdlog::level::info;
    if (const char* text = std::getenv("UCUDNN_LOG_LEVEL"); text != nullptr && *text != '\0') {
      // from_str answers "off" for anything it does not know; only names it knows are taken.
      const spdlog::level::level_enum parsed = spdlog::level::from_str(text);
      if (parsed != spdlog::level::off || std::string(text) == "off") level = parsed;
    }
    made->set_level(level);
    return made;
  }();
  return *logger;
}

}  // namespace ucudnn::client
