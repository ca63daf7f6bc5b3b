"""Silent miscompiles found by hand and by the differential trial (issue 9), each as a kernel checked against numpy.

Each case is written as the CUDA (or PTX) a user wrote; the expected words come from numpy evaluating the same C
expression, never from the lowering.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from qwengpu import Device
from qwengpu.toolchain import nvrtc_available

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="the host C compiler gcc is not installed")

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (nvidia-cuda-nvrtc wheel) is not installed")


def run(source: str, threads: int, args: list[int], memory: dict[int, list[int]], read: tuple[int, int]):
    dev = Device()
    for address, words in memory.items():
        dev.write(address, np.array(words, dtype=np.int64))
    dev.launch(dev.load_kernel(source, "k"), threads=threads, args=args)
    return dev.read(*read)


GUARD_PTX = HEADER + """
.visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)
{
    .reg .pred %p<2>; .reg .b32 %r<4>; .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [k_param_0];
    ld.param.u32 %r1, [k_param_1];
    ld.global.u32 %r2, [%rd1];
    setp.ne.s32 %p1, %r1, 0;
    @%p1 mov.u32 %r2, 5;
    add.s32 %r3, %r2, 1;
    st.global.u32 [%rd1+4], %r3;
    ret;
}
"""


@pytest.mark.parametrize("flag", [0, 1])
def test_guard_that_is_constant_false(flag):
    """A guarded mov whose guard folds to false must leave the loaded value in place (stored 1, not 43)."""
    out = run(GUARD_PTX, 1, [0, flag], {0: [42, 0]}, (0, 2))
    expect = np.array([42, (5 if flag else 42) + 1])
    np.testing.assert_array_equal(out, expect)


@needs_nvrtc
def test_wide_multiply_by_a_multiple_of_4_is_a_value_not_an_offset():
    src = 'extern "C" __global__ void k(int *out) { out[threadIdx.x] = (int)((unsigned)(threadIdx.x > 0u) << 13); }'
    tid = np.arange(4)
    np.testing.assert_array_equal(run(src, 4, [0], {}, (0, 4)), (tid > 0).astype(np.int64) << 13)


@needs_nvrtc
@pytest.mark.parametrize("s0", [305419896, -2023406815, 255, 65536])
def test_narrow_read_of_a_parameter_keeps_width_and_offset(s0):
    src = ('extern "C" __global__ void k(int *out, int s0) { out[0] = (int)((unsigned)s0 & 255u); '
           'out[1] = (int)((unsigned)s0 >> 16); out[2] = (int)(short)s0; out[3] = (int)(signed char)(s0 >> 8); }')
    u = np.uint32(s0 & 0xFFFFFFFF)
    expect = np.array([u & 255, u >> 16, np.int16(u & 0xFFFF), np.int8((u >> 8) & 0xFF)], dtype=np.int64)
    np.testing.assert_array_equal(run(src, 1, [0, s0], {}, (0, 4)), expect)


PTX_NARROW_PARAM = HEADER + """
.visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)
{
    .reg .b32 %r<3>; .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [k_param_0];
    ld.param.u8 %r1, [k_param_1];
    ld.param.u16 %r2, [k_param_1+2];
    st.global.u32 [%rd1], %r1;
    st.global.u32 [%rd1+4], %r2;
    ret;
}
"""


def test_narrow_parameter_reads_in_ptx():
    np.testing.assert_array_equal(run(PTX_NARROW_PARAM, 1, [0, 305419896], {}, (0, 2)), [120, 4660])


@needs_nvrtc
def test_select_whose_destination_is_a_source():
    src = ('extern "C" __global__ void k(int *out) { unsigned v1 = (threadIdx.x == 1u) ? 0u : threadIdx.x; '
           'if (threadIdx.x >= 2u) { if (((unsigned)out[threadIdx.x] & v1) != 0u) v1 = 0u; } '
           'out[threadIdx.x] = (int)v1; }')
    before = np.array([-7, 18, 16, -6])
    tid = np.arange(4)
    v1 = np.where(tid == 1, 0, tid)
    v1 = np.where((tid >= 2) & ((before.astype(np.int64) & 0xFFFFFFFF & v1) != 0), 0, v1)
    np.testing.assert_array_equal(run(src, 4, [0], {0: list(before)}, (0, 4)), v1)


@needs_nvrtc
def test_select_between_two_pointers():
    src = ('extern "C" __global__ void k(int *out, const int *x0, const int *x1) { '
           'out[threadIdx.x] = threadIdx.x > 0u ? x0[threadIdx.x] : x1[threadIdx.x]; }')
    x0, x1 = np.arange(10, 14), np.arange(20, 24)
    tid = np.arange(4)
    out = run(src, 4, [0, 4, 8], {4: list(x0), 8: list(x1)}, (0, 4))
    np.testing.assert_array_equal(out, np.where(tid > 0, x0, x1))


PRED_CONST_PTX = HEADER + """
.visible .entry k(.param .u64 k_param_0)
{
    .reg .pred %p<8>; .reg .b32 %r<4>; .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [k_param_0];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd2, %rd1, %rd2;
    ld.global.u32 %r2, [%rd2];
    setp.lt.s32 %p5, %r2, 2;
    mov.pred %p7, -1;
    xor.pred %p6, %p7, %p5;
    selp.u32 %r3, 1, 0, %p6;
    st.global.u32 [%rd2], %r3;
    ret;
}
"""


def test_predicate_constant_true_is_one():
    """mov.pred %p, -1 is true: xor with it is a negation (it once xored with all ones)."""
    x = np.array([0, 5, 1, 7])
    np.testing.assert_array_equal(run(PRED_CONST_PTX, 4, [0], {0: list(x)}, (0, 4)), (~(x < 2)).astype(int))


@needs_nvrtc
def test_narrow_immediates_are_their_low_bits():
    """Found by the fuzzer: NVRTC divides a small value by 3 with ``mul.wide.u16 %r, %rs, -21845`` (0xAAAB)."""
    src = ('extern "C" __global__ void k(int *out, const int *x) { '
           'out[threadIdx.x] = (int)((unsigned)((int)((unsigned)x[threadIdx.x] % 8u) / 3)); }')
    x = np.array([-11, 10, -133713416, 780154049])
    expect = ((x.astype(np.int64) & 0xFFFFFFFF) % 8) // 3
    np.testing.assert_array_equal(run(src, 4, [0, 8], {8: list(x)}, (0, 4)), expect)


@needs_nvrtc
@needs_gcc
def test_a_join_block_placed_after_the_return_is_reached():
    """Found by the fuzzer: NVRTC put one side of an if after ``ret`` and jumped back (``bra.uni`` to an earlier
    block, not a loop); the lanes entering there were masked off before they reached the store."""
    import tempfile
    from qccl_bench.kernel_fuzz import Case, c_reference, run_machine
    body = ("unsigned v0 = tid, v1 = (unsigned)s0, v2 = (unsigned)x[tid], v3 = 0u; "
            "v2 = ((unsigned)((int)(unsigned)s1 / 12) ^ v3); if (((unsigned)(short)96u % 13u) == (~v2)) { "
            "v1 = (unsigned)((int)(unsigned)(short)(v1 & v2) >= (int)(unsigned)x[(v0 & 7u)]); } else { "
            "for (unsigned j1 = 0u; j1 < ((unsigned)((tid ? v1 : 235u) != (v0 * 111u)) & 3u); j1++) { "
            "if (((v3 + (unsigned)x[(tid + 1u) & 7u]) & 3u) == 1u) break; v3 = v0; } } "
            "v2 = (v3 ? ((unsigned)x[(v0 & 7u)] ? (130u + 95u) : (-(unsigned)x[(v0 & 7u)])) : "
            "(unsigned)((int)(unsigned)x[tid] >> ((242u & v0) & 31u))); "
            "out[tid] = (int)(((unsigned)min((int)v2, (int)(unsigned)x[tid]) | (tid | 425562398u)));")
    case = Case(body, 4, -768042722, 1479860919,
                [2, 0, -1457702173, -1653688566, 395710781, 2019916361, 1691804570, 1944423417], [43, -72, 77, 76])
    with tempfile.TemporaryDirectory() as d:
        (expect,) = c_reference([case], d)
    assert run_machine(case) == expect


@needs_nvrtc
@pytest.mark.parametrize("s0", [0, 7, -5, 2**31 - 1])
def test_64_bit_compare_of_a_quotient_bit_is_a_word_compare(s0):
    """Found by the fuzzer (refused before): NVRTC tests ``(u / 6u) & 1u`` as ``shr.u64 %rd, %rd, 34; and.b64 %rd,
    %rd, 1; setp.eq.b64 %p, %rd, 1``; the and leaves the high word zero, so the compare is one of the low words."""
    src = ('extern "C" __global__ void k(int *out, const int *x, int s0) { unsigned t = threadIdx.x; '
           'unsigned v = t * 7u; if ((((unsigned)x[t] - (unsigned)s0) / 6u) & 1u) v = (unsigned)x[t]; '
           'out[t] = (int)v; }')
    x = np.array([5, 6, 12, 19, -1, -7, 2**31 - 1, -2**31], dtype=np.int64)
    t = np.arange(8, dtype=np.uint64)
    u = (x.astype(np.uint64) - np.uint64(s0 & 0xFFFFFFFF)) & np.uint64(0xFFFFFFFF)
    want = np.where((u // np.uint64(6)) & np.uint64(1), x.astype(np.uint64) & np.uint64(0xFFFFFFFF), t * np.uint64(7))
    got = run(src, 8, [0, 16, s0], {16: x.tolist()}, (0, 8))
    np.testing.assert_array_equal(got.astype(np.int64) & 0xFFFFFFFF, want.astype(np.int64))


BYTE_INDEX_CU = r"""
extern "C" __global__ void loads(int *out, int *x) {
  unsigned t = threadIdx.x;
  const unsigned char *b = (const unsigned char *)x;
  const short *h = (const short *)x;
  out[t] = b[(unsigned)x[t] & 15u] + 1000 * (int)h[((unsigned)x[t] >> 4) & 7u];
}
extern "C" __global__ void bytes(int *out, int *x) {
  unsigned t = threadIdx.x;
  unsigned char *o2 = (unsigned char *)(out + 4);
  o2[t * 2u + (((unsigned)x[t] >> 8) & 1u)] = (unsigned char)(t + 7u + (unsigned)x[t]);
}
extern "C" __global__ void halves(int *out, int *x) {
  unsigned t = threadIdx.x;
  short *o3 = (short *)(out + 8);
  o3[t + (((unsigned)x[t] >> 9) & 1u) * 4u] = (short)((unsigned)x[t] >> 3);
}
"""


@needs_nvrtc
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", ["loads", "bytes", "halves"])
def test_char_and_short_at_an_index_the_machine_computes(name, seed):
    """Refused before ("a byte offset of 1 x a machine value is not a whole number of words"): bytes and halfwords
    loaded and stored at byte offsets computed at run time (``cvt.u64.u32`` of a masked index, ``mul.wide`` by 2,
    an ``and.b64`` with 14). The reference is numpy on the same memory viewed as little-endian bytes."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2**31, 2**31, 4)
    out = rng.integers(-2**31, 2**31, 12)
    xb = x.astype("<i4").view(np.uint8)
    xh = x.astype("<i4").view("<i2")
    want = out.astype("<i4").copy()
    wb = want.view(np.uint8)
    wh = want.view("<i2")
    xu = x.astype(np.int64) & 0xFFFFFFFF
    for t in range(4):
        if name == "loads":
            want[t] = int(xb[xu[t] & 15]) + 1000 * int(xh[(xu[t] >> 4) & 7])
        elif name == "bytes":
            wb[16 + t * 2 + ((xu[t] >> 8) & 1)] = (t + 7 + xu[t]) & 0xFF
        else:
            wh[16 + t + ((xu[t] >> 9) & 1) * 4] = np.uint16((xu[t] >> 3) & 0xFFFF).view(np.int16)
    dev = Device()
    dev.write(0, out)
    dev.write(32, x)
    dev.launch(dev.load_kernel(BYTE_INDEX_CU, name), threads=4, args=[0, 32])
    got = dev.read(0, 12)
    np.testing.assert_array_equal(got.astype(np.int64) & 0xFFFFFFFF, want.astype(np.int64) & 0xFFFFFFFF)


@needs_nvrtc
@pytest.mark.parametrize("s0", [0, 1, 2, 3, 5, 6])
def test_byte_offset_from_an_argument_added_to_a_computed_index(s0):
    """A byte offset known at launch (``s0``, possibly odd) added to a word index the machine computes."""
    src = ('extern "C" __global__ void k(int *out, int *x, int s0) { unsigned t = threadIdx.x; '
           'const unsigned char *b = (const unsigned char *)x; '
           'out[t] = b[((unsigned)x[t] & 3u) * 4u + (unsigned)s0] - 7 * (int)((const short *)x)[(t + s0) & 7u]; }')
    x = np.array([0x01020304, -0x0A0B0C0D, 0x7F6E5D4C, 0x11223347, -5, 0x00FF00FF, 0x12345678, -0x789ABCDF],
                 dtype=np.int64)
    xb = x.astype("<i4").view(np.uint8)
    xh = x.astype("<i4").view("<i2")
    want = [int(xb[(int(x[t]) & 3) * 4 + s0]) - 7 * int(xh[(t + s0) & 7]) for t in range(4)]
    got = run(src, 4, [0, 32, s0], {32: x.tolist()}, (0, 4))
    np.testing.assert_array_equal(got, want)


@needs_nvrtc
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_64_bit_shift_and_not_that_make_a_byte_offset(seed):
    """Refused before ("this instruction cannot compute an address"): NVRTC folds ``x[((u / 13u) | 2u) & 7u]`` into
    ``shr.u64 %rd8, %rd7, 32; and.b64 %rd9, %rd8, 20`` and ``x[~w & 7u]`` into ``not.b64; and.b64 ..., 28``: the
    shifted and complemented registers hold values (their low words), which an and then makes byte offsets."""
    src = ('extern "C" __global__ void k(int *out, const int *x) { unsigned t = threadIdx.x; '
           'unsigned v = ((unsigned)x[t] / 13u) | 2u; unsigned w = ~((unsigned)x[t + 4u]); '
           'out[t] = x[v & 7u] + 3 * x[w & 7u]; }')
    rng = np.random.default_rng(seed)
    x = rng.integers(-2**31, 2**31, 8)
    xu = x & 0xFFFFFFFF
    want = [(int(x[((int(xu[t]) // 13) | 2) & 7]) + 3 * int(x[(~int(xu[t + 4])) & 7])) & 0xFFFFFFFF
            for t in range(4)]
    got = run(src, 4, [0, 16], {16: x.tolist()}, (0, 4))
    np.testing.assert_array_equal(got.astype(np.int64) & 0xFFFFFFFF, want)


@needs_nvrtc
@pytest.mark.parametrize("seed", [1, 2])
def test_word_index_from_a_halved_thread_index_and_a_16_bit_product(seed):
    """Refused before: ``x[(t >> 1) & 7u]`` is ``shl.b32 %r, %tid, 1; cvt.u64.u32; and.b64 ..., 28`` (a byte offset
    2 * tid, known at launch but odd words, made whole by the and), and a 16-bit index times 4 (``shl.b16 %rs, 2;
    cvt.u64.u16``) was cut to 16 bits before its alignment was looked at."""
    src = ('extern "C" __global__ void k(int *out, const int *x) { unsigned t = threadIdx.x; '
           'unsigned v = (unsigned)(unsigned short)((unsigned)x[t] << 12u) % 17u; '
           'out[t] = x[(t >> 1) & 7u] - 5 * x[v & 7u]; }')
    rng = np.random.default_rng(seed)
    x = rng.integers(-2**31, 2**31, 8)
    xu = x & 0xFFFFFFFF
    want = [(int(x[(t >> 1) & 7]) - 5 * int(x[(((int(xu[t]) << 12) & 0xFFFF) % 17) & 7])) & 0xFFFFFFFF
            for t in range(8)]
    got = run(src, 8, [0, 16], {16: x.tolist()}, (0, 8))
    np.testing.assert_array_equal(got.astype(np.int64) & 0xFFFFFFFF, want)


OFFSET_AS_VALUE_PTX = HEADER + """
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
    .reg .b32 %r<8>; .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [k_param_0];
    ld.param.u64 %rd2, [k_param_1];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r2, [%rd4];
    and.b32 %r3, %r2, 7;
    mul.wide.u32 %rd5, %r3, 4;
    add.s64 %rd6, %rd2, %rd5;
    ld.global.u32 %r4, [%rd6];
    cvt.u32.u64 %r5, %rd5;
    mad.lo.s32 %r6, %r5, 1000, %r4;
    add.s64 %rd7, %rd1, %rd3;
    st.global.u32 [%rd7], %r6;
    ret;
}
"""


def test_a_byte_offset_the_machine_computes_read_as_a_value():
    """``%rd5`` (x & 7 times 4) is a byte offset (kept in words) and also a value (``cvt.u32.u64``): its value is
    the byte offset, words times 4 (refused before: "holds an address and is used here as a value")."""
    x = [13, 6, -1, 8, 3, 22, 5, 7]
    want = [((v & 7) * 4) * 1000 + x[v & 7] for v in x[:4]]
    np.testing.assert_array_equal(run(OFFSET_AS_VALUE_PTX, 4, [0, 16], {16: x}, (0, 4)), want)


LOADED_INDEX_CU = r"""
extern "C" __global__ void k(int *out, const int *x) {
  unsigned t = threadIdx.x;
  out[t] = (int)((const unsigned char *)x)[(unsigned)out[t] & 31u] * 1000
         + (int)((const signed char *)x)[((unsigned)x[t] >> 3) & 31u];
}
"""


@needs_nvrtc
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_loaded_word_used_as_a_byte_index(seed):
    """Found by the fuzzer with --narrow (a wrong result, before the fix): NVRTC loads the index straight into a
    64-bit register (``ld.global.u32 %rd7, [%rd6]; and.b64 %rd8, %rd7, 31``), which was taken for a word address
    and scaled by 4; and ``shr.u64 %rd8, %rd7, 3`` of such a word was refused as depending on the high word."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2**31, 2**31, 8)
    out = rng.integers(-2**31, 2**31, 4)
    xb = x.astype("<i4").view(np.uint8)
    xs = x.astype("<i4").view(np.int8)
    want = [int(xb[int(out[t]) & 31]) * 1000 + int(xs[((int(x[t]) & 0xFFFFFFFF) >> 3) & 31]) for t in range(4)]
    np.testing.assert_array_equal(run(LOADED_INDEX_CU, 4, [0, 16], {0: out.tolist(), 16: x.tolist()}, (0, 4)), want)


@needs_nvrtc
@pytest.mark.parametrize("seed", [1, 2])
def test_a_64_bit_shift_whose_result_is_masked_to_low_bits(seed):
    """Found by the fuzzer with --narrow (refused before): ``neg.s64; xor.b64 ..., 168; shr.u64 ..., 3; and.b64
    ..., 31``: the negated byte has a nonzero high word, but the and reads only bits the low word gives."""
    src = ('extern "C" __global__ void k(int *out, const int *x) { unsigned t = threadIdx.x; '
           'unsigned v = 169u ^ (-(unsigned)((const unsigned char *)x)[t * 5u]); '
           'out[t] = ((const signed char *)x)[(v >> 3) & 31u]; }')
    rng = np.random.default_rng(seed)
    x = rng.integers(-2**31, 2**31, 8)
    xb = x.astype("<i4").view(np.uint8)
    xs = x.astype("<i4").view(np.int8)
    want = [int(xs[(((169 ^ (-int(xb[t * 5])) & 0xFFFFFFFF) >> 3) & 31)]) for t in range(4)]
    np.testing.assert_array_equal(run(src, 4, [0, 16], {16: x.tolist()}, (0, 4)), want)


# NVRTC's layout of a SIMT loop whose one arm ends in the loop's step (``j++``) and whose other arm repeats the step
# itself: the step block is placed before the condition and the loop is entered by a jump to the condition. The
# emitter sees an outer loop (step .. last block) entered in its middle and left only through its end, around an
# inner loop (condition .. second arm) whose exit, the condition failing, leaves both. Trimmed from NVRTC's PTX of
# the fuzzer's kernel (bench/kernel_fuzz.py, seed 777, case 1440) to fit the ROM (31 blocks): NVRTC's labels and
# branches, less an if inside the first arm (NVRTC's second branch back to the step) and the arms' arithmetic.
# As C: unsigned v = s0, w = x[t] >> 2, n = x[t] & 3;
#       for (unsigned j = 0; j < n; j++) { if (w == v) v >>= 1; else w += v; }   out[t] = w + v;
STEP_BEFORE_CONDITION_PTX = HEADER + """
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1, .param .u32 k_param_2)
{
    .reg .pred %p<5>; .reg .b32 %r<35>; .reg .b64 %rd<18>;
    ld.param.u64 %rd4, [k_param_0];
    ld.param.u64 %rd5, [k_param_1];
    ld.param.u32 %r30, [k_param_2];
    cvta.to.global.u64 %rd1, %rd4;
    cvta.to.global.u64 %rd2, %rd5;
    mov.u32 %r15, %tid.x;
    mul.wide.u32 %rd6, %r15, 4;
    add.s64 %rd7, %rd2, %rd6;
    ld.global.u32 %r1, [%rd7];
    and.b32 %r21, %r1, 3;
    shr.u32 %r31, %r1, 2;
    mov.u32 %r32, 0;
    bra.uni $L__BB0_1;
$L__BB0_5:
    add.s32 %r32, %r32, 1;
$L__BB0_1:
    setp.ge.u32 %p1, %r32, %r21;
    @%p1 bra $L__BB0_7;
    setp.eq.s32 %p4, %r31, %r30;
    @%p4 bra $L__BB0_6;
    bra.uni $L__BB0_3;
$L__BB0_6:
    shr.u32 %r30, %r30, 1;
    add.s32 %r32, %r32, 1;
    bra.uni $L__BB0_1;
$L__BB0_3:
    add.s32 %r31, %r31, %r30;
    bra.uni $L__BB0_5;
$L__BB0_7:
    add.s64 %rd17, %rd1, %rd6;
    add.s32 %r34, %r31, %r30;
    st.global.u32 [%rd17], %r34;
    ret;
}
"""


@pytest.mark.parametrize("s0,seed", [(5, 1), (12, 2), (0, 3), (1, 4), (40, 5)])
def test_a_loop_whose_step_is_placed_before_its_condition(s0, seed):
    """Found by the fuzzer (an internal ``KeyError`` in the emitter before the fix): the inner loop's exit, which
    also leaves the outer loop, was looked up among the outer loop's exit masks, and a loop left only through its end
    keeps none. Lanes take 0..3 trips and both arms (w == s0 at the start on the first four); two warps. The
    reference is Python running the C loop above."""
    rng = np.random.default_rng(seed)
    x = [(s0 << 2) | n for n in range(4)] + [int(v) for v in rng.integers(0, 256, 4)]
    want = []
    for word in x:
        v, w = s0, word >> 2
        for _ in range(word & 3):
            if w == v:
                v >>= 1
            else:
                w += v
        want.append(w + v)
    np.testing.assert_array_equal(run(STEP_BEFORE_CONDITION_PTX, 8, [0, 16, s0], {16: x}, (0, 8)), want)


@needs_nvrtc
@needs_gcc
def test_the_fuzzers_loop_with_its_step_before_its_condition_is_run_or_refused_by_a_limit():
    """The fuzzer's kernel reduced (seed 777, case 1440: ``KeyError: 12`` from the lowering): NVRTC lays this loop out
    as the PTX above. It needs more than the ROM's 32 blocks, so it is refused by that limit; were it to fit, it
    must equal gcc's C, never raise an internal error."""
    import tempfile
    from qwengpu.isa import MachineError
    from qccl_bench.kernel_fuzz import Case, c_reference, run_machine
    body = ("const unsigned char *b = (const unsigned char *)x; "
            "unsigned v = (unsigned)s0, t = (unsigned)x[tid], w = 0u; "
            "for (unsigned j = 0u; j < ((unsigned)((int)((unsigned)x[v & 7u] << (v & 31u)) >> (b[t & 31u] & 31u)) "
            "& 3u); j++) { if (v == 1u) break; if (w != v) w = v << ((v ? b[w & 31u] : 0u) & 31u); "
            "else v = v / 8u; } out[tid] = (int)v;")
    case = Case(body, 8, 1563415484, -1473837523,
                [-9, 3, 267009802, -744289610, -216659867, 1359210019, -654133212, -773622247], [0] * 8)
    with tempfile.TemporaryDirectory() as d:
        (expect,) = c_reference([case], d)
    try:
        got = run_machine(case)
    except MachineError as e:
        assert "the ROM holds" in str(e) or "registers per lane" in str(e), e
    else:
        assert got == expect


@needs_gcc
def test_the_fuzzer_counts_an_internal_error_and_goes_on(monkeypatch, capsys):
    """The crash above stopped a whole fuzzer run (bench/kernel_fuzz.py). Now an exception other than a refusal, and
    the lowering's "internal: ..." MachineError, is counted with its program and printed, the run goes on, and the
    exit status is 1; the seed still gives the same programs."""
    import numpy as np
    from qwengpu.isa import MachineError
    from qccl_bench import kernel_fuzz
    seen = []

    def machine(case):
        seen.append(case)
        if len(seen) == 2:
            raise KeyError(12)
        if len(seen) == 3:
            raise MachineError("internal: a bug")
        raise MachineError("kernel k needs 40 blocks; the ROM holds 32")

    monkeypatch.setattr(kernel_fuzz, "run_machine", machine)
    report = kernel_fuzz.fuzz(4, seed=777, batch=4, verbose=True, shared=0.5, narrow=True, atomics=True)
    assert report["tried"] == 4 and report["ran"] == 0
    assert [case for case, _ in report["internal_errors"]] == seen[1:3]
    assert report["internal_errors"][0][1].startswith("KeyError: 12")
    assert report["refused"] == {"blocks; the ROM holds": 2}
    rng = np.random.default_rng(777)
    assert seen == [kernel_fuzz.make_case(rng, 0.5, True, True) for _ in range(4)]
    out = capsys.readouterr().out
    assert out.count("INTERNAL ERROR") == 2 and "__global__ void k" in out
    seen.clear()
    assert kernel_fuzz.main(["--programs", "3", "--seed", "777", "--shared", "0.5", "--narrow", "--atomics"]) == 1
    assert "internal errors 2" in capsys.readouterr().out


WIDENED_ARGUMENT = '''extern "C" __global__ void k(int *out, int s0, int s1) {{
    out[threadIdx.x] = (int)({expr}); }}'''


@needs_nvrtc
@pytest.mark.parametrize("expr, reference", [
    # NVRTC reads (long long)s1 as ld.param.s32 into a 64-bit register, which sign-extends: the lowering kept the
    # parameter's low word with a zero high word, so 64-bit arithmetic on it folded wrong (fuzzer --wide, seed 8).
    ("(unsigned)(((unsigned long long)(int)(unsigned)s1) % 18ull)", lambda s0, s1: (s1 % 2**64) % 18),
    ("(unsigned)(signed char)233u << ((unsigned)((unsigned long long)(int)(unsigned)s1 >> 48) & 31u)",
     lambda s0, s1: -23 << (((s1 % 2**64) >> 48) & 31)),
    ("(unsigned)((7447386723009024134ull | (unsigned long long)(int)(unsigned)s0) >> 5)",
     lambda s0, s1: (7447386723009024134 | (s0 % 2**64)) >> 5),
    ("(unsigned)((long long)s0 * 3 >> 33)", lambda s0, s1: (s0 * 3) >> 33),
])
@pytest.mark.parametrize("s0, s1", [(-467568874, -602176600), (1357598101, -127340659), (5, 7)])
def test_a_signed_argument_widened_to_64_bits_keeps_its_sign(expr, reference, s0, s1):
    """Python's integers are the reference: the C expression's value, as a 32-bit word."""
    got = run(WIDENED_ARGUMENT.format(expr=expr), 4, [0, s0, s1], {}, (0, 4))
    expect = (reference(s0, s1) + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(got, [expect] * 4)


SELECT_AFTER_BRANCH_PTX = HEADER + """
.visible .entry k(.param .u64 k_param_0)
{
    .reg .pred %p<3>; .reg .b32 %r<8>; .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [k_param_0];
    mov.u32 %r1, %tid.x;
    setp.eq.s32 %p2, %r1, 0;
    mov.u32 %r6, 58;
    @%p2 bra $L__skip;
    selp.u32 %r7, 1, 0, %p2;
    add.s32 %r6, %r7, %r1;
    @!%p2 bra $L__skip;
    selp.u32 %r6, 9, 7, %p2;
$L__skip:
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r6;
    ret;
}
"""


def test_a_select_whose_condition_the_branch_before_it_decided():
    """NVRTC's selp of p after a branch on p (fuzzer --floats --wide, seed 9): both choices were emitted and the
    lowering stopped with "internal: emitting under a false predicate"; where the block's predicate decides the
    condition the select is one move (here 0: tid + 0, and tid 0 keeps 58)."""
    got = run(SELECT_AFTER_BRANCH_PTX, 6, [0], {}, (0, 6))
    np.testing.assert_array_equal(got, [58, 1, 2, 3, 4, 5])


WIDENED = r"""
extern "C" __global__ void k(int *out, int which)
{
    unsigned t = threadIdx.x;
    if (which == 0)         // zero-extended: thread 0's word is 2^32 - 1, so j + 1 is 2^32 there
        out[t] = (int)(((unsigned long long)(t - 1u) + 1) >> 32);
    else if (which == 1)    // sign-extended: -1 on thread 0
        out[t] = (int)((long long)(int)(t - 1u) >> 32);
    else if (which == 2)    // zero-extended words of one window: t + 5
        out[t] = (int)((((unsigned long long)(t + 5u) + 3) >> 1) & 0xFFFF);
    else if (which == 3)    // a wide product of a word thread 0 holds as 2^32 - 1: (2^34 - 4 + 8) >> 32 is 4
        out[t] = (int)((((unsigned long long)(t - 1u) * 4) + 8) >> 32);
    else if (which == 4)    // 64-bit sums of a sign-extended index: their high words are the sign's copies
        out[t] = (int)(((long long)(int)t - 5) >> 32) * 100 + (int)((((long long)(int)t - 2) * 3) >> 33);
    else                    // ... shifted down as unsigned past the low word
        out[t] = (int)((unsigned long long)((long long)(int)t - 5) >> 40);
}
"""


@needs_nvrtc
def test_a_thread_index_widened_keeps_its_words_value():
    """``(unsigned long long)(threadIdx.x - 1u)`` is 2^32 - 1 on thread 0 and 0 on thread 1: the constant
    propagation had kept the 32-bit thread-index value as it was (-1 on thread 0), so ``(j + 1) >> 32`` was
    lowered as 0 on every thread where a GPU gives 1 on thread 0 (and a wide product of it, ``* 4``, as if of -1).
    Now such a widening is no thread-index value (each thread's word lies in a different window of 2^32): the
    shift of its high word, refused in one word, runs with the sum kept as a pair of words (lowering.pairs); a
    sign-extension and a widening of words in one window stay exact, and sums of them are values whose high word
    the lowering knows."""
    t = np.arange(4)
    words = (t - 1) % 2**32         # each thread's word of t - 1u
    np.testing.assert_array_equal(run(WIDENED, 4, [0, 0], {0: [0] * 4}, (0, 4)), (words + 1) >> 32)
    # mul.wide.u32 of the word too: it multiplies each thread's word, not -1
    np.testing.assert_array_equal(run(WIDENED, 4, [0, 3], {0: [0] * 4}, (0, 4)), (words * 4 + 8) >> 32)
    np.testing.assert_array_equal(run(WIDENED, 4, [0, 1], {0: [0] * 4}, (0, 4)),
                                  (np.int64(t) - 1) >> 32)
    np.testing.assert_array_equal(run(WIDENED, 4, [0, 2], {0: [0] * 4}, (0, 4)),
                                  ((t + 5 + 3) >> 1) & 0xFFFF)
    np.testing.assert_array_equal(run(WIDENED, 4, [0, 4], {0: [0] * 4}, (0, 4)),
                                  ((t - 5) >> 32) * 100 + (((t - 2) * 3) >> 33))
    np.testing.assert_array_equal(run(WIDENED, 4, [0, 5], {0: [0] * 4}, (0, 4)),
                                  ((t - 5).astype(np.uint64) >> np.uint64(40)).astype(np.int64))
