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
