#include "ucudnn/worker/offline.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/text.h"
#include "ucudnn/store/store.h"

namespace ucudnn::worker {
namespace {

using Clock = std::chrono::steady_clock;

// "layer2.0.conv2/fwd" -> "layer2.0.conv2": the CSV has the op in its own column.
std::string LayerName(const Kernel& kernel) {
  const std::string suffix = "/" + std::string(ToString(kernel.problem.op));
  const std::string& name = kernel.name;
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return name.substr(0, name.size() - suffix.size());
  }
  return name.empty() ? "kernel" : name;
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return InvalidArgument("output: cannot create " + temporary);
    out << contents;
    out.flush();
    if (!out) return Internal("output: writing " + temporary + " failed");
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    return Internal("output: renaming " + temporary + " to " + path + " failed");
  }
  return Status::Ok();
}

Status CheckOfflineRequest(const std::vector<BenchmarkDevice>& devices,
                           const OfflineRequest& request) {
  if (devices.empty()) return InvalidArgument("devices: at least one device is needed");
  for (const auto& device : devices) {
    if (!device.backend) return InvalidArgument("devices[" + device.slot + "].backend: missing");
    if (!(device.backend->fingerprint() == devices.front().backend->fingerprint())) {
      return InvalidArgument(
          "devices: " + device.slot + " is a different device model than " + devices.front().slot +
          "; an offline file holds one device's timings (choose GPUs of one model with --gpus)");
    }
  }
  if (request.kernels.empty()) return InvalidArgument("kernels: nothing to benchmark");
  if (request.output.empty()) return InvalidArgument("output: a file path is required");
  return Validate(request.benchmark);
}

// The problems to measure: one entry per distinct problem, up to its largest mini-batch; `order`
// holds their keys in the order of first appearance.
struct Problems {
  TimingTables tables;
  std::vector<std::string> order;
};

Result<Problems> DistinctProblems(const std::vector<Kernel>& kernels) {
  Problems problems;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& kernel = kernels[i];
    UCUDNN_RETURN_IF_ERROR(
        Validate(kernel.problem).WithContext("kernels[" + std::to_string(i) + "].problem"));
    UCUDNN_RETURN_IF_ERROR(
        ValidateBatch(kernel.mini_batch).WithContext("kernels[" + std::to_string(i) + "]"));
    const std::string key = CanonicalKey(kernel.problem);
    auto [it, inserted] = problems.tables.try_emplace(key);
    if (inserted) {
      it->second.problem = kernel.problem;
      it->second.layer = LayerName(kernel);
      problems.order.push_back(key);
    }
    it->second.mini_batch = std::max(it->second.mini_batch, kernel.mini_batch);
  }
  return problems;
}

// What the device threads share while they take problems one by one.
struct Measuring {
  explicit Measuring(Problems& to_measure) : problems(to_measure) {}
  Problems& problems;
  std::atomic<bool> stop{false};  // a cancel request: no new problem, the one in hand is dropped
  std::mutex mu;
  size_t next = 0;                              // guarded by mu, as the three below
  std::set<std::string> measured;               // keys whose table is in problems.tables
  std::map<std::string, std::string> failures;  // key -> why it was not measured
  std::vector<std::string> lost_devices;
};

// One device's thread: measures problems until none is left, the run is cancelled, or the device
// is lost.
void MeasureOnDevice(BenchmarkDevice& device, const OfflineRequest& request, Measuring& m) {
  BenchmarkOptions options = request.benchmark;
  options.cancel = &m.stop;
  // Offline timings are taken on an idle device too (--idle-gate): a GPU shared with a training
  // job gives times the planner must not use.
  options.gate = device.gate.get();
  const std::vector<std::string>& order = m.problems.order;
  while (true) {
    std::string key;
    {
      std::lock_guard lock(m.mu);
      if (m.next >= order.size() || m.stop) return;
      key = order[m.next++];
    }
    ProblemTimings& entry = m.problems.tables.at(key);  // each key is handled by one thread only
    const Clock::time_point problem_start = Clock::now();
    auto table =
        BenchmarkProblem(*device.backend, entry.problem, entry.mini_batch, request.policy, options);
    std::lock_guard lock(m.mu);
    if (!table.ok()) {
      if (m.stop) return;  // cancelled: the problem in hand is simply not measured
      const bool lost = table.status().code() == StatusCode::kDeviceLost;
      spdlog::error("[{}] {} {}: {}", device.slot, entry.layer, ToString(entry.problem.op),
                    table.status().ToString());
      m.failures[key] = table.status().ToString();
      if (lost) {
        // Nothing more can run on this device in this process; other devices carry on.
        spdlog::critical("[{}] device lost; this device's thread stops", device.slot);
        m.lost_devices.push_back(device.slot);
        return;
      }
      continue;  // the next problem may well succeed: one failure must not lose the run
    }
    entry.table = std::move(table).value();
    m.measured.insert(key);
    spdlog::info("[{}] {}/{} {} {}: {} timings in {:.1f} s", device.slot, m.measured.size(),
                 order.size(), entry.layer, ToString(entry.problem.op), entry.table.entries.size(),
                 std::chrono::duration<double>(Clock::now() - problem_start).count());
  }
}

// Every device's thread, with an external cancel request forwarded to the benchmarks' own flag.
void MeasureOnAllDevices(std::vector<BenchmarkDevice>& devices, const OfflineRequest& request,
                         const std::atomic<bool>* cancel, Measuring& m) {
  std::atomic<bool> done{false};
  std::thread watcher;
  if (cancel != nullptr) {
    watcher = std::thread([&] {
      while (!done && !m.stop) {
        if (cancel->load()) {
          m.stop = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  std::vector<std::thread> threads;
  for (auto& device : devices) {
    threads.emplace_back([&request, &m, &device] { MeasureOnDevice(device, request, m); });
  }
  for (auto& t : threads) t.join();
  done = true;
  if (watcher.joinable()) watcher.join();
}

// What the run did not measure, by problem: "layer op (key): error" or "layer op (key)".
void ListUnmeasured(const Measuring& m, OfflineSummary* summary) {
  for (const std::string& key : m.problems.order) {
    const ProblemTimings& entry = m.problems.tables.at(key);
    const std::string name =
        entry.layer + " " + std::string(ToString(entry.problem.op)) + " (" + key + ")";
    if (auto it = m.failures.find(key); it != m.failures.end()) {
      summary->failed.push_back(name + ": " + it->second);
    } else if (m.measured.count(key) == 0) {
      summary->not_measured.push_back(name);
    }
  }
}

// What was measured is written, whatever happened to the rest: a partial file imports like a
// whole one, and its header says what is missing.
Status WriteMeasured(const OfflineRequest& request, const Measuring& m, OfflineSummary* summary) {
  TimingTables written;
  for (const std::string& key : m.measured) written.emplace(key, m.problems.tables.at(key));
  summary->problems = static_cast<int64_t>(written.size());
  for (const auto& [key, entry] : written) {
    summary->timings += static_cast<int64_t>(entry.table.entries.size());
    for (const Timing& t : entry.table.entries) summary->ok += t.status == TimingStatus::kOk;
  }
  UCUDNN_ASSIGN_OR_RETURN(std::string csv, WriteTimingCsv(written));
  std::vector<std::string> notes = request.notes;
  notes.push_back("policy: " + std::string(ToString(request.policy)) + "; " +
                  std::to_string(summary->problems) + " problems, " +
                  std::to_string(summary->timings) + " timings");
  if (!summary->complete()) {
    const size_t total = m.problems.order.size();
    notes.push_back("INCOMPLETE: " + std::to_string(total - m.measured.size()) + " of " +
                    std::to_string(total) + " problems not measured (" +
                    std::to_string(summary->failed.size()) + " failed" +
                    (summary->cancelled ? ", run stopped by a signal" : "") +
                    (m.lost_devices.empty() ? "" : ", device lost") + ")");
    for (const std::string& f : summary->failed) notes.push_back("failed: " + f);
  }
  return WriteFileAtomically(request.output, DeviceHeader(summary->device, notes) + csv);
}

}  // namespace

Result<OfflineSummary> RunOffline(std::vector<BenchmarkDevice>& devices,
                                  const OfflineRequest& request, const std::atomic<bool>* cancel) {
  UCUDNN_RETURN_IF_ERROR(CheckOfflineRequest(devices, request));
  UCUDNN_ASSIGN_OR_RETURN(Problems problems, DistinctProblems(request.kernels));

  const Clock::time_point start = Clock::now();
  Measuring m(problems);
  MeasureOnAllDevices(devices, request, cancel, m);

  OfflineSummary summary;
  summary.device = devices.front().backend->fingerprint();
  summary.cancelled = m.stop.load();
  summary.lost_devices = m.lost_devices;
  ListUnmeasured(m, &summary);
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (m.measured.empty()) {
    if (summary.cancelled) {
      return Unavailable("offline benchmark cancelled before any problem was measured; " +
                         request.output + " not written");
    }
    return Internal("no problem could be measured, " + request.output + " not written; first: " +
                    (summary.failed.empty() ? std::string("none") : summary.failed.front()));
  }
  UCUDNN_RETURN_IF_ERROR(WriteMeasured(request, m, &summary));
  return summary;
}

}  // namespace ucudnn::worker
