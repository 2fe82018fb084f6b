#!/usr/bin/env python3
"""Writes networks/*.csv: every convolution layer of the built-in networks, in network order.

The CSV files are the source of truth that the binaries embed (core/src/networks.cc parses
them); this script only documents how they were derived from the architectures' definitions
(torchvision's models, input 3x224x224), and regenerates them: `scripts/gen_networks.py`.
Columns: layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups
"""
import os

HEADER = "layer,c,h,w,k,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups"


class Net:
    def __init__(self):
        self.rows = []

    def conv(self, name, c, h, k, r, stride=1, pad=None, groups=1):
        """A square convolution on a square input; returns the output size."""
        pad = (r - 1) // 2 if pad is None else pad
        self.rows.append(f"{name},{c},{h},{h},{k},{r},{r},{pad},{pad},{stride},{stride},1,1,{groups}")
        return (h + 2 * pad - r) // stride + 1


def alexnet():
    n = Net()
    h = n.conv("features.0", 3, 224, 64, 11, stride=4, pad=2)  # 55
    h = (h - 3) // 2 + 1  # maxpool 3/2 -> 27
    h = n.conv("features.3", 64, h, 192, 5, pad=2)
    h = (h - 3) // 2 + 1  # 13
    h = n.conv("features.6", 192, h, 384, 3)
    h = n.conv("features.8", 384, h, 256, 3)
    n.conv("features.10", 256, h, 256, 3)
    return n


def vgg16():
    n = Net()
    h, c, i = 224, 3, 0
    for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512]:
        if v == "M":
            h //= 2
            i += 1
            continue
        n.conv(f"features.{i}", c, h, v, 3)
        c = v
        i += 2
    return n


def resnet_basic(blocks):
    n = Net()
    h = n.conv("conv1", 3, 224, 64, 7, stride=2, pad=3)  # 112
    h = (h + 2 - 3) // 2 + 1  # maxpool 3/2 pad 1 -> 56
    c = 64
    for li, (width, count) in enumerate(zip([64, 128, 256, 512], blocks), start=1):
        for b in range(count):
            stride = 2 if (b == 0 and li > 1) else 1
            name = f"layer{li}.{b}"
            h_out = n.conv(f"{name}.conv1", c, h, width, 3, stride=stride)
            n.conv(f"{name}.conv2", width, h_out, width, 3)
            if stride != 1 or c != width:
                n.conv(f"{name}.downsample.0", c, h, width, 1, stride=stride, pad=0)
            c, h = width, h_out
    return n


def resnet_bottleneck(blocks):
    n = Net()
    h = n.conv("conv1", 3, 224, 64, 7, stride=2, pad=3)
    h = (h + 2 - 3) // 2 + 1
    c = 64
    for li, (width, count) in enumerate(zip([64, 128, 256, 512], blocks), start=1):
        for b in range(count):
            stride = 2 if (b == 0 and li > 1) else 1
            name = f"layer{li}.{b}"
            n.conv(f"{name}.conv1", c, h, width, 1, pad=0)
            h_out = n.conv(f"{name}.conv2", width, h, width, 3, stride=stride)  # stride on the 3x3
            n.conv(f"{name}.conv3", width, h_out, width * 4, 1, pad=0)
            if b == 0:
                n.conv(f"{name}.downsample.0", c, h, width * 4, 1, stride=stride, pad=0)
            c, h = width * 4, h_out
    return n


def densenet121():
    n = Net()
    h = n.conv("features.conv0", 3, 224, 64, 7, stride=2, pad=3)  # 112
    h = (h + 2 - 3) // 2 + 1  # 56
    c, growth, bn_size = 64, 32, 4
    for bi, layers in enumerate([6, 12, 24, 16], start=1):
        for li in range(1, layers + 1):
            name = f"features.denseblock{bi}.denselayer{li}"
            n.conv(f"{name}.conv1", c + (li - 1) * growth, h, bn_size * growth, 1, pad=0)
            n.conv(f"{name}.conv2", bn_size * growth, h, growth, 3)
        c += layers * growth
        if bi < 4:
            n.conv(f"features.transition{bi}.conv", c, h, c // 2, 1, pad=0)
            c //= 2
            h //= 2  # avgpool 2/2
    return n


NETWORKS = {
    "alexnet": alexnet,
    "vgg16": vgg16,
    "resnet18": lambda: resnet_basic([2, 2, 2, 2]),
    "resnet50": lambda: resnet_bottleneck([3, 4, 6, 3]),
    "resnet152": lambda: resnet_bottleneck([3, 8, 36, 3]),
    "densenet121": densenet121,
}

if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "networks")
    for name, build in NETWORKS.items():
        rows = build().rows
        with open(os.path.join(out, f"{name}.csv"), "w") as f:
            f.write(f"# {name}: {len(rows)} convolution layers, input 3x224x224 (torchvision)\n")
            f.write(HEADER + "\n")
            f.write("\n".join(rows) + "\n")
        print(f"{name}: {len(rows)} conv layers")
