"""CUDA -> PTX: NVRTC in-process, the checked-in PTX it must reproduce, and nvcc as a cross-check."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
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


# The C library's constants a kernel file uses, as the host's headers define them (gcc's <limits.h>, <float.h>,
# <stdint.h>, <math.h>): what the machine writes through qwengpu/include's stand-ins must be the same words.
INTS = ["INT_MAX", "INT_MIN", "UINT_MAX", "SHRT_MIN", "USHRT_MAX", "SCHAR_MIN", "UCHAR_MAX", "CHAR_BIT", "INT8_MIN",
        "UINT16_MAX", "INT32_MIN", "UINT32_MAX", "(int)sizeof(int64_t)", "(int)sizeof(uintptr_t)", "(int)sizeof(long)",
        "FLT_MANT_DIG", "(int)(LLONG_MAX >> 40)", "(int)(UINT64_MAX >> 33)"]
FLOATS = ["FLT_MAX", "FLT_MIN", "FLT_EPSILON", "FLT_TRUE_MIN", "INFINITY", "-INFINITY", "(float)M_PI",
          "(float)M_SQRT2", "(float)M_E"]
CONSTANTS = [("int", c) for c in INTS] + [("float", c) for c in FLOATS]


# nvcc includes <cuda_runtime.h> before every .cu file, and through it the host's <math.h> and <limits.h>: these
# compile there without an #include (FLT_MAX and the <stdint.h> types do not).
IMPLICIT = [("int", c) for c in ("INT_MAX", "INT_MIN", "UINT_MAX", "SHRT_MIN", "UCHAR_MAX", "CHAR_BIT",
                                 "(int)(LLONG_MAX >> 40)", "(int)(ULLONG_MAX >> 33)")] + \
    [("float", c) for c in ("INFINITY", "-INFINITY", "HUGE_VALF", "(float)M_PI", "(float)M_SQRT2", "(float)M_E")]
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None,
                               reason="gcc (the reference for the C library's constants) is absent")


def _constants_on_the_machine_and_gcc(tmp_path, includes: str, constants) -> tuple[dict, dict]:
    """Each constant's word as the machine stores it (the kernel compiled after ``includes``) and as gcc's headers
    make it."""
    import subprocess

    import numpy as np

    from qwengpu.device import Device
    stores = "\n".join(f"    {{ {kind} v = {c}; memcpy(&y[{i}], &v, 4); }}" for i, (kind, c) in enumerate(constants))
    body = f"void constants(unsigned *y) {{\n{stores}\n}}\n"
    kernel = includes + 'extern "C" __global__ ' + body
    dev = Device()
    y = dev.alloc(len(constants))
    dev.launch(dev.load_kernel(kernel, "constants"), threads=1, args=[y])
    c_source = tmp_path / "constants.c"
    c_source.write_text("#define _GNU_SOURCE\n#include <stdio.h>\n#include <string.h>\n#include <stdint.h>\n"
                        "#include <limits.h>\n#include <float.h>\n#include <math.h>\n" + body +
                        f"int main(void) {{ unsigned y[{len(constants)}]; constants(y);\n"
                        f"  for (int i = 0; i < {len(constants)}; i++) printf(\"%u\\n\", y[i]); return 0; }}\n")
    subprocess.run(["gcc", "-o", str(tmp_path / "constants"), str(c_source), "-lm"], check=True, timeout=120)
    host = subprocess.run([str(tmp_path / "constants")], check=True, capture_output=True, text=True).stdout.split()
    machine = dev.read(y, len(constants)).view(np.uint32)
    assert len(host) == len(constants)
    return ({c: int(w) for (_, c), w in zip(constants, machine)}, {c: int(w) for (_, c), w in zip(constants, host)})


@needs_nvrtc
@needs_gcc
def test_standard_headers_a_kernel_includes_give_the_host_s_values(tmp_path):
    """#include <cstdio>, <cstdint>, <climits>, <cfloat>, <cmath>, <cassert>, <cuda_runtime.h> compile (NVRTC ships
    no headers: qwengpu/include stands in), and each constant's word equals what gcc's headers make of it."""
    includes = "".join(f"#include <{h}>\n" for h in ("cstdio", "cstdint", "climits", "cfloat", "cmath", "cassert",
                                                     "cuda_runtime.h", "stdint.h", "limits.h", "float.h", "math.h"))
    machine, host = _constants_on_the_machine_and_gcc(tmp_path, includes, CONSTANTS)
    assert machine == host


@needs_nvrtc
@needs_gcc
def test_a_file_without_includes_has_what_nvcc_s_implicit_cuda_runtime_gives(tmp_path):
    """A kernel file nvcc compiles with no #include (INFINITY, M_PI, INT_MAX: nvcc's <cuda_runtime.h> before it)
    compiles here too, with gcc's values; with nvcc on PATH, to the same PTX."""
    machine, host = _constants_on_the_machine_and_gcc(tmp_path, "", IMPLICIT)
    assert machine == host
    source = 'extern "C" __global__ void k(float *y, int *n) { y[0] = -INFINITY; y[1] = M_PI; n[0] = INT_MIN; ' \
             'if (n[1] > UCHAR_MAX) printf("%d\\n", n[1]); }\n'
    ptx = compile_cuda(source, "implicit.cu")
    assert "__assertfail" in compile_cuda(source.replace("}\n", "assert(n[2] != 0); }\n"), "implicit.cu")
    if shutil.which("nvcc") is not None:
        cu = tmp_path / "implicit.cu"
        cu.write_text(source)
        assert ptx == compile_with_nvcc(cu)


@needs_nvrtc
def test_a_header_that_is_not_here_is_named_with_those_that_are():
    """NVRTC ships no headers: a library the machine does not have (cuRAND, CUB) fails naming it and the stand-ins
    qwengpu/include has."""
    for header in ("curand_kernel.h", "cub/cub.cuh"):
        with pytest.raises(CompileError, match=rf"(?s)cannot open source file \"{header}\".*\n{header} is not among "
                                               r"the headers .*cooperative_groups/reduce\.h.*cuda_fp16\.h"):
            compile_cuda(f"#include <{header}>\n" + VADD)


@needs_nvrtc
def test_host_code_in_a_kernel_file_is_refused_with_what_to_do_instead():
    """NVRTC compiles kernels, not a host program: the error keeps NVRTC's log and says what replaces main's part."""
    with pytest.raises(CompileError, match=r"(?s)cudaMalloc\" is undefined.*looks like host code.*Device: alloc"):
        compile_cuda("#include <cuda_runtime.h>\n" + VADD +
                     "\nint main() { int *d; cudaMalloc(&d, 16); vadd<<<1, 4>>>(d, d, d, 4); return 0; }\n")


@needs_nvrtc
def test_a_cxx_kernel_loads_by_its_source_name():
    """A __global__ function without extern "C" is the entry of its mangled name; load_kernel takes the source name
    (and the mangled one); an overloaded or template name is refused naming the candidates."""
    import numpy as np

    from qwengpu.device import Device
    src = ("__global__ void k(int *y) { y[threadIdx.x] = 1; }\n"
           "__global__ void kk(int *y, int v) { y[threadIdx.x] = v; }\n"
           "template <typename T> __global__ void fill(T *y, T v) { y[threadIdx.x] = v; }\n"
           "template __global__ void fill<int>(int *, int);\n"
           "template __global__ void fill<unsigned>(unsigned *, unsigned);\n")
    dev = Device()
    y = dev.alloc(4)
    dev.launch(dev.load_kernel(src, "kk"), threads=4, args=[y, 7])
    np.testing.assert_array_equal(dev.read(y, 4), [7] * 4)
    dev.launch(dev.load_kernel(src, "k"), threads=4, args=[y])
    np.testing.assert_array_equal(dev.read(y, 4), [1] * 4)
    dev.launch(dev.load_kernel(src, "_Z4fillIiEvPT_S0_"), threads=4, args=[y, -2])
    np.testing.assert_array_equal(dev.read(y, 4), [-2] * 4)
    with pytest.raises(Exception, match=r"'fill' is overloaded or a template .*_Z4fillIiEvPT_S0_, _Z4fillIjEvPT_S0_"):
        dev.load_kernel(src, "fill")


@needs_nvrtc
def test_name_expressions_instantiate_templates_and_name_namespaced_kernels():
    """load_kernel takes a C++ name expression for CUDA source, as CuPy's name_expressions: a template that is
    never instantiated in the source is instantiated for it; a kernel in a namespace; an overload by its type."""
    import numpy as np

    from qwengpu.device import Device
    src = ("template <typename T> __global__ void fill(T *y, T v) { y[threadIdx.x] = v + (T)threadIdx.x; }\n"
           "namespace ops { __global__ void scale(int *y, int k) { y[threadIdx.x] *= k; } }\n"
           "__global__ void over(int *y) { y[0] = 1; }\n"
           "__global__ void over(int *y, int v) { y[threadIdx.x] = v; }\n")
    ptx, entries = toolchain.compile_with_names(src, ("fill<float>", "ops::scale"))
    assert entries == {"fill<float>": "_Z4fillIfEvPT_S0_", "ops::scale": "_ZN3ops5scaleEPii"}
    assert ".entry _Z4fillIfEvPT_S0_(" in ptx and "_Z4fill" not in compile_cuda(src)     # instantiated for it
    dev = Device()
    y = dev.alloc(4)
    dev.launch(dev.load_kernel(src, "fill<int>"), threads=4, args=[y, 10])
    dev.launch(dev.load_kernel(src, "ops::scale"), threads=4, args=[y, 3])
    np.testing.assert_array_equal(dev.read(y, 4), [30, 33, 36, 39])
    dev.launch(dev.load_kernel(src, "fill<float>"), threads=4, args=[y, 0.5])
    np.testing.assert_array_equal(dev.read(y, 4).view(np.float32), [0.5, 1.5, 2.5, 3.5])
    dev.launch(dev.load_kernel(src, "(void (*)(int *, int))over"), threads=4, args=[y, 6])
    np.testing.assert_array_equal(dev.read(y, 4), [6] * 4)
    with pytest.raises(CompileError, match='identifier "nope" is undefined'):
        dev.load_kernel(src, "fill<nope>")


# A refusal names the CUDA line the refused PTX instruction came from (NVRTC's line information, asked for then).
LOCATED = """extern "C" __global__ void scale(float *y, const float *x, int n)
{
    int i = threadIdx.x;
    if (i < n)
        y[i] = log((double)x[i]);
}

extern "C" __global__ void total(unsigned long long *sum, int *x)
{
    int i = threadIdx.x;
    int v = x[i] * 3;
    x[i] = (int)rsqrtf((float)atomicAdd(sum, (unsigned long long)v));
}
"""


@needs_nvrtc
def test_a_refusal_names_the_cuda_line_it_comes_from(tmp_path):
    """The double under ``if (i < n)`` (refused where a thread takes its path: qwengpu.lowering.paths) and the
    approximate reciprocal square root (refused by the lowering, at launch) each name their own source line and its text;
    the PTX line stays the error's ``line``. The PTX users compile carries no line information."""
    from qwengpu import Device, MachineError
    dev = Device()
    sum_, x = dev.alloc(2), dev.alloc(4)
    dev.write(x, np.array([2.5, 0.5, 3.0, 7.0], np.float32))        # log's path for positive numbers
    tokens = len(dev.tokens)
    with pytest.raises(MachineError, match=r"thread \[0,0,0\] took a path to PTX line \d+ \(rcp\.approx\.ftz\.f64 "
                                           r".*write float, and 2\.0f.*\n  from kernel\.cu line 5: y\[i\] = "
                                           r"log\(\(double\)x\[i\]\);$"
                       ) as refused:
        dev.launch(dev.load_kernel(LOCATED, "scale"), threads=4, args=[sum_, x, 4])
    assert "f64" in compile_cuda(LOCATED).splitlines()[refused.value.line - 1] and len(dev.tokens) == tokens
    kernel = dev.load_kernel(LOCATED, "total")
    with pytest.raises(MachineError, match=r"rsqrt\.approx is the GPU's own .*\n  from kernel\.cu line 12: x\[i\] = "
                                           r"\(int\)rsqrtf\(\(float\)atomicAdd\(sum, \(unsigned long long\)v\)\);$"
                       ) as refused:
        dev.launch(kernel, threads=4, args=[sum_, x])
    assert "rsqrt" in compile_cuda(LOCATED).splitlines()[refused.value.line - 1] and len(dev.tokens) == tokens
    path = tmp_path / "reduce.cu"
    path.write_text(LOCATED)
    with pytest.raises(MachineError, match=r"\n  from reduce\.cu line 5: "):
        dev.launch(dev.load_kernel(path, "scale"), threads=4, args=[sum_, x, 4])
    assert ".loc" not in compile_cuda(LOCATED) and ".file" not in compile_cuda(LOCATED)


@needs_nvrtc
def test_source_lines_map_each_statement_and_only_the_ptx_compiled_from_the_source():
    """Every line the map gives lies in the kernel it belongs to, and each store lands on the line that writes
    it; another PTX text (a checked-in file edited by hand) gets no map rather than a wrong one."""
    source = ('extern "C" __global__ void k(int *y, const int *x)\n'
              '{\n'
              '    int i = threadIdx.x;\n'
              '    y[i] = x[i] + 1;\n'
              '    y[i + 4] = x[i] * 5;\n'
              '}\n')
    ptx = compile_cuda(source)
    lines = toolchain.source_lines(source, ptx)
    text = ptx.splitlines()
    stores = [(number, lines.get(number)) for number, line in enumerate(text, 1) if "st.global" in line]
    assert [line for _, line in stores] == [4, 5]
    assert set(lines.values()) <= set(range(1, 7))
    edited = ptx.replace("st.global.u32", "st.global.b32", 1)
    assert toolchain.source_lines(source, edited) == {}
