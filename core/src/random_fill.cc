#include "ucudnn/core/random_fill.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

namespace ucudnn {
namespace {

// SplitMix64's finalizer: a strong 64-bit mix, so consecutive indices give unrelated values.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Elements generated per host chunk by FillRandom (4 MiB of fp32).
constexpr size_t kChunkElements = size_t{1} << 20;

}  // namespace

float RandomValue(uint64_t seed, uint64_t index) {
  const uint64_t h = Mix64(Mix64(seed) + (index + 1) * 0x9E3779B97F4A7C15ull);
  const float unit = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1)
  const float magnitude = 0.1f + 0.9f * unit;
  return (h & 1) ? -magnitude : magnitude;
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;  // NaN -> quiet NaN
  // 65520 is halfway between the largest half (65504) and 65536; ties-to-even rounds it up.
  if (abs >= 0x477FF000u) return sign | 0x7C00u;
  const uint32_t exponent = abs >> 23;
  if (exponent < 113) {
    // Below the smallest normal half (2^-14): a subnormal m * 2^-24, or zero.
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t result = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  uint32_t result = ((exponent - 112) << 10) | ((abs & 0x7FFFFFu) >> 13);
  const uint32_t rest = abs & 0x1FFFu;
  // A carry out of the mantissa correctly bumps the exponent.
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(sign | result);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

void GenerateRandom(void* host_dst, size_t count, DataType type, uint64_t seed,
                    uint64_t first_index) {
  switch (type) {
    case DataType::kFloat32: {
      auto* out = static_cast<float*>(host_dst);
      for (size_t i = 0; i < count; ++i) out[i] = RandomValue(seed, first_index + i);
      return;
    }
    case DataType::kFloat16: {
      auto* out = static_cast<uint16_t*>(host_dst);
      for (size_t i = 0; i < count; ++i) out[i] = FloatToHalf(RandomValue(seed, first_index + i));
      return;
    }
    case DataType::kBFloat16: {
      auto* out = static_cast<uint16_t*>(host_dst);
      for (size_t i = 0; i < count; ++i) {
        out[i] = FloatToBFloat16(RandomValue(seed, first_index + i));
      }
      return;
    }
  }
}

Status FillRandom(ConvBackend& backend, void* device_dst, size_t count, DataType type,
                  uint64_t seed) {
  if (count == 0) return Status::Ok();
  if (device_dst == nullptr) {
    return InvalidArgument(fmt::format("device_dst: null for {} elements", count));
  }
  const size_t element = ElementSize(type);
  std::vector<std::byte> chunk(std::min(count, kChunkElements) * element);
  for (size_t first = 0; first < count; first += kChunkElements) {
    const size_t n = std::min(kChunkElements, count - first);
    GenerateRandom(chunk.data(), n, type, seed, first);
    UCUDNN_RETURN_IF_ERROR(backend.CopyToDevice(static_cast<char*>(device_dst) + first * element,
                                                chunk.data(), n * element));
  }
  return Status::Ok();
}

Status FillRandomTiled(ConvBackend& backend, void* device_dst, size_t count, DataType type,
                       uint64_t seed, size_t period) {
  if (period == 0) return InvalidArgument("FillRandomTiled: period must be positive");
  if (count <= period) return FillRandom(backend, device_dst, count, type, seed);
  UCUDNN_RETURN_IF_ERROR(FillRandom(backend, device_dst, period, type, seed));
  const size_t element = ElementSize(type);
  auto* base = static_cast<char*>(device_dst);
  // Doubling: [0, filled) is copied to [filled, 2 * filled); every copy is whole periods, so
  // element i keeps the value of i % period.
  for (size_t filled = period; filled < count;) {
    const size_t n = std::min(filled, count - filled);
    const Status copied = backend.CopyWithinDevice(base + filled * element, base, n * element);
    if (copied.code() == StatusCode::kUnsupported) {
      return FillRandom(backend, device_dst, count, type, seed);
    }
    UCUDNN_RETURN_IF_ERROR(copied);
    filled += n;
  }
  return Status::Ok();
}

std::vector<float> ToFloat(const void* host, size_t count, DataType type) {
  std::vector<float> out(count);
  switch (type) {
    case DataType::kFloat32: {
      const auto* in = static_cast<const float*>(host);
      std::copy(in, in + count, out.begin());
      break;
    }
    case DataType::kFloat16: {
      const auto* in = static_cast<const uint16_t*>(host);
      for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(in[i]);
      break;
    }
    case DataType::kBFloat16: {
      const auto* in = static_cast<const uint16_t*>(host);
      for (size_t i = 0; i < count; ++i) out[i] = BFloat16ToFloat(in[i]);
      break;
    }
  }
  return out;
}

}  // namespace ucudnn
