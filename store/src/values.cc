#include "values.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/enum_names.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/text.h"
#include "ucudnn/store/store.h"

namespace ucudnn::store {

std::string FormatHash(uint64_t hash) { return HashHex(hash); }

Result<uint64_t> ParseHash(std::string_view hex) {
  if (hex.empty() || hex.size() > 16) {
    return InvalidArgument("hash: must be 1 to 16 hex digits, got " + QuoteForError(hex));
  }
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(hex.data(), hex.data() + hex.size(), value, 16);
  if (error != std::errc() || end != hex.data() + hex.size()) {
    return InvalidArgument("hash: must be 1 to 16 hex digits, got " + QuoteForError(hex));
  }
  return value;
}

namespace {

constexpr NameTable<JobState, 4> kJobStateNames{{
    {"queued", JobState::kQueued},
    {"running", JobState::kRunning},
    {"done", JobState::kDone},
    {"failed", JobState::kFailed},
}};

}  // namespace

std::string_view ToString(JobState s) { return NameOf(s, kJobStateNames); }

Result<JobState> ParseJobState(std::string_view s) {
  if (std::optional<JobState> state = ValueNamed(s, kJobStateNames)) return *state;
  return InvalidArgument("state: must be one of " + ListNames(kJobStateNames) + "; got \"" +
                         std::string(s) + "\"");
}

}  // namespace ucudnn::store

namespace ucudnn::store::internal {

std::string IntArrayLiteral(const std::vector<int64_t>& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(values[i]);
  }
  out += '}';
  return out;
}

std::string DoubleArrayLiteral(const std::vector<double>& values) {
  std::string out = "{";
  char text[40];
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    // %.17g round-trips every double exactly.
    std::snprintf(text, sizeof text, "%.17g", values[i]);
    out += text;
  }
  out += '}';
  return out;
}

std::string TextArrayLiteral(const std::vector<std::string>& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    // Every element double-quoted, with '\' and '"' escaped: no other character is special.
    out += '"';
    for (char ch : values[i]) {
      if (ch == '\\' || ch == '"') out += '\\';
      out += ch;
    }
    out += '"';
  }
  out += '}';
  return out;
}

std::string CleanText(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  for (char ch : text) {
    if (ch != '\0') out += ch;
  }
  if (out.size() > max_bytes) {
    size_t cut = max_bytes;
    // Step back over UTF-8 continuation bytes so no character is split.
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
  }
  return out;
}

namespace {

std::string Field(size_t index, const char* field) {
  return "timings[" + std::to_string(index) + "]." + field;
}

std::string FormatDouble(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

}  // namespace

Status ValidateTimings(const std::vector<Timing>& timings) {
  if (timings.empty()) {
    return InvalidArgument(
        "timings: must not be empty (record unsupported or failed algorithms as such)");
  }
  if (timings.size() > kMaxTimingsPerWrite) {
    return InvalidArgument("timings: at most " + std::to_string(kMaxTimingsPerWrite) +
                           " per write, got " + std::to_string(timings.size()));
  }
  std::set<std::tuple<int64_t, int, std::string>> seen;
  for (size_t i = 0; i < timings.size(); ++i) {
    const Timing& t = timings[i];
    if (t.micro_batch < 1 || t.micro_batch > kMaxBatch) {
      return InvalidArgument(Field(i, "micro_batch") + ": must be in [1, " +
                             std::to_string(kMaxBatch) + "], got " + std::to_string(t.micro_batch));
    }
    // "algo: ..." / "engine_config: ..." under this entry, as the other fields are named.
    if (const Status algo = CheckAlgorithm(AlgorithmOf(t)); !algo.ok()) {
      return InvalidArgument("timings[" + std::to_string(i) + "]." + algo.message());
    }
    if (!std::isfinite(t.time_ms) || t.time_ms < 0) {
      return InvalidArgument(Field(i, "time_ms") + ": must be finite and >= 0, got " +
                             FormatDouble(t.time_ms));
    }
    if (!std::isfinite(t.spread_ms) || t.spread_ms < 0) {
      return InvalidArgument(Field(i, "spread_ms") + ": must be finite and >= 0, got " +
                             FormatDouble(t.spread_ms));
    }
    // A JSON object the database parses (a malformed one fails the whole write there); the
    // bound keeps rows small.
    if (!t.conditions.empty() &&
        (t.conditions.size() > 1024 || t.conditions.front() != '{' || t.conditions.back() != '}')) {
      return InvalidArgument(Field(i, "conditions") +
                             ": must be empty or a JSON object of at most 1024 bytes");
    }
    if (t.samples < 0) {
      return InvalidArgument(Field(i, "samples") + ": must be >= 0, got " +
                             std::to_string(t.samples));
    }
    if (t.workspace_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgument(Field(i, "workspace_bytes") + ": must be at most 2^63-1, got " +
                             std::to_string(t.workspace_bytes));
    }
    if (ToString(t.status) == kUnnamedEnumValue) {
      return InvalidArgument(Field(i, "status") + ": unknown value " +
                             std::to_string(static_cast<int>(t.status)));
    }
    if (!seen.emplace(t.micro_batch, t.algo, t.engine_config).second) {
      return InvalidArgument("timings[" + std::to_string(i) + "]: duplicate (micro_batch " +
                             std::to_string(t.micro_batch) + ", algo " +
                             AlgorithmText(AlgorithmOf(t)) + ")");
    }
  }
  return Status::Ok();
}

Status ValidateMeasuredBy(const std::string& measured_by) {
  if (measured_by.size() > kMaxMeasuredByBytes) {
    return InvalidArgument("measured_by: at most " + std::to_string(kMaxMeasuredByBytes) +
                           " bytes, got " + std::to_string(measured_by.size()));
  }
  if (measured_by.find('\0') != std::string::npos) {
    return InvalidArgument("measured_by: must not contain NUL bytes");
  }
  if (HasControlCharacter(measured_by)) {
    return InvalidArgument("measured_by: must not contain control characters");
  }
  return Status::Ok();
}

Status ValidateWorkerId(const std::string& worker_id) {
  if (worker_id.empty() || worker_id.size() > kMaxWorkerIdBytes) {
    return InvalidArgument("worker_id: must be 1 to " + std::to_string(kMaxWorkerIdBytes) +
                           " bytes, got " + std::to_string(worker_id.size()));
  }
  if (worker_id.find('\0') != std::string::npos) {
    return InvalidArgument("worker_id: must not contain NUL bytes");
  }
  if (HasControlCharacter(worker_id)) {
    return InvalidArgument("worker_id: must not contain control characters");
  }
  return Status::Ok();
}

Status ValidateWorkspaceLimit(std::optional<uint64_t> workspace_limit) {
  if (workspace_limit && *workspace_limit > kMaxJobWorkspaceLimit) {
    return InvalidArgument("workspace_limit: at most 1 TiB (" +
                           std::to_string(kMaxJobWorkspaceLimit) + "), got " +
                           std::to_string(*workspace_limit));
  }
  return Status::Ok();
}

bool WorkspaceLimitCovers(std::optional<uint64_t> job, std::optional<uint64_t> request) {
  if (!job) return true;
  return request && *job <= *request;
}

std::optional<uint64_t> WidestWorkspaceLimit(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a || !b) return std::nullopt;
  return std::min(*a, *b);
}

std::string TimestampSql(std::string_view column) {
  std::string c(column);
  return "to_char(" + c + " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')";
}

}  // namespace ucudnn::store::internal
