#include "ucudnn/core/algorithm_names.h"

#include <array>

#include "ucudnn/core/timing.h"

namespace ucudnn {
namespace {

// Suffixes of cuDNN's enum names, indexed by the enum value (cudnn_backend.cc checks the counts
// against cuDNN's headers).
constexpr std::array<const char*, kCudnnForwardAlgoCount> kForwardAlgoNames = {
    "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
    "WINOGRAD",      "WINOGRAD_NONFUSED"};
constexpr std::array<const char*, kCudnnBackwardDataAlgoCount> kBackwardDataAlgoNames = {
    "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
constexpr std::array<const char*, kCudnnBackwardFilterAlgoCount> kBackwardFilterAlgoNames = {
    "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
constexpr std::array<const char*, kCpuAlgoCount> kCpuAlgoNames = {"direct", "im2col_gemm",
                                                                  "im2col_gemm_per_sample"};
static_assert(kCpuAlgoDirect == 0 && kCpuAlgoIm2colGemm == 1 && kCpuAlgoIm2colGemmPerSample == 2);

template <size_t N>
std::vector<AlgorithmInfo> Listed(const std::array<const char*, N>& names) {
  std::vector<AlgorithmInfo> algos;
  algos.reserve(N);
  for (size_t i = 0; i < N; ++i) algos.push_back({static_cast<int>(i), names[i]});
  return algos;
}

}  // namespace

std::vector<AlgorithmInfo> CudnnAlgorithms(ConvOp op) {
  switch (op) {
    case ConvOp::kForward:
      return Listed(kForwardAlgoNames);
    case ConvOp::kBackwardData:
      return Listed(kBackwardDataAlgoNames);
    case ConvOp::kBackwardFilter:
      return Listed(kBackwardFilterAlgoNames);
  }
  return {};
}

int CudnnAlgorithmCount(ConvOp op) {
  switch (op) {
    case ConvOp::kForward:
      return kCudnnForwardAlgoCount;
    case ConvOp::kBackwardData:
      return kCudnnBackwardDataAlgoCount;
    case ConvOp::kBackwardFilter:
      return kCudnnBackwardFilterAlgoCount;
  }
  return 0;
}

std::vector<AlgorithmInfo> CpuAlgorithms() { return Listed(kCpuAlgoNames); }

std::string AlgorithmName(std::string_view backend, ConvOp op, int algo) {
  if (backend == "cpu") {
    return algo >= 0 && algo < kCpuAlgoCount ? kCpuAlgoNames[algo] : "";
  }
  if (backend == "cudnn" && algo >= 0 && algo < CudnnAlgorithmCount(op)) {
    return CudnnAlgorithms(op)[algo].name;
  }
  return "";
}

std::string AlgorithmName(std::string_view backend, ConvOp op, const Algorithm& algo) {
  if (algo.is_engine() || algo.is_framework()) return AlgorithmText(algo);
  return AlgorithmName(backend, op, algo.id);
}

}  // namespace ucudnn
