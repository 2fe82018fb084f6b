#!/usr/bin/env bash
# Makes a relocatable bundle of the built binaries: copy the directory to any x86-64 Linux with a
# glibc at least as new as this machine's (Ubuntu 24.04 is) and run bin/* directly, with no
# environment: under systemd, in a container, from a Kubernetes pod. bin/env.sh puts bin/ on the
# PATH for a shell. The GPU suite (scripts/gpu_suite.sh, docs/gpu.md) runs from such a bundle.
#
#   scripts/bundle.sh [--build-dir build] [--out .bundle] [--with-tests] [--with-postgres]
#                     [--only "ucudnn_gpu_tests ucudnn-bench-engine"] [--gpu-suite] [--no-cudart]
#                     [--with-client]
#
#   --build-dir DIR   the CMake build directory whose bin/ is bundled (default: build)
#   --out DIR         where the bundle is made; replaced if it exists (default: .bundle)
#   --with-tests      test binaries (*_test, *_tests) too
#   --with-postgres   PostgreSQL 15's server and client programs (see Layout)
#   --only "A B"      just the named executables of BUILD/bin
#   --gpu-suite       just what scripts/gpu_suite.sh runs (the GPU test binary and the engine
#                     benchmark): about 42 MB, most of it OpenBLAS. Without it every executable is
#                     taken, and gRPC, protobuf, libpqxx and CBC come along.
#   --no-cudart       leave the CUDA runtime out (the target has CUDA 13's libcudart)
#   --with-client     the client library too, as lib/libucudnn_client.so (what python/ucudnn
#                     loads: scripts/gpu_torch.sh)
#
# Layout:
#   share/doc/ucudnn/   README.md and docs/deploy.md (the systemd units' Documentation=)
#   bin/        every executable of BUILD/bin (test binaries, *_test(s), only with --with-tests;
#               --only keeps just the named ones), debug info stripped, RUNPATH $ORIGIN/../lib;
#               bin/env.sh adds bin/ to PATH (and sets UCUDNN_PG_BINDIR with --with-postgres).
#   lib/        the shared libraries they load, directly or through each other (per ldd), each
#               with RUNPATH $ORIGIN, except what the target machine has: glibc and the GCC
#               runtime (libc, libm, libpthread, libdl, librt, ld-linux, libgcc_s, libstdc++: the
#               target's are newer), the NVIDIA driver (libcuda, libnvidia-*) and cuDNN (the GPU
#               machine's own, 9.14, in its system path). The CUDA runtime (libcudart.so.13,
#               0.7 MB) is included unless --no-cudart.
#   lib/postgresql/15/{bin,lib}, share/postgresql/15   with --with-postgres: PostgreSQL 15 in
#               Debian's relative layout (it finds its share/ from its bin/), RUNPATH
#               $ORIGIN/../../.. (lib/), plus its libraries in lib/. JIT (llvmjit, bitcode) is
#               left out: it would pull in 100+ MB of LLVM.
# Every library an executable or library of the bundle needs resolves inside lib/ through these
# RUNPATHs, or is one of the target's own listed above; the script checks that before it ends
# (patchelf, from the Debian package of that name, sets the RUNPATHs). No LD_LIBRARY_PATH is
# needed, and none is set: system programs started beside the bundle keep their own libraries.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
out="$root/.bundle"
with_tests=0
with_postgres=0
with_client=0
with_cudart=1
only=""

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "bundle.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$(cd "$2" && pwd)"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --with-tests) with_tests=1; shift ;;
    --with-postgres) with_postgres=1; shift ;;
    --with-client) with_client=1; shift ;;
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
command -v readelf >/dev/null || die "readelf not found (binutils)"
command -v patchelf >/dev/null || die "patchelf not found (Debian package patchelf)"

case "$out" in /*) ;; *) out="$(pwd)/$out" ;; esac
[ "$out" != "/" ] || die "refusing to use / as the bundle"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/share/doc/ucudnn"
# What the systemd units' Documentation= and the deployment files point at.
cp "$root/README.md" "$root/docs/deploy.md" "$out/share/doc/ucudnn/"

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

# ---- the client library ---------------------------------------------------------------------------
client_objects=()
if [ "$with_client" = 1 ]; then
  client="$build/lib/libucudnn_client.so"
  [ -f "$client" ] || die "--with-client: $client not found (build the ucudnn_client target)"
  # One file under the name python/ucudnn looks for; nothing in the bundle links against it.
  strip --strip-debug -o "$out/lib/libucudnn_client.so" "$(readlink -f "$client")"
  chmod 644 "$out/lib/libucudnn_client.so"
  client_objects+=("$out/lib/libucudnn_client.so")
fi

# ---- shared libraries -----------------------------------------------------------------------------
declare -A copied=()
missing=()
for obj in "${binaries[@]}" "${pg_objects[@]}" "${client_objects[@]}"; do
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

# ---- RUNPATHs -------------------------------------------------------------------------------------
# A binary's RUNPATH covers only its own NEEDED entries, not its libraries' (absl, Clp, Cgl... are
# loaded by gRPC and CBC): every bundled object gets the RUNPATH that points at lib/ from where it
# lies, so nothing depends on LD_LIBRARY_PATH.
# patchelf only ever adds a RUNPATH here: Debian 12's patchelf (0.14) overwrites an old RUNPATH
# string with 'X's, and symbol names the linker tail-merged into it go with it (our binaries'
# ".../openblas-pthread" ended in "read": "undefined symbol: XXXX"). An object that has a RUNPATH
# starting with the one wanted is cut to it in place (truncate_runpath.py); any other existing
# RUNPATH stops the bundle. Every object's dynamic symbols must come out as they went in.
dynamic_symbols() { readelf --dyn-syms -W "$1" 2>/dev/null | awk 'NR > 3 {print $8}'; }
set_runpath() {  # runpath, files...
  local rp="$1" f current before
  shift
  for f in "$@"; do
    is_elf "$f" || continue
    # Libraries without a dynamic section (none here so far) have nothing to patch.
    readelf -d "$f" 2>/dev/null | grep -q '(NEEDED)' || continue
    current=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p' | head -n 1)
    [ "$current" = "$rp" ] && continue
    before=$(dynamic_symbols "$f" | md5sum)
    if [ -z "$current" ]; then
      patchelf --set-rpath "$rp" "$f" || die "patchelf failed on $f"
    else
      python3 "$root/scripts/truncate_runpath.py" "$f" "$rp" ||
        die "$f has RUNPATH '$current', which cannot be changed safely to '$rp'"
    fi
    [ "$(dynamic_symbols "$f" | md5sum)" = "$before" ] ||
      die "setting the RUNPATH of $f changed its dynamic symbols"
  done
}
shopt -s nullglob
# shellcheck disable=SC2016  # literal $ORIGIN, for the dynamic loader
set_runpath '$ORIGIN/../lib' "${binaries[@]}"
# The client library keeps the build's RUNPATH cut to its first entry, $ORIGIN/../lib, which from
# lib/ is lib/ itself; every other library gets $ORIGIN.
libraries=()
for l in "$out"/lib/*.so*; do
  [ "$with_client" = 1 ] && [ "$l" = "$out/lib/libucudnn_client.so" ] && continue
  libraries+=("$l")
done
# shellcheck disable=SC2016
set_runpath '$ORIGIN/../lib' "${client_objects[@]}"
# shellcheck disable=SC2016
set_runpath '$ORIGIN' "${libraries[@]}"
if [ "$with_postgres" = 1 ]; then
  # shellcheck disable=SC2016
  set_runpath '$ORIGIN/../../..' "${pg_objects[@]}"
fi
shopt -u nullglob

# ---- check: every NEEDED resolves inside the bundle or is the target's own ------------------------
unresolved=()
check_needed() {  # object, the directory its RUNPATH points at
  local obj="$1" dir="$2" needed
  while read -r needed; do
    [ -e "$dir/$needed" ] && continue
    excluded_lib "$needed" && continue
    unresolved+=("$needed (needed by ${obj#"$out"/})")
  done < <(readelf -d "$obj" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
}
for b in "${binaries[@]}"; do check_needed "$b" "$out/lib"; done
for l in "$out"/lib/*.so*; do is_elf "$l" && check_needed "$l" "$out/lib"; done
for p in "${pg_objects[@]}"; do check_needed "$p" "$out/lib"; done
if [ ${#unresolved[@]} -gt 0 ]; then
  printf 'bundle.sh: not in the bundle: %s\n' "${unresolved[@]}" >&2
  die "the bundle is incomplete"
fi

# ---- bin/env.sh -----------------------------------------------------------------------------------
cat > "$out/bin/env.sh" <<'ENV'
# For a shell: . BUNDLE/bin/env.sh puts the bundle's programs on the PATH. The programs find their
# libraries by themselves (RUNPATH), so no LD_LIBRARY_PATH is set: the system's own programs keep
# the system's libraries.
ucudnn_bundle="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export UCUDNN_BUNDLE="$ucudnn_bundle"
export PATH="$ucudnn_bundle/bin${PATH:+:$PATH}"
if [ -x "$ucudnn_bundle/lib/postgresql/15/bin/postgres" ]; then
  export UCUDNN_PG_BINDIR="$ucudnn_bundle/lib/postgresql/15/bin"
fi
unset ucudnn_bundle
ENV

# ---- report ---------------------------------------------------------------------------------------
{
  echo "# ucudnn bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  if rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null)"; then
    git -C "$root" diff --quiet 2>/dev/null || rev="$rev+dirty"
  else
    rev="unknown (no git checkout)"
  fi
  echo "source: $rev"
  echo "build: $build"
  echo "glibc here: $(ldd --version 2>/dev/null | head -1)"
  echo "binaries:"; for b in "${binaries[@]}"; do echo "  $(basename "$b")"; done
  echo "libraries:"; for l in $(printf '%s\n' "${!copied[@]}" | sort); do echo "  $l"; done
} > "$out/MANIFEST.txt"

size="$(du -sh "$out" | cut -f1)"
size_kb="$(du -sk "$out" | cut -f1)"
echo "bundle: $out ($size; ${#binaries[@]} executables, ${#copied[@]} libraries; every one" \
  "finds its libraries through RUNPATH, no environment needed)" >&2
if [ "$size_kb" -gt $((56 * 1024)) ]; then
  echo "bundle.sh: warning: the bundle is over 56 MiB; with the source tree it may not fit a" \
    "64 MiB transfer: use --only to keep just what you will run" >&2
fi
