#!/usr/bin/env bash
# Installs the client component of BUILD_DIR into a temporary prefix, then builds a consumer of
# it twice: with find_package(ucudnn) (shared and static targets) and with pkg-config. Runs both.
set -euo pipefail
build_dir="$1"
source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/package_consumer"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" --component client >/dev/null
test -f "$work/prefix/include/ucudnn/client/config.h"
if find "$work/prefix/include" -name '*.h' | xargs grep -lE '#include.*(grpc|protobuf|google/|ucudnn/core)' ; then
  echo "public headers mention gRPC, protobuf or internal headers" >&2
  exit 1
fi

cmake -S "$source_dir" -B "$work/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer"
"$work/cmake-build/consumer_static"

# The shared library's consumer, on a machine without gRPC's, protobuf's and spdlog's dev files
# (their packages made unfindable): it must configure, build and run.
cmake -S "$source_dir" -B "$work/cmake-shared" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCONSUMER_STATIC=OFF -DCMAKE_DISABLE_FIND_PACKAGE_gRPC=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON \
  >"$work/shared-configure.log" 2>&1 || {
  cat "$work/shared-configure.log" >&2
  echo "the shared-library consumer does not configure without gRPC/protobuf/spdlog" >&2
  exit 1
}
cmake --build "$work/cmake-shared" >/dev/null
"$work/cmake-shared/consumer"

pc="$work/prefix/lib/pkgconfig"
[ -d "$pc" ] || pc="$(dirname "$(find "$work/prefix" -name ucudnn.pc | head -1)")"
cflags="$(PKG_CONFIG_PATH="$pc" pkg-config --cflags ucudnn)"
# The shared library hides its dependencies: none of their flags reach the consumer.
if grep -qiE 'SPDLOG|FMT_|openblas|grpc|protobuf' <<<"$cflags"; then
  echo "pkg-config --cflags ucudnn leaks a dependency's flags: $cflags" >&2
  exit 1
fi
flags="$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs ucudnn)"
# shellcheck disable=SC2086
c++ -std=c++17 "$source_dir/main.cc" -o "$work/pc-consumer" $flags \
  -Wl,-rpath,"$(PKG_CONFIG_PATH="$pc" pkg-config --variable=libdir ucudnn)"
"$work/pc-consumer"

# The pkg-config file tells the truth about the shared library (issue 22): every library of its
# DT_NEEDED that a static link needs is in `pkg-config --static --libs ucudnn`, and the static
# library links and runs with exactly the flags of ucudnn-static.pc.
libdir="$(PKG_CONFIG_PATH="$pc" pkg-config --variable=libdir ucudnn)"
needed="$(readelf -d "$libdir/libucudnn_client.so" | sed -n 's/.*(NEEDED).*\[lib\(.*\)\.so.*\]/\1/p')"
static_libs=" $(PKG_CONFIG_PATH="$pc" pkg-config --static --libs ucudnn) "
for dep in grpc++ protobuf spdlog fmt openblas gpr; do
  grep -qx -- "$dep" <<<"$needed" || continue
  if [[ "$static_libs" != *" -l$dep "* ]]; then
    echo "libucudnn_client.so needs lib$dep, but pkg-config --static --libs ucudnn does not name it:$static_libs" >&2
    exit 1
  fi
done
static_flags="$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs ucudnn-static)"
# shellcheck disable=SC2086
c++ -std=c++17 "$source_dir/main.cc" -o "$work/pc-consumer-static" $static_flags
if readelf -d "$work/pc-consumer-static" | grep -q 'libucudnn_client\.so'; then
  echo "the ucudnn-static.pc consumer links the shared library" >&2
  exit 1
fi
"$work/pc-consumer-static"
echo "package ok"
