// Built-in networks: every convolution layer of a few well-known CNNs (torchvision definitions,
// input 3x224x224), as the kernels a training step runs. The layer tables are networks/*.csv,
// embedded in the library at build time (scripts/gen_networks.py documents how they were
// derived).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn {

// One convolution layer of a network, batch size excluded.
struct NetworkLayer {
  std::string name;     // torchvision's module name, e.g. "layer2.0.conv2"
  ConvProblem problem;  // op kForward; data type, layout and math at their defaults
};

// Bounds of a network, so that all its kernels fit one plan request: proto_convert.h's
// kMaxKernelsPerRequest (4096) and kMaxKernelNameBytes (128), restated here because the core
// does not depend on the proto library (cli/src/local_commands.cc static_asserts that they
// agree). A layer gives three kernels: "<layer>/fwd", "<layer>/bwd_data", "<layer>/bwd_filter".
inline constexpr size_t kMaxNetworkKernels = 4096;
inline constexpr size_t kMaxNetworkKernelNameBytes = 128;
inline constexpr size_t kMaxNetworkLayers = kMaxNetworkKernels / 3;  // 1365
inline constexpr size_t kMaxNetworkLayerNameBytes =
    kMaxNetworkKernelNameBytes - std::string_view("/bwd_filter").size();  // 117
// A network file may hold long comments, but not more than this.
inline constexpr size_t kMaxNetworkFileBytes = size_t{4} << 20;

// "alexnet", "densenet121", "resnet152", "resnet18", "resnet50", "vgg16" (sorted).
std::vector<std::string> NetworkNames();

// The convolution layers of `name`, in network order. `name` is a built-in network, or a path to
// a user's network file (any name containing '/' or ending in ".csv") in the same format.
Result<std::vector<NetworkLayer>> NetworkLayers(std::string_view name);

// A network file in the format of networks/*.csv: '#' comment lines and blank lines, the header
// "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups" (with
// ",d,t,pad_d,stride_d,dilation_d" after it for a network of 3-D convolutions), then one line
// per convolution layer, 1 to kMaxNetworkLayers of them. Layer names are unique, valid UTF-8
// without control characters, 1 to kMaxNetworkLayerNameBytes bytes (a name may be
// double-quoted, "" for a quote); numbers are decimal integers (spaces around them allowed) and
// each layer a valid problem (Validate). Errors (kInvalidArgument) name `source`, the line and
// the column: "my.csv line 7: groups: must divide c (3), got 2".
Result<std::vector<NetworkLayer>> ParseNetworkCsv(std::string_view source, std::string_view text);
// Reads and parses a network file; kNotFound when it cannot be opened, kInvalidArgument past
// kMaxNetworkFileBytes.
Result<std::vector<NetworkLayer>> LoadNetworkFile(const std::string& path);
// Whether NetworkLayers()/NetworkKernels() read `name` as a file path.
bool IsNetworkPath(std::string_view name);

// The precision of a network's kernels as a training step runs them. Compute type is always fp32
// (as PyTorch does for fp16 and bf16 convolutions).
struct NetworkPrecision {
  DataType data_type = DataType::kFloat32;
  Layout layout = Layout::kNCHW;
  MathMode math = MathMode::kDefault;
  bool operator==(const NetworkPrecision&) const = default;
};

// The default math of `data_type`: kDefault for fp32, kTensorOp for fp16 and bf16.
MathMode DefaultMath(DataType data_type);

// From a user's --dtype, --layout and --math (ParseDataType/Layout/MathMode names); an empty
// one takes its default: fp32; nchw for fp32 and nhwc (channels-last, how people train) for fp16
// and bf16; DefaultMath(dtype). Errors (kInvalidArgument) name the flag: "--layout: ...".
Result<NetworkPrecision> ParseNetworkPrecision(std::string_view dtype, std::string_view layout,
                                               std::string_view math);

// "fp32 nchw", "bf16 nhwc", with " math=fma" when the math is not DefaultMath(dtype).
std::string ToString(const NetworkPrecision& precision);

// Every convolution layer of `name` (as NetworkLayers() resolves it) as three kernels of a training
// step, in network order:
// "<layer>/fwd", "<layer>/bwd_data", "<layer>/bwd_filter", each at `mini_batch`. Compute type is
// fp32; math is DefaultMath(dtype).
// Errors: kInvalidArgument for an unknown network (the message lists the known ones) or a
// mini-batch out of range.
Result<std::vector<Kernel>> NetworkKernels(std::string_view name, int64_t mini_batch,
                                           DataType dtype = DataType::kFloat32,
                                           Layout layout = Layout::kNCHW);
// The same at an explicit precision (its math instead of DefaultMath).
Result<std::vector<Kernel>> NetworkKernels(std::string_view name, int64_t mini_batch,
                                           const NetworkPrecision& precision);

// The distinct kernels (same problem and mini-batch) in order of first appearance, each under its
// first name.
std::vector<Kernel> UniqueKernels(const std::vector<Kernel>& kernels);

// The embedded text of networks/<name>.csv, or empty for an unknown name.
std::string_view EmbeddedNetworkCsv(std::string_view name);

}  // namespace ucudnn
