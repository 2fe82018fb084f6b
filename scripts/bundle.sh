#!/usr/bin/env bash
# Makes a relocatable bundle of the built binaries: copy the directory to any x86-64 Linux with a
# glibc at least as new as this machine's (Ubuntu 24.04 is) and run bin/* after sourcing
# bin/env.sh. The GPU suite (scripts/gpu_suite.sh, docs/gpu.md) runs from such a bundle.
#
#   scripts/bundle.sh [--build-dir build] [--out .bundle] [--with-tests] [--with-postgres]
#                     [--only "ucudnn_gpu_tests ucudnn-bench-engine"] [--gpu-suite] [--no-cudart]
#
#   --gpu-suite   just what scripts/gpu_suite.sh runs (the GPU test binary and the engine
#                 benchmark): about 42 MB, most of it OpenBLAS. Without it every executable is
#                 taken, and gRPC, protobuf, libpqxx and CBC come along.
#
# Layout:
#   bin/        every executable of BUILD/bin (test binaries, *_test(s), only with --with-tests;
#               --only keeps just the named ones), debug info stripped; bin/env.sh sets
#               LD_LIBRARY_PATH (and PATH, UCUDNN_PG_BINDIR) for them.
#   lib/        the shared libraries they load (per ldd), except what the target machine has:
#               glibc and the GCC runtime (libc, libm, libpthread, libdl, librt, ld-linux,
#               libgcc_s, libstdc++: the target's are newer), the NVIDIA driver (libcuda,
#               libnvidia-*) and cuDNN (the GPU machine's own, 9.14, in its system path). The
#               CUDA runtime (libcudart.so.13, 0.7 MB) is included unless --no-cudart.
#   lib/postgresql/15/{bin,lib}, share/postgresql/15   with --with-postgres: PostgreSQL 15 in
#               Debian's relative layout (it finds its share/ from its bin/), plus its libraries
#               in lib/. JIT (llvmjit, bitcode) is left out: it would pull in 100+ MB of LLVM.
# Binaries carry RUNPATH $ORIGIN/../lib when CMake gave it to them; env.sh covers the rest
# (and the libraries' own dependencies, which a binary's RUNPATH does not reach).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
out="$root/.bundle"
with_tests=0
with_postgres=0
with_cudart=1
only=""

usage() { sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "bundle.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$(cd "$2" && pwd)"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --with-tests) with_tests=1; shift ;;
    --with-postgres) with_postgres=1; shift ;;
    --no-cudart) with_cudart=0; shift ;;
    --only) only="$2"; shift 2 ;;
    --gpu-suite) only="ucudnn_gpu_tests ucudnn-bench-engine"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

[ -d "$build/bin" ] || die "no $build/bin: build first (cmake --preset default && cmake --build build)"
command -v ldd >/dev/null || die "ldd not found"
command -v strip >/dev/null || die "strip not found (binutils)"

case "$out" in /*) ;; *) out="$(pwd)/$out" ;; esac
[ "$out" != "/" ] || die "refusing to use / as the bundle"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"

is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
is_test() { case "$1" in *_test|*_tests|*-test|*-tests) return 0 ;; *) return 1 ;; esac; }
wanted() {
  [ -z "$only" ] && return 0
  local n
  for n in $only; do [ "$n" = "$1" ] && return 0; done
  return 1
}

# Libraries the target provides itself (see the header).
excluded_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libmvec.so*|libpthread.so*|libdl.so*|librt.so*) return 0 ;;
    libresolv.so*|libutil.so*|libanl.so*|libnsl.so*|libBrokenLocale.so*) return 0 ;;
    libgcc_s.so*|libstdc++.so*) return 0 ;;
    libcuda.so*|libnvidia-*|libcudnn*) return 0 ;;
    libcudart.so*) [ "$with_cudart" = 1 ] && return 1 || return 0 ;;
    *) return 1 ;;
  esac
}

# ---- executables --------------------------------------------------------------------------------
binaries=()
for f in "$build"/bin/*; do
  if ! { [ -f "$f" ] && [ -x "$f" ] && is_elf "$f"; }; then continue; fi
  name="$(basename "$f")"
  wanted "$name" || continue
  if is_test "$name" && [ "$with_tests" = 0 ] && [ -z "$only" ]; then continue; fi
  strip --strip-debug -o "$out/bin/$name" "$f"
  chmod 755 "$out/bin/$name"
  binaries+=("$out/bin/$name")
done
[ ${#binaries[@]} -gt 0 ] || die "no executables selected from $build/bin"
if [ -n "$only" ]; then
  for n in $only; do [ -e "$out/bin/$n" ] || die "--only: $n is not in $build/bin"; done
fi

# ---- PostgreSQL -----------------------------------------------------------------------------------
pg_objects=()
if [ "$with_postgres" = 1 ]; then
  pg=/usr/lib/postgresql/15
  [ -x "$pg/bin/postgres" ] || die "--with-postgres: $pg/bin/postgres not found"
  mkdir -p "$out/lib/postgresql/15" "$out/share/postgresql"
  cp -a "$pg/bin" "$out/lib/postgresql/15/bin"
  mkdir -p "$out/lib/postgresql/15/lib"
  for so in "$pg"/lib/*.so; do
    case "$(basename "$so")" in llvmjit*) continue ;; esac
    cp -a "$so" "$out/lib/postgresql/15/lib/"
  done
  cp -a /usr/share/postgresql/15 "$out/share/postgresql/15"
  while IFS= read -r -d '' f; do
    is_elf "$f" && pg_objects+=("$f")
  done < <(find "$out/lib/postgresql/15" -type f -print0)
fi

# ---- shared libraries -----------------------------------------------------------------------------
declare -A copied=()
missing=()
for obj in "${binaries[@]}" "${pg_objects[@]}"; do
  # ldd prints "name => /path (addr)", "name => not found", or "/path (addr)" for the loader.
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    excluded_lib "$name" && continue
    if [ "$path" = "not" ]; then
      missing+=("$name (needed by $(basename "$obj"))")
      continue
    fi
    [ -n "${copied[$name]:-}" ] && continue
    copied[$name]=1
    # Under the name the binaries ask for, resolved through symlinks, without debug info.
    strip --strip-debug -o "$out/lib/$name" "$(readlink -f "$path")" 2>/dev/null ||
      cp -L "$path" "$out/lib/$name"
    chmod 644 "$out/lib/$name"
  done < <(LD_LIBRARY_PATH="$out/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$obj" 2>/dev/null || true)
done
for m in "${missing[@]}"; do
  case "$m" in libcuda.so*|libcudnn*) ;; *) echo "bundle.sh: warning: $m not found here" >&2 ;; esac
done

# ---- bin/env.sh -----------------------------------------------------------------------------------
cat > "$out/bin/env.sh" <<'ENV'
# Source this before running anything from the bundle: . BUNDLE/bin/env.sh
# Libraries: the bundle's lib/ first, then the system's (NVIDIA driver, cuDNN, glibc).
ucudnn_bundle="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export UCUDNN_BUNDLE="$ucudnn_bundle"
export LD_LIBRARY_PATH="$ucudnn_bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$ucudnn_bundle/bin${PATH:+:$PATH}"
if [ -x "$ucudnn_bundle/lib/postgresql/15/bin/postgres" ]; then
  export UCUDNN_PG_BINDIR="$ucudnn_bundle/lib/postgresql/15/bin"
fi
unset ucudnn_bundle
ENV

# ---- report ---------------------------------------------------------------------------------------
{
  echo "# ucudnn bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "source: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo '+dirty')"
  echo "build: $build"
  echo "glibc here: $(ldd --version 2>/dev/null | head -1)"
  echo "binaries:"; for b in "${binaries[@]}"; do echo "  $(basename "$b")"; done
  echo "libraries:"; for l in $(printf '%s\n' "${!copied[@]}" | sort); do echo "  $l"; done
} > "$out/MANIFEST.txt"

runpath_ok=0
for b in "${binaries[@]}"; do
  # shellcheck disable=SC2016  # a literal $ORIGIN
  if readelf -d "$b" 2>/dev/null | grep -qE 'R(UN)?PATH.*\$ORIGIN/\.\./lib'; then
    runpath_ok=$((runpath_ok + 1))
  fi
done
size="$(du -sh "$out" | cut -f1)"
size_kb="$(du -sk "$out" | cut -f1)"
echo "bundle: $out ($size; ${#binaries[@]} executables, ${#copied[@]} libraries;" \
  "$runpath_ok with RUNPATH \$ORIGIN/../lib, the rest rely on bin/env.sh)" >&2
if [ "$size_kb" -gt $((56 * 1024)) ]; then
  echo "bundle.sh: warning: the bundle is over 56 MiB; with the source tree it may not fit a" \
    "64 MiB transfer: use --only to keep just what you will run" >&2
fi
