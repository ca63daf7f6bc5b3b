"""Carry chains (qwengpu.lowering.carries): PTX's add.cc / addc, sub.cc / subc and mad.lo.cc / madc.hi in inline
assembly, the way multi-word arithmetic is written, against Python's integers."""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import Device, toolchain

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

WIDE = r"""
// 128-bit sums, differences and the 128-bit product of two 64-bit values, a word at a time
extern "C" __global__ void words(const unsigned *x, const unsigned *y, unsigned *sum, unsigned *diff, unsigned *prod)
{
    int i = threadIdx.x;
    const unsigned *a = x + 4 * i, *b = y + 4 * i;
    unsigned s0, s1, s2, s3, d0, d1, d2, d3, p0, p1, p2, p3;
    asm("add.cc.u32 %0, %4, %8;\n\taddc.cc.u32 %1, %5, %9;\n\taddc.cc.u32 %2, %6, %10;\n\taddc.u32 %3, %7, %11;"
        : "=r"(s0), "=r"(s1), "=r"(s2), "=r"(s3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]));
    asm("sub.cc.u32 %0, %4, %8;\n\tsubc.cc.u32 %1, %5, %9;\n\tsubc.cc.u32 %2, %6, %10;\n\tsubc.u32 %3, %7, %11;"
        : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]));
    asm("mul.lo.u32 %0, %4, %6;\n\t"
        "mul.hi.u32 %1, %4, %6;\n\t"
        "mad.lo.cc.u32 %1, %4, %7, %1;\n\t"
        "madc.hi.u32 %2, %4, %7, 0;\n\t"
        "mad.lo.cc.u32 %1, %5, %6, %1;\n\t"
        "madc.hi.cc.u32 %2, %5, %6, %2;\n\t"
        "madc.hi.u32 %3, %5, %7, 0;\n\t"
        "mad.lo.cc.u32 %2, %5, %7, %2;\n\t"
        "addc.u32 %3, %3, 0;"
        : "=r"(p0), "=r"(p1), "=r"(p2), "=r"(p3) : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(b[1]));
    unsigned *s = sum + 4 * i, *d = diff + 4 * i, *p = prod + 4 * i;
    s[0] = s0; s[1] = s1; s[2] = s2; s[3] = s3;
    d[0] = d0; d[1] = d1; d[2] = d2; d[3] = d3;
    p[0] = p0; p[1] = p1; p[2] = p2; p[3] = p3;
}

// the same sum in two 64-bit halves, and a carry only some lanes compute (a guard on the chain's start)
extern "C" __global__ void halves(const unsigned long long *x, const unsigned long long *y,
                                  unsigned long long *sum, unsigned *carried)
{
    int i = threadIdx.x;
    unsigned long long lo, hi;
    unsigned c;
    asm("add.cc.u64 %0, %2, %4;\n\taddc.u64 %1, %3, %5;"
        : "=l"(lo), "=l"(hi) : "l"(x[2 * i]), "l"(x[2 * i + 1]), "l"(y[2 * i]), "l"(y[2 * i + 1]));
    asm("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %1, 0;\n\tmov.u32 %0, 0;\n\tadd.cc.u32 %0, %0, 0;\n\t"
        "@p add.cc.u32 %0, %2, %3;\n\taddc.u32 %0, 0, 0;\n\t}"
        : "=r"(c) : "r"(i & 1), "r"((unsigned)x[2 * i]), "r"((unsigned)y[2 * i]));
    sum[2 * i] = lo;
    sum[2 * i + 1] = hi;
    carried[i] = c;
}
"""
MASK = (1 << 128) - 1
EDGES = [(MASK, 1), (0, 1), (1 << 64, (1 << 64) - 1), ((1 << 64) - 1, (1 << 64) - 1), (MASK, MASK)]


def _words(values: list[int]) -> np.ndarray:
    return np.array([(v >> (32 * j)) & 0xFFFFFFFF for v in values for j in range(4)], np.uint32)


def _values(words: np.ndarray) -> list[int]:
    return [sum(int(w) << (32 * j) for j, w in enumerate(row)) for row in words.reshape(-1, 4)]


@pytest.fixture(scope="module")
def device():
    dev = Device()
    return dev, dev.load_kernel(WIDE, "words"), dev.load_kernel(WIDE, "halves")


@pytest.fixture
def alloc(device):
    """Allocations freed after the test (the module's tests share 127 words)."""
    dev, taken = device[0], []
    yield lambda words: taken.append(dev.alloc(words)) or taken[-1]
    for pointer in taken:
        dev.free(pointer)


@pytest.mark.parametrize("seed", range(4))
def test_sums_differences_and_products_a_word_at_a_time(device, alloc, seed):
    """Each chain's carries ripple across the four words as Python's integers say: sums mod 2^128 (all ones plus
    one wraps to 0), differences mod 2^128 (0 - 1 borrows through every word), and the 128-bit product of two 64-bit
    values from mad.lo.cc / madc.hi.cc."""
    dev, words, _ = device
    rng = np.random.default_rng(seed)
    x, y = [[int.from_bytes(rng.bytes(16), "little") for _ in range(2)] for _ in range(2)]
    x[0], y[0] = EDGES[seed]
    pointers = [alloc(8) for _ in range(5)]
    dev.write(pointers[0], _words(x))
    dev.write(pointers[1], _words(y))
    dev.launch(words, threads=2, args=pointers)
    total, difference, product = (_values(dev.read(p, 8).view(np.uint32)) for p in pointers[2:])
    low = (1 << 64) - 1
    assert total == [(a + b) & MASK for a, b in zip(x, y)]
    assert difference == [(a - b) & MASK for a, b in zip(x, y)]
    assert product == [(a & low) * (b & low) for a, b in zip(x, y)]


def test_64_bit_chains_and_a_guarded_carry(device, alloc):
    """add.cc.u64 / addc.u64 (the pairs stage keeps their values as pairs of words); a carry written under a guard
    only on the lanes that take it (the others keep the 0 before it)."""
    dev, _, halves = device
    x = [(1 << 128) - 1, (1 << 64) - 1 + (5 << 64)]
    y = [1, 0xFFFFFFFF]
    pointers = [alloc(8), alloc(8), alloc(8), alloc(2)]
    dev.write(pointers[0], _words(x))
    dev.write(pointers[1], _words(y))
    dev.launch(halves, threads=2, args=pointers)
    assert _values(dev.read(pointers[2], 8).view(np.uint32)) == [(a + b) & MASK for a, b in zip(x, y)]
    low_words = [a & 0xFFFFFFFF for a in x], [b & 0xFFFFFFFF for b in y]
    want = [(i & 1) * ((low_words[0][i] + low_words[1][i]) >> 32) for i in range(2)]
    assert dev.read(pointers[3], 2).tolist() == want


def test_a_carry_chain_without_an_integer_type_is_refused_naming_it():
    from qwengpu import MachineError
    from qwengpu.lowering import carries
    from qwengpu.ptx import Instruction, Kernel, Reg
    add = Instruction("add.cc.f32", (Reg("%f3"), Reg("%f1"), Reg("%f2")), None, False, 7, "add.cc.f32 %f3, %f1, %f2")
    with pytest.raises(MachineError, match=r"PTX line 7: a carry-chain instruction takes one of the integer types "
                                           r"\.u32, \.s32, \.u64, \.s64: add\.cc\.f32"):
        carries.rewrite(Kernel("k", body=[add], registers={"%f": "f32"}))
