#!/usr/bin/env bash
# The README's test command: installs missing Debian packages, builds, runs the whole test suite.
# Idempotent. Works as root (CI) or as a user with sudo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/lib.sh"

ucudnn_install_packages
# buf (npm) lints the proto in the suite; without npm that one test is skipped, visibly.
if command -v npm >/dev/null 2>&1 && [ ! -x "$root/build/tools/node_modules/.bin/buf" ]; then
  mkdir -p "$root/build/tools"
  npm install --silent --prefix "$root/build/tools" @bufbuild/buf >/dev/null 2>&1 ||
    ucudnn_log "could not install buf from npm; the proto lint test will be skipped"
fi
ucudnn_build "$root"
cd "$root/build"
ucudnn_log "running the test suite"
ctest --output-on-failure -j 2 --timeout 600 "$@"
