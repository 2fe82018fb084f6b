#include "ucudnn/core/engine_config.h"

#include "ucudnn/core/text.h"
#include "ucudnn/core/timing.h"

#include <algorithm>
#include <charconv>

namespace ucudnn {
namespace {

template <typename T>
bool ParseInteger(std::string_view text, T& out) {
  if (text.empty() || text.size() > 20) return false;
  // No '+', no leading zeros (one canonical spelling per value), '-' only for knob values.
  if (text[0] == '+' || (text.size() > 1 && text[0] == '0') ||
      (text.size() > 2 && text[0] == '-' && text[1] == '0') || text == "-0") {
    return false;
  }
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

Status Canonicalize(EngineConfig& config) {
  if (config.engine < 0 || config.engine > kMaxEngineIndex) {
    return InvalidArgument("engine: must be in [0, " + std::to_string(kMaxEngineIndex) + "], got " +
                           std::to_string(config.engine));
  }
  if (config.knobs.size() > kMaxEngineKnobs) {
    return InvalidArgument("knobs: at most " + std::to_string(kMaxEngineKnobs) + ", got " +
                           std::to_string(config.knobs.size()));
  }
  std::sort(config.knobs.begin(), config.knobs.end());
  for (size_t i = 0; i < config.knobs.size(); ++i) {
    const EngineKnob& k = config.knobs[i];
    if (k.type < 0 || k.type > kMaxKnobType) {
      return InvalidArgument("knob type: must be in [0, " + std::to_string(kMaxKnobType) +
                             "], got " + std::to_string(k.type));
    }
    if (i > 0 && config.knobs[i - 1].type == k.type) {
      return InvalidArgument("knob type " + std::to_string(k.type) + " given twice");
    }
  }
  if (config.cudnn_version < 0) return InvalidArgument("cudnn_version: must be >= 0");
  return Status::Ok();
}

std::string EngineConfigKey(const EngineConfig& config) {
  std::string key = "eng" + std::to_string(config.engine);
  if (config.knobs.empty()) return key;
  key += '{';
  for (size_t i = 0; i < config.knobs.size(); ++i) {
    if (i > 0) key += ';';
    key += 'k' + std::to_string(config.knobs[i].type) + '=' + std::to_string(config.knobs[i].value);
  }
  key += '}';
  return key;
}

Result<EngineConfig> ParseEngineConfigKey(std::string_view key) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("engine configuration " + QuoteForError(key) + ": " + why);
  };
  if (key.substr(0, 3) != "eng") return bad("must start with 'eng'");
  std::string_view rest = key.substr(3);
  const size_t brace = rest.find('{');
  EngineConfig config;
  if (!rest.empty() && rest[0] == '-') return bad("bad engine index");
  if (!ParseInteger(rest.substr(0, brace), config.engine)) return bad("bad engine index");
  if (brace != std::string_view::npos) {
    if (rest.back() != '}') return bad("missing '}'");
    std::string_view knobs = rest.substr(brace + 1, rest.size() - brace - 2);
    if (knobs.empty()) return bad("empty knob list (write no braces instead)");
    while (!knobs.empty()) {
      const size_t comma = knobs.find(';');
      std::string_view item = knobs.substr(0, comma);
      knobs = comma == std::string_view::npos ? std::string_view() : knobs.substr(comma + 1);
      if (comma != std::string_view::npos && knobs.empty()) return bad("trailing ';'");
      const size_t eq = item.find('=');
      if (item.empty() || item[0] != 'k' || eq == std::string_view::npos) {
        return bad("knob " + QuoteForError(item) + " is not kTYPE=VALUE");
      }
      EngineKnob knob;
      if (!ParseInteger(item.substr(1, eq - 1), knob.type) ||
          !ParseInteger(item.substr(eq + 1), knob.value)) {
        return bad("knob " + QuoteForError(item) + " is not kTYPE=VALUE");
      }
      config.knobs.push_back(knob);
    }
  }
  UCUDNN_RETURN_IF_ERROR(Canonicalize(config));
  // Only the canonical spelling is accepted, so that one configuration has one key.
  if (EngineConfigKey(config) != key) return bad("not in canonical order (knobs sorted by type)");
  return config;
}

std::string AlgorithmText(const Algorithm& algo) {
  if (algo.is_framework()) return "framework(" + std::string(algo.engine_config) + ")";
  return algo.is_engine() ? std::string(algo.engine_config) : std::to_string(algo.id);
}

Status CheckFrameworkIdentity(std::string_view field, std::string_view identity) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(std::string(field) + ": " + why);
  };
  if (identity.empty()) return bad("must not be empty");
  if (identity.size() > kMaxFrameworkIdentity) {
    return bad("at most " + std::to_string(kMaxFrameworkIdentity) + " bytes, got " +
               std::to_string(identity.size()));
  }
  for (size_t i = 0; i < identity.size(); ++i) {
    const auto c = static_cast<unsigned char>(identity[i]);
    if (c < 0x20 || c > 0x7e) {
      return bad("must be printable ASCII (0x20-0x7e); byte " + std::to_string(i) + " is " +
                 std::to_string(c));
    }
  }
  return Status::Ok();
}

Status CheckAlgorithm(const Algorithm& algo) {
  if (algo.id < kFrameworkAlgo) {
    return InvalidArgument("algo: must be >= " + std::to_string(kFrameworkAlgo) + ", got " +
                           std::to_string(algo.id));
  }
  if (algo.is_framework()) return CheckFrameworkIdentity("engine_config", algo.engine_config);
  if (!algo.is_engine()) {
    if (algo.id < 0) {
      return InvalidArgument("algo: must be >= 0 without engine_config, got " +
                             std::to_string(algo.id));
    }
    return Status::Ok();
  }
  if (Result<EngineConfig> parsed = ParseEngineConfigKey(algo.engine_config); !parsed.ok()) {
    return parsed.status().WithContext("engine_config");
  }
  if (algo.id != kEngineAlgo) {
    return InvalidArgument("algo: must be " + std::to_string(kEngineAlgo) +
                           " with an engine configuration, got " + std::to_string(algo.id));
  }
  return Status::Ok();
}

Status CheckEngineConfigVersion(const EngineConfig& config, int32_t runtime_version) {
  if (config.cudnn_version != runtime_version) {
    return Status(StatusCode::kFailedPrecondition,
                  "engine configuration " + EngineConfigKey(config) + " was measured with cuDNN " +
                      std::to_string(config.cudnn_version) + "; this is cuDNN " +
                      std::to_string(runtime_version));
  }
  return Status::Ok();
}

}  // namespace ucudnn
