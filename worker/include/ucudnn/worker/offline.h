// Offline mode: benchmark a list of kernels without any database and write a timing CSV (the
// timing_csv.h format) whose '#' header lines carry the device fingerprint (DeviceHeader, also in
// timing_csv.h). ucudnn/store/import.h loads such a file into a store.
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
#include "ucudnn/engine/benchmark.h"
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
  int64_t problems = 0;  // problems written
  int64_t timings = 0;
  int64_t ok = 0;  // timings with status ok
  double seconds = 0;
  // What the file lacks: "layer op (key): error" for each problem whose benchmark failed, and
  // "layer op (key)" for each one never started (a signal, or every device lost).
  std::vector<std::string> failed;
  std::vector<std::string> not_measured;
  bool cancelled = false;                 // stopped by the cancel flag
  std::vector<std::string> lost_devices;  // slots whose device was lost (their threads stopped)
  bool complete() const { return failed.empty() && not_measured.empty(); }
};

// Measures every problem, spreading them over `devices` (one thread each), and writes the CSV of
// the problems measured. All devices must share one fingerprint (kInvalidArgument otherwise: a
// file holds one device's timings). A problem whose benchmark fails is reported in `failed` and
// the others are still measured; a device that is lost (kDeviceLost) stops its thread, the others
// carry on. When `cancel` becomes true no further problem starts and the one in hand is dropped.
// Whenever at least one problem was measured the file is written, its header naming what is
// missing, and the summary is returned (check complete()); with none measured nothing is
// written: kUnavailable when cancelled, else kInternal naming the first failure.
Result<OfflineSummary> RunOffline(std::vector<BenchmarkDevice>& devices,
                                  const OfflineRequest& request,
                                  const std::atomic<bool>* cancel = nullptr);

}  // namespace ucudnn::worker
