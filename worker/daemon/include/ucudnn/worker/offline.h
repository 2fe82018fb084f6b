// Offline mode: benchmark a list of kernels without any database and write a timing CSV (the
// timing_csv.h format) whose '#' header lines carry the device fingerprint. import.h loads such
// a file into a store.
//
// Header lines of a file written here (the CSV reader skips '#' lines):
//   # ucudnn timings written by ucudnn-worker --offline
//   # device.backend: cudnn
//   # device.name: NVIDIA H100 80GB HBM3
//   # device.cc: 9.0
//   # device.sm_count: 132
//   # device.memory_bytes: 84929347584
//   # device.cudnn_version: 91400
//   # device.cuda_runtime_version: 13000
//   # device.blas:
//   # device.key: v1;backend=cudnn;...   (checked on import)
//   # device.hash: 0123456789abcdef
//   # <free-form notes: network, batch, policy, time>
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/worker/benchmark.h"
#include "ucudnn/worker/daemon.h"

namespace ucudnn::worker {

struct OfflineRequest {
  // What to measure: each kernel's problem up to its mini-batch (micro-batch sizes by `policy`).
  // Kernels with equal problems are measured once, up to the largest mini-batch.
  std::vector<Kernel> kernels;
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  BenchmarkOptions benchmark;      // `cancel` is ignored: pass the cancel flag to RunOffline
  std::string output;              // CSV path; written atomically (temporary file, then rename)
  std::vector<std::string> notes;  // extra '#' header lines (network, batch, ...)
};

struct OfflineSummary {
  DeviceFingerprint device;
  int64_t problems = 0;
  int64_t timings = 0;
  int64_t ok = 0;  // timings with status ok
  double seconds = 0;
};

// Measures every problem, spreading them over `devices` (one thread each), and writes the CSV.
// All devices must share one fingerprint (kInvalidArgument otherwise: a file holds one device's
// timings). When `cancel` becomes true the run stops and writes nothing (kUnavailable).
Result<OfflineSummary> RunOffline(std::vector<BenchmarkDevice>& devices,
                                  const OfflineRequest& request,
                                  const std::atomic<bool>* cancel = nullptr);

// The header lines (each ending in '\n') that carry `device`, then `notes`.
std::string DeviceHeader(const DeviceFingerprint& device, const std::vector<std::string>& notes);
// The fingerprint from a file's "# device.*" lines: kNotFound when it has none, kInvalidArgument
// when they are malformed, incomplete, fail Validate(), or contradict "# device.key".
Result<DeviceFingerprint> ParseDeviceHeader(std::string_view csv_text);

}  // namespace ucudnn::worker
