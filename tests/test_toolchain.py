"""CUDA -> PTX: NVRTC in-process, the checked-in PTX it must reproduce, and nvcc as a cross-check."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qwengpu import toolchain
from qwengpu.toolchain import CompileError, NVRTCUnavailable, compile_cuda, compile_with_nvcc, ptx_for, regenerate

ROOT = Path(__file__).resolve().parent.parent
VADD = ('extern "C" __global__ void vadd(const int*a,const int*b,int*c,int n)'
        '{int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) c[i]=a[i]+b[i];}')

# Every kernel with checked-in PTX, found by glob so kernels added later are covered too.
KERNELS = sorted(cu for d in ("qwengpu/kernels", "qccl/kernels") for cu in (ROOT / d).rglob("*.cu")
                 if cu.with_suffix(".ptx").exists())

needs_nvrtc = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                 reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


def test_kernels_are_found():
    assert any(p.name == "prim.cu" for p in KERNELS), "qccl/kernels/prim.cu has no prim.ptx beside it"


@needs_nvrtc
def test_nvrtc_compiles_vadd():
    ptx = compile_cuda(VADD, "vadd.cu")
    assert ".entry vadd(" in ptx
    assert ".target sm_90" in ptx and ".address_size 64" in ptx


@needs_nvrtc
def test_compile_is_cached():
    assert compile_cuda(VADD, "vadd.cu") is compile_cuda(VADD, "vadd.cu")


@needs_nvrtc
def test_syntax_error_raises_with_log():
    with pytest.raises(CompileError) as e:
        compile_cuda('extern "C" __global__ void broken(int *p) { p[0] = ; }', "broken.cu")
    msg = str(e.value)
    assert "broken.cu" in msg and "error" in msg and "expected an expression" in msg


@needs_nvrtc
@pytest.mark.parametrize("cu", KERNELS, ids=_ids(KERNELS))
def test_nvrtc_reproduces_checked_in_ptx(cu):
    # A mismatch means the .cu changed without `python -m qwengpu.toolchain regen`, or a different NVRTC is installed.
    assert compile_cuda(cu.read_text(), name=cu.name) == cu.with_suffix(".ptx").read_text(), \
        f"{cu.relative_to(ROOT)}: checked-in PTX is stale; run python -m qwengpu.toolchain regen {cu.relative_to(ROOT)}"


# CUDA 13.0's NVRTC and nvcc emit byte-identical PTX, header comments included, except for __shared__ arrays: nvcc
# addresses them with 32-bit registers (mov.u32 %r, s), NVRTC with 64-bit ones, so those kernels are not compared
# byte for byte here; tests/test_shared_memory.py runs both compilers' forms against numpy.
UNSHARED = [cu for cu in KERNELS if "__shared__" not in cu.read_text()]


@needs_nvrtc
@needs_nvcc
@pytest.mark.parametrize("cu", UNSHARED, ids=_ids(UNSHARED))
def test_nvrtc_equals_nvcc(cu):
    assert compile_cuda(cu.read_text(), name=cu.name) == compile_with_nvcc(cu)


@needs_nvrtc
@needs_nvcc
def test_nvrtc_equals_nvcc_vadd(tmp_path):
    cu = tmp_path / "vadd.cu"
    cu.write_text(VADD)
    assert compile_cuda(VADD, "vadd.cu") == compile_with_nvcc(cu)


@needs_nvrtc
def test_ptx_for_source_and_path(tmp_path):
    assert ptx_for(VADD) == compile_cuda(VADD)
    cu = tmp_path / "vadd.cu"
    cu.write_text(VADD)
    assert ptx_for(cu) == compile_cuda(VADD, "vadd.cu")
    assert ptx_for(str(cu)) == compile_cuda(VADD, "vadd.cu")


@needs_nvrtc
def test_regenerate_writes_ptx_beside(tmp_path):
    cu = tmp_path / "vadd.cu"
    cu.write_text(VADD)
    out = regenerate(cu)
    assert out == tmp_path / "vadd.ptx" and out.read_text() == compile_cuda(VADD, "vadd.cu")


def test_ptx_for_falls_back_to_checked_in_ptx(monkeypatch, tmp_path):
    def unavailable():
        raise NVRTCUnavailable("simulated: no NVRTC")
    monkeypatch.setattr(toolchain, "_load", unavailable)
    monkeypatch.setattr(toolchain, "_cache", {})
    prim = ROOT / "qccl/kernels/prim.cu"
    assert ptx_for(prim) == prim.with_suffix(".ptx").read_text()
    lone = tmp_path / "lone.cu"
    lone.write_text(VADD)
    with pytest.raises(CompileError, match="no checked-in lone.ptx"):
        ptx_for(lone)


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 is not on PATH")
def test_clang_compiles_prim():
    ptx = toolchain.compile_with_clang(ROOT / "qccl/kernels/prim.cu")
    assert ".entry prim(" in ptx
