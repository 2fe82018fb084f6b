"""ucudnn.torch's convolutions in every dimension against the client library's CPU backend
(issue 39): Conv1d, Conv3d and the transposed ConvTranspose1d/2d/3d, each option of torch.nn's,
their forward and both gradients through micro-batched plans, equal to native PyTorch's; models
that mix them; torch.compile's custom op on them; checkpoints.

Run through ctest (tests/python.cmake), which sets UCUDNN_LIBRARY and the plan-cache tool's path."""

import copy
import io
import itertools
import os
import random
import tempfile
import unittest
import warnings
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from support import TOOL, assert_close, assert_same_step, planned, step
import ucudnn.torch as ut
from ucudnn.torch import conv as ut_conv
from ucudnn.torch import custom_ops as ut_custom_ops
from ucudnn import _lib

# Every option of each layer type: (layer type, constructor kwargs, input shape).
CASES = {
    # Conv1d: planned as a 2-D convolution of height 1.
    "conv1d_plain": (nn.Conv1d, dict(in_channels=3, out_channels=5, kernel_size=3), (4, 3, 17)),
    "conv1d_strided_dilated": (nn.Conv1d, dict(in_channels=4, out_channels=6, kernel_size=5,
                                               stride=2, padding=3, dilation=2), (4, 4, 23)),
    "conv1d_groups": (nn.Conv1d, dict(in_channels=6, out_channels=4, kernel_size=3, padding=1,
                                      groups=2), (3, 6, 11)),
    "conv1d_same": (nn.Conv1d, dict(in_channels=3, out_channels=3, kernel_size=4, padding="same"),
                    (4, 3, 10)),
    "conv1d_reflect": (nn.Conv1d, dict(in_channels=2, out_channels=4, kernel_size=3, padding=2,
                                       padding_mode="reflect"), (4, 2, 9)),
    # Conv3d.
    "conv3d_plain": (nn.Conv3d, dict(in_channels=3, out_channels=4, kernel_size=3),
                     (2, 3, 5, 6, 7)),
    "conv3d_unet": (nn.Conv3d, dict(in_channels=4, out_channels=4, kernel_size=3, padding=1),
                    (4, 4, 6, 6, 6)),
    "conv3d_anisotropic": (nn.Conv3d, dict(in_channels=3, out_channels=6, kernel_size=(1, 3, 3),
                                           stride=(1, 2, 2), padding=(0, 1, 1)), (4, 3, 4, 9, 9)),
    "conv3d_strided_dilated": (nn.Conv3d, dict(in_channels=4, out_channels=4, kernel_size=3,
                                               stride=(2, 1, 2), padding=2, dilation=(2, 1, 2)),
                               (2, 4, 7, 6, 8)),
    "conv3d_depthwise": (nn.Conv3d, dict(in_channels=4, out_channels=8, kernel_size=3, padding=1,
                                         groups=4), (2, 4, 4, 5, 5)),
    "conv3d_same_even": (nn.Conv3d, dict(in_channels=2, out_channels=3, kernel_size=(2, 3, 4),
                                         padding="same"), (2, 2, 5, 5, 6)),
    "conv3d_replicate": (nn.Conv3d, dict(in_channels=2, out_channels=3, kernel_size=3, padding=1,
                                         padding_mode="replicate"), (2, 2, 4, 5, 5)),
    "conv3d_frame_only": (nn.Conv3d, dict(in_channels=3, out_channels=4, kernel_size=(3, 1, 1),
                                          padding=(1, 0, 0)), (2, 3, 6, 4, 4)),
    # Transposed: the backward-data of the forward problem.
    "transpose1d": (nn.ConvTranspose1d, dict(in_channels=4, out_channels=3, kernel_size=4,
                                             stride=2, padding=1), (4, 4, 9)),
    "transpose2d_decoder": (nn.ConvTranspose2d, dict(in_channels=6, out_channels=4, kernel_size=4,
                                                     stride=2, padding=1), (4, 6, 5, 7)),
    "transpose2d_output_padding": (nn.ConvTranspose2d, dict(
        in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1, output_padding=1,
        groups=2, dilation=1), (3, 4, 6, 5)),
    "transpose2d_dilated": (nn.ConvTranspose2d, dict(in_channels=3, out_channels=3,
                                                     kernel_size=3, dilation=2, bias=False),
                            (2, 3, 5, 5)),
    "transpose3d_vae": (nn.ConvTranspose3d, dict(
        in_channels=4, out_channels=2, kernel_size=(3, 4, 4), stride=(1, 2, 2), padding=(1, 1, 1)),
        (2, 4, 3, 4, 4)),
    "transpose3d_output_padding": (nn.ConvTranspose3d, dict(
        in_channels=2, out_channels=4, kernel_size=3, stride=2, padding=1,
        output_padding=(1, 0, 1)), (2, 2, 3, 4, 3)),
}


class NdLayerTest(unittest.TestCase):
    """Each layer type's options through micro-batched plans of the CPU backend."""

    def setUp(self):
        self.assertTrue(TOOL and os.path.exists(TOOL), "UCUDNN_TEST_PLAN_CACHE_TOOL is not set")
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_every_option_of_every_layer_type(self):
        for (name, (kind, kwargs, input_shape)), algos in itertools.product(CASES.items(),
                                                                           ("1,2", "0")):
            with self.subTest(f"{name} algorithms {algos}"):
                torch.manual_seed(1)
                reference = kind(**kwargs)
                model = copy.deepcopy(reference)
                x = torch.randn(*input_shape)
                kernels = planned(model, x.clone().requires_grad_(True), self.dir.name, algos)
                self.assertEqual(kernels, 3, "forward, backward-data and backward-filter")
                self.assertIsInstance(model, ut.UcudnnConvolution)
                assert_same_step(self, model, reference, x)
                stats = ut.stats(model)
                self.assertEqual(stats["planned_calls"], 3, stats)
                self.assertEqual(stats["fallback_calls"], 0, stats)

    def test_shapes_name_the_problem_the_library_plans(self):
        # Conv1d: a 2-D problem of height 1. Conv3d: the depth fields. A transposed layer: the
        # backward-data of the forward convolution whose input is its output.
        cases = [
            (nn.Conv1d(3, 5, 3, stride=2, padding=1), (2, 3, 16),
             dict(c=3, h=1, w=16, k=5, r=1, s=3, stride_w=2, pad_w=1, d=0, t=0), 0),
            (nn.Conv3d(3, 4, (2, 3, 3), padding=(1, 1, 1)), (2, 3, 4, 8, 8),
             dict(c=3, d=4, h=8, w=8, k=4, t=2, r=3, s=3, pad_d=1), 0),
            (nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1), (2, 6, 5, 5),
             dict(c=4, h=10, w=10, k=6, r=4, s=4, stride_h=2, pad_h=1), _lib.BACKWARD_DATA),
        ]
        for layer, input_shape, fields, first_op in cases:
            with self.subTest(type(layer).__name__):
                ut.convert(layer, server="", cache_path="off")
                shapes = [s for group in ut.kernels(layer, torch.randn(*input_shape,
                                                                       requires_grad=True))
                          .values() for s in group]
                self.assertEqual([s.op for s in shapes][0], first_op)
                self.assertEqual(len(shapes), 3)
                for name, value in fields.items():
                    self.assertEqual(getattr(shapes[0], name), value, name)

    def test_unbatched_input_and_transposed_output_size(self):
        torch.manual_seed(2)
        reference = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1)
        model = copy.deepcopy(reference)
        x = torch.randn(2, 4, 5, 5)
        planned(model, x.clone().requires_grad_(True), self.dir.name)
        # output_size picks the output padding: 10x10 instead of 9x9 (a new signature).
        assert_close(self, model(x, output_size=[10, 10]), reference(x, output_size=[10, 10]),
                     "output_size")
        self.assertEqual(tuple(model(x, output_size=[10, 10]).shape), (2, 3, 10, 10))
        conv1d = nn.Conv1d(3, 4, 3)
        reference1d = copy.deepcopy(conv1d)
        ut.convert(conv1d, server="", cache_path="off")
        unbatched = torch.randn(3, 12)
        assert_close(self, conv1d(unbatched), reference1d(unbatched), "unbatched Conv1d")
        with self.assertRaisesRegex(ValueError, "expected a 2-D or 3-D input, got 4-D"):
            conv1d(torch.randn(1, 1, 3, 12))

    def test_channels_last_3d(self):
        torch.manual_seed(3)
        reference = nn.Conv3d(4, 6, 3, padding=1).to(memory_format=torch.channels_last_3d)
        model = copy.deepcopy(reference)
        x = torch.randn(2, 4, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d)
        planned(model, x.clone().requires_grad_(True), self.dir.name)
        y, _, _ = step(model, x)
        self.assertTrue(y.is_contiguous(memory_format=torch.channels_last_3d))
        assert_same_step(self, model, reference, x)
        self.assertEqual(ut.stats(model)["planned_calls"], 6)  # two steps
        shape = ut.kernels(model, x.clone().requires_grad_(True))
        layouts = {s.layout for group in shape.values() for s in group}
        self.assertEqual(layouts, {_lib.NHWC})

    def test_layouts_where_an_operand_is_dense_in_both(self):
        # A 1-channel input or a 1x1 filter made channels-last is dense in both layouts. An eager
        # layer takes it as contiguous (channels_last_call: measured faster on nnU-Net's U-Net);
        # a compiled model's custom op as PyTorch does, channels-last from the strides
        # (pytorch_layout_call), and kernels() declares a compiled model's kernels so. On the
        # CPU, PyTorch 1.13 has no channels-last 3-D convolution, so native's own layout is
        # compared on the 2-D cases.
        cases = {
            "one_channel_input": (nn.Conv2d(1, 4, 3, padding=1), (2, 1, 6, 6), "input"),
            "one_by_one_filter": (nn.Conv2d(6, 4, 1), (2, 6, 5, 5), "model"),
            "one_channel_volume": (nn.Conv3d(1, 4, 3, padding=1), (2, 1, 4, 5, 5), "input"),
            "one_by_one_head_3d": (nn.Conv3d(6, 3, 1), (2, 6, 3, 4, 4), "model"),
        }
        for name, (reference, shape, channels_last) in cases.items():
            with self.subTest(name):
                torch.manual_seed(5)
                memory_format = {4: torch.channels_last, 5: torch.channels_last_3d}[len(shape)]
                if channels_last == "model":
                    reference = reference.to(memory_format=memory_format)
                x = torch.randn(*shape)
                if channels_last == "input":
                    x = x.to(memory_format=memory_format)  # as a job lays its batches out
                self.assertTrue(x.is_contiguous() and reference.weight.is_contiguous())
                self.assertTrue(ut_conv.pytorch_layout_call(x, reference.weight))
                self.assertFalse(ut_conv.channels_last_call(x, reference.weight))
                if len(shape) == 4:
                    self.assertFalse(reference(x).is_contiguous())  # PyTorch's: channels-last
                model = copy.deepcopy(reference)
                planned(model, x.clone().requires_grad_(True), self.dir.name)
                y, _, _ = step(model, x)
                self.assertTrue(y.is_contiguous())
                assert_same_step(self, model, reference, x)
                self.assertEqual(ut.stats(model)["planned_calls"], 6)  # two steps

                def layouts(**compiled):
                    declared = ut.kernels(model, x.clone().requires_grad_(True), **compiled)
                    return {s.layout for group in declared.values() for s in group}
                self.assertEqual(layouts(), {_lib.NCHW})
                with mock.patch.object(ut_custom_ops, "EXACT_STRIDES", "needs_exact_strides"):
                    self.assertEqual(layouts(compiled=True), {_lib.NHWC})
                # Without exact strides, the op keeps the eager rule, which inductor's choice
                # of the strides of size-1 dimensions cannot move.
                with mock.patch.object(ut_custom_ops, "EXACT_STRIDES", None):
                    self.assertEqual(layouts(compiled=True), {_lib.NCHW})

    def test_pytorchs_layout_rule_as_pytorch_applies_it(self):
        # PyTorch's convolution lays its output out by its operands' suggested formats (on the
        # CPU as on cuDNN for 2-D): pytorch_layout_call predicts it for permuted, sliced and
        # size-1 operands, where the strides of size-1 dimensions decide.
        rng = random.Random(3)
        checked = 0
        for _ in range(600):
            sizes = [rng.choice((1, 1, 2, 3)) for _ in range(4)]
            order = list(range(4))
            rng.shuffle(order)
            x = torch.randn(*[sizes[d] for d in order]).permute(*[order.index(d)
                                                                  for d in range(4)])
            if rng.random() < 0.3 and x.shape[3] > 1:
                x = x[..., ::2]
            weight = torch.randn(2, x.shape[1], 1, 1)
            if rng.random() < 0.5:
                weight = weight.to(memory_format=torch.channels_last)
            y = F.conv2d(x, weight)
            if y.is_contiguous() and y.is_contiguous(memory_format=torch.channels_last):
                continue  # an output dense in both layouts says nothing
            checked += 1
            self.assertEqual(ut_conv.pytorch_layout_call(x, weight),
                             y.is_contiguous(memory_format=torch.channels_last),
                             (tuple(x.shape), x.stride(), weight.stride()))
        self.assertGreater(checked, 300)

    def test_cpu_bf16_autocast_casts_as_pytorch_does_for_each_layer_type(self):
        # Autocast's op lists differ by device and version (PyTorch 1.13's CPU autocast leaves
        # transposed convolutions in fp32, and has no bf16 transposed backward): each converted
        # layer computes in the dtype its unconverted twin does, and trains.
        for name in ("conv1d_plain", "conv3d_plain", "transpose1d", "transpose2d_decoder",
                     "transpose2d_dilated", "transpose3d_vae"):
            with self.subTest(name):
                kind, kwargs, input_shape = CASES[name]
                torch.manual_seed(4)
                reference = kind(**kwargs)
                model = ut.convert(copy.deepcopy(reference), server="", cache_path="off")
                x = torch.randn(*input_shape)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    y, gx, grads = step(model, x)
                    y_ref, gx_ref, grads_ref = step(reference, x)
                self.assertEqual(y.dtype, y_ref.dtype)
                scale = max(1.0, y_ref.float().abs().max().item())
                self.assertLess((y.float() - y_ref.float()).abs().max().item(), 2e-2 * scale)
                for what, got, want in [("dx", gx, gx_ref)] + [
                        (f"d{n}", grads[n], grads_ref[n]) for n in grads_ref]:
                    scale = max(1.0, want.float().abs().max().item())
                    self.assertLess((got.float() - want.float()).abs().max().item(),
                                    5e-2 * scale, what)

    def test_a_model_mixing_every_layer_type(self):
        """An encoder-decoder over 1-D, 2-D and 3-D convolutions and their transposes: converted
        whole, prepared, trained two steps equal to native."""
        torch.manual_seed(4)

        class Mixed(nn.Module):
            def __init__(self):
                super().__init__()
                self.encode3d = nn.Conv3d(2, 4, 3, stride=2, padding=1)
                self.decode3d = nn.ConvTranspose3d(4, 2, 4, stride=2, padding=1)
                self.encode2d = nn.Conv2d(2, 4, 3, padding=1)
                self.decode2d = nn.ConvTranspose2d(4, 4, 2, stride=2)
                self.sequence = nn.Conv1d(4, 4, 5, padding=2)
                self.upsample1d = nn.ConvTranspose1d(4, 2, 3, stride=2, padding=1,
                                                     output_padding=1)

            def forward(self, x):  # x: (n, 2, 4, 8, 8)
                y = torch.relu(self.encode3d(x))
                y = self.decode3d(y)                          # (n, 2, 4, 8, 8)
                image = y.mean(dim=2)                         # (n, 2, 8, 8)
                image = self.decode2d(torch.relu(self.encode2d(image)))  # (n, 4, 16, 16)
                sequence = image.flatten(2)                   # (n, 4, 256)
                return {"sequence": self.upsample1d(torch.relu(self.sequence(sequence)))}

        native = Mixed()
        model = copy.deepcopy(native)
        x = torch.randn(2, 2, 4, 8, 8)
        kernels = planned(model, x, self.dir.name)
        self.assertEqual(kernels, 6 * 3 - 1, "the first layer's input needs no gradient")
        answer = ut.prepare(model, x)
        self.assertEqual(answer["kernels"], kernels)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (native, model)]
        for _ in range(2):
            outputs = []
            for m, optimizer in zip((native, model), optimizers):
                optimizer.zero_grad()
                out = m(x)["sequence"]
                (out ** 2).mean().backward()
                optimizer.step()
                outputs.append(out.detach())
            assert_close(self, outputs[1], outputs[0], "output")
        for (name, p), (_, q) in zip(native.named_parameters(), model.named_parameters()):
            assert_close(self, q, p, name)
        self.assertGreater(ut.stats(model)["planned_calls"], 0)
        rows = ut.routes(model)
        self.assertEqual(len(rows), 6)

    def test_unconvert_restores_every_type_and_checkpoints_load(self):
        model = nn.Sequential(nn.Conv1d(2, 2, 3), nn.Conv3d(2, 2, 1), nn.ConvTranspose1d(2, 2, 3),
                              nn.ConvTranspose2d(2, 2, 3), nn.ConvTranspose3d(2, 2, 3))
        types = [type(m) for m in model]
        state = copy.deepcopy(model.state_dict())
        ut.convert(model, server="", cache_path="off")
        self.assertTrue(all(isinstance(m, ut.UcudnnConvolution) for m in model))
        self.assertEqual(set(model.state_dict()), set(state))
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        self.assertEqual([type(m) for m in loaded], [type(m) for m in model])
        ut.unconvert(model)
        self.assertEqual([type(m) for m in model], types)

    def test_a_model_without_convolutions_is_a_no_op_with_one_warning(self):
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ut.convert(model, server="", cache_path="off")
        self.assertEqual(len(caught), 1)
        self.assertIn("no torch.nn convolution layer", str(caught[0].message))
        answer = ut.prepare(model, torch.randn(2, 4))
        self.assertEqual(answer["kernels"], 0)

    def test_subclasses_stay_unconverted_and_are_named(self):
        class Gated(nn.Conv3d):
            def forward(self, x):
                return super().forward(x).sigmoid()

        model = nn.Sequential(Gated(2, 2, 1), nn.Conv1d(2, 2, 1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ut.convert(model, server="", cache_path="off")
        message = " ".join(str(w.message) for w in caught)
        self.assertIn("1 convolution layers converted", message)
        self.assertIn("Gated", message)
        self.assertIs(type(model[0]), Gated)


@unittest.skipUnless(ut_custom_ops.custom_ops_available(), "this PyTorch has no custom ops")
class CompiledNdTest(unittest.TestCase):
    """torch.compile traces each converted layer as one ucudnn::convolution op."""

    def test_compiled_transposed_and_3d_equal_native(self):
        torch.manual_seed(5)
        reference = nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.ReLU(),
                                  nn.ConvTranspose3d(4, 2, 2, stride=2))
        model = copy.deepcopy(reference)
        x = torch.randn(2, 2, 3, 4, 4)
        with tempfile.TemporaryDirectory() as directory:
            planned(model, x.clone().requires_grad_(True), directory)
            compiled = torch.compile(model, backend="aot_eager")
            y, gx, grads = step(compiled, x)
            y_ref, gx_ref, grads_ref = step(reference, x)
            assert_close(self, y, y_ref, "y")
            assert_close(self, gx, gx_ref, "dx")
            for name in grads_ref:
                assert_close(self, grads["_orig_mod." + name], grads_ref[name], name)
            self.assertGreater(ut.stats(model)["planned_calls"], 0)


if __name__ == "__main__":
    unittest.main()
