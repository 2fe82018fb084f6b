#include "ucudnn/core/random_fill.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ucudnn/backends/cpu_backend.h"

namespace ucudnn {
namespace {

TEST(RandomFillTest, ValuesAreNonZeroBoundedAndDeterministic) {
  std::vector<float> a(10000), b(10000), other(10000);
  GenerateRandom(a.data(), a.size(), DataType::kFloat32, 7);
  GenerateRandom(b.data(), b.size(), DataType::kFloat32, 7);
  GenerateRandom(other.data(), other.size(), DataType::kFloat32, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  int negative = 0;
  double sum = 0;
  for (float v : a) {
    ASSERT_GE(std::fabs(v), 0.1f);
    ASSERT_LE(std::fabs(v), 1.0f);
    negative += v < 0;
    sum += v;
  }
  // Both signs, roughly balanced; mean near zero.
  EXPECT_GT(negative, 4500);
  EXPECT_LT(negative, 5500);
  EXPECT_LT(std::fabs(sum / a.size()), 0.05);
}

TEST(RandomFillTest, ChunksEqualTheWholeSequence) {
  std::vector<float> whole(1000), tail(300);
  GenerateRandom(whole.data(), whole.size(), DataType::kFloat32, 3);
  GenerateRandom(tail.data(), tail.size(), DataType::kFloat32, 3, 700);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), whole.begin() + 700));
}

TEST(RandomFillTest, HalfPrecisionDataIsTheRoundedFloatData) {
  std::vector<float> f(5000);
  std::vector<uint16_t> h(5000), bf(5000);
  GenerateRandom(f.data(), f.size(), DataType::kFloat32, 11);
  GenerateRandom(h.data(), h.size(), DataType::kFloat16, 11);
  GenerateRandom(bf.data(), bf.size(), DataType::kBFloat16, 11);
  const std::vector<float> hf = ToFloat(h.data(), h.size(), DataType::kFloat16);
  const std::vector<float> bff = ToFloat(bf.data(), bf.size(), DataType::kBFloat16);
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_NE(hf[i], 0.0f);
    ASSERT_NE(bff[i], 0.0f);
    EXPECT_LE(std::fabs(hf[i] - f[i]), std::fabs(f[i]) * 0x1p-11f);
    EXPECT_LE(std::fabs(bff[i] - f[i]), std::fabs(f[i]) * 0x1p-8f);
  }
  EXPECT_EQ(ToFloat(f.data(), f.size(), DataType::kFloat32), f);
}

TEST(RandomFillTest, HalfConversionKnownValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2E66);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // the tie rounds to even: infinity
  EXPECT_EQ(FloatToHalf(1e9f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  // Ties to even in the mantissa: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties to even (zero); 3 * 2^-25 ties up to 2^-23.
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(FloatToHalf(0x1.8p-25f), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(FloatToHalf(1e-10f), 0x0000);
}

TEST(RandomFillTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float f = HalfToFloat(static_cast<uint16_t>(bits));
    const bool is_nan = (bits & 0x7C00) == 0x7C00 && (bits & 0x03FF) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << bits;
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), bits) << bits;
  }
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

TEST(RandomFillTest, BFloat16ConversionKnownValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3F80);                       // tie to even (down)
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3F82);                   // tie to even (up)
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);            // above the tie
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);    // overflows to inf
  const uint16_t nan = FloatToBFloat16(std::bit_cast<float>(0x7F800001u));  // signalling
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(nan)));
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBFloat16(f), bits) << bits;
  }
}

TEST(RandomFillTest, FillRandomCopiesToTheBackend) {
  CpuBackend backend;
  constexpr size_t kCount = (size_t{1} << 20) + 123;  // more than one host chunk
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    const size_t bytes = kCount * ElementSize(type);
    Result<std::unique_ptr<BackendBuffer>> buf = backend.Allocate(bytes);
    ASSERT_TRUE(buf.ok());
    ASSERT_TRUE(FillRandom(backend, (*buf)->data(), kCount, type, 21).ok());
    std::vector<std::byte> want(bytes);
    GenerateRandom(want.data(), kCount, type, 21);
    EXPECT_EQ(std::memcmp((*buf)->data(), want.data(), bytes), 0) << ToString(type);
  }
  EXPECT_EQ(FillRandom(backend, nullptr, 4, DataType::kFloat32, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(FillRandom(backend, nullptr, 0, DataType::kFloat32, 1).ok());
}

TEST(RandomFillTest, FillRandomTiledRepeatsThePeriodOnTheDevice) {
  CpuBackend backend;
  constexpr size_t kPeriod = 1000;
  constexpr size_t kCount = 7 * kPeriod + 321;  // several doublings and a partial last copy
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    const size_t element = ElementSize(type);
    Result<std::unique_ptr<BackendBuffer>> buf = backend.Allocate(kCount * element);
    ASSERT_TRUE(buf.ok());
    ASSERT_TRUE(FillRandomTiled(backend, (*buf)->data(), kCount, type, 5, kPeriod).ok());
    std::vector<std::byte> period(kPeriod * element);
    GenerateRandom(period.data(), kPeriod, type, 5);
    const auto* got = static_cast<const std::byte*>((*buf)->data());
    for (size_t first = 0; first < kCount; first += kPeriod) {
      const size_t n = std::min(kPeriod, kCount - first);
      ASSERT_EQ(std::memcmp(got + first * element, period.data(), n * element), 0)
          << ToString(type) << " at element " << first;
    }
    const std::vector<float> values = ToFloat(got, kCount, type);
    EXPECT_EQ(std::count(values.begin(), values.end(), 0.0f), 0) << ToString(type);
  }
  // Up to one period it is FillRandom exactly.
  Result<std::unique_ptr<BackendBuffer>> small = backend.Allocate(kPeriod * sizeof(float));
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE(
      FillRandomTiled(backend, (*small)->data(), kPeriod, DataType::kFloat32, 9, kPeriod).ok());
  std::vector<float> want(kPeriod);
  GenerateRandom(want.data(), kPeriod, DataType::kFloat32, 9);
  EXPECT_EQ(std::memcmp((*small)->data(), want.data(), kPeriod * sizeof(float)), 0);
  EXPECT_EQ(FillRandomTiled(backend, (*small)->data(), 4, DataType::kFloat32, 1, 0).code(),
            StatusCode::kInvalidArgument);
}

// A backend that cannot copy within its memory gets FillRandom's (untiled) data.
class NoDeviceCopyBackend : public CpuBackend {
 public:
  Status CopyWithinDevice(void*, const void*, size_t) override {
    return Status(StatusCode::kUnsupported, "no device copies here");
  }
};

TEST(RandomFillTest, FillRandomTiledFallsBackToHostData) {
  NoDeviceCopyBackend backend;
  constexpr size_t kCount = 5000;
  Result<std::unique_ptr<BackendBuffer>> buf = backend.Allocate(kCount * sizeof(float));
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(FillRandomTiled(backend, (*buf)->data(), kCount, DataType::kFloat32, 3, 1000).ok());
  std::vector<float> want(kCount);
  GenerateRandom(want.data(), kCount, DataType::kFloat32, 3);
  EXPECT_EQ(std::memcmp((*buf)->data(), want.data(), kCount * sizeof(float)), 0);
}

}  // namespace
}  // namespace ucudnn
