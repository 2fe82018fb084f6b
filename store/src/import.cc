#include "ucudnn/store/import.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ucudnn/core/timing_csv.h"

namespace ucudnn::store {

Result<ImportSummary> ImportTimingsFileWithSummary(Store& store, const std::string& path,
                                                   const std::optional<DeviceFingerprint>& device) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open timing file " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  ImportSummary summary;
  auto header = ParseDeviceHeader(text);
  if (header.ok()) {
    if (device.has_value() && !(*device == *header)) {
      return InvalidArgument(path + ": the file's device (" + header->Key() +
                             ") differs from the device given (" + device->Key() + ")");
    }
    summary.device = *header;
  } else if (header.status().code() == StatusCode::kNotFound && device.has_value()) {
    UCUDNN_RETURN_IF_ERROR(Validate(*device).WithContext("device"));
    summary.device = *device;
  } else if (header.status().code() == StatusCode::kNotFound) {
    return InvalidArgument(path +
                           ": no device fingerprint ('# device.*' header lines); name the "
                           "device the timings were measured on");
  } else {
    return header.status().WithContext(path);
  }

  auto tables = ParseTimingCsv(text);
  if (!tables.ok()) return tables.status().WithContext(path);
  if (tables->empty()) return InvalidArgument(path + ": no timings in the file");
  std::vector<ProblemTimings> problems;
  problems.reserve(tables->size());
  int64_t total = 0;
  for (auto& [key, entry] : *tables) {
    total += static_cast<int64_t>(entry.table.entries.size());
    problems.push_back({entry.problem, std::move(entry.table.entries)});
  }
  std::string measured_by = "import:" + std::filesystem::path(path).filename().string();
  if (measured_by.size() > kMaxMeasuredByBytes) {
    measured_by.resize(kMaxMeasuredByBytes);
  }
  // A file's worker-limit rows (an offline worker's cap or memory) do not replace what is
  // measured in the database already: the store keeps those, and counts what it wrote.
  UCUDNN_ASSIGN_OR_RETURN(summary.rows, store.ImportTimings(summary.device, problems, measured_by));
  summary.kept_stored = total - summary.rows;
  summary.problems = static_cast<int64_t>(problems.size());
  spdlog::info(
      "imported {}: {} problems, {} timing rows for device {} ({}); {} worker-limit rows left "
      "out over measurements already stored",
      path, summary.problems, summary.rows, summary.device.name, FormatHash(summary.device.Hash()),
      summary.kept_stored);
  return summary;
}

Result<int64_t> ImportTimingsFile(Store& store, const std::string& path) {
  UCUDNN_ASSIGN_OR_RETURN(ImportSummary summary, ImportTimingsFileWithSummary(store, path));
  return summary.rows;
}

}  // namespace ucudnn::store
