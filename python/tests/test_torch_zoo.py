"""A model zoo on the CPU (issue 37): models no one here wrote, from torchvision's classification,
segmentation, detection, optical-flow and video families, and from timm where it is installed
(Debian has no timm: its families run where it is, as on the GPU machine), each converted,
prepared and trained two steps as a user would, its gradients checked against native PyTorch's.

Every converted layer runs micro-batched plans of the library's CPU backend (halves, two
algorithms, from a plan cache written for exactly the model's kernels), so the library computes
every convolution the model's step runs. The check: both sides' gradients against a float64
native reference, the converted side's error at most ERROR_FACTOR times native's own float32 error
(plus a floor): a deep network with batch normalisation amplifies float32 rounding by orders of
magnitude, and the bound follows it, while a wrong convolution is off by far more.

Bf16ZooTest trains some of them (and a transposed decoder) under CPU bf16 autocast, every kernel
planned as autocast runs it, against native's own bf16 error.

A model that is not supported fails here loudly: each entry says which layer types convert()
must leave unconverted (and warn about); any other outcome fails."""

import contextlib
import copy
import os
import tempfile
import time
import unittest
import warnings

import torch

import support  # noqa: F401  (python/ and bench/ on the path)
import ucudnn.torch as ut
import torch_adapter  # bench/torch_adapter.py: write_plan_cache

try:
    import torchvision
    from torchvision import models as tvm
except ImportError:  # pragma: no cover - scripts/lib.sh installs python3-torchvision
    torchvision = None
try:
    import timm
except ImportError:
    timm = None

# Converted float32 gradients may be this many times further from the float64 reference than
# native's float32 ones, plus ERROR_FLOOR (relative): the library's CPU algorithms sum in another
# order than PyTorch's (and micro-batches accumulate), which shows where a gradient is a small
# difference of large terms (regnet_y_400mf: 5.4e-4 against native's 5.4e-7 on one layer whose
# gradient is 1e-4 of its terms' scale); float32 arithmetic lands far under 1e-3, and a wrong
# convolution is off by order 1.
ERROR_FACTOR = 20.0
ERROR_FLOOR = 1e-3
LEARNING_RATE = 1e-3
STEPS = 2


def images(seed, n=2, size=64, channels=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, channels, size, size, generator=g),)


def clips(seed, frames=4, size=32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 3, frames, size, size, generator=g),)


def detection(seed):
    """Two images of different sizes with their boxes: torchvision's detection models in training
    take (images, targets) and return their losses as a dict."""
    g = torch.Generator().manual_seed(seed)
    pictures = [torch.rand(3, 64, 96, generator=g), torch.rand(3, 80, 64, generator=g)]
    boxes = [torch.tensor([[10.0, 12.0, 60.0, 50.0]]),
             torch.tensor([[5.0, 8.0, 50.0, 40.0], [20.0, 30.0, 60.0, 70.0]])]
    targets = []
    for picture, held, labels in zip(pictures, boxes, ([1], [2, 3])):
        masks = torch.zeros(len(held), *picture.shape[1:], dtype=torch.uint8)
        for mask, (x0, y0, x1, y1) in zip(masks, held.int().tolist()):
            mask[y0:y1, x0:x1] = 1
        targets.append({"boxes": held, "labels": torch.tensor(labels), "masks": masks})
    return pictures, targets


# Detection models resize their images (to 800 pixels by default): kept at the inputs' sizes.
SMALL_DETECTION = {"min_size": 64, "max_size": 96}


def tv(builder, **kwargs):
    return lambda: builder(**kwargs)


# name -> (family, constructor, inputs(seed), layer types convert() leaves unconverted).
TORCHVISION = {} if torchvision is None else {
    "resnet18": ("residual", tv(tvm.resnet18, num_classes=10), images, ()),
    "resnext50_32x4d": ("grouped", tv(tvm.resnext50_32x4d, num_classes=10), images, ()),
    "vgg11_bn": ("plain", tv(tvm.vgg11_bn, num_classes=10), images, ()),
    "alexnet": ("plain", tv(tvm.alexnet, num_classes=10), lambda s: images(s, size=72), ()),
    "densenet121": ("dense", tv(tvm.densenet121, num_classes=10), images, ()),
    "mobilenet_v2": ("inverted-residual", tv(tvm.mobilenet_v2, num_classes=10), images, ()),
    "mobilenet_v3_small": ("inverted-residual", tv(tvm.mobilenet_v3_small, num_classes=10),
                           images, ()),
    "efficientnet_b0": ("inverted-residual", tv(tvm.efficientnet_b0, num_classes=10), images,
                        ()),
    "efficientnet_v2_s": ("fused inverted-residual", tv(tvm.efficientnet_v2_s, num_classes=10),
                          images, ()),
    "regnet_y_400mf": ("grouped", tv(tvm.regnet_y_400mf, num_classes=10), images, ()),
    "convnext_tiny": ("7x7 depthwise", tv(tvm.convnext_tiny, num_classes=10), images, ()),
    "shufflenet_v2_x0_5": ("channel shuffle", tv(tvm.shufflenet_v2_x0_5, num_classes=10), images,
                           ()),
    "squeezenet1_1": ("fire", tv(tvm.squeezenet1_1, num_classes=10), images, ()),
    "mnasnet0_5": ("searched", tv(tvm.mnasnet0_5, num_classes=10), images, ()),
    # Training outputs that are named tuples (the auxiliary classifiers' logits).
    "googlenet": ("inception", tv(tvm.googlenet, num_classes=10, aux_logits=True,
                                  init_weights=False), lambda s: images(s, size=96), ()),
    "inception_v3": ("inception", tv(tvm.inception_v3, num_classes=10, aux_logits=False,
                                     init_weights=False), lambda s: images(s, size=96), ()),
    "swin_t": ("vision transformer, patch convolution", tv(tvm.swin_t, num_classes=10), images,
               ()),
    # Segmentation: dict outputs.
    "fcn_resnet50": ("segmentation, dilated", tv(tvm.segmentation.fcn_resnet50, num_classes=4,
                                                 weights_backbone=None), images, ()),
    "deeplabv3_mobilenet_v3_large": (
        "segmentation, atrous", tv(tvm.segmentation.deeplabv3_mobilenet_v3_large, num_classes=4,
                                   weights_backbone=None), images, ()),
    "lraspp_mobilenet_v3_large": (
        "segmentation", tv(tvm.segmentation.lraspp_mobilenet_v3_large, num_classes=4,
                           weights_backbone=None), images, ()),
    # Detection: lists of images of different sizes in, a dict of losses out.
    "fasterrcnn_mobilenet_v3_large_320_fpn": (
        "detection, two-stage", tv(tvm.detection.fasterrcnn_mobilenet_v3_large_320_fpn,
                                   num_classes=5, weights_backbone=None, **SMALL_DETECTION),
        detection, ()),
    "ssdlite320_mobilenet_v3_large": (
        "detection, single-shot", tv(tvm.detection.ssdlite320_mobilenet_v3_large, num_classes=5,
                                     weights_backbone=None), detection, ()),
    "fcos_resnet50_fpn": ("detection, anchor-free", tv(tvm.detection.fcos_resnet50_fpn,
                                                       num_classes=5, weights_backbone=None,
                                                       **SMALL_DETECTION), detection, ()),
    # Video: every convolution is a Conv3d (subclasses of it that keep its forward).
    "r3d_18": ("video, 3-D", tv(tvm.video.r3d_18, num_classes=5), clips, ()),
    "r2plus1d_18": ("video, (2+1)-D", tv(tvm.video.r2plus1d_18, num_classes=5), clips, ()),
}

# timm families beyond torchvision's (pretrained=False: no download).
TIMM = {
    "cspresnet50": "cross-stage partial",
    "dla34": "deep layer aggregation",
    "hrnet_w18_small": "high-resolution",
    "res2net50_26w_4s": "res2net",
    "ghostnet_100": "ghost",
    "rexnet_100": "rexnet",
    "dpn68": "dual path",
    "repvgg_a2": "re-parameterised",
    "nf_resnet26": "normalizer-free",
    "xception41": "xception",
}


def timm_entry(name):
    return (TIMM[name], lambda: timm.create_model(name, pretrained=False, num_classes=10),
            images, ())


def loss_of(output):
    """The step's loss: the mean square of every floating tensor of the output, whatever its
    structure (a tensor, tuples and lists, dicts: the losses of a detection model)."""
    tensors = list(ut.output_tensors(output))
    return sum((t.float() ** 2).mean() for t in tensors)


def well_conditioned(model):
    """`model` in training, its dropout, stochastic depth and batch normalisation as at inference:
    masks are drawn differently in float64 than in float32, and batch statistics of two random
    images through randomly initialised layers have channels of near-zero variance, whose
    normalisation amplifies float32 rounding a billionfold (measured: mobilenet_v2's gradients
    6.5e8 off float64's natively). Every convolution still runs its three ops."""
    for module in model.modules():
        kind = type(module).__name__
        if ("Dropout" in kind or "BatchNorm" in kind or
                kind in ("StochasticDepth", "DropPath", "DropBlock2d")):
            module.eval()
    return model


def train(model, inputs, steps=STEPS, autocast=None):
    """`steps` SGD steps from the same seeds (dropout, stochastic depth and samplers draw the
    same numbers on both sides), each forward under CPU autocast to `autocast` where set (the
    forward only, as a user writes it: autocast caches its weight casts for its region); the
    last step's gradients by parameter name."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        torch.manual_seed(100 + step)
        with autocast_to(autocast):
            loss = loss_of(model(*inputs(step)))
        loss.backward()
        if step + 1 < steps:
            optimizer.step()
    return {name: p.grad.detach().double() for name, p in model.named_parameters()
            if p.grad is not None}


def autocast_to(dtype):
    """CPU autocast to `dtype`, or nothing (None)."""
    return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def as_double(inputs):
    def convert(value):
        if torch.is_tensor(value):
            return value.double() if value.is_floating_point() else value
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        return value
    return lambda seed: convert(inputs(seed))


def relative_error(got, reference):
    """The largest relative error over the parameters (by norm, each against its own scale)."""
    worst = 0.0
    for name, expected in reference.items():
        scale = expected.norm().item()
        if scale == 0.0:
            continue
        worst = max(worst, (got[name] - expected).norm().item() / scale)
    return worst


@contextlib.contextmanager
def planned_everywhere(model, inputs, directory):
    """`model` converted with micro-batched plans (halves, the CPU backend's algorithms 1 and 2)
    for every kernel its step runs, and prepared on the step's inputs."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ut.convert(model, server="", cache_path="off")
    shapes = [s for group in ut.kernels(model, *inputs(0)).values() for s in group]
    cache = os.path.join(directory, "plans.bin")
    kernels = torch_adapter.write_plan_cache(support.TOOL, cache, shapes, 64 << 20, "1,2",
                                             framework=ut.framework_identity()) if shapes else 0
    ut.convert(model, server="", cache_path=cache)
    yield caught, kernels


class ZooTest(unittest.TestCase):
    def check(self, name, family, build, inputs, unsupported):
        torch.manual_seed(0)
        native = well_conditioned(build().train())
        converted = copy.deepcopy(native)
        reference = copy.deepcopy(native).double()
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as directory, \
                planned_everywhere(converted, inputs, directory) as (caught, kernels):
            answer = ut.prepare(converted, *inputs(0))
            messages = " ".join(str(w.message) for w in caught)
            for layer_type in unsupported:
                self.assertIn(layer_type, messages, f"{name}: convert() must name {layer_type}")
            if not unsupported:
                self.assertGreater(kernels, 0, f"{name} ({family}): no converted kernel")
                self.assertEqual(answer["kernels"], kernels)
            expected = train(reference, as_double(inputs))
            native_error = relative_error(train(native, inputs), expected)
            converted_error = relative_error(train(converted, inputs), expected)
            stats = ut.stats(converted)
        bound = ERROR_FACTOR * native_error + ERROR_FLOOR
        print(f"{name:40s} {family:36s} kernels {kernels:4d} planned calls "
              f"{stats['planned_calls']:5d} native err {native_error:.1e} converted err "
              f"{converted_error:.1e} {time.perf_counter() - started:.1f} s", flush=True)
        self.assertEqual(len(expected) > 0, True)
        self.assertLessEqual(converted_error, bound, f"{name}: gradients off native's")
        if unsupported:
            self.assertEqual(stats["planned_calls"], 0)
        else:
            # Every planned kernel's calls ran the library's micro-batched plans.
            self.assertGreater(stats["planned_calls"], 0, stats)
            self.assertEqual(stats["fallback_calls"], 0, stats)


def add_tests(table, prefix):
    for name, (family, build, inputs, unsupported) in table.items():
        def test(self, name=name, family=family, build=build, inputs=inputs,
                 unsupported=unsupported):
            self.check(name, family, build, inputs, unsupported)
        setattr(ZooTest, f"test_{prefix}_{name}", test)


add_tests(TORCHVISION, "torchvision")
if timm is not None:
    add_tests({name: timm_entry(name) for name in TIMM}, "timm")
else:
    @unittest.skip("timm is not installed (Debian has no package of it): its families run where "
                   "it is, e.g. the GPU machine's PyTorch")
    def test_timm_families(self):
        pass
    ZooTest.test_timm_families = test_timm_families


def dcgan():
    """DCGAN's generator (bench/nd_models.py): transposed convolutions, which PyTorch 1.13's CPU
    autocast leaves in float32 while it casts ordinary ones."""
    import nd_models
    return nd_models.dcgan()


# Models trained under CPU bf16 autocast (name -> (constructor, inputs)): torchvision's where
# PyTorch's CPU autocast runs their every op (PyTorch 1.13 has no bf16 hardshrink backward, nms or
# mixed-dtype layer norm on the CPU), and a transposed decoder.
BF16 = {} if torchvision is None else {
    "resnet18": (TORCHVISION["resnet18"][1], images),
    "googlenet": (TORCHVISION["googlenet"][1], TORCHVISION["googlenet"][2]),
    "regnet_y_400mf": (TORCHVISION["regnet_y_400mf"][1], images),
    "deeplabv3_mobilenet_v3_large": (TORCHVISION["deeplabv3_mobilenet_v3_large"][1], images),
    "r3d_18": (TORCHVISION["r3d_18"][1], clips),
    "dcgan": (dcgan, lambda seed: (torch.randn(2, 100, 1, 1,
                                               generator=torch.Generator().manual_seed(seed)),)),
}
# bfloat16 keeps 8 bits of mantissa: native's own gradients are 10-100% off float64's on these
# random deep networks, so the check is against native's error, not a fixed bound.
BF16_FACTOR = 2.0
BF16_FLOOR = 2e-2


class Bf16ZooTest(unittest.TestCase):
    """The zoo's step under CPU bf16 autocast, every kernel planned as autocast runs it: each
    converted layer computes in the dtype its unconverted twin does (transposed ones too), and
    the library's bf16 plans train as accurately as PyTorch's own."""

    def check(self, build, inputs):
        torch.manual_seed(0)
        native = well_conditioned(build().train())
        converted = copy.deepcopy(native)
        expected = train(copy.deepcopy(native).double(), as_double(inputs))
        with tempfile.TemporaryDirectory() as directory, autocast_to(torch.bfloat16), \
                planned_everywhere(converted, inputs, directory) as (_, kernels):
            ut.prepare(converted, *inputs(0))
        native_error = relative_error(train(native, inputs, autocast=torch.bfloat16), expected)
        converted_error = relative_error(train(converted, inputs, autocast=torch.bfloat16),
                                         expected)
        stats = ut.stats(converted)
        self.assertGreater(kernels, 0)
        self.assertGreater(stats["planned_calls"], 0, stats)
        self.assertEqual(stats["fallback_calls"], 0, stats)
        self.assertLessEqual(converted_error, BF16_FACTOR * native_error + BF16_FLOOR)


for _name, (_build, _inputs) in BF16.items():
    setattr(Bf16ZooTest, f"test_{_name}",
            lambda self, build=_build, inputs=_inputs: self.check(build, inputs))


class ZooCoverageTest(unittest.TestCase):
    def test_the_zoo_spans_the_families_the_issue_asks_for(self):
        if torchvision is None:
            self.skipTest("torchvision is not installed")
        self.assertGreaterEqual(len(TORCHVISION), 20)
        families = " ".join(entry[0] for entry in TORCHVISION.values())
        for kind in ("segmentation", "detection", "video"):
            self.assertIn(kind, families)
        self.assertGreaterEqual(len(TIMM), 6)


if __name__ == "__main__":
    unittest.main()
