// The device fingerprint: two devices share timings only if their fingerprints match.
#pragma once

#include <cstdint>
#include <string>

#include "ucudnn/core/status.h"

namespace ucudnn {

struct DeviceFingerprint {
  std::string backend;  // "cudnn" or "cpu"
  std::string name;     // GPU name ("NVIDIA H100 80GB HBM3") or CPU model
  int cc_major = 0;     // compute capability (GPU only)
  int cc_minor = 0;
  int sm_count = 0;              // multiprocessors (GPU) or logical cores (CPU)
  uint64_t memory_bytes = 0;     // total device memory (GPU) or RAM (CPU)
  int cudnn_version = 0;         // cudnnGetVersion() at run time, e.g. 91400 (GPU only)
  int cuda_runtime_version = 0;  // cudaRuntimeGetVersion() (GPU only)
  std::string blas;              // BLAS library of the CPU backend ("openblas 0.3.21")

  bool operator==(const DeviceFingerprint&) const = default;

  // Canonical key, fixed field order: "v1;backend=cudnn;name=...;cc=9.0;sm=132;mem=...;
  // cudnn=91400;cuda=13000;blas=". Names are kept verbatim except ';' and '=' which are
  // replaced by '_'.
  std::string Key() const;
  uint64_t Hash() const;  // Fnv1a64(Key())
};

Status Validate(const DeviceFingerprint& f);

// The fingerprint of this machine's CPU backend (reads /proc/cpuinfo and /proc/meminfo).
DeviceFingerprint CpuFingerprint();

}  // namespace ucudnn
