// Loading a timing CSV (an offline worker run's output, or a measured table) into the store:
// what `ucudnn import FILE` runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/status.h"
#include "ucudnn/store/store.h"

namespace ucudnn::store {

struct ImportSummary {
  DeviceFingerprint device;
  int64_t problems = 0;
  int64_t rows = 0;  // timing rows written
  // Rows of the file left out: at the measuring worker's limits (kWorkerLimitError) where the
  // database holds a measurement (kOk) of the same key, which they must not replace.
  int64_t kept_stored = 0;
};

// Loads a timing CSV into `store` in one transaction (Store::ImportTimings), measured_by
// "import:<file name>"; importing a file again replaces its rows, except that a row at the
// measuring worker's limits never replaces a measurement (the store keeps it). The device
// comes from the file's "# device.*" header (ParseDeviceHeader, timing_csv.h) unless `device` is
// given (for files without one, such as the measured H100 tables); a header that disagrees with a
// given device is kInvalidArgument. Errors: kNotFound (no file), kInvalidArgument (bad CSV or
// header, the message names the line or field), and the store's errors (kUnavailable when the
// database is away).
Result<ImportSummary> ImportTimingsFileWithSummary(
    Store& store, const std::string& path,
    const std::optional<DeviceFingerprint>& device = std::nullopt);

// The same, answering the number of timing rows written.
Result<int64_t> ImportTimingsFile(Store& store, const std::string& path);

}  // namespace ucudnn::store
