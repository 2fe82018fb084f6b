// Built-in networks (networks.h). The layer tables are networks/*.csv embedded verbatim below, so
// a binary needs no data files; tests/planner/networks_test.cc checks they match the repository's
// files (after editing one, paste it here).
#include "ucudnn/core/networks.h"

#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

namespace ucudnn {
namespace {

struct EmbeddedCsv {
  std::string_view name;
  std::string_view text;
};

// Sorted by name.
constexpr EmbeddedCsv kNetworkCsvs[] = {
    {"alexnet", R"csv(# alexnet: 5 convolution layers, input 3x224x224 (torchvision)
layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups
features.0,3,224,224,64,11,11,2,2,4,4,1,1,1
features.3,64,27,27,192,5,5,2,2,1,1,1,1,1
features.6,192,13,13,384,3,3,1,1,1,1,1,1,1
features.8,384,13,13,256,3,3,1,1,1,1,1,1,1
features.10,256,13,13,256,3,3,1,1,1,1,1,1,1
)csv"},
    {"densenet121", R"csv(# densenet121: 120 convolution layers, input 3x224x224 (torchvision)
layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups
features.conv0,3,224,224,64,7,7,3,3,2,2,1,1,1
features.denseblock1.denselayer1.conv1,64,56,56,128,1,1,0,0,1,1,1,1,1
features.denseblock1.denselayer1.conv2,128,56,56,32,3,3,1,1,1,1,1,1,1
features.denseblock1.denselayer2.conv1,96,56,56,128,1,1,0,0,1,1,1,1,1
features.denseblock1.denselayer2.conv2,128,56,56,32,3,3,1,1,1,1,1,1,1
features.denseblock1.denselayer3.conv1,128,56,56,128,1,1,0,0,1,1,1,1,1
features.denseblock1.denselayer3.conv2,128,56,56,32,3,3,1,1,1,1,1,1,1
features.denseblock1.denselayer4.conv1,160,56,56,128,1,1,0,0,1,1,1,1,1
features.denseblock1.denselayer4.conv2,128,56,56,32,3,3,1,1,1,1,1,1,1
features.denseblock1.denselayer5.conv1,192,56,56,128,1,1,0,0,1,1,1,1,1
features.denseblock1.denselayer5.conv2,128,56,56,32,3,3,1,1,1,1,1,1,1
features.denseblock1.denselayer6.conv1,224,56,56,128,1,1,0,0,1,1,1,1,1
features.denseblock1.denselayer6.conv2,128,56,56,32,3,3,1,1,1,1,1,1,1
features.transition1.conv,256,56,56,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer1.conv1,128,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer1.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer2.conv1,160,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer2.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer3.conv1,192,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer3.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer4.conv1,224,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer4.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer5.conv1,256,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer5.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer6.conv1,288,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer6.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer7.conv1,320,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer7.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer8.conv1,352,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer8.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer9.conv1,384,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer9.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer10.conv1,416,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer10.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer11.conv1,448,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer11.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.denseblock2.denselayer12.conv1,480,28,28,128,1,1,0,0,1,1,1,1,1
features.denseblock2.denselayer12.conv2,128,28,28,32,3,3,1,1,1,1,1,1,1
features.transition2.conv,512,28,28,256,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer1.conv1,256,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer1.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer2.conv1,288,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer2.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer3.conv1,320,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer3.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer4.conv1,352,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer4.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer5.conv1,384,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer5.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer6.conv1,416,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer6.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer7.conv1,448,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer7.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer8.conv1,480,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer8.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer9.conv1,512,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer9.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer10.conv1,544,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer10.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer11.conv1,576,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer11.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer12.conv1,608,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer12.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer13.conv1,640,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer13.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer14.conv1,672,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer14.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer15.conv1,704,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer15.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer16.conv1,736,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer16.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer17.conv1,768,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer17.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer18.conv1,800,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer18.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer19.conv1,832,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer19.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer20.conv1,864,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer20.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer21.conv1,896,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer21.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer22.conv1,928,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer22.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer23.conv1,960,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer23.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.denseblock3.denselayer24.conv1,992,14,14,128,1,1,0,0,1,1,1,1,1
features.denseblock3.denselayer24.conv2,128,14,14,32,3,3,1,1,1,1,1,1,1
features.transition3.conv,1024,14,14,512,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer1.conv1,512,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer1.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer2.conv1,544,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer2.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer3.conv1,576,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer3.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer4.conv1,608,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer4.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer5.conv1,640,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer5.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer6.conv1,672,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer6.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer7.conv1,704,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer7.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer8.conv1,736,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer8.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer9.conv1,768,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer9.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer10.conv1,800,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer10.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer11.conv1,832,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer11.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer12.conv1,864,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer12.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer13.conv1,896,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer13.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer14.conv1,928,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer14.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer15.conv1,960,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer15.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
features.denseblock4.denselayer16.conv1,992,7,7,128,1,1,0,0,1,1,1,1,1
features.denseblock4.denselayer16.conv2,128,7,7,32,3,3,1,1,1,1,1,1,1
)csv"},
    {"resnet152", R"csv(# resnet152: 155 convolution layers, input 3x224x224 (torchvision)
layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups
conv1,3,224,224,64,7,7,3,3,2,2,1,1,1
layer1.0.conv1,64,56,56,64,1,1,0,0,1,1,1,1,1
layer1.0.conv2,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.0.conv3,64,56,56,256,1,1,0,0,1,1,1,1,1
layer1.0.downsample.0,64,56,56,256,1,1,0,0,1,1,1,1,1
layer1.1.conv1,256,56,56,64,1,1,0,0,1,1,1,1,1
layer1.1.conv2,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.1.conv3,64,56,56,256,1,1,0,0,1,1,1,1,1
layer1.2.conv1,256,56,56,64,1,1,0,0,1,1,1,1,1
layer1.2.conv2,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.2.conv3,64,56,56,256,1,1,0,0,1,1,1,1,1
layer2.0.conv1,256,56,56,128,1,1,0,0,1,1,1,1,1
layer2.0.conv2,128,56,56,128,3,3,1,1,2,2,1,1,1
layer2.0.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.0.downsample.0,256,56,56,512,1,1,0,0,2,2,1,1,1
layer2.1.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.1.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.1.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.2.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.2.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.2.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.3.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.3.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.3.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.4.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.4.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.4.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.5.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.5.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.5.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.6.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.6.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.6.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.7.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.7.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.7.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer3.0.conv1,512,28,28,256,1,1,0,0,1,1,1,1,1
layer3.0.conv2,256,28,28,256,3,3,1,1,2,2,1,1,1
layer3.0.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.0.downsample.0,512,28,28,1024,1,1,0,0,2,2,1,1,1
layer3.1.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.1.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.1.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.2.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.2.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.2.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.3.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.3.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.3.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.4.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.4.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.4.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.5.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.5.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.5.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.6.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.6.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.6.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.7.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.7.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.7.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.8.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.8.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.8.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.9.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.9.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.9.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.10.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.10.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.10.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.11.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.11.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.11.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.12.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.12.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.12.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.13.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.13.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.13.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.14.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.14.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.14.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.15.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.15.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.15.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.16.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.16.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.16.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.17.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.17.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.17.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.18.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.18.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.18.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.19.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.19.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.19.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.20.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.20.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.20.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.21.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.21.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.21.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.22.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.22.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.22.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.23.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.23.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.23.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.24.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.24.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.24.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.25.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.25.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.25.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.26.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.26.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.26.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.27.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.27.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.27.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.28.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.28.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.28.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.29.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.29.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.29.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.30.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.30.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.30.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.31.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.31.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.31.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.32.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.32.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.32.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.33.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.33.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.33.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.34.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.34.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.34.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.35.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.35.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.35.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer4.0.conv1,1024,14,14,512,1,1,0,0,1,1,1,1,1
layer4.0.conv2,512,14,14,512,3,3,1,1,2,2,1,1,1
layer4.0.conv3,512,7,7,2048,1,1,0,0,1,1,1,1,1
layer4.0.downsample.0,1024,14,14,2048,1,1,0,0,2,2,1,1,1
layer4.1.conv1,2048,7,7,512,1,1,0,0,1,1,1,1,1
layer4.1.conv2,512,7,7,512,3,3,1,1,1,1,1,1,1
layer4.1.conv3,512,7,7,2048,1,1,0,0,1,1,1,1,1
layer4.2.conv1,2048,7,7,512,1,1,0,0,1,1,1,1,1
layer4.2.conv2,512,7,7,512,3,3,1,1,1,1,1,1,1
layer4.2.conv3,512,7,7,2048,1,1,0,0,1,1,1,1,1
)csv"},
    {"resnet18", R"csv(# resnet18: 20 convolution layers, input 3x224x224 (torchvision)
layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups
conv1,3,224,224,64,7,7,3,3,2,2,1,1,1
layer1.0.conv1,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.0.conv2,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.1.conv1,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.1.conv2,64,56,56,64,3,3,1,1,1,1,1,1,1
layer2.0.conv1,64,56,56,128,3,3,1,1,2,2,1,1,1
layer2.0.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.0.downsample.0,64,56,56,128,1,1,0,0,2,2,1,1,1
layer2.1.conv1,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.1.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer3.0.conv1,128,28,28,256,3,3,1,1,2,2,1,1,1
layer3.0.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.0.downsample.0,128,28,28,256,1,1,0,0,2,2,1,1,1
layer3.1.conv1,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.1.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer4.0.conv1,256,14,14,512,3,3,1,1,2,2,1,1,1
layer4.0.conv2,512,7,7,512,3,3,1,1,1,1,1,1,1
layer4.0.downsample.0,256,14,14,512,1,1,0,0,2,2,1,1,1
layer4.1.conv1,512,7,7,512,3,3,1,1,1,1,1,1,1
layer4.1.conv2,512,7,7,512,3,3,1,1,1,1,1,1,1
)csv"},
    {"resnet50", R"csv(# resnet50: 53 convolution layers, input 3x224x224 (torchvision)
layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups
conv1,3,224,224,64,7,7,3,3,2,2,1,1,1
layer1.0.conv1,64,56,56,64,1,1,0,0,1,1,1,1,1
layer1.0.conv2,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.0.conv3,64,56,56,256,1,1,0,0,1,1,1,1,1
layer1.0.downsample.0,64,56,56,256,1,1,0,0,1,1,1,1,1
layer1.1.conv1,256,56,56,64,1,1,0,0,1,1,1,1,1
layer1.1.conv2,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.1.conv3,64,56,56,256,1,1,0,0,1,1,1,1,1
layer1.2.conv1,256,56,56,64,1,1,0,0,1,1,1,1,1
layer1.2.conv2,64,56,56,64,3,3,1,1,1,1,1,1,1
layer1.2.conv3,64,56,56,256,1,1,0,0,1,1,1,1,1
layer2.0.conv1,256,56,56,128,1,1,0,0,1,1,1,1,1
layer2.0.conv2,128,56,56,128,3,3,1,1,2,2,1,1,1
layer2.0.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.0.downsample.0,256,56,56,512,1,1,0,0,2,2,1,1,1
layer2.1.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.1.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.1.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.2.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.2.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.2.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer2.3.conv1,512,28,28,128,1,1,0,0,1,1,1,1,1
layer2.3.conv2,128,28,28,128,3,3,1,1,1,1,1,1,1
layer2.3.conv3,128,28,28,512,1,1,0,0,1,1,1,1,1
layer3.0.conv1,512,28,28,256,1,1,0,0,1,1,1,1,1
layer3.0.conv2,256,28,28,256,3,3,1,1,2,2,1,1,1
layer3.0.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.0.downsample.0,512,28,28,1024,1,1,0,0,2,2,1,1,1
layer3.1.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.1.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.1.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.2.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.2.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.2.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.3.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.3.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.3.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.4.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.4.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.4.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer3.5.conv1,1024,14,14,256,1,1,0,0,1,1,1,1,1
layer3.5.conv2,256,14,14,256,3,3,1,1,1,1,1,1,1
layer3.5.conv3,256,14,14,1024,1,1,0,0,1,1,1,1,1
layer4.0.conv1,1024,14,14,512,1,1,0,0,1,1,1,1,1
layer4.0.conv2,512,14,14,512,3,3,1,1,2,2,1,1,1
layer4.0.conv3,512,7,7,2048,1,1,0,0,1,1,1,1,1
layer4.0.downsample.0,1024,14,14,2048,1,1,0,0,2,2,1,1,1
layer4.1.conv1,2048,7,7,512,1,1,0,0,1,1,1,1,1
layer4.1.conv2,512,7,7,512,3,3,1,1,1,1,1,1,1
layer4.1.conv3,512,7,7,2048,1,1,0,0,1,1,1,1,1
layer4.2.conv1,2048,7,7,512,1,1,0,0,1,1,1,1,1
layer4.2.conv2,512,7,7,512,3,3,1,1,1,1,1,1,1
layer4.2.conv3,512,7,7,2048,1,1,0,0,1,1,1,1,1
)csv"},
    {"vgg16", R"csv(# vgg16: 13 convolution layers, input 3x224x224 (torchvision)
layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups
features.0,3,224,224,64,3,3,1,1,1,1,1,1,1
features.2,64,224,224,64,3,3,1,1,1,1,1,1,1
features.5,64,112,112,128,3,3,1,1,1,1,1,1,1
features.7,128,112,112,128,3,3,1,1,1,1,1,1,1
features.10,128,56,56,256,3,3,1,1,1,1,1,1,1
features.12,256,56,56,256,3,3,1,1,1,1,1,1,1
features.14,256,56,56,256,3,3,1,1,1,1,1,1,1
features.17,256,28,28,512,3,3,1,1,1,1,1,1,1
features.19,512,28,28,512,3,3,1,1,1,1,1,1,1
features.21,512,28,28,512,3,3,1,1,1,1,1,1,1
features.24,512,14,14,512,3,3,1,1,1,1,1,1,1
features.26,512,14,14,512,3,3,1,1,1,1,1,1,1
features.28,512,14,14,512,3,3,1,1,1,1,1,1,1
)csv"},
};

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

Result<int64_t> ParseInt(std::string_view field, std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return InvalidArgument(std::string(field) + ": not an integer: '" + std::string(text) + "'");
  }
  return value;
}

std::string KnownNames();

}  // namespace

Result<std::vector<NetworkLayer>> ParseNetworkCsv(std::string_view source, std::string_view text) {
  static constexpr std::string_view kHeader =
      "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups";
  std::vector<NetworkLayer> layers;
  bool header_seen = false;
  int line_number = 0;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = std::string(source) + " line " + std::to_string(line_number);
    if (!header_seen) {
      if (line != kHeader) {
        return InvalidArgument(where + ": the header must be " + std::string(kHeader));
      }
      header_seen = true;
      continue;
    }
    const std::vector<std::string_view> f = SplitFields(line);
    if (f.size() != 14) return InvalidArgument(where + ": expected 14 fields");
    if (f[0].empty()) return InvalidArgument(where + ": the layer name is empty");
    NetworkLayer layer;
    layer.name = std::string(f[0]);
    ConvProblem& p = layer.problem;
    int64_t* const targets[] = {&p.c,          &p.h,          &p.w,     &p.k,        &p.r,
                                &p.s,          &p.pad_h,      &p.pad_w, &p.stride_h, &p.stride_w,
                                &p.dilation_h, &p.dilation_w, &p.groups};
    for (size_t i = 0; i < std::size(targets); ++i) {
      Result<int64_t> value = ParseInt("column " + std::to_string(i + 2), f[i + 1]);
      if (!value.ok()) return InvalidArgument(where + ": " + value.status().message());
      *targets[i] = *value;
    }
    const Status valid = Validate(p);
    if (!valid.ok()) return InvalidArgument(where + ": " + valid.message());
    layers.push_back(std::move(layer));
  }
  if (layers.empty()) return InvalidArgument(std::string(source) + ": no layers");
  return layers;
}

namespace {

std::string KnownNames() {
  std::string out;
  for (const EmbeddedCsv& csv : kNetworkCsvs) {
    if (!out.empty()) out += ", ";
    out += csv.name;
  }
  return out;
}

}  // namespace

std::vector<std::string> NetworkNames() {
  std::vector<std::string> names;
  for (const EmbeddedCsv& csv : kNetworkCsvs) names.emplace_back(csv.name);
  return names;
}

std::string_view EmbeddedNetworkCsv(std::string_view name) {
  for (const EmbeddedCsv& csv : kNetworkCsvs) {
    if (csv.name == name) return csv.text;
  }
  return {};
}

Result<std::vector<NetworkLayer>> LoadNetworkFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("network file " + path + ": cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseNetworkCsv(path, text.str());
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

Result<std::vector<Kernel>> NetworkKernels(std::string_view name, int64_t mini_batch,
                                           DataType dtype, Layout layout) {
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
      kernel.problem.data_type = dtype;
      kernel.problem.compute_type = DataType::kFloat32;
      kernel.problem.layout = layout;
      kernel.problem.math = dtype == DataType::kFloat32 ? MathMode::kDefault : MathMode::kTensorOp;
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
