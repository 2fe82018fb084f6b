// Built-in networks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "ucudnn/core/networks.h"

namespace ucudnn {
namespace {

TEST(Networks, EmbeddedTablesMatchTheRepositoryFiles) {
  const std::vector<std::string> names = NetworkNames();
  EXPECT_EQ(names, std::vector<std::string>(
                       {"alexnet", "densenet121", "resnet152", "resnet18", "resnet50", "vgg16"}));
  for (const std::string& name : names) {
    std::ifstream in(std::string(UCUDNN_SOURCE_DIR) + "/networks/" + name + ".csv");
    ASSERT_TRUE(in) << name;
    std::ostringstream text;
    text << in.rdbuf();
    EXPECT_EQ(EmbeddedNetworkCsv(name), text.str())
        << "networks/" << name << ".csv changed: paste it into common/src/networks.cc";
    Result<std::vector<NetworkLayer>> layers = NetworkLayers(name);
    ASSERT_TRUE(layers.ok()) << layers.status().ToString();
    EXPECT_FALSE(layers->empty());
  }
}

TEST(Networks, KernelCountsAndNames) {
  const std::pair<const char*, size_t> expected[] = {{"alexnet", 5},     {"vgg16", 13},
                                                     {"resnet18", 20},   {"resnet50", 53},
                                                     {"resnet152", 155}, {"densenet121", 120}};
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

TEST(Networks, UserFileErrorsNameTheLine) {
  const std::string header =
      "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups\n";
  auto bad_header = ParseNetworkCsv("x.csv", "layer,c\nl,1\n");
  ASSERT_FALSE(bad_header.ok());
  EXPECT_THAT(bad_header.status().message(), ::testing::HasSubstr("x.csv line 1"));
  auto bad_number = ParseNetworkCsv("x.csv", header + "l,3,32,32,16,3,3,1,1,1,1,1,1,one\n");
  ASSERT_FALSE(bad_number.ok());
  EXPECT_EQ(bad_number.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_number.status().message(), ::testing::HasSubstr("line 2"));
  auto invalid = ParseNetworkCsv("x.csv", header + "l,3,32,32,16,3,3,1,1,1,1,1,1,2\n");
  ASSERT_FALSE(invalid.ok());
  EXPECT_THAT(invalid.status().message(), ::testing::HasSubstr("groups"));
  EXPECT_FALSE(ParseNetworkCsv("x.csv", header).ok());  // no layers
  auto missing = NetworkKernels("/nonexistent/net.csv", 8);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ucudnn
