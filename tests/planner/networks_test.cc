// Built-in networks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ucudnn/core/networks.h"

namespace ucudnn {
namespace {

// The tables are embedded at build time (core/cmake/embed_networks.cmake): every file of
// networks/ is a built-in network under its name, byte for byte (the generator must neither
// drop a file nor alter its text), and parses.
TEST(Networks, EveryRepositoryTableIsEmbeddedVerbatim) {
  const std::vector<std::string> names = NetworkNames();
  EXPECT_EQ(names, std::vector<std::string>({"alexnet", "densenet121", "r3d_18", "resnet152",
                                             "resnet18", "resnet50", "vgg16"}));
  std::vector<std::string> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(UCUDNN_SOURCE_DIR) + "/networks")) {
    if (entry.path().extension() == ".csv") files.push_back(entry.path().stem().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, names);
  for (const std::string& name : files) {
    std::ifstream in(std::string(UCUDNN_SOURCE_DIR) + "/networks/" + name + ".csv",
                     std::ios::binary);
    ASSERT_TRUE(in) << name;
    std::ostringstream text;
    text << in.rdbuf();
    EXPECT_EQ(EmbeddedNetworkCsv(name), text.str()) << name;
    Result<std::vector<NetworkLayer>> layers = NetworkLayers(name);
    ASSERT_TRUE(layers.ok()) << layers.status().ToString();
    EXPECT_FALSE(layers->empty());
  }
}

// A network of 3-D convolutions: its depth columns read into the problems.
TEST(Networks, ThreeDNetworkReadsItsDepths) {
  Result<std::vector<NetworkLayer>> layers = NetworkLayers("r3d_18");
  ASSERT_TRUE(layers.ok()) << layers.status().ToString();
  const auto it = std::find_if(layers->begin(), layers->end(),
                               [](const NetworkLayer& l) { return l.name == "layer2.0.conv1.0"; });
  ASSERT_NE(it, layers->end());
  const ConvProblem& p = it->problem;
  EXPECT_TRUE(p.is_3d());
  EXPECT_EQ(p.d, 16);
  EXPECT_EQ(p.t, 3);
  EXPECT_EQ(p.pad_d, 1);
  EXPECT_EQ(p.stride_d, 2);
  EXPECT_EQ(p.out_d(), 8);
  EXPECT_EQ(p.h, 56);
  EXPECT_EQ(p.k, 128);
  // The header without depth columns is 2-D; a 3-D row under it has too many fields.
  Result<std::vector<NetworkLayer>> flat =
      ParseNetworkCsv("x.csv",
                      "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,"
                      "groups\nl,3,8,8,4,3,3,1,1,1,1,1,1,1,4,3,1,1,1\n");
  ASSERT_FALSE(flat.ok());
  EXPECT_THAT(flat.status().message(), ::testing::HasSubstr("expected 14 fields, got 19"));
}

TEST(Networks, KernelCountsAndNames) {
  const std::pair<const char*, size_t> expected[] = {
      {"alexnet", 5},     {"vgg16", 13},        {"resnet18", 20}, {"resnet50", 53},
      {"resnet152", 155}, {"densenet121", 120}, {"r3d_18", 20}};
  for (const auto& [name, layers] : expected) {
    Result<std::vector<Kernel>> kernels = NetworkKernels(name, 256);
    ASSERT_TRUE(kernels.ok()) << name << ": " << kernels.status().ToString();
    EXPECT_EQ(kernels->size(), 3 * layers) << name;
    std::set<std::string> distinct;
    for (const Kernel& k : *kernels) {
      EXPECT_EQ(k.mini_batch, 256);
      EXPECT_TRUE(Validate(k.problem).ok()) << k.name;
      distinct.insert(k.name);
    }
    EXPECT_EQ(distinct.size(), kernels->size()) << name << ": names must be unique";
  }
}

TEST(Networks, ResNet50FollowsTorchvision) {
  Result<std::vector<Kernel>> kernels = NetworkKernels("resnet50", 64);
  ASSERT_TRUE(kernels.ok());
  EXPECT_EQ((*kernels)[0].name, "conv1/fwd");
  EXPECT_EQ((*kernels)[1].name, "conv1/bwd_data");
  EXPECT_EQ((*kernels)[2].name, "conv1/bwd_filter");
  EXPECT_EQ((*kernels)[1].problem.op, ConvOp::kBackwardData);
  EXPECT_EQ((*kernels)[2].problem.op, ConvOp::kBackwardFilter);
  EXPECT_EQ((*kernels)[0].problem.c, 3);
  EXPECT_EQ((*kernels)[0].problem.r, 7);
  EXPECT_EQ((*kernels)[0].problem.stride_h, 2);
  // The stride is on the 3x3 convolution of the first block of a stage.
  const Kernel* conv2 = nullptr;
  for (const Kernel& k : *kernels) {
    if (k.name == "layer2.0.conv2/bwd_data") conv2 = &k;
  }
  ASSERT_NE(conv2, nullptr);
  EXPECT_EQ(conv2->problem.c, 128);
  EXPECT_EQ(conv2->problem.h, 56);
  EXPECT_EQ(conv2->problem.r, 3);
  EXPECT_EQ(conv2->problem.stride_h, 2);
  EXPECT_EQ(conv2->problem.out_h(), 28);
  EXPECT_EQ(conv2->problem.math, MathMode::kDefault);
  EXPECT_EQ(conv2->problem.layout, Layout::kNCHW);
  // ResNet-50 and ResNet-152 share their distinct shapes: 23 layers x 3 ops.
  EXPECT_EQ(UniqueKernels(*kernels).size(), 69u);
  EXPECT_EQ(UniqueKernels(NetworkKernels("resnet152", 64).value()).size(), 69u);
}

// The layer of `network` named `layer`, or a failure.
NetworkLayer Layer(const std::string& network, const std::string& layer) {
  Result<std::vector<NetworkLayer>> layers = NetworkLayers(network);
  EXPECT_TRUE(layers.ok()) << layers.status().ToString();
  if (layers.ok()) {
    for (const NetworkLayer& l : *layers) {
      if (l.name == layer) return l;
    }
  }
  ADD_FAILURE() << network << " has no layer " << layer;
  return {};
}

struct Shape {
  int64_t c, h, w, k, r, s, pad, stride, out;
};

void ExpectShape(const std::string& network, const std::string& layer, const Shape& want) {
  SCOPED_TRACE(network + " " + layer);
  const ConvProblem p = Layer(network, layer).problem;
  EXPECT_EQ(p.c, want.c);
  EXPECT_EQ(p.h, want.h);
  EXPECT_EQ(p.w, want.w);
  EXPECT_EQ(p.k, want.k);
  EXPECT_EQ(p.r, want.r);
  EXPECT_EQ(p.s, want.s);
  EXPECT_EQ(p.pad_h, want.pad);
  EXPECT_EQ(p.pad_w, want.pad);
  EXPECT_EQ(p.stride_h, want.stride);
  EXPECT_EQ(p.stride_w, want.stride);
  EXPECT_EQ(p.dilation_h, 1);
  EXPECT_EQ(p.dilation_w, 1);
  EXPECT_EQ(p.groups, 1);
  EXPECT_EQ(p.out_h(), want.out);
  EXPECT_EQ(p.out_w(), want.out);
}

// Shapes from torchvision's model definitions at input 3x224x224.
TEST(Networks, KnownShapesFollowTorchvision) {
  // AlexNet: Conv2d(64, 192, kernel_size=5, padding=2) after the first max-pool (55 -> 27).
  ExpectShape("alexnet", "features.3", {64, 27, 27, 192, 5, 5, 2, 1, 27});
  ExpectShape("alexnet", "features.0", {3, 224, 224, 64, 11, 11, 2, 4, 55});
  // DenseNet-121: dense block 3 ends with 256 + 24 * 32 = 1024 channels at 14x14; transition 3
  // halves them with a 1x1 convolution (the pooling follows it).
  ExpectShape("densenet121", "features.transition3.conv", {1024, 14, 14, 512, 1, 1, 0, 1, 14});
  ExpectShape("densenet121", "features.denseblock4.denselayer16.conv2",
              {128, 7, 7, 32, 3, 3, 1, 1, 7});
  // ResNet-18: the shortcut of the first block of layer 4, a strided 1x1 (14x14 -> 7x7).
  ExpectShape("resnet18", "layer4.0.downsample.0", {256, 14, 14, 512, 1, 1, 0, 2, 7});
  ExpectShape("resnet18", "layer4.0.conv1", {256, 14, 14, 512, 3, 3, 1, 2, 7});
  // VGG-16: the last convolution, before the fifth max-pool.
  ExpectShape("vgg16", "features.28", {512, 14, 14, 512, 3, 3, 1, 1, 14});
  Result<std::vector<NetworkLayer>> vgg = NetworkLayers("vgg16");
  ASSERT_TRUE(vgg.ok());
  EXPECT_EQ(vgg->back().name, "features.28");
  // ResNet-152: bottleneck stride on the 3x3 (torchvision's v1.5); the last layer.
  ExpectShape("resnet152", "layer3.0.conv2", {256, 28, 28, 256, 3, 3, 1, 2, 14});
  ExpectShape("resnet152", "layer4.2.conv3", {512, 7, 7, 2048, 1, 1, 0, 1, 7});
}

// ResNet-152: blocks [3, 8, 36, 3] of three convolutions, one downsample per stage, and conv1.
TEST(Networks, ResNet152Counts) {
  Result<std::vector<NetworkLayer>> layers = NetworkLayers("resnet152");
  ASSERT_TRUE(layers.ok());
  EXPECT_EQ(layers->size(), 1 + 3 * (3 + 8 + 36 + 3) + 4u);
  std::map<std::string, int> convs_per_stage, downsamples_per_stage;
  std::set<std::string> blocks;
  for (const NetworkLayer& l : *layers) {
    if (l.name == "conv1") continue;
    const std::string stage = l.name.substr(0, l.name.find('.'));
    const std::string block = l.name.substr(0, l.name.find('.', stage.size() + 1));
    if (l.name.find("downsample") != std::string::npos) {
      ++downsamples_per_stage[stage];
    } else {
      ++convs_per_stage[stage];
      blocks.insert(block);
    }
  }
  EXPECT_EQ(convs_per_stage, (std::map<std::string, int>{
                                 {"layer1", 9}, {"layer2", 24}, {"layer3", 108}, {"layer4", 9}}));
  EXPECT_EQ(
      downsamples_per_stage,
      (std::map<std::string, int>{{"layer1", 1}, {"layer2", 1}, {"layer3", 1}, {"layer4", 1}}));
  EXPECT_EQ(blocks.size(), 50u);
  EXPECT_EQ(blocks.count("layer3.35"), 1u);
  EXPECT_EQ(blocks.count("layer3.36"), 0u);
}

TEST(Networks, HalfPrecisionUsesTensorOps) {
  Result<std::vector<Kernel>> kernels =
      NetworkKernels("alexnet", 128, DataType::kFloat16, Layout::kNHWC);
  ASSERT_TRUE(kernels.ok());
  for (const Kernel& k : *kernels) {
    EXPECT_EQ(k.problem.data_type, DataType::kFloat16);
    EXPECT_EQ(k.problem.compute_type, DataType::kFloat32);
    EXPECT_EQ(k.problem.layout, Layout::kNHWC);
    EXPECT_EQ(k.problem.math, MathMode::kTensorOp);
  }
  EXPECT_EQ((*kernels)[0].name, "features.0/fwd");
}

// The --dtype/--layout/--math flags of `ucudnn plan`, the example and the scripts.
TEST(Networks, PrecisionFlagsAndTheirDefaults) {
  using P = NetworkPrecision;
  EXPECT_EQ(ParseNetworkPrecision("", "", "").value(),
            (P{DataType::kFloat32, Layout::kNCHW, MathMode::kDefault}));
  EXPECT_EQ(ParseNetworkPrecision("fp16", "", "").value(),
            (P{DataType::kFloat16, Layout::kNHWC, MathMode::kTensorOp}));
  EXPECT_EQ(ParseNetworkPrecision("bf16", "nchw", "").value(),
            (P{DataType::kBFloat16, Layout::kNCHW, MathMode::kTensorOp}));
  EXPECT_EQ(ParseNetworkPrecision("fp32", "nhwc", "fma").value(),
            (P{DataType::kFloat32, Layout::kNHWC, MathMode::kFma}));
  EXPECT_EQ(ParseNetworkPrecision("fp32", "", "tensor_op").value(),
            (P{DataType::kFloat32, Layout::kNCHW, MathMode::kTensorOp}));
  EXPECT_EQ(ToString(P{DataType::kBFloat16, Layout::kNHWC, MathMode::kTensorOp}), "bf16 nhwc");
  EXPECT_EQ(ToString(P{DataType::kFloat32, Layout::kNCHW, MathMode::kFma}), "fp32 nchw math=fma");
  for (const auto& [dtype, layout, math, flag] :
       {std::tuple<const char*, const char*, const char*, const char*>{"fp64", "", "", "--dtype"},
        {"fp16", "chwn", "", "--layout"},
        {"bf16", "nhwc", "fast", "--math"}}) {
    Result<P> bad = ParseNetworkPrecision(dtype, layout, math);
    ASSERT_FALSE(bad.ok()) << flag;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.status().message().rfind(flag, 0), 0u) << bad.status().message();
  }
}

TEST(Networks, KernelsCarryThePrecision) {
  const NetworkPrecision precision{DataType::kBFloat16, Layout::kNHWC, MathMode::kFma};
  Result<std::vector<Kernel>> kernels = NetworkKernels("resnet18", 16, precision);
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  ASSERT_FALSE(kernels->empty());
  for (const Kernel& k : *kernels) {
    EXPECT_EQ(k.problem.data_type, DataType::kBFloat16);
    EXPECT_EQ(k.problem.compute_type, DataType::kFloat32);
    EXPECT_EQ(k.problem.layout, Layout::kNHWC);
    EXPECT_EQ(k.problem.math, MathMode::kFma);
    EXPECT_EQ(k.mini_batch, 16);
    EXPECT_NE(CanonicalKey(k.problem).find("dtype=bf16;ctype=fp32;layout=nhwc;math=fma"),
              std::string::npos);
  }
  // The same layers as fp32: only the precision differs.
  Result<std::vector<Kernel>> fp32 = NetworkKernels("resnet18", 16);
  ASSERT_TRUE(fp32.ok());
  ASSERT_EQ(fp32->size(), kernels->size());
  for (size_t i = 0; i < kernels->size(); ++i) {
    ConvProblem same = (*kernels)[i].problem;
    same.data_type = DataType::kFloat32;
    same.layout = Layout::kNCHW;
    same.math = MathMode::kDefault;
    EXPECT_EQ(same, (*fp32)[i].problem);
  }
}

TEST(Networks, UniqueKernelsKeepsFirstAppearance) {
  Result<std::vector<Kernel>> kernels = NetworkKernels("vgg16", 32);
  ASSERT_TRUE(kernels.ok());
  const std::vector<Kernel> unique = UniqueKernels(*kernels);
  EXPECT_LT(unique.size(), kernels->size());
  EXPECT_EQ(unique[0], (*kernels)[0]);
  std::vector<Kernel> more = *kernels;
  more.push_back(more[0]);  // the same kernel again changes nothing
  EXPECT_EQ(UniqueKernels(more).size(), unique.size());
  more.back().mini_batch = 16;  // a different mini-batch makes a different kernel
  EXPECT_EQ(UniqueKernels(more).size(), unique.size() + 1);
}

TEST(Networks, RejectsUnknownNamesAndBadBatches) {
  Result<std::vector<Kernel>> unknown = NetworkKernels("resnet51", 256);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), ::testing::HasSubstr("network"));
  EXPECT_THAT(unknown.status().message(), ::testing::HasSubstr("resnet50"));
  Result<std::vector<Kernel>> batch = NetworkKernels("resnet50", 0);
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), ::testing::HasSubstr("mini_batch"));
  EXPECT_TRUE(EmbeddedNetworkCsv("nothing").empty());
}

TEST(Networks, LoadsAUsersNetworkFile) {
  const std::string path = ::testing::TempDir() + "my_net.csv";
  {
    std::ofstream out(path);
    out << "# two layers\n"
        << "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups\n"
        << "stem,3,32,32,16,3,3,1,1,1,1,1,1,1\n"
        << "dw,16,32,32,16,3,3,2,2,2,2,2,2,16\n";
  }
  ASSERT_TRUE(IsNetworkPath(path));
  Result<std::vector<Kernel>> kernels = NetworkKernels(path, 8);
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  ASSERT_EQ(kernels->size(), 6u);
  EXPECT_EQ((*kernels)[0].name, "stem/fwd");
  EXPECT_EQ((*kernels)[3].problem.groups, 16);
  EXPECT_EQ((*kernels)[3].problem.dilation_h, 2);
  EXPECT_EQ((*kernels)[5].problem.op, ConvOp::kBackwardFilter);
}

constexpr std::string_view kHeader =
    "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups\n";

std::string Row(const std::string& name) { return name + ",3,32,32,16,3,3,1,1,1,1,1,1,1\n"; }

// The error of parsing `text` as x.csv; empty when it parses.
std::string ParseError(const std::string& text) {
  Result<std::vector<NetworkLayer>> layers = ParseNetworkCsv("x.csv", text);
  if (layers.ok()) return "";
  EXPECT_EQ(layers.status().code(), StatusCode::kInvalidArgument);
  return layers.status().message();
}

TEST(Networks, UserFileErrorsNameTheLineAndColumn) {
  const std::string header(kHeader);
  EXPECT_EQ(ParseError("layer,c\nl,1\n"),
            "x.csv line 1: the header must be " + header.substr(0, header.size() - 1) +
                " (and, for 3-D convolutions, ,d,t,pad_d,stride_d,dilation_d)");
  EXPECT_EQ(ParseError("# only a comment\n\n"), "x.csv: no header line");
  EXPECT_EQ(ParseError(header), "x.csv: no layers");
  EXPECT_EQ(ParseError("# c\n" + header + "l,3,32,32,16,3,3,1,1,1,1,1,1,one\n"),
            "x.csv line 3: groups: not an integer: 'one'");
  EXPECT_EQ(ParseError(header + "l,3,32,32,16,3,3,1,1,1,1,1,1,2\n"),
            "x.csv line 2: groups: must divide c (3), got 2");
  EXPECT_EQ(ParseError(header + "l,3,32,99999999999999999999,16,3,3,1,1,1,1,1,1,1\n"),
            "x.csv line 2: w: out of range for a 64-bit integer: '99999999999999999999'");
  EXPECT_EQ(ParseError(header + "l,3,32,32,16,3,3,1,1,1,1,1,1\n"),
            "x.csv line 2: expected 14 fields, got 13");
  EXPECT_EQ(ParseError(header + "\"l,3,32,32,16,3,3,1,1,1,1,1,1,1\n"),
            "x.csv line 2: unterminated quoted field");
  // Blank lines, comments and CRLF line ends count as lines; spaces around numbers are allowed.
  EXPECT_EQ(ParseError(header + "\r\n# c\r\n" + Row("a") + "b,3,32,32,16,3,3,1,1,1,1,1,1,x\r\n"),
            "x.csv line 5: groups: not an integer: 'x'");
  EXPECT_EQ(ParseError(header + "a, 3 ,32,32,16,3,3,1,1,1,1,1,1,1\r\n"), "");
  auto missing = NetworkKernels("/nonexistent/net.csv", 8);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(Networks, LayerNamesAreBoundedUniqueAndPrintable) {
  const std::string header(kHeader);
  // The longest name whose kernel names fit a plan request, and one byte more.
  const std::string longest(kMaxNetworkLayerNameBytes, 'n');
  EXPECT_EQ(kMaxNetworkLayerNameBytes, 117u);
  EXPECT_EQ(longest.size() + std::string("/bwd_filter").size(), kMaxNetworkKernelNameBytes);
  Result<std::vector<Kernel>> kernels = [&] {
    const std::string path = ::testing::TempDir() + "long_names.csv";
    std::ofstream(path) << header << Row(longest);
    return NetworkKernels(path, 4);
  }();
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  for (const Kernel& k : *kernels) EXPECT_LE(k.name.size(), kMaxNetworkKernelNameBytes);
  EXPECT_EQ(ParseError(header + Row(longest + "n")),
            "x.csv line 2: layer: at most 117 bytes (kernel names add \"/bwd_filter\" and may "
            "have 128), got 118");

  EXPECT_EQ(ParseError(header + ",3,32,32,16,3,3,1,1,1,1,1,1,1\n"),
            "x.csv line 2: layer: the name is empty");
  EXPECT_EQ(ParseError(header + Row("conv1") + "# c\n" + Row("conv2") + Row("conv1")),
            "x.csv line 5: layer: 'conv1' appears twice (line 2)");
  for (const std::string bad_utf8 : {"\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80"}) {
    EXPECT_EQ(ParseError(header + Row(bad_utf8)),
              "x.csv line 2: layer: the name must be valid UTF-8")
        << bad_utf8;
  }
  for (const std::string& control : {std::string("a\tb"), std::string("a\x7f"),
                                     std::string("a\0b", 3), std::string("\x1b[31mred")}) {
    EXPECT_EQ(ParseError(header + Row(control)),
              "x.csv line 2: layer: the name must not contain control characters");
  }
  // Non-ASCII text, and quoted names (commas inside, "" for a quote), are fine.
  Result<std::vector<NetworkLayer>> fine =
      ParseNetworkCsv("x.csv", header + Row("stufe1.faltung\xc3\xa4") + Row("\"a,\"\"b\"\"\""));
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ((*fine)[0].name, "stufe1.faltung\xc3\xa4");
  EXPECT_EQ((*fine)[1].name, "a,\"b\"");
}

TEST(Networks, LayerCountFitsOnePlanRequest) {
  EXPECT_EQ(kMaxNetworkLayers, 1365u);
  EXPECT_LE(3 * kMaxNetworkLayers, kMaxNetworkKernels);
  std::string text(kHeader);
  for (size_t i = 0; i < kMaxNetworkLayers; ++i) text += Row("l" + std::to_string(i));
  Result<std::vector<NetworkLayer>> most = ParseNetworkCsv("x.csv", text);
  ASSERT_TRUE(most.ok()) << most.status().ToString();
  EXPECT_EQ(most->size(), kMaxNetworkLayers);
  text += "# the next line is one too many\n" + Row("extra");
  EXPECT_EQ(ParseError(text),
            "x.csv line 1368: at most 1365 layers (3 kernels each, at most 4096 kernels in a plan "
            "request)");
}

TEST(Networks, UserFilesAreBoundedInSize) {
  const std::string path = ::testing::TempDir() + "huge_net.csv";
  {
    std::ofstream out(path);
    out << kHeader << Row("a");
    out << "#" << std::string(kMaxNetworkFileBytes, 'x') << "\n";
  }
  Result<std::vector<NetworkLayer>> layers = LoadNetworkFile(path);
  ASSERT_FALSE(layers.ok());
  EXPECT_EQ(layers.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(layers.status().message(), "network file " + path + ": larger than " +
                                           std::to_string(kMaxNetworkFileBytes) + " bytes");
}

}  // namespace
}  // namespace ucudnn
