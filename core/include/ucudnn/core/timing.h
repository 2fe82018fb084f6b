// Measured timings of one problem on one device, and the configurations built from them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/status.h"

namespace ucudnn {

enum class TimingStatus { kOk = 0, kUnsupported = 1, kFailed = 2 };
std::string_view ToString(TimingStatus s);                   // "ok" "unsupported" "failed" (dp.cc)
Result<TimingStatus> ParseTimingStatus(std::string_view s);  // any case

// Which algorithm a measurement or a segment is, as a backend is asked to run it: a legacy
// algorithm (`id`, cuDNN's enum value or the CPU backend's number, with `engine_config` empty),
// or a cuDNN graph-API engine configuration (`id` = kEngineAlgo and `engine_config` its canonical
// key, EngineConfigKey()), or the framework's own convolution (`id` = kFrameworkAlgo and
// `engine_config` the framework's identity). A plain number converts implicitly: legacy callers
// stay as they were.
inline constexpr int kEngineAlgo = -1;
// "The framework's own convolution" (e.g. PyTorch's choice for the kernel), measured by the
// training job and submitted like any timing: a planning candidate only as the whole kernel (one
// segment at the full mini-batch), never run by a backend. Its `engine_config` holds the
// framework's identity (CheckFrameworkIdentity), e.g. "torch-2.11.0+cu130/benchmark".
inline constexpr int kFrameworkAlgo = -2;
// The framework's time and ucudnn's are measured in different processes (the training job and
// the worker): within kFrameworkMargin of each other they are a tie, which goes to the side that
// costs the job nothing more (FrameworkBenchmarks, dp.h BeatsFramework).
inline constexpr double kFrameworkMargin = 0.03;
// The longest framework identity, bytes.
inline constexpr size_t kMaxFrameworkIdentity = 128;
struct Algorithm {
  int id = 0;
  std::string_view engine_config;
  Algorithm(int legacy_id) : id(legacy_id) {}  // NOLINT(google-explicit-constructor)
  Algorithm(int algo_id, std::string_view config) : id(algo_id), engine_config(config) {}
  bool is_framework() const { return id == kFrameworkAlgo; }
  bool is_engine() const { return !engine_config.empty() && !is_framework(); }
};
// kInvalidArgument naming `field` unless `identity` is a framework identity: non-empty, at most
// kMaxFrameworkIdentity bytes, printable ASCII (0x20-0x7e).
Status CheckFrameworkIdentity(std::string_view field, std::string_view identity);
// "IMPLICIT_GEMM"-style names are for tables (algorithm_names.h); this is the text of the
// identity itself: the number of a legacy algorithm, the key of an engine configuration.
std::string AlgorithmText(const Algorithm& algo);

// One (micro-batch size, algorithm) measurement.
struct Timing {
  int64_t micro_batch = 0;
  int algo = 0;        // kEngineAlgo for an engine configuration, kFrameworkAlgo for the framework
  double time_ms = 0;  // median
  double spread_ms = 0;  // interquartile range of the samples
  int samples = 0;
  uint64_t workspace_bytes = 0;
  TimingStatus status = TimingStatus::kOk;
  std::string error;  // cuDNN status or reason, for kFailed / kUnsupported
  // An engine configuration's key, or the framework's identity; empty for a legacy algorithm.
  std::string engine_config;
  // The conditions it was measured under, a JSON object (ConditionsJson in
  // ucudnn/engine/measurement_gate.h: idle gate, other work seen on the device); empty: unknown.
  std::string conditions;
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

// Prefix (after kWorkerLimitError) of a measurement still disturbed by other work on the device
// after being taken again: stored kFailed so that the planner never plans with it, and, like any
// worker limit, never replacing an undisturbed measurement.
inline constexpr std::string_view kContendedError = "contended: ";

// Every measurement of one problem on one device. Order is irrelevant; lookups by
// (micro_batch, algo) are unique.
struct TimingTable {
  std::vector<Timing> entries;
};

// One run of the kernel over `micro_batch` samples with `algo`. A configuration repeats
// segments until their micro-batch sizes sum to the mini-batch.
struct Segment {
  int64_t micro_batch = 0;
  int algo = 0;                  // as Timing::algo
  double time_ms = 0;            // predicted time of this one segment
  uint64_t workspace_bytes = 0;  // workspace of this one segment
  std::string engine_config;     // as Timing::engine_config
  bool operator==(const Segment&) const = default;
};

inline Algorithm AlgorithmOf(const Timing& t) { return {t.algo, t.engine_config}; }
inline Algorithm AlgorithmOf(const Segment& s) { return {s.algo, s.engine_config}; }
inline bool IsFramework(const Timing& t) { return t.algo == kFrameworkAlgo; }
inline bool IsFramework(const Segment& s) { return s.algo == kFrameworkAlgo; }
// Orders algorithms for deterministic tie-breaking: legacy ones by number, then engine
// configurations by key, then framework identities.
inline bool AlgorithmLess(const Algorithm& a, const Algorithm& b) {
  if (a.is_framework() != b.is_framework()) return !a.is_framework();
  if (a.is_engine() != b.is_engine()) return !a.is_engine();
  if (a.id != b.id) return a.id < b.id;
  return a.engine_config < b.engine_config;
}

// How one kernel runs: segments in execution order (sizes sum to the mini-batch).
struct KernelConfig {
  std::vector<Segment> segments;
  double time_ms = 0;            // sum of segment times
  uint64_t workspace_bytes = 0;  // largest segment workspace
  bool operator==(const KernelConfig&) const = default;
};

}  // namespace ucudnn
