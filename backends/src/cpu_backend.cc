#include "ucudnn/backends/cpu_backend.h"

#include <cblas.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ucudnn/core/algorithm_names.h"
#include "ucudnn/core/executor.h"
#include "ucudnn/core/random_fill.h"

namespace ucudnn {
namespace {

constexpr size_t kAlignment = 64;

class HostBuffer : public BackendBuffer {
 public:
  HostBuffer(void* data, size_t size) : data_(data), size_(size) {}
  ~HostBuffer() override { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

// The sizes of one call, as element counts and strides that index NC(D)HW tensors. A 2-D problem
// is a 3-D one of depth 1: every loop below runs over filter rows (t, r) and output rows
// (out_d, out_h), one each way in 2-D.
struct Geometry {
  int64_t n, c, d, h, w, k, t, r, s;
  int64_t out_d, out_h, out_w;
  int64_t pad_d, pad_h, pad_w, stride_d, stride_h, stride_w, dil_d, dil_h, dil_w;
  int64_t groups;
  int64_t c_per_group, k_per_group;
  int64_t in_plane;     // d * h * w
  int64_t out_plane;    // out_d * out_h * out_w
  int64_t filter_rows;  // t * r
  int64_t crs;          // c_per_group * t * r * s: the rows of a group's im2col matrix
};

Geometry MakeGeometry(const ConvProblem& p, int64_t batch) {
  Geometry g{};
  g.n = batch;
  g.c = p.c;
  g.d = p.d;
  g.h = p.h;
  g.w = p.w;
  g.k = p.k;
  g.t = p.t;
  g.r = p.r;
  g.s = p.s;
  g.out_d = p.out_d();
  g.out_h = p.out_h();
  g.out_w = p.out_w();
  g.pad_d = p.pad_d;
  g.pad_h = p.pad_h;
  g.pad_w = p.pad_w;
  g.stride_d = p.stride_d;
  g.stride_h = p.stride_h;
  g.stride_w = p.stride_w;
  g.dil_d = p.dilation_d;
  g.dil_h = p.dilation_h;
  g.dil_w = p.dilation_w;
  g.groups = p.groups;
  g.c_per_group = p.c / p.groups;
  g.k_per_group = p.k / p.groups;
  g.in_plane = g.d * g.h * g.w;
  g.out_plane = g.out_d * g.out_h * g.out_w;
  g.filter_rows = g.t * g.r;
  g.crs = g.c_per_group * g.filter_rows * g.s;
  return g;
}

// The output positions o in [lo, hi) whose input position o * stride + offset lies in [0, in).
struct Range {
  int64_t lo;
  int64_t hi;
};

Range ValidOutputs(int64_t out, int64_t in, int64_t stride, int64_t offset) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = offset > in - 1 ? 0 : (in - 1 - offset) / stride + 1;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
  return {lo, hi};
}

// Filter row `row` (tt * r + rr): the output rows whose input row it reaches in depth and height.
struct FilterRow {
  int64_t d_off, h_off;
  Range depths, rows;
};

FilterRow MakeFilterRow(const Geometry& g, int64_t row) {
  FilterRow f{};
  f.d_off = (row / g.r) * g.dil_d - g.pad_d;
  f.h_off = (row % g.r) * g.dil_h - g.pad_h;
  f.depths = ValidOutputs(g.out_d, g.d, g.stride_d, f.d_off);
  f.rows = ValidOutputs(g.out_h, g.h, g.stride_h, f.h_off);
  return f;
}

// Calls visit(out_row, in_row) for every output row (od * out_h + oh) that filter row `f` reaches
// inside the input, with the input row (id * h + ih) it reads.
template <typename Visit>
void ForEachReachedRow(const Geometry& g, const FilterRow& f, Visit visit) {
  for (int64_t od = f.depths.lo; od < f.depths.hi; ++od) {
    const int64_t in_depth = od * g.stride_d + f.d_off;
    for (int64_t oh = f.rows.lo; oh < f.rows.hi; ++oh) {
      visit(od * g.out_h + oh, in_depth * g.h + oh * g.stride_h + f.h_off);
    }
  }
}

// dst = beta * dst, without reading dst when beta is 0 (cuDNN's rule: then it may hold NaN).
void ScaleOrZero(float* dst, int64_t count, float beta) {
  if (beta == 0.0f) {
    std::fill(dst, dst + count, 0.0f);
  } else if (beta != 1.0f) {
    for (int64_t i = 0; i < count; ++i) dst[i] *= beta;
  }
}

bool FitsBlasInt(int64_t v) { return v <= INT_MAX; }

// ---- direct ----------------------------------------------------------------------------------

void ForwardDirect(const Geometry& g, const float* x, const float* w, float* y, float alpha,
                   float beta) {
  ScaleOrZero(y, g.n * g.k * g.out_plane, beta);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t kk = 0; kk < g.k; ++kk) {
      const int64_t group = kk / g.k_per_group;
      float* y_plane = y + (n * g.k + kk) * g.out_plane;
      for (int64_t cg = 0; cg < g.c_per_group; ++cg) {
        const float* x_plane = x + (n * g.c + group * g.c_per_group + cg) * g.in_plane;
        const float* w_rs = w + (kk * g.c_per_group + cg) * g.filter_rows * g.s;
        for (int64_t row = 0; row < g.filter_rows; ++row) {
          const FilterRow f = MakeFilterRow(g, row);
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t w_off = s * g.dil_w - g.pad_w;
            const Range cols = ValidOutputs(g.out_w, g.w, g.stride_w, w_off);
            const float weight = alpha * w_rs[row * g.s + s];
            ForEachReachedRow(g, f, [&](int64_t out_row, int64_t in_row) {
              const float* x_row = x_plane + in_row * g.w + w_off;
              float* y_row = y_plane + out_row * g.out_w;
              if (g.stride_w == 1) {
                for (int64_t ow = cols.lo; ow < cols.hi; ++ow) y_row[ow] += weight * x_row[ow];
              } else {
                for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
                  y_row[ow] += weight * x_row[ow * g.stride_w];
                }
              }
            });
          }
        }
      }
    }
  }
}

void BackwardDataDirect(const Geometry& g, const float* dy, const float* w, float* dx, float alpha,
                        float beta) {
  ScaleOrZero(dx, g.n * g.c * g.in_plane, beta);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t kk = 0; kk < g.k; ++kk) {
      const int64_t group = kk / g.k_per_group;
      const float* dy_plane = dy + (n * g.k + kk) * g.out_plane;
      for (int64_t cg = 0; cg < g.c_per_group; ++cg) {
        float* dx_plane = dx + (n * g.c + group * g.c_per_group + cg) * g.in_plane;
        const float* w_rs = w + (kk * g.c_per_group + cg) * g.filter_rows * g.s;
        for (int64_t row = 0; row < g.filter_rows; ++row) {
          const FilterRow f = MakeFilterRow(g, row);
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t w_off = s * g.dil_w - g.pad_w;
            const Range cols = ValidOutputs(g.out_w, g.w, g.stride_w, w_off);
            const float weight = alpha * w_rs[row * g.s + s];
            ForEachReachedRow(g, f, [&](int64_t out_row, int64_t in_row) {
              float* dx_row = dx_plane + in_row * g.w + w_off;
              const float* dy_row = dy_plane + out_row * g.out_w;
              for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
                dx_row[ow * g.stride_w] += weight * dy_row[ow];
              }
            });
          }
        }
      }
    }
  }
}

void BackwardFilterDirect(const Geometry& g, const float* x, const float* dy, float* dw,
                          float alpha, float beta) {
  for (int64_t kk = 0; kk < g.k; ++kk) {
    const int64_t group = kk / g.k_per_group;
    for (int64_t cg = 0; cg < g.c_per_group; ++cg) {
      for (int64_t row = 0; row < g.filter_rows; ++row) {
        const FilterRow f = MakeFilterRow(g, row);
        for (int64_t s = 0; s < g.s; ++s) {
          const int64_t w_off = s * g.dil_w - g.pad_w;
          const Range cols = ValidOutputs(g.out_w, g.w, g.stride_w, w_off);
          // A sum over the whole batch and image: double keeps the reference accurate.
          double sum = 0.0;
          for (int64_t n = 0; n < g.n; ++n) {
            const float* x_plane = x + (n * g.c + group * g.c_per_group + cg) * g.in_plane;
            const float* dy_plane = dy + (n * g.k + kk) * g.out_plane;
            ForEachReachedRow(g, f, [&](int64_t out_row, int64_t in_row) {
              const float* x_row = x_plane + in_row * g.w + w_off;
              const float* dy_row = dy_plane + out_row * g.out_w;
              float row_sum = 0.0f;
              for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
                row_sum += x_row[ow * g.stride_w] * dy_row[ow];
              }
              sum += row_sum;
            });
          }
          float& out = dw[((kk * g.c_per_group + cg) * g.filter_rows + row) * g.s + s];
          const float scaled = alpha * static_cast<float>(sum);
          out = beta == 0.0f ? scaled : scaled + beta * out;
        }
      }
    }
  }
}

// ---- im2col + GEMM ---------------------------------------------------------------------------

// Writes the im2col matrix of sample `n`, group `group` into `col`: row (cg, t, r, s), column
// `col_offset + (od * out_h + oh) * out_w + ow` of a matrix with leading dimension `ld`.
void Im2col(const Geometry& g, const float* x, int64_t n, int64_t group, float* col, int64_t ld,
            int64_t col_offset) {
  for (int64_t cg = 0; cg < g.c_per_group; ++cg) {
    const float* x_plane = x + (n * g.c + group * g.c_per_group + cg) * g.in_plane;
    for (int64_t row = 0; row < g.filter_rows; ++row) {
      const FilterRow f = MakeFilterRow(g, row);
      for (int64_t s = 0; s < g.s; ++s) {
        const int64_t w_off = s * g.dil_w - g.pad_w;
        const Range cols = ValidOutputs(g.out_w, g.w, g.stride_w, w_off);
        float* col_row = col + ((cg * g.filter_rows + row) * g.s + s) * ld + col_offset;
        // Rows the filter row reaches outside the input read zeros.
        std::fill(col_row, col_row + g.out_plane, 0.0f);
        ForEachReachedRow(g, f, [&](int64_t out_row, int64_t in_row) {
          float* out = col_row + out_row * g.out_w;
          const float* x_row = x_plane + in_row * g.w + w_off;
          if (g.stride_w == 1) {
            std::copy(x_row + cols.lo, x_row + cols.hi, out + cols.lo);
          } else {
            for (int64_t ow = cols.lo; ow < cols.hi; ++ow) out[ow] = x_row[ow * g.stride_w];
          }
        });
      }
    }
  }
}

// The inverse scatter of Im2col: adds each column entry into sample `n`, group `group` of dx.
void Col2imAdd(const Geometry& g, const float* col, int64_t ld, int64_t col_offset, int64_t n,
               int64_t group, float* dx) {
  for (int64_t cg = 0; cg < g.c_per_group; ++cg) {
    float* dx_plane = dx + (n * g.c + group * g.c_per_group + cg) * g.in_plane;
    for (int64_t row = 0; row < g.filter_rows; ++row) {
      const FilterRow f = MakeFilterRow(g, row);
      for (int64_t s = 0; s < g.s; ++s) {
        const int64_t w_off = s * g.dil_w - g.pad_w;
        const Range cols = ValidOutputs(g.out_w, g.w, g.stride_w, w_off);
        const float* col_row = col + ((cg * g.filter_rows + row) * g.s + s) * ld + col_offset;
        ForEachReachedRow(g, f, [&](int64_t out_row, int64_t in_row) {
          const float* in = col_row + out_row * g.out_w;
          float* dx_row = dx_plane + in_row * g.w + w_off;
          for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dx_row[ow * g.stride_w] += in[ow];
        });
      }
    }
  }
}

// Row-major sgemm: C (m x n) = alpha * op(A) * op(B) + beta * C. Callers checked that every
// dimension fits the BLAS int.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// Whole-batch workspace: the group's im2col matrix (crs x n*P), then a k_per_group x n*P matrix
// (the GEMM result for forward, dy gathered for the backward ops).
struct WholeBatchWorkspace {
  float* col;
  float* mat;
  int64_t ld;  // n * out_plane
};

WholeBatchWorkspace SplitWorkspace(const Geometry& g, void* workspace) {
  WholeBatchWorkspace ws{};
  ws.ld = g.n * g.out_plane;
  ws.col = static_cast<float*>(workspace);
  ws.mat = ws.col + g.crs * ws.ld;
  return ws;
}

// mat (k_per_group x n*P) <- the group's channels of dy, sample after sample.
void GatherGroup(const Geometry& g, const float* dy, int64_t group, float* mat, int64_t ld) {
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t kk = 0; kk < g.k_per_group; ++kk) {
      const float* src = dy + (n * g.k + group * g.k_per_group + kk) * g.out_plane;
      std::copy(src, src + g.out_plane, mat + kk * ld + n * g.out_plane);
    }
  }
}

void ForwardIm2colGemm(const Geometry& g, const float* x, const float* w, float* y, float alpha,
                       float beta, void* workspace) {
  const WholeBatchWorkspace ws = SplitWorkspace(g, workspace);
  for (int64_t group = 0; group < g.groups; ++group) {
    for (int64_t n = 0; n < g.n; ++n) Im2col(g, x, n, group, ws.col, ws.ld, n * g.out_plane);
    // BLAS libraries differ on whether beta = 0 reads C; zeroing keeps stale NaNs out.
    std::fill(ws.mat, ws.mat + g.k_per_group * ws.ld, 0.0f);
    Sgemm(false, false, g.k_per_group, ws.ld, g.crs, 1.0f, w + group * g.k_per_group * g.crs, g.crs,
          ws.col, ws.ld, 0.0f, ws.mat, ws.ld);
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t kk = 0; kk < g.k_per_group; ++kk) {
        const float* src = ws.mat + kk * ws.ld + n * g.out_plane;
        float* dst = y + (n * g.k + group * g.k_per_group + kk) * g.out_plane;
        if (beta == 0.0f) {
          for (int64_t i = 0; i < g.out_plane; ++i) dst[i] = alpha * src[i];
        } else {
          for (int64_t i = 0; i < g.out_plane; ++i) dst[i] = alpha * src[i] + beta * dst[i];
        }
      }
    }
  }
}

void ForwardIm2colGemmPerSample(const Geometry& g, const float* x, const float* w, float* y,
                                float alpha, float beta, void* workspace) {
  float* col = static_cast<float*>(workspace);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t group = 0; group < g.groups; ++group) {
      Im2col(g, x, n, group, col, g.out_plane, 0);
      float* y_group = y + (n * g.k + group * g.k_per_group) * g.out_plane;
      if (beta == 0.0f) std::fill(y_group, y_group + g.k_per_group * g.out_plane, 0.0f);
      Sgemm(false, false, g.k_per_group, g.out_plane, g.crs, alpha,
            w + group * g.k_per_group * g.crs, g.crs, col, g.out_plane, beta, y_group, g.out_plane);
    }
  }
}

void BackwardDataIm2colGemm(const Geometry& g, const float* dy, const float* w, float* dx,
                            float alpha, float beta, void* workspace) {
  const WholeBatchWorkspace ws = SplitWorkspace(g, workspace);
  ScaleOrZero(dx, g.n * g.c * g.in_plane, beta);
  for (int64_t group = 0; group < g.groups; ++group) {
    GatherGroup(g, dy, group, ws.mat, ws.ld);
    std::fill(ws.col, ws.col + g.crs * ws.ld, 0.0f);
    // col (crs x n*P) = alpha * w_group^T (crs x k_per_group) * dy_group (k_per_group x n*P)
    Sgemm(true, false, g.crs, ws.ld, g.k_per_group, alpha, w + group * g.k_per_group * g.crs, g.crs,
          ws.mat, ws.ld, 0.0f, ws.col, ws.ld);
    for (int64_t n = 0; n < g.n; ++n) Col2imAdd(g, ws.col, ws.ld, n * g.out_plane, n, group, dx);
  }
}

void BackwardDataIm2colGemmPerSample(const Geometry& g, const float* dy, const float* w, float* dx,
                                     float alpha, float beta, void* workspace) {
  float* col = static_cast<float*>(workspace);
  ScaleOrZero(dx, g.n * g.c * g.in_plane, beta);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t group = 0; group < g.groups; ++group) {
      const float* dy_group = dy + (n * g.k + group * g.k_per_group) * g.out_plane;
      std::fill(col, col + g.crs * g.out_plane, 0.0f);
      Sgemm(true, false, g.crs, g.out_plane, g.k_per_group, alpha,
            w + group * g.k_per_group * g.crs, g.crs, dy_group, g.out_plane, 0.0f, col,
            g.out_plane);
      Col2imAdd(g, col, g.out_plane, 0, n, group, dx);
    }
  }
}

void BackwardFilterIm2colGemm(const Geometry& g, const float* x, const float* dy, float* dw,
                              float alpha, float beta, void* workspace) {
  const WholeBatchWorkspace ws = SplitWorkspace(g, workspace);
  if (beta == 0.0f) std::fill(dw, dw + g.k * g.crs, 0.0f);
  for (int64_t group = 0; group < g.groups; ++group) {
    for (int64_t n = 0; n < g.n; ++n) Im2col(g, x, n, group, ws.col, ws.ld, n * g.out_plane);
    GatherGroup(g, dy, group, ws.mat, ws.ld);
    // dw_group (k_per_group x crs) = alpha * dy_group (k_per_group x n*P) * col^T + beta * dw
    Sgemm(false, true, g.k_per_group, g.crs, ws.ld, alpha, ws.mat, ws.ld, ws.col, ws.ld, beta,
          dw + group * g.k_per_group * g.crs, g.crs);
  }
}

void BackwardFilterIm2colGemmPerSample(const Geometry& g, const float* x, const float* dy,
                                       float* dw, float alpha, float beta, void* workspace) {
  float* col = static_cast<float*>(workspace);
  ScaleOrZero(dw, g.k * g.crs, beta);
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t group = 0; group < g.groups; ++group) {
      Im2col(g, x, n, group, col, g.out_plane, 0);
      const float* dy_group = dy + (n * g.k + group * g.k_per_group) * g.out_plane;
      Sgemm(false, true, g.k_per_group, g.crs, g.out_plane, alpha, dy_group, g.out_plane, col,
            g.out_plane, 1.0f, dw + group * g.k_per_group * g.crs, g.crs);
    }
  }
}

// ---- checks ----------------------------------------------------------------------------------

std::string AlgoName(int algo) {
  std::string name = AlgorithmName("cpu", ConvOp::kForward, algo);
  return name.empty() ? "unknown" : name;
}

// Invalid input is kInvalidArgument; a valid problem this backend cannot run is kUnsupported.
Status CheckProblem(const ConvProblem& problem, int64_t batch, int algo) {
  UCUDNN_RETURN_IF_ERROR(Validate(problem).WithContext("problem"));
  UCUDNN_RETURN_IF_ERROR(ValidateBatch(batch));
  if (algo < 0 || algo >= kCpuAlgoCount) {
    return InvalidArgument(
        fmt::format("algo: the cpu backend has algorithms 0..{}, got {}", kCpuAlgoCount - 1, algo));
  }
  if (problem.compute_type != DataType::kFloat32) {
    return Unsupported(fmt::format("compute_type: the cpu backend computes in fp32 only, got {}",
                                   ToString(problem.compute_type)));
  }
  return Status::Ok();
}

// ---- fp16, bf16 and NHWC ----------------------------------------------------------------------
// The kernels compute in fp32 NCHW. Other tensors are widened (and transposed from channels-last)
// into fp32 NCHW copies, and the result narrowed back: the CPU backend stands in for a GPU in CI,
// so it must run every problem the cluster plans, not run it fast (the copies are timed too, and
// live outside the workspace).

// The dimensions of a 4-d tensor in NCHW order; a filter is (k, c / groups, r, s), which
// channels-last stores as k r s c. A 3-D tensor folds its depth into the height (n, c, d * h, w):
// NCDHW and NDHWC index it exactly so.
struct Dims {
  int64_t n, c, h, w;
  size_t count() const { return static_cast<size_t>(n * c * h * w); }
};

// Element (n, c, h, w)'s position in memory of `layout`.
size_t Offset(const Dims& d, Layout layout, int64_t n, int64_t c, int64_t h, int64_t w) {
  return static_cast<size_t>(layout == Layout::kNHWC ? ((n * d.h + h) * d.w + w) * d.c + c
                                                     : ((n * d.c + c) * d.h + h) * d.w + w);
}

float LoadElement(const void* data, DataType type, size_t i) {
  switch (type) {
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kFloat32:
      break;
  }
  return static_cast<const float*>(data)[i];
}

void StoreElement(void* data, DataType type, size_t i, float value) {
  switch (type) {
    case DataType::kFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToHalf(value);
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = FloatToBFloat16(value);
      return;
    case DataType::kFloat32:
      break;
  }
  static_cast<float*>(data)[i] = value;
}

// Calls f(nchw_index, memory_index) for every element.
template <typename F>
void ForEachElement(const Dims& d, Layout layout, F f) {
  size_t i = 0;
  for (int64_t n = 0; n < d.n; ++n) {
    for (int64_t c = 0; c < d.c; ++c) {
      for (int64_t h = 0; h < d.h; ++h) {
        for (int64_t w = 0; w < d.w; ++w) f(i++, Offset(d, layout, n, c, h, w));
      }
    }
  }
}

std::vector<float> WidenToNchw(const void* data, const ConvProblem& p, const Dims& d) {
  std::vector<float> out(d.count());
  ForEachElement(d, p.layout,
                 [&](size_t i, size_t at) { out[i] = LoadElement(data, p.data_type, at); });
  return out;
}

void NarrowFromNchw(const std::vector<float>& nchw, const ConvProblem& p, const Dims& d,
                    void* data) {
  ForEachElement(d, p.layout,
                 [&](size_t i, size_t at) { StoreElement(data, p.data_type, at, nchw[i]); });
}

// a * b * ... in 64 bits, or nothing on overflow.
bool CheckedProduct(std::initializer_list<uint64_t> factors, uint64_t* out) {
  uint64_t product = 1;
  for (uint64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return false;
  }
  *out = product;
  return true;
}

// The CPU backend has legacy-style numbered algorithms only; an engine configuration is cuDNN's.
Result<int> LegacyId(const Algorithm& algorithm) {
  if (algorithm.is_engine()) {
    return Unsupported("the cpu backend has no engine configurations (got " +
                       std::string(algorithm.engine_config) + ")");
  }
  return algorithm.id;
}

Result<size_t> WorkspaceBytes(const Geometry& g, int algo) {
  if (algo == kCpuAlgoDirect) return size_t{0};
  const bool whole_batch = algo == kCpuAlgoIm2colGemm;
  const int64_t columns = whole_batch ? g.n * g.out_plane : g.out_plane;
  // Every GEMM dimension and leading dimension must fit OpenBLAS's int.
  if (!FitsBlasInt(columns) || !FitsBlasInt(g.crs)) {
    return Unsupported(fmt::format("{}: GEMM of {} x {} exceeds the BLAS integer range",
                                   AlgoName(algo), g.crs, columns));
  }
  const uint64_t rows = whole_batch ? g.crs + g.k_per_group : g.crs;
  uint64_t bytes = 0;
  if (!CheckedProduct({rows, static_cast<uint64_t>(columns), sizeof(float)}, &bytes) ||
      bytes > static_cast<uint64_t>(SIZE_MAX)) {
    return Unsupported(fmt::format("{}: workspace exceeds the address space", AlgoName(algo)));
  }
  return static_cast<size_t>(bytes);
}

Status CheckOperands(ConvOp op, const ConvOperands& o) {
  auto need = [op](const void* p, const char* name) {
    if (p != nullptr) return Status::Ok();
    return InvalidArgument(fmt::format("operands.{}: null, but {} needs it", name, ToString(op)));
  };
  switch (op) {
    case ConvOp::kForward:
      UCUDNN_RETURN_IF_ERROR(need(o.x, "x"));
      UCUDNN_RETURN_IF_ERROR(need(o.w, "w"));
      return need(o.y, "y");
    case ConvOp::kBackwardData:
      UCUDNN_RETURN_IF_ERROR(need(o.dy, "dy"));
      UCUDNN_RETURN_IF_ERROR(need(o.w, "w"));
      return need(o.dx, "dx");
    case ConvOp::kBackwardFilter:
      UCUDNN_RETURN_IF_ERROR(need(o.x, "x"));
      UCUDNN_RETURN_IF_ERROR(need(o.dy, "dy"));
      return need(o.dw, "dw");
  }
  return InvalidArgument("op: unknown convolution op");
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options) {
  if (options.blas_threads > 0) openblas_set_num_threads(options.blas_threads);
  // The threads OpenBLAS actually runs (its own choice for 0, capped at its build's maximum):
  // they are part of the device, since timings at N threads are not 1-thread timings.
  fingerprint_ = CpuFingerprint(openblas_get_num_threads());
  spdlog::debug("cpu backend: {} (BLAS threads: {})", fingerprint_.name,
                openblas_get_num_threads());
}

std::vector<AlgorithmInfo> CpuBackend::Algorithms(ConvOp /*op*/) const { return CpuAlgorithms(); }

Result<size_t> CpuBackend::WorkspaceSize(const ConvProblem& problem, int64_t batch,
                                         const Algorithm& algorithm) {
  UCUDNN_ASSIGN_OR_RETURN(const int algo, LegacyId(algorithm));
  UCUDNN_RETURN_IF_ERROR(CheckProblem(problem, batch, algo));
  return WorkspaceBytes(MakeGeometry(problem, batch), algo);
}

Status CpuBackend::Run(const ConvProblem& problem, int64_t batch, const Algorithm& algorithm,
                       const ConvOperands& operands, void* workspace, size_t workspace_bytes,
                       float alpha, float beta) {
  UCUDNN_ASSIGN_OR_RETURN(const int algo, LegacyId(algorithm));
  UCUDNN_RETURN_IF_ERROR(CheckProblem(problem, batch, algo));
  const Geometry g = MakeGeometry(problem, batch);
  UCUDNN_ASSIGN_OR_RETURN(const size_t needed, WorkspaceBytes(g, algo));
  if (workspace_bytes < needed) {
    return InvalidArgument(fmt::format("workspace_bytes: {} at batch {} needs {} bytes, got {}",
                                       AlgoName(algo), batch, needed, workspace_bytes));
  }
  if (needed > 0 && workspace == nullptr) {
    return InvalidArgument(
        fmt::format("workspace: null, but {} needs {} bytes", AlgoName(algo), needed));
  }
  UCUDNN_RETURN_IF_ERROR(CheckOperands(problem.op, operands));
  if (problem.data_type != DataType::kFloat32 || problem.layout != Layout::kNCHW) {
    return RunConverted(problem, batch, algo, operands, workspace, workspace_bytes, alpha, beta);
  }

  const auto* x = static_cast<const float*>(operands.x);
  const auto* w = static_cast<const float*>(operands.w);
  const auto* dy = static_cast<const float*>(operands.dy);
  switch (problem.op) {
    case ConvOp::kForward: {
      auto* y = static_cast<float*>(operands.y);
      if (algo == kCpuAlgoDirect) ForwardDirect(g, x, w, y, alpha, beta);
      if (algo == kCpuAlgoIm2colGemm) ForwardIm2colGemm(g, x, w, y, alpha, beta, workspace);
      if (algo == kCpuAlgoIm2colGemmPerSample) {
        ForwardIm2colGemmPerSample(g, x, w, y, alpha, beta, workspace);
      }
      break;
    }
    case ConvOp::kBackwardData: {
      auto* dx = static_cast<float*>(operands.dx);
      if (algo == kCpuAlgoDirect) BackwardDataDirect(g, dy, w, dx, alpha, beta);
      if (algo == kCpuAlgoIm2colGemm) {
        BackwardDataIm2colGemm(g, dy, w, dx, alpha, beta, workspace);
      }
      if (algo == kCpuAlgoIm2colGemmPerSample) {
        BackwardDataIm2colGemmPerSample(g, dy, w, dx, alpha, beta, workspace);
      }
      break;
    }
    case ConvOp::kBackwardFilter: {
      auto* dw = static_cast<float*>(operands.dw);
      if (algo == kCpuAlgoDirect) BackwardFilterDirect(g, x, dy, dw, alpha, beta);
      if (algo == kCpuAlgoIm2colGemm) {
        BackwardFilterIm2colGemm(g, x, dy, dw, alpha, beta, workspace);
      }
      if (algo == kCpuAlgoIm2colGemmPerSample) {
        BackwardFilterIm2colGemmPerSample(g, x, dy, dw, alpha, beta, workspace);
      }
      break;
    }
  }
  return Status::Ok();
}

Status CpuBackend::RunConverted(const ConvProblem& problem, int64_t batch, int algo,
                                const ConvOperands& operands, void* workspace,
                                size_t workspace_bytes, float alpha, float beta) {
  const Dims x_dims{batch, problem.c, problem.d * problem.h, problem.w};
  const Dims y_dims{batch, problem.k, problem.out_d() * problem.out_h(), problem.out_w()};
  const Dims w_dims{problem.k, problem.c / problem.groups, problem.t * problem.r, problem.s};
  // The op's two inputs and its output, as fp32 NCHW copies.
  std::vector<float> x, w, dy, out;
  void* out_data = nullptr;
  Dims out_dims{};
  ConvOperands nchw;
  if (operands.x != nullptr && problem.op != ConvOp::kBackwardData) {
    x = WidenToNchw(operands.x, problem, x_dims);
    nchw.x = x.data();
  }
  if (operands.w != nullptr && problem.op != ConvOp::kBackwardFilter) {
    w = WidenToNchw(operands.w, problem, w_dims);
    nchw.w = w.data();
  }
  if (operands.dy != nullptr && problem.op != ConvOp::kForward) {
    dy = WidenToNchw(operands.dy, problem, y_dims);
    nchw.dy = dy.data();
  }
  switch (problem.op) {
    case ConvOp::kForward:
      out_data = operands.y;
      out_dims = y_dims;
      break;
    case ConvOp::kBackwardData:
      out_data = operands.dx;
      out_dims = x_dims;
      break;
    case ConvOp::kBackwardFilter:
      out_data = operands.dw;
      out_dims = w_dims;
      break;
  }
  // beta = 0 must not read the output (it may hold anything, NaN included).
  out = beta == 0.0f ? std::vector<float>(out_dims.count())
                     : WidenToNchw(out_data, problem, out_dims);
  (problem.op == ConvOp::kForward        ? nchw.y
   : problem.op == ConvOp::kBackwardData ? nchw.dx
                                         : nchw.dw) = out.data();
  ConvProblem fp32 = problem;
  fp32.data_type = DataType::kFloat32;
  fp32.layout = Layout::kNCHW;
  UCUDNN_RETURN_IF_ERROR(Run(fp32, batch, algo, nchw, workspace, workspace_bytes, alpha, beta));
  NarrowFromNchw(out, problem, out_dims, out_data);
  return Status::Ok();
}

Result<std::unique_ptr<BackendBuffer>> CpuBackend::Allocate(size_t bytes) {
  // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a real,
  // non-null pointer so callers never special-case it.
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) {
    return ResourceExhausted(fmt::format("allocation of {} bytes overflows", bytes));
  }
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data == nullptr) {
    return ResourceExhausted(fmt::format("host allocation of {} bytes failed", bytes));
  }
  return std::unique_ptr<BackendBuffer>(new HostBuffer(data, bytes));
}

// Host and "device" memory are the same on this backend: every copy is a checked memcpy.
static Status HostCopy(const char* what, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) {
    return InvalidArgument(std::string(what) + ": null pointer for a non-empty copy");
  }
  std::memcpy(dst, src, bytes);
  return Status::Ok();
}

Status CpuBackend::CopyToDevice(void* device_dst, const void* host_src, size_t bytes) {
  return HostCopy("CopyToDevice", device_dst, host_src, bytes);
}

Status CpuBackend::CopyWithinDevice(void* device_dst, const void* device_src, size_t bytes) {
  return HostCopy("CopyWithinDevice", device_dst, device_src, bytes);
}

Status CpuBackend::CopyToHost(void* host_dst, const void* device_src, size_t bytes) {
  return HostCopy("CopyToHost", host_dst, device_src, bytes);
}

Result<std::vector<double>> CpuBackend::TimeRuns(const ConvProblem& problem, int64_t batch,
                                                 const Algorithm& algo,
                                                 const ConvOperands& operands, void* workspace,
                                                 size_t workspace_bytes, int warmup, int runs) {
  if (warmup < 0) return InvalidArgument(fmt::format("warmup: must be >= 0, got {}", warmup));
  if (runs < 1) return InvalidArgument(fmt::format("runs: must be >= 1, got {}", runs));
  // Timed runs overwrite the output (beta = 0), as a benchmark on a GPU does, each on the next
  // slice of the operands (TimedRunOperands).
  int64_t run_index = 0;
  const auto run_once = [&] {
    return Run(problem, batch, algo, TimedRunOperands(problem, operands, batch, run_index++),
               workspace, workspace_bytes, 1.0f, 0.0f);
  };
  for (int i = 0; i < warmup; ++i) {
    UCUDNN_RETURN_IF_ERROR(run_once());
  }
  std::vector<double> times_ms;
  times_ms.reserve(runs);
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    UCUDNN_RETURN_IF_ERROR(run_once());
    const auto stop = std::chrono::steady_clock::now();
    times_ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return times_ms;
}

}  // namespace ucudnn
