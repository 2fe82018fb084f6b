#!/usr/bin/env bash
# Shared by the README's commands: installing Debian packages and building. Sourced, not run.

# Debian packages the build, the tests and the demo need. CUDA and cuDNN are not among them:
# they are found under /usr/local/cuda when present, and the build goes on without them.
UCUDNN_DEBIAN_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libpqxx-dev coinor-libcbc-dev libspdlog-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev nlohmann-json3-dev libcli11-dev
  postgresql postgresql-contrib
  clang libclang-rt-14-dev
  python3 python3-yaml systemd
)

ucudnn_log() { printf '\033[1m[ucudnn]\033[0m %s\n' "$*" >&2; }

# Installs whatever of UCUDNN_DEBIAN_PACKAGES is missing; does nothing when all are present.
ucudnn_install_packages() {
  local missing=()
  for p in "${UCUDNN_DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
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

# Configures (preset "default": Ninja, build/) and builds everything.
ucudnn_build() {
  local root="$1"
  cd "$root"
  if [ ! -f build/CMakeCache.txt ]; then
    cmake --preset default
  fi
  cmake --build build -j "$(nproc)"
}
