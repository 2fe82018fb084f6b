// The worker's idle gate: it benchmarks only while its GPU runs no other work. A probe says what
// runs on the GPU (NVML, loaded at run time so that nothing links it and a machine without a
// GPU still runs the worker); the gate decides, from the probe, whether the worker may claim a
// job (no other process, utilization under a threshold over a short window) and, between
// measurements, waits while another process has a compute context on the GPU (utilization is
// not asked then: our own runs make it high).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/status.h"
#include "ucudnn/engine/measurement_gate.h"

namespace ucudnn::worker {

struct GpuActivitySample {
  std::vector<uint32_t> compute_pids;  // processes with a compute context on the GPU
  int utilization_percent = -1;        // over the driver's last sample period; -1 unknown
  // Those of compute_pids that ran work on it in the last second (NVML's per-process
  // utilization): a process that only holds a context (a training job waiting in prepare() for
  // the plans this worker is to measure, a notebook between cells) is no contention. All of
  // compute_pids where the driver cannot tell.
  std::vector<uint32_t> busy_pids;
};

class GpuActivityProbe {
 public:
  virtual ~GpuActivityProbe() = default;
  virtual std::string_view name() const = 0;
  virtual Result<GpuActivitySample> Sample() = 0;
};

// NVML through dlopen("libnvidia-ml.so.1"), for the GPU with this PCI bus id ("0000:3b:00.0", as
// cudaDeviceGetPCIBusId writes it), or by NVML index when the id is empty. kUnavailable when the
// library or the device cannot be had (no driver, a machine without a GPU), naming the call.
Result<std::unique_ptr<GpuActivityProbe>> MakeNvmlProbe(const std::string& pci_bus_id,
                                                        int nvml_index);
// A device that nothing else uses: the CPU backend's (it times on host cores, whose other load
// the spread check catches).
std::unique_ptr<GpuActivityProbe> MakeIdleProbe();

// How many of `pids` are other processes than this worker (`self_pid`). In a container with its
// own PID namespace NVML reports host PIDs, so our own pid is not among them: when the worker
// holds a context (`self_has_context`) and no pid is its own, one of them is counted as ours.
int OtherProcesses(const std::vector<uint32_t>& pids, uint32_t self_pid, bool self_has_context);

struct IdleGateConfig {
  // Before a claim: idle when no other process and the mean utilization of the window's
  // samples is at most this (a job between steps, or one that NVML lists late, still shows).
  double max_utilization_percent = 10;
  int window_samples = 3;
  std::chrono::milliseconds sample_interval{100};
  // Utilization is judged only once the worker's own benchmark has left the GPU alone this long:
  // NVML's reading covers up to the last second, which right after a job is our own runs. Until
  // then (between consecutive jobs) one sample of the processes decides.
  std::chrono::milliseconds own_work_quiet{2000};
  std::chrono::milliseconds poll{1000};  // between looks while paused
  // A look (before and after each probe and measurement) younger than this reuses the last
  // sample instead of asking NVML again: NVML's per-process samples come at the driver's period
  // (about 1/6 s), and asking costs about as much as probing a small configuration. Looks while
  // paused always ask. 0: every look asks (the tests' scripted probes); the worker sets 100 ms.
  std::chrono::milliseconds look_reuse{0};
  // A paused benchmark resumes after this many consecutive looks that find the device quiet (no
  // other busy process, utilization at most the threshold): a training job's first step (cuDNN's
  // own search, allocations) and its host-side pauses leave the device quiet for a second at a
  // time, and one quiet look let the worker back in while the job ran (H200, issue 40).
  int resume_quiet_looks = 3;
  // A benchmark paused this long gives up waiting (WaitUntilIdle false, gave_up() true): the
  // worker stores what it measured and releases the job to workers whose GPU is idle. 0: wait
  // as long as it takes.
  std::chrono::milliseconds max_pause{600000};
  uint32_t self_pid = 0;
  bool self_has_context = true;
};

// Pure: whether a window of samples allows a claim: no other busy process in any sample and, when
// `judge_utilization`, a mean utilization at most the threshold. With `judge_utilization` the
// worker's own work has been quiet for a while, so every busy process is another's; otherwise
// OtherProcesses' rule tells ours from the rest.
bool IdleForClaim(const std::vector<GpuActivitySample>& window, const IdleGateConfig& config,
                  bool judge_utilization);

// The gate over a probe: other processes count only while busy (GpuActivitySample::busy_pids).
// Probe errors count as idle (logged once per run of errors): a gate that
// cannot see must not stop the worker for good; the timing's conditions record "device_known":
// false.
class IdleGate : public MeasurementGate {
 public:
  using SleepFn = std::function<void(std::chrono::milliseconds)>;
  IdleGate(std::unique_ptr<GpuActivityProbe> probe, IdleGateConfig config, SleepFn sleep = nullptr);

  std::string_view name() const override { return probe_->name(); }
  // Between measurements: waits while another process runs work on the GPU; false
  // when cancelled or paused longer than max_pause (then gave_up() until the next call).
  bool WaitUntilIdle(const std::atomic<bool>* cancel) override;
  bool gave_up() const { return gave_up_.load(); }
  DeviceActivity Look() override;
  // Before a claim: one window of samples (IdleForClaim), or a single one of the processes
  // while our own benchmark used the GPU within own_work_quiet.
  bool IdleForClaim();

  // The worker's own other processes (its compile helpers, compile_pool.h), asked at each look:
  // their GPU work is not another's. Where NVML's pids are not this process's (another pid
  // namespace) they cannot be told apart and count as others, as the worker itself would.
  void SetOwnProcesses(std::function<std::vector<uint32_t>()> pids);

  std::chrono::milliseconds poll() const { return config_.poll; }  // between looks while paused
  int64_t pauses() const { return pauses_.load(); }                // waits that found the GPU busy
  bool paused() const { return paused_.load(); }                   // waiting right now

 private:
  DeviceActivity ToActivity(const Result<GpuActivitySample>& sample);
  // The probe's sample without the busy processes that are our own helpers (mu_ held).
  Result<GpuActivitySample> SampleLocked();
  // Look(), asking the probe again only when `fresh` or the last sample is older than
  // config_.look_reuse.
  DeviceActivity LookAt(bool fresh);

  std::unique_ptr<GpuActivityProbe> probe_;
  IdleGateConfig config_;
  SleepFn sleep_;
  std::mutex mu_;  // one probe call at a time (NVML handles are shared by the gate's users)
  std::optional<Result<GpuActivitySample>> last_sample_;  // under mu_
  std::chrono::steady_clock::time_point last_sample_at_;  // under mu_
  std::function<std::vector<uint32_t>()> own_pids_;       // under mu_
  bool warned_ = false;
  std::atomic<int64_t> pauses_{0};
  std::atomic<bool> paused_{false};
  std::atomic<bool> gave_up_{false};
  // When our benchmark last looked before or after a measurement (steady clock ticks; 0: never).
  std::atomic<std::chrono::steady_clock::rep> last_own_work_{0};
};

}  // namespace ucudnn::worker
