"""Doubles on the machine (qwengpu.lowering.doubles): float64 add, sub and mul in each rounding, conversions to and
from float32 and int, compares, min / max, as 64-bit integer PTX kept in pairs of words; checked against the exact
result rounded by Python's fractions (every rounding) and against numpy's float64 (to nearest), bit for bit, and
the NaN results against a GPU's where one is lent."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from qccl_bench.double_check import BINARY32, CANONICAL_NAN, bits, draw, expected, fused, quotient, root, rounded
from qwengpu import Device, MachineError, toolchain

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

FLOAT_NAN = 0x7FFFFFFF


# Straight-line kernels, a thread an element: a loop or a branch around the doubles' long sequences would put each
# of their ops under a lane predicate, which the lowering takes much longer to cut into overlays.
ARITHMETIC = r"""
extern "C" __global__ void nearest(const double *a, const double *b, double *out)
{
    int i = threadIdx.x;
    out[3 * i] = a[i] + b[i];
    out[3 * i + 1] = a[i] - b[i];
    out[3 * i + 2] = a[i] * b[i];
}

extern "C" __global__ void sums(const double *a, const double *b, double *out)
{
    int i = threadIdx.x;
    out[6 * i + 0] = __dadd_rz(a[i], b[i]);
    out[6 * i + 1] = __dadd_rd(a[i], b[i]);
    out[6 * i + 2] = __dadd_ru(a[i], b[i]);
    out[6 * i + 3] = __dsub_rz(a[i], b[i]);
    out[6 * i + 4] = __dsub_rd(a[i], b[i]);
    out[6 * i + 5] = __dsub_ru(a[i], b[i]);
}

extern "C" __global__ void products(const double *a, const double *b, double *out)
{
    int i = threadIdx.x;
    out[3 * i + 0] = __dmul_rz(a[i], b[i]);
    out[3 * i + 1] = __dmul_rd(a[i], b[i]);
    out[3 * i + 2] = __dmul_ru(a[i], b[i]);
}
"""


class Machine:
    """One device for the module, each kernel loaded (and lowered) once: a launch of a thread an element, two at
    most (each thread keeps a few words of overlay state), its arrays allocated and freed around it."""

    def __init__(self):
        self.dev = Device()
        self.kernels = {}

    def launch(self, source: str, name: str, inputs: list, outputs: list[int]) -> list[np.ndarray]:
        """inputs: arrays written; outputs: words of each output; returns the outputs' words (uint32)."""
        dev = self.dev
        if (source, name) not in self.kernels:
            self.kernels[source, name] = dev.load_kernel(source, name)
        words = [np.ascontiguousarray(x).reshape(-1).view(np.uint32) if x.dtype.itemsize == 8 else x for x in inputs]
        pointers = [dev.alloc(len(w)) for w in words] + [dev.alloc(n) for n in outputs]
        try:
            for p, w in zip(pointers, words):
                dev.write(p, w)
            dev.launch(self.kernels[source, name], threads=len(inputs[0]), args=pointers)
            return [dev.read(p, n).view(np.uint32) for p, n in zip(pointers[len(inputs):], outputs)]
        finally:
            for p in pointers:
                dev.free(p)


@pytest.fixture(scope="module")
def machine():
    return Machine()


def _run(machine, name: str, a: np.ndarray, b: np.ndarray, per: int) -> np.ndarray:
    n = len(a)
    out, = machine.launch(ARITHMETIC, name, [a, b], [2 * n * per])
    return out.view(np.uint64).reshape(n, per)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_add_sub_mul_round_to_nearest_as_ieee(machine, seed):
    """Against the exact result rounded once and numpy's float64 (which are one: IEEE's), random bits of every
    kind, cancellations (b = -a, a neighbour of a) and the edges: subnormals, overflow, infinities, NaNs, zeros.
    bench/double_check.py runs thousands."""
    rng = np.random.default_rng(seed)
    a, b = draw(rng, 2), draw(rng, 2)
    b[:1] = a[:1] * rng.choice([1.0, -1.0, 1 + 2 ** -52, -(1 - 2 ** -53)], 1)
    got = _run(machine, "nearest", a, b, 3)
    with np.errstate(all="ignore"):
        numpy = np.stack([a + b, a - b, a * b], 1)
    for i in range(len(a)):
        for j, op in enumerate("+-*"):
            want = expected(float(a[i]), float(b[i]), op, "rn")
            assert int(got[i, j]) == want, (a[i], op, b[i], hex(int(got[i, j])), hex(want))
            assert want == (CANONICAL_NAN if np.isnan(numpy[i, j]) else int(numpy[i, j:j + 1].view(np.uint64)[0]))


@pytest.mark.parametrize("a, b", [(0.1, 0.7), (-1.7976931348623157e308, -1.5e308), (1e-300, -3e-20),
                                  (3.0, 3.0)])
def test_add_sub_mul_in_the_directed_roundings(machine, a, b):
    """__dadd_rz / _rd / _ru, __dsub_*, __dmul_* (add / sub / mul .rz / .rm / .rp .f64) against the exact result
    rounded toward zero, minus and plus infinity: inexact sums and products, overflow to the largest finite or to
    infinity by the mode and the sign, a subnormal product, x - x (-0 rounding down)."""
    x, y = np.array([a, -b]), np.array([b, a])
    sums, products = _run(machine, "sums", x, y, 6), _run(machine, "products", x, y, 3)
    for i in range(2):
        got = sums[i].tolist() + products[i].tolist()
        cases = [(op, mode) for op in "+-*" for mode in ("rz", "rm", "rp")]
        want = [expected(float(x[i]), float(y[i]), op, mode) for op, mode in cases]
        assert got == want, (x[i], y[i], [hex(v) for v in got], [hex(v) for v in want])


FUSED = r"""
extern "C" __global__ void fused(const double *a, const double *b, const double *c, double *out)
{
    int i = threadIdx.x;
    out[4 * i + 0] = fma(a[i], b[i], c[i]);
    out[4 * i + 1] = __fma_rz(a[i], b[i], c[i]);
    out[4 * i + 2] = __fma_rd(a[i], b[i], c[i]);
    out[4 * i + 3] = __fma_ru(a[i], b[i], c[i]);
}
"""
TINY = 5e-324


@pytest.mark.parametrize("a, b, c", [
    ((0.1, 1 + 2 ** -52), (10.0, 1 + 2 ** -52), (-1.0, -1 - 2 ** -51)),   # what a * b rounded first loses
    ((1.7976931348623157e308, 3.0), (2.0, 1e-300), (-1.7976931348623157e308, 1e-310)),  # past the largest, then back
    ((1e-300, 3.0), (1e-20, 5e-324), (-1e-320, 0.0)),                      # subnormal results
    ((0.0, -0.0), (-1.0, 5.0), (0.0, -0.0)),                               # zeros' signs
    ((1e300, -2.5), (1e-300, 1e-30), (TINY, 1e200)),                       # c far below / far above the product
    ((np.inf, np.inf), (0.0, 2.0), (1.0, -np.inf)),                        # inf * 0, inf - inf: NaN
    ((np.inf, 2.0), (-2.0, 3.0), (-np.inf, np.inf)),                       # an infinity the sum keeps
    ((np.nan, 1.0), (1.0, np.nan), (1.0, 0.0)),
])
def test_fused_multiply_add_rounds_once(machine, a, b, c):
    """fma.rn / rz / rm / rp .f64 (CUDA's fma, __fma_rz / _rd / _ru) against a * b + c exact, rounded once by
    Python's fractions: 0.1 * 10 - 1 is 10 times 0.1's error (a multiply then an add gives 0), a cancellation to
    2^-104 (the product's last bit), a product past the largest double brought back by c, subnormal results, zeros'
    signs in every rounding, c far below the product (a sticky bit) and far above, and IEEE's NaNs and infinities.
    bench/double_check.py --fma runs thousands."""
    a, b, c = np.array(a), np.array(b), np.array(c)
    got, = machine.launch(FUSED, "fused", [a, b, c], [16])
    got = got.view(np.uint64).reshape(2, 4).tolist()
    for i in range(2):
        x, y, z = float(a[i]), float(b[i]), float(c[i])
        want = [fused(x, y, z, mode) for mode in ("rn", "rz", "rm", "rp")]
        assert got[i] == want, (x, y, z, [hex(v) for v in got[i]], [hex(v) for v in want])
    if a[0] == 0.1:     # Python's float of the exact value (0.1's error times 10), where a * b + c gives 0
        assert got[0][0] == bits(float(Fraction(0.1) * 10 - 1)) != bits(0.1 * 10.0 - 1.0)


QUOTIENTS = r"""
extern "C" __global__ void nearest_roots(const double *a, const double *b, double *out)
{
    int i = threadIdx.x;
    out[2 * i + 0] = a[i] / b[i];
    out[2 * i + 1] = sqrt(a[i]);
}

extern "C" __global__ void directed_roots(const double *a, const double *b, double *out)
{
    int i = threadIdx.x;
    out[2 * i + 0] = __ddiv_rd(a[i], b[i]);
    out[2 * i + 1] = __dsqrt_ru(a[i]);
}

// the textbook integration of 4 / (1 + x^2) over [0, 1], a term a thread
extern "C" __global__ void pi_terms(double *terms, double step)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    double x = (i + 0.5) * step;
    terms[i] = 4.0 / (1.0 + x * x);
}
"""


@pytest.mark.parametrize("name, a, b", [("nearest_roots", (4.0, 5e-324), (0.0, 1e-310)),
                                        ("nearest_roots", (-2.0, 1.7976931348623157e308), (np.inf, 0.3)),
                                        ("directed_roots", (2.0, -0.0), (3.0, 0.0))])
def test_division_and_square_roots_round_once(machine, name, a, b):
    """div.rn / .rm and sqrt.rn / .rp .f64 (CUDA's a / b, __ddiv_rd, sqrt, __dsqrt_ru) against the exact quotient
    and root rounded once: x / 0, 0 / 0, a subnormal over a subnormal, overflow, a negative number's root (NaN), exact
    roots (4.0, -0.0) and inexact ones. Each is a loop of a bit a trip, longer than the ROM: thousands of records
    (bench/double_check.py --roots runs many)."""
    a, b = np.array(a), np.array(b)
    mode = "rn" if name == "nearest_roots" else None
    got, = machine.launch(QUOTIENTS, name, [a, b], [8])
    got = got.view(np.uint64).reshape(2, 2).tolist()
    for i in range(2):
        x, y = float(a[i]), float(b[i])
        want = [quotient(x, y, mode or "rm"), root(x, mode or "rp")]
        assert got[i] == want, (x, y, [hex(v) for v in got[i]], [hex(v) for v in want])


def test_the_textbook_pi_integration():
    """Each thread's term 4 / (1 + x^2) of the midpoint rule, x = (i + 0.5) * step with step a double argument:
    the machine's conversion, multiply, add and division against numpy's float64, bit for bit."""
    dev = Device()
    terms = dev.alloc(4)
    step = 1.0 / 3
    dev.launch(dev.load_kernel(QUOTIENTS, "pi_terms"), threads=2, args=[terms, step])
    x = (np.arange(2) + 0.5) * step
    assert dev.read(terms, 4).view(np.float64).tolist() == (4.0 / (1.0 + x * x)).tolist()


CONVERSIONS = r"""
extern "C" __global__ void floats(const float *f, const double *d, double *widened, float *narrowed)
{
    int i = threadIdx.x;
    widened[i] = (double)f[i];
    narrowed[4 * i + 0] = (float)d[i];
    narrowed[4 * i + 1] = __double2float_rz(d[i]);
    narrowed[4 * i + 2] = __double2float_rd(d[i]);
    narrowed[4 * i + 3] = __double2float_ru(d[i]);
}

extern "C" __global__ void ints(const double *d, const int *k, double *from_int, int *to_int, unsigned *to_unsigned)
{
    int i = threadIdx.x;
    from_int[2 * i] = (double)k[i];
    from_int[2 * i + 1] = (double)(unsigned)k[i];
    to_int[i] = (int)d[i];
    to_unsigned[i] = (unsigned)d[i];
}
"""
F = [1.5, -0.0, 1e-45, -3e-39, np.inf, np.nan, 3.4028235e38, 0.1]
D = [0.1, -1e300, 1e-46, -7e-39, 2 ** 31 - 0.5, -2 ** 31 - 0.75, np.nan, 4e9, 3.4028235677973366e38,
     -3.4028236e38, 1.401298464324817e-45 * 0.5, 2.0 ** -149 * 1.5]
K = [0, -1, 2 ** 31 - 1, -2 ** 31, 12345, -7, 1 << 24, 3]


@pytest.mark.parametrize("first", range(0, 12, 2))
def test_conversions_to_and_from_float(machine, first):
    """(double)f exact (float32 subnormals normalised, NaN canonical); (float)d in each rounding (float32
    subnormals and their halfway cases, overflow past the largest float32 by the mode, NaN canonical)."""
    f, d = np.array(F * 2, np.float32)[first:first + 2], np.array(D, np.float64)[first:first + 2]
    widened, narrowed = machine.launch(CONVERSIONS, "floats", [f, d], [4, 8])
    assert widened.view(np.uint64).tolist() == [CANONICAL_NAN if np.isnan(v) else bits(float(v)) for v in f]
    got = narrowed.reshape(2, 4).tolist()
    for i, v in enumerate(d):
        want = [FLOAT_NAN] * 4 if np.isnan(v) else [rounded(Fraction(float(v)), mode, form=BINARY32)
                                                    for mode in ("rn", "rz", "rm", "rp")]
        assert got[i] == want, (v, [hex(x) for x in got[i]], [hex(x) for x in want])
        if not np.isnan(v):
            with np.errstate(over="ignore"):
                assert want[0] == int(np.float32(v).view(np.uint32))        # numpy's (float) too


@pytest.mark.parametrize("first", range(0, 8, 2))
def test_conversions_to_and_from_int(machine, first):
    """(double)int and (double)unsigned exact, (int)d and (unsigned)d toward zero, saturated as PTX's cvt.rzi,
    NaN 0."""
    d, k = np.array(D, np.float64)[first:first + 2], np.array(K, np.int32)[first:first + 2]
    from_int, to_int, to_unsigned = machine.launch(CONVERSIONS, "ints", [d, k], [8, 2, 2])
    assert from_int.view(np.float64).reshape(2, 2).tolist() == [[float(v), float(v % 2 ** 32)] for v in k.tolist()]

    assert to_int.view(np.int32).tolist() == [saturated(float(v), -2 ** 31, 2 ** 31 - 1) for v in d]
    assert to_unsigned.tolist() == [saturated(float(v), 0, 2 ** 32 - 1) for v in d]


def saturated(v: float, lo: int, hi: int) -> int:
    """C's cast toward zero, saturated to [lo, hi] as PTX's cvt.rzi does (an infinity too), a NaN 0."""
    if math.isnan(v):
        return 0
    return min(max(math.trunc(v), lo), hi) if math.isfinite(v) else (hi if v > 0 else lo)


INTEGRAL = r"""
extern "C" __global__ void integral(const double *d, double *r, long long *to, unsigned long long *to_unsigned,
                                    int *nearest)
{
    int i = threadIdx.x;
    r[4 * i + 0] = trunc(d[i]);
    r[4 * i + 1] = floor(d[i]);
    r[4 * i + 2] = ceil(d[i]);
    r[4 * i + 3] = rint(d[i]);
    to[i] = (long long)d[i];
    to_unsigned[i] = (unsigned long long)d[i];
    nearest[3 * i + 0] = __double2int_rn(d[i]);
    nearest[3 * i + 1] = __double2int_rd(d[i]);
    nearest[3 * i + 2] = (int)__double2uint_ru(d[i]);
}
"""


@pytest.mark.parametrize("d", [(2.5, -2.5), (-0.3, 0.7), (-0.0, 4503599627370497.0), (np.nan, -1e19),
                               (9.3e18, np.inf), (-3.7, 1.8e19)])
def test_trunc_floor_ceil_rint_and_long_long_casts(machine, d):
    """trunc, floor, ceil, rint of doubles (cvt.rzi / rmi / rpi / rni .f64.f64: ties to even, |x| < 1 to a zero
    of its sign or to 1.0, integers past 2^52 as they are, NaN canonical) against numpy's; (long long)d and
    (unsigned long long)d toward zero, saturated, a NaN 0; __double2int_rn / _rd and __double2uint_ru (cvt.rni /
    rmi / rpi: the integral value, then saturated)."""
    d = np.array(d)
    r, to, to_unsigned, nearest = machine.launch(INTEGRAL, "integral", [d], [16, 4, 4, 6])
    got = r.view(np.uint64).reshape(2, 4).tolist()
    for i, x in enumerate(d.tolist()):
        assert got[i] == [CANONICAL_NAN if math.isnan(x) else bits(float(f(np.float64(x))))
                          for f in (np.trunc, np.floor, np.ceil, np.rint)], x
    assert to.view(np.int64).tolist() == [saturated(x, -2 ** 63, 2 ** 63 - 1) for x in d.tolist()]
    assert to_unsigned.view(np.uint64).tolist() == [saturated(x, 0, 2 ** 64 - 1) for x in d.tolist()]
    assert nearest.view(np.int32).reshape(2, 3).tolist() == [
        [saturated(float(np.rint(x)), -2 ** 31, 2 ** 31 - 1), saturated(float(np.floor(x)), -2 ** 31, 2 ** 31 - 1),
         np.int32(np.uint32(saturated(float(np.ceil(x)), 0, 2 ** 32 - 1))).item()] for x in d.tolist()]


LONGS = r"""
extern "C" __global__ void longs(const long long *k, double *from_signed, double *from_unsigned)
{
    int i = threadIdx.x;
    unsigned long long u = (unsigned long long)k[i];
    from_signed[4 * i + 0] = (double)k[i];
    from_signed[4 * i + 1] = __ll2double_rz(k[i]);
    from_signed[4 * i + 2] = __ll2double_rd(k[i]);
    from_signed[4 * i + 3] = __ll2double_ru(k[i]);
    from_unsigned[4 * i + 0] = (double)u;
    from_unsigned[4 * i + 1] = __ull2double_rz(u);
    from_unsigned[4 * i + 2] = __ull2double_rd(u);
    from_unsigned[4 * i + 3] = __ull2double_ru(u);
}
"""


@pytest.mark.parametrize("k", [(0, -1), (2 ** 53 + 1, -(2 ** 53 + 3)), (2 ** 63 - 1, -2 ** 63),
                               (-2 ** 62 - 1, 12345678901234567), (2 ** 54 + 2, -(2 ** 55 + 12)),
                               (0x7FFFFFFFFFFFFDFF, -2 ** 63 + 1025), (-0x1234567890ABCDEF, 1)])
def test_a_long_long_converted_to_a_double_rounds_once(machine, k):
    """(double) of a long long and of an unsigned long long in each rounding (cvt.rn / rz / rm / rp .f64.s64 /
    u64: __ll2double_rz, __ull2double_ru, ...) against the integer rounded by Python's fractions: ties to even
    (2^53 + 1, 2^53 + 3), a tail past half (2^54 + 2 is a tie, 2^55 + 12 is not), a magnitude with bit 63 set
    (-2^63; unsigned, every negative one: 2^64 - 1 rounds up to 2^64, and 2^63 + 1025 is past half only by its
    last bit, which moving the top bit to bit 62 shifts out into a sticky bit), 0 as +0."""
    k = np.array(k, np.int64)
    from_signed, from_unsigned = machine.launch(LONGS, "longs", [k], [16, 16])
    for i, v in enumerate(k.tolist()):
        assert from_signed.view(np.uint64)[4 * i:4 * i + 4].tolist() == [
            rounded(Fraction(v), mode) for mode in ("rn", "rz", "rm", "rp")], v
        assert from_unsigned.view(np.uint64)[4 * i:4 * i + 4].tolist() == [
            rounded(Fraction(v % 2 ** 64), mode) for mode in ("rn", "rz", "rm", "rp")], v % 2 ** 64
    assert from_signed.view(np.float64)[::4].tolist() == k.astype(np.float64).tolist()      # numpy's (double)


ATOMICS = r"""
extern "C" __global__ void sums(double *total, const double *x, double *old, double *shared_total)
{
    __shared__ double s;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0) s = -0.0;
    __syncthreads();
    old[i] = atomicAdd(total, x[i]);
    if (x[i] != 1.0) atomicAdd(&s, x[i]);          // a guarded atomic; and one in shared memory
    __syncthreads();
    if (threadIdx.x == 0) shared_total[blockIdx.x] = s;
}
"""


@pytest.mark.parametrize("x", [(1e16, 1.5, -1e16, 1.0), (5e-324, 5e-324, np.inf, -np.inf)])
def test_atomic_add_of_doubles_lands_in_lane_order(x):
    """atomicAdd on a double (atom.global / .shared .add.f64) as a compare-and-swap loop: each lane's add lands in
    lane order, blocks one after another, so the total and each lane's old value equal numpy's float64 sums in that
    order (0.5 + 1e16 + 1.5 - 1e16 + 1.0 is 3.0: 1e16 + 1.5 rounds to nearest, up; another order or rounding
    gives 2.5 or 1.0), the guarded one skipping 1.0; subnormals are not flushed (the shared sum of two is 1e-323);
    inf - inf is the canonical NaN."""
    x = np.array(x)
    dev = Device()
    total, px, old, shared_total = dev.alloc(2), dev.alloc(8), dev.alloc(8), dev.alloc(4)
    dev.write(total, np.array([0.5]))
    dev.write(px, x)
    dev.launch(dev.load_kernel(ATOMICS, "sums"), threads=2, blocks=2, args=[total, px, old, shared_total])
    running, olds = np.float64(0.5), []
    with np.errstate(invalid="ignore"):
        for v in x:
            olds.append(running)
            running = running + v
        blocks = [np.float64(-0.0) + sum(v for v in x[2 * b:2 * b + 2] if v != 1.0) for b in range(2)]
    expect = [CANONICAL_NAN if np.isnan(v) else bits(float(v)) for v in [running, *olds, *blocks]]
    assert dev.read(total, 2).view(np.uint64).tolist() == expect[:1]
    assert dev.read(old, 8).view(np.uint64).tolist() == expect[1:5]
    assert dev.read(shared_total, 4).view(np.uint64).tolist() == expect[5:]


ORDER = r"""
extern "C" __global__ void order(const double *a, const double *b, unsigned *tests, double *out)
{
    int i = threadIdx.x;
    double x = a[i], y = b[i];
    tests[i] = (x < y) | (x <= y) << 1 | (x > y) << 2 | (x >= y) << 3 | (x == y) << 4 | (x != y) << 5
             | !(x < y) << 6 | isnan(x) << 7 | isinf(x) << 8 | isfinite(x) << 9 | (x > 0.5) << 10
             | signbit(x) << 11;
    out[5 * i] = fmin(x, y);
    out[5 * i + 1] = fmax(x, y);
    out[5 * i + 2] = -x;
    out[5 * i + 3] = fabs(y);
    out[5 * i + 4] = copysign(x, y);
}
"""
A = [1.0, -0.0, np.nan, np.nan, -np.inf, 5e-324, 0.5, 2.0]
B = [2.0, 0.0, 1.0, np.nan, -1e308, -5e-324, 0.5, -np.nan]


@pytest.mark.parametrize("first", range(0, 8, 2))
def test_compares_classes_min_max_and_signs(machine, first):
    """The six compares and a negation against numpy's (a NaN unordered), isnan / isinf / isfinite / signbit, a
    compare with a literal; fmin / fmax as PTX's min / max.f64 (a NaN operand ignored, two NaNs the canonical NaN,
    -0 below +0), -x, fabs and copysign of the sign bit alone (a NaN's too)."""
    a, b = np.array(A[first:first + 2]), np.array(B[first:first + 2])
    n = len(a)
    tests, out = machine.launch(ORDER, "order", [a, b], [n, 10 * n])
    got = tests.tolist()
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        flags = [x < y, x <= y, x > y, x >= y, x == y, x != y, not x < y, math.isnan(x), math.isinf(x),
                 math.isfinite(x), x > 0.5, math.copysign(1, x) < 0]
        assert got[i] == sum(int(v) << j for j, v in enumerate(flags)), (x, y, bin(got[i]))
    values = out.view(np.uint64).reshape(n, 5).tolist()

    def ordered(x: float, y: float, larger: bool) -> int:
        if math.isnan(x) and math.isnan(y):
            return CANONICAL_NAN
        if math.isnan(x) or math.isnan(y):
            return bits(y if math.isnan(x) else x)
        key = lambda v: (v, math.copysign(1, v))         # -0 below +0
        return bits(max(x, y, key=key) if larger else min(x, y, key=key))
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        assert values[i] == [ordered(x, y, False), ordered(x, y, True), bits(x) ^ (1 << 63),
                             bits(y) & ~(1 << 63), bits(x) & ~(1 << 63) | bits(y) & (1 << 63)], (x, y)


KERNELS = r"""
extern "C" __global__ void scale(float *y, const float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.1 * x[i];          // a double by accident: 0.1 is a double
}

extern "C" __global__ void daxpy(double *y, const double *x, double a, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
"""


def test_a_double_by_accident_runs_as_a_gpu_computes_it():
    """``0.1 * x[i]`` of a float: the float widened, the double product, rounded to a float (not 0.1f * x[i],
    which rounds differently: 3 of these 8 differ)."""
    x = np.array([1.0, -460.42657, 626.54047, 1e-45, 3.3e38, 870.14484, 123456.79, -2.5e-39], np.float32)
    dev = Device()
    px, py = dev.alloc(8), dev.alloc(8)
    dev.write(px, x)
    dev.launch(dev.load_kernel(KERNELS, "scale"), threads=4, blocks=2, args=[py, px, 8])
    want = (0.1 * x.astype(np.float64)).astype(np.float32)
    assert dev.read(py, 8).view(np.float32).view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert (want != np.float32(0.1) * x).sum() == 3


def test_daxpy_with_a_double_argument():
    """The grid-stride daxpy: a double parameter (the launch converts a Python float to its bits), double arrays
    written and read as two words a value; a * x[i] + y[i] as a multiply, then an add (the toolchain compiles
    without fused multiply-adds), as numpy's float64."""
    x = np.array([1.5, -2.25, 1e300, 3.0, 0.1, -0.0], np.float64)
    y = np.array([0.1, 0.2, -1e300, 5e-324, 1e-17, 0.0], np.float64)
    dev = Device()
    px, py = dev.alloc(12), dev.alloc(12)
    dev.write(px, x)
    dev.write(py, y)
    dev.launch(dev.load_kernel(KERNELS, "daxpy"), threads=2, blocks=2, args=[py, px, 0.3, 6])
    assert dev.read(py, 12).view(np.float64).view(np.uint64).tolist() == (0.3 * x + y).view(np.uint64).tolist()


def test_a_double_argument_that_is_no_number_is_refused():
    dev = Device()
    kernel = dev.load_kernel(KERNELS, "daxpy")
    with pytest.raises(MachineError, match=r"kernel daxpy argument 3 .* must be a number, got 'x'"):
        dev.launch(kernel, threads=2, args=[0, 8, "x", 2])


def test_on_a_gpu_double_bits_equal_the_machines(machine, cuda_gpu):
    """The GPU's own double add, sub, mul, fma and (float) of a double, NaN results included (whose bits IEEE leaves
    open: the machine writes 0x7fffffffffffffff, as NVIDIA's float unit writes 0x7fffffff), bit for bit against the
    machine, where a device is lent (bench/gpu_check.sh runs the tests). Compiled with --fmad=false, as the
    toolchain compiles: a * b + c is a multiply, then an add."""
    cupy = cuda_gpu
    rng = np.random.default_rng(5)
    a, b = draw(rng, 16), draw(rng, 16)
    a[:4] = [np.inf, np.nan, 0.0, -np.inf]
    b[:4] = [-np.inf, 1.0, np.inf, -np.inf]
    module = cupy.RawModule(code=ARITHMETIC + CONVERSIONS + FUSED, options=("--fmad=false",))
    out = cupy.zeros(3 * len(a), cupy.float64)
    module.get_function("nearest")((1,), (len(a),), (cupy.asarray(a), cupy.asarray(b), out))
    gpu = cupy.asnumpy(out).view(np.uint64).reshape(-1, 3)
    for first in range(0, len(a), 2):
        got = _run(machine, "nearest", a[first:first + 2], b[first:first + 2], 3)
        assert got.tolist() == gpu[first:first + 2].tolist(), (a[first:first + 2], b[first:first + 2])
    # fma in the four roundings, c = -(a * b) on half the lanes (a product's error, the NaNs of inf * 0)
    c = draw(rng, 16)
    with np.errstate(all="ignore"):
        c[::2] = -(a[::2] * b[::2])
    out = cupy.zeros(4 * len(a), cupy.float64)
    module.get_function("fused")((1,), (len(a),), (cupy.asarray(a), cupy.asarray(b), cupy.asarray(c), out))
    gpu = cupy.asnumpy(out).view(np.uint64).reshape(-1, 4)
    for first in range(0, len(a), 2):
        got, = machine.launch(FUSED, "fused", [a[first:first + 2], b[first:first + 2], c[first:first + 2]], [16])
        assert got.view(np.uint64).reshape(2, 4).tolist() == gpu[first:first + 2].tolist(), first


WORDS = r"""
extern "C" __global__ void words(const int *w, int *out, double *joined)
{
    int i = threadIdx.x;
    double d = __hiloint2double(w[2 * i + 1], w[2 * i]);       // mov.b64 d, {lo, hi}
    joined[i] = d * 2.0;
    out[2 * i] = __double2hiint(d);                             // mov.b64 {_, hi}, d
    out[2 * i + 1] = __double2loint(d * 2.0);                   // mov.b64 {lo, _}, d
}
"""


def test_a_double_made_of_words_and_its_words():
    """PTX's mov.b64 between a double and its { lo, hi } words (parsed as a conversion and shifts): a double
    joined from two ints, doubled, and its words read back, against numpy's views."""
    w = np.array([1.5, -3.25e-300]).view(np.int32)
    dev = Device()
    pw, out, joined = dev.alloc(4), dev.alloc(4), dev.alloc(4)
    dev.write(pw, w)
    dev.launch(dev.load_kernel(WORDS, "words"), threads=2, args=[pw, out, joined])
    doubled = w.view(np.float64) * 2.0
    assert dev.read(joined, 4).view(np.float64).tolist() == doubled.tolist()
    assert dev.read(out, 4).tolist() == [w[1], doubled.view(np.int32)[0], w[3], doubled.view(np.int32)[2]]
