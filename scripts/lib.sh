#!/usr/bin/env bash
# Shared by the README's commands: installing Debian packages and building. Sourced, not run.

# Debian packages the build, the tests and the demo need. CUDA and cuDNN are not among them:
# they are found under /usr/local/cuda when present, and the build goes on without them.
UCUDNN_DEBIAN_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libpqxx-dev coinor-libcbc-dev libspdlog-dev libopenblas-dev
  libgtest-dev libgmock-dev
  libcpp-httplib-dev nlohmann-json3-dev libcli11-dev prometheus-cpp-dev
  postgresql postgresql-contrib
  clang libclang-rt-14-dev
  # deploy/validate.py (YAML, the Compose schema of docker-compose 1.29, the Kubernetes object
  # models of python3-kubernetes, systemd-analyze and systemd-sysusers); scripts/bundle.sh
  # (patchelf: RUNPATH $ORIGIN on every bundled library); the scripts' shellcheck test.
  python3 python3-yaml python3-jsonschema python3-kubernetes docker-compose systemd
  patchelf shellcheck
  # The README's operator recipes (tests/e2e/readme_recipes_test.cc runs them).
  jq curl
  # python/ucudnn's PyTorch adapter and its tests (CPU PyTorch 1.13 under /usr/bin/python3),
  # its pip install into a venv (tests/tools/python_package_test.sh), and the real-model
  # benchmark's CPU smoke test (bench/torch_models.py: torchvision's models).
  python3-torch python3-torchvision python3-venv python3-pip python3-setuptools
  # The benchmarks' `plot` subcommand (bench/plots.py: docs/img/*.svg) and its test.
  python3-matplotlib
)

# Tools installed from Debian only when their command is missing: a machine may have them from
# elsewhere (Node.js from NodeSource ships its own npm and conflicts with Debian's npm package).
# "command:package package...". npm fetches buf (see ucudnn_install_buf); Debian 12's nodejs and
# npm come to about 360 packages, ~140 MiB installed, on a fresh machine.
UCUDNN_DEBIAN_TOOLS=(
  "npm:nodejs npm"
)

ucudnn_log() { printf '\033[1m[ucudnn]\033[0m %s\n' "$*" >&2; }

# Installs whatever of UCUDNN_DEBIAN_PACKAGES is missing; does nothing when all are present.
ucudnn_install_packages() {
  local missing=() p tool
  for p in "${UCUDNN_DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  for tool in "${UCUDNN_DEBIAN_TOOLS[@]}"; do
    command -v "${tool%%:*}" >/dev/null 2>&1 && continue
    # shellcheck disable=SC2206  # the package list is meant to split on spaces
    missing+=(${tool#*:})
  done
  if [ ${#missing[@]} -eq 0 ]; then
    ucudnn_log "all Debian packages present"
    return 0
  fi
  ucudnn_log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # Debian's postgresql package starts a cluster of its own; this project never uses it.
}

# buf (npm @bufbuild/buf) into build/tools: `buf lint` for the proto in the test suite, and
# `buf curl` to call the server through reflection as an operator would (Debian 12 has no
# grpcurl). Without npm (ucudnn_install_packages installs it) it is left out, and says so.
# Pinned: the proto lint's rules and `buf curl`'s flags change between releases.
UCUDNN_BUF_VERSION=1.75.0
ucudnn_install_buf() {
  local root="$1"
  [ -x "$root/build/tools/node_modules/.bin/buf" ] && return 0
  if ! command -v npm >/dev/null 2>&1; then
    ucudnn_log "npm not found: buf is not installed (the proto lint test will be skipped)"
    return 0
  fi
  mkdir -p "$root/build/tools"
  npm install --silent --prefix "$root/build/tools" "@bufbuild/buf@$UCUDNN_BUF_VERSION" >/dev/null 2>&1 ||
    ucudnn_log "could not install buf from npm; the proto lint test will be skipped"
}

# Prints the buf to use (build/tools' or one on the PATH); fails when there is none.
ucudnn_buf() {
  local root="$1"
  if [ -x "$root/build/tools/node_modules/.bin/buf" ]; then
    echo "$root/build/tools/node_modules/.bin/buf"
  else
    command -v buf
  fi
}

# Configures build/ with a preset ("default": Ninja, RelWithDebInfo; "ci": the same with warnings
# as errors) and builds everything. A build/ configured already is built as it is, its options
# kept: a user's own configuration (generator, build type, warnings) keeps working.
ucudnn_build() {
  local root="$1" preset="${2:-default}"
  cd "$root" || return 1
  local werror='^CMAKE_COMPILE_WARNING_AS_ERROR:[A-Z]*=ON$'
  if [ ! -f build/CMakeCache.txt ]; then
    cmake --preset "$preset"
  elif [ "$preset" = ci ] && ! grep -Eq "$werror" build/CMakeCache.txt; then
    ucudnn_log "build/ is configured already, without warnings as errors (CI configures a fresh" \
      "build/ with 'cmake --preset ci'; run that to have them here too)"
  fi
  cmake --build build -j "$(nproc)"
}
