// The identity of a graph-API engine configuration: its canonical key round-trips, only the
// canonical spelling is accepted, bad input is named, and a configuration measured by another
// cuDNN version is refused.
#include <gtest/gtest.h>

#include <string>

#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {
namespace {

TEST(EngineConfigTest, KeyRoundTripsWithKnobsSortedByType) {
  EngineConfig config;
  config.engine = 34;
  config.knobs = {{14, -1}, {3, 2}, {25, 1}};
  ASSERT_TRUE(Canonicalize(config).ok());
  EXPECT_EQ(EngineConfigKey(config), "eng34{k3=2;k14=-1;k25=1}");
  Result<EngineConfig> parsed = ParseEngineConfigKey("eng34{k3=2;k14=-1;k25=1}");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->engine, 34);
  EXPECT_EQ(parsed->knobs, config.knobs);
  EXPECT_EQ(parsed->cudnn_version, 0);  // set by the caller from the device
  EXPECT_EQ(EngineConfigKey(*parsed), "eng34{k3=2;k14=-1;k25=1}");

  EngineConfig bare;
  bare.engine = 0;
  EXPECT_EQ(EngineConfigKey(bare), "eng0");
  ASSERT_TRUE(ParseEngineConfigKey("eng0").ok());
  EXPECT_TRUE(ParseEngineConfigKey("eng0")->knobs.empty());
}

TEST(EngineConfigTest, NonCanonicalAndMalformedKeysAreRejectedWithTheReason) {
  struct Bad {
    const char* key;
    const char* why;
  };
  const Bad cases[] = {
      {"", "must start with 'eng'"},
      {"3", "must start with 'eng'"},
      {"engine3", "bad engine index"},
      {"eng", "bad engine index"},
      {"eng-1", "bad engine index"},
      {"eng07", "bad engine index"},
      {"eng1{}", "empty knob list"},
      {"eng1{k3=2", "missing '}'"},
      {"eng1{k3=2;}", "trailing ';'"},
      {"eng1{k3}", "is not kTYPE=VALUE"},
      {"eng1{x3=2}", "is not kTYPE=VALUE"},
      {"eng1{k3=+2}", "is not kTYPE=VALUE"},
      {"eng1{k14=1;k3=2}", "not in canonical order"},
      {"eng1{k3=1;k3=2}", "given twice"},
      {"eng1{k3=2,k4=1}", "is not kTYPE=VALUE"},
      {"eng99999999999", "bad engine index"},
      {"eng1{k5000=1}", "knob type"},
  };
  for (const Bad& bad : cases) {
    Result<EngineConfig> parsed = ParseEngineConfigKey(bad.key);
    ASSERT_FALSE(parsed.ok()) << bad.key;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad.key;
    EXPECT_NE(parsed.status().message().find(bad.why), std::string::npos)
        << bad.key << ": " << parsed.status().message();
  }
}

// A caller's key echoed in an error is cut at 40 bytes, as every echoed text is (README).
TEST(EngineConfigTest, AnEchoedKeyIsCutAtFortyBytes) {
  const std::string key = "eng1{k3=" + std::string(100, '7') + "x}";
  Result<EngineConfig> parsed = ParseEngineConfigKey(key);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("'" + key.substr(0, 40) + "...'"), std::string::npos)
      << parsed.status().message();
  EXPECT_EQ(parsed.status().message().find(key.substr(0, 41)), std::string::npos)
      << parsed.status().message();
}

TEST(EngineConfigTest, AConfigurationOfAnotherCudnnVersionIsRefused) {
  Result<EngineConfig> config = ParseEngineConfigKey("eng58{k25=1}");
  ASSERT_TRUE(config.ok());
  config->cudnn_version = 91400;
  EXPECT_TRUE(CheckEngineConfigVersion(*config, 91400).ok());
  const Status foreign = CheckEngineConfigVersion(*config, 91900);
  EXPECT_EQ(foreign.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(foreign.message().find("91400"), std::string::npos) << foreign.message();
  EXPECT_NE(foreign.message().find("91900"), std::string::npos) << foreign.message();
  // Unset (0) is never a match: an identity must say which cuDNN measured it.
  config->cudnn_version = 0;
  EXPECT_FALSE(CheckEngineConfigVersion(*config, 91900).ok());
}

TEST(EngineConfigTest, AlgorithmsOrderLegacyFirstThenEnginesByKey) {
  EXPECT_TRUE(AlgorithmLess(Algorithm(1), Algorithm(2)));
  EXPECT_FALSE(AlgorithmLess(Algorithm(2), Algorithm(1)));
  EXPECT_TRUE(AlgorithmLess(Algorithm(7), Algorithm(kEngineAlgo, "eng0")));
  EXPECT_FALSE(AlgorithmLess(Algorithm(kEngineAlgo, "eng0"), Algorithm(7)));
  EXPECT_TRUE(AlgorithmLess(Algorithm(kEngineAlgo, "eng1"), Algorithm(kEngineAlgo, "eng2")));
  EXPECT_EQ(AlgorithmText(Algorithm(3)), "3");
  EXPECT_EQ(AlgorithmText(Algorithm(kEngineAlgo, "eng4{k2=1}")), "eng4{k2=1}");
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

}  // namespace
}  // namespace ucudnn
