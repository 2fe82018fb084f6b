"""What the tests need found, so that they also run on their own after a build
(`cd python/tests && python3 -m unittest`), not only through ctest: the package (python/), the
benchmark scripts (bench/) and the plan-cache tool (build/bin/ucudnn_test_write_plan_cache, or
$UCUDNN_TEST_PLAN_CACHE_TOOL). The library is found by the package itself (build/lib)."""

import os
import sys

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
for folder in ("python", "bench"):
    path = os.path.join(REPO, folder)
    if path not in sys.path:
        sys.path.insert(0, path)

TOOL = os.environ.get("UCUDNN_TEST_PLAN_CACHE_TOOL") or os.path.join(
    REPO, "build", "bin", "ucudnn_test_write_plan_cache")
