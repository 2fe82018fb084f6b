"""What the Python tests share. What they need found, so that they also run on their own after a
build (`cd python/tests && python3 -m unittest`), not only through ctest: the package (python/),
the benchmark scripts (bench/) and the plan-cache tool (build/bin/ucudnn_test_write_plan_cache, or
$UCUDNN_TEST_PLAN_CACHE_TOOL); the library is found by the package itself (build/lib). And the
helpers of more than one test file."""

import contextlib
import io
import os
import socket
import sys

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
for folder in ("python", "bench"):
    path = os.path.join(REPO, folder)
    if path not in sys.path:
        sys.path.insert(0, path)

TOOL = os.environ.get("UCUDNN_TEST_PLAN_CACHE_TOOL") or os.path.join(
    REPO, "build", "bin", "ucudnn_test_write_plan_cache")


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_rejected(test, parse_args, argv, message):
    """`parse_args(argv)` exits 2 (argparse's usage error) with `message` on standard error."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), test.assertRaises(SystemExit) as exit:
        parse_args(argv)
    test.assertEqual(exit.exception.code, 2)
    test.assertIn(message, stderr.getvalue())


# The adapter's tests' helpers (ucudnn.torch and the bench's plan-cache writer, imported on use:
# the scripts' tests need no library).
LIMIT = 64 << 20  # the adapter's default per-kernel limit


def write_plan_cache(path, shapes, algos="1,2"):
    """Micro-batched plans for `shapes` into the cache file at `path` (torch_adapter's helper)."""
    import torch_adapter  # bench/torch_adapter.py
    import ucudnn.torch as ut

    return torch_adapter.write_plan_cache(TOOL, path, shapes, LIMIT, algos,
                                          framework=ut.framework_identity())


def planned(model, sample, directory, algos="1,2"):
    """Converts `model` with a plan cache holding micro-batched plans of all its kernels."""
    import ucudnn.torch as ut

    ut.convert(model, server="", cache_path=os.path.join(directory, "unused.bin"))
    shapes = [s for group in ut.kernels(model, sample).values() for s in group]
    cache = os.path.join(directory, "plans.bin")
    count = write_plan_cache(cache, shapes, algos)
    ut.convert(model, server="", cache_path=cache)  # a new runtime: its sessions load the cache
    return count


def without_seconds(test, result):
    """prepare()'s answer without its "seconds" (each phase's time, checked here: three phases,
    none negative)."""
    result = dict(result)
    seconds = result.pop("seconds")
    test.assertEqual(sorted(seconds), ["budgets", "host_bound", "plans"])
    test.assertTrue(all(v >= 0 for v in seconds.values()), seconds)
    return result


def step(model, x):
    """Forward and backward of a sum-of-squares loss; (y, grad_x, {param: grad})."""
    x = x.detach().clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    y = model(x)
    (y.float() ** 2).sum().backward()
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in model.named_parameters()}


# Every Conv2d option: (constructor kwargs, input shape).
CASES = {
    "plain_3x3": (dict(in_channels=3, out_channels=8, kernel_size=3), (4, 3, 12, 12)),
    "stride_padding": (dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1),
                       (4, 4, 11, 11)),
    "tuple_options": (dict(in_channels=4, out_channels=6, kernel_size=(3, 5), stride=(2, 1),
                           padding=(1, 2), dilation=(1, 2)), (4, 4, 10, 13)),
    "same_odd": (dict(in_channels=4, out_channels=4, kernel_size=3, padding="same"),
                 (4, 4, 9, 9)),
    "same_even_dilated": (dict(in_channels=4, out_channels=4, kernel_size=4, padding="same",
                               dilation=1), (4, 4, 9, 8)),
    "same_dilated": (dict(in_channels=4, out_channels=4, kernel_size=3, padding="same",
                          dilation=2), (4, 4, 9, 9)),
    "valid": (dict(in_channels=4, out_channels=4, kernel_size=3, padding="valid"),
              (4, 4, 8, 8)),
    "groups": (dict(in_channels=8, out_channels=4, kernel_size=3, padding=1, groups=2),
               (4, 8, 7, 7)),
    "depthwise": (dict(in_channels=6, out_channels=6, kernel_size=3, padding=1, groups=6),
                  (4, 6, 7, 7)),
    "no_bias": (dict(in_channels=3, out_channels=5, kernel_size=1, bias=False), (4, 3, 6, 6)),
    "reflect": (dict(in_channels=3, out_channels=4, kernel_size=3, padding=1,
                     padding_mode="reflect"), (4, 3, 8, 8)),
    "replicate": (dict(in_channels=3, out_channels=4, kernel_size=3, padding=2,
                       padding_mode="replicate"), (4, 3, 8, 8)),
    "circular": (dict(in_channels=3, out_channels=4, kernel_size=3, padding=(1, 2),
                      padding_mode="circular"), (4, 3, 8, 8)),
    "odd_batch": (dict(in_channels=3, out_channels=4, kernel_size=3, padding=1), (5, 3, 6, 6)),
}


def assert_close(test, actual, expected, what):
    scale = max(1.0, expected.abs().max().item())
    test.assertEqual(actual.shape, expected.shape, what)
    error = (actual.double() - expected.double()).abs().max().item()
    test.assertLess(error, 1e-4 * scale, f"{what}: max error {error} (scale {scale})")


def assert_same_step(test, model, reference, x):
    """The output and every gradient of one step of `model` are `reference`'s."""
    y, gx, grads = step(model, x)
    y_ref, gx_ref, grads_ref = step(reference, x)
    assert_close(test, y, y_ref, "y")
    assert_close(test, gx, gx_ref, "dx")
    test.assertEqual(set(grads), set(grads_ref))
    for param in grads_ref:
        assert_close(test, grads[param], grads_ref[param], f"d{param}")

