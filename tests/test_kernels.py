"""qwengpu/kernels/*.cu on the reference interpreter, each compared with its numpy replay (tests/reference.py)."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from qwengpu import Device, MachineError

import reference as ref

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "qwengpu" / "kernels"
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def kernel(dev, file, name):
    return dev.load_kernel(str(KERNELS / file), name)


def random_words(rng, n, lo=INT32_MIN, hi=INT32_MAX):
    return rng.integers(lo, hi, n, endpoint=True, dtype=np.int64).astype(np.int32)


# ------------------------------------------------------------------------------------------------------------------ vadd

@pytest.mark.parametrize("threads", [4, 8, 16])
@pytest.mark.parametrize("n", [1, 3, 4, 16])
def test_vadd(n, threads):
    rng = np.random.default_rng(1000 * n + threads)
    dev = Device(backend="interpreter")
    a, b, c = dev.alloc(16), dev.alloc(16), dev.alloc(16)
    av, bv = random_words(rng, 16), random_words(rng, 16)
    av[:2] = [INT32_MAX, INT32_MIN]                     # wrap-around both ways
    bv[:2] = [INT32_MAX, -1]
    sentinel = np.full(16, 0x5A5A5A5A, dtype=np.int32)
    dev.write(a, av)
    dev.write(b, bv)
    dev.write(c, sentinel)
    dev.launch(kernel(dev, "vadd.cu", "vadd"), threads=threads, args=[a, b, c, n])
    done = min(n, threads)
    expect = sentinel.copy()
    expect[:done] = ref.reference_vadd(av, bv, done)
    np.testing.assert_array_equal(dev.read(c, 16), expect)
    np.testing.assert_array_equal(dev.read(a, 16), av)   # inputs untouched
    np.testing.assert_array_equal(dev.read(b, 16), bv)
    assert dev.stats["launches"] == 1


def test_vadd_same_tokens_on_two_devices():
    streams = []
    for _ in range(2):
        dev = Device(backend="interpreter")
        a, b, c = dev.alloc(8), dev.alloc(8), dev.alloc(8)
        dev.write(a, np.arange(8, dtype=np.int32))
        dev.write(b, np.arange(8, dtype=np.int32) * 3)
        dev.launch(kernel(dev, "vadd.cu", "vadd"), threads=8, args=[a, b, c, 8])
        streams.append([(t.id, t.origin) for t in dev.tokens])
    assert streams[0] == streams[1]


# ------------------------------------------------------------------------------------------------------------------ spin

def _spin_run(flag_value_before, release_after, threads=4, k=1, v=100):
    """Run spin on a fresh device with *flag = flag_value_before; after `release_after` records (None: never) the host
    writes *flag = k. Returns (device, out address, list of each record's token ids, index of the release in tokens)."""
    dev = Device(backend="interpreter")
    flag, out = dev.alloc(1), dev.alloc(8)
    dev.write(flag, np.array([flag_value_before], dtype=np.int32))
    dev.write(out, np.full(8, -7, dtype=np.int32))
    dev.start(kernel(dev, "spin.cu", "spin"), threads, [flag, k, out, v])
    records, release_at, steps = [], None, 0
    while dev.busy:
        if release_after is not None and steps == release_after:
            release_at = len(dev.tokens)
            dev.write(flag, np.array([k], dtype=np.int32))
        before = len(dev.tokens)
        dev.step()
        steps += 1
        records.append([t.id for t in dev.tokens[before:]])
        assert steps < 1000, "spin did not finish"
    dev.launch_tokens = [(t.id, t.origin) for t in dev.tokens]    # before any read adds its tokens
    return dev, out, records, release_at


@pytest.mark.parametrize("threads", [4, 8])
def test_spin_waits_until_the_host_writes_the_flag(threads):
    dev = Device(backend="interpreter")
    flag, out = dev.alloc(1), dev.alloc(8)
    dev.write(flag, np.array([0], dtype=np.int32))
    dev.write(out, np.full(8, -7, dtype=np.int32))
    dev.start(kernel(dev, "spin.cu", "spin"), threads, [flag, 3, out, 100])
    for _ in range(10):
        dev.step()
        assert dev.busy, "spin ended while *flag < k"
    dev.write(flag, np.array([2], dtype=np.int32))      # still below k = 3
    for _ in range(10):
        dev.step()
        assert dev.busy, "spin ended while *flag < k"
    dev.write(flag, np.array([3], dtype=np.int32))
    for _ in range(100):
        if not dev.busy:
            break
        dev.step()
    assert not dev.busy
    expect = np.full(8, -7, dtype=np.int32)
    expect[:threads] = ref.reference_spin(threads, 100)
    np.testing.assert_array_equal(dev.read(out, 8), expect)


def test_spin_tokens_match_a_launch_with_the_flag_already_set():
    # Released at record 12: the same tokens on two devices (the schedule depends only on what is written).
    d1, out1, rec1, rel1 = _spin_run(0, 12)
    d2, _, rec2, rel2 = _spin_run(0, 12)
    assert d1.launch_tokens == d2.launch_tokens
    assert rel1 == rel2
    # The host's write record sits between two records, right where it was written.
    released = d1.tokens[rel1:rel1 + 3]
    assert [t.origin for t in released] == ["host"] * 3
    assert released[0].id == d1.tokens[0].id            # MEM flag, the same header as the initial write of the flag
    np.testing.assert_array_equal(d1.read(out1, 4), ref.reference_spin(4, 100))

    # The flag set before the launch: the stepped run is these records with spin records inserted after the common
    # prefix (the blocks before the loop), i.e. identical prefix and identical tail.
    d3, out3, rec3, _ = _spin_run(1, None)
    np.testing.assert_array_equal(d3.read(out3, 4), ref.reference_spin(4, 100))
    assert len(rec1) > len(rec3) and len(rec1) >= 12
    p = 0
    while p < len(rec3) and rec1[p] == rec3[p]:
        p += 1
    assert p < len(rec3), "the stepped run and the preset run agree on every record of the preset run"
    tail = len(rec3) - p
    assert rec1[:p] == rec3[:p]
    assert rec1[len(rec1) - tail:] == rec3[p:]
    # A whole launch (dev.launch) writes exactly the stepped tokens of the preset run.
    d4 = Device(backend="interpreter")
    flag, out = d4.alloc(1), d4.alloc(8)
    d4.write(flag, np.array([1], dtype=np.int32))
    d4.write(out, np.full(8, -7, dtype=np.int32))
    d4.launch(kernel(d4, "spin.cu", "spin"), threads=4, args=[flag, 1, out, 100])
    assert [(t.id, t.origin) for t in d4.tokens] == d3.launch_tokens
    # Released later: the same tail again, only more spin records before it.
    d5, _, rec5, _ = _spin_run(0, 20)
    assert len(rec5) > len(rec1)
    assert rec5[len(rec5) - tail:] == rec3[p:]


# ------------------------------------------------------------------------------------------------------------ XOR MLP

class Mlp:
    """Parameters, gradients, minibatch and loss word on one device (97 of the 127 words), the four kernels loaded."""

    def __init__(self):
        self.dev = Device(backend="interpreter")
        self.p, self.g, self.batch, self.loss = (self.dev.alloc(32), self.dev.alloc(32), self.dev.alloc(32),
                                                 self.dev.alloc(1))
        self.k = {name: kernel(self.dev, "mlp.cu", name) for name in ("mlp_forward", "mlp_backward", "mlp_loss", "sgd")}

    def put(self, addr, words):
        self.dev.write(addr, np.asarray(words, dtype=np.int64).astype(np.int32))

    def forward(self, ns):
        self.dev.launch(self.k["mlp_forward"], threads=ref.H, args=[self.p, self.batch, ns])

    def backward(self, ns):
        self.dev.launch(self.k["mlp_backward"], threads=ns, args=[self.p, self.batch, self.g])

    def loss_(self, ns):
        self.dev.launch(self.k["mlp_loss"], threads=ns, args=[self.batch, self.loss])

    def sgd(self):
        self.dev.launch(self.k["sgd"], threads=ref.N_PARAMS, args=[self.p, self.g])


def random_params(rng, scale=2 * ref.ONE):
    return rng.integers(-scale, scale, 32, endpoint=True)


def random_batch(rng, ns, scale=2 * ref.ONE):
    batch = rng.integers(-scale, scale, 32, endpoint=True)
    batch[ns:ref.S] = batch[ref.S + ns:2 * ref.S] = 0            # unused sample slots hold garbage-free zeros
    return batch


@pytest.mark.parametrize("ns", [8, 5, 1])
def test_mlp_forward(ns):
    rng = np.random.default_rng(ns)
    m = Mlp()
    p, batch = random_params(rng), random_batch(rng, ns)
    m.put(m.p, p)
    m.put(m.batch, batch)                    # o starts nonzero: the atomics accumulate onto it
    m.forward(ns)
    np.testing.assert_array_equal(m.dev.read(m.batch, 32), ref.reference_forward(p, batch, ns))
    np.testing.assert_array_equal(m.dev.read(m.p, 32), ref.as_int32(p))


def test_mlp_forward_wraps_like_int32():
    rng = np.random.default_rng(7)
    m = Mlp()
    p, batch = random_words(rng, 32), random_words(rng, 32)
    m.put(m.p, p)
    m.put(m.batch, batch)
    m.forward(8)
    np.testing.assert_array_equal(m.dev.read(m.batch, 32), ref.reference_forward(p, batch, 8))


@pytest.mark.parametrize("ns", [8, 6, 3])
def test_mlp_backward(ns):
    rng = np.random.default_rng(10 + ns)
    m = Mlp()
    p, batch, g = random_params(rng), random_batch(rng, ns), rng.integers(-1000, 1000, 32)
    m.put(m.p, p)
    m.put(m.batch, batch)
    m.put(m.g, g)                            # g starts nonzero: the atomics accumulate onto it
    m.backward(ns)
    np.testing.assert_array_equal(m.dev.read(m.g, 32), ref.reference_backward(p, batch, g, ns))
    np.testing.assert_array_equal(m.dev.read(m.batch, 32), ref.as_int32(batch))


def test_mlp_backward_wraps_like_int32():
    rng = np.random.default_rng(8)
    m = Mlp()
    p, batch, g = random_words(rng, 32), random_words(rng, 32), random_words(rng, 32)
    m.put(m.p, p)
    m.put(m.batch, batch)
    m.put(m.g, g)
    m.backward(8)
    np.testing.assert_array_equal(m.dev.read(m.g, 32), ref.reference_backward(p, batch, g, 8))


@pytest.mark.parametrize("ns", [8, 2])
def test_mlp_loss(ns):
    rng = np.random.default_rng(20 + ns)
    m = Mlp()
    batch = random_batch(rng, ns, scale=4 * ref.ONE)
    batch[3 * ref.S] = 1 << 20                          # e e overflows into the sign bit: the shift is unsigned
    m.put(m.batch, batch)
    m.put(m.loss, [5])
    m.loss_(ns)
    assert int(m.dev.read(m.loss, 1)[0]) == ref.reference_loss(batch, 5, ns)


def test_sgd_rounds_to_nearest():
    rng = np.random.default_rng(30)
    m = Mlp()
    p = random_params(rng)
    g = rng.integers(-5000, 5000, 32)
    g[:8] = [32, -32, 31, -33, 96, -96, 0, 63]          # ties go up: (g + 32) >> 6
    g[8:10] = [INT32_MAX, INT32_MIN]                     # g + 32 wraps
    m.put(m.p, p)
    m.put(m.g, g)
    m.sgd()
    got = m.dev.read(m.p, 32)
    np.testing.assert_array_equal(got, ref.reference_sgd(p, g))
    assert list(got[:8] - ref.as_int32(p)[:8]) == [-1, 0, 0, 1, -2, 1, 0, -1]


def test_xor_training_matches_numpy_bit_for_bit():
    m = Mlp()
    p = ref.init_params(0)
    rng = np.random.default_rng(100)
    m.put(m.p, p)
    for step in range(4):
        batch = ref.sample_batch(rng, ref.S)            # the loader: x0, x1, t, and o = 0
        m.put(m.batch, batch)
        m.put(m.g, np.zeros(32, np.int64))
        m.put(m.loss, [0])
        records = m.dev.stats["records"]
        m.forward(ref.S)
        m.backward(ref.S)
        m.loss_(ref.S)
        m.sgd()
        p_ref, batch_ref, g_ref, loss_ref = ref.reference_xor_train_step(p, batch, ref.S)
        np.testing.assert_array_equal(m.dev.read(m.batch, 32), batch_ref, err_msg=f"step {step}: batch after forward")
        np.testing.assert_array_equal(m.dev.read(m.g, 32), g_ref, err_msg=f"step {step}: gradients")
        assert int(m.dev.read(m.loss, 1)[0]) == loss_ref, f"step {step}: loss"
        np.testing.assert_array_equal(m.dev.read(m.p, 32), p_ref, err_msg=f"step {step}: parameters")
        assert m.dev.stats["records"] > records
        p = p_ref


def test_reference_learns_xor():
    # The replay the device must match does learn XOR (so the device's bit-for-bit agreement is worth something).
    p = ref.init_params(0)
    rng = np.random.default_rng(100)
    for _ in range(300):
        p = ref.reference_xor_train_step(p, ref.sample_batch(rng, ref.S), ref.S)[0]
    out = ref.predict(p, ref.XOR_POINTS)
    assert np.all(np.abs(out - ref.XOR_POINTS[:, 2]) < ref.ONE // 8), out


# ---------------------------------------------------------------------------------------------------------------- idioms
# qwengpu/kernels/idioms.cu: CUDA as people write it (grid-stride loops, abs / min / max, atomics at computed
# addresses, division by a run-time value), each against numpy.

@pytest.mark.parametrize("threads,blocks,n", [(4, 1, 6), (4, 2, 13), (8, 2, 5), (3, 3, 20)])
def test_idioms_saxpy_grid_stride_ragged_tail(threads, blocks, n):
    rng = np.random.default_rng(n * threads + blocks)
    dev = Device()
    x, y = random_words(rng, 24, -1000, 1000), random_words(rng, 24, -1000, 1000)
    dev.write(0, y)
    dev.write(32, x)
    dev.launch(kernel(dev, "idioms.cu", "saxpy"), threads=threads, args=[0, 32, -7, n], blocks=blocks)
    expect = y.astype(np.int64)
    expect[:n] = -7 * x[:n].astype(np.int64) + y[:n]
    np.testing.assert_array_equal(dev.read(0, 24), expect)


@pytest.mark.parametrize("limit", [0, 5, 0xFFFFFFFE])
def test_idioms_abs_min_max_unsigned_compare(limit):
    rng = np.random.default_rng(limit % 97)
    x = random_words(rng, 4, -2**30, 2**30)
    x[:2] = [-3, 2]
    dev = Device()
    dev.write(32, x)
    dev.launch(kernel(dev, "idioms.cu", "absminmax"), threads=4, args=[0, 32, limit, 4])
    v = x.astype(np.int64)
    expect = np.concatenate([np.abs(v), np.minimum(v, 3) + np.maximum(v, -2), ((v & 0xFFFFFFFF) > limit)])
    np.testing.assert_array_equal(dev.read(0, 12), expect)


@pytest.mark.parametrize("threads,blocks,n", [(4, 1, 4), (4, 2, 7), (8, 3, 20)])
def test_idioms_histogram(threads, blocks, n):
    rng = np.random.default_rng(n)
    x = random_words(rng, 24)
    dev = Device()
    dev.write(0, np.zeros(4, dtype=np.int32))
    dev.write(32, x)
    dev.launch(kernel(dev, "idioms.cu", "histogram"), threads=threads, args=[0, 32, n], blocks=blocks)
    np.testing.assert_array_equal(dev.read(0, 4), np.bincount(x[:min(n, threads * blocks)] & 3, minlength=4))


def test_idioms_divide_by_a_run_time_value():
    x = np.array([100, -100, 7, -(2**31), 2**31 - 1, 0], dtype=np.int64)
    d = np.array([7, 7, -2, 3, -5, 9], dtype=np.int64)
    dev = Device()
    dev.write(32, x)
    dev.write(48, d)
    dev.launch(kernel(dev, "idioms.cu", "divide"), threads=6, args=[0, 32, 48, 6])
    q = np.array([abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1) for a, b in zip(x.tolist(), d.tolist())])
    np.testing.assert_array_equal(dev.read(0, 6), q)


# ------------------------------------------------------------------------------------------------------------------ bits
# qwengpu/kernels/bits.cu: mul.hi, division by constants, popc, clz, brev as sequences of existing ALU ops, against
# Python's integers on edge words (carries across every 16-bit boundary, the sign bit, all ones).

EDGE = [0, 1, 2, 3, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x12345678, 0xDEADBEEF, 0x0000FFFF, 0xFFFF0000,
        0x00010001, 0x55555555, 0xAAAAAAAB, 0x80000001]


def _signed(v):
    return v - (1 << 32) if v & 0x80000000 else v


def _as_words(values):
    return np.array([_signed(v & 0xFFFFFFFF) for v in values], dtype=np.int64)


def _bits_launch(name, x, y=None, out_words=16):
    dev = Device()
    dev.write(0, np.full(out_words, 0x5A5A5A5A, dtype=np.int32))
    dev.write(64, _as_words(x))
    if y is not None:
        dev.write(96, _as_words(y))
    dev.launch(kernel(dev, "bits.cu", name), threads=16, args=[0, 64] + ([96] if y is not None else []))
    return [int(v) & 0xFFFFFFFF for v in dev.read(0, out_words)]


@pytest.mark.parametrize("seed", [0, 1])
def test_bits_mulhi_unsigned_and_signed(seed):
    rng = np.random.default_rng(seed)
    x = EDGE if seed == 0 else [int(v) for v in rng.integers(0, 1 << 32, 16)]
    y = EDGE[::-1] if seed == 0 else [int(v) for v in rng.integers(0, 1 << 32, 16)]
    assert _bits_launch("umulhi", x, y) == [(a * b) >> 32 for a, b in zip(x, y)]
    assert _bits_launch("mulhi", x, y) == [((_signed(a) * _signed(b)) >> 32) & 0xFFFFFFFF for a, b in zip(x, y)]


def test_bits_division_by_constants():
    c_div = lambda a, b: abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)    # C truncates toward zero
    assert _bits_launch("udiv7", EDGE) == [v // 7 for v in EDGE]
    twice = lambda v: (lambda w: (w // 10 + w) & 0xFFFFFFFF)((v // 10 + v) & 0xFFFFFFFF)
    assert _bits_launch("udiv10loop", EDGE) == [twice(v) for v in EDGE]
    assert _bits_launch("div10", EDGE) == [c_div(_signed(v), 10) & 0xFFFFFFFF for v in EDGE]
    assert _bits_launch("remm13", EDGE) == [(_signed(v) - c_div(_signed(v), -13) * -13) & 0xFFFFFFFF
                                            for v in EDGE]


@pytest.mark.parametrize("name,fn", [
    ("popc", lambda v: bin(v).count("1")),
    ("clz", lambda v: 32 - v.bit_length()),
    ("brev", lambda v: int(format(v, "032b")[::-1], 2)),
])
def test_bits_popc_clz_brev(name, fn):
    assert _bits_launch(name, EDGE) == [fn(v) for v in EDGE]


def _highest_bit(v: int) -> int:
    """PTX's bfind result: the highest set bit's position, 0xffffffff for none."""
    return (v.bit_length() - 1) & 0xFFFFFFFF


@pytest.mark.parametrize("mode, fn", [
    (0, _highest_bit),
    (1, lambda v: _highest_bit(v ^ 0xFFFFFFFF if v >> 31 else v)),
    (2, lambda v: 31 - _highest_bit(v) if v else 0xFFFFFFFF),
    (3, lambda v: (lambda s: 31 - _highest_bit(s) if s else 0xFFFFFFFF)(v ^ 0xFFFFFFFF if v >> 31 else v)),
])
def test_bits_bfind(mode, fn):
    """bfind.u32 / .s32, with and without .shiftamt, from inline PTX (mode is a launch constant)."""
    dev = Device()
    dev.write(64, _as_words(EDGE))
    dev.launch(kernel(dev, "bits.cu", "bfind"), threads=16, args=[0, 64, mode])
    assert [int(v) & 0xFFFFFFFF for v in dev.read(0, 16)] == [fn(v) for v in EDGE]


def test_bits_ffs_and_sad():
    """__ffs (the lowest set bit from 1, 0 for 0: brev + bfind.shiftamt in PTX) and __usad / __sad (|x - y| + 7)."""
    assert _bits_launch("lowest_bit", EDGE) == [(v & -v).bit_length() for v in EDGE]
    y = EDGE[5:] + EDGE[:5]
    want = [(abs(a - b) + 7) & 0xFFFFFFFF for a, b in zip(EDGE, y)] + \
        [(abs(_signed(a) - _signed(b)) + 7) & 0xFFFFFFFF for a, b in zip(EDGE, y)]
    assert _bits_launch("sad", EDGE, y, out_words=32) == want


FUNNEL = r'''
extern "C" __global__ void funnel(unsigned *y, const unsigned *a, const unsigned *b, const int *s) {
    int i = threadIdx.x;
    unsigned x = a[i], z = b[i];
    int n = s[i];
    y[4 * i] = __funnelshift_l(x, z, n);
    y[4 * i + 1] = __funnelshift_r(x, z, n);
    y[4 * i + 2] = __funnelshift_lc(x, z, n);
    y[4 * i + 3] = __funnelshift_rc(x, z, n);
}
extern "C" __global__ void rotate(unsigned *y, const unsigned *a, const int *s) {
    int i = threadIdx.x;
    unsigned x = a[i];
    int n = s[i] & 31;
    y[2 * i] = (x << n) | (x >> (32 - n));
    y[2 * i + 1] = (x >> n) | (x << (32 - n));
}'''


@pytest.mark.parametrize("op", ["shr.s16", "shr.u16", "shl.b16"])
def test_a_16_bit_shift_by_an_amount_the_kernel_loads(op):
    """PTX's 16-bit shifts by a 32-bit amount (inline assembly on .b16 registers), which PTX clamps to 16: the
    value's sign fills a shr.s16 from 15 on, 0 is left of the others from 16 on (an amount of 0x10001 is not 1),
    against Python's integers."""
    source = ('extern "C" __global__ void k(unsigned *y, const unsigned *x) { int i = threadIdx.x; '
              'unsigned short a = x[i], r; unsigned b = x[i + 8]; '
              f'asm("{{ .reg .b16 t, v; .reg .b32 n; mov.b16 v, %1; mov.b32 n, %2; {op} t, v, n; mov.b16 %0, t; }}" '
              ': "=h"(r) : "h"(a), "r"(b)); y[i] = r; }')
    values = [0x8000, 0xFFFF, 0x7FFF, 0x1234, 0x8001, 5, 0xF00F, 0xC3A5]
    amounts = [3, 17, 15, 16, 1, 0, 40, 0x10001]
    dev = Device()
    dev.write(40, values + amounts)
    dev.launch(dev.load_kernel(source, "k"), threads=8, args=[0, 40])
    signed = [v - 0x10000 if v & 0x8000 else v for v in values]
    want = {"shr.s16": [(v >> min(n, 15)) & 0xFFFF for v, n in zip(signed, amounts)],
            "shr.u16": [v >> n if n < 16 else 0 for v, n in zip(values, amounts)],
            "shl.b16": [(v << n) & 0xFFFF if n < 16 else 0 for v, n in zip(values, amounts)]}[op]
    assert [int(v) & 0xFFFF for v in dev.read(0, 8)] == want


def test_a_byte_permute_by_a_selector_the_kernel_loads():
    """__byte_perm(x, y, s) with s in a register (PTX's prmt, default mode): each nibble of s picks a byte of
    {y, x} (0-3 from x, 4-7 from y; CUDA's __byte_perm reads 3 bits of it, NVRTC masks s with 0x7777, so PTX's
    sign-replicating bit 3 is met in tests/test_lower_stages.py); every nibble value in every position, against
    Python's integers."""
    source = ('extern "C" __global__ void permute(unsigned *y, unsigned x, unsigned z, const unsigned *s) '
              '{ y[threadIdx.x] = __byte_perm(x, z, s[threadIdx.x]); }')
    x, z = 0x80FF7F01, 0x12C3A45E
    selectors = [0x3210, 0x7654, 0x0123, 0xFEDC, 0xBA98] + [(k | (k + 1) % 16 << 4 | (k + 2) % 16 << 8 |
                                                             (k + 3) % 16 << 12) for k in range(0, 16, 5)]
    selectors += [0xFFFF0000 | s for s in selectors[:3]]       # bits past the low 16 are not read
    data = z << 32 | x
    dev = Device()
    kernel = dev.load_kernel(source, "permute")
    for start in range(0, len(selectors), 4):
        chunk = selectors[start:start + 4]
        dev.write(8, _as_words(chunk))
        dev.launch(kernel, threads=len(chunk), args=[0, x, z, 8])
        for got, s in zip(dev.read(0, len(chunk)), chunk):
            want = 0
            for i in range(4):
                nibble = s >> (4 * i) & 0xF
                want |= (data >> (8 * (nibble & 7)) & 0xFF) << (8 * i)
            assert int(got) & 0xFFFFFFFF == want, hex(s)


@pytest.mark.parametrize("amounts", [[0, 1, 31, 32], [33, 63, 64, 0xFFFFFFFF], [0x80000000, 5, 17, 40]])
def test_a_funnel_shift_by_an_amount_the_kernel_loads(amounts):
    """__funnelshift_l / _r (PTX's shf .wrap: the amount mod 32) and _lc / _rc (.clamp: at most 32) of {z, x} by
    an amount held in a register, and the rotate idiom NVRTC compiles to shf.l / .r.wrap, against Python's
    integers; amounts of 0, 32 and past it are where the word shifted out must vanish."""
    x = [0xDEADBEEF, 0x80000001, 0xFFFFFFFF, 0x12345678]
    z = [0x0F0F0F0F, 0x7FFFFFFF, 0, 0xCAFEBABE]
    dev = Device()
    dev.write(0, _as_words(x))
    dev.write(4, _as_words(z))
    dev.write(8, _as_words(amounts))
    dev.launch(dev.load_kernel(FUNNEL, "funnel"), threads=4, args=[16, 0, 4, 8])
    want = []
    for low, high, n in zip(x, z, amounts):
        wide, wrap, clamp = high << 32 | low, n % 32, min(n, 32)
        want += [(wide << wrap >> 32) & 0xFFFFFFFF, (wide >> wrap) & 0xFFFFFFFF,
                 (wide << clamp >> 32) & 0xFFFFFFFF, (wide >> clamp) & 0xFFFFFFFF]
    assert [int(v) & 0xFFFFFFFF for v in dev.read(16, 16)] == want
    dev.launch(dev.load_kernel(FUNNEL, "rotate"), threads=4, args=[16, 0, 8])
    want = []
    for v, n in zip(x, amounts):
        n %= 32
        want += [(v << n | v >> (32 - n)) & 0xFFFFFFFF, (v >> n | v << (32 - n)) & 0xFFFFFFFF]
    assert [int(v) & 0xFFFFFFFF for v in dev.read(16, 8)] == want



def _nth_set_bit(mask: int, base: int, offset: int) -> int:
    """The PTX ISA's pseudocode of fns.b32, step by step."""
    if offset == 0:
        return base if mask >> base & 1 else 0xFFFFFFFF
    pos, count, inc = base, abs(offset) - 1, 1 if offset > 0 else -1
    while 0 <= pos < 32:
        if mask >> pos & 1:
            if count == 0:
                return pos
            count -= 1
        pos += inc
    return 0xFFFFFFFF


@pytest.mark.parametrize("base, offset", [(0, 1), (0, 3), (5, 2), (31, -1), (20, -4), (7, 0), (31, 1), (0, -1),
                                          (12, 32), (16, -17)])
def test_the_n_th_set_bit_from_a_base_known_at_launch(base, offset):
    """__fns(mask, base, offset) (PTX's fns.b32) of masks the kernel loads, upward and downward, offset 0, none
    found (0xffffffff), against the ISA's pseudocode; a base or offset the machine computes is refused by name."""
    source = ('extern "C" __global__ void nth(unsigned *y, const unsigned *m, unsigned base, int offset) '
              '{ y[threadIdx.x] = __fns(m[threadIdx.x], base, offset); }')
    masks = [0xAAAAAAAA, 0x80000001, 0, 0xFFFFFFFF, 0x00F0F000, 0x12345678, 0x80, 0x7FFFFFFE]
    dev = Device()
    y, m = dev.alloc(8), dev.alloc(8)
    dev.write(m, _as_words(masks))
    dev.launch(dev.load_kernel(source, "nth"), threads=8, args=[y, m, base, offset & 0xFFFFFFFF])
    assert [int(v) & 0xFFFFFFFF for v in dev.read(y, 8)] == [_nth_set_bit(k, base, offset) for k in masks]


def test_the_n_th_set_bit_known_at_launch_folds_as_the_isa_says():
    """The lowering's folder (a mask known at launch: no ops) against the ISA's pseudocode, every base and offset."""
    from qwengpu.lowering.semantics import fns
    rng = np.random.default_rng(9)
    for mask in [0, 0xFFFFFFFF, 0x80000001] + [int(v) for v in rng.integers(0, 2**32, 6, dtype=np.uint64)]:
        for base in range(32):
            for offset in range(-33, 34):
                assert fns(mask, base, offset) == _nth_set_bit(mask, base, offset), (hex(mask), base, offset)


def test_the_n_th_set_bit_from_a_computed_base_is_refused():
    source = ('extern "C" __global__ void nth(unsigned *y, const unsigned *m) '
              '{ y[threadIdx.x] = __fns(m[threadIdx.x], m[4] & 31, 1); }')
    dev = Device()
    with pytest.raises(MachineError, match=r"fns \(__fns\) with a base or offset held in a register"):
        dev.launch(dev.load_kernel(source, "nth"), threads=4, args=[dev.alloc(4), dev.alloc(8)])


# ------------------------------------------------------------------------------------------------ local memory
# qwengpu/kernels/local.cu: an array a thread indexes at run time (.local: each thread's own words) and int4
# vector accesses (split into word accesses by the parser), against numpy.

@pytest.mark.parametrize("threads, n", [(4, 3), (8, 5), (6, 0), (5, 8)])
def test_a_thread_local_array_indexed_at_run_time(threads, n):
    rng = np.random.default_rng(threads * 10 + n)
    x = rng.integers(-1000, 1000, 16)
    dev = Device()
    dev.write(32, x)
    dev.launch(kernel(dev, "local.cu", "local_lookup"), threads=threads, args=[0, 32, n])
    want = []
    for t in range(threads):
        table = x[:5] * (t + 1)
        for i in range(n):
            table[x[t + i] & 3] += i + 1
        want.append(table[x[t + 1] & 3] - table[4])
    np.testing.assert_array_equal(dev.read(0, threads), want)


def test_a_thread_local_array_that_memory_cannot_hold_is_refused():
    """Five words a thread: 28 threads need 140 words; the refusal names the .local arrays and the limit."""
    dev = Device()
    with pytest.raises(MachineError, match=r"needs 140 words of \.local arrays \(__local_depot0 5 words a thread\)"):
        dev.launch(kernel(dev, "local.cu", "local_lookup"), threads=28, args=[0, 32, 1])


@pytest.mark.parametrize("threads", [1, 4, 6])
def test_int4_copies_are_word_accesses(threads):
    rng = np.random.default_rng(threads)
    x = rng.integers(-(1 << 31), 1 << 31, 4 * threads).reshape(threads, 4)
    dev = Device()
    dev.write(64, x.ravel())
    dev.write(0, np.full(4 * threads, 7))
    dev.launch(kernel(dev, "local.cu", "copy4"), threads=threads, args=[0, 64])
    want = x.copy()
    want[:, 1] += x[:, 0]
    want[:, 3] -= 1
    np.testing.assert_array_equal(dev.read(0, 4 * threads), want.astype(np.int64).astype(np.uint32).view(np.int32).ravel())


LOCAL_BY_SYMBOL = """.version 9.0
.target sm_90
.address_size 64
.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.local .align 4 .b8 depot[8];
\t.reg .b32 %r<4>;
\t.reg .b64 %rd<4>;
\tmov.u32 %r1, %tid.x;
\tmul.lo.s32 %r2, %r1, 3;
\tst.local.u32 [depot+4], %r2;
\tnanosleep.u32 %r1;
\tld.local.u32 %r3, [depot+4];
\tadd.s32 %r3, %r3, 1;
\tld.param.u64 %rd1, [k_param_0];
\tcvta.to.global.u64 %rd2, %rd1;
\tmul.wide.u32 %rd3, %r1, 4;
\tadd.s64 %rd2, %rd2, %rd3;
\tst.global.u32 [%rd2], %r3;
\tret;
}
"""


def test_local_words_named_by_their_symbol_and_a_sleep():
    """``[depot+4]`` (PTX as a person or clang writes it) is each thread's own word, across two warps; nanosleep
    (a hint about time, which the machine has none of) changes nothing."""
    dev = Device()
    out = dev.alloc(8)
    dev.launch(dev.load_kernel(LOCAL_BY_SYMBOL, "k"), threads=8, args=[out])
    np.testing.assert_array_equal(dev.read(out, 8), np.arange(8) * 3 + 1)


# ------------------------------------------------------------------------------------------------------------------ structs

class Scale(ctypes.Structure):
    """struct Scale { int *y; const int *x; int n; int factor; } (structs.cu); pointers as device word addresses."""
    _fields_ = [("y", ctypes.c_uint64), ("x", ctypes.c_uint64), ("n", ctypes.c_int), ("factor", ctypes.c_int)]


class Mixed(ctypes.Structure):
    _fields_ = [("s", ctypes.c_short), ("c", ctypes.c_byte), ("v", ctypes.c_int), ("u", ctypes.c_ubyte)]


@pytest.mark.parametrize("n, factor", [(6, -3), (8, 7), (0, 5)])
def test_a_struct_of_pointers_and_ints_passed_by_value(n, factor):
    """The same kernel with other field values: its lowering is reused (qwengpu.specialize) or redone, and each
    launch reads its own struct."""
    rng = np.random.default_rng(n)
    dev = Device()
    y, x = dev.alloc(8), dev.alloc(8)
    xv = random_words(rng, 8, -1000, 1000)
    dev.write(x, xv)
    dev.write(y, np.full(8, 99))
    k = kernel(dev, "structs.cu", "scale")
    dev.launch(k, threads=8, args=[Scale(y, x, n, factor)])
    np.testing.assert_array_equal(dev.read(y, 8), np.where(np.arange(8) < n, xv * factor, 99))
    dev.launch(k, threads=8, args=[bytes(Scale(y, x, 8, 2))])       # plain bytes do as well
    np.testing.assert_array_equal(dev.read(y, 8), xv * 2)


def test_narrow_struct_fields_with_padding_and_a_numpy_record():
    """short, signed char, int and unsigned char fields at C's offsets (0, 2, 4, 8), given as a ctypes struct and as
    a numpy record with the same aligned layout."""
    dev = Device()
    out = dev.alloc(4)
    record = np.array([(-300, -7, 100000, 200)],
                      dtype=np.dtype([("s", "<i2"), ("c", "i1"), ("v", "<i4"), ("u", "u1")], align=True))[0]
    for value in (Mixed(-300, -7, 100000, 200), record):
        dev.launch(kernel(dev, "structs.cu", "mixed"), threads=4, args=[out, value])
        np.testing.assert_array_equal(dev.read(out, 4), [-300 * t - 7 + 100000 + 200 for t in range(4)])


def test_a_struct_beside_scalars_with_its_pointer_after_an_int():
    class Window(ctypes.Structure):
        _fields_ = [("offset", ctypes.c_int), ("data", ctypes.c_uint64)]
    dev = Device()
    out, x = dev.alloc(4), dev.alloc(16)
    xv = np.arange(16) * 3 - 20
    dev.write(x, xv)
    dev.launch(kernel(dev, "structs.cu", "window_sum"), threads=4, args=[out, Window(3, x), 4])
    np.testing.assert_array_equal(dev.read(out, 4), [xv[3 + t:7 + t].sum() for t in range(4)])


def test_struct_arguments_are_checked():
    dev = Device()
    k = kernel(dev, "structs.cu", "scale")
    with pytest.raises(MachineError, match=r"scale argument 1 is a struct of 24 bytes: pass its bytes"):
        dev.launch(k, threads=4, args=[5])
    with pytest.raises(MachineError, match=r"scale argument 1 is a struct of 24 bytes, got 16 bytes"):
        dev.launch(k, threads=4, args=[bytes(16)])
    with pytest.raises(MachineError, match=r"the pointer at byte 8 is 500, not a device word address 0\.\.127"):
        dev.launch(k, threads=4, args=[Scale(0, 500, 4, 1)])
    assert dev.tokens == []


# ------------------------------------------------------------------------------------------------------------------ dim3

def cuda_indices(shape, grid):
    """(linear block, linear thread) -> (threadIdx, blockIdx) as CUDA numbers them, x fastest."""
    for b, (bz, by, bx) in enumerate(np.ndindex(grid[2], grid[1], grid[0])):
        for t, (tz, ty, tx) in enumerate(np.ndindex(shape[2], shape[1], shape[0])):
            yield b, t, (tx, ty, tz), (bx, by, bz)


@pytest.mark.parametrize("shape, grid", [((4, 2, 1), (2, 3, 1)), ((3, 2, 1), (3, 2, 1)), ((5, 3, 1), (1, 2, 1)),
                                         ((8, 1, 1), (1, 4, 1))])
def test_matrix_add_on_a_2d_grid_of_2d_blocks(shape, grid):
    """threads=(x, y), blocks=(x, y): row from y, column from x; blocks past the matrix's edge do nothing."""
    rows, cols = 5, 7
    rng = np.random.default_rng(shape[0] * 10 + grid[1])
    dev = Device()
    a, b, c = dev.alloc(rows * cols), dev.alloc(rows * cols), dev.alloc(rows * cols)
    av, bv = random_words(rng, rows * cols), random_words(rng, rows * cols)
    dev.write(a, av)
    dev.write(b, bv)
    dev.write(c, np.full(rows * cols, 0x5A5A5A5A))
    dev.launch(kernel(dev, "idioms.cu", "matrix_add"), threads=shape[:2], blocks=grid[:2],
               args=[c, a, b, rows, cols])
    expect = np.full((rows, cols), 0x5A5A5A5A, dtype=np.int64)
    for _, _, (tx, ty, _), (bx, by, _) in cuda_indices(shape, grid):
        row, col = by * shape[1] + ty, bx * shape[0] + tx
        if row < rows and col < cols:
            expect[row, col] = (int(av[row * cols + col]) + int(bv[row * cols + col]) + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(dev.read(c, rows * cols), expect.ravel())


@pytest.mark.parametrize("shape, grid", [((3, 2, 2), (2, 2, 2)), ((2, 2, 4), (1, 3, 1)), ((4, 4, 1), (3, 1, 2))])
def test_every_index_of_a_3d_block_in_a_3d_grid(shape, grid):
    n, count = int(np.prod(shape)), int(np.prod(grid))
    dev = Device()
    out = dev.alloc(n * count)
    dev.launch(kernel(dev, "idioms.cu", "indices3d"), threads=shape, blocks=grid, args=[out])
    expect = np.zeros(n * count, dtype=np.int64)
    for b, t, (tx, ty, tz), (bx, by, bz) in cuda_indices(shape, grid):
        expect[b * n + t] = (tx | ty << 4 | tz << 8 | bx << 12 | by << 16 | bz << 20 | (sum(shape) + sum(grid)) << 24)
    np.testing.assert_array_equal(dev.read(out, n * count), expect)


def test_dim3_sizes_are_checked():
    dev = Device()
    k = kernel(dev, "idioms.cu", "indices3d")
    for threads, blocks, words in (((0, 4), 1, r"threads=\(0, 4\): a launch has 1\.\.1024 threads"),
                                   ((64, 32), 1, r"threads=\(64, 32\): a launch has 1\.\.1024 threads"),
                                   ((2, 2, 2, 2), 1, r"give an int or \(x, y\) or \(x, y, z\)"),
                                   (4, (2, 0), r"blocks=\(2, 0\): a launch has 1\.\.1024 blocks")):
        with pytest.raises(MachineError, match=words):
            dev.launch(k, threads=threads, blocks=blocks, args=[0])
    assert dev.tokens == []


def test_the_circuit_writes_the_interpreters_tokens_for_a_2d_block():
    """threads=(3, 2): threadIdx.x is tid % 3 and threadIdx.y tid / 3 on the circuit too (its division by 3)."""
    def tokens(backend):
        dev = Device(backend=backend)
        a, b, c = dev.alloc(6), dev.alloc(6), dev.alloc(6)
        dev.write(a, np.arange(6) * 5)
        dev.write(b, np.arange(6) - 9)
        dev.launch(kernel(dev, "idioms.cu", "matrix_add"), threads=(3, 2), args=[c, a, b, 2, 3])
        return dev.read(c, 6), [(t.id, t.origin) for t in dev.tokens]
    (values, circuit), (ref_values, interpreter) = tokens("circuit"), tokens("interpreter")
    np.testing.assert_array_equal(values, np.arange(6) * 6 - 9)
    np.testing.assert_array_equal(values, ref_values)
    assert circuit == interpreter


def test_the_command_line_takes_dim3_sizes_float_and_struct_arguments(capsys):
    """``python -m qwengpu asm / trace --threads 4x2 --blocks 2x3``, float --args, a struct's default zero bytes:
    trace's records are those of dev.launch with the same sizes."""
    from qwengpu.__main__ import main
    idioms, floats, structs = (str(KERNELS / name) for name in ("idioms.cu", "floats.cu", "structs.cu"))
    assert main(["asm", idioms, "--kernel", "matrix_add", "--args", "0,40,80,5,7", "--threads", "4x2",
                 "--blocks", "2x3"]) == 0
    assert "threads=4x2 blocks=2x3" in capsys.readouterr().out
    assert main(["asm", floats, "--kernel", "clamp", "--args", "0,16,-1.5,2e0", "--threads", "16"]) == 0
    assert "args=[0, 16, -1.5, 2.0]" in capsys.readouterr().out
    assert main(["asm", structs, "--kernel", "window_sum"]) == 0
    assert "args=[0, 0x" + "00" * 16 + ", 0]" in capsys.readouterr().out
    assert main(["trace", idioms, "--kernel", "matrix_add", "--args", "0,40,80,3,3", "--threads", "2x2",
                 "--blocks", "2x2"]) == 0
    records = [line for line in capsys.readouterr().out.splitlines() if " values=" in line]
    dev = Device()
    dev.launch(kernel(dev, "idioms.cu", "matrix_add"), threads=(2, 2), blocks=(2, 2), args=[0, 40, 80, 3, 3])
    assert len(records) == dev.stats["records"]


def test_64_bit_popc_and_clz_of_a_widened_word():
    """__popcll / __clzll of an unsigned int widened to 64 bits (its high word is zero: popc of the low word, 32 plus
    its clz); of a sign-extended int the high word is the sign's, which the lowering keeps as a pair of words
    (lowering.pairs: the words' counts added)."""
    source = ('extern "C" __global__ void wide(unsigned *y, const unsigned *x) {\n'
              '    int i = threadIdx.x;\n'
              '    y[i] = __popcll((unsigned long long)x[i]) + 100 * __clzll((unsigned long long)x[i]);\n}\n'
              'extern "C" __global__ void signed_wide(unsigned *y, const int *x) {\n'
              '    y[threadIdx.x] = __popcll((long long)x[threadIdx.x]);\n}\n')
    dev = Device()
    y, x = dev.alloc(16), dev.alloc(16)         # allocated: the overlays' state takes the top words
    dev.write(x, _as_words(EDGE))
    dev.launch(dev.load_kernel(source, "wide"), threads=16, args=[y, x])
    assert [int(v) & 0xFFFFFFFF for v in dev.read(y, 16)] == [bin(v).count("1") + 100 * (64 - v.bit_length())
                                                               for v in EDGE]
    dev.launch(dev.load_kernel(source, "signed_wide"), threads=16, args=[y, x])
    assert dev.read(y, 16).tolist() == [bin(_signed(v) % 2**64).count("1") for v in EDGE]
