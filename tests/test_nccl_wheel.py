"""qccl_bench.nccl_wheel on a CUDA library nvcc builds here for two architectures (sm_80, sm_90 and PTX): what it keeps
is byte for byte the original, what it zeroes is exactly the other architectures' payloads and the debug sections,
and the pruned library still loads and runs its host code. The wheel it writes installs with pip."""
from __future__ import annotations

import ctypes
import hashlib
import base64
import shutil
import subprocess
import sys
import zipfile

import pytest

from qccl_bench import nccl_wheel

SOURCE = r"""
__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }
extern "C" int answer(void) { return 42; }
"""

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    work = tmp_path_factory.mktemp("fatlib")
    (work / "lib.cu").write_text(SOURCE)
    target = work / "libtwo.so"
    subprocess.run(["nvcc", "-shared", "-g", "-Xcompiler", "-fPIC", "-o", str(target), str(work / "lib.cu"),
                    "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
                    "-gencode", "arch=compute_90,code=compute_90"], check=True, capture_output=True)
    return target


def _payloads(data):
    sections = nccl_wheel.elf_sections(data)
    return [(q + header, padded, kind, sm)
            for name in nccl_wheel.SECTIONS if name in sections
            for q, header, padded, kind, sm in nccl_wheel.entries(data, *sections[name])]


def test_the_entries_are_the_architectures_nvcc_was_asked_for(library):
    found = {(kind, sm) for _, _, kind, sm in _payloads(library.read_bytes())}
    assert found == {(2, 80), (2, 90), (1, 90)}


def test_only_the_other_architectures_and_the_debug_sections_are_zeroed(library):
    data = library.read_bytes()
    pruned, kept, zeroed = nccl_wheel.prune(data, 90)
    assert len(pruned) == len(data)
    cleared = bytearray(len(data))                  # 1 where the original's bytes may be zeroed
    for start, size, kind, sm in _payloads(data):
        if (kind, sm) == (2, 90):
            assert pruned[start:start + size] == data[start:start + size]
        else:
            assert not pruned[start:start + size].strip(b"\0")
            cleared[start:start + size] = b"\1" * size
    debug = {n: s for n, s in nccl_wheel.elf_sections(data).items() if n.startswith(".debug_")}
    assert debug, "nvcc -g wrote no debug sections"
    for offset, size in debug.values():
        assert not pruned[offset:offset + size].strip(b"\0")
        cleared[offset:offset + size] = b"\1" * size
    assert all(p == d for p, d, c in zip(pruned, data, cleared) if not c)
    assert set(kept) == {"ELF sm_90"} and {"ELF sm_80", "PTX sm_90", "debug info"} <= set(zeroed)


def test_the_pruned_library_loads_and_runs_its_host_code(library, tmp_path):
    pruned, _, _ = nccl_wheel.prune(library.read_bytes(), 90)
    path = tmp_path / "libpruned.so"
    path.write_bytes(pruned)
    assert ctypes.CDLL(str(path)).answer() == 42


def test_a_library_without_the_architecture_is_refused(library):
    with pytest.raises(nccl_wheel.LayoutError, match="no sm_100 code.*ELF sm_80"):
        nccl_wheel.prune(library.read_bytes(), 100)
    with pytest.raises(nccl_wheel.LayoutError, match="not a 64-bit"):
        nccl_wheel.prune(b"#!/bin/sh\n" * 10, 90)


def test_the_pruned_wheel_records_its_library_and_installs_with_pip(library, tmp_path):
    wheel = tmp_path / "in" / "nvidia_nccl_cu13-9.9.9-py3-none-manylinux_2_18_x86_64.whl"
    wheel.parent.mkdir()
    info = "nvidia_nccl_cu13-9.9.9.dist-info"
    metadata = b"Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: 9.9.9\n"
    wheel_file = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-manylinux_2_18_x86_64\n"
    body = library.read_bytes()
    files = {nccl_wheel.LIBRARY: body, f"{info}/METADATA": metadata, f"{info}/WHEEL": wheel_file}
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", "".join(f"{n},{nccl_wheel._record_hash(d)},{len(d)}\n" for n, d in files.items())
                   + f"{info}/RECORD,,\n")
    out = nccl_wheel.prune_wheel(wheel, 90, tmp_path / "out")
    with zipfile.ZipFile(out) as z:
        library_bytes = z.read(nccl_wheel.LIBRARY)
        rows = {line.split(",")[0]: line.split(",")[1:] for line in z.read(f"{info}/RECORD").decode().splitlines()}
        assert set(z.namelist()) == set(files) | {f"{info}/RECORD", "nvidia/nccl/lib/PRUNED"}
    digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(library_bytes).digest()).rstrip(b"=").decode()
    assert rows[nccl_wheel.LIBRARY] == [digest, str(len(body))]
    assert library_bytes != body and len(library_bytes) == len(body)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    str(out)], check=True, capture_output=True)
    assert (site / nccl_wheel.LIBRARY).read_bytes() == library_bytes
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() in (site / "nvidia/nccl/lib/PRUNED").read_text()
