#!/usr/bin/env bash
# The Python package as a PyTorch user installs it (issue 20): `pip install` of python/ into a
# fresh venv (the system's PyTorch visible), the client library from `cmake --install` found
# through the system loader (no UCUDNN_LIBRARY), `import ucudnn.torch`, a converted layer's step,
# and ucudnn-doctor naming the installed library.
#   bash tests/tools/python_package_test.sh SOURCE_DIR BUILD_DIR PYTHON3
set -uo pipefail
source_dir="$1" build="$2" python="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$work/prefix" --component client >"$work/install.log" 2>&1 ||
  fail "cmake --install --component client: $(tail -3 "$work/install.log")"
libdir="$(dirname "$(find "$work/prefix" -name 'libucudnn_client.so' -print -quit)")"
[ -d "$libdir" ] || fail "the install tree has no libucudnn_client.so"

"$python" -m venv --system-site-packages "$work/venv" >"$work/venv.log" 2>&1 ||
  fail "python3 -m venv: $(tail -3 "$work/venv.log")"
# From a copy: a setuptools build writes build/ and *.egg-info beside its sources.
cp -r "$source_dir/python" "$work/src"
rm -rf "$work/src/tests"
"$work/venv/bin/python" -m pip install --no-index --no-build-isolation --no-deps -q "$work/src" \
  >"$work/pip.log" 2>&1 || fail "pip install: $(tail -5 "$work/pip.log")"

cd "$work" || exit 1
unset UCUDNN_LIBRARY UCUDNN_BUNDLE PYTHONPATH
export LD_LIBRARY_PATH="$libdir" UCUDNN_LOG_LEVEL=error UCUDNN_SERVER=""
"$work/venv/bin/python" - "$libdir" <<'PY' || fail "the installed package did not work"
import os, sys
import torch
import ucudnn, ucudnn.torch as ut
here = os.path.dirname(ucudnn.__file__)
assert "site-packages" in here, f"ucudnn imported from {here}, not the venv"
path = ucudnn.find_library()
assert os.path.realpath(path).startswith(os.path.realpath(sys.argv[1])), path
model = ut.convert(torch.nn.Conv2d(3, 4, 3), cache_path="off")
x = torch.randn(2, 3, 8, 8, requires_grad=True)
model(x).sum().backward()
assert x.grad is not None and ut.stats(model)["kernels"] == 3, ut.stats(model)
print("installed package: library", path)
PY
"$work/venv/bin/ucudnn-doctor" >"$work/doctor.txt" 2>&1 || fail "ucudnn-doctor: $(cat "$work/doctor.txt")"
grep -q "^library:  $libdir/libucudnn_client.so" "$work/doctor.txt" ||
  fail "ucudnn-doctor does not name the installed library: $(cat "$work/doctor.txt")"
"$work/venv/bin/ucudnn-curve" --help >"$work/curve.txt" 2>&1 ||
  fail "ucudnn-curve --help: $(cat "$work/curve.txt")"
grep -q "recorded step" "$work/curve.txt" || fail "ucudnn-curve is not the curve: $(cat "$work/curve.txt")"
echo "python package: pip install, import, convert, ucudnn-doctor and ucudnn-curve work"
