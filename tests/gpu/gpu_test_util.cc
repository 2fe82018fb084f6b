#include "gpu/gpu_test_util.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>

#include "ucudnn/backends/cpu_backend.h"
#include "ucudnn/core/random_fill.h"

namespace ucudnn::gputest {
namespace {

struct Dims {
  int64_t d0, d1, d2, d3;  // NCHW order (or K, C/g, R, S)
  size_t count() const { return static_cast<size_t>(d0 * d1 * d2 * d3); }
};

// A 3-D tensor with its depth folded into the height: NCDHW and NDHWC index it exactly as NCHW
// and NHWC of (n, c, d * h, w) do (cuDNN gets real 5-d descriptors).
Dims XDims(const ConvProblem& p, int64_t n) { return {n, p.c, p.d * p.h, p.w}; }
Dims YDims(const ConvProblem& p, int64_t n) { return {n, p.k, p.out_d() * p.out_h(), p.out_w()}; }
Dims WDims(const ConvProblem& p) { return {p.k, p.c / p.groups, p.t * p.r, p.s}; }

// NCHW -> NHWC (and KCRS -> KRSC, the filter layout cuDNN pairs with NHWC).
std::vector<float> ToChannelsLast(const std::vector<float>& src, const Dims& d) {
  std::vector<float> dst(src.size());
  for (int64_t a = 0; a < d.d0; ++a)
    for (int64_t b = 0; b < d.d1; ++b)
      for (int64_t c = 0; c < d.d2; ++c)
        for (int64_t e = 0; e < d.d3; ++e)
          dst[((a * d.d2 + c) * d.d3 + e) * d.d1 + b] = src[((a * d.d1 + b) * d.d2 + c) * d.d3 + e];
  return dst;
}

std::vector<float> FromChannelsLast(const std::vector<float>& src, const Dims& d) {
  std::vector<float> dst(src.size());
  for (int64_t a = 0; a < d.d0; ++a)
    for (int64_t b = 0; b < d.d1; ++b)
      for (int64_t c = 0; c < d.d2; ++c)
        for (int64_t e = 0; e < d.d3; ++e)
          dst[((a * d.d1 + b) * d.d2 + c) * d.d3 + e] = src[((a * d.d2 + c) * d.d3 + e) * d.d1 + b];
  return dst;
}

// fp32 NCHW host data -> the problem's layout and element type, as raw bytes.
std::vector<unsigned char> Encode(const std::vector<float>& nchw, const Dims& d,
                                  const ConvProblem& p) {
  const std::vector<float> v = p.layout == Layout::kNHWC ? ToChannelsLast(nchw, d) : nchw;
  std::vector<unsigned char> bytes(v.size() * ElementSize(p.data_type));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (p.data_type) {
      case DataType::kFloat32:
        std::memcpy(bytes.data() + 4 * i, &v[i], 4);
        break;
      case DataType::kFloat16: {
        const uint16_t h = FloatToHalf(v[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t h = FloatToBFloat16(v[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
        break;
      }
    }
  }
  return bytes;
}

std::vector<float> Decode(const std::vector<unsigned char>& bytes, const Dims& d,
                          const ConvProblem& p) {
  std::vector<float> v = ToFloat(bytes.data(), d.count(), p.data_type);
  return p.layout == Layout::kNHWC ? FromChannelsLast(v, d) : v;
}

}  // namespace

std::string NoGpuReason() {
  if (GpuCount() > 0) return "";
  return std::string("no GPU visible (GpuCount() == 0; this build ") +
         (BuildHasCudnn() ? "has" : "does not have") +
         " the cuDNN backend): GPU tests run only on a machine with a GPU";
}

namespace {

std::once_flag gpu_once;
std::unique_ptr<ConvBackend> gpu_backend;

// Releases the shared cuDNN backend after the last test, while the CUDA runtime and spdlog are
// still alive (static destructors run after both may be gone).
class ReleaseGpuBackend : public ::testing::Environment {
 public:
  void TearDown() override { gpu_backend.reset(); }
};
[[maybe_unused]] ::testing::Environment* const release_gpu_backend =
    ::testing::AddGlobalTestEnvironment(new ReleaseGpuBackend);

}  // namespace

ConvBackend* SharedGpuBackend() {
  std::call_once(gpu_once, [] {
    Result<std::unique_ptr<ConvBackend>> made = MakeBackend("cudnn", 0);
    if (made.ok()) {
      gpu_backend = std::move(*made);
    } else {
      std::fprintf(stderr, "cuDNN backend unavailable: %s\n", made.status().ToString().c_str());
    }
  });
  return gpu_backend.get();
}

ConvBackend& ReferenceCpuBackend() {
  static CpuBackend backend(CpuBackendOptions{.blas_threads = 0});
  return backend;
}

ConvProblem MakeConv(int64_t c, int64_t hw, int64_t k, int64_t rs, int64_t pad, int64_t stride,
                     int64_t groups, int64_t dilation) {
  ConvProblem p;
  p.c = c;
  p.h = p.w = hw;
  p.k = k;
  p.r = p.s = rs;
  p.pad_h = p.pad_w = pad;
  p.stride_h = p.stride_w = stride;
  p.dilation_h = p.dilation_w = dilation;
  p.groups = groups;
  return p;
}

ConvProblem MakeConv3d(int64_t c, int64_t d, int64_t hw, int64_t k, int64_t t, int64_t rs,
                       int64_t pad_d, int64_t pad, int64_t stride_d, int64_t stride) {
  ConvProblem p = MakeConv(c, hw, k, rs, pad, stride);
  p.d = d;
  p.t = t;
  p.pad_d = pad_d;
  p.stride_d = stride_d;
  return p;
}

std::vector<Layer> TestLayers() {
  ConvProblem wav2letter = MakeConv(64, 1, 64, 1, 0, 1);  // Conv1d: 2-D of height 1
  wav2letter.w = 800;
  wav2letter.s = 48;
  wav2letter.pad_w = 23;
  wav2letter.stride_w = 2;
  return {
      // 3-D (issue 39): nnU-Net's 3x3x3, video models' stems and (2+1)-D factorised filters.
      {"unet3d_3x3x3_32ch_24", MakeConv3d(32, 24, 24, 32, 3, 3, 1, 1, 1, 1), 2},
      {"r3d_stem_3x7x7_s122", MakeConv3d(3, 8, 56, 64, 3, 7, 1, 3, 1, 2), 2},
      {"r2plus1d_spatial_1x3x3_s2", MakeConv3d(64, 8, 28, 64, 1, 3, 0, 1, 1, 2), 2},
      {"r2plus1d_temporal_3x1x1", MakeConv3d(64, 8, 14, 64, 3, 1, 1, 0, 1, 1), 2},
      {"conv1d_wav2letter_k48_s2", wav2letter, 4},
      {"resnet50_conv1_7x7s2", MakeConv(3, 224, 64, 7, 3, 2), 4},
      {"resnet50_3x3_64ch_56", MakeConv(64, 56, 64, 3, 1, 1), 4},
      {"resnet50_downsample_1x1s2", MakeConv(256, 56, 512, 1, 0, 2), 4},
      {"resnet50_3x3_256ch_14", MakeConv(256, 14, 256, 3, 1, 1), 8},
      {"alexnet_conv2_5x5", MakeConv(64, 27, 192, 5, 2, 1), 4},
      {"resnext_grouped_3x3_g32", MakeConv(128, 28, 128, 3, 1, 1, 32), 4},
      {"mobilenet_depthwise_3x3", MakeConv(32, 56, 32, 3, 1, 1, 32), 8},
      {"dilated_3x3_d2", MakeConv(32, 28, 32, 3, 2, 1, 1, 2), 4},
  };
}

HostTensors RandomTensors(const ConvProblem& p, int64_t batch, uint64_t seed) {
  const auto make = [&](size_t count, uint64_t s) {
    std::vector<uint16_t> half(count);
    GenerateRandom(half.data(), count, DataType::kFloat16, s);
    return ToFloat(half.data(), count, DataType::kFloat16);
  };
  HostTensors t;
  t.x = make(XDims(p, batch).count(), seed);
  t.y = make(YDims(p, batch).count(), seed + 1);
  t.w = make(WDims(p).count(), seed + 2);
  return t;
}

std::vector<float>& Written(HostTensors& t, ConvOp op) {
  switch (op) {
    case ConvOp::kForward:
      return t.y;
    case ConvOp::kBackwardData:
      return t.x;
    case ConvOp::kBackwardFilter:
      return t.w;
  }
  return t.y;
}

Result<std::vector<float>> RunAlgorithm(ConvBackend& backend, const ConvProblem& p, int64_t batch,
                                        const Algorithm& algo, const HostTensors& host, float alpha,
                                        float beta) {
  UCUDNN_RETURN_IF_ERROR(Validate(p));
  const Dims dims[3] = {XDims(p, batch), YDims(p, batch), WDims(p)};
  const std::vector<float>* values[3] = {&host.x, &host.y, &host.w};
  const int written = p.op == ConvOp::kForward ? 1 : p.op == ConvOp::kBackwardData ? 0 : 2;
  std::unique_ptr<BackendBuffer> buffers[3];
  for (int i = 0; i < 3; ++i) {
    if (values[i]->size() != dims[i].count()) return InvalidArgument("host tensor size mismatch");
    std::vector<unsigned char> bytes = Encode(*values[i], dims[i], p);
    if (i == written && beta == 0.0f) std::memset(bytes.data(), 0xFF, bytes.size());  // NaN
    UCUDNN_ASSIGN_OR_RETURN(buffers[i], backend.Allocate(bytes.size()));
    UCUDNN_RETURN_IF_ERROR(backend.CopyToDevice(buffers[i]->data(), bytes.data(), bytes.size()));
  }
  ConvOperands ops;
  switch (p.op) {
    case ConvOp::kForward:
      ops.x = buffers[0]->data();
      ops.y = buffers[1]->data();
      ops.w = buffers[2]->data();
      break;
    case ConvOp::kBackwardData:
      ops.dx = buffers[0]->data();
      ops.dy = buffers[1]->data();
      ops.w = buffers[2]->data();
      break;
    case ConvOp::kBackwardFilter:
      ops.x = buffers[0]->data();
      ops.dy = buffers[1]->data();
      ops.dw = buffers[2]->data();
      break;
  }
  UCUDNN_ASSIGN_OR_RETURN(size_t ws_bytes, backend.WorkspaceSize(p, batch, algo));
  UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<BackendBuffer> ws, backend.Allocate(ws_bytes));
  UCUDNN_RETURN_IF_ERROR(backend.Run(p, batch, algo, ops, ws->data(), ws_bytes, alpha, beta));
  UCUDNN_RETURN_IF_ERROR(backend.Synchronize());
  std::vector<unsigned char> out(buffers[written]->size());
  UCUDNN_RETURN_IF_ERROR(backend.CopyToHost(out.data(), buffers[written]->data(), out.size()));
  return Decode(out, dims[written], p);
}

double RelativeL2(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

Result<std::vector<float>> CpuReference(const ConvProblem& p, int64_t batch,
                                        const HostTensors& host) {
  ConvProblem ref = p;
  ref.data_type = ref.compute_type = DataType::kFloat32;
  ref.layout = Layout::kNCHW;
  ref.math = MathMode::kDefault;
  // One sample at a time keeps the reference's workspace small whatever the shape.
  return RunAlgorithm(ReferenceCpuBackend(), ref, batch, kCpuAlgoIm2colGemmPerSample, host);
}

std::string Describe(const ConvProblem& p, int64_t batch) {
  return CanonicalKey(p) + " batch=" + std::to_string(batch);
}

}  // namespace ucudnn::gputest
