#!/usr/bin/env python3
"""Cuts an ELF file's RUNPATH (or RPATH) to its first entry, in place: the ':' after KEEP
becomes the string's end. Used by scripts/bundle.sh instead of patchelf for objects that already
have a RUNPATH: patchelf 0.14 (Debian 12) overwrites the old string with 'X's, and the linker may
have tail-merged dynamic symbol names into it ("read" at the end of ".../openblas-pthread"),
which then become "XXXX" (seen: "undefined symbol: XXXX, version GLIBC_2.2.5"). Writing one NUL
at the ':' leaves every suffix of the old string intact.

  truncate_runpath.py FILE KEEP    exit 0: done or nothing to do (RUNPATH is KEEP already)
                                   exit 1: no RUNPATH, or it does not start with KEEP + ':'
"""
import struct
import sys

DT_NULL, DT_RPATH, DT_RUNPATH = 0, 15, 29
SHT_DYNAMIC = 6


def fail(message):
    print(f"truncate_runpath.py: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 3:
        fail("usage: truncate_runpath.py FILE KEEP")
    path, keep = sys.argv[1], sys.argv[2].encode()
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            fail(f"{path}: not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        found = []
        for i in range(shnum):
            base = shoff + i * shentsize
            sh_type, = struct.unpack_from("<I", data, base + 4)
            if sh_type != SHT_DYNAMIC:
                continue
            offset, size = struct.unpack_from("<QQ", data, base + 0x18)
            link, = struct.unpack_from("<I", data, base + 0x28)
            strtab, = struct.unpack_from("<Q", data, shoff + link * shentsize + 0x18)
            for entry in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", data, entry)
                if tag == DT_NULL:
                    break
                if tag in (DT_RPATH, DT_RUNPATH):
                    found.append(strtab + value)
        if not found:
            fail(f"{path}: no RUNPATH or RPATH")
        for start in found:
            end = data.index(b"\0", start)
            current = bytes(data[start:end])
            if current == keep:
                continue
            if not current.startswith(keep + b":"):
                fail(f"{path}: RUNPATH {current.decode(errors='replace')!r} does not start with "
                     f"{keep.decode()!r}")
            f.seek(start + len(keep))
            f.write(b"\0")


if __name__ == "__main__":
    main()
