// The device fingerprint: two devices share timings only if their fingerprints match.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ucudnn/core/status.h"

namespace ucudnn {

// The first field of DeviceFingerprint::Key(). It also versions how timings are taken, since
// devices share timings only under one method: v2 times a micro-batch on successive slices of
// the operands (TimedRunOperands), where v1 repeated one slice, whose operands then stayed in the
// L2 cache (micro-batched plans came out 8-13% faster than they ran). A database keeps v1 rows
// under their own device; workers fill the v2 device anew.
inline constexpr std::string_view kFingerprintKeyVersion = "v2";

struct DeviceFingerprint {
  std::string backend;  // "cudnn" or "cpu"
  std::string name;     // GPU name ("NVIDIA H100 80GB HBM3") or CPU model
  int cc_major = 0;     // compute capability (GPU only)
  int cc_minor = 0;
  int sm_count = 0;              // multiprocessors (GPU) or logical cores (CPU)
  uint64_t memory_bytes = 0;     // device memory (GPU) or RAM (CPU, whole GiB)
  int cudnn_version = 0;         // cudnnGetVersion() at run time, e.g. 91400 (GPU only)
  int cuda_runtime_version = 0;  // cudaRuntimeGetVersion() (GPU only)
  std::string blas;  // BLAS of the CPU backend and its threads ("openblas 0.3.21 threads:1")

  bool operator==(const DeviceFingerprint&) const = default;

  // Canonical key, fixed field order: "v2;backend=cudnn;name=...;cc=9.0;sm=132;mem=...;
  // cudnn=91400;cuda=13000;blas=". Names are kept verbatim except ';' and '=' which are
  // replaced by '_'.
  std::string Key() const;
  uint64_t Hash() const;  // Fnv1a64(Key())
};

// backend "cudnn" or "cpu"; name required; text fields valid UTF-8 without NUL, at most 256
// bytes; numbers >= 0. cudnn: cc_major, sm_count, memory_bytes and cudnn_version positive. cpu:
// sm_count positive, and the GPU-only fields (cc_major, cc_minor, cudnn_version,
// cuda_runtime_version) 0.
Status Validate(const DeviceFingerprint& f);

// The fingerprint of this machine's CPU backend with OpenBLAS running `blas_threads` threads
// (reads /proc/cpuinfo and /proc/meminfo): the CPU model, its logical cores, the RAM rounded up
// to whole GiB (MemTotal varies by some MiB between identical hosts), and
// "openblas <version> threads:<blas_threads>". The thread count is part of the key: timings taken
// with N threads are not the timings of the 1-thread workers. CpuBackend builds its fingerprint
// with the thread count OpenBLAS actually runs.
DeviceFingerprint CpuFingerprint(int blas_threads);
// CpuFingerprint(1): the device of a default CpuBackend, as the CPU workers run it.
DeviceFingerprint CpuFingerprint();

// The pure part of CpuFingerprint(): from the text of /proc/cpuinfo and /proc/meminfo,
// openblas_get_config() and the thread count (values below 1 count as 1); sm_count falls back to
// `hardware_concurrency` when cpuinfo lists no processor, then to 1.
DeviceFingerprint CpuFingerprintFrom(std::string_view cpuinfo, std::string_view meminfo,
                                     std::string_view openblas_config, int blas_threads,
                                     int hardware_concurrency);

}  // namespace ucudnn
