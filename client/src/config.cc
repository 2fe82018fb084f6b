#include "ucudnn/client/config.h"
#include "log.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "config_internal.h"
#include "ucudnn/core/files.h"
#include "ucudnn/core/text.h"
#include "ucudnn/core/units.h"

namespace ucudnn {
namespace {

// The core's text helpers, as environment variables want them: trimmed, an empty yes/no setting
// is "no".
std::string Trimmed(std::string_view s) { return std::string(Trim(s)); }

bool ReadBool(std::string_view text, bool* value) {
  if (Trim(text).empty()) {
    *value = false;
    return true;
  }
  Result<bool> parsed = ParseBool("", text);
  if (parsed.ok()) *value = *parsed;
  return parsed.ok();
}

bool ReadInt(std::string_view text, int64_t lo, int64_t hi, int64_t* value) {
  Result<int64_t> parsed = ParseInteger<int64_t>("", Trim(text), lo, hi);
  if (parsed.ok()) *value = *parsed;
  return parsed.ok();
}

void Warn(std::vector<std::string>* warnings, std::string message) {
  if (warnings != nullptr) {
    warnings->push_back(std::move(message));
  } else {
    client::Log().warn("{}", message);
  }
}

}  // namespace

std::string_view ToString(ClientConfig::BatchPolicy policy) {
  return ucudnn::ToString(client::ToCore(policy));
}

std::string_view ToString(ClientConfig::WorkspaceMode mode) {
  return ucudnn::ToString(client::ToCore(mode));
}

namespace client {

void ApplySettings(const SettingLookup& lookup, ClientConfig* config,
                   std::vector<std::string>* warnings) {
  auto get = [&](const char* name) -> std::optional<std::string> { return lookup(name); };

  if (auto v = get("UCUDNN_DISABLE")) {
    bool disabled = false;
    if (ReadBool(*v, &disabled)) {
      config->enabled = !disabled;
    } else {
      Warn(warnings, "UCUDNN_DISABLE: expected 1 or 0, got '" + *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_SERVER")) config->server = Trimmed(*v);
  if (auto v = get("UCUDNN_TOKEN")) config->token = Trimmed(*v);
  if (auto v = get("UCUDNN_TLS")) {
    bool tls = false;
    if (ReadBool(*v, &tls)) {
      config->tls = tls;
    } else {
      Warn(warnings, "UCUDNN_TLS: expected 1 or 0, got '" + *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_CA_FILE")) {
    config->ca_file = Trimmed(*v);
    if (!config->ca_file.empty()) config->tls = true;
  }
  if (auto v = get("UCUDNN_POLICY")) {
    Result<BatchPolicy> policy = ParseBatchPolicyChoice("UCUDNN_POLICY", *v);
    if (policy.ok()) {
      config->policy = FromCore(*policy);
    } else {
      Warn(warnings, policy.status().message() + "; ignored");
    }
  }
  if (auto v = get("UCUDNN_WORKSPACE_MODE")) {
    Result<WorkspaceMode> mode = ParseWorkspaceModeChoice("UCUDNN_WORKSPACE_MODE", *v);
    if (mode.ok()) {
      config->workspace_mode = FromCore(*mode);
    } else {
      Warn(warnings, mode.status().message() + "; ignored");
    }
  }
  if (auto v = get("UCUDNN_ALGORITHMS")) {
    Result<AlgorithmSpace> space = ParseAlgorithmSpaceChoice("UCUDNN_ALGORITHMS", *v);
    if (space.ok()) {
      config->algorithms = FromCore(*space);
    } else {
      Warn(warnings, space.status().message() + "; ignored");
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
  if (auto v = get("UCUDNN_CACHE_PATH")) config->cache_path = PathSetting(*v);
  if (auto v = get("UCUDNN_COMPILED_PLAN_CACHE")) config->compiled_plan_cache = PathSetting(*v);
  if (auto v = get("UCUDNN_DEADLINE_MS")) {
    int64_t ms = 0;
    if (ReadInt(*v, 1, 3600000, &ms)) {
      config->deadline_ms = ms;
    } else {
      Warn(warnings,
           "UCUDNN_DEADLINE_MS: expected milliseconds in [1, 3600000], got '" + *v + "'; ignored");
    }
  }
  if (auto v = get("UCUDNN_CONTRIBUTE")) {
    bool contribute = false;
    if (ReadBool(*v, &contribute)) {
      config->contribute = contribute;
    } else {
      Warn(warnings, "UCUDNN_CONTRIBUTE: expected 1 or 0, got '" + *v + "'; ignored");
    }
  }
  // Kept as given: a session refuses an invalid identity where it can say so (the shape-level C
  // API's context creation) and plans without a framework candidate otherwise.
  if (auto v = get("UCUDNN_FRAMEWORK")) config->framework = Trimmed(*v);
  if (auto v = get("UCUDNN_SERVER_WAIT_MS")) {
    int64_t ms = 0;
    if (ReadInt(*v, 0, 600000, &ms)) {
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
    const std::string item = Trimmed(options.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      Warn(warnings, "option '" + item + "': expected NAME=value; ignored");
      continue;
    }
    pairs.emplace_back(Trimmed(item.substr(0, eq)), item.substr(eq + 1));
  }
  return pairs;
}

}  // namespace client

ClientConfig ClientConfig::FromEnvironment() {
  ClientConfig config;
  config.cache_path = UserCachePath("plans.bin");
  config.compiled_plan_cache = UserCachePath("compiled_plans");
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
