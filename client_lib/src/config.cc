#include "ucudnn/client/config.h"

#include <spdlog/spdlog.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <functional>
#include <string>

#include "config_internal.h"
#include "ucudnn/core/units.h"

namespace ucudnn {
namespace {

std::string Trim(std::string_view s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return std::string(s.substr(begin, end - begin));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ParseBool(std::string_view text, bool* value) {
  const std::string s = Lower(Trim(text));
  if (s == "1" || s == "true" || s == "yes" || s == "on") {
    *value = true;
    return true;
  }
  if (s == "0" || s == "false" || s == "no" || s == "off" || s.empty()) {
    *value = false;
    return true;
  }
  return false;
}

bool ParseInt(std::string_view text, int64_t lo, int64_t hi, int64_t* value) {
  const std::string s = Trim(text);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return false;
  *value = v;
  return true;
}

std::string DefaultCachePath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/ucudnn/plans.bin";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.cache/ucudnn/plans.bin";
  return "";
}

void Warn(std::vector<std::string>* warnings, std::string message) {
  if (warnings != nullptr) {
    warnings->push_back(std::move(message));
  } else {
    spdlog::warn("ucudnn: {}", message);
  }
}

}  // namespace

std::string_view ToString(ClientConfig::BatchPolicy policy) {
  switch (policy) {
    case ClientConfig::BatchPolicy::kUndivided:
      return "undivided";
    case ClientConfig::BatchPolicy::kPowerOfTwo:
      return "power_of_two";
    case ClientConfig::BatchPolicy::kAll:
      return "all";
  }
  return "?";
}

std::string_view ToString(ClientConfig::WorkspaceMode mode) {
  switch (mode) {
    case ClientConfig::WorkspaceMode::kPerKernel:
      return "per_kernel";
    case ClientConfig::WorkspaceMode::kTotalSum:
      return "total_sum";
    case ClientConfig::WorkspaceMode::kTotalShared:
      return "total_shared";
  }
  return "?";
}

namespace client {

void ApplySettings(const SettingLookup& lookup, ClientConfig* config,
                   std::vector<std::string>* warnings) {
  auto get = [&](const char* name) -> std::optional<std::string> { return lookup(name); };

  if (auto v = get("UCUDNN_DISABLE")) {
    bool disabled = false;
    if (ParseBool(*v, &disabled)) {
      config->enabled = !disabled;
    } else {
      Warn(warnings, "UCUDNN_DISABLE: expected 1 or 0, got '" + *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_SERVER")) config->server = Trim(*v);
  if (auto v = get("UCUDNN_TOKEN")) config->token = Trim(*v);
  if (auto v = get("UCUDNN_TLS")) {
    bool tls = false;
    if (ParseBool(*v, &tls)) {
      config->tls = tls;
    } else {
      Warn(warnings, "UCUDNN_TLS: expected 1 or 0, got '" + *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_CA_FILE")) {
    config->ca_file = Trim(*v);
    if (!config->ca_file.empty()) config->tls = true;
  }
  if (auto v = get("UCUDNN_POLICY")) {
    const std::string s = Lower(Trim(*v));
    if (s == "undivided") {
      config->policy = ClientConfig::BatchPolicy::kUndivided;
    } else if (s == "power_of_two" || s == "power-of-two" || s == "pow2") {
      config->policy = ClientConfig::BatchPolicy::kPowerOfTwo;
    } else if (s == "all") {
      config->policy = ClientConfig::BatchPolicy::kAll;
    } else {
      Warn(warnings,
           "UCUDNN_POLICY: expected undivided, power_of_two or all, got '" + *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_WORKSPACE_MODE")) {
    const std::string s = Lower(Trim(*v));
    if (s == "per_kernel" || s == "per-kernel") {
      config->workspace_mode = ClientConfig::WorkspaceMode::kPerKernel;
    } else if (s == "total" || s == "total_sum" || s == "total-sum") {
      config->workspace_mode = ClientConfig::WorkspaceMode::kTotalSum;
    } else if (s == "total_shared" || s == "total-shared") {
      config->workspace_mode = ClientConfig::WorkspaceMode::kTotalShared;
    } else {
      Warn(warnings, "UCUDNN_WORKSPACE_MODE: expected per_kernel, total or total_shared, got '" +
                         *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_WORKSPACE_BYTES")) {
    Result<uint64_t> bytes = ParseByteSize(*v);
    if (bytes.ok() && *bytes <= (uint64_t{1} << 40)) {
      config->workspace_bytes = *bytes;
    } else {
      Warn(warnings, "UCUDNN_WORKSPACE_BYTES: expected a size up to 1TiB such as 64MiB, got '" +
                         *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_CACHE_PATH")) {
    const std::string s = Trim(*v);
    const std::string lower = Lower(s);
    config->cache_path = (lower == "off" || lower == "none" || lower == "0") ? "" : s;
  }
  if (auto v = get("UCUDNN_DEADLINE_MS")) {
    int64_t ms = 0;
    if (ParseInt(*v, 1, 3600000, &ms)) {
      config->deadline_ms = ms;
    } else {
      Warn(warnings,
           "UCUDNN_DEADLINE_MS: expected milliseconds in [1, 3600000], got '" + *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_CONTRIBUTE")) {
    bool contribute = false;
    if (ParseBool(*v, &contribute)) {
      config->contribute = contribute;
    } else {
      Warn(warnings, "UCUDNN_CONTRIBUTE: expected 1 or 0, got '" + *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_SERVER_WAIT_MS")) {
    int64_t ms = 0;
    if (ParseInt(*v, 0, 600000, &ms)) {
      config->server_wait_ms = static_cast<uint32_t>(ms);
    } else {
      Warn(warnings, "UCUDNN_SERVER_WAIT_MS: expected milliseconds in [0, 600000], got '" + *v +
                         "'; ignored");
    }
  }
}

std::vector<std::pair<std::string, std::string>> SplitOptions(std::string_view options,
                                                              std::vector<std::string>* warnings) {
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t start = 0;
  while (start <= options.size()) {
    size_t end = options.find_first_of(";\n", start);
    if (end == std::string_view::npos) end = options.size();
    const std::string item = Trim(options.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      Warn(warnings, "option '" + item + "': expected NAME=value; ignored");
      continue;
    }
    pairs.emplace_back(Trim(item.substr(0, eq)), item.substr(eq + 1));
  }
  return pairs;
}

}  // namespace client

ClientConfig ClientConfig::FromEnvironment() {
  ClientConfig config;
  config.cache_path = DefaultCachePath();
  return config.WithEnvironment();
}

ClientConfig ClientConfig::WithEnvironment() const {
  ClientConfig config = *this;
  client::ApplySettings(
      [](const char* name) -> std::optional<std::string> {
        const char* value = std::getenv(name);
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      },
      &config, nullptr);
  return config;
}

ClientConfig ClientConfig::WithOptions(std::string_view options,
                                       std::vector<std::string>* warnings) const {
  ClientConfig config = *this;
  const auto pairs = client::SplitOptions(options, warnings);
  for (const auto& [name, value] : pairs) {
    bool known = false;
    for (std::string_view setting : client::kSettingNames) known = known || name == setting;
    if (!known) Warn(warnings, "option '" + name + "': not a ucudnn setting; ignored");
  }
  client::ApplySettings(
      [&pairs](const char* name) -> std::optional<std::string> {
        std::optional<std::string> found;
        for (const auto& [key, value] : pairs) {
          if (key == name) found = value;  // the last one wins, as in a shell
        }
        return found;
      },
      &config, warnings);
  return config;
}

}  // namespace ucudnn
