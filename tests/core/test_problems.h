// Problems shared by the core tests: fixed examples and a generator of random valid problems.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>

#include "support/problems.h"
#include "ucudnn/core/problem.h"

namespace ucudnn::testdata {

// ResNet's 3x3 convolution at 56x56, the header's key example.
inline ConvProblem Resnet3x3() { return test_support::SquareConv(ConvOp::kForward, 64, 56, 64); }

// AlexNet's conv2 as backward-data, fp16 data in NHWC on tensor cores.
inline ConvProblem AlexNetConv2BwdData() {
  ConvProblem p;
  p.op = ConvOp::kBackwardData;
  p.c = 96;
  p.h = 27;
  p.w = 27;
  p.k = 256;
  p.r = 5;
  p.s = 5;
  p.pad_h = 2;
  p.pad_w = 2;
  p.data_type = DataType::kFloat16;
  p.compute_type = DataType::kFloat32;
  p.layout = Layout::kNHWC;
  p.math = MathMode::kTensorOp;
  return p;
}

// Every field away from its default: grouped, dilated, strided, non-square, bf16.
inline ConvProblem GroupedDilatedBwdFilter() {
  ConvProblem p;
  p.op = ConvOp::kBackwardFilter;
  p.c = 256;
  p.h = 14;
  p.w = 15;
  p.k = 512;
  p.r = 3;
  p.s = 1;
  p.pad_h = 2;
  p.pad_w = 0;
  p.stride_h = 2;
  p.stride_w = 1;
  p.dilation_h = 2;
  p.dilation_w = 1;
  p.groups = 32;
  p.data_type = DataType::kBFloat16;
  p.compute_type = DataType::kFloat32;
  p.layout = Layout::kNHWC;
  p.math = MathMode::kTensorOpAllowConversion;
  return p;
}

// A value in [lo, hi], log-uniform so that small sizes are common, with the bounds themselves
// drawn often.
inline int64_t DrawSize(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int> pick(0, 9);
  const int choice = pick(rng);
  if (choice == 0) return lo;
  if (choice == 1) return hi;
  std::uniform_real_distribution<double> exponent(std::log(static_cast<double>(lo)),
                                                  std::log(static_cast<double>(hi) + 1));
  return std::clamp(static_cast<int64_t>(std::exp(exponent(rng))), lo, hi);
}

// A random problem that passes Validate(): fields are drawn in dependency order (filter and
// dilation before padding, padding before the input size, groups from the common divisors).
inline ConvProblem RandomValidProblem(std::mt19937_64& rng) {
  while (true) {
    ConvProblem p;
    p.op = static_cast<ConvOp>(std::uniform_int_distribution<int>(0, 2)(rng));
    p.c = DrawSize(rng, 1, kMaxChannels);
    p.k = DrawSize(rng, 1, kMaxChannels);
    p.r = DrawSize(rng, 1, 16);
    p.s = DrawSize(rng, 1, 16);
    p.stride_h = DrawSize(rng, 1, 8);
    p.stride_w = DrawSize(rng, 1, 8);
    p.dilation_h = DrawSize(rng, 1, 4);
    p.dilation_w = DrawSize(rng, 1, 4);
    const int64_t extent_h = (p.r - 1) * p.dilation_h + 1;
    const int64_t extent_w = (p.s - 1) * p.dilation_w + 1;
    p.pad_h = std::uniform_int_distribution<int64_t>(0, extent_h - 1)(rng);
    p.pad_w = std::uniform_int_distribution<int64_t>(0, extent_w - 1)(rng);
    p.h = DrawSize(rng, std::max<int64_t>(1, extent_h - 2 * p.pad_h), 4096);
    p.w = DrawSize(rng, std::max<int64_t>(1, extent_w - 2 * p.pad_w), 4096);
    const int64_t common = std::gcd(p.c, p.k);
    p.groups = 1;
    for (int tries = 0; tries < 8; ++tries) {
      const int64_t g = DrawSize(rng, 1, common);
      if (common % g == 0) {
        p.groups = g;
        break;
      }
    }
    p.data_type = static_cast<DataType>(std::uniform_int_distribution<int>(0, 2)(rng));
    p.compute_type = static_cast<DataType>(std::uniform_int_distribution<int>(0, 2)(rng));
    p.layout = static_cast<Layout>(std::uniform_int_distribution<int>(0, 1)(rng));
    p.math = static_cast<MathMode>(std::uniform_int_distribution<int>(0, 3)(rng));
    // Large channels with large images exceed the element bounds; draw again.
    if (Validate(p).ok()) return p;
  }
}

}  // namespace ucudnn::testdata
