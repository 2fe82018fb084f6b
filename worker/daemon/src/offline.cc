#include "ucudnn/worker/offline.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>

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

std::string OneLine(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
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

}  // namespace

std::string DeviceHeader(const DeviceFingerprint& d, const std::vector<std::string>& notes) {
  std::string h = "# ucudnn timings written by ucudnn-worker --offline\n";
  h += "# device.backend: " + OneLine(d.backend) + "\n";
  h += "# device.name: " + OneLine(d.name) + "\n";
  h += "# device.cc: " + std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) + "\n";
  h += "# device.sm_count: " + std::to_string(d.sm_count) + "\n";
  h += "# device.memory_bytes: " + std::to_string(d.memory_bytes) + "\n";
  h += "# device.cudnn_version: " + std::to_string(d.cudnn_version) + "\n";
  h += "# device.cuda_runtime_version: " + std::to_string(d.cuda_runtime_version) + "\n";
  h += "# device.blas: " + OneLine(d.blas) + "\n";
  h += "# device.key: " + OneLine(d.Key()) + "\n";
  h += "# device.hash: " + store::FormatHash(d.Hash()) + "\n";
  for (const std::string& note : notes) h += "# " + OneLine(note) + "\n";
  return h;
}

Result<DeviceFingerprint> ParseDeviceHeader(std::string_view text) {
  std::map<std::string, std::string> fields;
  size_t pos = 0;
  int line_number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    constexpr std::string_view kPrefix = "# device.";
    if (line.substr(0, kPrefix.size()) != kPrefix) continue;
    line.remove_prefix(kPrefix.size());
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument("line " + std::to_string(line_number) +
                             ": device header line without ':'");
    }
    std::string key(line.substr(0, colon));
    std::string_view value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (!fields.emplace(key, std::string(value)).second) {
      return InvalidArgument("line " + std::to_string(line_number) + ": device." + key +
                             " given twice");
    }
  }
  if (fields.empty()) return NotFound("no '# device.*' header lines");

  DeviceFingerprint d;
  auto get = [&](const std::string& key, std::string* out) -> Status {
    auto it = fields.find(key);
    if (it == fields.end()) return InvalidArgument("device." + key + ": missing from the header");
    *out = it->second;
    return Status::Ok();
  };
  auto get_int = [&](const std::string& key, auto* out) -> Status {
    std::string text_value;
    UCUDNN_RETURN_IF_ERROR(get(key, &text_value));
    UCUDNN_ASSIGN_OR_RETURN(
        *out, ParseInteger<std::remove_pointer_t<decltype(out)>>("device." + key, text_value));
    return Status::Ok();
  };
  UCUDNN_RETURN_IF_ERROR(get("backend", &d.backend));
  UCUDNN_RETURN_IF_ERROR(get("name", &d.name));
  std::string cc;
  UCUDNN_RETURN_IF_ERROR(get("cc", &cc));
  const size_t dot = cc.find('.');
  auto major = ParseInteger<int>("device.cc", std::string_view(cc).substr(0, dot));
  auto minor = ParseInteger<int>("device.cc", std::string_view(cc).substr(dot + 1));
  if (dot == std::string::npos || !major.ok() || !minor.ok()) {
    return InvalidArgument("device.cc: expected MAJOR.MINOR, got '" + cc + "'");
  }
  d.cc_major = *major;
  d.cc_minor = *minor;
  UCUDNN_RETURN_IF_ERROR(get_int("sm_count", &d.sm_count));
  UCUDNN_RETURN_IF_ERROR(get_int("memory_bytes", &d.memory_bytes));
  UCUDNN_RETURN_IF_ERROR(get_int("cudnn_version", &d.cudnn_version));
  UCUDNN_RETURN_IF_ERROR(get_int("cuda_runtime_version", &d.cuda_runtime_version));
  UCUDNN_RETURN_IF_ERROR(get("blas", &d.blas));
  UCUDNN_RETURN_IF_ERROR(Validate(d).WithContext("device header"));
  if (auto it = fields.find("key"); it != fields.end() && it->second != d.Key()) {
    return InvalidArgument("device.key: '" + it->second + "' does not match the fields ('" +
                           d.Key() + "')");
  }
  return d;
}

Result<OfflineSummary> RunOffline(std::vector<BenchmarkDevice>& devices,
                                  const OfflineRequest& request, const std::atomic<bool>* cancel) {
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
  UCUDNN_RETURN_IF_ERROR(Validate(request.benchmark));

  // One entry per distinct problem, up to its largest mini-batch.
  TimingTables tables;
  std::vector<std::string> order;
  for (size_t i = 0; i < request.kernels.size(); ++i) {
    const Kernel& kernel = request.kernels[i];
    UCUDNN_RETURN_IF_ERROR(
        Validate(kernel.problem).WithContext("kernels[" + std::to_string(i) + "].problem"));
    UCUDNN_RETURN_IF_ERROR(
        ValidateBatch(kernel.mini_batch).WithContext("kernels[" + std::to_string(i) + "]"));
    const std::string key = CanonicalKey(kernel.problem);
    auto [it, inserted] = tables.try_emplace(key);
    if (inserted) {
      it->second.problem = kernel.problem;
      it->second.layer = LayerName(kernel);
      order.push_back(key);
    }
    it->second.mini_batch = std::max(it->second.mini_batch, kernel.mini_batch);
  }

  const Clock::time_point start = Clock::now();
  std::atomic<bool> stop{false};  // a cancel request: no new problem, the one in hand is dropped
  std::mutex mu;
  size_t next = 0;
  std::set<std::string> measured;               // keys whose table is in `tables`
  std::map<std::string, std::string> failures;  // key -> why it was not measured
  std::vector<std::string> lost_devices;
  auto work = [&](BenchmarkDevice& device) {
    BenchmarkOptions options = request.benchmark;
    options.cancel = &stop;
    while (true) {
      std::string key;
      {
        std::lock_guard lock(mu);
        if (next >= order.size() || stop) return;
        key = order[next++];
      }
      ProblemTimings& entry = tables.at(key);  // each key is handled by one thread only
      const Clock::time_point problem_start = Clock::now();
      auto table = BenchmarkProblem(*device.backend, entry.problem, entry.mini_batch,
                                    request.policy, options);
      std::lock_guard lock(mu);
      if (!table.ok()) {
        if (stop) return;  // cancelled: the problem in hand is simply not measured
        const bool lost = table.status().code() == StatusCode::kDeviceLost;
        spdlog::error("[{}] {} {}: {}", device.slot, entry.layer, ToString(entry.problem.op),
                      table.status().ToString());
        failures[key] = table.status().ToString();
        if (lost) {
          // Nothing more can run on this device in this process; other devices carry on.
          spdlog::critical("[{}] device lost; this device's thread stops", device.slot);
          lost_devices.push_back(device.slot);
          return;
        }
        continue;  // the next problem may well succeed: one failure must not lose the run
      }
      entry.table = std::move(table).value();
      measured.insert(key);
      spdlog::info("[{}] {}/{} {} {}: {} timings in {:.1f} s", device.slot, measured.size(),
                   order.size(), entry.layer, ToString(entry.problem.op),
                   entry.table.entries.size(),
                   std::chrono::duration<double>(Clock::now() - problem_start).count());
    }
  };
  // Forwards an external cancel request to the benchmarks' own flag.
  std::atomic<bool> done{false};
  std::thread watcher;
  if (cancel != nullptr) {
    watcher = std::thread([&] {
      while (!done && !stop) {
        if (cancel->load()) {
          stop = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  std::vector<std::thread> threads;
  for (auto& device : devices) threads.emplace_back(work, std::ref(device));
  for (auto& t : threads) t.join();
  done = true;
  if (watcher.joinable()) watcher.join();

  OfflineSummary summary;
  summary.device = devices.front().backend->fingerprint();
  summary.cancelled = stop.load();
  summary.lost_devices = lost_devices;
  for (const std::string& key : order) {
    const ProblemTimings& entry = tables.at(key);
    const std::string name =
        entry.layer + " " + std::string(ToString(entry.problem.op)) + " (" + key + ")";
    if (auto it = failures.find(key); it != failures.end()) {
      summary.failed.push_back(name + ": " + it->second);
    } else if (measured.count(key) == 0) {
      summary.not_measured.push_back(name);
    }
  }
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (measured.empty()) {
    if (summary.cancelled) {
      return Unavailable("offline benchmark cancelled before any problem was measured; " +
                         request.output + " not written");
    }
    return Internal("no problem could be measured, " + request.output + " not written; first: " +
                    (summary.failed.empty() ? std::string("none") : summary.failed.front()));
  }

  // What was measured is written, whatever happened to the rest: a partial file imports like a
  // whole one, and its header says what is missing.
  TimingTables written;
  for (const std::string& key : measured) written.emplace(key, tables.at(key));
  summary.problems = static_cast<int64_t>(written.size());
  for (const auto& [key, entry] : written) {
    summary.timings += static_cast<int64_t>(entry.table.entries.size());
    for (const Timing& t : entry.table.entries) summary.ok += t.status == TimingStatus::kOk;
  }
  UCUDNN_ASSIGN_OR_RETURN(std::string csv, WriteTimingCsv(written));
  std::vector<std::string> notes = request.notes;
  notes.push_back("policy: " + std::string(ToString(request.policy)) + "; " +
                  std::to_string(summary.problems) + " problems, " +
                  std::to_string(summary.timings) + " timings");
  if (!summary.complete()) {
    notes.push_back("INCOMPLETE: " + std::to_string(order.size() - measured.size()) + " of " +
                    std::to_string(order.size()) + " problems not measured (" +
                    std::to_string(summary.failed.size()) + " failed" +
                    (summary.cancelled ? ", run stopped by a signal" : "") +
                    (lost_devices.empty() ? "" : ", device lost") + ")");
    for (const std::string& f : summary.failed) notes.push_back("failed: " + f);
  }
  UCUDNN_RETURN_IF_ERROR(
      WriteFileAtomically(request.output, DeviceHeader(summary.device, notes) + csv));
  return summary;
}

}  // namespace ucudnn::worker
