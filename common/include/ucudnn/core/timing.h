// Measured timings of one problem on one device, and the configurations built from them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ucudnn {

enum class TimingStatus { kOk = 0, kUnsupported = 1, kFailed = 2 };
std::string_view ToString(TimingStatus s);  // "ok" "unsupported" "failed"

// One (micro-batch size, algorithm) measurement.
struct Timing {
  int64_t micro_batch = 0;
  int algo = 0;
  double time_ms = 0;    // median
  double spread_ms = 0;  // interquartile range of the samples
  int samples = 0;
  uint64_t workspace_bytes = 0;
  TimingStatus status = TimingStatus::kOk;
  std::string error;  // cuDNN status or reason, for kFailed / kUnsupported
  bool operator==(const Timing&) const = default;
};

// Prefix of Timing::error for a configuration a worker did not measure because of its own
// limits, not cuDNN's: a workspace above its cap, or memory (workspace, operands of a large
// micro-batch) that could not be allocated on the device at the time. Such entries are kFailed,
// so a table stays complete and the planner never chooses them; they are told apart from
// cuDNN's verdicts by this prefix, and the store never lets one replace a kOk measurement.
inline constexpr std::string_view kWorkerLimitError = "worker limit: ";
inline bool IsWorkerLimit(const Timing& timing) {
  return timing.status == TimingStatus::kFailed &&
         std::string_view(timing.error).substr(0, kWorkerLimitError.size()) == kWorkerLimitError;
}

// Every measurement of one problem on one device. Order is irrelevant; lookups by
// (micro_batch, algo) are unique.
struct TimingTable {
  std::vector<Timing> entries;
};

// One run of the kernel over `micro_batch` samples with `algo`. A configuration repeats
// segments until their micro-batch sizes sum to the mini-batch.
struct Segment {
  int64_t micro_batch = 0;
  int algo = 0;
  double time_ms = 0;            // predicted time of this one segment
  uint64_t workspace_bytes = 0;  // workspace of this one segment
  bool operator==(const Segment&) const = default;
};

// How one kernel runs: segments in execution order (sizes sum to the mini-batch).
struct KernelConfig {
  std::vector<Segment> segments;
  double time_ms = 0;            // sum of segment times
  uint64_t workspace_bytes = 0;  // largest segment workspace
  bool operator==(const KernelConfig&) const = default;
};

}  // namespace ucudnn
