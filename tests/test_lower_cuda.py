"""Ordinary CUDA on the interpreter, each kernel's words checked against numpy evaluating the same C expressions.

Also the launch plumbing the issue asked for: a bounded program cache (a kernel launched 1,000 times with changing
arguments keeps at most PROGRAM_CACHE programs), ready-made programs launched through a public call, grids.
"""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import Device
from qwengpu.device import PROGRAM_CACHE, Kernel
from qwengpu.isa import EXIT, TID, Block, MachineError, Operand
from qwengpu.lowering import Program
from qwengpu.toolchain import nvrtc_available

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (nvidia-cuda-nvrtc wheel) is not installed")
MASK = 0xFFFFFFFF


def words(values) -> np.ndarray:
    return (np.asarray(values, dtype=np.int64) & MASK).astype(np.uint32).view(np.int32)


ADD_V = r'''extern "C" __global__ void k(int *out, const int *x, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + v;
}'''


def test_cache_stays_bounded_over_1000_launches():
    dev = Device()
    kernel = dev.load_kernel(ADD_V, "k")
    x = np.arange(4) * 7
    dev.write(16, x)
    for v in range(1000):
        dev.launch(kernel, threads=4, args=[0, 16, 4, v])
        assert kernel.cached_programs <= PROGRAM_CACHE
        np.testing.assert_array_equal(dev.read(0, 4), x + v)
    # v only flows into an immediate: two lowerings serve every launch (v == 0 folds the add away, v != 0 does not);
    # n decides which lanes store (i < n): a new shape per outcome, never more than PROGRAM_CACHE kept
    assert kernel.lowerings == 2
    for n in range(1, 200):
        dev.launch(kernel, threads=4, args=[0, 16, n, 5])
        assert kernel.cached_programs <= PROGRAM_CACHE
    assert kernel.lowerings < 200


@pytest.mark.parametrize("blocks,threads,n", [(2, 4, 6), (3, 4, 12), (2, 8, 13)])
def test_grid_of_blocks(blocks, threads, n):
    dev = Device()
    x = np.arange(32) * 3 - 40
    dev.write(64, x[:32])
    sentinel = np.full(32, -9)
    dev.write(0, sentinel)
    dev.launch(dev.load_kernel(ADD_V, "k"), threads=threads, args=[0, 64, n, 5], blocks=blocks)
    expect = sentinel.copy()
    done = min(n, blocks * threads)
    expect[:done] = x[:done] + 5
    np.testing.assert_array_equal(dev.read(0, 32), expect)


def test_grid_limits_are_errors_before_anything_runs():
    dev = Device()
    kernel = dev.load_kernel(ADD_V, "k")
    with pytest.raises(MachineError, match="blocks=0"):
        dev.launch(kernel, threads=4, args=[0, 16, 4, 1], blocks=0)
    assert dev.stats["launches"] == 0 and dev.tokens == []


def test_ready_made_program_launches_through_a_public_call():
    blocks = [Block(op="add", a=Operand(TID), b=Operand(imm=100), store=TID, store_imm=8, store_enable=True,
                    branch="always", target=EXIT)]
    kernel = Kernel.from_program(Program("plus100", blocks, 0, False, []))
    dev = Device()
    dev.launch(kernel, threads=6, args=[])
    np.testing.assert_array_equal(dev.read(8, 6), np.arange(6) + 100)
    with pytest.raises(MachineError, match="takes no arguments"):
        dev.launch(kernel, threads=4, args=[1])


ABS_MIN_MAX = r'''extern "C" __global__ void k(int *out, const int *x, const unsigned *u) {
  int i = threadIdx.x; int a = x[i]; int ab = a < 0 ? -a : a;
  out[i] = ab; out[4+i] = min(a, 3); out[8+i] = max(a, -2); out[12+i] = u[i] > 5u ? 1 : 0;
  out[16+i] = u[i] < u[(i+1)&3]; out[20+i] = (int)umin(u[i], 7u); out[24+i] = abs(a - 100);
}'''


@pytest.mark.parametrize("seed", range(3))
def test_abs_min_max_unsigned_compares(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-300, 300, 4)
    x[0] = -(1 << 31) + 150 if seed == 1 else x[0]     # abs(a - 100) must not overflow (C's UB)
    u = rng.integers(0, 1 << 32, 4, dtype=np.uint64)
    u[:2] = [3, 9]
    dev = Device()
    dev.write(32, x)
    dev.write(48, u.astype(np.int64))
    dev.launch(dev.load_kernel(ABS_MIN_MAX, "k"), threads=4, args=[0, 32, 48])
    xi = x.astype(np.int64)
    expect = np.concatenate([np.abs(xi), np.minimum(xi, 3), np.maximum(xi, -2), (u > 5).astype(np.int64),
                             (u < np.roll(u, -1)).astype(np.int64), np.minimum(u, 7).astype(np.int64),
                             np.abs(words(xi - 100).astype(np.int64))])
    np.testing.assert_array_equal(dev.read(0, 28), words(expect))


HISTOGRAM = r'''extern "C" __global__ void k(int *h, const int *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) atomicAdd(&h[x[i] & 3], 1); }'''


@pytest.mark.parametrize("n,blocks", [(4, 1), (7, 2), (16, 4)])
def test_atomic_histogram_on_computed_addresses(n, blocks):
    rng = np.random.default_rng(n)
    x = rng.integers(-1000, 1000, 16)
    dev = Device()
    dev.write(0, np.zeros(4, dtype=np.int64))
    dev.write(16, x)
    dev.launch(dev.load_kernel(HISTOGRAM, "k"), threads=4, args=[0, 16, n], blocks=blocks)
    np.testing.assert_array_equal(dev.read(0, 4), np.bincount(x[:n] & 3, minlength=4))


SUB_WORD = r'''extern "C" __global__ void k(int *out, const int *x) {
  int i = threadIdx.x; out[i] = x[i] & 0xFF; out[4+i] = (x[i] >> 8) & 0xFFFF; out[8+i] = (signed char)x[i];
  out[12+i] = (short)(x[i] >> 16); }'''


def test_sub_word_loads_that_nvrtc_makes_of_masked_ints():
    x = np.array([-5, 17, 0x12345678, -200])
    dev = Device()
    dev.write(32, x)
    dev.launch(dev.load_kernel(SUB_WORD, "k"), threads=4, args=[0, 32])
    xi = x.astype(np.int64)
    expect = np.concatenate([xi & 0xFF, (xi >> 8) & 0xFFFF, (xi & 0xFF).astype(np.uint8).view(np.int8),
                             ((xi >> 16) & 0xFFFF).astype(np.uint16).view(np.int16)])
    np.testing.assert_array_equal(dev.read(0, 16), expect)


BYTE_STORES = r'''extern "C" __global__ void k(unsigned char *out, const int *x) {
  int i = threadIdx.x; out[i] = (unsigned char)(x[i] + 1); }'''


def test_byte_stores_from_four_lanes_into_one_word():
    x = np.array([10, 254, -3, 0x7F])
    dev = Device()
    dev.write(0, np.array([0x11223344]))
    dev.write(8, x)
    dev.launch(dev.load_kernel(BYTE_STORES, "k"), threads=4, args=[0, 8])
    expect = int.from_bytes(bytes(int(v + 1) & 0xFF for v in x), "little")
    np.testing.assert_array_equal(dev.read(0, 1), words([expect]))


DIVIDE = r'''extern "C" __global__ void k(int *out, const int *x, const int *d) {
  int i = threadIdx.x; out[i] = x[i] OP d[i]; }'''
UDIVIDE = r'''extern "C" __global__ void k(unsigned *out, const unsigned *x, const unsigned *d) {
  int i = threadIdx.x; out[i] = x[i] OP d[i]; }'''


@pytest.mark.parametrize("op", ["/", "%"])
def test_division_by_a_register(op):
    """A software long division (the machine divides only by small immediates), signed like C: truncation."""
    x, d = np.array([-5, 17, -(1 << 31), 2147483647]), np.array([3, -4, 7, -1])
    dev = Device()
    dev.write(32, x)
    dev.write(48, d)
    kernel = dev.load_kernel(DIVIDE.replace("OP", op), "k")
    dev.launch(kernel, threads=4, args=[0, 32, 48])
    q = np.array([abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1) for a, b in zip(x.tolist(), d.tolist())])
    expect = q if op == "/" else x - q * d
    np.testing.assert_array_equal(dev.read(0, 4), words(expect))
    assert all(b.op not in ("div_s", "div_u", "rem_s", "rem_u") for b in kernel.program((0, 32, 48), 4).blocks)


@pytest.mark.parametrize("op", ["/", "%"])
def test_unsigned_division_by_a_register_and_by_zero(op):
    x = np.array([0xFFFFFFFF, 100, 7, 1 << 31], dtype=np.int64)
    d = np.array([0x10001, 0, 7, 3], dtype=np.int64)
    dev = Device()
    dev.write(32, x)
    dev.write(48, d)
    dev.launch(dev.load_kernel(UDIVIDE.replace("OP", op), "k"), threads=4, args=[0, 32, 48])
    safe = np.where(d == 0, 1, d)
    # NVIDIA GPUs: x / 0 is all ones, x % 0 is x (C leaves it undefined).
    expect = np.where(d == 0, 0xFFFFFFFF, x // safe) if op == "/" else np.where(d == 0, x, x % safe)
    np.testing.assert_array_equal(dev.read(0, 4), words(expect))


FLOAT = r'''extern "C" __global__ void k(float *out) { out[threadIdx.x] = __fdividef(out[threadIdx.x], 1.7f); }'''


def test_floating_point_is_refused_by_name_and_line():
    dev = Device()
    with pytest.raises(MachineError, match=r"line \d+.*the machine has no floating point.*div"):
        dev.launch(dev.load_kernel(FLOAT, "k"), threads=4, args=[0])
    assert dev.tokens == []


def test_a_failing_block_puts_back_the_whole_grid():
    """Block 1 stores past memory: the launch raises and block 0's stores are undone too."""
    source = r'''extern "C" __global__ void k(int *out, int stride) {
      out[blockIdx.x * stride + threadIdx.x] = 7; }'''
    dev = Device()
    dev.write(0, np.arange(8))
    tokens = list(dev.tokens)
    with pytest.raises(MachineError, match="outside"):
        dev.launch(dev.load_kernel(source, "k"), threads=4, args=[0, 200], blocks=2)
    np.testing.assert_array_equal(dev.read(0, 8), np.arange(8))
    assert dev.tokens[:len(tokens)] == tokens and not dev.busy


@pytest.mark.parametrize("fn,combine", [("atomicMin", np.minimum), ("atomicMax", np.maximum),
                                        ("atomicOr", np.bitwise_or), ("atomicXor", np.bitwise_xor),
                                        ("atomicAnd", np.bitwise_and)])
def test_atomic_ops_from_every_lane_into_one_word(fn, combine):
    source = 'extern "C" __global__ void k(int *h, const int *x) { %s(h, x[threadIdx.x]); }' % fn
    x = np.array([5, -3, 12, 7, 0x70F0, -1 << 20])
    dev = Device()
    dev.write(0, np.array([9]))
    dev.write(8, x)
    dev.launch(dev.load_kernel(source, "k"), threads=6, args=[0, 8])
    np.testing.assert_array_equal(dev.read(0, 1), [combine.reduce(np.concatenate([[9], x]))])


def test_a_64_bit_integer_argument_is_a_value_not_a_pointer():
    source = r'''extern "C" __global__ void k(int *out, size_t n, long long bias) {
      size_t i = threadIdx.x; if (i < n) out[i] = (int)(i + bias); }'''
    dev = Device()
    dev.write(0, np.full(4, -1))
    dev.launch(dev.load_kernel(source, "k"), threads=4, args=[0, 3, -20])
    np.testing.assert_array_equal(dev.read(0, 4), [-20, -19, -18, -1])
    with pytest.raises(MachineError, match="does not fit 32 bits"):
        dev.launch(dev.load_kernel(source, "k"), threads=4, args=[0, 1 << 40, 0])


def test_atomic_xor_returns_the_old_value_in_lane_order():
    """atomicXor's old value is the new one xor the operand: each lane sees the lanes before it (8 threads, two
    warps, one word)."""
    src = r'''extern "C" __global__ void k(int *out, int *word, const int *x) {
      out[threadIdx.x] = atomicXor(word, x[threadIdx.x]); }'''
    rng = np.random.default_rng(3)
    xv = rng.integers(-(1 << 31), 1 << 31, 8)
    dev = Device()
    out, word, x = dev.alloc(8), dev.alloc(1), dev.alloc(8)
    dev.write(word, [0x1234567])
    dev.write(x, xv)
    dev.launch(dev.load_kernel(src, "k"), threads=8, args=[out, word, x])
    running = np.bitwise_xor.accumulate(np.concatenate([[0x1234567], xv]))
    np.testing.assert_array_equal(dev.read(out, 8), words(running[:8]))
    assert dev.read(word, 1)[0] == words(running[8:])[0]


OLD_VALUES = r"""
extern "C" __global__ void k(int *out, int *h, const int *x, int which) {
  unsigned t = threadIdx.x;
  int v = x[t];
  int *p = &h[x[t + 8] & 3];
  int old;
  if (which == 0) old = atomicMin(p, v);
  else if (which == 1) old = atomicMax(p, v);
  else if (which == 2) old = (int)atomicMin((unsigned *)p, (unsigned)v);
  else if (which == 3) old = (int)atomicMax((unsigned *)p, (unsigned)v);
  else if (which == 4) old = atomicAnd(p, v);
  else if (which == 5) old = atomicOr(p, v);
  else if (which == 6) old = atomicExch(p, v);
  else if (which == 7) old = atomicCAS(p, x[t + 16], v);
  else if (which == 8) old = (int)atomicInc((unsigned *)p, (unsigned)v);
  else old = (int)atomicDec((unsigned *)p, (unsigned)v);
  out[t] = old;
}
"""


def _in_thread_order(which: int, h: list[int], x: list[int], threads: int) -> tuple[list[int], list[int]]:
    """The kernel above, one thread after another (the machine's order: warps in turn, lanes in order)."""
    h = list(h)
    out = []
    for t in range(threads):
        v, i = x[t], x[t + 8] & 3
        old = h[i]
        ou, vu = old & MASK, v & MASK
        new = [min(old, v), max(old, v), min(ou, vu), max(ou, vu), ou & vu, ou | vu, v,
               v if old == x[t + 16] else old, 0 if ou >= vu else ou + 1,
               vu if ou == 0 or ou > vu else ou - 1][which]
        h[i] = int(words([new])[0])
        out.append(old)
    return out, h


@pytest.mark.parametrize("threads", [3, 4, 8])
@pytest.mark.parametrize("which", range(10))
def test_old_value_of_min_max_and_or_exch_cas_inc_dec_in_lane_order(which, threads):
    """The old value of atomicMin / Max (signed and unsigned), And, Or, Exch, atomicCAS, atomicInc and atomicDec,
    with lanes colliding on words: each thread sees the threads before it, as the same loop run in Python one thread
    after another."""
    rng = np.random.default_rng(10 * which + threads)
    low = 0 if which >= 8 else -50            # inc / dec: unsigned counters and limits
    h = [int(v) for v in rng.integers(low, 50, 4)]
    x = [int(v) for v in rng.integers(low, 60, 8)] + [int(v) for v in rng.integers(0, 4, 8)]
    if which >= 8:
        h[0], x[:3] = 0, [0, 3, 70]              # a dec from 0, a limit of 0, a limit the count never reaches
    x += [int(v) for v in rng.choice(np.array(h + x[:8]), 8)]       # cas: compares that sometimes hit
    out, h_after = _in_thread_order(which, h, x, threads)
    dev = Device()
    dev.write(8, np.array(h))
    dev.write(16, np.array(x))
    dev.launch(dev.load_kernel(OLD_VALUES, "k"), threads=threads, args=[0, 8, 16, which])
    np.testing.assert_array_equal(dev.read(0, threads), words(out))
    np.testing.assert_array_equal(dev.read(8, 4), words(h_after))


HALFWORD_CAS = r"""
extern "C" __global__ void k(unsigned short *h, const unsigned short *c, const unsigned short *v,
                             unsigned short *old, int which) {
  int t = threadIdx.x;
  old[t] = atomicCAS(&h[which ? (t % 3) : 1], c[t], v[t]);
}
"""


@pytest.mark.parametrize("which", [0, 1])
def test_a_16_bit_compare_and_swap_changes_its_halfword_alone(which):
    """atomicCAS of an unsigned short (atom.cas.b16, what a half's atomicAdd is built of) at a halfword known when
    lowering and at one the machine computes (t % 3: both halves of a word and the next word's low one), lanes
    colliding: the old halfwords and the words against a replay in thread order; the halfword no thread names
    keeps its bits."""
    rng = np.random.default_rng(40 + which)
    h = np.array([5, 7, 9, 0xBEEF], np.uint16)
    c = rng.choice(np.array([5, 7, 9, 8, 10, 3, 0xBEEF], np.uint16), 8)
    v = rng.integers(0, 0x10000, 8).astype(np.uint16)
    c[0], c[3] = h[0 if which else 1], v[0]             # thread 0's swap holds, and thread 3's where it follows it
    dev = Device()
    ph, pc, pv, pold = dev.alloc(2), dev.alloc(4), dev.alloc(4), dev.alloc(4)
    for p, a in ((ph, h), (pc, c), (pv, v)):
        dev.write(p, a.view(np.int32))
    dev.launch(dev.load_kernel(HALFWORD_CAS, "k"), threads=8, args=[ph, pc, pv, pold, which])
    want, olds = h.copy(), []
    for t in range(8):
        i = t % 3 if which else 1
        olds.append(int(want[i]))
        if want[i] == c[t]:
            want[i] = v[t]
    swapped = [o == int(ct) for o, ct in zip(olds, c)]
    assert any(swapped) and not all(swapped)        # the test meets both outcomes
    assert dev.read(pold, 4).view(np.uint16).tolist() == olds
    assert dev.read(ph, 2).view(np.uint16).tolist() == want.tolist()


CIRCUIT_NEW = r"""
extern "C" __global__ void k(int *out, int *h, const int *x) {
  unsigned t = threadIdx.x;
  int old = atomicMax(&h[x[t] & 1], x[t + 4]);
  out[t] = old * 1000 + ((const unsigned char *)x)[((unsigned)x[t + 4] >> 2) & 31u];
}
"""


def test_the_circuit_writes_the_interpreters_tokens_on_lane_order_atomics_and_computed_bytes():
    """An atomic's old value (the lanes in turn, a uniform loop) and a byte at a computed offset (an address kept in
    bytes) use only the machine's existing ops: the exact circuit writes the interpreter's tokens, and the words are
    numpy's."""
    h0 = [3, -7]
    x = [0x10203040, 0x05060709, 0x0A0B0C0D, 0x7F001122, 9, -4, 12, 5]
    xb = np.array(x, dtype=np.int64).astype("<i4").view(np.uint8)
    h, want = list(h0), []
    for t in range(4):
        old = h[x[t] & 1]
        h[x[t] & 1] = max(old, x[t + 4])
        want.append(old * 1000 + int(xb[((x[t + 4] & MASK) >> 2) & 31]))
    runs = {}
    for backend in ("interpreter", "circuit"):
        dev = Device(backend=backend)
        dev.write(8, np.array(h0))
        dev.write(16, np.array(x))
        dev.launch(dev.load_kernel(CIRCUIT_NEW, "k"), threads=4, args=[0, 8, 16])
        runs[backend] = (dev.read(0, 4).tolist(), dev.read(8, 2).tolist(), [(t.id, t.origin) for t in dev.tokens])
    assert runs["interpreter"][:2] == (want, h)
    assert runs["circuit"] == runs["interpreter"]


EXCH_IN_A_DIVERGENT_LOOP = r"""
extern "C" __global__ void k(int *out, int *h, const int *x) {
  unsigned t = threadIdx.x; int acc = 0;
  for (unsigned j = 0; j < ((unsigned)x[t] & 3u); j++) acc += atomicExch(&h[(t + j) & 1u], (int)(t * 10u + j));
  out[t] = acc;
}
"""


@pytest.mark.parametrize("threads", [4, 6, 8])
def test_old_values_in_a_divergent_loop_follow_the_warps_order(threads):
    """atomicExch's old value inside a loop whose trip count differs across lanes: the lanes' turns run inside
    each SIMT trip. The reference is Python stepping each warp the way a warp runs: trip by trip, the lanes still
    looping in lane order."""
    x, h0 = [3, 1, 2, 3, 0, 2, 3, 1], [-1, -2]
    h, want = list(h0), [0] * threads
    for base in range(0, threads, 4):
        lanes = range(base, min(base + 4, threads))
        for j in range(3):
            for t in lanes:
                if j < (x[t] & 3):
                    i = (t + j) & 1
                    want[t] += h[i]
                    h[i] = t * 10 + j
    dev = Device()
    dev.write(8, np.array(h0))
    dev.write(16, np.array(x))
    dev.launch(dev.load_kernel(EXCH_IN_A_DIVERGENT_LOOP, "k"), threads=threads, args=[0, 8, 16])
    assert dev.read(0, threads).tolist() == want and dev.read(8, 2).tolist() == h
