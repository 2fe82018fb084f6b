#!/usr/bin/env bash
# The relocatable bundle (scripts/bundle.sh) runs with no environment at all, as systemd, Docker,
# compose and Kubernetes start it: makes a small bundle (the CLI and the server, plus PostgreSQL
# where it is installed) in a temporary directory, moves it elsewhere, and checks that
#   - `env -i bin/ucudnn --help` and `env -i bin/ucudnn-server --help` (and PostgreSQL's
#     `postgres`/`initdb --version`) run, with LD_BIND_NOW=1 so that every symbol is bound at
#     start: a symbol name damaged by the RUNPATH change (patchelf 0.14 turned "read" into "XXXX")
#     fails there, not later on the first call;
#   - each bundled executable has the same dynamic symbols as the one it was made from;
#   - every NEEDED entry of every executable and library of the bundle resolves inside the bundle,
#     or is one of the libraries the target provides (glibc, the GCC runtime, the NVIDIA driver,
#     cuDNN), both as readelf lists them against the RUNPATHs and as ldd resolves them with an
#     empty environment;
#   - bin/env.sh sets PATH and no LD_LIBRARY_PATH.
#
#   tests/tools/bundle_test.sh SOURCE_DIR BUILD_DIR
# Exit status 0 when all holds, 1 on the first failure, 77 (skipped) without patchelf or binutils.
set -euo pipefail

src="$1"
build="$2"
for tool in patchelf readelf ldd strip; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool not found (Debian packages patchelf, binutils)"
    exit 77
  fi
done

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ucudnn-bundle-test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

args=(--build-dir "$build" --out "$tmp/made" --only "ucudnn ucudnn-server")
with_postgres=0
if [ -x /usr/lib/postgresql/15/bin/postgres ]; then
  args+=(--with-postgres)
  with_postgres=1
fi
bash "$src/scripts/bundle.sh" "${args[@]}" || fail "bundle.sh ${args[*]}"

# Somewhere else, under a path with a space: nothing may depend on where it was made.
mkdir -p "$tmp/moved here"
mv "$tmp/made" "$tmp/moved here/ucudnn"
bundle="$tmp/moved here/ucudnn"

# The target's own libraries (scripts/bundle.sh leaves them out on purpose).
target_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libmvec.so*|libpthread.so*|libdl.so*|librt.so*) return 0 ;;
    libresolv.so*|libutil.so*|libanl.so*|libnsl.so*|libBrokenLocale.so*) return 0 ;;
    libgcc_s.so*|libstdc++.so*) return 0 ;;
    libcuda.so*|libnvidia-*|libcudnn*) return 0 ;;
    *) return 1 ;;
  esac
}

# ---- the programs start with an empty environment ---------------------------------------------
for prog in ucudnn ucudnn-server; do
  out="$(env -i LD_BIND_NOW=1 "$bundle/bin/$prog" --help 2>&1)" ||
    fail "env -i LD_BIND_NOW=1 bin/$prog --help: $out"
  grep -qi 'usage' <<<"$out" || fail "bin/$prog --help printed no usage: $out"
  echo "ok: env -i LD_BIND_NOW=1 bin/$prog --help"
  dynamic_symbols() { readelf --dyn-syms -W "$1" | awk 'NR > 3 {print $8}' | sort; }
  diff <(dynamic_symbols "$build/bin/$prog") <(dynamic_symbols "$bundle/bin/$prog") >/dev/null ||
    fail "bin/$prog: dynamic symbols differ from $build/bin/$prog"
  echo "ok: bin/$prog has the dynamic symbols of the build's"
done
if [ "$with_postgres" = 1 ]; then
  for prog in postgres initdb pg_ctl psql; do
    out="$(env -i LD_BIND_NOW=1 "$bundle/lib/postgresql/15/bin/$prog" --version 2>&1)" ||
      fail "env -i LD_BIND_NOW=1 lib/postgresql/15/bin/$prog --version: $out"
    echo "ok: env -i LD_BIND_NOW=1 lib/postgresql/15/bin/$prog --version ($out)"
  done
fi

# ---- every NEEDED resolves inside the bundle or on the target ----------------------------------
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
objects=0
problems=0
while IFS= read -r -d '' obj; do
  is_elf "$obj" || continue
  objects=$((objects + 1))
  rel="${obj#"$bundle"/}"
  # readelf: each NEEDED is a file in the directory the object's RUNPATH names, or the target's.
  runpath="$(readelf -d "$obj" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
  needed="$(readelf -d "$obj" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
  [ -n "$needed" ] || continue
  # shellcheck disable=SC2016  # a literal $ORIGIN
  case "$runpath" in
    *:*) fail "$rel: RUNPATH '$runpath' has more than the bundle's lib/" ;;
    '$ORIGIN'*) dir="$(dirname "$obj")${runpath#\$ORIGIN}" ;;
    *) fail "$rel: RUNPATH '$runpath' does not start with \$ORIGIN" ;;
  esac
  for n in $needed; do
    if [ ! -e "$dir/$n" ] && ! target_lib "$n"; then
      echo "FAIL: $rel needs $n: neither in $runpath nor a library of the target" >&2
      problems=$((problems + 1))
    fi
  done
  # ldd of each executable, with no environment: what the loader really picks for it and
  # everything it loads ("name => path (0x...)" or "name => not found"; the bundle's path has a
  # space in it). The libraries were checked above; ldd on each of them would only repeat that, slowly.
  case "$rel" in bin/*|lib/postgresql/15/bin/*) ;; *) continue ;; esac
  while IFS=$'\t' read -r name path; do
    case "$path" in
      "$bundle"/*) ;;
      "not found") target_lib "$name" || { echo "FAIL: $rel: $name not found" >&2; problems=$((problems + 1)); } ;;
      *) target_lib "$name" || { echo "FAIL: $rel: $name resolves outside the bundle ($path)" >&2; problems=$((problems + 1)); } ;;
    esac
  done < <(env -i /usr/bin/ldd "$obj" 2>/dev/null |
           sed -n -e 's/^[[:space:]]*\([^[:space:]]*\) => \(not found\)$/\1\t\2/p' \
                  -e 's/^[[:space:]]*\([^[:space:]]*\) => \(.*\) (0x[0-9a-f]*)$/\1\t\2/p')
done < <(find "$bundle/bin" "$bundle/lib" -type f -print0)
[ "$problems" -eq 0 ] || fail "$problems unresolved libraries"
[ "$objects" -gt 10 ] || fail "only $objects ELF objects in the bundle"
echo "ok: $objects executables and libraries resolve every NEEDED inside the bundle or on the target"

# ---- env.sh: PATH, no LD_LIBRARY_PATH -------------------------------------------------------------
# shellcheck disable=SC2016  # expanded by the inner shell
out="$(env -i /bin/bash -c '. "$1/bin/env.sh"; command -v ucudnn-server; echo "LD=${LD_LIBRARY_PATH:-}"' _ "$bundle")"
grep -qx "$bundle/bin/ucudnn-server" <<<"$out" || fail "env.sh does not put bin/ on the PATH: $out"
grep -qx 'LD=' <<<"$out" || fail "env.sh sets LD_LIBRARY_PATH: $out"
echo "ok: bin/env.sh sets PATH and no LD_LIBRARY_PATH"
echo "bundle test passed"
