#!/usr/bin/env bash
# `cmake --install` puts every operator binary in the install tree, each in its component:
# ucudnn-server (server), ucudnn-worker (worker), ucudnn (cli), and the client library (client).
#   bash tests/tools/install_tree_test.sh BUILD_DIR
set -uo pipefail
build="$1"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
failures=0
for pair in server:bin/ucudnn-server worker:bin/ucudnn-worker cli:bin/ucudnn client:lib/libucudnn_client.so; do
  component="${pair%%:*}"
  file="${pair#*:}"
  dest="$prefix/$component"
  if ! cmake --install "$build" --prefix "$dest" --component "$component" >/dev/null 2>&1; then
    echo "FAIL: cmake --install --component $component failed"
    failures=$((failures + 1))
    continue
  fi
  # GNUInstallDirs may put libraries in lib or lib64 (or a multiarch directory).
  found="$(find "$dest" -path "*/${file##*/}" -print -quit)"
  if [ -z "$found" ]; then
    echo "FAIL: component $component installs no ${file##*/}"
    failures=$((failures + 1))
  elif [ "${file%%/*}" = bin ] && [ ! -x "$found" ]; then
    echo "FAIL: $found is not executable"
    failures=$((failures + 1))
  fi
done
# Installed stripped by default (issue 22): no debug sections in a binary or the shared library.
for file in server/bin/ucudnn-server cli/bin/ucudnn; do
  if readelf -S "$prefix/$file" | grep -q '\.debug_info'; then
    echo "FAIL: $file is installed with its debug information (not stripped)"
    failures=$((failures + 1))
  fi
done
so="$(find "$prefix/client" -name 'libucudnn_client.so.*' -type f -print -quit)"
if [ -n "$so" ] && readelf -S "$so" | grep -q '\.debug_info'; then
  echo "FAIL: ${so#"$prefix"/} is installed with its debug information (not stripped)"
  failures=$((failures + 1))
fi
# A plain install has no example program; asked for by its component, it is there.
if ! cmake --install "$build" --prefix "$prefix/all" >/dev/null 2>&1; then
  echo "FAIL: cmake --install failed"
  failures=$((failures + 1))
elif [ -e "$prefix/all/bin/ucudnn-example-train-step" ]; then
  echo "FAIL: a plain cmake --install installs the example program"
  failures=$((failures + 1))
fi
if [ -x "$build/bin/ucudnn-example-train-step" ]; then
  cmake --install "$build" --prefix "$prefix/examples" --component examples >/dev/null 2>&1
  [ -x "$prefix/examples/bin/ucudnn-example-train-step" ] || {
    echo "FAIL: --component examples installs no example program"
    failures=$((failures + 1))
  }
fi
[ "$failures" -eq 0 ] && echo "install tree: every component has its binaries"
[ "$failures" -eq 0 ]
