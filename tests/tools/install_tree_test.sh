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
[ "$failures" -eq 0 ] && echo "install tree: every component has its binaries"
[ "$failures" -eq 0 ]
