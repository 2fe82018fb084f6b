// The identity of a cuDNN graph-API engine configuration, shared by the store, the plan, the CLI
// and the client: cuDNN's global engine index plus the knob choices that configure it. An
// identity is only meaningful for the cuDNN version that measured it (the device fingerprint's),
// which is why that version travels with it and a client of another version refuses it.
// No cuDNN types here: the core stays free of the GPU libraries.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/status.h"

namespace ucudnn {

struct EngineKnob {
  int32_t type = 0;   // cudnnBackendKnobType_t
  int64_t value = 0;  // the choice
  auto operator<=>(const EngineKnob&) const = default;
};

// Bounds that keep identities small and stored text short (cuDNN has 44 knob types; an engine
// uses a handful).
inline constexpr int32_t kMaxEngineIndex = 1 << 20;
inline constexpr int32_t kMaxKnobType = 1023;
inline constexpr size_t kMaxEngineKnobs = 32;

struct EngineConfig {
  int32_t engine = 0;             // CUDNN_ATTR_ENGINE_GLOBAL_INDEX
  std::vector<EngineKnob> knobs;  // sorted by type, types unique (Canonicalize)
  int32_t cudnn_version = 0;      // cudnnGetVersion() of the library that measured it; 0: unset
  auto operator<=>(const EngineConfig&) const = default;
};

// Sorts the knobs by type; kInvalidArgument for out-of-range values or a type given twice.
Status Canonicalize(EngineConfig& config);

// Canonical text of the engine and knobs, without the version (the database keeps the version in
// the device row): "eng34" or "eng34{k3=2;k14=-1}" (no
// commas or spaces, so that it sits unquoted in CSV files and tables). Stable: the store's key.
std::string EngineConfigKey(const EngineConfig& config);
// The inverse; the version is left 0 (the caller sets it from the device). Rejects anything that
// EngineConfigKey() would not have written, with the offending part named.
Result<EngineConfig> ParseEngineConfigKey(std::string_view key);

struct Algorithm;
// The rule every writer of an algorithm identity (store, proto, timing files) checks: a legacy
// algorithm has algo >= 0 and no engine configuration; an engine configuration has a key that
// ParseEngineConfigKey() accepts and algo == kEngineAlgo; the framework's own convolution has
// algo == kFrameworkAlgo and a framework identity (CheckFrameworkIdentity). kInvalidArgument naming
// the field
// ("algo: ..." or "engine_config: ..."); callers add where it was (index, line).
Status CheckAlgorithm(const Algorithm& algo);

// kFailedPrecondition unless `config` was measured by cuDNN `runtime_version`: an engine index
// and its knobs mean different kernels in different cuDNN releases.
Status CheckEngineConfigVersion(const EngineConfig& config, int32_t runtime_version);

}  // namespace ucudnn
