"""Paths the machine cannot run (a double instruction it does not build), refused where a thread takes one
(qwengpu.lowering.paths): a double the user wrote under a branch runs until a thread takes it, and the refusal names
the PTX and CUDA lines and puts back the launch; the doomed blocks are those from which no path ends without such a
double. sinf, whose rare path (|x| >= 105615) reduces in 64-bit integers and a double, runs for every argument,
against the correctly rounded sine and CUDA's documented 2 ulp."""
from __future__ import annotations

import numpy as np
import pytest

from float_runs import in_fours, ulps
from qwengpu import Device, MachineError, toolchain
from qwengpu.lowering import paths
from qwengpu.lowering.cfg import basic_blocks
from qwengpu.ptx import parse

needs_nvrtc = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                 reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

SINES = r"""
extern "C" __global__ void sines(float *y, const float *x)
{
    int i = threadIdx.x;
    y[i] = sinf(x[i]);
}

// a double the user wrote, on a path only some values take
extern "C" __global__ void tenth_of_big(float *y, const float *x, int n)
{
    int i = threadIdx.x;
    if (i < n) {
        if (x[i] > 100.0f)
            y[i] = log((double)x[i]);
        else
            y[i] = x[i] - 1.0f;
    }
}

#include <cstdio>
extern "C" __global__ void show(const float *x)
{
    if (threadIdx.x == 1)
        printf("x = %.3f\n", x[threadIdx.x]);       // printf's promotion to double is not a refusal
}
"""

LIMIT = 105615.0        # CUDA's sinf takes its double path from here (its PTX: setp.ltu.f32 ..., 0f47CE4780)


@pytest.fixture(scope="module")
def sines():
    """One device and its sinf kernel for the module: the program is lowered once (about 5 s on 2 cores)."""
    if not toolchain.nvrtc_available():
        pytest.skip("NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")
    dev = Device()
    return dev, dev.load_kernel(SINES, "sines"), dev.alloc(4), dev.alloc(4)


def machine_sines(sines, values: np.ndarray) -> np.ndarray:
    return in_fours(*sines, values)


def test_sinf_runs_within_cudas_two_ulps_on_its_float_path(sines):
    rng = np.random.default_rng(7)
    values = np.concatenate([[0.5, -1.25, 3.0, 100.0, 1e-30, 1e-45, np.pi, -np.pi / 2, 1e5, -LIMIT + 1],
                             rng.uniform(-10, 10, 10), rng.uniform(-LIMIT, LIMIT, 4)]).astype(np.float32)
    got = machine_sines(sines, values)
    want = np.sin(values.astype(np.float64))
    assert ulps(got, want).max() <= 2, (values, got)      # CUDA Math API: sinf, 2 ulp
    special = np.array([0.0, -0.0, np.inf, np.nan], np.float32)
    got = machine_sines(sines, special)
    assert got[:2].view(np.int32).tolist() == [0, np.float32(-0.0).view(np.int32)]      # the zeros keep their sign
    assert np.isnan(got[2:]).all()


def test_sinf_of_a_huge_argument_runs_its_double_reduction(sines):
    """From 105615 on, CUDA's sinf reduces its argument by 2/pi's bits in 64-bit integers (a multi-word product's
    running carry: mad.wide with a 64-bit addend) and converts the result to a double (cvt.rn.f64.s64): that
    path runs too, within the same 2 ulps."""
    values = np.array([LIMIT, -2e5, 1e10, -12345678.0, 7e20, -1e30, 3.4e38, 3 * LIMIT], np.float32)
    got = machine_sines(sines, values)
    assert ulps(got, np.sin(values.astype(np.float64))).max() <= 2, (values, got)


@needs_nvrtc
def test_a_double_of_the_users_runs_until_a_thread_takes_it():
    dev = Device()
    kernel = dev.load_kernel(SINES, "tenth_of_big")
    y, x = dev.alloc(4), dev.alloc(4)
    dev.write(x, np.array([1.5, -2.0, 100.0, 400.0], np.float32).view(np.int32))
    dev.launch(kernel, threads=4, args=[y, x, 3])           # the fourth thread, whose value is big, does nothing
    assert dev.read(y, 3).astype(np.int32).view(np.float32).tolist() == [0.5, -3.0, 99.0]
    dev.write(y, np.arange(4))
    tokens = len(dev.tokens)
    with pytest.raises(MachineError, match=r"thread \[3,0,0\] took a path to PTX line \d+ \(.*f64.*write float, and "
                                           r"2\.0f.*\n  from kernel\.cu line 14: y\[i\] = log\(\(double\)x\[i\]\);$"
                       ) as refused:
        dev.launch(kernel, threads=4, args=[y, x, 4])
    # the launch is put back: no token written, memory as before (the first three threads' results unwritten)
    assert len(dev.tokens) == tokens and dev.read(y, 4).tolist() == [0, 1, 2, 3]
    assert "f64" in toolchain.compile_cuda(SINES).splitlines()[refused.value.line - 1]


@needs_nvrtc
def test_printf_of_a_float_under_a_branch_is_no_refusal():
    dev = Device()
    x = dev.alloc(4)
    dev.write(x, np.array([0.0, 2.5, 0.0, 0.0], np.float32).view(np.int32))
    dev.launch(dev.load_kernel(SINES, "show"), threads=4, args=[x])
    assert dev.printed == ["x = 2.500\n"]


def kernel(body: str):
    return parse(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 k_param_0)\n{\n"
                 "\t.reg .pred %p<4>;\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<4>;\n\t.reg .f64 %fd<4>;\n"
                 + body + "\n}\n").kernels["k"]


LOOP_TO_DOUBLE = """\tld.param.u64 %rd1, [k_param_0];
\tld.global.u32 %r1, [%rd1];
\tsetp.gt.u32 %p1, %r1, 5;
\t@%p1 bra BIG;
\tst.global.u32 [%rd1], %r1;
\tret;
BIG:
\tadd.s32 %r1, %r1, -1;
\tsetp.ne.s32 %p2, %r1, 3;
\t@%p2 bra BIG;
\trcp.approx.ftz.f64 %fd1, %fd2;
\tret;"""

SPIN = """\tld.param.u64 %rd1, [k_param_0];
\tld.global.u32 %r1, [%rd1];
\tsetp.gt.u32 %p1, %r1, 5;
\t@%p1 bra SPIN;
\trcp.approx.ftz.f64 %fd1, %fd2;
\tret;
SPIN:
\tbra.uni SPIN;"""


def test_doomed_blocks_are_those_no_path_leaves_without_a_double():
    blocks = basic_blocks(kernel(LOOP_TO_DOUBLE))
    # the loop and the block after it lead only to the approximate reciprocal; the entry and the store do not
    assert paths.doomed(blocks) == {b.index for b in blocks if "BIG" in b.labels or any(
        i.opcode.startswith("rcp") for i in b.body)}
    rewritten = paths.rewrite(kernel(LOOP_TO_DOUBLE))
    opcodes = [i.opcode for i in rewritten.body if hasattr(i, "opcode")]
    assert opcodes[-2:] == [paths.REFUSE, "ret"] and "rcp.approx.ftz.f64" not in opcodes
    assert opcodes.count("add.s32") == 0
    # a loop that never ends is not doomed (the watchdog reports it); the entry doomed: the kernel is left as it is,
    # and the lowering refuses its double before anything runs
    spin = kernel(SPIN)
    assert paths.rewrite(spin) is spin
    dev = Device()
    word = dev.alloc(1)
    tokens = len(dev.tokens)
    entry = kernel("\trcp.approx.ftz.f64 %fd1, %fd2;\n\tret;")
    with pytest.raises(MachineError, match=r"a double instruction; of double arithmetic the machine builds"):
        dev.launch(dev.load_kernel(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 k_param_0)\n{\n"
            "\t.reg .b32 %r<2>;\n\t.reg .f64 %fd<3>;\n\trcp.approx.ftz.f64 %fd1, %fd2;\n\tret;\n}\n", "k"),
            threads=4, args=[word])
    assert paths.rewrite(entry) is entry and len(dev.tokens) == tokens


def test_on_a_gpu_sinf_bits_equal_cudas(sines, cuda_gpu):
    """The machine's sinf against the GPU's own (CUDA's library, compiled by CuPy's NVRTC), bit for bit, where a
    device is lent (bench/gpu_check.sh runs the tests)."""
    cupy = cuda_gpu
    rng = np.random.default_rng(11)
    values = np.concatenate([rng.uniform(-4, 4, 24), rng.uniform(-LIMIT, LIMIT, 8)]).astype(np.float32)
    module = cupy.RawModule(code=SINES, options=("--std=c++17",))
    y = cupy.zeros(len(values), cupy.float32)
    module.get_function("sines")((1,), (len(values),), (y, cupy.asarray(values)))
    assert machine_sines(sines, values).view(np.int32).tolist() == cupy.asnumpy(y).view(np.int32).tolist()
