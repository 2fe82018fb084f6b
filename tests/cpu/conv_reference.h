// A straightforward float64 convolution (cross-correlation, NCHW) for checking the backends, and
// helpers shared by the CPU tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ucudnn/core/problem.h"

namespace ucudnn::testing {

// Element counts of the three tensors of `p` at `batch`.
struct TensorSizes {
  size_t x, w, y;
};

inline TensorSizes SizesOf(const ConvProblem& p, int64_t batch) {
  return {static_cast<size_t>(batch * p.input_elements_per_sample()),
          static_cast<size_t>(p.filter_elements()),
          static_cast<size_t>(batch * p.output_elements_per_sample())};
}

// The op's result with alpha = 1, beta = 0, in float64: y for forward, dx for backward-data, dw
// for backward-filter. `a` and `b` are the op's inputs in backend.h's order (x, w) / (dy, w) /
// (x, dy). NC(D)HW; a 2-D problem is one of depth 1.
inline std::vector<double> ReferenceConv(const ConvProblem& p, int64_t batch,
                                         const std::vector<float>& a, const std::vector<float>& b) {
  const int64_t od_n = p.out_d(), oh_n = p.out_h(), ow_n = p.out_w();
  const int64_t cpg = p.c / p.groups, kpg = p.k / p.groups;
  auto x_at = [&](int64_t n, int64_t c, int64_t id, int64_t ih, int64_t iw) {
    return (((n * p.c + c) * p.d + id) * p.h + ih) * p.w + iw;
  };
  auto y_at = [&](int64_t n, int64_t k, int64_t od, int64_t oh, int64_t ow) {
    return (((n * p.k + k) * od_n + od) * oh_n + oh) * ow_n + ow;
  };
  auto w_at = [&](int64_t k, int64_t cg, int64_t t, int64_t r, int64_t s) {
    return (((k * cpg + cg) * p.t + t) * p.r + r) * p.s + s;
  };
  const TensorSizes sizes = SizesOf(p, batch);
  std::vector<double> out(p.op == ConvOp::kForward        ? sizes.y
                          : p.op == ConvOp::kBackwardData ? sizes.x
                                                          : sizes.w,
                          0.0);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t k = 0; k < p.k; ++k) {
      const int64_t g = k / kpg;
      for (int64_t od = 0; od < od_n; ++od) {
        for (int64_t oh = 0; oh < oh_n; ++oh) {
          for (int64_t ow = 0; ow < ow_n; ++ow) {
            for (int64_t cg = 0; cg < cpg; ++cg) {
              const int64_t c = g * cpg + cg;
              for (int64_t t = 0; t < p.t; ++t) {
                const int64_t id = od * p.stride_d - p.pad_d + t * p.dilation_d;
                if (id < 0 || id >= p.d) continue;
                for (int64_t r = 0; r < p.r; ++r) {
                  const int64_t ih = oh * p.stride_h - p.pad_h + r * p.dilation_h;
                  if (ih < 0 || ih >= p.h) continue;
                  for (int64_t s = 0; s < p.s; ++s) {
                    const int64_t iw = ow * p.stride_w - p.pad_w + s * p.dilation_w;
                    if (iw < 0 || iw >= p.w) continue;
                    const int64_t xi = x_at(n, c, id, ih, iw), yi = y_at(n, k, od, oh, ow);
                    const int64_t wi = w_at(k, cg, t, r, s);
                    switch (p.op) {
                      case ConvOp::kForward:
                        out[yi] += double{a[xi]} * double{b[wi]};
                        break;
                      case ConvOp::kBackwardData:
                        out[xi] += double{a[yi]} * double{b[wi]};
                        break;
                      case ConvOp::kBackwardFilter:
                        out[wi] += double{a[xi]} * double{b[yi]};
                        break;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

// ||got - want|| / ||want|| (or ||got|| when want is all zero); NaN or infinity in `got` gives
// infinity.
template <typename Want>
double RelativeL2(const std::vector<float>& got, const std::vector<Want>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = double{got[i]} - double(want[i]);
    diff += d * d;
    norm += double(want[i]) * double(want[i]);
  }
  // An all-zero reference happens: with dilation every tap can miss the image.
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// A random valid small problem: odd sizes, strides 1-3, dilation 1-2, padding, groups 1/2/4 and
// depthwise.
inline ConvProblem RandomSmallProblem(ConvOp op, std::mt19937_64& rng) {
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (;;) {
    ConvProblem p;
    p.op = op;
    const int64_t kind = uniform(0, 3);
    if (kind == 3) {  // depthwise, channel multiplier 1 or 2
      p.groups = uniform(1, 6);
      p.c = p.groups;
      p.k = p.groups * uniform(1, 2);
    } else {
      p.groups = int64_t{1} << kind;  // 1, 2, 4
      p.c = p.groups * uniform(1, 3);
      p.k = p.groups * uniform(1, 3);
    }
    p.h = uniform(1, 11);
    p.w = uniform(1, 11);
    p.r = uniform(1, 4);
    p.s = uniform(1, 4);
    p.dilation_h = uniform(1, 2);
    p.dilation_w = uniform(1, 2);
    p.stride_h = uniform(1, 3);
    p.stride_w = uniform(1, 3);
    p.pad_h = uniform(0, (p.r - 1) * p.dilation_h);
    p.pad_w = uniform(0, (p.s - 1) * p.dilation_w);
    if (Validate(p).ok()) return p;
  }
}

// RandomSmallProblem with a depth: input depth 1-6, filter depth 1-3, depth stride 1-2, dilation
// 1-2 and padding, in 3-D whatever the draw (a depth-1 draw gets depth padding or depth 2).
inline ConvProblem RandomSmall3dProblem(ConvOp op, std::mt19937_64& rng) {
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (;;) {
    ConvProblem p = RandomSmallProblem(op, rng);
    p.h = std::min<int64_t>(p.h, 7);
    p.w = std::min<int64_t>(p.w, 7);
    p.d = uniform(1, 6);
    p.t = uniform(1, 3);
    p.dilation_d = uniform(1, 2);
    p.stride_d = uniform(1, 2);
    p.pad_d = uniform(0, (p.t - 1) * p.dilation_d);
    if (p.d == 1 && p.t == 1 && p.pad_d == 0) p.d = 2;
    if (p.is_3d() && Validate(p).ok()) return p;
  }
}

}  // namespace ucudnn::testing
