// Built-in networks (networks.h). The layer tables are networks/*.csv, embedded into the library
// at build time (embedded_networks.h), so a binary needs no data files and the CSV files are the
// only copy.
#include "ucudnn/core/networks.h"

#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <utility>

#include "embedded_networks.h"
#include "ucudnn/core/text.h"

namespace ucudnn {
namespace {

constexpr std::string_view kHeader =
    "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups";
constexpr size_t kColumns = 14;
// Networks of 3-D convolutions add the depth columns.
constexpr std::string_view kHeader3d =
    "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups,d,t,pad_d,"
    "stride_d,dilation_d";
constexpr size_t kColumns3d = 19;

// The name of column `index` (0-based) of kHeader3d, for errors: "c: not an integer: 'x'".
std::string_view ColumnName(size_t index) {
  std::string_view rest = kHeader3d;
  for (size_t i = 0; i < index; ++i) rest.remove_prefix(rest.find(',') + 1);
  return rest.substr(0, rest.find(','));
}

// A layer name becomes the kernel names "<name>/fwd", "<name>/bwd_data", "<name>/bwd_filter":
// text a plan request carries and tables print.
Status CheckLayerName(std::string_view name) {
  if (name.empty()) return InvalidArgument("layer: the name is empty");
  if (name.size() > kMaxNetworkLayerNameBytes) {
    return InvalidArgument("layer: at most " + std::to_string(kMaxNetworkLayerNameBytes) +
                           " bytes (kernel names add \"/bwd_filter\" and may have " +
                           std::to_string(kMaxNetworkKernelNameBytes) + "), got " +
                           std::to_string(name.size()));
  }
  if (!IsValidUtf8(name)) return InvalidArgument("layer: the name must be valid UTF-8");
  if (HasControlCharacter(name)) {
    return InvalidArgument("layer: the name must not contain control characters");
  }
  return Status::Ok();
}

std::string KnownNames() {
  std::string out;
  for (const EmbeddedNetwork& network : EmbeddedNetworks()) {
    if (!out.empty()) out += ", ";
    out += network.name;
  }
  return out;
}

}  // namespace

Result<std::vector<NetworkLayer>> ParseNetworkCsv(std::string_view source, std::string_view text) {
  std::vector<NetworkLayer> layers;
  std::map<std::string, int, std::less<>> first_line;  // layer name -> its line
  bool header_seen = false;
  size_t columns = kColumns;
  CsvLineReader lines(text);
  std::string_view line;
  while (lines.Next(line)) {
    const std::string where = std::string(source) + " " + lines.Where();
    if (!header_seen) {
      if (line != kHeader && line != kHeader3d) {
        return InvalidArgument(where + ": the header must be " + std::string(kHeader) +
                               " (and, for 3-D convolutions, ,d,t,pad_d,stride_d,dilation_d)");
      }
      columns = line == kHeader ? kColumns : kColumns3d;
      header_seen = true;
      continue;
    }
    if (layers.size() == kMaxNetworkLayers) {
      return InvalidArgument(where + ": at most " + std::to_string(kMaxNetworkLayers) +
                             " layers (3 kernels each, at most " +
                             std::to_string(kMaxNetworkKernels) + " kernels in a plan request)");
    }
    Result<std::vector<std::string>> fields = SplitCsvRecord(line);
    if (!fields.ok()) return fields.status().WithContext(where);
    const std::vector<std::string>& f = *fields;
    if (f.size() != columns) {
      return InvalidArgument(where + ": expected " + std::to_string(columns) + " fields, got " +
                             std::to_string(f.size()));
    }
    UCUDNN_RETURN_IF_ERROR(CheckLayerName(f[0]).WithContext(where));
    const auto [previous, inserted] = first_line.emplace(f[0], lines.line_number());
    if (!inserted) {
      return InvalidArgument(where + ": layer: " + QuoteForError(f[0]) + " appears twice (line " +
                             std::to_string(previous->second) + ")");
    }
    NetworkLayer layer;
    layer.name = f[0];
    ConvProblem& p = layer.problem;
    int64_t* const targets[] = {
        &p.c,      &p.h,     &p.w,        &p.k,        &p.r,          &p.s,
        &p.pad_h,  &p.pad_w, &p.stride_h, &p.stride_w, &p.dilation_h, &p.dilation_w,
        &p.groups, &p.d,     &p.t,        &p.pad_d,    &p.stride_d,   &p.dilation_d};
    static_assert(std::size(targets) == kColumns3d - 1);
    for (size_t i = 0; i + 1 < columns; ++i) {
      Result<int64_t> value = ParseInteger<int64_t>(ColumnName(i + 1), Trim(f[i + 1]));
      if (!value.ok()) return value.status().WithContext(where);
      *targets[i] = *value;
    }
    NormalizeDepth(p);
    UCUDNN_RETURN_IF_ERROR(Validate(p).WithContext(where));
    layers.push_back(std::move(layer));
  }
  if (!header_seen) return InvalidArgument(std::string(source) + ": no header line");
  if (layers.empty()) return InvalidArgument(std::string(source) + ": no layers");
  return layers;
}

std::vector<std::string> NetworkNames() {
  std::vector<std::string> names;
  for (const EmbeddedNetwork& network : EmbeddedNetworks()) names.emplace_back(network.name);
  return names;
}

std::string_view EmbeddedNetworkCsv(std::string_view name) {
  for (const EmbeddedNetwork& network : EmbeddedNetworks()) {
    if (network.name == name) return network.text;
  }
  return {};
}

Result<std::vector<NetworkLayer>> LoadNetworkFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("network file " + path + ": cannot be opened");
  // Read in pieces up to the limit, so that a wrong path (a huge file, a device) fails fast.
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxNetworkFileBytes) {
      return InvalidArgument("network file " + path + ": larger than " +
                             std::to_string(kMaxNetworkFileBytes) + " bytes");
    }
  }
  if (in.bad()) return Unavailable("network file " + path + ": cannot be read");
  return ParseNetworkCsv(path, text);
}

bool IsNetworkPath(std::string_view name) {
  return name.find('/') != std::string_view::npos ||
         (name.size() > 4 && name.substr(name.size() - 4) == ".csv");
}

Result<std::vector<NetworkLayer>> NetworkLayers(std::string_view name) {
  if (IsNetworkPath(name)) return LoadNetworkFile(std::string(name));
  const std::string_view text = EmbeddedNetworkCsv(name);
  if (text.empty()) {
    return InvalidArgument("network: unknown name '" + std::string(name) +
                           "'; known: " + KnownNames() + ", or a path to a network CSV file");
  }
  return ParseNetworkCsv("networks/" + std::string(name) + ".csv", text);
}

MathMode DefaultMath(DataType data_type) {
  return data_type == DataType::kFloat32 ? MathMode::kDefault : MathMode::kTensorOp;
}

Result<NetworkPrecision> ParseNetworkPrecision(std::string_view dtype, std::string_view layout,
                                               std::string_view math) {
  NetworkPrecision precision;
  if (!Trim(dtype).empty()) {
    Result<DataType> parsed = ParseDataType(Trim(dtype));
    if (!parsed.ok()) return parsed.status().WithContext("--dtype");
    precision.data_type = *parsed;
  }
  precision.layout = precision.data_type == DataType::kFloat32 ? Layout::kNCHW : Layout::kNHWC;
  if (!Trim(layout).empty()) {
    Result<Layout> parsed = ParseLayout(Trim(layout));
    if (!parsed.ok()) return parsed.status().WithContext("--layout");
    precision.layout = *parsed;
  }
  precision.math = DefaultMath(precision.data_type);
  if (!Trim(math).empty()) {
    Result<MathMode> parsed = ParseMathMode(Trim(math));
    if (!parsed.ok()) return parsed.status().WithContext("--math");
    precision.math = *parsed;
  }
  return precision;
}

std::string ToString(const NetworkPrecision& precision) {
  std::string out =
      std::string(ToString(precision.data_type)) + " " + std::string(ToString(precision.layout));
  if (precision.math != DefaultMath(precision.data_type)) {
    out += " math=" + std::string(ToString(precision.math));
  }
  return out;
}

Result<std::vector<Kernel>> NetworkKernels(std::string_view name, int64_t mini_batch,
                                           DataType dtype, Layout layout) {
  return NetworkKernels(name, mini_batch, NetworkPrecision{dtype, layout, DefaultMath(dtype)});
}

Result<std::vector<Kernel>> NetworkKernels(std::string_view name, int64_t mini_batch,
                                           const NetworkPrecision& precision) {
  if (!ValidateBatch(mini_batch).ok()) {
    return InvalidArgument("mini_batch: must be in [1, " + std::to_string(kMaxBatch) + "], got " +
                           std::to_string(mini_batch));
  }
  UCUDNN_ASSIGN_OR_RETURN(std::vector<NetworkLayer> layers, NetworkLayers(name));
  std::vector<Kernel> kernels;
  kernels.reserve(layers.size() * 3);
  for (const NetworkLayer& layer : layers) {
    for (ConvOp op : {ConvOp::kForward, ConvOp::kBackwardData, ConvOp::kBackwardFilter}) {
      Kernel kernel;
      kernel.problem = layer.problem;
      kernel.problem.op = op;
      kernel.problem.data_type = precision.data_type;
      kernel.problem.compute_type = DataType::kFloat32;
      kernel.problem.layout = precision.layout;
      kernel.problem.math = precision.math;
      kernel.mini_batch = mini_batch;
      kernel.name = layer.name + "/" + std::string(ToString(op));
      UCUDNN_RETURN_IF_ERROR(Validate(kernel.problem).WithContext(kernel.name));
      kernels.push_back(std::move(kernel));
    }
  }
  return kernels;
}

std::vector<Kernel> UniqueKernels(const std::vector<Kernel>& kernels) {
  std::vector<Kernel> unique;
  std::map<std::pair<std::string, int64_t>, bool> seen;
  for (const Kernel& kernel : kernels) {
    if (seen.emplace(std::make_pair(CanonicalKey(kernel.problem), kernel.mini_batch), true)
            .second) {
      unique.push_back(kernel);
    }
  }
  return unique;
}

}  // namespace ucudnn
