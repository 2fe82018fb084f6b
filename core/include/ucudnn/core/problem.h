// The convolution problem model: one kernel of a network, batch size excluded (docs/design.md,
// "Data model"; the key's format: docs/problem-key.md).
// A problem's canonical key and stable hash identify it in the database on every machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ucudnn/core/status.h"

namespace ucudnn {

enum class ConvOp { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };
enum class DataType { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
enum class Layout { kNCHW = 0, kNHWC = 1 };
// cuDNN's math types; the CPU backend computes in fp32 whatever is asked. kFma is strict fp32
// (no TF32, no tensor cores): what PyTorch asks for when TF32 is disabled.
enum class MathMode { kDefault = 0, kTensorOp = 1, kTensorOpAllowConversion = 2, kFma = 3 };

// Short, stable names used in canonical keys, CSV files, the database and the CLI:
// "fwd" "bwd_data" "bwd_filter"; "fp32" "fp16" "bf16"; "nchw" "nhwc"; "default" "tensor_op"
// "tensor_op_allow_conversion" "fma" (problem.cc). Parsing takes them exactly.
std::string_view ToString(ConvOp op);
std::string_view ToString(DataType t);
std::string_view ToString(Layout l);
std::string_view ToString(MathMode m);
Result<ConvOp> ParseConvOp(std::string_view s);
Result<DataType> ParseDataType(std::string_view s);
Result<Layout> ParseLayout(std::string_view s);
Result<MathMode> ParseMathMode(std::string_view s);
size_t ElementSize(DataType t);

// Bounds that keep every size computation far from overflow and reject absurd requests.
inline constexpr int64_t kMaxChannels = 1 << 16;
inline constexpr int64_t kMaxSpatial = 1 << 15;
inline constexpr int64_t kMaxFilterSpatial = 1 << 10;
inline constexpr int64_t kMaxStrideOrDilation = 1 << 10;
inline constexpr int64_t kMaxBatch = 1 << 16;
inline constexpr int64_t kMaxElementsPerSample = int64_t{1} << 36;

// One convolution of a network. Tensor shapes (batch n excluded):
//   input  x: c x h x w     filter w: k x (c / groups) x r x s     output y: k x out_h x out_w
// and for a 3-D convolution, with the depth in front of the height:
//   input  x: c x d x h x w  filter w: k x (c / groups) x t x r x s  output y: k x out_d x ...
// A 2-D problem is a 3-D one of depth 1 (d = t = 1, pad_d = 0, stride_d = dilation_d = 1), so
// the depth fields cost 2-D problems nothing: their keys and hashes are those of before. A 1-D
// convolution is a 2-D one of height 1 (h = r = 1), as cuDNN and PyTorch run it.
// For backward-data the problem describes the same forward convolution (dy -> dx);
// for backward-filter likewise (x, dy -> dw). A transposed convolution is the backward-data of
// its forward (its backward passes are that forward and a backward-filter), so it needs no op.
// The layout names the channels' place: kNCHW is NCDHW and kNHWC is NDHWC in 3-D.
struct ConvProblem {
  ConvOp op = ConvOp::kForward;
  int64_t c = 0, h = 0, w = 0;  // input channels and spatial size
  int64_t k = 0, r = 0, s = 0;  // output channels (filters), filter height and width
  int64_t pad_h = 0, pad_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  int64_t d = 1, t = 1;  // input depth and filter depth (3-D only)
  int64_t pad_d = 0, stride_d = 1, dilation_d = 1;
  DataType data_type = DataType::kFloat32;
  DataType compute_type = DataType::kFloat32;
  Layout layout = Layout::kNCHW;
  MathMode math = MathMode::kDefault;

  bool operator==(const ConvProblem&) const = default;

  // A convolution over depth too: anything but the 2-D defaults of the depth fields.
  bool is_3d() const { return d != 1 || t != 1 || pad_d != 0 || stride_d != 1 || dilation_d != 1; }
  // Valid only after Validate() succeeded.
  int64_t out_d() const;
  int64_t out_h() const;
  int64_t out_w() const;
  // Elements of one sample of x, of one sample of y, and of the whole filter.
  int64_t input_elements_per_sample() const { return c * d * h * w; }
  int64_t output_elements_per_sample() const { return k * out_d() * out_h() * out_w(); }
  int64_t filter_elements() const { return k * (c / groups) * t * r * s; }
  // Per-sample tensors the op reads and writes along the batch: for kForward x (in) and y (out);
  // for kBackwardData dy (in) and dx (out); for kBackwardFilter x and dy (both in).
  size_t input_bytes_per_sample() const;
  size_t output_bytes_per_sample() const;
  size_t filter_bytes() const;
  // Multiply-adds of the whole op for `batch` samples (the same count for all three ops).
  double flops(int64_t batch) const;
};

// Checks every field: positive and bounded dimensions, padding in range, a positive output size,
// groups dividing both c and k, element counts without overflow. The error names the field:
// "c: must be in [1, 65536], got 0".
// Sets every spatial axis's padding, stride and dilation from per-axis lists in the order cuDNN
// and the canonical key give them: (h, w) for a 2-D problem, (d, h, w) for a 3-D one (lists of 3
// set the depth's too). The three lists have the same length, 2 or 3.
void SetPerAxis(ConvProblem& p, std::span<const int64_t> pad, std::span<const int64_t> stride,
                std::span<const int64_t> dilation);

// A 3-D problem of depth 1 with a 1-deep filter and no depth padding is a 2-D one whatever its
// depth stride and dilation: those two are set to 1, so that it shares the 2-D problem's key and
// timings. Called where problems enter (the C and gRPC APIs), before Validate().
void NormalizeDepth(ConvProblem& p);
Status Validate(const ConvProblem& p);
Status ValidateBatch(int64_t batch);

// Canonical text form, the database key. Fixed field order, lowercase names, no spaces:
// "v1;op=fwd;c=64;h=56;w=56;k=64;r=3;s=3;pad=1,1;stride=1,1;dil=1,1;g=1;dtype=fp32;
//  ctype=fp32;layout=nchw;math=default"
// A 3-D problem adds the depths and a depth part to each pair, and names its layout in 3-D:
// "v1;op=fwd;c=32;d=16;h=64;w=64;k=32;t=3;r=3;s=3;pad=1,1,1;stride=1,1,1;dil=1,1,1;g=1;
//  dtype=fp16;ctype=fp32;layout=ndhwc;math=tensor_op"
std::string CanonicalKey(const ConvProblem& p);
Result<ConvProblem> ParseCanonicalKey(std::string_view key);
// 64-bit FNV-1a of CanonicalKey(), identical on every machine (stored as BIGINT by bit-cast).
uint64_t StableHash(const ConvProblem& p);
uint64_t Fnv1a64(std::string_view bytes);
// A hash as the API, logs and database payloads show it: 16 lowercase hex digits, zero-padded.
std::string HashHex(uint64_t hash);

// One kernel of a network: a problem at a mini-batch size.
struct Kernel {
  ConvProblem problem;
  int64_t mini_batch = 0;
  std::string name;  // e.g. "conv2/fwd"; informational, not part of any key
  // WorkspaceMode::kPerKernel only: this kernel's own workspace limit in bytes instead of the
  // request's (PlanRequest::workspace_bytes); absent: the request's. Part of the plan-cache key.
  std::optional<uint64_t> workspace_limit = std::nullopt;
  bool operator==(const Kernel&) const = default;
};

}  // namespace ucudnn
