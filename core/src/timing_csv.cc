#include "ucudnn/core/timing_csv.h"

#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/text.h"

namespace ucudnn {
namespace {

enum Column {
  kLayer,
  kN,
  kC,
  kH,
  kW,
  kK,
  kR,
  kS,
  kPad,
  kStride,
  kDtype,
  kLayout,
  kOp,
  kMicroBatch,
  kAlgo,
  kTimeMs,
  kWorkspaceBytes,
  kRequiredCount,
  // Optional problem columns.
  kPadW = kRequiredCount,
  kStrideW,
  kDilationH,
  kDilationW,
  kGroups,
  kCtype,
  kMath,
  // Optional measurement columns.
  kStatus,
  kSpreadMs,
  kSamples,
  kError,
  // Optional depth columns (3-D problems).
  kDepth,
  kFilterDepth,
  kPadD,
  kStrideD,
  kDilationD,
  kColumnCount,
};

constexpr std::array<std::string_view, kColumnCount> kColumnNames = {"layer",
                                                                     "n",
                                                                     "c",
                                                                     "h",
                                                                     "w",
                                                                     "k",
                                                                     "r",
                                                                     "s",
                                                                     "pad",
                                                                     "stride",
                                                                     "dtype",
                                                                     "layout",
                                                                     "op",
                                                                     "micro_batch",
                                                                     "algo",
                                                                     "time_ms",
                                                                     "workspace_bytes",
                                                                     "pad_w",
                                                                     "stride_w",
                                                                     "dilation_h",
                                                                     "dilation_w",
                                                                     "groups",
                                                                     "ctype",
                                                                     "math",
                                                                     "status",
                                                                     "spread_ms",
                                                                     "samples",
                                                                     "error",
                                                                     "d",
                                                                     "t",
                                                                     "pad_d",
                                                                     "stride_d",
                                                                     "dilation_d"};

// A time: finite and non-negative.
Result<double> ParseMilliseconds(std::string_view column, std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return InvalidArgument(std::string(column) + ": not a number: " + QuoteForError(text));
  }
  if (!std::isfinite(value) || value < 0) {
    return InvalidArgument(std::string(column) + ": must be finite and non-negative, got " +
                           QuoteForError(text));
  }
  return value;
}

Result<int64_t> ParseBatchColumn(std::string_view column, std::string_view text) {
  return ParseInteger<int64_t>(column, text, 1, kMaxBatch);
}

// One data row -> (problem, timing, layer, n).
struct Row {
  ConvProblem problem;
  Timing timing;
  std::string layer;
  int64_t mini_batch = 0;
};

Result<Row> ParseRow(const std::vector<std::string>& fields,
                     const std::array<int, kColumnCount>& index) {
  auto field = [&](Column c) -> std::optional<std::string_view> {
    if (index[c] < 0) return std::nullopt;
    return std::string_view(fields[static_cast<size_t>(index[c])]);
  };
  auto integer = [&](Column c, int64_t fallback) -> Result<int64_t> {
    std::optional<std::string_view> text = field(c);
    if (!text) return fallback;
    return ParseInteger<int64_t>(kColumnNames[c], *text);
  };
  Row row;
  row.layer = std::string(*field(kLayer));
  UCUDNN_ASSIGN_OR_RETURN(row.mini_batch, ParseBatchColumn("n", *field(kN)));
  ConvProblem& p = row.problem;
  UCUDNN_ASSIGN_OR_RETURN(p.op, ParseConvOp(Lowercase(*field(kOp))));
  UCUDNN_ASSIGN_OR_RETURN(p.c, integer(kC, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.h, integer(kH, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.w, integer(kW, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.k, integer(kK, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.r, integer(kR, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.s, integer(kS, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.pad_h, integer(kPad, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.pad_w, integer(kPadW, p.pad_h));
  UCUDNN_ASSIGN_OR_RETURN(p.stride_h, integer(kStride, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.stride_w, integer(kStrideW, p.stride_h));
  UCUDNN_ASSIGN_OR_RETURN(p.dilation_h, integer(kDilationH, 1));
  UCUDNN_ASSIGN_OR_RETURN(p.dilation_w, integer(kDilationW, p.dilation_h));
  UCUDNN_ASSIGN_OR_RETURN(p.groups, integer(kGroups, 1));
  UCUDNN_ASSIGN_OR_RETURN(p.d, integer(kDepth, 1));
  UCUDNN_ASSIGN_OR_RETURN(p.t, integer(kFilterDepth, 1));
  UCUDNN_ASSIGN_OR_RETURN(p.pad_d, integer(kPadD, 0));
  UCUDNN_ASSIGN_OR_RETURN(p.stride_d, integer(kStrideD, 1));
  UCUDNN_ASSIGN_OR_RETURN(p.dilation_d, integer(kDilationD, 1));
  UCUDNN_ASSIGN_OR_RETURN(p.data_type, ParseDataType(Lowercase(*field(kDtype))));
  UCUDNN_ASSIGN_OR_RETURN(p.layout, ParseLayout(Lowercase(*field(kLayout))));
  p.compute_type = DataType::kFloat32;
  if (std::optional<std::string_view> ctype = field(kCtype)) {
    UCUDNN_ASSIGN_OR_RETURN(p.compute_type, ParseDataType(Lowercase(*ctype)));
  }
  p.math = DefaultMath(p.data_type);
  if (std::optional<std::string_view> math = field(kMath)) {
    UCUDNN_ASSIGN_OR_RETURN(p.math, ParseMathMode(Lowercase(*math)));
  }
  UCUDNN_RETURN_IF_ERROR(Validate(p));

  Timing& t = row.timing;
  UCUDNN_ASSIGN_OR_RETURN(t.micro_batch, ParseBatchColumn("micro_batch", *field(kMicroBatch)));
  // One column for both spaces (old files stay readable, an engine key has no commas): a
  // legacy algorithm's number or an engine configuration's canonical key.
  // The framework's own convolution is written "framework(<identity>)" (AlgorithmText).
  constexpr std::string_view kFramework = "framework(";
  if (const std::string_view algo = *field(kAlgo); algo.substr(0, 3) == "eng") {
    UCUDNN_RETURN_IF_ERROR(ParseEngineConfigKey(algo).status().WithContext("algo"));
    t.algo = kEngineAlgo;
    t.engine_config = std::string(algo);
  } else if (algo.substr(0, kFramework.size()) == kFramework && algo.back() == ')') {
    const std::string_view identity =
        algo.substr(kFramework.size(), algo.size() - kFramework.size() - 1);
    UCUDNN_RETURN_IF_ERROR(CheckFrameworkIdentity("algo", identity));
    t.algo = kFrameworkAlgo;
    t.engine_config = std::string(identity);
  } else {
    UCUDNN_ASSIGN_OR_RETURN(t.algo, ParseInteger<int>("algo", algo, 0, 1000));
  }
  UCUDNN_ASSIGN_OR_RETURN(t.time_ms, ParseMilliseconds("time_ms", *field(kTimeMs)));
  UCUDNN_ASSIGN_OR_RETURN(t.workspace_bytes,
                          ParseInteger<uint64_t>("workspace_bytes", *field(kWorkspaceBytes)));
  if (std::optional<std::string_view> status = field(kStatus)) {
    UCUDNN_ASSIGN_OR_RETURN(t.status, ParseTimingStatus(*status));
  }
  if (std::optional<std::string_view> spread = field(kSpreadMs)) {
    UCUDNN_ASSIGN_OR_RETURN(t.spread_ms, ParseMilliseconds("spread_ms", *spread));
  }
  if (std::optional<std::string_view> samples = field(kSamples)) {
    UCUDNN_ASSIGN_OR_RETURN(t.samples, ParseInteger<int>("samples", *samples, 0, 1'000'000'000));
  }
  if (std::optional<std::string_view> error = field(kError)) t.error = std::string(*error);
  return row;
}

}  // namespace

Result<TimingTables> ParseTimingCsv(std::string_view text) {
  TimingTables tables;
  std::map<std::string, std::set<std::tuple<int64_t, int, std::string>>> seen;
  std::array<int, kColumnCount> index;
  index.fill(-1);
  size_t column_count = 0;
  bool header_seen = false;
  CsvLineReader lines(text);
  std::string_view line;
  while (lines.Next(line)) {
    const std::string where = lines.Where();
    Result<std::vector<std::string>> fields = SplitCsvRecord(line);
    if (!fields.ok()) return fields.status().WithContext(where);
    if (!header_seen) {
      header_seen = true;
      column_count = fields->size();
      for (size_t i = 0; i < fields->size(); ++i) {
        const std::string name = Lowercase((*fields)[i]);
        for (int c = 0; c < kColumnCount; ++c) {
          if (name != kColumnNames[static_cast<size_t>(c)]) continue;
          if (index[static_cast<size_t>(c)] >= 0) {
            return InvalidArgument(where + ": header: column '" + name + "' appears twice");
          }
          index[static_cast<size_t>(c)] = static_cast<int>(i);
        }
      }
      for (int c = 0; c < kRequiredCount; ++c) {
        if (index[static_cast<size_t>(c)] < 0) {
          return InvalidArgument(where + ": header: missing column '" +
                                 std::string(kColumnNames[static_cast<size_t>(c)]) + "'");
        }
      }
      continue;
    }
    if (fields->size() != column_count) {
      return InvalidArgument(where + ": expected " + std::to_string(column_count) +
                             " fields, got " + std::to_string(fields->size()));
    }
    Result<Row> row = ParseRow(*fields, index);
    if (!row.ok()) return row.status().WithContext(where);
    const std::string key = CanonicalKey(row->problem);
    const Timing& timing = row->timing;
    if (!seen[key].emplace(timing.micro_batch, timing.algo, timing.engine_config).second) {
      return InvalidArgument(where + ": micro_batch " + std::to_string(timing.micro_batch) +
                             ", algo " + AlgorithmText(AlgorithmOf(timing)) +
                             ": repeated for the same problem");
    }
    auto [it, inserted] = tables.try_emplace(key);
    if (inserted) {
      it->second.problem = row->problem;
      it->second.layer = std::move(row->layer);
      it->second.mini_batch = row->mini_batch;
    }
    it->second.table.entries.push_back(std::move(row->timing));
  }
  if (!header_seen) return InvalidArgument("no header line");
  return tables;
}

Result<TimingTables> ReadTimingCsvFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open timing file '" + path + "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Unavailable("cannot read timing file '" + path + "'");
  Result<TimingTables> tables = ParseTimingCsv(buffer.str());
  if (!tables.ok()) return tables.status().WithContext(path);
  return tables;
}

namespace {

// Line breaks become spaces: one record (or header line) per line.
std::string OneLine(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::string FormatDouble(double value) {
  char buffer[64];
  // Shortest text that reads back to the same double.
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (error != std::errc()) return "nan";
  return std::string(buffer, end);
}

std::string QuoteIfNeeded(std::string_view text) {
  // A leading '#' would read as a comment line.
  if (text.find_first_of(",\"") == std::string_view::npos && (text.empty() || text[0] != '#')) {
    return std::string(text);
  }
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

bool NeedsProblemColumns(const ConvProblem& p) {
  return p.pad_h != p.pad_w || p.stride_h != p.stride_w || p.dilation_h != 1 || p.dilation_w != 1 ||
         p.groups != 1 || p.compute_type != DataType::kFloat32 ||
         p.math != DefaultMath(p.data_type);
}

bool NeedsMeasurementColumns(const Timing& t) {
  return t.status != TimingStatus::kOk || t.spread_ms != 0 || t.samples != 0 || !t.error.empty();
}

}  // namespace

Result<std::string> WriteTimingCsv(const TimingTables& tables) {
  bool problem_columns = false;
  bool measurement_columns = false;
  bool depth_columns = false;
  for (const auto& [key, timings] : tables) {
    UCUDNN_RETURN_IF_ERROR(Validate(timings.problem).WithContext(key));
    if (timings.layer.find_first_of("\r\n") != std::string::npos) {
      return InvalidArgument(key + ": layer: must not contain a line break");
    }
    if (timings.mini_batch < 1 || timings.mini_batch > kMaxBatch) {
      return InvalidArgument(key + ": mini_batch: must be in [1, " + std::to_string(kMaxBatch) +
                             "], got " + std::to_string(timings.mini_batch));
    }
    problem_columns = problem_columns || NeedsProblemColumns(timings.problem);
    depth_columns = depth_columns || timings.problem.is_3d();
    for (const Timing& t : timings.table.entries) {
      measurement_columns = measurement_columns || NeedsMeasurementColumns(t);
    }
  }
  std::string out;
  for (int c = 0; c < kColumnCount; ++c) {
    if (c >= kPadW && c < kStatus && !problem_columns) continue;
    if (c >= kStatus && c < kDepth && !measurement_columns) continue;
    if (c >= kDepth && !depth_columns) continue;
    if (c > 0) out += ',';
    out += kColumnNames[static_cast<size_t>(c)];
  }
  out += '\n';
  for (const auto& [key, timings] : tables) {
    const ConvProblem& p = timings.problem;
    std::string prefix = QuoteIfNeeded(timings.layer) + ',' + std::to_string(timings.mini_batch);
    for (int64_t v : {p.c, p.h, p.w, p.k, p.r, p.s, p.pad_h, p.stride_h}) {
      prefix += ',' + std::to_string(v);
    }
    prefix += ',' + std::string(ToString(p.data_type)) + ',' + Uppercase(ToString(p.layout)) + ',' +
              std::string(ToString(p.op));
    for (const Timing& t : timings.table.entries) {
      if (t.micro_batch < 1 || t.micro_batch > kMaxBatch) {
        return InvalidArgument(key + ": micro_batch: must be in [1, " + std::to_string(kMaxBatch) +
                               "], got " + std::to_string(t.micro_batch));
      }
      if (!std::isfinite(t.time_ms) || t.time_ms < 0 || !std::isfinite(t.spread_ms) ||
          t.spread_ms < 0) {
        return InvalidArgument(key + ": time_ms and spread_ms: must be finite and non-negative");
      }
      out += prefix;
      if (Status algo = CheckAlgorithm(AlgorithmOf(t)); !algo.ok()) return algo.WithContext(key);
      out += ',' + std::to_string(t.micro_batch) + ',' +
             QuoteIfNeeded(AlgorithmText(AlgorithmOf(t))) + ',' + FormatDouble(t.time_ms) + ',' +
             std::to_string(t.workspace_bytes);
      if (problem_columns) {
        for (int64_t v : {p.pad_w, p.stride_w, p.dilation_h, p.dilation_w, p.groups}) {
          out += ',' + std::to_string(v);
        }
        out += ',' + std::string(ToString(p.compute_type)) + ',' + std::string(ToString(p.math));
      }
      if (measurement_columns) {
        out += ',' + std::string(ToString(t.status)) + ',' + FormatDouble(t.spread_ms) + ',' +
               std::to_string(t.samples) + ',' + QuoteIfNeeded(OneLine(t.error));
      }
      if (depth_columns) {
        for (int64_t v : {p.d, p.t, p.pad_d, p.stride_d, p.dilation_d}) {
          out += ',' + std::to_string(v);
        }
      }
      out += '\n';
    }
  }
  return out;
}

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
  h += "# device.hash: " + HashHex(d.Hash()) + "\n";
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

const TimingTable* FindTimings(const TimingTables& tables, const ConvProblem& problem) {
  auto it = tables.find(CanonicalKey(problem));
  return it == tables.end() ? nullptr : &it->second.table;
}

}  // namespace ucudnn
