"""An NCCL wheel small enough for one call to the offline GPU machine: its libnccl with only one GPU architecture's code.

    python -m qccl_bench.nccl_wheel nvidia_nccl_cu13-2.31.2-py3-none-manylinux_2_18_x86_64.whl --sm 90 -o .whl/

nvidia-nccl-cu12 / -cu13 wheels hold one large file, ``nvidia/nccl/lib/libnccl.so.2`` (about 300 MB), most of it the
device code of six architectures (sm_75 .. sm_120 and PTX for compute_120) in the library's fat binaries, and a fifth
of it DWARF debug information. A lent machine has one kind of GPU (an H200: sm_90) and no network, and one call
carries at most 64 MiB, so the 252 MB wheel had to travel in four parts, four calls of a 15-minute lease. This writes
the same wheel with every other architecture's payload zeroed, and the debug sections (never mapped, read only by
debuggers): the entries' headers stay where they are (the driver picks the entry for its GPU from them and
decompresses only that one), the file keeps its length and layout, and the zeros compress to almost nothing in the
wheel's zip (nvidia-nccl-cu13 2.31.2: 252.4 MB -> 37.3 MB, sm_90's 33.3 MB kept). RECORD gets the new file's hash,
the wheel's name stays pip's, and a ``PRUNED`` file beside the library names the original wheel and its sha256.

Fat-binary layout (as the CUDA toolkit writes it; read only, never executed here): a section (``.nv_fatbin``,
``__nv_relfatbin``) of fat binaries, each a 16-byte header (magic 0xBA55ED50, version, header size, payload size)
and entries, each a header (kind: 1 PTX, 2 ELF; header size; padded payload size; the SM version at byte 28) and its
payload. What is kept is counted and printed; a library whose sections do not parse so is refused, nothing written.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import struct
import sys
import zipfile
from collections import Counter
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
SECTIONS = (".nv_fatbin", "__nv_relfatbin")
LIBRARY = "nvidia/nccl/lib/libnccl.so.2"
ELF_ENTRY = 2


class LayoutError(ValueError):
    """The library is not laid out as this module reads fat binaries."""


def elf_sections(data: bytes) -> dict[str, tuple[int, int]]:
    """name -> (file offset, size) of a 64-bit little-endian ELF file's sections."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise LayoutError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(offset: int) -> str:
        end = data.index(b"\0", names_at + offset)
        return data[names_at + offset:end].decode()

    return {name(h[0]): (h[4], h[5]) for h in headers}


def entries(data: bytes, offset: int, size: int):
    """(entry offset, header size, padded payload size, kind, sm) of every entry of the fat binaries in a section.
    Fat binaries are 8-byte aligned; the gaps between them are zero padding."""
    p, end = offset, offset + size
    while p < end:
        magic, = struct.unpack_from("<I", data, p)
        if magic != FATBIN_MAGIC:
            if data[p:p + 8].strip(b"\0"):
                raise LayoutError(f"bytes at {p:#x} are neither a fat binary nor padding")
            p += 8
            continue
        _, _, header, body = struct.unpack_from("<IHHQ", data, p)
        q, last = p + header, p + header + body
        if last > end:
            raise LayoutError(f"the fat binary at {p:#x} runs {last - end} bytes past its section")
        while q < last:
            kind, _, entry_header, padded = struct.unpack_from("<HHIQ", data, q)
            sm, = struct.unpack_from("<I", data, q + 28)
            if kind not in (1, 2) or entry_header < 32 or q + entry_header + padded > last:
                raise LayoutError(f"the entry at {q:#x} (kind {kind}, header {entry_header}) does not parse")
            yield q, entry_header, padded, kind, sm
            q += entry_header + padded
        p = last


def prune(data: bytes, sm: int) -> tuple[bytes, Counter, Counter]:
    """The library with every fat-binary payload but sm's ELF zeroed, and its debug sections; the bytes kept and
    zeroed per kind of entry."""
    out = bytearray(data)
    kept, zeroed = Counter(), Counter()
    sections = elf_sections(data)
    found = [name for name in SECTIONS if name in sections]
    if ".nv_fatbin" not in found:
        raise LayoutError("no .nv_fatbin section: not a CUDA library")
    for name in found:
        for q, header, padded, kind, entry_sm in entries(data, *sections[name]):
            label = f"{'ELF' if kind == ELF_ENTRY else 'PTX'} sm_{entry_sm}"
            if kind == ELF_ENTRY and entry_sm == sm:
                kept[label] += padded
            else:
                out[q + header:q + header + padded] = bytes(padded)
                zeroed[label] += padded
    if not kept:
        raise LayoutError(f"the library has no sm_{sm} code: {sorted(zeroed)}")
    for name, (offset, size) in sections.items():
        if name.startswith(".debug_"):          # DWARF for debuggers: never mapped, never read by the loader
            out[offset:offset + size] = bytes(size)
            zeroed["debug info"] += size
    return bytes(out), kept, zeroed


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def prune_wheel(wheel: Path, sm: int, out_dir: Path) -> Path:
    """Write the pruned wheel into out_dir (same file name); return its path."""
    source_sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as zin:
        names = zin.namelist()
        if LIBRARY not in names:
            raise LayoutError(f"{wheel.name} holds no {LIBRARY}: not an nvidia-nccl wheel")
        library, kept, zeroed = prune(zin.read(LIBRARY), sm)
        note = (f"libnccl.so.2 of {wheel.name} (sha256 {source_sha}) with only sm_{sm}'s ELF code: every other "
                f"fat-binary payload and the debug sections zeroed by qccl_bench.nccl_wheel\n").encode()
        note_name = str(Path(LIBRARY).parent / "PRUNED")
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / wheel.name
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for info in zin.infolist():
                if info.filename == record_name:
                    continue
                body = library if info.filename == LIBRARY else zin.read(info)
                zout.writestr(info, body, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
            zout.writestr(note_name, note)
            rows = []
            for line in zin.read(record_name).decode().splitlines():
                path = line.split(",")[0]
                if path == LIBRARY:
                    line = f"{path},{_record_hash(library)},{len(library)}"
                rows.append(line)
            rows.insert(-1 if rows and rows[-1].startswith(record_name) else len(rows),
                        f"{note_name},{_record_hash(note)},{len(note)}")
            zout.writestr(record_name, "\n".join(rows) + "\n")
    mb = 1e6
    print(f"{wheel.name}: {wheel.stat().st_size / mb:.1f} MB -> {target.stat().st_size / mb:.1f} MB")
    print("  kept:   " + ", ".join(f"{k} {v / mb:.1f} MB" for k, v in sorted(kept.items())))
    print("  zeroed: " + ", ".join(f"{k} {v / mb:.1f} MB" for k, v in sorted(zeroed.items())))
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path, help="an nvidia-nccl-cu12 / -cu13 wheel")
    parser.add_argument("--sm", type=int, default=90, help="the architecture to keep, e.g. 90 for an H100 / H200")
    parser.add_argument("-o", "--out", type=Path, default=Path(".whl"), help="where the pruned wheel goes (.whl)")
    args = parser.parse_args(argv)
    if args.out.resolve() == args.wheel.resolve().parent:
        parser.error(f"--out {args.out} holds the wheel itself: the pruned one would overwrite it")
    try:
        prune_wheel(args.wheel, args.sm, args.out)
    except (LayoutError, zipfile.BadZipFile, OSError) as error:
        print(f"nccl_wheel: {args.wheel}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
