// The names of the core's enums (problem.cc, dp.cc) and their table machinery: every
// value round-trips through its name, values without a name say so, and the choice parsers read
// what people type.
#include "ucudnn/core/enum_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {
namespace {

using ::testing::HasSubstr;

template <typename Enum, typename Parse>
void ExpectRoundTrip(std::initializer_list<Enum> values, Parse parse) {
  for (Enum value : values) {
    const std::string_view name = ToString(value);
    EXPECT_NE(name, kUnnamedEnumValue);
    Result<Enum> parsed = parse(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, value) << name;
  }
}

TEST(EnumNames, EveryValueRoundTrips) {
  ExpectRoundTrip({ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}, ParseConvOp);
  ExpectRoundTrip({DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}, ParseDataType);
  ExpectRoundTrip({Layout::kNCHW, Layout::kNHWC}, ParseLayout);
  ExpectRoundTrip(
      {MathMode::kDefault, MathMode::kTensorOp, MathMode::kTensorOpAllowConversion, MathMode::kFma},
      ParseMathMode);
  ExpectRoundTrip({BatchPolicy::kUndivided, BatchPolicy::kPowerOfTwo, BatchPolicy::kAll},
                  ParseBatchPolicy);
  ExpectRoundTrip(
      {WorkspaceMode::kPerKernel, WorkspaceMode::kTotalSum, WorkspaceMode::kTotalShared},
      ParseWorkspaceMode);
  ExpectRoundTrip({AlgorithmSpace::kAll, AlgorithmSpace::kLegacy, AlgorithmSpace::kEngines},
                  ParseAlgorithmSpace);
  ExpectRoundTrip({TimingStatus::kOk, TimingStatus::kUnsupported, TimingStatus::kFailed},
                  ParseTimingStatus);
}

TEST(EnumNames, ValuesWithoutANameSayInvalid) {
  EXPECT_EQ(ToString(static_cast<BatchPolicy>(3)), "invalid");
  EXPECT_EQ(ToString(static_cast<WorkspaceMode>(-1)), "invalid");
  EXPECT_EQ(ToString(static_cast<AlgorithmSpace>(9)), "invalid");
  EXPECT_EQ(ToString(static_cast<TimingStatus>(3)), "invalid");
}

TEST(EnumNames, CanonicalParsersTakeAnyCaseOfTheNameOnly) {
  EXPECT_EQ(ParseTimingStatus("OK").value(), TimingStatus::kOk);
  EXPECT_EQ(ParseTimingStatus("Unsupported").value(), TimingStatus::kUnsupported);
  EXPECT_EQ(ParseBatchPolicy("Power_Of_Two").value(), BatchPolicy::kPowerOfTwo);
  EXPECT_FALSE(ParseBatchPolicy("pow2").ok());
  EXPECT_FALSE(ParseBatchPolicy(" all").ok());
  EXPECT_FALSE(ParseWorkspaceMode("total").ok());
  Result<TimingStatus> bad = ParseTimingStatus("fine");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "status: unknown value \"fine\" (expected one of ok, unsupported, failed)");
  // The problem's names are exact: they are parts of canonical keys.
  EXPECT_FALSE(ParseConvOp("FWD").ok());
  EXPECT_FALSE(ParseLayout("NHWC").ok());
}

TEST(EnumNames, ChoicesAcceptWhatPeopleType) {
  EXPECT_EQ(ParseBatchPolicyChoice("UCUDNN_POLICY", " Power-Of-Two ").value(),
            BatchPolicy::kPowerOfTwo);
  EXPECT_EQ(ParseBatchPolicyChoice("UCUDNN_POLICY", "POW2").value(), BatchPolicy::kPowerOfTwo);
  EXPECT_EQ(ParseBatchPolicyChoice("UCUDNN_POLICY", "undivided").value(), BatchPolicy::kUndivided);
  Result<BatchPolicy> policy = ParseBatchPolicyChoice("UCUDNN_POLICY", "half");
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().message(),
            "UCUDNN_POLICY: expected undivided, power_of_two or all, got 'half'");

  EXPECT_EQ(ParseAlgorithmSpaceChoice("UCUDNN_ALGORITHMS", " Engines\n").value(),
            AlgorithmSpace::kEngines);
  Result<AlgorithmSpace> space = ParseAlgorithmSpaceChoice("UCUDNN_ALGORITHMS", "both");
  ASSERT_FALSE(space.ok());
  EXPECT_EQ(space.status().message(),
            "UCUDNN_ALGORITHMS: expected all, legacy or engines, got 'both'");

  EXPECT_EQ(ParseWorkspaceModeChoice("--mode", "SHARED").value(), WorkspaceMode::kTotalShared);
  EXPECT_THAT(ParseWorkspaceModeChoice("--mode", "sum").status().message(),
              HasSubstr("--mode: expected"));
}

TEST(EnumNames, TableHelpers) {
  constexpr NameTable<Layout, 3> kNames{{
      {"nchw", Layout::kNCHW},
      {"nhwc", Layout::kNHWC},
      {"channels_last", Layout::kNHWC},  // an alias: found, never written
  }};
  EXPECT_EQ(NameOf(Layout::kNHWC, kNames), "nhwc");
  EXPECT_EQ(ValueNamed("channels_last", kNames), Layout::kNHWC);
  EXPECT_EQ(ValueNamed("NCHW", kNames), std::nullopt);
  EXPECT_EQ(ListNames(kNames), "nchw, nhwc, channels_last");
  EXPECT_EQ(ListNames(kNames, " or "), "nchw, nhwc or channels_last");
  EXPECT_EQ(NormalizeChoice("\tPer-Kernel "), "per_kernel");
}

}  // namespace
}  // namespace ucudnn
