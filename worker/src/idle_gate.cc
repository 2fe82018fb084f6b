#include "ucudnn/worker/idle_gate.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace ucudnn::worker {
namespace {

// The part of NVML's C ABI the probe uses, as nvml.h declares it (the header is not needed at
// build time: the library is loaded at run time). Every function returns an nvmlReturn_t.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNotFound = 6;  // nvmlDeviceGetProcessUtilization: no sample since
constexpr NvmlReturn kNvmlInsufficientSize = 7;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlProcessInfo {  // nvmlProcessInfo_t (v2 layout, used by the _v3 query)
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
// nvml.h's layout (the driver writes an array of these): 4 + 4 (padding) + 8 + 4 + 4 bytes.
static_assert(sizeof(NvmlProcessInfo) == 24, "nvmlProcessInfo_t is 24 bytes");
struct NvmlProcessUtilization {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long time_stamp;  // microseconds since the epoch
  unsigned int sm_util;
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};
static_assert(sizeof(NvmlProcessUtilization) == 32, "nvmlProcessUtilizationSample_t is 32 bytes");
// How far back a process's work counts as now. NVML samples every 1/6 s or so, but on an H200
// (driver 580) a job running 48 ms steps showed no sample in the last second about every 1.2 s,
// and a job's first step went unnoticed for seconds while the worker ran: three seconds
// of history cost a job that stops that much of the worker's time, and spare a running job.
constexpr auto kBusyWindow = std::chrono::seconds(3);
struct NvmlUtilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

class NvmlProbe : public GpuActivityProbe {
 public:
  static Result<std::unique_ptr<GpuActivityProbe>> Open(const std::string& pci_bus_id,
                                                        int nvml_index) {
    auto probe = std::unique_ptr<NvmlProbe>(new NvmlProbe());
    UCUDNN_RETURN_IF_ERROR(probe->Load());
    UCUDNN_RETURN_IF_ERROR(probe->Check(probe->init_(), "nvmlInit_v2"));
    probe->initialised_ = true;
    if (!pci_bus_id.empty()) {
      UCUDNN_RETURN_IF_ERROR(probe->Check(probe->by_pci_(pci_bus_id.c_str(), &probe->device_),
                                          "nvmlDeviceGetHandleByPciBusId_v2(" + pci_bus_id + ")"));
    } else {
      UCUDNN_RETURN_IF_ERROR(
          probe->Check(probe->by_index_(static_cast<unsigned>(nvml_index), &probe->device_),
                       "nvmlDeviceGetHandleByIndex_v2(" + std::to_string(nvml_index) + ")"));
    }
    return std::unique_ptr<GpuActivityProbe>(std::move(probe));
  }
  ~NvmlProbe() override {
    if (initialised_) {
      const NvmlReturn r = shutdown_();
      if (r != kNvmlSuccess) spdlog::debug("nvmlShutdown: {}", ErrorText(r));
    }
    if (library_ != nullptr) dlclose(library_);
  }
  std::string_view name() const override { return "nvml"; }

  Result<GpuActivitySample> Sample() override {
    GpuActivitySample sample;
    // The list can grow between the size query and the read: retry with room to spare.
    std::vector<NvmlProcessInfo> infos(16);
    for (int attempt = 0;; ++attempt) {
      unsigned int count = static_cast<unsigned int>(infos.size());
      const NvmlReturn r = processes_(device_, &count, infos.data());
      if (r == kNvmlInsufficientSize && attempt < 3) {
        infos.resize(static_cast<size_t>(count) + 16);
        continue;
      }
      UCUDNN_RETURN_IF_ERROR(Check(r, "nvmlDeviceGetComputeRunningProcesses_v3"));
      for (unsigned int i = 0; i < count && i < infos.size(); ++i) {
        sample.compute_pids.push_back(infos[i].pid);
      }
      break;
    }
    sample.busy_pids = BusyPids(sample.compute_pids);
    NvmlUtilization utilization{};
    UCUDNN_RETURN_IF_ERROR(
        Check(utilization_(device_, &utilization), "nvmlDeviceGetUtilizationRates"));
    sample.utilization_percent = static_cast<int>(utilization.gpu);
    return sample;
  }

  // The processes of `holders` that ran work in the last kBusyWindow; all of them where this
  // driver has no per-process utilization (logged once).
  std::vector<uint32_t> BusyPids(const std::vector<uint32_t>& holders) {
    if (holders.empty()) return {};
    if (process_utilization_ != nullptr) {
      const auto since = std::chrono::system_clock::now() - kBusyWindow;
      const unsigned long long since_us = static_cast<unsigned long long>(
          std::chrono::duration_cast<std::chrono::microseconds>(since.time_since_epoch()).count());
      std::vector<NvmlProcessUtilization> samples(64);
      unsigned int count = static_cast<unsigned int>(samples.size());
      NvmlReturn r = process_utilization_(device_, samples.data(), &count, since_us);
      if (r == kNvmlInsufficientSize) {
        samples.resize(static_cast<size_t>(count) + 64);
        count = static_cast<unsigned int>(samples.size());
        r = process_utilization_(device_, samples.data(), &count, since_us);
      }
      if (r == kNvmlNotFound) return {};  // no process ran anything since
      if (r == kNvmlSuccess) {
        std::vector<uint32_t> busy;
        for (unsigned int i = 0; i < count && i < samples.size(); ++i) {
          const NvmlProcessUtilization& u = samples[i];
          if (u.sm_util > 0 && std::find(busy.begin(), busy.end(), u.pid) == busy.end()) {
            busy.push_back(u.pid);
          }
        }
        return busy;
      }
      if (!per_process_warned_) {
        spdlog::warn(
            "idle gate (nvml): nvmlDeviceGetProcessUtilization: {}; every process with "
            "a context on the GPU counts as busy",
            ErrorText(r));
        per_process_warned_ = true;
      }
    }
    return holders;
  }

 private:
  NvmlProbe() = default;

  template <typename Fn>
  Status Symbol(const char* name, Fn& fn) {
    void* address = dlsym(library_, name);
    if (address == nullptr) {
      return Unavailable(std::string("NVML: ") + name + " not found in libnvidia-ml.so.1");
    }
    fn = reinterpret_cast<Fn>(address);
    return Status::Ok();
  }
  Status Load() {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr) {
      const char* why = dlerror();
      return Unavailable(std::string("NVML: cannot load libnvidia-ml.so.1 (no NVIDIA driver?): ") +
                         (why != nullptr ? why : "unknown error"));
    }
    UCUDNN_RETURN_IF_ERROR(Symbol("nvmlInit_v2", init_));
    UCUDNN_RETURN_IF_ERROR(Symbol("nvmlShutdown", shutdown_));
    UCUDNN_RETURN_IF_ERROR(Symbol("nvmlErrorString", error_string_));
    UCUDNN_RETURN_IF_ERROR(Symbol("nvmlDeviceGetHandleByPciBusId_v2", by_pci_));
    UCUDNN_RETURN_IF_ERROR(Symbol("nvmlDeviceGetHandleByIndex_v2", by_index_));
    UCUDNN_RETURN_IF_ERROR(Symbol("nvmlDeviceGetComputeRunningProcesses_v3", processes_));
    UCUDNN_RETURN_IF_ERROR(Symbol("nvmlDeviceGetUtilizationRates", utilization_));
    // Optional (older drivers): without it every context holder counts as busy.
    process_utilization_ = reinterpret_cast<decltype(process_utilization_)>(
        dlsym(library_, "nvmlDeviceGetProcessUtilization"));
    return Status::Ok();
  }
  std::string ErrorText(NvmlReturn r) const {
    const char* text = error_string_ != nullptr ? error_string_(r) : nullptr;
    return (text != nullptr ? std::string(text) : "NVML error") + " (" + std::to_string(r) + ")";
  }
  Status Check(NvmlReturn r, const std::string& call) const {
    if (r == kNvmlSuccess) return Status::Ok();
    return Unavailable(call + " failed: " + ErrorText(r));
  }

  void* library_ = nullptr;
  bool initialised_ = false;
  NvmlDevice device_ = nullptr;
  NvmlReturn (*init_)() = nullptr;
  NvmlReturn (*shutdown_)() = nullptr;
  const char* (*error_string_)(NvmlReturn) = nullptr;
  NvmlReturn (*by_pci_)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*by_index_)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*processes_)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
  NvmlReturn (*utilization_)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*process_utilization_)(NvmlDevice, NvmlProcessUtilization*, unsigned int*,
                                     unsigned long long) = nullptr;
  bool per_process_warned_ = false;
};

class IdleProbe : public GpuActivityProbe {
 public:
  std::string_view name() const override { return "idle"; }
  Result<GpuActivitySample> Sample() override { return GpuActivitySample{}; }
};

}  // namespace

Result<std::unique_ptr<GpuActivityProbe>> MakeNvmlProbe(const std::string& pci_bus_id,
                                                        int nvml_index) {
  return NvmlProbe::Open(pci_bus_id, nvml_index);
}

std::unique_ptr<GpuActivityProbe> MakeIdleProbe() { return std::make_unique<IdleProbe>(); }

int OtherProcesses(const std::vector<uint32_t>& pids, uint32_t self_pid, bool self_has_context) {
  int others = 0;
  bool self_seen = false;
  for (uint32_t pid : pids) {
    if (pid == self_pid) {
      self_seen = true;
    } else {
      ++others;
    }
  }
  if (self_has_context && !self_seen && others > 0) --others;
  return others;
}

bool IdleForClaim(const std::vector<GpuActivitySample>& window, const IdleGateConfig& config,
                  bool judge_utilization) {
  double utilization_sum = 0;
  int utilization_known = 0;
  for (const GpuActivitySample& s : window) {
    // Our own work quiet (judge_utilization): every busy process is another's.
    const int others = judge_utilization
                           ? OtherProcesses(s.busy_pids, config.self_pid, false)
                           : OtherProcesses(s.busy_pids, config.self_pid, config.self_has_context);
    if (others > 0) return false;
    if (s.utilization_percent >= 0) {
      utilization_sum += s.utilization_percent;
      ++utilization_known;
    }
  }
  return !judge_utilization || utilization_known == 0 ||
         utilization_sum / utilization_known <= config.max_utilization_percent;
}

IdleGate::IdleGate(std::unique_ptr<GpuActivityProbe> probe, IdleGateConfig config, SleepFn sleep)
    : probe_(std::move(probe)), config_(config), sleep_(std::move(sleep)) {
  if (!sleep_) sleep_ = [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
}

void IdleGate::SetOwnProcesses(std::function<std::vector<uint32_t>()> pids) {
  std::lock_guard lock(mu_);
  own_pids_ = std::move(pids);
}

Result<GpuActivitySample> IdleGate::SampleLocked() {
  Result<GpuActivitySample> sample = probe_->Sample();
  if (!sample.ok() || !own_pids_) return sample;
  const std::vector<uint32_t> own = own_pids_();
  std::erase_if(sample->busy_pids,
                [&](uint32_t pid) { return std::find(own.begin(), own.end(), pid) != own.end(); });
  return sample;
}

DeviceActivity IdleGate::ToActivity(const Result<GpuActivitySample>& sample) {
  DeviceActivity activity;
  if (!sample.ok()) {
    if (!warned_) {
      spdlog::warn("idle gate ({}): cannot see the GPU's activity, measuring as if idle: {}",
                   probe_->name(), sample.status().ToString());
      warned_ = true;
    }
    return activity;
  }
  warned_ = false;
  activity.known = true;
  activity.other_processes =
      OtherProcesses(sample->busy_pids, config_.self_pid, config_.self_has_context);
  activity.utilization_percent = sample->utilization_percent;
  return activity;
}

DeviceActivity IdleGate::Look() { return LookAt(false); }

DeviceActivity IdleGate::LookAt(bool fresh) {
  const auto now = std::chrono::steady_clock::now();
  last_own_work_ = now.time_since_epoch().count();
  std::lock_guard lock(mu_);
  if (fresh || !last_sample_ || config_.look_reuse.count() <= 0 ||
      now - last_sample_at_ >= config_.look_reuse) {
    last_sample_ = SampleLocked();
    last_sample_at_ = now;
  }
  return ToActivity(*last_sample_);
}

bool IdleGate::WaitUntilIdle(const std::atomic<bool>* cancel) {
  const auto cancelled = [&] { return cancel != nullptr && cancel->load(); };
  bool waited = false;
  gave_up_ = false;
  const auto start = std::chrono::steady_clock::now();
  // Counted in polls, not wall time, so that a test's sleep function decides it.
  const int64_t max_polls =
      config_.max_pause.count() > 0
          ? std::max<int64_t>(
                1, config_.max_pause.count() / std::max<int64_t>(1, config_.poll.count()))
          : -1;
  int64_t polls = 0;
  int quiet_looks = 0;  // consecutive, while paused
  while (!cancelled()) {
    const DeviceActivity activity = LookAt(/*fresh=*/waited);
    // Once paused, our own work is over and the device's utilization is the others' alone: it
    // must be low too. NVML's per-process samples come at the driver's period, so a process
    // running work can show none in the last second (an H200 job at 48 ms steps looked idle
    // every 1.2 s, and each resume slowed its steps by up to 2x).
    const bool device_quiet = !waited || activity.utilization_percent < 0 ||
                              activity.utilization_percent <= config_.max_utilization_percent;
    const bool quiet = !activity.known || (activity.other_processes == 0 && device_quiet);
    quiet_looks = quiet ? quiet_looks + 1 : 0;
    if (quiet && (!waited || quiet_looks >= std::max(1, config_.resume_quiet_looks))) {
      if (waited) {
        paused_ = false;
        spdlog::info(
            "idle gate ({}): the GPU is idle again after {:.1f} s; resuming", probe_->name(),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      return true;
    }
    if (!waited) {
      waited = true;
      paused_ = true;
      ++pauses_;
      spdlog::info(
          "idle gate ({}): {} other process(es) on the GPU; benchmark paused (what is measured "
          "is kept), polling every {} ms",
          probe_->name(), activity.other_processes, config_.poll.count());
    }
    if (max_polls >= 0 && polls >= max_polls) {
      spdlog::warn(
          "idle gate ({}): the GPU has run other work for {} ms; giving the job back to idle "
          "workers",
          probe_->name(), config_.max_pause.count());
      gave_up_ = true;
      break;
    }
    sleep_(config_.poll);
    ++polls;
  }
  paused_ = false;
  return false;
}

bool IdleGate::IdleForClaim() {
  const auto last = std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(last_own_work_.load()));
  const bool judge_utilization = last_own_work_.load() == 0 ||
                                 std::chrono::steady_clock::now() - last >= config_.own_work_quiet;
  const int samples = judge_utilization ? config_.window_samples : 1;
  std::vector<GpuActivitySample> window;
  for (int i = 0; i < samples; ++i) {
    if (i > 0) sleep_(config_.sample_interval);
    Result<GpuActivitySample> sample = [&] {
      std::lock_guard lock(mu_);
      return SampleLocked();
    }();
    if (!sample.ok()) {
      std::lock_guard lock(mu_);
      ToActivity(sample);  // logs once
      return true;
    }
    window.push_back(std::move(sample).value());
  }
  return worker::IdleForClaim(window, config_, judge_utilization);
}

}  // namespace ucudnn::worker
