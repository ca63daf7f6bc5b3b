"""CUDA's SIMD intrinsics (``__vadd4``, ``__vsadu2``, ``__vcmpgts4``, ... : two 16-bit or four 8-bit lanes of a word)
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
