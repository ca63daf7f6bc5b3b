"""Calls of __device__ functions NVRTC did not inline (__noinline__): inlined by qwengpu.inline before parsing,
structs by value included, checked against numpy on the interpreter; recursion refused by name; line numbers
kept."""
from __future__ import annotations

import re

import numpy as np
import pytest

from qwengpu import Device, MachineError, toolchain
from qwengpu.inline import inline_calls
from qwengpu.ptx import PTXError, _strip_comments

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

CALLS = r"""
__device__ __noinline__ int twice(int v) { return 2 * v; }

// a loop, an early return, a pointer argument: its labels are taken once per call
__device__ __noinline__ int clampsum(const int *x, int n, int hi)
{
    int s = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] < 0)
            return -1;
        s += x[i];
    }
    return s > hi ? hi : s;
}

__device__ __noinline__ void put(int *y, int i, unsigned char c) { y[i] = c * 3; }
__device__ __noinline__ float half_of(float v) { return v * 0.5f; }
__device__ __noinline__ int outer(int v) { return twice(v) + 1; }       // a call inside a callee

extern "C" __global__ void calls(int *y, const int *x, int n)
{
    int i = threadIdx.x;
    y[i] = twice(x[i]) + twice(i);
    y[i + 4] = clampsum(x, n, 100) + clampsum(x + 1, n - 1, 50);
    put(y, i + 8, (unsigned char)x[i]);
    y[i + 12] = __float_as_int(half_of((float)x[i]));
    y[i + 16] = outer(x[i] - i);
}
"""


def expected(x: np.ndarray) -> np.ndarray:
    def clampsum(v, hi):
        return -1 if (v < 0).any() else min(int(v.sum()), hi)
    i = np.arange(4)
    return np.concatenate([2 * x + 2 * i, np.full(4, clampsum(x, 100) + clampsum(x[1:], 50)), (x & 255) * 3,
                           (x.astype(np.float32) * np.float32(0.5)).view(np.int32), 2 * (x - i) + 1]).astype(np.int32)


@pytest.mark.parametrize("values", [[5, -3, 300, 7], [1, 2, 3, 4], [40, 30, 20, 10], [0, 255, 256, -1]])
def test_noinline_functions_run_as_if_inlined(values):
    dev = Device()
    kernel = dev.load_kernel(CALLS, "calls")
    y, x = dev.alloc(20), dev.alloc(4)
    xv = np.array(values, dtype=np.int32)
    dev.write(x, xv)
    dev.launch(kernel, threads=4, args=[y, x, 4])
    np.testing.assert_array_equal(dev.read(y, 20), expected(xv))


def test_the_ptx_keeps_its_calls_and_the_inlined_text_its_line_numbers():
    ptx = toolchain.compile_cuda(CALLS)
    assert ptx.split(".entry")[1].count("call.uni") == 7     # NVRTC kept every call: the inliner is exercised
    text, refused = inline_calls(_strip_comments(ptx))
    assert refused == {} and "call.uni" not in text.split(".entry")[1]
    assert text.count("\n") == ptx.count("\n")
    # every copy its own number, the call inside outer's copy too: its registers never share a name with another's
    assert sorted(set(re.findall(r"\$__call(\d+)_end", text)), key=int) == [str(k) for k in range(1, 9)]


LOCALS = r"""
// a local array indexed at run time, in a function called twice: each copy's .local array is its own
__device__ __noinline__ int pick(int k, int base)
{
    int table[5] = {base, base + 10, base + 20, base + 30, base + 40};
    return table[k % 5];
}

extern "C" __global__ void locals(int *y, const int *x)
{
    int i = threadIdx.x;
    y[i] = pick(x[i], 1) * 1000 + pick(x[i] + 1, 7);
}
"""


def test_a_function_with_a_local_array_called_twice():
    dev = Device()
    kernel = dev.load_kernel(LOCALS, "locals")
    y, x = dev.alloc(4), dev.alloc(4)
    xv = np.array([0, 3, 4, 9], dtype=np.int32)
    dev.write(x, xv)
    dev.launch(kernel, threads=4, args=[y, x])
    np.testing.assert_array_equal(dev.read(y, 4), (1 + 10 * (xv % 5)) * 1000 + 7 + 10 * ((xv + 1) % 5))


def test_a_recursive_function_is_refused_naming_the_cycle():
    source = ('__device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n'
              'extern "C" __global__ void k(int *y) { y[threadIdx.x] = fib(threadIdx.x); }\n')
    with pytest.raises(PTXError, match=r"function calls are not supported: _Z3fibi \(it is recursive \(_Z3fibi -> "
                                       r"_Z3fibi\)\).*\n  from kernel\.cu line 2: extern"):
        Device().load_kernel(source, "k")


STRUCTS = r"""
struct Pair { int a, b; };
struct Mixed { int a; short s; signed char c; float f; long long w; };

__device__ __noinline__ int total(Pair p) { return p.a - p.b; }
__device__ __noinline__ Pair swap(Pair p) { Pair q = {p.b * 3, p.a}; return q; }     // a struct result
__device__ __noinline__ int mixed(Mixed m) { return m.a + m.s + m.c + (int)m.f + (int)m.w; }

extern "C" __global__ void structs(int *y, const int *x)
{
    int i = threadIdx.x;
    Pair p = {x[i], x[i + 4]};
    Pair q = swap(p);
    Mixed m = {x[i], (short)x[i + 4], (signed char)x[i + 8], (float)x[i + 12], (long long)x[i]};
    y[i] = total(p);
    y[i + 4] = q.a + 1000 * q.b;
    y[i + 8] = mixed(m);
}
"""


def test_structs_passed_and_returned_by_value():
    """A struct argument or result is a field a register at each byte offset st.param writes; ld.param reads its
    field, narrowed and extended as its type says (a short's and a signed char's sign, a long long's low word)."""
    ptx = toolchain.compile_cuda(STRUCTS)
    assert ".b8 param0[" in ptx and "call.uni" in ptx.split(".entry")[1]
    dev = Device()
    kernel = dev.load_kernel(STRUCTS, "structs")
    y, x = dev.alloc(12), dev.alloc(16)
    rng = np.random.default_rng(12)
    xv = rng.integers(-40000, 40000, 16).astype(np.int32)
    dev.write(x, xv)
    dev.launch(kernel, threads=4, args=[y, x])
    a, b, c, f = xv[:4], xv[4:8], xv[8:12], xv[12:16]
    mixed = (a + b.astype(np.int16) + c.astype(np.int8) + f.astype(np.float32).astype(np.int32) + a)
    np.testing.assert_array_equal(dev.read(y, 12), np.concatenate([a - b, b * 3 + 1000 * a, mixed]).astype(np.int32))


def test_a_refusal_inside_a_callee_names_the_calls_line():
    source = ('__device__ __noinline__ void add(unsigned *s, int v)\n'
              '{ atomicAdd(s, __float_as_uint(rsqrtf((float)v))); }\n'
              'extern "C" __global__ void k(unsigned *s, const int *x)\n'
              '{\n'
              '    add(s, x[threadIdx.x]);\n'
              '}\n')
    dev = Device()
    kernel = dev.load_kernel(source, "k")
    with pytest.raises(MachineError, match=r"rsqrt\.approx is the GPU's own.*\n  from kernel\.cu line 5: add\(s, "
                                           r"x\[threadIdx\.x\]\);"):
        dev.launch(kernel, threads=4, args=[dev.alloc(2), dev.alloc(4)])


HAND = """.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 func_retval0) widen(.param .b32 widen_param_0)
{
    .reg .b16 %rs<2>;
    .reg .b32 %r<2>;
    ld.param.s8 %rs1, [widen_param_0];
    cvt.s32.s16 %r1, %rs1;
    st.param.b32 [func_retval0+0], %r1;
    ret;
}
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [k_param_0];
    ld.param.u64 %rd2, [k_param_1];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r2, [%rd4];
    mov.u32 %r3, 77;
    setp.ne.u32 %p1, %r1, 2;
    {
    .param .b32 param0;
    st.param.b32 [param0+0], %r2;
    .param .b32 retval0;
    @%p1 call.uni (retval0), widen, (param0);
    @%p1 ld.param.b32 %r3, [retval0+0];
    }
    add.s64 %rd5, %rd1, %rd3;
    st.global.u32 [%rd5], %r3;
    ret;
}
"""


def test_a_guarded_call_and_a_signed_narrow_parameter():
    """PTX written by hand: the call runs only where its guard holds (thread 2 keeps 77), and ld.param.s8 reads
    the parameter's low byte sign-extended, as a load of a signed char does."""
    dev = Device()
    kernel = dev.load_kernel(HAND, "k")
    y, x = dev.alloc(4), dev.alloc(4)
    dev.write(x, np.array([0x1FF, 0x80, 5, 0x7F], dtype=np.int32))
    dev.launch(kernel, threads=4, args=[y, x])
    assert dev.read(y, 4).tolist() == [-1, -128, 77, 127]


def test_a_parameter_read_at_a_byte_no_store_wrote_is_refused():
    """PTX written by hand: the callee reads byte 2 of a parameter the caller wrote as one word; the call is left a
    call and refused naming why (the field split needs each read to start where a write did, no wider); so is a
    read of 8 bytes where 4 were written."""
    text = HAND.replace("ld.param.s8 %rs1, [widen_param_0];", "ld.param.s8 %rs1, [widen_param_0+2];")
    with pytest.raises(PTXError, match=r"function calls are not supported: widen \(it reads bytes of a parameter or "
                                       r"result that no one st\.param wrote \(byte 2\)\)"):
        Device().load_kernel(text, "k")
    wide = HAND.replace(".reg .b16 %rs<2>;", ".reg .b16 %rs<2>; .reg .b64 %rd<2>;").replace(
        "ld.param.s8 %rs1, [widen_param_0];", "ld.param.b64 %rd1, [widen_param_0]; cvt.u16.u64 %rs1, %rd1;")
    with pytest.raises(PTXError, match=r"that no one st\.param wrote \(byte 0\)"):
        Device().load_kernel(wide, "k")
