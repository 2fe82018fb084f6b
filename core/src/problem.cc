#include "ucudnn/core/problem.h"

#include <array>
#include <charconv>
#include <optional>
#include <string>
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

std::string_view ExtentName(char axis) {
  return axis == 'd' ? "depth" : axis == 'h' ? "height" : "width";
}

// The output along `axis` ('d', 'h' or 'w') is positive: the padded input covers the dilated
// filter. The bounds checked before keep the sum far from overflow (at most about 2^21).
Status CheckOutputExtent(char axis, int64_t size, int64_t pad, int64_t extent) {
  if (size + 2 * pad >= extent) return Status::Ok();
  const std::string a(1, axis);
  return InvalidArgument("out_" + a + ": must be positive, but " + a + " + 2 * pad_" + a + " (" +
                         std::to_string(size + 2 * pad) + ") is smaller than the dilated filter " +
                         std::string(ExtentName(axis)) + " (" + std::to_string(extent) + ")");
}

// ---- Canonical key parsing -----------------------------------------------------------------

constexpr std::string_view kKeyVersion = "v1";
constexpr size_t kKeyFields = 16;
constexpr size_t kKeyFields3d = 18;  // with d and t

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

std::vector<std::string_view> Split(std::string_view s, char separator);

// "a,b" -> {a, b}; "a,b,c" -> {a, b, c} with `count` 3 (a 3-D key's depth, height and width).
Result<std::vector<int64_t>> ParseInts(std::string_view name, std::string_view text, size_t count) {
  const std::vector<std::string_view> parts = Split(text, ',');
  if (parts.size() != count) {
    return KeyError(std::string(name) + ": expected " + std::to_string(count) +
                    " integers separated by ',', got " + Quoted(text));
  }
  std::vector<int64_t> values;
  for (std::string_view part : parts) {
    UCUDNN_ASSIGN_OR_RETURN(int64_t value, ParseCanonicalInt(name, part));
    values.push_back(value);
  }
  return values;
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

int64_t ConvProblem::out_d() const {
  return (d + 2 * pad_d - DilatedExtent(t, dilation_d)) / stride_d + 1;
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
  return 2.0 * static_cast<double>(batch) * static_cast<double>(k) *
         static_cast<double>(out_d() * t) * static_cast<double>(out_h()) *
         static_cast<double>(out_w()) * static_cast<double>(c / groups) * static_cast<double>(r) *
         static_cast<double>(s);
}

void SetPerAxis(ConvProblem& p, std::span<const int64_t> pad, std::span<const int64_t> stride,
                std::span<const int64_t> dilation) {
  const size_t h = pad.size() - 2;  // the height's index in the lists
  if (h == 1) {
    p.pad_d = pad[0];
    p.stride_d = stride[0];
    p.dilation_d = dilation[0];
  }
  p.pad_h = pad[h];
  p.pad_w = pad[h + 1];
  p.stride_h = stride[h];
  p.stride_w = stride[h + 1];
  p.dilation_h = dilation[h];
  p.dilation_w = dilation[h + 1];
}

void NormalizeDepth(ConvProblem& p) {
  if (p.d == 1 && p.t == 1 && p.pad_d == 0) p.stride_d = p.dilation_d = 1;
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
  const bool d_ok = check(CheckRange("d", p.d, 1, kMaxSpatial));
  const bool h_ok = check(CheckRange("h", p.h, 1, kMaxSpatial));
  const bool w_ok = check(CheckRange("w", p.w, 1, kMaxSpatial));
  const bool k_ok = check(CheckRange("k", p.k, 1, kMaxChannels));
  const bool t_ok = check(CheckRange("t", p.t, 1, kMaxFilterSpatial));
  const bool r_ok = check(CheckRange("r", p.r, 1, kMaxFilterSpatial));
  const bool s_ok = check(CheckRange("s", p.s, 1, kMaxFilterSpatial));
  const bool sd_ok = check(CheckRange("stride_d", p.stride_d, 1, kMaxStrideOrDilation));
  const bool sh_ok = check(CheckRange("stride_h", p.stride_h, 1, kMaxStrideOrDilation));
  const bool sw_ok = check(CheckRange("stride_w", p.stride_w, 1, kMaxStrideOrDilation));
  const bool dd_ok = check(CheckRange("dilation_d", p.dilation_d, 1, kMaxStrideOrDilation));
  const bool dh_ok = check(CheckRange("dilation_h", p.dilation_h, 1, kMaxStrideOrDilation));
  const bool dw_ok = check(CheckRange("dilation_w", p.dilation_w, 1, kMaxStrideOrDilation));

  const bool extent_d_ok = t_ok && dd_ok;
  const bool extent_h_ok = r_ok && dh_ok;
  const bool extent_w_ok = s_ok && dw_ok;
  const int64_t extent_d = extent_d_ok ? DilatedExtent(p.t, p.dilation_d) : 0;
  const int64_t extent_h = extent_h_ok ? DilatedExtent(p.r, p.dilation_h) : 0;
  const int64_t extent_w = extent_w_ok ? DilatedExtent(p.s, p.dilation_w) : 0;
  const bool pad_d_ok = check(CheckPad("pad_d", p.pad_d, extent_d_ok, extent_d, "depth"));
  const bool pad_h_ok = check(CheckPad("pad_h", p.pad_h, extent_h_ok, extent_h, "height"));
  const bool pad_w_ok = check(CheckPad("pad_w", p.pad_w, extent_w_ok, extent_w, "width"));
  const bool groups_ok = check(CheckGroups(p, c_ok, k_ok));

  check(CheckEnum("data_type", p.data_type));
  check(CheckEnum("compute_type", p.compute_type));
  check(CheckEnum("layout", p.layout));
  check(CheckEnum("math", p.math));

  const bool out_d_ok =
      d_ok && extent_d_ok && pad_d_ok && check(CheckOutputExtent('d', p.d, p.pad_d, extent_d));
  const bool out_h_ok =
      h_ok && extent_h_ok && pad_h_ok && check(CheckOutputExtent('h', p.h, p.pad_h, extent_h));
  const bool out_w_ok =
      w_ok && extent_w_ok && pad_w_ok && check(CheckOutputExtent('w', p.w, p.pad_w, extent_w));
  if (d_ok && t_ok && pad_d_ok && p.d == 1 && p.t == 1 && p.pad_d == 0 &&
      (p.stride_d != 1 || p.dilation_d != 1)) {
    // Only NormalizeDepth's form is valid, so that a problem has one key.
    check(InvalidArgument(
        "stride_d, dilation_d: must be 1 for a problem of depth 1 (d = t = 1, pad_d = 0), got " +
        std::to_string(p.stride_d) + " and " + std::to_string(p.dilation_d)));
  }

  const bool three_d = p.is_3d();
  if (c_ok && d_ok && h_ok && w_ok) {
    check(three_d
              ? CheckElements("c * d * h * w", "input elements per sample", {p.c, p.d, p.h, p.w})
              : CheckElements("c * h * w", "input elements per sample", {p.c, p.h, p.w}));
  }
  if (k_ok && out_d_ok && out_h_ok && out_w_ok && sd_ok && sh_ok && sw_ok) {
    check(three_d ? CheckElements("k * out_d * out_h * out_w", "output elements per sample",
                                  {p.k, p.out_d(), p.out_h(), p.out_w()})
                  : CheckElements("k * out_h * out_w", "output elements per sample",
                                  {p.k, p.out_h(), p.out_w()}));
  }
  if (k_ok && c_ok && groups_ok && t_ok && r_ok && s_ok) {
    check(three_d ? CheckElements("k * (c / groups) * t * r * s", "filter elements",
                                  {p.k, p.c / p.groups, p.t, p.r, p.s})
                  : CheckElements("k * (c / groups) * r * s", "filter elements",
                                  {p.k, p.c / p.groups, p.r, p.s}));
  }
  return JoinFieldErrors(errors);
}

Status ValidateBatch(int64_t batch) { return CheckRange("batch", batch, 1, kMaxBatch); }

namespace {

// The layout's name in a key: a 3-D problem's names its depth too ("ncdhw", "ndhwc").
std::string_view KeyLayoutName(Layout layout, bool three_d) {
  if (!three_d) return ToString(layout);
  return layout == Layout::kNCHW ? "ncdhw" : layout == Layout::kNHWC ? "ndhwc" : kUnnamedEnumValue;
}

Result<Layout> ParseKeyLayout(std::string_view name, bool three_d) {
  if (!three_d) return ParseLayout(name);
  if (name == "ncdhw") return Layout::kNCHW;
  if (name == "ndhwc") return Layout::kNHWC;
  return KeyError("layout: a 3-D key's layout is \"ncdhw\" or \"ndhwc\", got " + Quoted(name));
}

}  // namespace

std::string CanonicalKey(const ConvProblem& p) {
  using std::to_string;
  const bool three_d = p.is_3d();
  // "a,b" in 2-D, "depth,a,b" in 3-D.
  auto spatial = [three_d](int64_t depth, int64_t a, int64_t b) {
    return (three_d ? to_string(depth) + "," : std::string()) + to_string(a) + "," + to_string(b);
  };
  std::string key;
  key.reserve(192);
  key += kKeyVersion;
  key += ";op=" + std::string(ToString(p.op));
  key += ";c=" + to_string(p.c);
  if (three_d) key += ";d=" + to_string(p.d);
  key += ";h=" + to_string(p.h) + ";w=" + to_string(p.w);
  key += ";k=" + to_string(p.k);
  if (three_d) key += ";t=" + to_string(p.t);
  key += ";r=" + to_string(p.r) + ";s=" + to_string(p.s);
  key += ";pad=" + spatial(p.pad_d, p.pad_h, p.pad_w);
  key += ";stride=" + spatial(p.stride_d, p.stride_h, p.stride_w);
  key += ";dil=" + spatial(p.dilation_d, p.dilation_h, p.dilation_w);
  key += ";g=" + to_string(p.groups);
  key += ";dtype=" + std::string(ToString(p.data_type));
  key += ";ctype=" + std::string(ToString(p.compute_type));
  key += ";layout=" + std::string(KeyLayoutName(p.layout, three_d));
  key += ";math=" + std::string(ToString(p.math));
  return key;
}

namespace {

Result<ConvProblem> ParseCanonicalKeyFields(std::string_view key) {
  static constexpr std::array<std::string_view, kKeyFields> kNames2d = {
      "",    "op",     "c",   "h", "w",     "k",     "r",      "s",
      "pad", "stride", "dil", "g", "dtype", "ctype", "layout", "math"};
  static constexpr std::array<std::string_view, kKeyFields3d> kNames3d = {
      "",  "op",  "c",      "d",   "h", "w",     "k",     "t",      "r",
      "s", "pad", "stride", "dil", "g", "dtype", "ctype", "layout", "math"};
  std::vector<std::string_view> parts = Split(key, ';');
  if (parts.size() != kKeyFields && parts.size() != kKeyFields3d) {
    return KeyError("expected " + std::to_string(kKeyFields) + " fields (" +
                    std::to_string(kKeyFields3d) + " in 3-D) separated by ';', got " +
                    std::to_string(parts.size()));
  }
  if (parts[0] != kKeyVersion) {
    return KeyError("unsupported version " + Quoted(parts[0]) + " (expected \"v1\")");
  }
  const bool three_d = parts.size() == kKeyFields3d;
  // The values by name: the 2-D names' fields, and d and t in 3-D.
  std::array<std::string_view, kKeyFields3d> values;
  auto name_of = [&](size_t i) { return three_d ? kNames3d[i] : kNames2d[i]; };
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view part = parts[i];
    const std::string prefix = std::string(name_of(i)) + "=";
    if (part.substr(0, prefix.size()) != prefix) {
      return KeyError("field " + std::to_string(i) + " must start with " + Quoted(prefix) +
                      ", got " + Quoted(part));
    }
    values[i] = part.substr(prefix.size());
  }
  auto value = [&](std::string_view name) {
    for (size_t i = 1; i < parts.size(); ++i) {
      if (name_of(i) == name) return values[i];
    }
    return std::string_view();
  };

  ConvProblem p;
  UCUDNN_ASSIGN_OR_RETURN(p.op, ParseConvOp(value("op")));
  UCUDNN_ASSIGN_OR_RETURN(p.c, ParseCanonicalInt("c", value("c")));
  UCUDNN_ASSIGN_OR_RETURN(p.h, ParseCanonicalInt("h", value("h")));
  UCUDNN_ASSIGN_OR_RETURN(p.w, ParseCanonicalInt("w", value("w")));
  UCUDNN_ASSIGN_OR_RETURN(p.k, ParseCanonicalInt("k", value("k")));
  UCUDNN_ASSIGN_OR_RETURN(p.r, ParseCanonicalInt("r", value("r")));
  UCUDNN_ASSIGN_OR_RETURN(p.s, ParseCanonicalInt("s", value("s")));
  if (three_d) {
    UCUDNN_ASSIGN_OR_RETURN(p.d, ParseCanonicalInt("d", value("d")));
    UCUDNN_ASSIGN_OR_RETURN(p.t, ParseCanonicalInt("t", value("t")));
  }
  const size_t dims = three_d ? 3 : 2;
  UCUDNN_ASSIGN_OR_RETURN(auto pad, ParseInts("pad", value("pad"), dims));
  UCUDNN_ASSIGN_OR_RETURN(auto stride, ParseInts("stride", value("stride"), dims));
  UCUDNN_ASSIGN_OR_RETURN(auto dilation, ParseInts("dil", value("dil"), dims));
  SetPerAxis(p, pad, stride, dilation);
  UCUDNN_ASSIGN_OR_RETURN(p.groups, ParseCanonicalInt("g", value("g")));
  UCUDNN_ASSIGN_OR_RETURN(p.data_type, ParseDataType(value("dtype")));
  UCUDNN_ASSIGN_OR_RETURN(p.compute_type, ParseDataType(value("ctype")));
  UCUDNN_ASSIGN_OR_RETURN(p.layout, ParseKeyLayout(value("layout"), three_d));
  UCUDNN_ASSIGN_OR_RETURN(p.math, ParseMathMode(value("math")));

  UCUDNN_RETURN_IF_ERROR(Validate(p));
  // Every piece was checked to be canonical above; this guards the whole against future drift
  // (and against a 3-D key of a problem of depth 1, which has a 2-D key).
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
