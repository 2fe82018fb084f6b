// The algorithms of both backends by id and name, known without a GPU or cuDNN at hand: plans and
// timings name an algorithm by its id, and tables print it by name wherever they are made (the
// CLI, the server's ExplainPlan, the benchmark reports).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/problem.h"

namespace ucudnn {

// cuDNN's legacy convolution algorithms per op (CudnnBackend::Algorithms()): id = cuDNN's enum
// value, name = the enum name's suffix ("IMPLICIT_PRECOMP_GEMM", "ALGO_1", "FFT").
inline constexpr int kCudnnForwardAlgoCount = 8;
inline constexpr int kCudnnBackwardDataAlgoCount = 6;
inline constexpr int kCudnnBackwardFilterAlgoCount = 7;
std::vector<AlgorithmInfo> CudnnAlgorithms(ConvOp op);
// How many cuDNN algorithms `op` has (0 for an op that is not one).
int CudnnAlgorithmCount(ConvOp op);

// The CPU backend's algorithms, the same for every op (CpuBackend::Algorithms(); cpu_backend.h
// says what each does).
inline constexpr int kCpuAlgoDirect = 0;
inline constexpr int kCpuAlgoIm2colGemm = 1;
inline constexpr int kCpuAlgoIm2colGemmPerSample = 2;
inline constexpr int kCpuAlgoCount = 3;
std::vector<AlgorithmInfo> CpuAlgorithms();

// `algo`'s name on `backend` ("cudnn" or "cpu", as in DeviceFingerprint::backend); empty when the
// backend or the id is unknown.
std::string AlgorithmName(std::string_view backend, ConvOp op, int algo);
struct Algorithm;
// Any algorithm's name for a table: a legacy algorithm's as above, an engine configuration's key,
// "framework(<identity>)" for the framework's own convolution (AlgorithmText).
std::string AlgorithmName(std::string_view backend, ConvOp op, const Algorithm& algo);

}  // namespace ucudnn
