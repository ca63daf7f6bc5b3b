"""64-bit integers in memory and the values computed from them (qwengpu.lowering.pairs): ``long long`` / ``size_t`` /
``uint64_t`` arrays as two words each, low word first, and loaded values kept as pairs of words through add, sub,
mul, logic, shifts, compares, min / max; checked against numpy's int64 / uint64 (a GPU's little-endian layout and
64-bit arithmetic, wrapping as it does); ``atomicAdd`` on an ``unsigned long long`` across the low word's carry, and
the other 64-bit atomics and their old values against a replay in the lanes' order; ``__popcll`` and its kin against
Python's integers; and what the machine cannot keep (pointers in memory) refused by name."""
from __future__ import annotations

import re

import numpy as np
import pytest

from qwengpu import Device, MachineError, toolchain
from qwengpu.ptx import Instruction

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

SOURCE = r"""
extern "C" __global__ void index_minus(long long *x, int n, int k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i - k;
}

extern "C" __global__ void products(const int *a, const unsigned *b, long long *p, unsigned long long *q, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        p[i] = (long long)a[i] * a[i + 1];
        q[i] = (unsigned long long)b[i] * b[i + 1];
    }
}

extern "C" __global__ void copy_and_split(const unsigned long long *x, unsigned long long *y, int *low,
                                          unsigned *top, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned long long v = x[i];
        y[n - 1 - i] = v;
        low[i] = (int)v;
        top[i] = (unsigned)(v >> 40);
    }
}

extern "C" __global__ void join_words(const unsigned *w, unsigned long long *out)
{
    out[threadIdx.x] = ((unsigned long long)w[2 * threadIdx.x + 1] << 32) | w[2 * threadIdx.x];
}

extern "C" __global__ void count_even(const int *x, unsigned long long *count, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] % 2 == 0) atomicAdd(count, 1ULL);
}

extern "C" __global__ void sum_widened(const int *x, unsigned long long *sum, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(sum, (unsigned long long)(long long)x[i]);
}

extern "C" __global__ void shared_pairs(long long *out)
{
    __shared__ long long s[4];
    s[threadIdx.x] = (long long)threadIdx.x - 2;
    __syncthreads();
    out[threadIdx.x] = s[3 - threadIdx.x];
}

// CUDA by Example's histogram: an int index compared with a long size
extern "C" __global__ void histo(const unsigned char *buffer, long size, unsigned int *histo)
{
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    int stride = blockDim.x * gridDim.x;
    while (i < size) {
        atomicAdd(&histo[buffer[i] & 7], 1);
        i += stride;
    }
}
"""


def words(dev: Device, p: int, n: int, dtype) -> np.ndarray:
    """n 64-bit values read back from 2n words."""
    return dev.read(p, 2 * n).view(dtype)


@pytest.mark.parametrize("k", [0, 2, 7])
def test_a_long_long_array_holds_each_value_in_two_words(k):
    dev = Device()
    x = dev.alloc(16)
    dev.launch(dev.load_kernel(SOURCE, "index_minus"), threads=4, blocks=2, args=[x, 7, k])
    want = np.zeros(8, np.int64)
    want[:7] = np.arange(7) - k
    assert words(dev, x, 8, np.int64).tolist() == want.tolist()


def test_products_of_words_are_stored_whole():
    dev = Device()
    a = np.array([-70000, 90000, 123456, -1, 5], np.int32)
    b = np.array([0xFFFFFFFF, 0xFFFFFFFE, 3, 0x80000000, 7], np.uint32)
    pa, pb, p, q = dev.alloc(5), dev.alloc(5), dev.alloc(8), dev.alloc(8)
    dev.write(pa, a)
    dev.write(pb, b)
    dev.launch(dev.load_kernel(SOURCE, "products"), threads=4, args=[pa, pb, p, q, 4])
    assert words(dev, p, 4, np.int64).tolist() == (a[:4].astype(np.int64) * a[1:].astype(np.int64)).tolist()
    assert words(dev, q, 4, np.uint64).tolist() == (b[:4].astype(np.uint64) * b[1:].astype(np.uint64)).tolist()


def test_loaded_values_copy_truncate_and_shift():
    dev = Device()
    v = np.array([2**64 - 1, 1 << 40, 0x123456789ABCDEF0, 5], np.uint64)
    x, y, low, top = dev.alloc(8), dev.alloc(8), dev.alloc(4), dev.alloc(4)
    dev.write(x, v.view(np.uint32))
    dev.launch(dev.load_kernel(SOURCE, "copy_and_split"), threads=4, args=[x, y, low, top, 4])
    assert words(dev, y, 4, np.uint64).tolist() == v[::-1].tolist()
    assert dev.read(low, 4).tolist() == v.astype(np.uint32).view(np.int32).tolist()
    assert dev.read(top, 4).view(np.uint32).tolist() == (v >> np.uint64(40)).astype(np.uint32).tolist()


def test_two_words_joined_by_nvrtc_s_bfi_are_stored_whole():
    dev = Device()
    w = (np.arange(8, dtype=np.uint64) * 0x11111111 + 0x80000000).astype(np.uint32)
    pw, out = dev.alloc(8), dev.alloc(8)
    dev.write(pw, w)
    dev.launch(dev.load_kernel(SOURCE, "join_words"), threads=4, args=[pw, out])
    assert words(dev, out, 4, np.uint64).tolist() == w.view(np.uint64).tolist()


@pytest.mark.parametrize("start", [0, 2**32 - 3, 2**64 - 2])
def test_an_atomic_add_of_a_64_bit_count_carries_into_the_high_word(start):
    """From 2^32 - 3 the low word wraps on the third add; from 2^64 - 2 the count wraps as a GPU's does."""
    dev = Device()
    data = np.arange(10, dtype=np.int32) * 7 + 2
    x, count = dev.alloc(10), dev.alloc(2)
    dev.write(x, data)
    dev.write(count, np.array([start], np.uint64).view(np.uint32))
    dev.launch(dev.load_kernel(SOURCE, "count_even"), threads=4, blocks=3, args=[x, count, 10])
    even = int((data % 2 == 0).sum())
    assert even > 3
    assert int(words(dev, count, 1, np.uint64)[0]) == (start + even) % 2**64


def test_an_atomic_add_of_sign_extended_words_is_their_64_bit_sum():
    dev = Device()
    data = np.array([5, -3, 2**31 - 1, -2**31, 7, -1, 100, -100], np.int32)
    x, total = dev.alloc(8), dev.alloc(2)
    dev.write(x, data)
    dev.launch(dev.load_kernel(SOURCE, "sum_widened"), threads=4, blocks=2, args=[x, total, 8])
    assert int(words(dev, total, 1, np.uint64)[0]) == int(data.astype(np.int64).sum()) % 2**64


def test_shared_long_longs():
    dev = Device()
    out = dev.alloc(8)
    dev.launch(dev.load_kernel(SOURCE, "shared_pairs"), threads=4, args=[out])
    assert words(dev, out, 4, np.int64).tolist() == [1, 0, -1, -2]


@pytest.mark.parametrize("size", [0, 5, 21, 24, -1])
def test_an_int_index_compared_with_a_long_size(size):
    dev = Device()
    data = np.random.default_rng(3).integers(0, 256, 24, dtype=np.uint8)
    buffer, bins = dev.alloc(6), dev.alloc(8)
    dev.write(buffer, data.view(np.int32))
    dev.launch(dev.load_kernel(SOURCE, "histo"), threads=4, blocks=2, args=[buffer, size, bins])
    assert dev.read(bins, 8).tolist() == np.bincount(data[:max(size, 0)] & 7, minlength=8).tolist()


PAIRS = r"""
extern "C" __global__ void increment(long long *x) { x[threadIdx.x] += 1; }

extern "C" __global__ void arithmetic(const long long *x, const unsigned long long *y, long long *out)
{
    int i = threadIdx.x;
    long long a = x[i];
    unsigned long long b = y[i];
    out[8 * i + 0] = a * 3 + (long long)b;
    out[8 * i + 1] = a - (long long)b;
    out[8 * i + 2] = -a ^ (long long)(b << 7);
    out[8 * i + 3] = (long long)(b >> 33) | (a >> 13);
    out[8 * i + 4] = a * (long long)b;
    out[8 * i + 5] = (a < (long long)b) + 2 * (b < (unsigned long long)a) + 4 * (a == (long long)b) + 8 * (a >= 0);
    out[8 * i + 6] = max(a, (long long)b) - min(a, (long long)b);
    out[8 * i + 7] = (a << 40) + (long long)(b >> 63) + (~a & 0xFFFF0000FFFFll);
}

extern "C" __global__ void serial_sum(const long long *x, long long *out, int n)
{
    long long s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    out[0] = s;
    out[1] = s > 0 ? s : -s;
}

// division and remainder by constants: NVRTC's mul.hi of 64-bit values by a magic number
extern "C" __global__ void divide(const long long *x, long long *q, unsigned long long *u)
{
    int i = threadIdx.x;
    q[2 * i] = x[i] / 10;
    q[2 * i + 1] = x[i] % 7;
    u[2 * i] = (unsigned long long)x[i] / 1000003ull;
    u[2 * i + 1] = (unsigned long long)x[i] % 10ull;
}

// a loaded 64-bit value as an index, into words and into bytes
extern "C" __global__ void gather(const long long *index, const int *words, const unsigned char *bytes, int *out)
{
    out[threadIdx.x] = words[index[threadIdx.x]] + bytes[index[threadIdx.x] + 1];
}
"""

WIDE = np.array([0, 1, -1, 2**32 - 1, -2**32, 2**31, -2**63, 2**63 - 1, 0x123456789A, -987654321987], np.int64)


def test_an_increment_of_a_loaded_long_long_carries_into_its_high_word():
    dev = Device()
    v = np.array([2**32 - 1, -1, 2**63 - 1, 5], np.int64)
    x = dev.alloc(8)
    dev.write(x, v.view(np.uint32))
    dev.launch(dev.load_kernel(PAIRS, "increment"), threads=4, args=[x])
    assert words(dev, x, 4, np.int64).tolist() == (v.view(np.uint64) + np.uint64(1)).view(np.int64).tolist()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_loaded_values_computed_as_pairs_equal_numpy_s_int64(seed):
    rng = np.random.default_rng(seed)
    a = rng.choice(WIDE, 2)
    b = rng.choice(WIDE, 2).view(np.uint64)
    dev = Device()
    x, y, out = dev.alloc(4), dev.alloc(4), dev.alloc(32)
    dev.write(x, a.view(np.uint32))
    dev.write(y, b.view(np.uint32))
    dev.launch(dev.load_kernel(PAIRS, "arithmetic"), threads=2, args=[x, y, out])
    got = words(dev, out, 16, np.int64).reshape(2, 8)
    with np.errstate(over="ignore"):
        bs = b.view(np.int64)
        want = np.stack([a * 3 + bs, a - bs, -a ^ (b << np.uint64(7)).view(np.int64),
                         (b >> np.uint64(33)).view(np.int64) | (a >> 13), a * bs,
                         (a < bs) + 2 * (b < a.view(np.uint64)) + 4 * (a == bs) + 8 * (a >= 0),
                         np.maximum(a, bs) - np.minimum(a, bs),
                         (a << 40) + (b >> np.uint64(63)).view(np.int64) + (~a & 0xFFFF0000FFFF)], axis=1)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("seed", [0, 1])
def test_division_and_remainder_by_constants_of_loaded_values(seed):
    """C's truncating division of the GPU's 64-bit integers, as Python's integers compute it."""
    a = np.random.default_rng(seed).choice(WIDE, 2)
    dev = Device()
    x, q, u = dev.alloc(4), dev.alloc(8), dev.alloc(8)
    dev.write(x, a.view(np.uint32))
    kernel = dev.load_kernel(PAIRS, "divide")
    assert "mul.hi.s64" in kernel.source and "mul.hi.u64" in kernel.source
    dev.launch(kernel, threads=2, args=[x, q, u])

    def c_div(n: int, d: int) -> int:
        return abs(n) // d * (1 if n >= 0 else -1)
    signed = [v for n in map(int, a) for v in (c_div(n, 10), n - c_div(n, 7) * 7)]
    unsigned = [v for n in map(int, a.view(np.uint64)) for v in (n // 1000003, n % 10)]
    assert words(dev, q, 4, np.int64).tolist() == signed
    assert words(dev, u, 4, np.uint64).tolist() == unsigned


@pytest.mark.parametrize("n", [0, 1, 5, 10])
def test_a_serial_sum_of_long_longs(n):
    dev = Device()
    x, out = dev.alloc(20), dev.alloc(2 * 2)
    dev.write(x, WIDE.view(np.uint32))
    dev.launch(dev.load_kernel(PAIRS, "serial_sum"), threads=1, args=[x, out, n])
    with np.errstate(over="ignore"):
        total = WIDE[:n].sum(dtype=np.int64)
    assert words(dev, out, 2, np.int64).tolist() == [total, total if total > 0 else -total]


def test_a_loaded_long_long_indexes_words_and_bytes():
    dev = Device()
    index = np.array([3, 0, 6, 1], np.int64)
    data = np.arange(8, dtype=np.int32) * 10
    raw = np.arange(32, dtype=np.uint8) * 3
    pi, pw, pb, out = dev.alloc(8), dev.alloc(8), dev.alloc(8), dev.alloc(4)
    dev.write(pi, index.view(np.uint32))
    dev.write(pw, data)
    dev.write(pb, raw.view(np.int32))
    dev.launch(dev.load_kernel(PAIRS, "gather"), threads=4, args=[pi, pw, pb, out])
    assert dev.read(out, 4).tolist() == (data[index] + raw[index + 1]).tolist()


# found by the fuzzer (--pairs, seed 24), as it drew it: the 64-bit register compared is written by a 64-bit load's
# xor on one path and by a word loaded into it on the other (ld.global.u32 %rd20), whose high word is 0; a first
# version of the stage loaded a second word there too
EITHER = r"""
extern "C" __global__ void k(int *out, const int *x, int s0, int s1) {
  const unsigned tid = threadIdx.x;
  unsigned v0 = tid;
  out[tid] = (int)((unsigned)((long long)((unsigned long long)(unsigned)out[tid]) <= (long long)(((unsigned)x[tid] & 1u
      ? (unsigned long long)(unsigned)x[(v0 & 7u)]
      : ((unsigned long long)(unsigned)s1
         ^ (unsigned long long)((const unsigned long long *)x)[(unsigned)x[tid] & 3u])))));
}
"""


def test_a_register_a_64_bit_load_and_a_word_load_both_write():
    x = np.array([-8, -11, -731421658, 1617350997, 106713776, 25156169, -350733901, -1506043296], np.int32)
    s1 = -1665291646 & 0xFFFFFFFF
    out0 = np.array([-73, 7, 61, 14], np.int32)
    dev = Device()
    px, out = dev.alloc(8), dev.alloc(4)
    dev.write(px, x)
    dev.write(out, out0)
    kernel = dev.load_kernel(EITHER, "k")
    assert re.search(r"ld\.global\.u64\s+%rd", kernel.source) and re.search(r"ld\.global\.u32\s+%rd", kernel.source)
    dev.launch(kernel, threads=4, args=[out, px, 0, s1])
    u, wide = x.view(np.uint32), x.view(np.uint64)
    v = [int(u[t]) if u[t] & 1 else s1 ^ int(wide[u[t] & 3]) for t in range(4)]
    want = [int(int(out0[t]) & 0xFFFFFFFF <= (b - (1 << 64) if b >> 63 else b)) for t, b in enumerate(v)]
    assert want == [0, 1, 1, 1] and dev.read(out, 4).tolist() == want


# 64-bit values the lowering cannot hold in one word though none is loaded: a sum of a product and a word, a
# product shifted down by 40, a counter read after a loop whose last step passes 2^32 - 1. Refused in one word, the
# kernel is lowered again with them as pairs (lowering.lower).
COMPUTED = r"""
extern "C" __global__ void wide_sums(const int *a, const unsigned *b, unsigned *hi, long long *out)
{
    int i = threadIdx.x;
    long long s = (long long)a[i] * a[i + 1] + b[i];
    unsigned long long u = (unsigned long long)b[i] * b[i] + ((unsigned long long)b[i + 1] << 20);
    hi[i] = (unsigned)(u >> 40);
    hi[i + 4] = s < (long long)u;
    out[i] = s;
}

// a multi-word product's running carry: mad.wide with a 64-bit addend (CUDA's sinf reduces a huge argument so)
extern "C" __global__ void multiword(const unsigned *digits, const unsigned *m, const int *sm, unsigned *out,
                                     int *signed_out)
{
    int t = threadIdx.x;
    unsigned long long carry = 0;
    long long s = 0;
    #pragma unroll 1
    for (int k = 0; k < 4; ++k) {
        // (as sinf's PTX writes it; NVRTC writes C's product and sum as mul.wide and add)
        asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(carry) : "r"(digits[k]), "r"(m[t]), "l"(carry >> 32));
        out[5 * t + k] = (unsigned)carry;
        asm("mad.wide.s32 %0, %1, %2, %3;" : "=l"(s) : "r"((int)digits[k]), "r"(sm[t]), "l"(s >> 32));
        signed_out[5 * t + k] = (int)s;
    }
    out[5 * t + 4] = (unsigned)(carry >> 32);
    signed_out[5 * t + 4] = (int)(s >> 32);
}

// NVRTC's bfi.b64 at other places than 32, 32 (``(u64)x << 11 | y`` of values whose bits cannot overlap)
extern "C" __global__ void inserts(const unsigned long long *a, const unsigned long long *b, unsigned long long *out)
{
    int i = threadIdx.x;
    unsigned long long r0, r1, r2, r3;
    asm("bfi.b64 %0, %1, %2, 11, 32;" : "=l"(r0) : "l"(a[i]), "l"(b[i]));
    asm("bfi.b64 %0, %1, %2, 40, 24;" : "=l"(r1) : "l"(a[i]), "l"(b[i]));
    asm("bfi.b64 %0, %1, %2, 0, 64;" : "=l"(r2) : "l"(a[i]), "l"(b[i]));
    asm("bfi.b64 %0, %1, %2, 60, 20;" : "=l"(r3) : "l"(a[i]), "l"(b[i]));      // past bit 63: cut there
    out[4 * i] = r0;
    out[4 * i + 1] = r1;
    out[4 * i + 2] = r2;
    out[4 * i + 3] = r3;
}

extern "C" __global__ void leap_after(int *out, unsigned long long step, unsigned long long n)
{
    unsigned long long i = threadIdx.x;
    for (; i < n; i += step) out[threadIdx.x] += 1;
    out[threadIdx.x + 4] = (int)(i >> 32);
    out[threadIdx.x + 8] = (int)i;
}
"""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_computed_64_bit_values_the_lowering_refused_in_one_word_run_as_pairs(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2**31, 2**31, 5).astype(np.int32)
    b = rng.integers(0, 2**32, 5, dtype=np.uint64).astype(np.uint32)
    dev = Device()
    pa, pb, hi, out = dev.alloc(5), dev.alloc(5), dev.alloc(8), dev.alloc(8)
    dev.write(pa, a)
    dev.write(pb, b)
    dev.launch(dev.load_kernel(COMPUTED, "wide_sums"), threads=4, args=[pa, pb, hi, out])
    s = [int(a[i]) * int(a[i + 1]) + int(b[i]) for i in range(4)]
    u = [(int(b[i]) ** 2 + (int(b[i + 1]) << 20)) % 2**64 for i in range(4)]
    signed_u = [v - 2**64 if v >> 63 else v for v in u]
    assert dev.read(hi, 8).view(np.uint32).tolist() == [v >> 40 for v in u] + [int(x < y) for x, y in zip(s, signed_u)]
    assert words(dev, out, 4, np.int64).tolist() == s


@pytest.mark.parametrize("seed", [0, 1])
def test_a_multi_word_product_s_running_carry(seed):
    """c = digit * m + (c >> 32) over four words (mad.wide.u32 / .s32 with a 64-bit addend, in a loop): each low
    word and the last carry against Python's integers, unsigned and signed (an arithmetic shift of the carry)."""
    rng = np.random.default_rng(seed)
    digits = rng.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32)
    digits[seed] = 0xFFFFFFFF                       # the largest digit: the carry's high word at its largest
    m = np.array([0xFFFFFFFF, rng.integers(1, 2**32)], np.uint32)
    sm = np.array([-2**31, rng.integers(-2**31, 2**31)], np.int32)
    dev = Device()
    pd, pm, psm, out, signed_out = dev.alloc(4), dev.alloc(2), dev.alloc(2), dev.alloc(10), dev.alloc(10)
    for p, v in ((pd, digits), (pm, m), (psm, sm)):
        dev.write(p, v)
    dev.launch(dev.load_kernel(COMPUTED, "multiword"), threads=2, args=[pd, pm, psm, out, signed_out])
    want, want_signed = [], []
    for t in range(2):
        carry = s = 0
        for k in range(4):
            carry = int(digits[k]) * int(m[t]) + (carry >> 32)
            s = int(np.int32(digits[k].view(np.int32))) * int(sm[t]) + (s >> 32)     # Python's >> is arithmetic
            want.append(carry & 0xFFFFFFFF)
            want_signed.append(int(np.uint32(s & 0xFFFFFFFF).view(np.int32)))
        want.append(carry >> 32)
        want_signed.append(int(np.uint32((s >> 32) & 0xFFFFFFFF).view(np.int32)))
    assert dev.read(out, 10).view(np.uint32).tolist() == want
    assert dev.read(signed_out, 10).view(np.int32).tolist() == want_signed


def test_a_bit_field_inserted_into_a_64_bit_value():
    """bfi.b64 at positions 11, 40, 0 and 60 (a field running past bit 63 cut there) of loaded values, against
    Python's integers: b with the field's bits replaced by a's low bits."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2**64, 2, dtype=np.uint64, endpoint=False)
    b = rng.integers(0, 2**64, 2, dtype=np.uint64, endpoint=False)
    dev = Device()
    pa, pb, out = dev.alloc(4), dev.alloc(4), dev.alloc(16)
    dev.write(pa, a.view(np.uint32))
    dev.write(pb, b.view(np.uint32))
    dev.launch(dev.load_kernel(COMPUTED, "inserts"), threads=2, args=[pa, pb, out])
    want = []
    for x, y in zip(map(int, a), map(int, b)):
        for pos, size in ((11, 32), (40, 24), (0, 64), (60, 20)):
            mask = ((1 << size) - 1) << pos & (2**64 - 1)
            want.append(y & ~mask | x << pos & mask)
    assert words(dev, out, 8, np.uint64).tolist() == want


@pytest.mark.parametrize("step, n", [(2**31 + 5, 2**32 - 1), (3, 10), (2**32 - 1, 2**31)])
def test_a_counter_read_after_a_loop_whose_last_step_carries(step, n):
    dev = Device()
    out = dev.alloc(12)
    dev.launch(dev.load_kernel(COMPUTED, "leap_after"), threads=4, args=[out, step, n])
    finals = []
    for t in range(4):
        i = t
        while i < n:
            i += step
        finals.append(i)
    trips = [max(0, -(-(n - t) // step)) for t in range(4)]
    assert dev.read(out, 12).view(np.uint32).tolist() == trips + [f >> 32 for f in finals] + [f & 0xFFFFFFFF
                                                                                                 for f in finals]


DIVISION = r"""
extern "C" __global__ void quotients(const long long *x, const long long *y, long long *q, unsigned long long *u)
{
    int i = threadIdx.x;
    q[2 * i] = x[i] / y[i];
    q[2 * i + 1] = x[i] % y[i];
    u[2 * i] = (unsigned long long)x[i] / (unsigned long long)y[i];
    u[2 * i + 1] = (unsigned long long)x[i] % (unsigned long long)y[i];
}

// NVRTC counts these loops in 64 bits: a trip count (end - start - 1) / stride, its div.u64 where a word is not enough
extern "C" __global__ void long_grid_stride(const int *x, int *y, long n)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)blockDim.x * gridDim.x)
        y[i] = 2 * x[i] + 1;
}

extern "C" __global__ void between(const int *x, int *out, const int *bounds)
{
    int s = 0;
    for (size_t i = bounds[0]; i < (size_t)bounds[1]; ++i) s += x[i] * (int)(i + 1);
    out[threadIdx.x] = s;
}
"""


def c_division(n: int, d: int, bits_signed: bool) -> tuple[int, int]:
    """C's truncating quotient and remainder of 64-bit integers, and a GPU's x / 0 (all ones) and x % 0 (x)."""
    if d == 0:
        return -1 if bits_signed else 2**64 - 1, n
    q = abs(n) // abs(d) * (1 if (n < 0) == (d < 0) else -1)
    return q, n - q * d


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_64_bit_division_by_a_value_the_kernel_loads(seed):
    rng = np.random.default_rng(seed)
    x = rng.choice(WIDE, 2)
    y = rng.choice(np.array([0, 1, -1, 3, -7, 10, 2**32 + 1, -2**40, 2**63 - 1, 123456789], np.int64), 2)
    x[(x == -2**63) & (y == -1)] = 5     # -2^63 / -1 overflows: undefined in C
    dev = Device()
    px, py, q, u = dev.alloc(4), dev.alloc(4), dev.alloc(8), dev.alloc(8)
    dev.write(px, x.view(np.uint32))
    dev.write(py, y.view(np.uint32))
    dev.launch(dev.load_kernel(DIVISION, "quotients"), threads=2, args=[px, py, q, u])
    signed = [v for a, b in zip(map(int, x), map(int, y)) for v in c_division(a, b, True)]
    unsigned = [v for a, b in zip(map(int, x.view(np.uint64)), map(int, y.view(np.uint64)))
                for v in c_division(a, b, False)]
    assert words(dev, q, 4, np.int64).tolist() == signed
    assert words(dev, u, 4, np.uint64).tolist() == unsigned


@pytest.mark.parametrize("n, threads, blocks", [(13, 4, 2), (5, 2, 3), (0, 4, 1), (16, 4, 4)])
def test_a_grid_stride_loop_over_a_long(n, threads, blocks):
    dev = Device()
    data = np.arange(16, dtype=np.int32) * 3 - 7
    x, y = dev.alloc(16), dev.alloc(16)
    dev.write(x, data)
    dev.launch(dev.load_kernel(DIVISION, "long_grid_stride"), threads=threads, blocks=blocks, args=[x, y, n])
    assert dev.read(y, 16).tolist() == [2 * int(v) + 1 if i < n else 0 for i, v in enumerate(data)]


@pytest.mark.parametrize("start, end", [(2, 9), (0, 16), (5, 5), (7, 3)])
def test_a_size_t_loop_between_bounds_the_kernel_loads(start, end):
    dev = Device()
    data = np.arange(16, dtype=np.int32) + 1
    x, out, bounds = dev.alloc(16), dev.alloc(2), dev.alloc(2)
    dev.write(x, data)
    dev.write(bounds, np.array([start, end], np.int32))
    dev.launch(dev.load_kernel(DIVISION, "between"), threads=2, args=[x, out, bounds])
    want = sum(int(data[i]) * (i + 1) for i in range(start, end))
    assert dev.read(out, 2).tolist() == [want, want]


TO_FLOAT = r"""
extern "C" __global__ void to_float(const long long *x, float *f, float *g, float *z)
{
    int i = threadIdx.x;
    f[i] = (float)x[i];
    g[i] = (float)(unsigned long long)x[i];
    z[i] = __ll2float_rz(x[i]);
    z[i + 4] = __ll2float_rd(x[i]);
    z[i + 8] = __ll2float_ru(x[i]);
    z[i + 12] = __ull2float_rd((unsigned long long)x[i]);
    z[i + 16] = __ull2float_ru((unsigned long long)x[i]);
}

extern "C" __global__ void mean(const int *x, float *out, int n)
{
    long long s = 0;
    for (int i = 0; i < n; i++) s += (long long)x[i] * x[i];
    out[0] = (float)s / n;
}
"""


def rounded(n: int, mode: str = "rn") -> float:
    """n as float32: its 24 leading bits, rounded to nearest even, toward zero ("rz"), down ("rm") or up ("rp"),
    exactly (numpy's conversion of a uint64 may round twice, through a double)."""
    magnitude, sign = abs(n), -1 if n < 0 else 1
    shift = max(0, magnitude.bit_length() - 24)
    kept, rest = magnitude >> shift, magnitude - (magnitude >> shift << shift)
    half = 1 << shift >> 1
    away = {"rn": shift and (rest > half or rest == half and kept & 1), "rz": False,
            "rm": rest > 0 and sign < 0, "rp": rest > 0 and sign > 0}[mode]
    return float(np.float32(sign * (kept + away << shift)))        # at most 25 bits: exact through a double


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_long_long_converted_to_float_rounds_once(seed):
    edges = np.array([0, 1, -1, 2**24 + 1, 2**53 + 2**29 + 1, -(2**40 + 2**16), 2**63 - 1, -2**63, 2**31, 2**32 - 1,
                      (2**24 + 1) << 30, ((2**24 + 3) << 30) + 1, -((2**24 + 1) << 30), 0x7FFFFF8000000000], np.int64)
    x = np.random.default_rng(seed).choice(edges, 4, replace=False)
    dev = Device()
    px, f, g, z = dev.alloc(8), dev.alloc(4), dev.alloc(4), dev.alloc(20)
    dev.write(px, x.view(np.uint32))
    dev.launch(dev.load_kernel(TO_FLOAT, "to_float"), threads=4, args=[px, f, g, z])
    floats = [dev.read(p, 4).view(np.float32).tolist() for p in (f, g)] + \
        dev.read(z, 20).view(np.float32).reshape(5, 4).tolist()
    unsigned = x.view(np.uint64)
    assert floats == [[rounded(int(v)) for v in x], [rounded(int(v)) for v in unsigned],
                      [rounded(int(v), "rz") for v in x], [rounded(int(v), "rm") for v in x],
                      [rounded(int(v), "rp") for v in x], [rounded(int(v), "rm") for v in unsigned],
                      [rounded(int(v), "rp") for v in unsigned]]


def test_the_mean_of_a_long_long_sum():
    dev = Device()
    data = np.array([46341, -46341, 65535, 3, -70000, 12345], np.int32)
    x, out = dev.alloc(6), dev.alloc(1)
    dev.write(x, data)
    dev.launch(dev.load_kernel(TO_FLOAT, "mean"), threads=1, args=[x, out, 6])
    total = sum(int(v) ** 2 for v in data)
    assert dev.read(out, 1).view(np.float32)[0] == np.float32(np.float32(rounded(total)) / np.float32(6))


REFUSED = r"""
extern "C" __global__ void store_pointer(int **p, int *x) { p[threadIdx.x] = x + threadIdx.x; }
extern "C" __global__ void load_pointer(int **p) { int *q = p[0]; q[threadIdx.x] = 7; }
extern "C" __global__ void store_size(unsigned long long *out, unsigned long long n) { out[threadIdx.x] = n + 1; }
extern "C" __global__ void exchange_size(unsigned long long *out, unsigned long long n) { atomicExch(out, n + 1); }
"""


@pytest.mark.parametrize("name, args, message", [
    ("store_pointer", 2, "computed from a 64-bit kernel parameter, which may be a pointer"),
    ("load_pointer", 1, "comes from a 64-bit value loaded from memory, not from a pointer argument or an array"),
    ("store_size", 2, "computed from a 64-bit kernel parameter, which may be a pointer"),
    ("exchange_size", 2, "computed from a 64-bit kernel parameter, which may be a pointer"),
])
def test_what_two_words_cannot_hold_is_refused_by_name(name, args, message):
    dev = Device()
    pointers = [dev.alloc(8) for _ in range(args)]
    with pytest.raises(MachineError, match=message):
        dev.launch(dev.load_kernel(REFUSED, name), threads=4,
                   args=pointers if not name.endswith("_size") else pointers[:1] + [5])
    assert dev.read(0, 8 * args).tolist() == [0] * 8 * args


def test_the_circuit_writes_the_interpreters_tokens_for_a_pair_s_carry():
    """A pair's add is ordinary machine ops (add, a compare for the carry, a select): the compiled circuit predicts
    the interpreter's tokens for x[i] += 1 of long longs whose low words carry."""
    def tokens(backend):
        dev = Device(backend=backend)
        x = dev.alloc(8)
        dev.write(x, np.array([2**32 - 1, -1, 7, 2**33 - 1], np.int64).view(np.uint32))
        dev.launch(dev.load_kernel(PAIRS, "increment"), threads=4, args=[x])
        return words(dev, x, 4, np.int64).tolist(), [(t.id, t.origin) for t in dev.tokens]

    (values, stream), (ref_values, ref_stream) = tokens("circuit"), tokens("interpreter")
    assert values == ref_values == [2**32, 0, 8, 2**33] and stream == ref_stream and len(stream) > 100


BITS = r"""
extern "C" __global__ void counts(const unsigned long long *x, unsigned *out, unsigned long long *reversed)
{
    int i = threadIdx.x;
    unsigned long long v = x[i];
    unsigned u, s, amount;
    asm("bfind.u64 %0, %1;" : "=r"(u) : "l"(v));
    asm("bfind.s64 %0, %1;" : "=r"(s) : "l"(v));
    asm("bfind.shiftamt.u64 %0, %1;" : "=r"(amount) : "l"(v));
    out[7 * i + 0] = __popcll(v);
    out[7 * i + 1] = __clzll(v);
    out[7 * i + 2] = __ffsll(v);
    out[7 * i + 3] = u;
    out[7 * i + 4] = s;
    out[7 * i + 5] = amount;
    out[7 * i + 6] = __popcll((unsigned long long)(unsigned)i * 0x9E3779B9u * 0xFFFFFFu);
    reversed[i] = __brevll(v);
}
"""


def _bfind(v: int) -> int:
    return v.bit_length() - 1 if v else 0xFFFFFFFF


@pytest.mark.parametrize("values", [[0, 1, 2**63, 2**64 - 1],
                                    [2**32, 2**32 - 1, 0x8000000000000001, 0x123456789ABCDEF0],
                                    [2**63 - 1, 0xFFFFFFFF00000000, 3 << 40, 0x00000001FFFFFFFE]])
def test_bit_counts_of_64_bit_values(values):
    """__popcll, __clzll, __ffsll (NVRTC: 64 - clz(x & -x)), __brevll and PTX's bfind .u64 / .s64 / .shiftamt of
    loaded values, and popc of a product of words (refused in one word, then lowered again as a pair), against
    Python's integers."""
    dev = Device()
    x, out, rev = dev.alloc(8), dev.alloc(28), dev.alloc(8)
    dev.write(x, np.array(values, np.uint64).view(np.uint32))
    dev.launch(dev.load_kernel(BITS, "counts"), threads=4, args=[x, out, rev])
    got = dev.read(out, 28).view(np.uint32).reshape(4, 7).tolist()
    for i, v in enumerate(values):
        signed_v = v - 2**64 if v >> 63 else v
        assert got[i] == [bin(v).count("1"), 64 - v.bit_length(), (v & -v).bit_length(), _bfind(v),
                          _bfind(signed_v ^ (signed_v >> 63)),
                          63 - _bfind(v) if v else 0xFFFFFFFF, bin(i * 0x9E3779B9 * 0xFFFFFF).count("1")]
    assert words(dev, rev, 4, np.uint64).tolist() == [int(f"{v:064b}"[::-1], 2) for v in values]


ATOMICS = r"""
extern "C" __global__ void tickets(unsigned long long *counter, const unsigned long long *step,
                                   unsigned long long *old, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) old[i] = atomicAdd(counter, step[i]);
}

extern "C" __global__ void words_at_once(unsigned long long *w, const unsigned long long *v, unsigned long long *old)
{
    int i = threadIdx.x;
    old[4 * i + 0] = atomicOr(w + 0, v[i]);
    old[4 * i + 1] = atomicAnd(w + 1, ~v[i]);
    old[4 * i + 2] = atomicXor(w + 2, v[i]);
    old[4 * i + 3] = atomicExch(w + 3, v[i]);
    atomicOr(w + 4, v[i] << 1);         // the old values not read: two atomics of words
    atomicExch(w + 5, ~v[i]);
    atomicAnd(w + 6, v[i] | 1);
}

extern "C" __global__ void extremes(long long *s, unsigned long long *u, const long long *v, long long *old_s,
                                    unsigned long long *old_u)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    old_s[2 * i] = atomicMin(s, v[i]);
    old_s[2 * i + 1] = atomicMax(s + 1, v[i]);
    old_u[2 * i] = atomicMin(u, (unsigned long long)v[i]);
    if (v[i] & 1) old_u[2 * i + 1] = atomicMax(u + 1, (unsigned long long)v[i]);
}

// the compare-and-swap loop of a 64-bit add (how CUDA's guide builds atomics it lacks)
extern "C" __global__ void cas_add(unsigned long long *sum, const unsigned long long *v, unsigned *tries)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long old = *sum, assumed;
    unsigned n = 0;
    do {
        assumed = old;
        old = atomicCAS(sum, assumed, assumed + v[i]);
        n++;
    } while (assumed != old);
    tries[i] = n;
}

// an argmax packed in one 64-bit word: a non-negative float's bits above its index
extern "C" __global__ void argmax(const float *x, unsigned long long *best, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicMax(best, ((unsigned long long)__float_as_uint(x[i]) << 32) | (unsigned)i);
}
"""
U64 = 2**64 - 1


def _replay(start: int, values: list, op, signed: bool = False) -> tuple[list, int]:
    """The old values and the end value of atomics applied one after the other, in thread order (unsigned 64-bit
    words wrap; signed ones are compared only)."""
    olds, word = [], start
    for v in values:
        olds.append(word)
        word = op(word, v) if signed else op(word, v) & U64
    return olds, word


@pytest.mark.parametrize("start", [0, 2**32 - 5, 2**64 - 9])
def test_a_64_bit_atomic_add_returns_the_old_value(start):
    """Each thread's old value and the sum against the adds replayed in thread order (lanes in order, warps and
    blocks one after another: one of the orders a GPU may take), across the low word's carry and the wrap."""
    rng = np.random.default_rng(start % 97)
    steps = [3, 2**32 - 1, 1, 2**40 + 7, 2**63, 5] + [int(v) for v in rng.integers(0, 2**62, 4, dtype=np.int64)]
    dev = Device()
    counter, step, old = dev.alloc(2), dev.alloc(20), dev.alloc(20)
    dev.write(counter, np.array([start], np.uint64).view(np.uint32))
    dev.write(step, np.array(steps, np.uint64).view(np.uint32))
    dev.launch(dev.load_kernel(ATOMICS, "tickets"), threads=4, blocks=3, args=[counter, step, old, 10])
    olds, end = _replay(start, steps, lambda a, b: a + b)
    assert words(dev, old, 10, np.uint64).tolist() == olds
    assert int(words(dev, counter, 1, np.uint64)[0]) == end


def test_64_bit_or_and_xor_exch_return_old_values():
    """With their old values read (taking turns, but xor) and without (two atomics of words), against the replay in
    thread order."""
    v = [0x8000000100000001, 0x00000003FFFF0000, 0xFFFFFFFF00000000, 0x0000000000000002]
    start = [0x10, U64, 0x123456789ABCDEF0, 0x7, 0x5, 0x6, U64]
    dev = Device()
    w, pv, old = dev.alloc(14), dev.alloc(8), dev.alloc(32)
    dev.write(w, np.array(start, np.uint64).view(np.uint32))
    dev.write(pv, np.array(v, np.uint64).view(np.uint32))
    dev.launch(dev.load_kernel(ATOMICS, "words_at_once"), threads=4, args=[w, pv, old])
    got = words(dev, old, 16, np.uint64).reshape(4, 4).T.tolist()
    ends = []
    for k, op in enumerate([lambda a, b: a | b, lambda a, b: a & ~b, lambda a, b: a ^ b, lambda a, b: b,
                            lambda a, b: a | b << 1, lambda a, b: ~b, lambda a, b: a & (b | 1)]):
        olds, end = _replay(start[k], v, op)
        if k < 4:
            assert got[k] == olds
        ends.append(end)
    assert words(dev, w, 7, np.uint64).tolist() == ends


def test_64_bit_min_and_max_take_turns():
    """atomicMin / atomicMax of long longs (signed high words) and unsigned long longs, one under a branch only odd
    values take, against the replay in thread order; values that differ only in the low word, or only in the sign."""
    v = [5, -3, 2**40 + 1, 2**40, -2**63, 2**63 - 1, -(2**32), 2**32 - 1]
    dev = Device()
    s, u, pv, old_s, old_u = dev.alloc(4), dev.alloc(4), dev.alloc(16), dev.alloc(32), dev.alloc(32)
    dev.write(s, np.array([0, 0], np.int64).view(np.uint32))
    dev.write(u, np.array([2**63, 7], np.uint64).view(np.uint32))
    dev.write(pv, np.array(v, np.int64).view(np.uint32))
    dev.launch(dev.load_kernel(ATOMICS, "extremes"), threads=4, blocks=2, args=[s, u, pv, old_s, old_u])
    unsigned = [x & U64 for x in v]
    signed_olds = [_replay(0, v, f, signed=True) for f in (min, max)]
    unsigned_min = _replay(2**63, unsigned, min)
    odd = [x for x in unsigned if x & 1]
    unsigned_max = _replay(7, odd, max)
    got_s = words(dev, old_s, 16, np.int64).reshape(8, 2).T.tolist()
    got_u = words(dev, old_u, 16, np.uint64).reshape(8, 2).T.tolist()
    assert got_s == [signed_olds[0][0], signed_olds[1][0]]
    assert got_u[0] == unsigned_min[0]
    assert [got_u[1][i] for i, x in enumerate(unsigned) if x & 1] == unsigned_max[0]
    assert [got_u[1][i] for i, x in enumerate(unsigned) if not x & 1] == [0] * (8 - len(odd))
    assert words(dev, s, 2, np.int64).tolist() == [min(v), max(v)]
    assert words(dev, u, 2, np.uint64).tolist() == [min(unsigned), max(odd)]


def test_a_compare_and_swap_loop_adds_64_bit_values():
    """The guide's CAS loop: every thread's add lands once (the sum across the carry), and the lanes that lost a
    turn tried again: the tries of a warp's lanes are 1, 2, 3, 4 in lane order, as their turns come, but where a
    lane adds 0: the value it leaves is the one the next lane expects, whose swap then holds on the same try."""
    v = [2**32 - 1, 1, 2**33, 5, 2**63, 7, 0, 2**32]
    dev = Device()
    total, pv, tries = dev.alloc(2), dev.alloc(16), dev.alloc(8)
    dev.write(total, np.array([2**64 - 2], np.uint64).view(np.uint32))
    dev.write(pv, np.array(v, np.uint64).view(np.uint32))
    dev.launch(dev.load_kernel(ATOMICS, "cas_add"), threads=4, blocks=2, args=[total, pv, tries])
    assert int(words(dev, total, 1, np.uint64)[0]) == (2**64 - 2 + sum(v)) % 2**64
    assert dev.read(tries, 8).tolist() == [1, 2, 3, 4, 1, 2, 3, 3]


def test_an_argmax_packed_in_a_64_bit_atomic_max():
    x = np.array([0.5, 3.25, 1e-30, 3.25, 0.0, 2.0, 7.5e3, 1.0, 7.5e3, 4.0], np.float32)
    dev = Device()
    px, best = dev.alloc(10), dev.alloc(2)
    dev.write(px, x)
    dev.launch(dev.load_kernel(ATOMICS, "argmax"), threads=4, blocks=3, args=[px, best, 10])
    lo, hi = dev.read(best, 2).view(np.uint32).tolist()
    assert np.uint32(hi).view(np.float32) == x.max() and lo == 8      # the larger index of two equal maxima


def _mixed(v: int, k: int) -> int:
    return ((v * (2 * k + 3)) & 0xFFFFFFFF) ^ (v >> (k % 7 + 1))


@pytest.mark.parametrize("steps", [9, 14])
def test_atomics_in_a_program_cut_into_overlays_keep_their_turns_whole(steps, monkeypatch):
    """Two warps, a program long enough to be cut into overlays, a 64-bit atomicMax and 32-bit atomicMax and
    atomicCAS (old values read: the lanes take turns) in its middle. The block's warps run an overlay each before
    either goes on, so a cut inside a lane's turn (its load of the word, then its store of it) would let the other
    warp write the word in between (an update lost): every op of a turn after its load is one no cut may go before.
    And a cut inside an atomic's loop of turns, which fits an overlay, would interleave the warps' turns (old values
    not those of the threads' order): the cuts taken fall outside them. Turns and loops are found here from the ops'
    PTX lines and addresses, not from the cutter's spans; the old values and the words are the replay's in thread
    order. (A cut inside the 64-bit atomic's loop of turns gave 2 of 1,000 fuzzed block programs another warp's old
    values.)"""
    from qwengpu import lowering
    from qwengpu.lowering.overlays import _Cutter

    def mix(ks) -> str:
        return "".join(f" v = (v * {2 * k + 3}u) ^ (v >> {k % 7 + 1});\n" for k in ks)
    source = ('extern "C" __global__ void k(long long *s, unsigned *u, const unsigned *x, long long *old_s,\n'
              '                              unsigned *old_u) {\n int t = threadIdx.x;\n unsigned v = x[t];\n'
              + mix(range(steps)) + ' old_s[t] = atomicMax(s, (long long)(int)v);\n' + mix(range(steps, steps + 2))
              + ' old_u[t] = atomicMax(u, v);\n' + mix(range(steps + 2, steps + 4))
              + ' old_u[8 + t] = atomicCAS(u + 1, v & 3u, v);\n}')
    cuts = []
    split = lowering.split

    def watched(why, mops, threads, fits, share=4):
        overlays = split(why, mops, threads, fits, share)
        cuts.append((_Cutter(mops, threads), overlays.bounds))
        return overlays
    monkeypatch.setattr(lowering, "split", watched)
    x = [(t * 2654435761) & 0xFFFFFFFF for t in range(8)]
    dev = Device()
    s, u, xs, old_s, old_u = dev.alloc(2), dev.alloc(2), dev.alloc(8), dev.alloc(16), dev.alloc(16)
    dev.write(s, np.array([-5], np.int64).view(np.uint32))
    dev.write(u, np.array([7, 1], np.uint32))
    dev.write(xs, np.array(x, np.uint32))
    kernel = dev.load_kernel(source, "k")
    dev.launch(kernel, threads=8, args=[s, u, xs, old_s, old_u])
    assert kernel.program((s, u, xs, old_s, old_u), 8).overlays and cuts
    atomic_lines = [i.line for i in kernel.ptx.body if isinstance(i, Instruction) and i.base == "atom"]
    assert len(atomic_lines) == 3
    for cutter, bounds in cuts:
        mops = cutter.mops
        for line in atomic_lines:
            ops = [i for i, m in enumerate(mops) if m.line == line]
            turns = [(i, j) for i in ops if mops[i].load and not mops[i].atomic
                     for j in ops if j > i and mops[j].store == mops[i].a]
            assert turns and all(set(range(i + 1, j + 1)) <= cutter.uncut for i, j in turns), line
            loop = [(j, i) for i in ops for j in ops if mops[i].jumps and mops[i].target_index == j]
            assert len(loop) == 1 and not any(loop[0][0] < b <= loop[0][1] for b in bounds), (line, loop, bounds)
    v, olds, words_now = list(x), [], [-5, 7, 1]
    for k in range(steps + 4):
        v = [_mixed(a, k) for a in v]
        if k == steps - 1:         # atomicMax of the signed values, widened
            for a in v:
                olds.append(words_now[0])
                words_now[0] = max(words_now[0], a - 2**32 if a >> 31 else a)
        elif k == steps + 1:
            for a in v:
                olds.append(words_now[1])
                words_now[1] = max(words_now[1], a)
        elif k == steps + 3:
            for a in v:
                olds.append(words_now[2])
                words_now[2] = a if words_now[2] == a & 3 else words_now[2]
    assert dev.read(old_s, 16).view(np.int64).tolist() == olds[:8]
    assert dev.read(old_u, 16).view(np.uint32).tolist() == olds[8:]
    assert dev.read(s, 2).view(np.int64).tolist() == [words_now[0]]
    assert dev.read(u, 2).view(np.uint32).tolist() == words_now[1:]
