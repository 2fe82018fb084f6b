#include "ucudnn/core/problem.h"

#include <array>
#include <charconv>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ucudnn/core/enum_names.h"

namespace ucudnn {
namespace {

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

Status OutOfRange(std::string_view field, int64_t lo, int64_t hi, int64_t got) {
  return InvalidArgument(std::string(field) + ": must be in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], got " + std::to_string(got));
}

Status CheckRange(std::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) return OutOfRange(field, lo, hi, value);
  return Status::Ok();
}

// Height or width the filter covers once dilated. Only called with bounded, positive inputs.
int64_t DilatedExtent(int64_t filter, int64_t dilation) { return (filter - 1) * dilation + 1; }

// Product of the factors, or nullopt on int64 overflow.
std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return std::nullopt;
  }
  return product;
}

Status CheckElements(std::string_view expression, std::string_view what,
                     std::initializer_list<int64_t> factors) {
  std::optional<int64_t> n = CheckedProduct(factors);
  if (!n || *n > kMaxElementsPerSample) {
    return InvalidArgument(std::string(expression) + ": " + std::string(what) +
                           " must be at most " + std::to_string(kMaxElementsPerSample) + ", got " +
                           (n ? std::to_string(*n) : std::string("more than 2^63")));
  }
  return Status::Ok();
}

// The names of the problem's enums, in canonical keys, CSV files, the database and the CLI.
constexpr NameTable<ConvOp, 3> kConvOpNames{{
    {"fwd", ConvOp::kForward},
    {"bwd_data", ConvOp::kBackwardData},
    {"bwd_filter", ConvOp::kBackwardFilter},
}};
constexpr NameTable<DataType, 3> kDataTypeNames{{
    {"fp32", DataType::kFloat32},
    {"fp16", DataType::kFloat16},
    {"bf16", DataType::kBFloat16},
}};
constexpr NameTable<Layout, 2> kLayoutNames{{
    {"nchw", Layout::kNCHW},
    {"nhwc", Layout::kNHWC},
}};
constexpr NameTable<MathMode, 4> kMathModeNames{{
    {"default", MathMode::kDefault},
    {"tensor_op", MathMode::kTensorOp},
    {"tensor_op_allow_conversion", MathMode::kTensorOpAllowConversion},
    {"fma", MathMode::kFma},
}};

// A value of an enum field that has a name.
template <typename Enum>
Status CheckEnum(std::string_view field, Enum value) {
  if (ToString(value) != kUnnamedEnumValue) return Status::Ok();
  return InvalidArgument(std::string(field) + ": unknown value " +
                         std::to_string(static_cast<int>(value)));
}

// A pad as large as the filter would only add outputs that see nothing but zeros. With the
// filter itself invalid (`extent_known` false) only the sign of the pad can be judged.
Status CheckPad(std::string_view field, int64_t pad, bool extent_known, int64_t extent,
                std::string_view extent_name) {
  if (!extent_known) {
    return pad < 0
               ? InvalidArgument(std::string(field) + ": must be >= 0, got " + std::to_string(pad))
               : Status::Ok();
  }
  if (pad >= 0 && pad < extent) return Status::Ok();
  return InvalidArgument(std::string(field) + ": must be in [0, " + std::to_string(extent - 1) +
                         "] (below the dilated filter " + std::string(extent_name) + " " +
                         std::to_string(extent) + "), got " + std::to_string(pad));
}

// groups in range, then dividing c and k where those are valid: the first failure only.
Status CheckGroups(const ConvProblem& p, bool c_ok, bool k_ok) {
  UCUDNN_RETURN_IF_ERROR(CheckRange("groups", p.groups, 1, kMaxChannels));
  if (c_ok && p.c % p.groups != 0) {
    return InvalidArgument("groups: must divide c (" + std::to_string(p.c) + "), got " +
                           std::to_string(p.groups));
  }
  if (k_ok && p.k % p.groups != 0) {
    return InvalidArgument("groups: must divide k (" + std::to_string(p.k) + "), got " +
                           std::to_string(p.groups));
  }
  return Status::Ok();
}

// The output along `axis` ('h' or 'w') is positive: the padded input covers the dilated filter.
// The bounds checked before keep the sum far from overflow (at most about 2^21).
Status CheckOutputExtent(char axis, int64_t size, int64_t pad, int64_t extent) {
  if (size + 2 * pad >= extent) return Status::Ok();
  const std::string a(1, axis);
  return InvalidArgument("out_" + a + ": must be positive, but " + a + " + 2 * pad_" + a + " (" +
                         std::to_string(size + 2 * pad) + ") is smaller than the dilated filter " +
                         (axis == 'h' ? "height" : "width") + " (" + std::to_string(extent) + ")");
}

// ---- Canonical key parsing -----------------------------------------------------------------

constexpr std::string_view kKeyVersion = "v1";
constexpr size_t kKeyFields = 16;

// ParseCanonicalKey() prefixes every error with "canonical key: ".
Status KeyError(std::string message) { return InvalidArgument(std::move(message)); }

// A decimal integer exactly as std::to_string writes it (no '+', no leading zeros, no "-0"), so
// that every accepted key is the one CanonicalKey() would write.
Result<int64_t> ParseCanonicalInt(std::string_view name, std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || std::to_string(value) != text) {
    return KeyError(std::string(name) + ": not a canonical decimal integer: " + Quoted(text));
  }
  return value;
}

// "a,b" -> (a, b).
Result<std::pair<int64_t, int64_t>> ParseIntPair(std::string_view name, std::string_view text) {
  size_t comma = text.find(',');
  if (comma == std::string_view::npos) {
    return KeyError(std::string(name) + ": expected two integers \"A,B\", got " + Quoted(text));
  }
  UCUDNN_ASSIGN_OR_RETURN(int64_t first, ParseCanonicalInt(name, text.substr(0, comma)));
  UCUDNN_ASSIGN_OR_RETURN(int64_t second, ParseCanonicalInt(name, text.substr(comma + 1)));
  return std::make_pair(first, second);
}

std::vector<std::string_view> Split(std::string_view s, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(separator, start);
    if (pos == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

// Several field errors in one status: "N invalid fields: c: ...; h: ...". One error stays as it
// is. FieldErrors (proto_convert.h) reads this form back to put every entry under its path, so
// an entry must never contain "; " (none of the messages below does: they hold no caller text).
Status JoinFieldErrors(const std::vector<Status>& errors) {
  if (errors.empty()) return Status::Ok();
  if (errors.size() == 1) return errors.front();
  std::string message = std::to_string(errors.size()) + " invalid fields: ";
  for (size_t i = 0; i < errors.size(); ++i) {
    if (i > 0) message += "; ";
    message += errors[i].message();
  }
  return InvalidArgument(std::move(message));
}

}  // namespace

std::string_view ToString(ConvOp op) { return NameOf(op, kConvOpNames); }
std::string_view ToString(DataType t) { return NameOf(t, kDataTypeNames); }
std::string_view ToString(Layout l) { return NameOf(l, kLayoutNames); }
std::string_view ToString(MathMode m) { return NameOf(m, kMathModeNames); }
Result<ConvOp> ParseConvOp(std::string_view s) { return ParseName("op", s, kConvOpNames); }
Result<DataType> ParseDataType(std::string_view s) {
  return ParseName("data type", s, kDataTypeNames);
}
Result<Layout> ParseLayout(std::string_view s) { return ParseName("layout", s, kLayoutNames); }
Result<MathMode> ParseMathMode(std::string_view s) {
  return ParseName("math mode", s, kMathModeNames);
}

size_t ElementSize(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
  }
  return 0;  // not a DataType; Validate() rejects it
}

int64_t ConvProblem::out_h() const {
  return (h + 2 * pad_h - DilatedExtent(r, dilation_h)) / stride_h + 1;
}

int64_t ConvProblem::out_w() const {
  return (w + 2 * pad_w - DilatedExtent(s, dilation_w)) / stride_w + 1;
}

// The tensor the op reads along the batch first (x, dy, x) and the second one (y, dx, dy).
size_t ConvProblem::input_bytes_per_sample() const {
  const int64_t elements =
      op == ConvOp::kBackwardData ? output_elements_per_sample() : input_elements_per_sample();
  return static_cast<size_t>(elements) * ElementSize(data_type);
}

size_t ConvProblem::output_bytes_per_sample() const {
  const int64_t elements =
      op == ConvOp::kBackwardData ? input_elements_per_sample() : output_elements_per_sample();
  return static_cast<size_t>(elements) * ElementSize(data_type);
}

size_t ConvProblem::filter_bytes() const {
  return static_cast<size_t>(filter_elements()) * ElementSize(data_type);
}

double ConvProblem::flops(int64_t batch) const {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(k) * static_cast<double>(out_h()) *
         static_cast<double>(out_w()) * static_cast<double>(c / groups) * static_cast<double>(r) *
         static_cast<double>(s);
}

Status Validate(const ConvProblem& p) {
  // Every invalid field is reported, each once, in field order. A check that depends on other
  // fields (padding on the filter extent, groups on c and k, output size, element counts) runs
  // only when those fields are valid, so an error always names its real cause.
  std::vector<Status> errors;
  auto check = [&errors](Status status) {
    const bool ok = status.ok();
    if (!ok) errors.push_back(std::move(status));
    return ok;
  };
  check(CheckEnum("op", p.op));
  const bool c_ok = check(CheckRange("c", p.c, 1, kMaxChannels));
  const bool h_ok = check(CheckRange("h", p.h, 1, kMaxSpatial));
  const bool w_ok = check(CheckRange("w", p.w, 1, kMaxSpatial));
  const bool k_ok = check(CheckRange("k", p.k, 1, kMaxChannels));
  const bool r_ok = check(CheckRange("r", p.r, 1, kMaxFilterSpatial));
  const bool s_ok = check(CheckRange("s", p.s, 1, kMaxFilterSpatial));
  check(CheckRange("stride_h", p.stride_h, 1, kMaxStrideOrDilation));
  check(CheckRange("stride_w", p.stride_w, 1, kMaxStrideOrDilation));
  const bool dh_ok = check(CheckRange("dilation_h", p.dilation_h, 1, kMaxStrideOrDilation));
  const bool dw_ok = check(CheckRange("dilation_w", p.dilation_w, 1, kMaxStrideOrDilation));

  const bool extent_h_ok = r_ok && dh_ok;
  const bool extent_w_ok = s_ok && dw_ok;
  const int64_t extent_h = extent_h_ok ? DilatedExtent(p.r, p.dilation_h) : 0;
  const int64_t extent_w = extent_w_ok ? DilatedExtent(p.s, p.dilation_w) : 0;
  const bool pad_h_ok = check(CheckPad("pad_h", p.pad_h, extent_h_ok, extent_h, "height"));
  const bool pad_w_ok = check(CheckPad("pad_w", p.pad_w, extent_w_ok, extent_w, "width"));
  const bool groups_ok = check(CheckGroups(p, c_ok, k_ok));

  check(CheckEnum("data_type", p.data_type));
  check(CheckEnum("compute_type", p.compute_type));
  check(CheckEnum("layout", p.layout));
  check(CheckEnum("math", p.math));

  const bool out_h_ok =
      h_ok && extent_h_ok && pad_h_ok && check(CheckOutputExtent('h', p.h, p.pad_h, extent_h));
  const bool out_w_ok =
      w_ok && extent_w_ok && pad_w_ok && check(CheckOutputExtent('w', p.w, p.pad_w, extent_w));

  if (c_ok && h_ok && w_ok) {
    check(CheckElements("c * h * w", "input elements per sample", {p.c, p.h, p.w}));
  }
  if (k_ok && out_h_ok && out_w_ok && p.stride_h >= 1 && p.stride_w >= 1) {
    check(CheckElements("k * out_h * out_w", "output elements per sample",
                        {p.k, p.out_h(), p.out_w()}));
  }
  if (k_ok && c_ok && groups_ok && r_ok && s_ok) {
    check(CheckElements("k * (c / groups) * r * s", "filter elements",
                        {p.k, p.c / p.groups, p.r, p.s}));
  }
  return JoinFieldErrors(errors);
}

Status ValidateBatch(int64_t batch) { return CheckRange("batch", batch, 1, kMaxBatch); }

std::string CanonicalKey(const ConvProblem& p) {
  using std::to_string;
  std::string key;
  key.reserve(160);
  key += kKeyVersion;
  key += ";op=" + std::string(ToString(p.op));
  key += ";c=" + to_string(p.c) + ";h=" + to_string(p.h) + ";w=" + to_string(p.w);
  key += ";k=" + to_string(p.k) + ";r=" + to_string(p.r) + ";s=" + to_string(p.s);
  key += ";pad=" + to_string(p.pad_h) + "," + to_string(p.pad_w);
  key += ";stride=" + to_string(p.stride_h) + "," + to_string(p.stride_w);
  key += ";dil=" + to_string(p.dilation_h) + "," + to_string(p.dilation_w);
  key += ";g=" + to_string(p.groups);
  key += ";dtype=" + std::string(ToString(p.data_type));
  key += ";ctype=" + std::string(ToString(p.compute_type));
  key += ";layout=" + std::string(ToString(p.layout));
  key += ";math=" + std::string(ToString(p.math));
  return key;
}

namespace {

Result<ConvProblem> ParseCanonicalKeyFields(std::string_view key) {
  static constexpr std::array<std::string_view, kKeyFields> kNames = {
      "",    "op",     "c",   "h", "w",     "k",     "r",      "s",
      "pad", "stride", "dil", "g", "dtype", "ctype", "layout", "math"};
  std::vector<std::string_view> parts = Split(key, ';');
  if (parts.size() != kKeyFields) {
    return KeyError("expected " + std::to_string(kKeyFields) + " fields separated by ';', got " +
                    std::to_string(parts.size()));
  }
  if (parts[0] != kKeyVersion) {
    return KeyError("unsupported version " + Quoted(parts[0]) + " (expected \"v1\")");
  }
  std::array<std::string_view, kKeyFields> values;
  for (size_t i = 1; i < kKeyFields; ++i) {
    const std::string_view part = parts[i];
    const std::string prefix = std::string(kNames[i]) + "=";
    if (part.substr(0, prefix.size()) != prefix) {
      return KeyError("field " + std::to_string(i) + " must start with " + Quoted(prefix) +
                      ", got " + Quoted(part));
    }
    values[i] = part.substr(prefix.size());
  }

  ConvProblem p;
  UCUDNN_ASSIGN_OR_RETURN(p.op, ParseConvOp(values[1]));
  UCUDNN_ASSIGN_OR_RETURN(p.c, ParseCanonicalInt("c", values[2]));
  UCUDNN_ASSIGN_OR_RETURN(p.h, ParseCanonicalInt("h", values[3]));
  UCUDNN_ASSIGN_OR_RETURN(p.w, ParseCanonicalInt("w", values[4]));
  UCUDNN_ASSIGN_OR_RETURN(p.k, ParseCanonicalInt("k", values[5]));
  UCUDNN_ASSIGN_OR_RETURN(p.r, ParseCanonicalInt("r", values[6]));
  UCUDNN_ASSIGN_OR_RETURN(p.s, ParseCanonicalInt("s", values[7]));
  UCUDNN_ASSIGN_OR_RETURN(auto pad, ParseIntPair("pad", values[8]));
  UCUDNN_ASSIGN_OR_RETURN(auto stride, ParseIntPair("stride", values[9]));
  UCUDNN_ASSIGN_OR_RETURN(auto dilation, ParseIntPair("dil", values[10]));
  std::tie(p.pad_h, p.pad_w) = pad;
  std::tie(p.stride_h, p.stride_w) = stride;
  std::tie(p.dilation_h, p.dilation_w) = dilation;
  UCUDNN_ASSIGN_OR_RETURN(p.groups, ParseCanonicalInt("g", values[11]));
  UCUDNN_ASSIGN_OR_RETURN(p.data_type, ParseDataType(values[12]));
  UCUDNN_ASSIGN_OR_RETURN(p.compute_type, ParseDataType(values[13]));
  UCUDNN_ASSIGN_OR_RETURN(p.layout, ParseLayout(values[14]));
  UCUDNN_ASSIGN_OR_RETURN(p.math, ParseMathMode(values[15]));

  UCUDNN_RETURN_IF_ERROR(Validate(p));
  // Every piece was checked to be canonical above; this guards the whole against future drift.
  if (CanonicalKey(p) != key) return KeyError("not in canonical form: " + Quoted(key));
  return p;
}

}  // namespace

Result<ConvProblem> ParseCanonicalKey(std::string_view key) {
  Result<ConvProblem> parsed = ParseCanonicalKeyFields(key);
  if (!parsed.ok()) return parsed.status().WithContext("canonical key");
  return parsed;
}

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ull;  // FNV 64-bit prime
  }
  return hash;
}

uint64_t StableHash(const ConvProblem& p) { return Fnv1a64(CanonicalKey(p)); }

std::string HashHex(uint64_t hash) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i) {
    hex[i] = kDigits[hash & 0xF];
    hash >>= 4;
  }
  return hex;
}

}  // namespace ucudnn
