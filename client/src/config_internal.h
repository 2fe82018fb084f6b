// Internals of the configuration: parsing shared by the environment and option strings, and the
// mapping of the public enums onto the core's.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucudnn/client/config.h"
#include "ucudnn/core/plan.h"

namespace ucudnn::client {

// The variables ApplySettings() reads, in the order the README lists them.
inline constexpr std::string_view kSettingNames[] = {
    "UCUDNN_DISABLE",        "UCUDNN_SERVER",
    "UCUDNN_TOKEN",          "UCUDNN_TLS",
    "UCUDNN_CA_FILE",        "UCUDNN_POLICY",
    "UCUDNN_WORKSPACE_MODE", "UCUDNN_WORKSPACE_BYTES",
    "UCUDNN_CACHE_PATH",     "UCUDNN_COMPILED_PLAN_CACHE",
    "UCUDNN_DEADLINE_MS",    "UCUDNN_SERVER_WAIT_MS",
    "UCUDNN_CONTRIBUTE",     "UCUDNN_FRAMEWORK",
};

// The value of a setting by name, or nullopt when it is not set.
using SettingLookup = std::function<std::optional<std::string>(const char* name)>;

// Overrides `config` with every setting `lookup` has. Invalid values leave the field as it was
// and add a warning (to `warnings` when given, else to the log).
void ApplySettings(const SettingLookup& lookup, ClientConfig* config,
                   std::vector<std::string>* warnings);

// "A=1; B=2\nC=3" -> {{"A","1"},{"B","2"},{"C","3"}}; malformed items are warned about.
std::vector<std::pair<std::string, std::string>> SplitOptions(std::string_view options,
                                                              std::vector<std::string>* warnings);

inline BatchPolicy ToCore(ClientConfig::BatchPolicy policy) {
  switch (policy) {
    case ClientConfig::BatchPolicy::kUndivided:
      return BatchPolicy::kUndivided;
    case ClientConfig::BatchPolicy::kAll:
      return BatchPolicy::kAll;
    case ClientConfig::BatchPolicy::kPowerOfTwo:
      break;
  }
  return BatchPolicy::kPowerOfTwo;
}

inline WorkspaceMode ToCore(ClientConfig::WorkspaceMode mode) {
  switch (mode) {
    case ClientConfig::WorkspaceMode::kTotalSum:
      return WorkspaceMode::kTotalSum;
    case ClientConfig::WorkspaceMode::kTotalShared:
      return WorkspaceMode::kTotalShared;
    case ClientConfig::WorkspaceMode::kPerKernel:
      break;
  }
  return WorkspaceMode::kPerKernel;
}

inline AlgorithmSpace ToCore(ClientConfig::Algorithms algorithms) {
  switch (algorithms) {
    case ClientConfig::Algorithms::kLegacy:
      return AlgorithmSpace::kLegacy;
    case ClientConfig::Algorithms::kEngines:
      return AlgorithmSpace::kEngines;
    case ClientConfig::Algorithms::kAll:
      break;
  }
  return AlgorithmSpace::kAll;
}

inline ClientConfig::BatchPolicy FromCore(BatchPolicy policy) {
  switch (policy) {
    case BatchPolicy::kUndivided:
      return ClientConfig::BatchPolicy::kUndivided;
    case BatchPolicy::kAll:
      return ClientConfig::BatchPolicy::kAll;
    case BatchPolicy::kPowerOfTwo:
      break;
  }
  return ClientConfig::BatchPolicy::kPowerOfTwo;
}

inline ClientConfig::Algorithms FromCore(AlgorithmSpace space) {
  switch (space) {
    case AlgorithmSpace::kLegacy:
      return ClientConfig::Algorithms::kLegacy;
    case AlgorithmSpace::kEngines:
      return ClientConfig::Algorithms::kEngines;
    case AlgorithmSpace::kAll:
      break;
  }
  return ClientConfig::Algorithms::kAll;
}

inline ClientConfig::WorkspaceMode FromCore(WorkspaceMode mode) {
  switch (mode) {
    case WorkspaceMode::kTotalSum:
      return ClientConfig::WorkspaceMode::kTotalSum;
    case WorkspaceMode::kTotalShared:
      return ClientConfig::WorkspaceMode::kTotalShared;
    case WorkspaceMode::kPerKernel:
      break;
  }
  return ClientConfig::WorkspaceMode::kPerKernel;
}

}  // namespace ucudnn::client
