#include "ucudnn/core/problem.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/test_problems.h"

namespace ucudnn {
namespace {

using testdata::AlexNetConv2BwdData;
using testdata::GroupedDilatedBwdFilter;
using testdata::RandomValidProblem;
using testdata::Resnet3x3;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

void ExpectInvalid(const ConvProblem& p, const std::string& message) {
  Status s = Validate(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << CanonicalKey(p);
  EXPECT_EQ(s.message(), message) << CanonicalKey(p);
}

// ---- Enums --------------------------------------------------------------------------------------

TEST(ProblemEnums, NamesRoundTrip) {
  const std::vector<std::pair<ConvOp, std::string>> ops = {{ConvOp::kForward, "fwd"},
                                                           {ConvOp::kBackwardData, "bwd_data"},
                                                           {ConvOp::kBackwardFilter, "bwd_filter"}};
  for (const auto& [op, name] : ops) {
    EXPECT_EQ(ToString(op), name);
    Result<ConvOp> parsed = ParseConvOp(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, op);
  }
  const std::vector<std::pair<DataType, std::string>> types = {
      {DataType::kFloat32, "fp32"}, {DataType::kFloat16, "fp16"}, {DataType::kBFloat16, "bf16"}};
  for (const auto& [t, name] : types) {
    EXPECT_EQ(ToString(t), name);
    Result<DataType> parsed = ParseDataType(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, t);
  }
  const std::vector<std::pair<Layout, std::string>> layouts = {{Layout::kNCHW, "nchw"},
                                                               {Layout::kNHWC, "nhwc"}};
  for (const auto& [l, name] : layouts) {
    EXPECT_EQ(ToString(l), name);
    Result<Layout> parsed = ParseLayout(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, l);
  }
  const std::vector<std::pair<MathMode, std::string>> maths = {
      {MathMode::kDefault, "default"},
      {MathMode::kTensorOp, "tensor_op"},
      {MathMode::kTensorOpAllowConversion, "tensor_op_allow_conversion"},
      {MathMode::kFma, "fma"}};
  for (const auto& [m, name] : maths) {
    EXPECT_EQ(ToString(m), name);
    Result<MathMode> parsed = ParseMathMode(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, m);
  }
}

TEST(ProblemEnums, ParseRejectsUnknownAndOtherCase) {
  for (const char* bad : {"", "FWD", "forward", "fwd ", " fwd", "bwd-data"}) {
    Result<ConvOp> r = ParseConvOp(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  Result<ConvOp> op = ParseConvOp("forward");
  EXPECT_EQ(op.status().message(),
            "op: unknown value \"forward\" (expected one of fwd, bwd_data, bwd_filter)");
  Result<DataType> t = ParseDataType("fp64");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("\"fp64\""));
  EXPECT_THAT(t.status().message(), HasSubstr("fp32, fp16, bf16"));
  EXPECT_FALSE(ParseDataType("FP32").ok());
  EXPECT_FALSE(ParseLayout("NCHW").ok());
  EXPECT_FALSE(ParseLayout("chwn").ok());
  EXPECT_FALSE(ParseMathMode("tensor").ok());
  EXPECT_FALSE(ParseMathMode("").ok());
}

TEST(ProblemEnums, OutOfRangeValuesHaveNoName) {
  EXPECT_EQ(ToString(static_cast<ConvOp>(3)), "invalid");
  EXPECT_EQ(ToString(static_cast<DataType>(-1)), "invalid");
  EXPECT_EQ(ToString(static_cast<Layout>(2)), "invalid");
  EXPECT_EQ(ToString(static_cast<MathMode>(7)), "invalid");
}

TEST(ProblemEnums, ElementSizes) {
  EXPECT_EQ(ElementSize(DataType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DataType::kFloat16), 2u);
  EXPECT_EQ(ElementSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(static_cast<DataType>(9)), 0u);
}

// ---- Validation: every field, both sides of every bound
// ------------------------------------------

TEST(ProblemValidate, ExamplesAreValid) {
  EXPECT_TRUE(Validate(Resnet3x3()).ok()) << Validate(Resnet3x3()).ToString();
  EXPECT_TRUE(Validate(AlexNetConv2BwdData()).ok());
  EXPECT_TRUE(Validate(GroupedDilatedBwdFilter()).ok());
}

TEST(ProblemValidate, DefaultConstructedIsInvalid) {
  // Every zero dimension is named; checks that depend on them (padding against the filter,
  // output size, element counts) are not reported on top.
  ExpectInvalid(ConvProblem{},
                "6 invalid fields: c: must be in [1, 65536], got 0; h: must be in [1, 32768], "
                "got 0; w: must be in [1, 32768], got 0; k: must be in [1, 65536], got 0; r: must "
                "be in [1, 1024], got 0; s: must be in [1, 1024], got 0");
}

// A field with a closed integer range, and a problem that stays valid at both ends of it.
struct RangeCase {
  std::string field;
  int64_t lo;
  int64_t hi;
  std::function<void(ConvProblem&, int64_t)> set;
  std::function<ConvProblem()> base;
  std::vector<int64_t> valid = {};  // values inside the range to try; default: both ends and next
};

// 1x1 filter, no padding, small sizes: valid at every bound below.
ConvProblem Small() {
  ConvProblem p;
  p.c = 8;
  p.h = 8;
  p.w = 8;
  p.k = 8;
  p.r = 1;
  p.s = 1;
  return p;
}

std::vector<RangeCase> RangeCases() {
  return {
      {"c", 1, kMaxChannels, [](ConvProblem& p, int64_t v) { p.c = v; }, Small},
      {"h", 1, kMaxSpatial, [](ConvProblem& p, int64_t v) { p.h = v; }, Small},
      {"w", 1, kMaxSpatial, [](ConvProblem& p, int64_t v) { p.w = v; }, Small},
      {"k", 1, kMaxChannels, [](ConvProblem& p, int64_t v) { p.k = v; }, Small},
      {"r", 1, kMaxFilterSpatial, [](ConvProblem& p, int64_t v) { p.r = v; },
       [] {
         ConvProblem p = Small();
         p.h = kMaxFilterSpatial;
         return p;
       }},
      {"s", 1, kMaxFilterSpatial, [](ConvProblem& p, int64_t v) { p.s = v; },
       [] {
         ConvProblem p = Small();
         p.w = kMaxFilterSpatial;
         return p;
       }},
      {"stride_h", 1, kMaxStrideOrDilation, [](ConvProblem& p, int64_t v) { p.stride_h = v; },
       Small},
      {"stride_w", 1, kMaxStrideOrDilation, [](ConvProblem& p, int64_t v) { p.stride_w = v; },
       Small},
      // With a 2-tap filter, so that dilation changes the extent (1025 at the top).
      {"dilation_h", 1, kMaxStrideOrDilation, [](ConvProblem& p, int64_t v) { p.dilation_h = v; },
       [] {
         ConvProblem p = Small();
         p.r = 2;
         p.h = 2000;
         return p;
       }},
      {"dilation_w", 1, kMaxStrideOrDilation, [](ConvProblem& p, int64_t v) { p.dilation_w = v; },
       [] {
         ConvProblem p = Small();
         p.s = 2;
         p.w = 2000;
         return p;
       }},
      {"groups",
       1,
       kMaxChannels,
       [](ConvProblem& p, int64_t v) { p.groups = v; },
       [] {
         ConvProblem p = Small();
         p.c = kMaxChannels;
         p.k = kMaxChannels;
         return p;
       },
       {1, 2, kMaxChannels / 2, kMaxChannels}},
  };
}

TEST(ProblemValidate, EveryRangeBoundBothSides) {
  for (const RangeCase& rc : RangeCases()) {
    SCOPED_TRACE(rc.field);
    const std::string range =
        ": must be in [" + std::to_string(rc.lo) + ", " + std::to_string(rc.hi) + "], got ";
    std::vector<int64_t> valid = rc.valid;
    if (valid.empty()) valid = {rc.lo, rc.lo + 1, rc.hi - 1, rc.hi};
    for (int64_t ok : valid) {
      ConvProblem p = rc.base();
      rc.set(p, ok);
      EXPECT_TRUE(Validate(p).ok()) << rc.field << "=" << ok << ": " << Validate(p).ToString();
    }
    for (int64_t bad : {rc.lo - 1, rc.hi + 1, int64_t{-1}, kInt64Min, kInt64Max}) {
      ConvProblem p = rc.base();
      rc.set(p, bad);
      ExpectInvalid(p, rc.field + range + std::to_string(bad));
    }
  }
}

TEST(ProblemValidate, PaddingBelowDilatedFilterExtent) {
  ConvProblem p = Resnet3x3();  // 3x3: pad in [0, 2]
  for (int64_t ok : {0, 1, 2}) {
    p.pad_h = ok;
    p.pad_w = ok;
    EXPECT_TRUE(Validate(p).ok()) << ok;
  }
  p.pad_w = 1;
  p.pad_h = 3;
  ExpectInvalid(p, "pad_h: must be in [0, 2] (below the dilated filter height 3), got 3");
  p.pad_h = -1;
  ExpectInvalid(p, "pad_h: must be in [0, 2] (below the dilated filter height 3), got -1");
  p.pad_h = kInt64Max;
  ExpectInvalid(p, "pad_h: must be in [0, 2] (below the dilated filter height 3), got " +
                       std::to_string(kInt64Max));
  p.pad_h = 1;
  p.pad_w = 3;
  ExpectInvalid(p, "pad_w: must be in [0, 2] (below the dilated filter width 3), got 3");
  p.pad_w = kInt64Min;
  ExpectInvalid(p, "pad_w: must be in [0, 2] (below the dilated filter width 3), got " +
                       std::to_string(kInt64Min));

  // Dilation widens the extent: a 3-tap filter at dilation 2 covers 5, so pad 4 is allowed.
  p = Resnet3x3();
  p.dilation_h = 2;
  p.pad_h = 4;
  EXPECT_TRUE(Validate(p).ok());
  p.pad_h = 5;
  ExpectInvalid(p, "pad_h: must be in [0, 4] (below the dilated filter height 5), got 5");
  p = Resnet3x3();
  p.dilation_w = 3;
  p.pad_w = 6;
  EXPECT_TRUE(Validate(p).ok());
  p.pad_w = 7;
  ExpectInvalid(p, "pad_w: must be in [0, 6] (below the dilated filter width 7), got 7");

  // A 1x1 filter takes no padding.
  p = Small();
  p.pad_h = 1;
  ExpectInvalid(p, "pad_h: must be in [0, 0] (below the dilated filter height 1), got 1");
}

TEST(ProblemValidate, GroupsMustDivideBothChannelCounts) {
  ConvProblem p = Resnet3x3();
  p.c = 64;
  p.k = 32;
  for (int64_t g : {1, 2, 4, 8, 16, 32}) {
    p.groups = g;
    EXPECT_TRUE(Validate(p).ok()) << g;
  }
  p.groups = 3;
  ExpectInvalid(p, "groups: must divide c (64), got 3");
  p.groups = 64;  // divides c, not k
  ExpectInvalid(p, "groups: must divide k (32), got 64");
  p.k = 48;
  p.groups = 32;
  ExpectInvalid(p, "groups: must divide k (48), got 32");
  // Depthwise.
  p.c = 64;
  p.k = 64;
  p.groups = 64;
  EXPECT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.filter_elements(), 64 * 1 * 3 * 3);
}

TEST(ProblemValidate, EnumsOutOfRange) {
  ConvProblem p = Resnet3x3();
  p.op = static_cast<ConvOp>(3);
  ExpectInvalid(p, "op: unknown value 3");
  p.op = static_cast<ConvOp>(-1);
  ExpectInvalid(p, "op: unknown value -1");
  p = Resnet3x3();
  p.data_type = static_cast<DataType>(3);
  ExpectInvalid(p, "data_type: unknown value 3");
  p = Resnet3x3();
  p.compute_type = static_cast<DataType>(-2);
  ExpectInvalid(p, "compute_type: unknown value -2");
  p = Resnet3x3();
  p.layout = static_cast<Layout>(2);
  ExpectInvalid(p, "layout: unknown value 2");
  p = Resnet3x3();
  p.math = static_cast<MathMode>(4);
  ExpectInvalid(p, "math: unknown value 4");
}

TEST(ProblemValidate, OutputMustBePositive) {
  ConvProblem p = Small();
  p.h = 2;
  p.r = 5;
  p.pad_h = 0;
  ExpectInvalid(p,
                "out_h: must be positive, but h + 2 * pad_h (2) is smaller than the dilated "
                "filter height (5)");
  p.pad_h = 1;  // 2 + 2 = 4 < 5
  ExpectInvalid(p,
                "out_h: must be positive, but h + 2 * pad_h (4) is smaller than the dilated "
                "filter height (5)");
  p.h = 3;  // 3 + 2 = 5: exactly the extent, one output row
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.out_h(), 1);
  p.pad_h = 2;
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.out_h(), 3);

  p = Small();
  p.w = 3;
  p.s = 2;
  p.dilation_w = 3;  // extent 4
  ExpectInvalid(p,
                "out_w: must be positive, but w + 2 * pad_w (3) is smaller than the dilated "
                "filter width (4)");
  p.w = 4;
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.out_w(), 1);
  // The largest filter at the largest dilation on the largest image.
  p = Small();
  p.h = kMaxSpatial;
  p.r = kMaxFilterSpatial;
  p.dilation_h = kMaxStrideOrDilation;
  ExpectInvalid(p,
                "out_h: must be positive, but h + 2 * pad_h (32768) is smaller than the "
                "dilated filter height (1047553)");
  p.pad_h = 1047552;  // the largest pad allowed
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  EXPECT_EQ(p.out_h(), 32768 + 2 * 1047552 - 1047553 + 1);
}

TEST(ProblemValidate, ElementCountsAtAndPastTheBound) {
  // Input: c * h * w = 2^16 * 2^15 * 2^5 = 2^36 exactly.
  ConvProblem p = Small();
  p.c = kMaxChannels;
  p.h = kMaxSpatial;
  p.w = 32;
  p.k = 1;
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  EXPECT_EQ(p.input_elements_per_sample(), kMaxElementsPerSample);
  EXPECT_EQ(p.input_bytes_per_sample(), size_t{4} << 36);
  p.w = 33;
  ExpectInvalid(p, "c * h * w: input elements per sample must be at most 68719476736, got " +
                       std::to_string(int64_t{65536} * 32768 * 33));
  // The largest of everything: 2^46 input elements, rejected with its exact count.
  p.w = kMaxSpatial;
  ExpectInvalid(p, "c * h * w: input elements per sample must be at most 68719476736, got " +
                       std::to_string(int64_t{1} << 46));

  // Output: k * out_h * out_w = 2^36 with one input channel.
  p = Small();
  p.c = 1;
  p.k = kMaxChannels;
  p.h = kMaxSpatial;
  p.w = 32;
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.output_elements_per_sample(), kMaxElementsPerSample);
  p.w = 33;
  ExpectInvalid(p,
                "k * out_h * out_w: output elements per sample must be at most 68719476736, "
                "got " +
                    std::to_string(int64_t{65536} * 32768 * 33));
  // Padding grows the output past the input: 1 x 1 input, 1024-tap dilated filter, maximal pad.
  p = Small();
  p.c = 1;
  p.h = 1;
  p.w = 1;
  p.k = kMaxChannels;
  p.r = kMaxFilterSpatial;
  p.s = kMaxFilterSpatial;
  p.dilation_h = kMaxStrideOrDilation;
  p.dilation_w = kMaxStrideOrDilation;
  p.pad_h = 1047552;
  p.pad_w = 1047552;
  const int64_t out = 1 + 2 * 1047552 - 1047553 + 1;
  ASSERT_EQ(p.out_h(), out);
  ExpectInvalid(p,
                "k * out_h * out_w: output elements per sample must be at most 68719476736, "
                "got " +
                    std::to_string(int64_t{65536} * out * out));

  // Filter: k * (c / groups) * r * s = 2^16 * 2^16 * 4 * 4 = 2^36.
  p = Small();
  p.c = kMaxChannels;
  p.k = kMaxChannels;
  p.r = 4;
  p.s = 4;
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  EXPECT_EQ(p.filter_elements(), kMaxElementsPerSample);
  p.s = 5;
  ExpectInvalid(p, "k * (c / groups) * r * s: filter elements must be at most 68719476736, got " +
                       std::to_string((int64_t{1} << 32) * 20));
  // Groups shrink the filter back under the bound.
  p.groups = 2;
  EXPECT_TRUE(Validate(p).ok());
}

TEST(ProblemValidate, ErrorsNameEveryBadFieldInOrder) {
  ConvProblem p = Resnet3x3();
  p.c = 0;
  p.k = 0;
  ExpectInvalid(p,
                "2 invalid fields: c: must be in [1, 65536], got 0; k: must be in [1, 65536], "
                "got 0");
  p.c = 1;
  ExpectInvalid(p, "k: must be in [1, 65536], got 0");

  // Independent fields are all reported, in field order; the same input, the same message.
  p = Resnet3x3();
  p.op = static_cast<ConvOp>(7);
  p.h = -5;
  p.stride_w = 0;
  p.pad_w = 9;   // beyond the 3-wide filter
  p.groups = 5;  // divides neither c nor k
  p.layout = static_cast<Layout>(9);
  const std::string expected =
      "6 invalid fields: op: unknown value 7; h: must be in [1, 32768], got -5; stride_w: must be "
      "in [1, 1024], got 0; pad_w: must be in [0, 2] (below the dilated filter width 3), got 9; "
      "groups: must divide c (64), got 5; layout: unknown value 9";
  ExpectInvalid(p, expected);
  EXPECT_EQ(Validate(p).message(), expected);
}

TEST(ProblemValidate, DependentChecksWaitForTheirInputs) {
  // An invalid filter height: the padding can only be judged by its sign, the output not at all.
  ConvProblem p = Resnet3x3();
  p.r = 0;
  p.pad_h = 7;
  ExpectInvalid(p, "r: must be in [1, 1024], got 0");
  p.pad_h = -1;
  ExpectInvalid(p, "2 invalid fields: r: must be in [1, 1024], got 0; pad_h: must be >= 0, got -1");
  // An invalid c: groups is judged against k only.
  p = Resnet3x3();
  p.c = 0;
  p.groups = 3;
  ExpectInvalid(p,
                "2 invalid fields: c: must be in [1, 65536], got 0; groups: must divide k (64), "
                "got 3");
}

TEST(ProblemValidate, Batch) {
  EXPECT_TRUE(ValidateBatch(1).ok());
  EXPECT_TRUE(ValidateBatch(256).ok());
  EXPECT_TRUE(ValidateBatch(kMaxBatch).ok());
  for (int64_t bad : {int64_t{0}, int64_t{-1}, kMaxBatch + 1, kInt64Max, kInt64Min}) {
    Status s = ValidateBatch(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "batch: must be in [1, 65536], got " + std::to_string(bad));
  }
}

// ---- Derived sizes
// --------------------------------------------------------------------------------

TEST(ProblemSizes, OutputSizes) {
  ConvProblem p = Resnet3x3();
  EXPECT_EQ(p.out_h(), 56);
  EXPECT_EQ(p.out_w(), 56);
  p.stride_h = 2;
  p.stride_w = 2;
  EXPECT_EQ(p.out_h(), 28);
  EXPECT_EQ(p.out_w(), 28);
  // AlexNet conv1: 227 -> 55 with 11x11 stride 4.
  ConvProblem alex = Small();
  alex.c = 3;
  alex.h = 227;
  alex.w = 227;
  alex.k = 96;
  alex.r = 11;
  alex.s = 11;
  alex.stride_h = 4;
  alex.stride_w = 4;
  ASSERT_TRUE(Validate(alex).ok());
  EXPECT_EQ(alex.out_h(), 55);
  EXPECT_EQ(alex.out_w(), 55);
  // ResNet conv1: 224 -> 112 with 7x7 stride 2 pad 3.
  ConvProblem conv1 = Small();
  conv1.c = 3;
  conv1.h = 224;
  conv1.w = 224;
  conv1.k = 64;
  conv1.r = 7;
  conv1.s = 7;
  conv1.pad_h = 3;
  conv1.pad_w = 3;
  conv1.stride_h = 2;
  conv1.stride_w = 2;
  EXPECT_EQ(conv1.out_h(), 112);
  EXPECT_EQ(conv1.out_w(), 112);
  // Dilated and non-square.
  ConvProblem g = GroupedDilatedBwdFilter();
  EXPECT_EQ(g.out_h(), (14 + 4 - 5) / 2 + 1);  // 7
  EXPECT_EQ(g.out_w(), 15);
}

TEST(ProblemSizes, BytesPerSampleFollowTheOp) {
  ConvProblem p = Small();
  p.c = 3;
  p.h = 224;
  p.w = 224;
  p.k = 64;
  p.r = 7;
  p.s = 7;
  p.pad_h = 3;
  p.pad_w = 3;
  p.stride_h = 2;
  p.stride_w = 2;
  ASSERT_TRUE(Validate(p).ok());
  const size_t x = 3 * 224 * 224 * 4;
  const size_t y = 64 * 112 * 112 * 4;
  const size_t filter = 64 * 3 * 7 * 7 * 4;
  EXPECT_EQ(p.input_elements_per_sample(), 3 * 224 * 224);
  EXPECT_EQ(p.output_elements_per_sample(), 64 * 112 * 112);
  EXPECT_EQ(p.filter_elements(), 64 * 3 * 7 * 7);

  p.op = ConvOp::kForward;  // reads x, writes y
  EXPECT_EQ(p.input_bytes_per_sample(), x);
  EXPECT_EQ(p.output_bytes_per_sample(), y);
  EXPECT_EQ(p.filter_bytes(), filter);
  p.op = ConvOp::kBackwardData;  // reads dy, writes dx
  EXPECT_EQ(p.input_bytes_per_sample(), y);
  EXPECT_EQ(p.output_bytes_per_sample(), x);
  EXPECT_EQ(p.filter_bytes(), filter);
  p.op = ConvOp::kBackwardFilter;  // reads x and dy
  EXPECT_EQ(p.input_bytes_per_sample(), x);
  EXPECT_EQ(p.output_bytes_per_sample(), y);
  EXPECT_EQ(p.filter_bytes(), filter);

  p.data_type = DataType::kFloat16;
  EXPECT_EQ(p.input_bytes_per_sample(), x / 2);
  EXPECT_EQ(p.output_bytes_per_sample(), y / 2);
  EXPECT_EQ(p.filter_bytes(), filter / 2);
  p.data_type = DataType::kBFloat16;
  EXPECT_EQ(p.filter_bytes(), filter / 2);
}

TEST(ProblemSizes, Flops) {
  ConvProblem p = Resnet3x3();
  // 2 * n * k * out_h * out_w * c * r * s
  EXPECT_DOUBLE_EQ(p.flops(1), 2.0 * 64 * 56 * 56 * 64 * 9);
  EXPECT_DOUBLE_EQ(p.flops(256), 256 * 2.0 * 64 * 56 * 56 * 64 * 9);
  // The same count for all three ops.
  for (ConvOp op : {ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
    ConvProblem q = p;
    q.op = op;
    EXPECT_DOUBLE_EQ(q.flops(7), p.flops(7));
  }
  ConvProblem g = GroupedDilatedBwdFilter();  // c / groups = 8
  EXPECT_DOUBLE_EQ(g.flops(3), 2.0 * 3 * 512 * 7 * 15 * 8 * 3 * 1);
  // The largest problem does not overflow: it is computed in double.
  ConvProblem big = Small();
  big.c = kMaxChannels;
  big.k = kMaxChannels;
  big.r = 4;
  big.s = 4;
  big.h = 64;
  big.w = 64;
  ASSERT_TRUE(Validate(big).ok());
  const double expected = 2.0 * 65536 * 65536 * 61 * 61 * 65536 * 16;
  EXPECT_DOUBLE_EQ(big.flops(kMaxBatch), expected);
  EXPECT_GT(big.flops(kMaxBatch), 9.2e18);  // past INT64_MAX, still exact enough
}

// ---- Canonical key and hash
// -----------------------------------------------------------------------

TEST(CanonicalKey, FixedExamples) {
  EXPECT_EQ(CanonicalKey(Resnet3x3()),
            "v1;op=fwd;c=64;h=56;w=56;k=64;r=3;s=3;pad=1,1;stride=1,1;dil=1,1;g=1;dtype=fp32;"
            "ctype=fp32;layout=nchw;math=default");
  EXPECT_EQ(CanonicalKey(AlexNetConv2BwdData()),
            "v1;op=bwd_data;c=96;h=27;w=27;k=256;r=5;s=5;pad=2,2;stride=1,1;dil=1,1;g=1;"
            "dtype=fp16;ctype=fp32;layout=nhwc;math=tensor_op");
  EXPECT_EQ(CanonicalKey(GroupedDilatedBwdFilter()),
            "v1;op=bwd_filter;c=256;h=14;w=15;k=512;r=3;s=1;pad=2,0;stride=2,1;dil=2,1;g=32;"
            "dtype=bf16;ctype=fp32;layout=nhwc;math=tensor_op_allow_conversion");
}

// Pinned: these values are database keys. If this test fails, the key format changed and every
// stored problem hash with it; that needs a new key version ("v2") and a migration, not a new
// expected value here.
TEST(StableHash, PinnedValues) {
  EXPECT_EQ(StableHash(Resnet3x3()), 0xff1a07aebaf31d65ull);
  EXPECT_EQ(StableHash(AlexNetConv2BwdData()), 0x962d97478028f886ull);
  EXPECT_EQ(StableHash(GroupedDilatedBwdFilter()), 0x2b1f6cd6db815541ull);
  // As PostgreSQL BIGINT (bit-cast to signed).
  EXPECT_EQ(static_cast<int64_t>(StableHash(Resnet3x3())), int64_t{-64730797601251995});
}

TEST(StableHash, IsFnv1aOfTheKey) {
  // Reference vectors of 64-bit FNV-1a.
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    ConvProblem p = RandomValidProblem(rng);
    EXPECT_EQ(StableHash(p), Fnv1a64(CanonicalKey(p)));
  }
}

TEST(StableHash, EveryFieldChangesKeyAndHash) {
  const ConvProblem base = GroupedDilatedBwdFilter();
  std::vector<std::function<void(ConvProblem&)>> changes = {
      [](ConvProblem& p) { p.op = ConvOp::kForward; },
      [](ConvProblem& p) { p.c = 512; },
      [](ConvProblem& p) { p.h = 15; },
      [](ConvProblem& p) { p.w = 14; },
      [](ConvProblem& p) { p.k = 256; },
      [](ConvProblem& p) { p.r = 1; },
      [](ConvProblem& p) { p.s = 3; },
      [](ConvProblem& p) { p.pad_h = 1; },
      [](ConvProblem& p) { p.pad_w = 1; },  // with s = 1 invalid, but keys still differ
      [](ConvProblem& p) { p.stride_h = 1; },
      [](ConvProblem& p) { p.stride_w = 2; },
      [](ConvProblem& p) { p.dilation_h = 1; },
      [](ConvProblem& p) { p.dilation_w = 2; },
      [](ConvProblem& p) { p.groups = 16; },
      [](ConvProblem& p) { p.data_type = DataType::kFloat16; },
      [](ConvProblem& p) { p.compute_type = DataType::kFloat16; },
      [](ConvProblem& p) { p.layout = Layout::kNCHW; },
      [](ConvProblem& p) { p.math = MathMode::kDefault; },
  };
  std::set<std::string> keys = {CanonicalKey(base)};
  std::set<uint64_t> hashes = {StableHash(base)};
  for (size_t i = 0; i < changes.size(); ++i) {
    ConvProblem p = base;
    changes[i](p);
    ASSERT_NE(p, base) << i;
    EXPECT_TRUE(keys.insert(CanonicalKey(p)).second) << i << ": " << CanonicalKey(p);
    EXPECT_TRUE(hashes.insert(StableHash(p)).second) << i;
  }
  // Swapping h and w, or pad_h and pad_w, gives a different key too.
  ConvProblem swapped = base;
  std::swap(swapped.h, swapped.w);
  EXPECT_NE(CanonicalKey(swapped), CanonicalKey(base));
}

TEST(CanonicalKey, RoundTripsRandomValidProblems) {
  std::mt19937_64 rng(20240601);
  std::set<std::string> distinct;
  for (int i = 0; i < 5000; ++i) {
    const ConvProblem p = RandomValidProblem(rng);
    const std::string key = CanonicalKey(p);
    Result<ConvProblem> parsed = ParseCanonicalKey(key);
    ASSERT_TRUE(parsed.ok()) << key << ": " << parsed.status().ToString();
    ASSERT_EQ(*parsed, p) << key;
    ASSERT_EQ(CanonicalKey(*parsed), key);
    ASSERT_EQ(StableHash(*parsed), StableHash(p));
    distinct.insert(key);
  }
  EXPECT_GT(distinct.size(), 4900u);  // the generator really explores
}

TEST(CanonicalKey, RoundTripsExtremes) {
  ConvProblem p = Small();
  p.c = kMaxChannels;
  p.k = kMaxChannels;
  p.groups = kMaxChannels;
  p.h = 1;
  p.w = kMaxSpatial;
  p.s = kMaxFilterSpatial;
  p.dilation_w = 1;
  p.stride_w = kMaxStrideOrDilation;
  p.pad_w = kMaxFilterSpatial - 1;
  ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  Result<ConvProblem> parsed = ParseCanonicalKey(CanonicalKey(p));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, p);
}

TEST(CanonicalKey, ParseRejectsMalformedKeys) {
  const std::string good = CanonicalKey(Resnet3x3());
  ASSERT_TRUE(ParseCanonicalKey(good).ok());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string k = good;
    const size_t pos = k.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    k.replace(pos, from.size(), to);
    return k;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "expected 16 fields (18 in 3-D) separated by ';', got 1"},
      {"v1", "expected 16 fields (18 in 3-D) separated by ';', got 1"},
      {good + ";", "expected 16 fields (18 in 3-D) separated by ';', got 17"},
      {good + ";extra=1", "expected 16 fields (18 in 3-D) separated by ';', got 17"},
      {replace(";math=default", ""), "expected 16 fields (18 in 3-D) separated by ';', got 15"},
      {replace("v1;", "v2;"), "unsupported version \"v2\" (expected \"v1\")"},
      {replace("v1;", "V1;"), "unsupported version \"V1\" (expected \"v1\")"},
      {replace("op=fwd", "op=FWD"), "op: unknown value \"FWD\""},
      {replace("op=fwd", "opx=fwd"), "field 1 must start with \"op=\", got \"opx=fwd\""},
      {replace("c=64;h=56", "h=56;c=64"), "field 2 must start with \"c=\", got \"h=56\""},
      {replace("c=64", "c=064"), "c: not a canonical decimal integer: \"064\""},
      {replace("c=64", "c=+64"), "c: not a canonical decimal integer: \"+64\""},
      {replace("c=64", "c= 64"), "c: not a canonical decimal integer: \" 64\""},
      {replace("c=64", "c=64 "), "c: not a canonical decimal integer: \"64 \""},
      {replace("c=64", "c="), "c: not a canonical decimal integer: \"\""},
      {replace("c=64", "c=6.4"), "c: not a canonical decimal integer: \"6.4\""},
      {replace("c=64", "c=0x40"), "c: not a canonical decimal integer: \"0x40\""},
      {replace("c=64", "c=99999999999999999999"),
       "c: not a canonical decimal integer: \"99999999999999999999\""},
      {replace("h=56", "h=-0"), "h: not a canonical decimal integer: \"-0\""},
      {replace("pad=1,1", "pad=1"), "pad: expected 2 integers separated by ',', got \"1\""},
      {replace("pad=1,1", "pad=1,1,1"), "pad: expected 2 integers separated by ',', got \"1,1,1\""},
      {replace("pad=1,1", "pad=,1"), "pad: not a canonical decimal integer: \"\""},
      {replace("stride=1,1", "stride=1;1"),
       "expected 16 fields (18 in 3-D) separated by ';', got 17"},
      {replace("dil=1,1", "dil=1,01"), "dil: not a canonical decimal integer: \"01\""},
      {replace("g=1", "groups=1"), "field 11 must start with \"g=\", got \"groups=1\""},
      {replace("dtype=fp32", "dtype=fp64"), "data type: unknown value \"fp64\""},
      {replace("ctype=fp32", "ctype="), "data type: unknown value \"\""},
      {replace("layout=nchw", "layout=NCHW"), "layout: unknown value \"NCHW\""},
      {replace("math=default", "math=tensor"), "math mode: unknown value \"tensor\""},
      {good + "\n", "math mode: unknown value \"default\n\""},
      // Well formed, but not a valid problem.
      {replace("c=64", "c=0"), "c: must be in [1, 65536], got 0"},
      {replace("c=64", "c=-64"), "c: must be in [1, 65536], got -64"},
      {replace("pad=1,1", "pad=3,1"),
       "pad_h: must be in [0, 2] (below the dilated filter height 3), got 3"},
      {replace("g=1", "g=3"), "groups: must divide c (64), got 3"},
  };
  for (const auto& [key, message] : cases) {
    Result<ConvProblem> r = ParseCanonicalKey(key);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(r.status().message(), StartsWith("canonical key: " + message)) << key;
  }
  // An embedded NUL is not silently cut off.
  std::string with_nul = good;
  with_nul.insert(with_nul.find("c=64") + 3, 1, '\0');
  EXPECT_FALSE(ParseCanonicalKey(with_nul).ok());
}

// ---- 3-D -----------------------------------------------------------------------------------

// A 3-D U-Net layer of nnU-Net's shape: 32 channels, a 3x3x3 filter, NDHWC, fp16.
ConvProblem Unet3d() {
  ConvProblem p = Resnet3x3();
  p.c = p.k = 32;
  p.d = 16;
  p.h = p.w = 64;
  p.t = 3;
  p.pad_d = 1;
  p.data_type = DataType::kFloat16;
  p.layout = Layout::kNHWC;
  p.math = MathMode::kTensorOp;
  return p;
}

TEST(Problem3d, KeyNamesTheDepthAndKeepsTwoDKeys) {
  EXPECT_EQ(CanonicalKey(Unet3d()),
            "v1;op=fwd;c=32;d=16;h=64;w=64;k=32;t=3;r=3;s=3;pad=1,1,1;stride=1,1,1;dil=1,1,1;g=1;"
            "dtype=fp16;ctype=fp32;layout=ndhwc;math=tensor_op");
  // A 2-D problem is a 3-D one of depth 1: its key (and the pinned hashes above) has no depth.
  EXPECT_FALSE(Resnet3x3().is_3d());
  EXPECT_EQ(CanonicalKey(Resnet3x3()).find(";d="), std::string::npos);
  ConvProblem deep = Unet3d();
  deep.stride_d = 2;
  deep.dilation_d = 2;
  deep.pad_d = 2;
  deep.layout = Layout::kNCHW;
  Result<ConvProblem> parsed = ParseCanonicalKey(CanonicalKey(deep));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, deep);
  EXPECT_THAT(CanonicalKey(deep), HasSubstr(";layout=ncdhw;"));
}

TEST(Problem3d, EveryDepthFieldChangesTheKey) {
  const ConvProblem base = Unet3d();
  std::set<std::string> keys = {CanonicalKey(base)};
  for (auto change : std::vector<std::function<void(ConvProblem&)>>{
           [](ConvProblem& p) { p.d = 8; },
           [](ConvProblem& p) {
             p.t = 1;
             p.pad_d = 0;
           },
           [](ConvProblem& p) { p.pad_d = 0; }, [](ConvProblem& p) { p.stride_d = 2; },
           [](ConvProblem& p) { p.dilation_d = 2; }}) {
    ConvProblem p = base;
    change(p);
    ASSERT_TRUE(Validate(p).ok()) << Validate(p).ToString();
    EXPECT_TRUE(keys.insert(CanonicalKey(p)).second) << CanonicalKey(p);
  }
}

TEST(Problem3d, SizesCountTheDepth) {
  ConvProblem p = Unet3d();
  p.stride_d = 2;  // out_d = (16 + 2 - 3) / 2 + 1 = 8
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.out_d(), 8);
  EXPECT_EQ(p.input_elements_per_sample(), 32 * 16 * 64 * 64);
  EXPECT_EQ(p.output_elements_per_sample(), 32 * 8 * 64 * 64);
  EXPECT_EQ(p.filter_elements(), 32 * 32 * 27);
  EXPECT_EQ(p.input_bytes_per_sample(), size_t{2} * 32 * 16 * 64 * 64);
  EXPECT_DOUBLE_EQ(p.flops(2), 2.0 * 2 * 32 * 8 * 64 * 64 * 32 * 27);
}

TEST(Problem3d, ValidateNamesDepthFields) {
  ConvProblem p = Unet3d();
  p.d = 0;
  p.t = 2000;
  EXPECT_THAT(Validate(p).message(), HasSubstr("d: must be in [1, 32768], got 0"));
  EXPECT_THAT(Validate(p).message(), HasSubstr("t: must be in [1, 1024], got 2000"));
  p = Unet3d();
  p.pad_d = 3;
  EXPECT_EQ(Validate(p).message(),
            "pad_d: must be in [0, 2] (below the dilated filter depth 3), "
            "got 3");
  p = Unet3d();
  p.d = 1;
  p.pad_d = 0;  // out_d = 1 - 3 + 1 < 1
  EXPECT_EQ(Validate(p).message(),
            "out_d: must be positive, but d + 2 * pad_d (1) is smaller than the dilated filter "
            "depth (3)");
  p = Unet3d();
  p.stride_d = 0;
  EXPECT_THAT(Validate(p).message(), HasSubstr("stride_d: must be in [1, 1024], got 0"));
}

TEST(Problem3d, DepthOneIsTwoD) {
  // A 3-D problem of depth 1 with a 1-deep filter is its 2-D problem: one key for both.
  ConvProblem p = Resnet3x3();
  p.stride_d = 2;
  p.dilation_d = 3;
  EXPECT_THAT(Validate(p).message(), StartsWith("stride_d, dilation_d: must be 1"));
  NormalizeDepth(p);
  EXPECT_TRUE(Validate(p).ok());
  EXPECT_EQ(p, Resnet3x3());
  // A 3-D key of a depth-1 problem is not canonical.
  const std::string key3d =
      "v1;op=fwd;c=64;d=1;h=56;w=56;k=64;t=1;r=3;s=3;pad=0,1,1;stride=1,1,1;dil=1,1,1;g=1;"
      "dtype=fp32;ctype=fp32;layout=ncdhw;math=default";
  EXPECT_THAT(ParseCanonicalKey(key3d).status().message(), HasSubstr("not in canonical form"));
  // Nor is a 2-D layout name in a 3-D key.
  std::string wrong_layout = CanonicalKey(Unet3d());
  wrong_layout.replace(wrong_layout.find("ndhwc"), 5, "nhwc");
  EXPECT_THAT(ParseCanonicalKey(wrong_layout).status().message(),
              HasSubstr("a 3-D key's layout is \"ncdhw\" or \"ndhwc\""));
}

TEST(Problem3d, RoundTripsRandomProblems) {
  std::mt19937_64 rng(39);
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int three_d = 0;
  for (int i = 0; i < 2000; ++i) {
    ConvProblem p = RandomValidProblem(rng);
    p.d = uniform(1, 64);
    p.t = uniform(1, 5);
    p.dilation_d = uniform(1, 2);
    p.stride_d = uniform(1, 3);
    p.pad_d = uniform(0, (p.t - 1) * p.dilation_d);
    NormalizeDepth(p);
    if (!Validate(p).ok()) continue;
    three_d += p.is_3d();
    Result<ConvProblem> parsed = ParseCanonicalKey(CanonicalKey(p));
    ASSERT_TRUE(parsed.ok()) << CanonicalKey(p) << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_GT(three_d, 500);
}

}  // namespace
}  // namespace ucudnn
