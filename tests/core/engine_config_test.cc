// The identity of an engine configuration: its canonical key both ways, the spellings it
// refuses, the version check, and the rule every writer applies to (algo, engine_config).
#include "ucudnn/core/engine_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ucudnn/core/timing.h"

namespace ucudnn {
namespace {

EngineConfig Config(int32_t engine, std::vector<EngineKnob> knobs, int32_t version = 0) {
  EngineConfig config;
  config.engine = engine;
  config.knobs = std::move(knobs);
  config.cudnn_version = version;
  return config;
}

void ExpectRejected(const std::string& key, const std::string& why) {
  Result<EngineConfig> parsed = ParseEngineConfigKey(key);
  ASSERT_FALSE(parsed.ok()) << key << " was accepted";
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << key;
  EXPECT_NE(parsed.status().message().find(why), std::string::npos)
      << key << ": " << parsed.status().message();
}

TEST(EngineConfigKey, SpellsEngineAndSortedKnobs) {
  EXPECT_EQ(EngineConfigKey(Config(34, {})), "eng34");
  EngineConfig config = Config(7, {{14, -1}, {3, 2}, {0, 9000000000}});
  ASSERT_TRUE(Canonicalize(config).ok());
  EXPECT_EQ(EngineConfigKey(config), "eng7{k0=9000000000;k3=2;k14=-1}");
}

TEST(EngineConfigKey, RoundTripsThroughTheParser) {
  const std::vector<EngineConfig> configs = {
      Config(0, {}), Config(34, {{3, 2}}), Config(kMaxEngineIndex, {{0, -5}, {kMaxKnobType, 1}}),
      Config(12, {{1, 0}, {2, 1}, {3, 64}, {10, -1}, {17, 1LL << 40}})};
  for (const EngineConfig& config : configs) {
    const std::string key = EngineConfigKey(config);
    Result<EngineConfig> parsed = ParseEngineConfigKey(key);
    ASSERT_TRUE(parsed.ok()) << key << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, config) << key;  // the version stays 0: the device row carries it
    EXPECT_EQ(EngineConfigKey(*parsed), key);
    EXPECT_EQ(key.find_first_of(", \t\""), std::string::npos) << key << " needs quoting";
  }
}

TEST(EngineConfigKey, RefusesEverySpellingItWouldNotWrite) {
  ExpectRejected("", "must start with 'eng'");
  ExpectRejected("34", "must start with 'eng'");
  ExpectRejected("ENG34", "must start with 'eng'");
  ExpectRejected("eng", "bad engine index");
  ExpectRejected("eng-1", "engine: must be in");
  ExpectRejected("engx", "bad engine index");
  ExpectRejected("eng34{k3=2", "missing '}'");
  ExpectRejected("eng34{}", "empty knob list");
  ExpectRejected("eng34{k3=2;}", "trailing ';'");
  ExpectRejected("eng34{k3}", "is not kTYPE=VALUE");
  ExpectRejected("eng34{3=2}", "is not kTYPE=VALUE");
  ExpectRejected("eng34{k3=two}", "is not kTYPE=VALUE");
  ExpectRejected("eng34{k3=2,k4=1}", "is not kTYPE=VALUE");  // commas are not the separator
  ExpectRejected("eng34{k3=2;k3=4}", "given twice");
  ExpectRejected("eng34{k2000=1}", "knob type: must be in");
  ExpectRejected("eng2000000", "engine: must be in");
  // Parseable but not canonical: one configuration must have one key (the store's key).
  ExpectRejected("eng34{k14=-1;k3=2}", "canonical");
  ExpectRejected("eng034", "bad engine index");  // leading zeros
  ExpectRejected("eng34{k3=+2}", "is not kTYPE=VALUE");
  ExpectRejected("eng34 {k3=2}", "bad engine index");
  const std::string long_key = "eng1{" + std::string(5000, 'k') + "}";
  Result<EngineConfig> parsed = ParseEngineConfigKey(long_key);
  ASSERT_FALSE(parsed.ok());
  EXPECT_LT(parsed.status().message().size(), 200u) << "the message quotes a bounded prefix";
}

TEST(EngineConfigVersion, OnlyTheMeasuringCudnnVersionPasses) {
  const EngineConfig measured = Config(34, {{3, 2}}, 91900);
  EXPECT_TRUE(CheckEngineConfigVersion(measured, 91900).ok());
  const Status foreign = CheckEngineConfigVersion(measured, 91400);
  EXPECT_EQ(foreign.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(foreign.message().find("eng34{k3=2}"), std::string::npos) << foreign.message();
  EXPECT_NE(foreign.message().find("91900"), std::string::npos) << foreign.message();
  EXPECT_NE(foreign.message().find("91400"), std::string::npos) << foreign.message();
  // A parsed key has no version until the caller sets the device's: it is not any library's.
  Result<EngineConfig> parsed = ParseEngineConfigKey("eng34{k3=2}");
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(CheckEngineConfigVersion(*parsed, 91900).ok());
}

TEST(CheckAlgorithm, LegacyNeedsANumberEngineNeedsAKeyAndMinusOne) {
  EXPECT_TRUE(CheckAlgorithm(Algorithm(0)).ok());
  EXPECT_TRUE(CheckAlgorithm(Algorithm(7)).ok());
  EXPECT_TRUE(CheckAlgorithm(Algorithm(kEngineAlgo, "eng34{k3=2}")).ok());

  const Status negative = CheckAlgorithm(Algorithm(-1));
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.message().rfind("algo: ", 0), 0u) << negative.message();

  const Status legacy_number = CheckAlgorithm(Algorithm(3, "eng34"));
  EXPECT_EQ(legacy_number.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(legacy_number.message().rfind("algo: must be -1", 0), 0u) << legacy_number.message();

  const Status bad_key = CheckAlgorithm(Algorithm(kEngineAlgo, "eng34{k14=-1;k3=2}"));
  EXPECT_EQ(bad_key.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_key.message().rfind("engine_config: ", 0), 0u) << bad_key.message();
}

TEST(AlgorithmOrder, LegacyByNumberThenEnginesByKey) {
  const std::vector<Algorithm> sorted = {
      Algorithm(0), Algorithm(6), Algorithm(kEngineAlgo, "eng12"), Algorithm(kEngineAlgo, "eng34"),
      Algorithm(kEngineAlgo, "eng34{k3=2}")};
  for (size_t i = 0; i < sorted.size(); ++i) {
    EXPECT_FALSE(AlgorithmLess(sorted[i], sorted[i])) << i;
    for (size_t j = i + 1; j < sorted.size(); ++j) {
      EXPECT_TRUE(AlgorithmLess(sorted[i], sorted[j])) << i << " " << j;
      EXPECT_FALSE(AlgorithmLess(sorted[j], sorted[i])) << i << " " << j;
    }
  }
  EXPECT_EQ(AlgorithmText(Algorithm(6)), "6");
  EXPECT_EQ(AlgorithmText(Algorithm(kEngineAlgo, "eng34{k3=2}")), "eng34{k3=2}");
}

}  // namespace
}  // namespace ucudnn
