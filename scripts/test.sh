#!/usr/bin/env bash
# The README's test command: installs missing Debian packages, builds (a fresh build/ with the
# preset "ci": warnings are errors), runs the whole test suite. Idempotent. Works as root (CI) or
# as a user with sudo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/lib.sh"

ucudnn_install_packages
ucudnn_install_buf "$root"
ucudnn_build "$root" ci
cd "$root/build"
ucudnn_log "running the test suite"
ctest --output-on-failure -j 2 --timeout 600 "$@"
