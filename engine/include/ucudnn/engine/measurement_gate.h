// What the benchmark asks about its device between measurements: whether other work runs on it
// (another process training, a second worker), so that it measures only on an idle device and can
// tell a measurement taken under contention. The worker implements it over NVML (idle_gate.h);
// the engine only sees this interface. Pure helpers below decide contention and write the
// conditions a timing is stored with.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

namespace ucudnn {

// One look at the device. Our own benchmark's work is not "other" work.
struct DeviceActivity {
  bool known = false;            // false: the probe could not tell (treated as idle, recorded)
  int other_processes = 0;       // processes other than this worker with a compute context on it
  int utilization_percent = -1;  // the driver's last reading; -1 unknown (includes our own runs)
};

class MeasurementGate {
 public:
  virtual ~MeasurementGate() = default;
  // "nvml", "idle" (a device nothing else uses, e.g. the CPU backend's), ...: recorded.
  virtual std::string_view name() const = 0;
  // Blocks while other work runs on the device and returns once it is idle (true), or false
  // as soon as `cancel` (may be null) is true or the gate gives up waiting (the benchmark then
  // ends with kUnavailable; its progress callback has had every finished entry). Measurements
  // taken so far stay with the caller: a pause loses nothing.
  virtual bool WaitUntilIdle(const std::atomic<bool>* cancel) = 0;
  // A fresh look, taken right after a measurement.
  virtual DeviceActivity Look() = 0;
};

// A measurement's samples whose interquartile range exceeds this fraction of their median were
// disturbed: on an idle GPU the spread of repeated runs is a few percent (the engine's target is
// 5%, BenchmarkOptions::target_relative_spread, and H100/H200 tables show 1-3% for runs over
// 0.1 ms), while a training step sharing the GPU makes runs 1.5-2x slower at random (issue 40:
// a native step went from 59 to 103-110 ms). 25% is five times the idle target and well under
// what sharing does.
inline constexpr double kContendedRelativeSpread = 0.25;
// A contended measurement is taken again at most this many times (after waiting for the device
// to be idle) before it is stored as contended and never used by the planner.
inline constexpr int kContentionRemeasures = 2;

// Whether a measurement was contended: another process seen on the device right after it, or a
// spread above `max_relative_spread` (<= 0: spread not judged; it needs at least 4 samples for a
// meaningful interquartile range).
bool Contended(const DeviceActivity& after, double relative_spread, int samples,
               double max_relative_spread);

// The conditions a timing was measured under, as the JSON object stored with it (timings.
// conditions): the gate ("off" when none), whether the device was seen busy by others after
// it, the other processes and utilization then, how many times it was measured again for
// contention, and whether it is still contended.
struct MeasurementConditions {
  std::string gate = "off";
  DeviceActivity after;
  double relative_spread = 0;
  int remeasured = 0;
  bool contended = false;
};
std::string ConditionsJson(const MeasurementConditions& c);

}  // namespace ucudnn
