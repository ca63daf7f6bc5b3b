"""CUDA C -> PTX, without a GPU or a driver.

The main path is NVRTC, called in-process through ctypes on the libnvrtc.so.13 that the ``nvidia-cuda-nvrtc==13.0.88``
wheel ships (no driver, no gcc needed; 20-50 ms per kernel). Its PTX is byte-identical to
``nvcc -ptx -arch=sm_90 -O3 -fmad=false`` of CUDA 13.0, so checked-in .ptx files next to each .cu can be reproduced
exactly and serve as the fallback where the wheel is missing. nvcc and clang-19 are optional cross-checks.

Every compiler is told not to contract ``a * b + c`` into a fused multiply-add (``--fmad=false``,
``-ffp-contract=off``): a kernel's ``a * b + c`` then rounds each add and multiply, as a numpy float32 replay does,
and costs the machine (qwengpu.lowering.floats) less than a fused one; ``fmaf`` written out still runs.

Command line: ``python -m qwengpu.toolchain regen FILE.cu ...`` rewrites the .ptx beside each file.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .isa import MachineError

ARCH = "compute_90"
# Stand-ins for the C library and CUDA runtime headers a kernel file includes (<cstdio>, <stdint.h>, <climits>,
# <cuda_runtime.h>, ...): NVRTC ships none, and its built-ins already declare the device side (printf, math
# functions, threadIdx); these add the types and macros, halves (<cuda_fp16.h>) and cooperative groups.
INCLUDE = Path(__file__).parent / "include"


class CompileError(MachineError):
    """CUDA source failed to compile; the message carries the compiler's log."""


class NVRTCUnavailable(RuntimeError):
    """libnvrtc.so.13 (from the nvidia-cuda-nvrtc wheel) could not be found or loaded."""


_lib = None                 # the loaded libnvrtc, once
_lib_error: str | None = None
_cache: dict[tuple, tuple[str, dict[str, str]]] = {}     # (source, name, arch, name expressions) -> PTX, entries


def _nvrtc_dirs() -> list[Path]:
    """Folders that may hold libnvrtc.so.13: every entry of the ``nvidia`` namespace package's path."""
    try:
        import nvidia  # namespace package from the nvidia-cuda-nvrtc wheel
    except ImportError:
        return []
    return [Path(p) / "cu13" / "lib" for p in getattr(nvidia, "__path__", [])]


def _load():
    global _lib, _lib_error
    if _lib is not None:
        return _lib
    if _lib_error is not None:
        raise NVRTCUnavailable(_lib_error)
    for d in _nvrtc_dirs():
        lib_path = d / "libnvrtc.so.13"
        if not lib_path.exists():
            continue
        try:
            # The builtins library must be loaded globally first: libnvrtc dlopens it by soname and otherwise fails
            # with NVRTC_ERROR_BUILTIN_OPERATION_FAILURE at compile time.
            builtins = d / "libnvrtc-builtins.so.13.0"
            if builtins.exists():
                ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(str(lib_path))
        except OSError as e:
            _lib_error = f"cannot load {lib_path}: {e}"
            raise NVRTCUnavailable(_lib_error) from e
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        _lib = lib
        return lib
    _lib_error = "libnvrtc.so.13 not found: install nvidia-cuda-nvrtc==13.0.88"
    raise NVRTCUnavailable(_lib_error)


def _host_code_hint(source: str) -> str:
    """What to do when the failure is host code in the file (NVRTC, like CuPy's RawKernel, compiles kernels)."""
    if "<<<" not in source and not any(f in source for f in ("cudaMalloc", "cudaMemcpy", "int main(")):
        return ""
    return ("\nThis looks like host code (main, cudaMalloc / cudaMemcpy, a <<<...>>> launch): qwengpu compiles the "
            "kernels of a file, not a host program. Keep the __global__ functions and the __device__ functions they "
            "call, and do the host's part with qwengpu.Device: alloc / write for cudaMalloc / cudaMemcpy, "
            "launch(kernel, threads=, blocks=, args=) for <<<blocks, threads>>>, read to copy back.")


def _header_hint(log: str) -> str:
    """What to do when a header the file includes is not there: NVRTC ships none, qwengpu/include has stand-ins
    for the C library's, the CUDA runtime's and cooperative groups'; the rest (curand_kernel.h, cub) are libraries
    the machine does not have."""
    missing = re.findall(r'cannot open source file "([^"]+)"', log)
    if not missing:
        return ""
    have = ", ".join(sorted(str(p.relative_to(INCLUDE)) for p in INCLUDE.rglob("*") if p.is_file()))
    return (f"\n{', '.join(missing)} is not among the headers a kernel file can include here: NVRTC ships none, and "
            f"qwengpu/include has stand-ins for these ({have}). Write what the kernel needs from it in the file "
            "(a random number: a hash of the thread's index, as curand_init's seed would take)")


def nvrtc_available() -> bool:
    """True when NVRTC can be loaded in this process."""
    try:
        _load()
        return True
    except NVRTCUnavailable:
        return False


def _check(lib, rc: int, what: str) -> None:
    if rc != 0:
        raise CompileError(f"{what} failed: {lib.nvrtcGetErrorString(rc).decode()}")


def compile_cuda(source: str, name: str = "kernel.cu", arch: str = ARCH) -> str:
    """Compile CUDA C++ ``source`` to PTX text with NVRTC (optimised, as nvcc -O3).

    Raises CompileError with NVRTC's log on a compile error, NVRTCUnavailable when the library is missing.
    Results are cached in memory by (source, name, arch).
    """
    return _compile(source, name, arch, ())[0]


def compile_with_names(source: str, expressions: tuple[str, ...], name: str = "kernel.cu",
                       arch: str = ARCH) -> tuple[str, dict[str, str]]:
    """``compile_cuda`` with C++ name expressions (NVRTC's nvrtcAddNameExpression, CuPy's ``name_expressions``):
    the PTX, with each template the expressions name instantiated, and each expression's entry (its mangled
    name)::

        ptx, entries = compile_with_names(src, ("fill<float>", "ops::scale"))
        entries["fill<float>"]          # '_Z4fillIfEvPT_S0_'
    """
    return _compile(source, name, arch, tuple(expressions))


def source_lines(source: str, ptx: str, name: str = "kernel.cu", expressions: tuple[str, ...] = (),
                 arch: str = ARCH) -> dict[int, int]:
    """The line of ``source`` each line of ``ptx`` (what ``compile_cuda`` / ``compile_with_names`` made of it) was
    compiled from: NVRTC compiles it again with ``--generate-line-info``, whose ``.loc`` directives mark the
    source line of the instructions after them; the rest of that PTX is the same text. Only lines of ``source``
    itself (not of the headers it includes) are given; {} where the texts differ (a checked-in .ptx). A refusal is
    where it is asked for, so the PTX users compile stays free of line information (and of this machine's path)::

        lines = source_lines(src, compile_cuda(src))
        lines[error.line]       # the CUDA line of the PTX instruction a MachineError names
    """
    annotated, _ = _compile(source, name, arch, tuple(expressions), line_info=True)
    files: dict[str, str] = {}
    for match in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', annotated, re.M):
        files[match.group(1)] = match.group(2)
    own = {number for number, path in files.items() if Path(path).name == Path(name).name}
    plain = [line.rstrip() for line in ptx.splitlines()]
    lines: dict[int, int] = {}
    at = None
    kept = []
    for text in annotated.splitlines():
        loc = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)", text)
        if loc:
            at = int(loc.group(2)) if loc.group(1) in own and int(loc.group(2)) > 0 else None
            continue
        if re.match(r"\s*\.file\s", text):
            continue
        if at is not None:
            lines[len(kept) + 1] = at
        kept.append(text.rstrip())
    while kept and not kept[-1]:
        kept.pop()
    while plain and not plain[-1]:
        plain.pop()
    return lines if kept == plain else {}


def _compile(source: str, name: str, arch: str, expressions: tuple[str, ...],
             line_info: bool = False) -> tuple[str, dict[str, str]]:
    key = (source, name, arch, expressions, line_info)
    if key in _cache:
        return _cache[key]
    lib = _load()
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        for expression in expressions:
            _check(lib, lib.nvrtcAddNameExpression(prog, expression.encode()), f"name expression {expression!r}")
        # nvcc includes <cuda_runtime.h> (and through it math.h, limits.h, stdio.h) before every .cu file: its
        # stand-in is pre-included, so a file nvcc compiles using INFINITY or INT_MAX without an #include compiles.
        opts = [f"--gpu-architecture={arch}".encode(), b"-default-device", b"--fmad=false",
                f"--include-path={INCLUDE}".encode(), b"--pre-include=cuda_runtime.h"] + (
                    [b"--generate-line-info"] if line_info else [])
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        if rc != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            text = log.value.decode(errors="replace")
            raise CompileError(f"NVRTC failed to compile {name} ({lib.nvrtcGetErrorString(rc).decode()}):\n"
                               f"{text}{_header_hint(text)}{_host_code_hint(source)}")
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        entries = {}
        for expression in expressions:
            lowered = ctypes.c_char_p()
            _check(lib, lib.nvrtcGetLoweredName(prog, expression.encode(), ctypes.byref(lowered)),
                   f"the entry of {expression!r}")
            entries[expression] = lowered.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    _cache[key] = buf.value.decode(), entries
    return _cache[key]


def compile_with_nvcc(path) -> str | None:
    """PTX from ``nvcc -ptx -arch=sm_90 -O3 -fmad=false`` for the .cu at ``path``; None when nvcc is not on PATH."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.ptx"
        r = subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-O3", "-fmad=false", str(path), "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"nvcc failed on {path}:\n{r.stderr}")
        return out.read_text()


# clang compiles CUDA without the CUDA headers (-nocudainc), so the few builtins our kernels use are defined here.
# __syncthreads needs nothing: clang knows it as a builtin.
_CLANG_HEADER = r"""
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
struct __qg_uint3 { unsigned x, y, z; };
// Macros rather than clang's property structs: y/z reads are readnone intrinsics, dropped at -O3 when unused.
#define threadIdx (__qg_uint3{(unsigned)__nvvm_read_ptx_sreg_tid_x(), (unsigned)__nvvm_read_ptx_sreg_tid_y(), (unsigned)__nvvm_read_ptx_sreg_tid_z()})
#define blockDim (__qg_uint3{(unsigned)__nvvm_read_ptx_sreg_ntid_x(), (unsigned)__nvvm_read_ptx_sreg_ntid_y(), (unsigned)__nvvm_read_ptx_sreg_ntid_z()})
#define blockIdx (__qg_uint3{(unsigned)__nvvm_read_ptx_sreg_ctaid_x(), (unsigned)__nvvm_read_ptx_sreg_ctaid_y(), (unsigned)__nvvm_read_ptx_sreg_ctaid_z()})
#define gridDim (__qg_uint3{(unsigned)__nvvm_read_ptx_sreg_nctaid_x(), (unsigned)__nvvm_read_ptx_sreg_nctaid_y(), (unsigned)__nvvm_read_ptx_sreg_nctaid_z()})
static __device__ inline void __threadfence_system() { __nvvm_membar_sys(); }
static __device__ inline int max(int a, int b) { return a > b ? a : b; }
static __device__ inline int min(int a, int b) { return a < b ? a : b; }
static __device__ inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static __device__ inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static __device__ inline int atomicAdd(int *p, int v) { return __nvvm_atom_add_gen_i(p, v); }
static __device__ inline unsigned atomicAdd(unsigned *p, unsigned v) {
    return (unsigned)__nvvm_atom_add_gen_i((int *)p, (int)v); }
"""


def compile_with_clang(path) -> str | None:
    """PTX from clang-19 (CUDA device-only, no CUDA install) for the .cu at ``path``; None when clang-19 is absent."""
    clang = shutil.which("clang-19")
    if clang is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        hdr = Path(tmp) / "qg_cuda.h"
        hdr.write_text(_CLANG_HEADER)  # __syncthreads is a clang builtin already
        out = Path(tmp) / "out.ptx"
        r = subprocess.run([clang, "-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib",
                            "--cuda-path=/nonexistent", "--cuda-gpu-arch=sm_90", "-S", "-O3", "-ffp-contract=off",
                            "-include", str(hdr), str(path), "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"clang-19 failed on {path}:\n{r.stderr}")
        return out.read_text()


def ptx_for(path_or_source) -> str:
    """PTX for a .cu path or for CUDA source text (text containing ``__global__``).

    For a path, NVRTC compiles the file when it can be loaded; otherwise the checked-in .ptx beside it is returned
    (CompileError when there is neither).
    """
    if isinstance(path_or_source, str) and "__global__" in path_or_source:
        return compile_cuda(path_or_source)
    path = Path(path_or_source)
    src = path.read_text()
    try:
        return compile_cuda(src, name=path.name)
    except NVRTCUnavailable as e:
        ptx = path.with_suffix(".ptx")
        if ptx.exists():
            return ptx.read_text()
        raise CompileError(f"{e}, and no checked-in {ptx.name} beside {path}") from e


def regenerate(path) -> Path:
    """Compile the .cu at ``path`` with NVRTC and write the .ptx beside it; returns the .ptx path."""
    path = Path(path)
    out = path.with_suffix(".ptx")
    out.write_text(compile_cuda(path.read_text(), name=path.name))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] != "regen":
        print("usage: python -m qwengpu.toolchain regen FILE.cu ...", file=sys.stderr)
        return 2
    for f in argv[1:]:
        print(os.fspath(regenerate(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
