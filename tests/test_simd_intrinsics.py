"""CUDA's SIMD intrinsics (``__vadd4``, ``__vsadu2``, ``__vcmpgts4``, ... : two 16-bit or four 8-bit lanes of a word)
and sm_90's DPX intrinsics (``__vimax3_s32``, ``__viaddmin_u16x2``, ``__vibmax_s32``, ``__vimax_s16x2_relu``, ...)
on the machine, against their definitions in CUDA's Math API, written here in Python's integers.

CUDA's headers write them as inline PTX: lane-wise ``add.u16x2`` / ``max.s16x2``, the SIMD video instructions
``vabsdiff2`` / ``vabsdiff4`` (with ``.add``: a sum of absolute differences), ``lop3.b32`` (a three-input logic
op by a truth table), ``prmt`` and ``mov.b32 {lo, hi}`` (a word split into its halves). Each intrinsic runs on
edge words (every lane at its signed and unsigned extremes) and random ones.
"""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import Device


def _lanes(word: int, bits: int) -> list[int]:
    return [(word >> (bits * i)) & ((1 << bits) - 1) for i in range(32 // bits)]


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) else v


def _word(values: list[int], bits: int) -> int:
    return sum((v & ((1 << bits) - 1)) << (bits * i) for i, v in enumerate(values))


def _clamp(v: int, bits: int, signed: bool) -> int:
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return min(max(v, low), high)


def _halved_away_from_zero(total: int) -> int:
    """A signed rounded average: the sum halved, a half rounded away from zero (-64.5 to -65)."""
    magnitude = (abs(total) + 1) // 2
    return magnitude if total >= 0 else -magnitude


def _lanewise(fn, signed: bool):
    """An intrinsic that maps each pair of lanes (as signed or unsigned integers) to a lane of the result."""
    def intrinsic(a: int, b: int, bits: int) -> int:
        x, y = _lanes(a, bits), _lanes(b, bits)
        if signed:
            x, y = [_signed(v, bits) for v in x], [_signed(v, bits) for v in y]
        return _word([fn(p, q, bits) for p, q in zip(x, y)], bits)
    return intrinsic


def _summed(signed: bool):
    """A sum of absolute differences: one unsigned int, not lanes."""
    def intrinsic(a: int, b: int, bits: int) -> int:
        x, y = _lanes(a, bits), _lanes(b, bits)
        if signed:
            x, y = [_signed(v, bits) for v in x], [_signed(v, bits) for v in y]
        return sum(abs(p - q) for p, q in zip(x, y))
    return intrinsic


_COMPARES = {"eq": lambda p, q: p == q, "ne": lambda p, q: p != q, "lt": lambda p, q: p < q,
             "le": lambda p, q: p <= q, "gt": lambda p, q: p > q, "ge": lambda p, q: p >= q}

# name (without the lane count) -> (Python definition of two words and the lane width, arity)
BINARY = {
    "vabsdiffs": _lanewise(lambda p, q, n: abs(p - q), True),
    "vabsdiffu": _lanewise(lambda p, q, n: abs(p - q), False),
    "vadd": _lanewise(lambda p, q, n: p + q, False),
    "vaddss": _lanewise(lambda p, q, n: _clamp(p + q, n, True), True),
    "vaddus": _lanewise(lambda p, q, n: _clamp(p + q, n, False), False),
    "vavgs": _lanewise(lambda p, q, n: _halved_away_from_zero(p + q), True),
    "vavgu": _lanewise(lambda p, q, n: (p + q + 1) >> 1, False),       # rounded: halves up
    "vhaddu": _lanewise(lambda p, q, n: (p + q) >> 1, False),           # truncated
    "vmaxs": _lanewise(lambda p, q, n: max(p, q), True),
    "vmaxu": _lanewise(lambda p, q, n: max(p, q), False),
    "vmins": _lanewise(lambda p, q, n: min(p, q), True),
    "vminu": _lanewise(lambda p, q, n: min(p, q), False),
    "vsads": _summed(True),
    "vsadu": _summed(False),
    "vsub": _lanewise(lambda p, q, n: p - q, False),
    "vsubss": _lanewise(lambda p, q, n: _clamp(p - q, n, True), True),
    "vsubus": _lanewise(lambda p, q, n: _clamp(p - q, n, False), False),
}
for _cmp, _test in _COMPARES.items():
    for _kind in (("s", "u") if _cmp not in ("eq", "ne") else ("",)):
        # __vcmp*: each lane all ones where the compare holds; __vset*: 1 there
        BINARY[f"vcmp{_cmp}{_kind}"] = _lanewise(lambda p, q, n, t=_test: -1 if t(p, q) else 0, _kind == "s")
        BINARY[f"vset{_cmp}{_kind}"] = _lanewise(lambda p, q, n, t=_test: 1 if t(p, q) else 0, _kind == "s")
UNARY = {
    "vabs": _lanewise(lambda p, q, n: abs(p), True),                 # |-2^(n-1)| wraps to itself
    "vabsss": _lanewise(lambda p, q, n: _clamp(abs(p), n, True), True),
    "vneg": _lanewise(lambda p, q, n: -p, True),
    "vnegss": _lanewise(lambda p, q, n: _clamp(-p, n, True), True),
}
INTRINSICS = [(f"{name}{lanes}", fn, 2) for name, fn in BINARY.items() for lanes in (2, 4)] + \
    [(f"{name}{lanes}", fn, 1) for name, fn in UNARY.items() for lanes in (2, 4)]

# every lane at 0, 1, the signed extremes and all ones, for bytes and for halves, in both operands' orders
EDGES = [0x00000000, 0xFFFFFFFF, 0x80008000, 0x7FFF7FFF, 0x80808080, 0x7F7F7F7F, 0x01FF7F80, 0x807F0001,
         0xFF0080FF, 0x0001FFFF, 0x7F80FF01, 0x12345678]


def test_every_simd_intrinsic_is_defined_here():
    """The table holds CUDA's 82 SIMD intrinsics of 32-bit words, each once."""
    assert len(INTRINSICS) == 82 and len({name for name, _, _ in INTRINSICS}) == 82


@pytest.mark.parametrize("name,fn,arity", INTRINSICS, ids=[name for name, _, _ in INTRINSICS])
def test_a_simd_intrinsic_equals_its_definition(name, fn, arity):
    bits = 16 if name.endswith("2") else 8
    call = f"__{name}(a[i], b[i])" if arity == 2 else f"__{name}(a[i])"
    source = (f'extern "C" __global__ void k(unsigned *y, const unsigned *a, const unsigned *b) '
              f'{{ int i = threadIdx.x; y[i] = {call}; }}')
    rng = np.random.default_rng(sum(map(ord, name)))
    a = EDGES + [int(v) for v in rng.integers(0, 1 << 32, 12)]
    b = EDGES[::-1] + [int(v) for v in rng.integers(0, 1 << 32, 12)]
    dev = Device()
    kernel = dev.load_kernel(source, "k")
    got = []
    for start in range(0, len(a), 8):
        dev.write(8, np.array(a[start:start + 8], dtype=np.uint32).view(np.int32))
        dev.write(16, np.array(b[start:start + 8], dtype=np.uint32).view(np.int32))
        dev.launch(kernel, threads=8, args=[0, 8, 16])
        got += [int(v) & 0xFFFFFFFF for v in dev.read(0, 8)]
    want = [fn(x, y, bits) & 0xFFFFFFFF for x, y in zip(a, b)]
    assert got == want, [(hex(x), hex(y), hex(g), hex(w)) for x, y, g, w in zip(a, b, got, want) if g != w][:4]


# sm_90's DPX intrinsics: three-way and add-then min / max, with .relu, and the ones that say which operand won.
# name -> (its definition, arity, lane bits, signed lanes)
def _dpx(fn_of):
    """An intrinsic that maps the operands' lanes (signed or unsigned) to a lane of the result."""
    def intrinsic(words, bits, signed):
        lanes = [_lanes(w, bits) for w in words]
        if signed:
            lanes = [[_signed(v, bits) for v in lane] for lane in lanes]
        return _word([fn_of(*values) for values in zip(*lanes)], bits)
    return intrinsic


DPX = {}
for _op, _pick in (("max", max), ("min", min)):
    for _type in ("s32", "u32", "s16x2", "u16x2"):
        _bits = 16 if _type.endswith("x2") else 32
        _is_signed = _type[0] == "s"
        DPX[f"__vi{_op}3_{_type}"] = (_dpx(lambda a, b, c, p=_pick: p(a, b, c)), 3, _bits, _is_signed)
        DPX[f"__viadd{_op}_{_type}"] = (_dpx(lambda a, b, c, p=_pick, n=_bits, s=_is_signed: p(
            _signed((a + b) & ((1 << n) - 1), n) if s else (a + b) & ((1 << n) - 1), c)), 3, _bits, _is_signed)
        if _is_signed:      # .relu: a negative result is 0
            DPX[f"__vi{_op}_{_type}_relu"] = (_dpx(lambda a, b, p=_pick: max(p(a, b), 0)), 2, _bits, True)
            DPX[f"__vi{_op}3_{_type}_relu"] = (_dpx(lambda a, b, c, p=_pick: max(p(a, b, c), 0)), 3,
                                                _bits, True)
            DPX[f"__viadd{_op}_{_type}_relu"] = (_dpx(lambda a, b, c, p=_pick, n=_bits: max(p(_signed(
                (a + b) & ((1 << n) - 1), n), c), 0)), 3, _bits, True)


@pytest.mark.parametrize("name", sorted(DPX))
def test_a_dpx_intrinsic_equals_its_definition(name):
    fn, arity, bits, signed = DPX[name]
    args = ", ".join(["a[i]", "b[i]", "c[i]"][:arity])
    source = (f'extern "C" __global__ void k(unsigned *y, const unsigned *a, const unsigned *b, const unsigned *c) '
              f'{{ int i = threadIdx.x; y[i] = {name}({args}); }}')
    rng = np.random.default_rng(sum(map(ord, name)))
    words = [EDGES + [int(v) for v in rng.integers(0, 1 << 32, 4)] for _ in range(3)]
    words[1], words[2] = words[1][::-1], words[2][5:] + words[2][:5]
    dev = Device()
    kernel = dev.load_kernel(source, "k")
    got = []
    for start in range(0, len(words[0]), 8):
        for k in range(3):
            dev.write(8 * (k + 1), np.array(words[k][start:start + 8], dtype=np.uint32).view(np.int32))
        dev.launch(kernel, threads=8, args=[0, 8, 16, 24])
        got += [int(v) & 0xFFFFFFFF for v in dev.read(0, 8)]
    want = [fn(list(ws)[:arity], bits, signed) & 0xFFFFFFFF for ws in zip(*words)]
    assert got == want, [(g, w) for g, w in zip(got, want) if g != w][:4]


@pytest.mark.parametrize("name", ["__vibmax_s32", "__vibmin_u32", "__vibmax_u16x2", "__vibmin_s16x2"])
def test_a_dpx_intrinsic_says_which_operand_won(name):
    """__vibmax / __vibmin: the max / min, and (per lane) whether a won: a >= b for max, a <= b for min."""
    bits = 16 if name.endswith("x2") else 32
    signed, pick = name.split("_")[-1][0] == "s", max if "max" in name else min
    won = (lambda p, q: p >= q) if "max" in name else (lambda p, q: p <= q)
    flags = "bool hi, lo; y[i] = {}(a[i], b[i], &hi, &lo); y[i + 8] = 2 * hi + lo;" if bits == 16 else \
        "bool p; y[i] = {}(a[i], b[i], &p); y[i + 8] = p;"
    source = (f'extern "C" __global__ void k(unsigned *y, const unsigned *a, const unsigned *b) '
              f'{{ int i = threadIdx.x; {flags.format(name)} }}')
    a, b = EDGES[:8], EDGES[4:] + EDGES[:4]
    dev = Device()
    dev.write(16, np.array(a, dtype=np.uint32).view(np.int32))
    dev.write(24, np.array(b, dtype=np.uint32).view(np.int32))
    dev.launch(dev.load_kernel(source, "k"), threads=8, args=[0, 16, 24])
    got = [int(v) & 0xFFFFFFFF for v in dev.read(0, 16)]
    for i, (x, y) in enumerate(zip(a, b)):
        xs, ys = _lanes(x, bits), _lanes(y, bits)
        if signed:
            xs, ys = [_signed(v, bits) for v in xs], [_signed(v, bits) for v in ys]
        assert got[i] == _word([pick(p, q) for p, q in zip(xs, ys)], bits), (hex(x), hex(y))
        assert got[8 + i] == sum(won(p, q) << k for k, (p, q) in enumerate(zip(xs, ys))), (hex(x), hex(y))


DOT = r'''
extern "C" __global__ void int8_dot(int *y, const int *x, const int *w, int words) {
    int acc = 0;
    for (int k = 0; k < words; ++k) acc = __dp4a(x[threadIdx.x * words + k], w[k], acc);
    y[threadIdx.x] = acc;
}
extern "C" __global__ void dots(unsigned *y, const unsigned *a, const unsigned *b, const unsigned *c) {
    int i = threadIdx.x;
    y[i] = __dp4a(a[i], b[i], c[i]);
    y[i + 4] = __dp2a_lo((int)a[i], (int)b[i], (int)c[i]);
    y[i + 8] = __dp2a_hi(a[i], b[i], c[i]);
}'''


def test_an_int8_dot_product_by_dp4a_equals_numpys():
    """The int8 inference idiom: rows of int8 weights packed four to a word, multiplied and summed by __dp4a (PTX's
    dp4a.s32.s32), against numpy's int32 dot product."""
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (4, 12), dtype=np.int8)
    x[0, :4] = -128
    w = rng.integers(-128, 128, 12, dtype=np.int8)
    w[:4] = -128
    dev = Device()
    dev.write(8, x.view(np.int32).ravel())
    dev.write(24, w.view(np.int32))
    dev.launch(dev.load_kernel(DOT, "int8_dot"), threads=4, args=[0, 8, 24, 3])
    np.testing.assert_array_equal(dev.read(0, 4), x.astype(np.int32) @ w.astype(np.int32))


def test_unsigned_dp4a_and_dp2a_equal_their_definitions():
    """__dp4a of unsigned bytes, __dp2a_lo of signed halves and bytes 0-1, __dp2a_hi of unsigned ones and bytes 2-3,
    each plus c (wrapping at 32 bits), against Python's integers."""
    a, b, c = EDGES[:4], EDGES[4:8], [0xFFFFFFFF, 7, 0x80000000, 0x12345678]
    dev = Device()
    for k, words in enumerate((a, b, c)):
        dev.write(16 + 4 * k, np.array(words, dtype=np.uint32).view(np.int32))
    dev.launch(dev.load_kernel(DOT, "dots"), threads=4, args=[0, 16, 20, 24])
    got = [int(v) & 0xFFFFFFFF for v in dev.read(0, 12)]
    for i in range(4):
        ab, bb = _lanes(a[i], 8), _lanes(b[i], 8)
        ah, bs = [_signed(v, 16) for v in _lanes(a[i], 16)], [_signed(v, 8) for v in bb]
        assert got[i] == (c[i] + sum(p * q for p, q in zip(ab, bb))) & 0xFFFFFFFF
        assert got[i + 4] == (_signed(c[i], 32) + ah[0] * bs[0] + ah[1] * bs[1]) & 0xFFFFFFFF
        au = _lanes(a[i], 16)
        assert got[i + 8] == (c[i] + au[0] * bb[2] + au[1] * bb[3]) & 0xFFFFFFFF
