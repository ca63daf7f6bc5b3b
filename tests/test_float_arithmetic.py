"""float32 add, sub, mul, int to float, div, rcp and sqrt (qwengpu/lowering/floats.py, ``_sum``, ``_mul``,
``_from_integer``, ``_quotient``, ``_sqrt``): the integer PTX they are rewritten into, held bit for bit against numpy's
IEEE float32 (round to nearest even, subnormals kept, a NaN result the canonical NaN 0x7fffffff, as NVIDIA's non-FTZ
float unit writes it).

Two ways: the rewritten instructions run by a small evaluator of PTX's integer semantics written here (independent
of the lowering's constant folder; branches for the loop forms), on every pair of edge values, ties both ways,
cancellations, overflow and underflow, quotients and roots within a hair of half-way, and tens of thousands of random
bit patterns and random floats of mixed scale; and CUDA kernels launched on the interpreter: operands that are launch
arguments (the lowering folds the whole sequence to a constant store) and operands in memory, which the machine
computes, a few hundred each, a division under a divergent branch among them. Then the refusals."""
from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction

import numpy as np
import pytest

from qwengpu import Device, MachineError
from qwengpu.lowering.floats import as_integers
from qwengpu.ptx import Imm, Instruction, Kernel, Label, Mem, Reg
from qwengpu.toolchain import compile_cuda

CANONICAL_NAN = 0x7FFFFFFF
SIGN_BIT = 0x80000000
U32 = np.uint32

EDGE = [0x00000000, 0x80000000,                          # zeros
        0x00000001, 0x80000001, 0x00000002, 0x00000003,  # the smallest subnormals
        0x007FFFFF, 0x807FFFFF, 0x00400000, 0x00400001,  # the largest subnormal, halves
        0x00800000, 0x80800000, 0x00800001, 0x00FFFFFF,  # the smallest normals
        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE, 0x7F000000,  # the largest
        0x7F800000, 0xFF800000,                          # infinities
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FFFFFFF, 0xFFC00123,   # NaNs, payloads, both signs
        0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF, 0xBF800001, 0x3F000000,   # 1 and neighbours, 0.5
        0x33800000, 0x33800001, 0x337FFFFF, 0xB3800000,  # 2^-24 and neighbours: half an ulp of 1
        0x34000000, 0x4B800000, 0x4B800001, 0x4B7FFFFF, 0x3FC00000, 0x40400000,
        0x1F800000, 0x5F800000, 0x20000000, 0x1E000000, 0x60000000, 0x0C000000]   # products near the limits


def f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=U32).view(np.float32)


def canonical(values: np.ndarray) -> np.ndarray:
    """numpy's float32 results as NVIDIA's float unit writes them: any NaN the canonical NaN."""
    bits = np.asarray(values, dtype=np.float32).view(U32).copy()
    bits[np.isnan(values)] = CANONICAL_NAN
    return bits


def reference(op: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op == "add":
            return canonical(f32(a) + f32(b))
        if op == "sub":
            return canonical(f32(a) - f32(b))
        if op == "mul":
            return canonical(f32(a) * f32(b))
        if op == "div":
            return canonical(f32(a) / f32(b))
        if op == "rcp":
            return canonical(np.float32(1.0) / f32(a))
        if op == "sqrt":
            return canonical(np.sqrt(f32(a)))
        if op == "s32":
            return canonical(np.asarray(a, dtype=U32).view(np.int32).astype(np.float32))
        if op == "u32":
            return canonical(np.asarray(a, dtype=U32).astype(np.float32))
    raise ValueError(op)


# ------------------------------------------------------------------------------------------------ an evaluator

def _signed(x: np.ndarray) -> np.ndarray:
    return x.view(np.int32)


def _shl(a, b):
    return np.where(b < 32, a << np.minimum(b, 31).astype(U32), U32(0)).astype(U32)


def _shr_u(a, b):
    return np.where(b < 32, a >> np.minimum(b, 31).astype(U32), U32(0)).astype(U32)


def _shr_s(a, b):
    return (_signed(a) >> np.minimum(b, 31).astype(np.int32)).view(U32)


def _compare(test, a, b, signed):
    if signed:
        a, b = _signed(a), _signed(b)
    return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[test].astype(U32)


BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b, "shl": _shl,
}


def evaluate(body: list, registers: dict[str, np.ndarray], n: int, trace: list | None = None
             ) -> dict[str, np.ndarray]:
    """Run integer PTX on n lanes at once (numpy uint32 words, predicates 0 / 1), PTX's meaning written from the ISA
    manual: wrap-around arithmetic, shift amounts of 32 or more give 0 (shr.s32: the sign), guarded instructions
    write only where the guard holds; a branch (the rewrites' counted loops) must be taken on every lane or on none.
    Only the opcodes the float rewrites emit. ``trace``: each instruction run is appended to it."""
    regs = dict(registers)
    labels = {item.name: k for k, item in enumerate(body) if isinstance(item, Label)}

    def value(operand):
        if isinstance(operand, Imm):
            return np.full(n, operand.value & 0xFFFFFFFF, dtype=U32)
        return regs[operand.name]

    pc = 0
    while pc < len(body):
        inst = body[pc]
        pc += 1
        if isinstance(inst, Label):
            continue
        assert isinstance(inst, Instruction), inst
        if trace is not None:
            trace.append(inst)
        if inst.base == "bra":
            taken = np.ones(n, dtype=bool) if inst.guard is None else (regs[inst.guard.name] != 0) ^ inst.guard_negated
            assert taken.all() or not taken.any(), "a divergent branch"
            assert len(trace or ()) < 100000, "a loop that does not end"
            if taken.all():
                pc = labels[inst.operands[0].name]
            continue
        opcode, (dst, *operands) = inst.opcode, inst.operands
        assert not any(m in ("f32", "f16", "f64", "rn", "ftz") for m in inst.modifiers), inst.opcode
        args = [value(o) for o in operands]
        base, mods = inst.base, inst.modifiers
        with np.errstate(over="ignore"):
            if base == "setp":
                result = _compare(mods[0], args[0], args[1], mods[1] == "s32")
            elif base == "selp":
                result = np.where(args[2] != 0, args[0], args[1]).astype(U32)
            elif base == "mov":
                result = args[0].copy()
            elif base == "not":
                result = ~args[0]
            elif base == "neg":
                result = (U32(0) - args[0]).astype(U32)
            elif base == "abs":
                result = np.abs(_signed(args[0]).astype(np.int64)).astype(np.uint64).astype(U32)
            elif base == "mul" and mods == ("lo", "u32"):
                result = (args[0].astype(np.uint64) * args[1].astype(np.uint64) & 0xFFFFFFFF).astype(U32)
            elif base in ("min", "max"):
                pick = np.minimum if base == "min" else np.maximum
                result = pick(_signed(args[0]), _signed(args[1])).view(U32) if mods[0] == "s32" else \
                    pick(args[0], args[1])
            elif base == "shr":
                result = (_shr_s if mods[0] == "s32" else _shr_u)(args[0], args[1])
            elif base == "cvt" and mods in (("u32", "u16"), ("u16", "u32")):
                result = args[0] & U32(0xFFFF)          # a half's 16 bits, in and out of its b16 register
            elif base in BINARY and len(mods) == 1:
                result = BINARY[base](args[0], args[1]).astype(U32)
            else:
                raise AssertionError(f"the evaluator does not know {opcode}")
        if inst.guard is not None:
            holds = regs[inst.guard.name] != 0
            if inst.guard_negated:
                holds = ~holds
            result = np.where(holds, result, regs[dst.name])
        regs[dst.name] = result.astype(U32)
    return regs


def float_kernel(opcode: str, operands: int | None = None, guard: bool = False,
                 literal: int | None = None) -> Kernel:
    """One float instruction on registers %f1 (and %f2, or a literal; an fma's c: %f4), writing %f3 (cvt reads
    %r1)."""
    if operands is None:
        operands = 1 if opcode.startswith(("sqrt", "rcp")) else 3 if opcode.startswith(("fma", "mad")) else 2
    if opcode.startswith("cvt"):
        sources = (Reg("%r1"),)
    else:
        sources = (Reg("%f1"), Reg("%f2") if literal is None else Imm(literal), Reg("%f4"))[:operands]
    text = f"{opcode} %f3, ..."
    body = [Instruction(opcode, (Reg("%f3"),) + sources, Reg("%p1") if guard else None, False, 3, text)]
    return Kernel("k", body=body, registers={"%f": "f32", "%r": "b32", "%p": "pred"})


def run(opcode: str, a: np.ndarray, b: np.ndarray | None = None, literal: int | None = None,
        c: np.ndarray | None = None) -> np.ndarray:
    """The rewritten instructions of ``opcode`` evaluated on each (a, b) (or (a, b, c) for an fma)."""
    kernel = as_integers(float_kernel(opcode, literal=literal))
    a = np.asarray(a, dtype=U32)
    n = len(a)
    registers = {"%r1": a} if opcode.startswith("cvt") else {"%f1": a}
    if b is not None:
        registers["%f2"] = np.asarray(b, dtype=U32)
    if c is not None:
        registers["%f4"] = np.asarray(c, dtype=U32)
    registers["%f3"] = np.full(n, 0x5A5A5A5A, dtype=U32)
    return evaluate(kernel.body, registers, n)["%f3"]


OPCODES = {"add": "add.rn.f32", "sub": "sub.f32", "mul": "mul.rn.f32", "div": "div.rn.f32", "rcp": "rcp.rn.f32",
           "sqrt": "sqrt.rn.f32"}
UNARY = ("rcp", "sqrt")


def check(op: str, a, b=None, literal: int | None = None) -> None:
    a = np.asarray(a, dtype=U32)
    if op in ("s32", "u32"):
        got, expect = run(f"cvt.rn.f32.{op}", a), reference(op, a)
    elif op in UNARY:
        got, expect = run(OPCODES[op], a), reference(op, a)
    else:
        b = np.asarray(b, dtype=U32) if literal is None else np.full(len(a), literal, dtype=U32)
        got = run(OPCODES[op], a, None if literal is not None else b, literal)
        expect = reference(op, a, b)
    bad = np.flatnonzero(got != expect)
    if len(bad):
        rows = [f"{int(a[i]):08x} {'' if b is None else f'{int(b[i]):08x} '}-> {int(got[i]):08x}, numpy "
                f"{int(expect[i]):08x}" for i in bad[:10]]
        raise AssertionError(f"{op}: {len(bad)} of {len(a)} differ:\n" + "\n".join(rows))


def pairs(values) -> tuple[np.ndarray, np.ndarray]:
    grid = np.array(list(itertools.product(values, repeat=2)), dtype=U32)
    return grid[:, 0], grid[:, 1]


def random_bits(rng, n: int) -> np.ndarray:
    return rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(U32)


def mixed_scale(rng, n: int) -> np.ndarray:
    """Random floats of every scale: significands of random bits, exponents over the whole range (subnormals and
    overflow included), and near neighbours of one another (cancellation)."""
    exponents = rng.integers(0, 255, n, dtype=np.uint64).astype(U32)
    fractions = random_bits(rng, n) & U32(0x7FFFFF)
    signs = (random_bits(rng, n) & U32(1)) << U32(31)
    return signs | (exponents << U32(23)) | fractions


def near(rng, x: np.ndarray) -> np.ndarray:
    """Floats a few ulps or a few exponents from x, of either sign: sums that cancel, products near the limits."""
    step = rng.integers(-3, 4, len(x)).astype(np.int64)
    exponent = rng.integers(-2, 3, len(x)).astype(np.int64) << 23
    y = (x.astype(np.int64) + step + exponent) & 0xFFFFFFFF
    return y.astype(U32) ^ ((random_bits(rng, len(x)) & U32(1)) << U32(31))


# ------------------------------------------------------------------------------------------------ the evaluator

@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_every_pair_of_edge_values(op):
    check(op, *pairs(EDGE))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_random_bit_patterns_and_floats_of_mixed_scale(op):
    rng = np.random.default_rng({"add": 1, "sub": 2, "mul": 3, "div": 4}[op])
    check(op, random_bits(rng, 20000), random_bits(rng, 20000))
    a = mixed_scale(rng, 20000)
    check(op, a, mixed_scale(rng, 20000))
    check(op, a, near(rng, a))
    # magnitudes of one scale (every exponent difference small), and floats of ordinary size
    normal = rng.standard_normal(20000).astype(np.float32).view(U32)
    check(op, normal, (rng.standard_normal(20000) * 10.0 ** rng.integers(-8, 9, 20000)).astype(np.float32).view(U32))


def test_ties_round_to_even_both_ways():
    one = 0x3F800000
    half_ulp = 0x33800000                   # 2^-24: 1 + 2^-24 is half-way between 1 and its successor
    a = np.array([one, one + 1, one, one + 1, 0x4B800000, 0x4B800001, 0x4B800000, 0x4B800001], dtype=U32)
    b = np.array([half_ulp, half_ulp, half_ulp | 0x80000000, half_ulp | 0x80000000,
                  0x3F800000, 0x3F800000, 0xBF800000, 0xBF800000], dtype=U32)
    got = run("add.f32", a, b)
    np.testing.assert_array_equal(got, reference("add", a, b))
    assert list(got[:2]) == [one, one + 2]                 # 1 + 2^-24 ties to 1, (1 + ulp) + 2^-24 up to 1 + 2 ulp
    # products that land half-way: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 ties, and odd neighbours
    rng = np.random.default_rng(11)
    small = rng.integers(1, 1 << 12, 4000).astype(U32)
    a = U32(0x3F800000) | (small << U32(11))               # significands of 13 bits: exact 26-bit products
    b = U32(0x3F800000) | (rng.integers(1, 1 << 12, 4000).astype(U32) << U32(11))
    check("mul", a, b)
    check("mul", a | U32(1), b)
    tie = (1 + 2.0 ** -12) ** 2
    assert float(f32(run("mul.f32", [0x3F800800], [0x3F800800]))[0]) == np.float32(tie)


def test_cancellation_overflow_and_underflow():
    rng = np.random.default_rng(5)
    x = mixed_scale(rng, 5000) & U32(0x7FFFFFFF)
    x = x[(x < 0x7F800000)]
    check("add", x, x | U32(0x80000000))                   # x + (-x) = +0
    assert not run("add.f32", x, x | U32(0x80000000)).any()
    check("add", x | U32(0x80000000), x)
    check("sub", x, x + U32(1))                            # a - nextafter(a)
    check("sub", x, x - U32(1))
    check("add", [0x80000000, 0x80000000, 0], [0x80000000, 0, 0x80000000])     # -0 + -0 = -0, +0 + -0 = +0
    assert list(run("add.f32", [0x80000000, 0x80000000, 0], [0x80000000, 0, 0x80000000])) == [0x80000000, 0, 0]
    assert list(run("sub.f32", [0x7F800000, 0xFF800000], [0x7F800000, 0x7F800000])) == [CANONICAL_NAN, 0xFF800000]
    big = np.array([0x7F7FFFFF, 0x7F7FFFFF, 0x7F000000, 0x7F7FFFFF, 0x5F800000], dtype=U32)
    check("add", big, big)                                 # overflow to infinity
    check("mul", big, np.array([0x40000000, 0x3F800001, 0x40000000, 0x3FFFFFFF, 0x5F800000], dtype=U32))
    tiny = np.array([0x00800000, 0x00800001, 0x1F800000, 0x20000000, 0x00000001, 0x3F000000, 0x0C000000],
                    dtype=U32)
    for factor in (0x3F000000, 0x3F000001, 0x3EFFFFFF, 0x34000000, 0x33FFFFFF, 0x1F800000, 0x00000001,
                   0x4B000000, 0x3F7FFFFF):
        check("mul", tiny, np.full(len(tiny), factor, dtype=U32))        # underflow to subnormals and to 0
    # subnormal inputs with large factors: the normalisation of the smaller significand
    sub = np.arange(1, 4000, dtype=U32) * U32(2049)
    check("mul", sub, np.full(len(sub), 0x7E800000, dtype=U32))
    check("mul", sub | U32(0x80000000), np.full(len(sub), 0x4F7FFFFF, dtype=U32))
    check("add", sub, np.full(len(sub), 0x80000400, dtype=U32))


def test_special_values():
    inf, ninf, nan = 0x7F800000, 0xFF800000, 0xFFC00001
    a = np.array([inf, inf, ninf, inf, 0, 0xBF800000, inf, nan, 0x3F800000, nan], dtype=U32)
    b = np.array([ninf, inf, ninf, 0, inf, ninf, 0x80000001, 0x3F800000, nan, nan], dtype=U32)
    for op in ("add", "sub", "mul"):
        check(op, a, b)
    got = run("mul.f32", a, b)
    assert got[3] == CANONICAL_NAN and got[4] == CANONICAL_NAN                 # 0 * inf
    assert got[5] == 0x7F800000 and got[6] == 0xFF800000                        # signs of infinities xor


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_a_literal_operand(op):
    rng = np.random.default_rng(21)
    a = np.concatenate([np.array(EDGE, dtype=U32), mixed_scale(rng, 3000)])
    for literal in (0x3F800000, 0x80000000, 0x00000001, 0x7F800000, 0x7FC00000, 0x4B400000, 0xBF000000):
        check(op, a, literal=literal)
        # the literal first (1.5f - x), and both literals (add / sub / mul fold to one mov when rewriting)
        body = [Instruction(OPCODES[op], (Reg("%f3"), Imm(literal), Reg("%f2")), None, False, 3, "x")]
        kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32"}))
        got = evaluate(kernel.body, {"%f2": a, "%f3": a}, len(a))["%f3"]
        np.testing.assert_array_equal(got, reference(op, np.full(len(a), literal, dtype=U32), a))
        for k in range(0, 400, 7):
            body = [Instruction(OPCODES[op], (Reg("%f3"), Imm(literal), Imm(int(a[k]))), None, False, 3, "x")]
            kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32"}))
            want = reference(op, np.array([literal], U32), a[k:k + 1])[0]
            if op == "div":         # integer ops on literals; the lowering's constant propagation folds the rest
                assert evaluate(kernel.body, {}, 1)["%f3"][0] == want
                continue
            assert {inst.opcode for inst in kernel.body} == {"mov.b32"}
            assert kernel.body[-1].operands[1].value == want


def test_int_to_float():
    rng = np.random.default_rng(8)
    edges = [0, 1, 2, 3, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFF, 0x1000000, 0x1000001, 0x1000003,
             0x2000002, 0x2000006, 0x2000001, 0xFFFFFF80, 0xFFFFFF7F, 0xFFFFFFC0, 0xFFFFFF81, 0x7FFFFFC0, 0x7FFFFFBF]
    values = np.concatenate([np.array(edges, dtype=U32), random_bits(rng, 20000),
                             random_bits(rng, 20000) >> rng.integers(0, 32, 20000).astype(U32)])
    for kind in ("s32", "u32"):
        check(kind, values)
        check(kind, -values.view(np.int32).astype(np.int64) & 0xFFFFFFFF)


def _half_conversion(opcode: str, words: np.ndarray) -> np.ndarray:
    """The rewritten cvt between float32 and float16 / bfloat16 evaluated on each word (a half in the low 16 bits
    of %h1, or a float32 in %f1)."""
    to_half = opcode.startswith("cvt.rn")
    source, target = (Reg("%f1"), Reg("%h2")) if to_half else (Reg("%h1"), Reg("%f2"))
    body = [Instruction(opcode, (target, source), None, False, 3, opcode)]
    kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32", "%h": "b16"}))
    got = evaluate(kernel.body, {source.name: np.asarray(words, dtype=U32), target.name: np.zeros(len(words), U32)},
                   len(words))[target.name]
    return got & U32(0xFFFF) if to_half else got


def test_every_half_widens_to_its_float32():
    """cvt.f32.f16 / .bf16 on all 65,536 bit patterns: numpy's float16 -> float32 (exact; subnormals normalised)
    and bfloat16's definition (float32's top half), a NaN the canonical float32 NaN."""
    halves = np.arange(1 << 16, dtype=U32)
    f16 = halves.astype(np.uint16).view(np.float16)
    expect = np.where(np.isnan(f16), U32(CANONICAL_NAN), f16.astype(np.float32).view(U32))
    np.testing.assert_array_equal(_half_conversion("cvt.f32.f16", halves), expect)
    widened = (halves << U32(16)).view(np.float32)
    expect = np.where(np.isnan(widened), U32(CANONICAL_NAN), halves << U32(16))
    np.testing.assert_array_equal(_half_conversion("cvt.f32.bf16", halves), expect)


def _near_halves(rng) -> np.ndarray:
    """float32 words around every float16's and bfloat16's value and halfway points: the rounding boundaries."""
    f16 = np.arange(0, 0x7C01, dtype=np.uint16).view(np.float16).astype(np.float32).view(U32)
    bf16 = (np.arange(0, 0x7F81, dtype=U32) << U32(16))
    centres = np.concatenate([f16, bf16, bf16 + U32(0x8000), f16 + U32(0x1000)])
    offsets = rng.integers(-2, 3, len(centres)).astype(np.int64)
    near = (centres.astype(np.int64) + offsets).clip(0, 0x7FFFFFFF).astype(U32)
    words = np.concatenate([centres, near, random_bits(rng, 200000), mixed_scale(rng, 50000)])
    return np.concatenate([words, words | U32(SIGN_BIT), np.array(EDGE, dtype=U32)])


def test_float32_rounds_to_the_nearest_float16():
    """cvt.rn.f16.f32 against numpy's float32 -> float16 (round to nearest even; subnormal halves, 65520 and up to
    infinity) on every boundary and random words; a NaN the canonical 0x7fff."""
    words = _near_halves(np.random.default_rng(16))
    f32 = words.view(np.float32)
    with np.errstate(over="ignore"):
        expect = np.where(np.isnan(f32), U32(0x7FFF), f32.astype(np.float16).view(np.uint16).astype(U32))
    np.testing.assert_array_equal(_half_conversion("cvt.rn.f16.f32", words), expect)


def test_float32_rounds_to_the_nearest_bfloat16():
    """cvt.rn.bf16.f32 against torch's float32 -> bfloat16 (round to nearest even), a NaN the canonical 0x7fff."""
    torch = pytest.importorskip("torch")
    words = _near_halves(np.random.default_rng(17))
    f32 = words.view(np.float32)
    reference = torch.from_numpy(f32.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    expect = np.where(np.isnan(f32), U32(0x7FFF), reference.astype(U32))
    np.testing.assert_array_equal(_half_conversion("cvt.rn.bf16.f32", words), expect)


@pytest.mark.parametrize("mode", ["rz", "rm", "rp", "rn"])
def test_int_to_float_in_every_rounding(mode):
    """cvt.rn / rz / rm / rp .f32.s32 / u32 ((float)i, __int2float_rz / _rd / _ru, __uint2float_*): against the exact
    integer rounded by Python's fractions (0 gives +0)."""
    rng = np.random.default_rng(31)
    values = np.concatenate([np.array([0, 1, 3, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFF, 0x1000001,
                                       0x1000003, 0x2000006, 0xFFFFFF7F, 0x7FFFFFBF, 0xFFFFFF81], dtype=U32),
                             random_bits(rng, 3000), random_bits(rng, 3000) >> rng.integers(0, 32, 3000).astype(U32)])
    for kind in ("s32", "u32"):
        got = run(f"cvt.{mode}.f32.{kind}", values)
        ints = values.view(np.int32).tolist() if kind == "s32" else values.tolist()
        want = [0 if i == 0 else _rounded(Fraction(i), mode) for i in ints]
        assert got.tolist() == want, kind


def _rounded(q: Fraction, mode: str) -> int:
    """The binary32 word of the exact nonzero rational q rounded by ``mode`` (rn: to nearest even, rz: toward 0,
    rm / rp: toward minus / plus infinity): IEEE's definition on q's binade, subnormals at 2^-149, overflow to
    infinity or to the largest finite float."""
    sign = SIGN_BIT if q < 0 else 0
    m = abs(q)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    e += (Fraction(2) ** (e + 1) <= m) - (Fraction(2) ** e > m)          # 2^e <= m < 2^(e + 1)
    unit = Fraction(2) ** (max(e, -126) - 23)
    low, rest = divmod(m, unit)
    up = {"rz": False, "rm": bool(sign) and rest > 0, "rp": not sign and rest > 0,
          "rn": rest > unit / 2 or (rest == unit / 2 and low % 2 == 1)}[mode]
    value = (low + up) * unit
    if value >= Fraction(2) ** 128:
        finite = mode == "rz" or (mode == "rm" and not sign) or (mode == "rp" and sign)
        return sign | (0x7F7FFFFF if finite else 0x7F800000)
    return sign | int(np.float32(float(value)).view(U32))        # exact: 24 bits times a power of two


def exactly_rounded(op: str, mode: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b, a - b or a * b of float32 words, computed exactly with Python's fractions and rounded by ``mode``;
    infinities and NaNs as IEEE (no rounding), a NaN the canonical NaN; an exact zero sum +0 (-0 toward minus
    infinity, or when both operands are -0), a zero product the xor of the signs."""
    out = []
    for x, y in zip(np.asarray(a, U32).tolist(), np.asarray(b, U32).tolist()):
        if op == "sub":
            y ^= SIGN_BIT
        fx, fy = (float(np.uint32(w).view(np.float32)) for w in (x, y))
        if math.isnan(fx) or math.isnan(fy) or (op == "mul" and {abs(fx), abs(fy)} >= {0.0, math.inf}) or \
                (op != "mul" and math.isinf(fx) and math.isinf(fy) and fx != fy):
            out.append(CANONICAL_NAN)
        elif math.isinf(fx) or math.isinf(fy):
            out.append(int(np.float32(fx * fy if op == "mul" else fx + fy).view(U32)))
        else:
            q = Fraction(fx) * Fraction(fy) if op == "mul" else Fraction(fx) + Fraction(fy)
            if q != 0:
                out.append(_rounded(q, mode))
            elif op == "mul":
                out.append((x ^ y) & SIGN_BIT)
            else:
                out.append(SIGN_BIT if (x & y & SIGN_BIT) or ((x ^ y) & SIGN_BIT and mode == "rm") else 0)
    return np.array(out, dtype=U32)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_directed_roundings(op):
    """add / sub / mul .rz, .rm, .rp (and .rn, checking the exact reference against numpy) on every pair of edge
    values and random floats: the integer PTX against the exact result rounded as IEEE says."""
    rng = np.random.default_rng({"add": 31, "sub": 32, "mul": 33}[op])
    edge = np.array(EDGE, dtype=U32)
    a = np.concatenate([np.repeat(edge, len(edge)), mixed_scale(rng, 1500), random_bits(rng, 1000)])
    b = np.concatenate([np.tile(edge, len(edge)), mixed_scale(rng, 1500), random_bits(rng, 1000)])
    np.testing.assert_array_equal(exactly_rounded(op, "rn", a, b), reference(op, a, b))
    for mode in ("rz", "rm", "rp"):
        np.testing.assert_array_equal(run(f"{op}.{mode}.f32", a, b), exactly_rounded(op, mode, a, b), err_msg=mode)


def fused(mode: str, a, b, c) -> np.ndarray:
    """a * b + c of float32 words, exact (Python's fractions), rounded once by ``mode``; a NaN operand, inf * 0 and
    inf - inf the canonical NaN, an infinity otherwise exact; a zero product plus a zero -0 only where both signs
    are negative (toward minus infinity: where either is), an exact cancellation +0 (-0 toward minus infinity)."""
    out = []
    for x, y, z in zip(np.asarray(a, U32).tolist(), np.asarray(b, U32).tolist(), np.asarray(c, U32).tolist()):
        fx, fy, fz = (float(np.uint32(w).view(np.float32)) for w in (x, y, z))
        sp, sc = (x ^ y) & SIGN_BIT, z & SIGN_BIT
        if any(math.isnan(v) for v in (fx, fy, fz)) or {abs(fx), abs(fy)} >= {0.0, math.inf}:
            out.append(CANONICAL_NAN)
        elif math.isinf(fx) or math.isinf(fy):
            out.append(CANONICAL_NAN if math.isinf(fz) and sc != sp else sp | 0x7F800000)
        elif math.isinf(fz):
            out.append(z)
        elif (q := Fraction(fx) * Fraction(fy) + Fraction(fz)) != 0:
            out.append(_rounded(q, mode))
        elif fx == 0 or fy == 0:
            out.append(SIGN_BIT if (sp and sc) or ((sp or sc) and mode == "rm") else 0)
        else:
            out.append(SIGN_BIT if mode == "rm" else 0)
    return np.array(out, dtype=U32)


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
def test_fused_multiply_add(mode):
    """fma.f32 (fmaf, __fmaf_rz, ...): random triples of edge values, random floats of mixed scale and bits, and c
    chosen to cancel the product (c = -round(a * b) and its neighbour) or to sit half an ulp of it away, against
    the exact result rounded once."""
    rng = np.random.default_rng({"rn": 41, "rz": 42, "rm": 43, "rp": 44}[mode])
    edge = np.array(EDGE, dtype=U32)
    picks = rng.integers(0, len(edge), (3, 2000))
    a = np.concatenate([edge[picks[0]], mixed_scale(rng, 1500), random_bits(rng, 800)])
    b = np.concatenate([edge[picks[1]], mixed_scale(rng, 1500), random_bits(rng, 800)])
    c = np.concatenate([edge[picks[2]], mixed_scale(rng, 1500), random_bits(rng, 800)])
    with np.errstate(all="ignore"):
        product = (f32(a) * f32(b)).view(U32)
    half_ulp = np.maximum(product & U32(0x7F800000), U32(25 << 23)) - U32(24 << 23)    # 2^-24 of the product
    a, b = np.tile(a, 4), np.tile(b, 4)
    c = np.concatenate([c, product ^ U32(SIGN_BIT), (product ^ U32(SIGN_BIT)) + U32(1),
                        half_ulp | (rng.integers(0, 2, len(product)).astype(U32) << U32(31))])
    np.testing.assert_array_equal(run(f"fma.{mode}.f32", a, b, c=c), fused(mode, a, b, c))


def test_fmaf_launched():
    """fmaf and __fmaf_rz of words in memory on the interpreter (the 48-bit product kept whole across overlays)."""
    dev = Device(backend="interpreter")
    kernel = dev.load_kernel('extern "C" __global__ void f(float *y, const float *a, const float *b, const float *c)'
                             '{ int i = threadIdx.x; y[i] = fmaf(a[i], b[i], c[i]);'
                             ' y[i + 4] = __fmaf_rz(a[i], b[i], -c[i]); }', "f")
    rng = np.random.default_rng(9)
    a, b = mixed_scale(rng, 8), mixed_scale(rng, 8)
    with np.errstate(all="ignore"):
        c = (f32(a) * f32(b)).view(U32) ^ U32(SIGN_BIT)          # cancellations: the exact rounding error
    c[:3] = bits_of([1.0, -3.5e-3, 0.0])
    y, pa, pb, pc = dev.alloc(8), dev.alloc(4), dev.alloc(4), dev.alloc(4)
    for k in (0, 4):
        for p, words in ((pa, a), (pb, b), (pc, c)):
            dev.write(p, words[k:k + 4].view(np.int32))
        dev.launch(kernel, threads=4, args=[y, pa, pb, pc])
        got = dev.read(y, 8).view(U32)
        np.testing.assert_array_equal(got[:4], fused("rn", a[k:k + 4], b[k:k + 4], c[k:k + 4]))
        np.testing.assert_array_equal(got[4:], fused("rz", a[k:k + 4], b[k:k + 4], c[k:k + 4] ^ U32(SIGN_BIT)))


@pytest.mark.parametrize("op", UNARY)
def test_square_root_and_reciprocal_of_edge_values_and_random_floats(op):
    rng = np.random.default_rng({"rcp": 12, "sqrt": 13}[op])
    check(op, np.array(EDGE, dtype=U32))
    check(op, np.array(EDGE, dtype=U32) ^ U32(0x80000000))
    check(op, random_bits(rng, 20000))
    check(op, mixed_scale(rng, 20000))
    check(op, np.arange(0, 1 << 16, dtype=U32) * U32(0x80) + U32(1))     # subnormals and small normals, densely
    check(op, U32(0x3F000000) + rng.integers(0, 1 << 24, 20000).astype(U32))    # [0.5, 2): both exponent parities


@pytest.mark.parametrize("op", UNARY)
def test_a_literal_operand_of_a_root_or_reciprocal(op):
    """sqrt.rn / rcp.rn of a literal NVRTC left unfolded (as hand-written PTX may): integer ops on literals, which
    the evaluator (and the lowering's constant propagation) settle to numpy's result, edge values included."""
    for literal in EDGE + [0x40800000, 0x40000000, 0xC0800000, 0x00000003]:
        body = [Instruction(OPCODES[op], (Reg("%f3"), Imm(literal)), None, False, 3, "x")]
        kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32"}))
        assert evaluate(kernel.body, {}, 1)["%f3"][0] == reference(op, np.array([literal], U32))[0], hex(literal)


def test_special_quotients_and_roots():
    inf, ninf = 0x7F800000, 0xFF800000
    a = np.array([0x3F800000, 0xBF800000, 0, 0, inf, inf, 0x3F800000, 0xC0000000, 0x7FC00001, 0x3F800000, 0x80000000,
                  0x00000001, 0x7F7FFFFF, 0x00000001, 0x7F7FFFFF], dtype=U32)
    b = np.array([0, 0, 0, 0x80000000, inf, 0x3F800000, inf, ninf, 0x3F800000, 0xFFC00000, 0x3F800000,
                  0x7F7FFFFF, 0x00000001, 0x3F000001, 0x3EFFFFFF], dtype=U32)
    check("div", a, b)
    got = run("div.rn.f32", a, b)
    assert list(got[:8]) == [inf, ninf, CANONICAL_NAN, CANONICAL_NAN, CANONICAL_NAN, inf, 0, 0]
    assert got[8] == got[9] == CANONICAL_NAN and got[10] == 0x80000000 and got[11] == 0 and got[12] == inf
    roots = run("sqrt.rn.f32", [0, 0x80000000, inf, ninf, 0xBF800000, 0x80000001, 0x7FC00000, 0x3F800000,
                                0x40800000, 0x00000001])
    assert list(roots) == [0, 0x80000000, inf, CANONICAL_NAN, CANONICAL_NAN, CANONICAL_NAN, CANONICAL_NAN,
                           0x3F800000, 0x40000000, 0x1A3504F3]                   # sqrt(2^-149) = 2^-74.5


def _midpoints(rng, n: int) -> np.ndarray:
    """Random values half-way between two neighbouring float32s (normal, positive), as float64."""
    x = (U32(0x00800000) + rng.integers(0, 0x7E800000, n).astype(U32)).view(np.float32).astype(np.float64)
    return x + (np.nextafter(x.astype(np.float32), np.float32(np.inf)).astype(np.float64) - x) / 2


def hard_quotients(rng, n: int, kind: str = "normal") -> tuple[np.ndarray, np.ndarray]:
    """Pairs a, b whose exact quotient lies within r / B (|r| <= 40, B ~ 2^23: a few millionths of an ulp) of
    half-way between two floats, or of a float: significands A, B of 24 bits with A * 2^k = M * B + r, so A * 2^k / B
    = M + r / B, where 2^-k is half the result's ulp relative to 2^(ea - eb) (k = 24 for a quotient of
    significands >= 1, 25 below; for a subnormal result 150 + ea - eb); A = r / 2^k mod B (B odd). ``kind``: the
    result normal, subnormal, or near the largest float."""
    a, b = [], []
    while len(a) < n:
        B = int(rng.integers(1 << 23, 1 << 24)) | 1
        r = int(rng.integers(-40, 41))
        if kind == "subnormal":
            k = int(rng.integers(1, 24))
            d = k - 150
        else:
            k = int(rng.integers(24, 26))
            d = int(rng.integers(-60, 61)) if kind == "normal" else int(rng.integers(126, 129))
        A = r * pow(2, -k, B) % B
        A += B * -(-((1 << 23) - A) // B) if A < 1 << 23 else 0        # into [2^23, 2^24) by multiples of B
        if not (1 << 23) <= A < (1 << 24) or kind != "subnormal" and (A >= B) != (k == 24):
            continue
        eb = int(rng.integers(30, 100)) if kind == "subnormal" else int(rng.integers(-60, 61)) \
            if kind == "normal" else int(rng.integers(-100, 127 - d))
        a.append(np.float32(A * 2.0 ** (eb + d - 23)))
        b.append(np.float32(B * 2.0 ** (eb - 23)) * np.float32(rng.choice([1, -1])))
    return np.array(a, dtype=np.float32).view(U32), np.array(b, dtype=np.float32).view(U32)


def test_quotients_and_roots_near_a_rounding_boundary():
    """Division and square roots have no ties, but quotients within a hair of half-way between two floats (and
    exactly representable quotients and roots) are where a wrong rounding or sticky bit shows."""
    rng = np.random.default_rng(14)
    n = 20000
    for kind in ("normal", "subnormal", "overflow"):           # subnormal: the right shift's sticky bit
        check("div", *hard_quotients(rng, 4000, kind))
    # a = mid * b rounded: a / b is within about an ulp of a half-way value m, both sides
    mid = _midpoints(rng, n) * 2.0 ** rng.integers(-100, 0, n)
    b = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-40, 40, n)).astype(np.float32)
    with np.errstate(all="ignore"):
        a = (mid * b.astype(np.float64)).astype(np.float32)
    keep = np.isfinite(a) & (a != 0)
    a, b = a[keep].view(U32), b[keep].view(U32)
    check("div", a, b)
    check("div", a + U32(1), b)
    check("div", a - U32(1), b)
    check("div", a, b + U32(1))
    # quotients into the subnormal range near half-way (the right shift before rounding, with its sticky bit)
    tiny = (_midpoints(rng, n) * 2.0 ** -149 * rng.integers(1, 1 << 22, n)).astype(np.float64)
    b = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    with np.errstate(all="ignore"):
        a = (tiny * b.astype(np.float64)).astype(np.float32).view(U32)
    check("div", a, b.view(U32))
    check("div", a + U32(1), b.view(U32))
    # exact quotients: products of significands of 12 bits divided by one of them
    p = (U32(0x3F800000) | (rng.integers(0, 1 << 11, n).astype(U32) << U32(12))).view(np.float32)
    q = (U32(0x3F800000) | (rng.integers(0, 1 << 11, n).astype(U32) << U32(12))).view(np.float32)
    scale = (2.0 ** rng.integers(-120, 120, n)).astype(np.float32)
    with np.errstate(all="ignore"):
        check("div", (p * q * scale).view(U32), (q * scale).view(U32))
        check("div", (p * q).view(U32), (p * scale).view(U32))
    # roots: squares of half-way values (within an ulp of a boundary) and exact squares, both exponent parities
    mid = _midpoints(rng, n)
    mid = mid / 2.0 ** np.floor(np.log2(mid)) * 2.0 ** rng.integers(-63, 63, n)     # half-way, in [2^-63, 2^63)
    x = (mid * mid).astype(np.float32).view(U32)
    check("sqrt", x)
    check("sqrt", x + U32(1))
    check("sqrt", x - U32(1))
    check("sqrt", (p * p).view(U32))
    check("sqrt", (p * p * np.float32(2.0)).view(U32))


@pytest.mark.parametrize("division, root", [(6, 1), (3, 2), (1, 11)])
def test_the_loop_forms(monkeypatch, division, root):
    """DIVISION_LOOP / ROOT_LOOP: the same steps as a counted loop (a label, a counter, a branch back), emitted
    once and run 24 / 22 steps in all."""
    from qwengpu.lowering.floats import _Rewriter
    monkeypatch.setattr(_Rewriter, "DIVISION_LOOP", division)
    monkeypatch.setattr(_Rewriter, "ROOT_LOOP", root)
    rng = np.random.default_rng(15)
    a, b = mixed_scale(rng, 5000), mixed_scale(rng, 5000)
    check("div", a, b)
    check("div", *pairs(EDGE))
    check("sqrt", a)
    check("rcp", a)
    check("div", a, literal=0x40400000)
    for op in ("div.rn.f32", "sqrt.rn.f32"):
        body = as_integers(float_kernel(op)).body
        assert sum(isinstance(item, Label) for item in body) == 1
        assert sum(isinstance(item, Instruction) and item.base == "bra" for item in body) == 1
        trace = []
        evaluate(body, {"%f1": a[:4], "%f2": b[:4], "%f3": a[:4]}, 4, trace)
        assert len(trace) > len(body)


def instruction_count(opcode: str) -> int:
    return len(as_integers(float_kernel(opcode)).body)


def test_the_rewrites_are_integer_and_short():
    counts = {op: instruction_count(op) for op in ("add.f32", "sub.f32", "mul.f32", "cvt.rn.f32.s32",
                                                   "cvt.rn.f32.u32", "div.rn.f32", "rcp.rn.f32", "sqrt.rn.f32")}
    print("integer PTX instructions:", counts)
    assert counts["add.f32"] <= 66 and counts["mul.f32"] <= 72 and counts["cvt.rn.f32.u32"] <= 32
    assert counts["div.rn.f32"] <= 180 and counts["rcp.rn.f32"] <= 160 and counts["sqrt.rn.f32"] <= 160
    for opcode in counts:
        for inst in as_integers(float_kernel(opcode)).body:
            assert not re.search(r"\.(f32|rn)\b", inst.opcode), inst.opcode
            assert inst.line == 3 and inst.text.startswith(opcode.split(".")[0])


def test_a_guarded_float_instruction_keeps_the_destination_elsewhere():
    rng = np.random.default_rng(3)
    a, b = mixed_scale(rng, 1000), mixed_scale(rng, 1000)
    guard = (np.arange(1000) % 3 == 0).astype(U32)
    for op in ("add", "mul", "div", "sqrt"):
        kernel = as_integers(float_kernel(OPCODES[op], guard=True))
        old = random_bits(rng, 1000)
        got = evaluate(kernel.body, {"%f1": a, "%f2": b, "%f3": old, "%p1": guard}, 1000)["%f3"]
        np.testing.assert_array_equal(got, np.where(guard != 0, reference(op, a, b), old), err_msg=op)


def test_the_destination_may_be_a_source():
    """add.f32 %f1, %f1, %f2: the sources are read before the destination is written."""
    rng = np.random.default_rng(4)
    a, b = mixed_scale(rng, 2000), mixed_scale(rng, 2000)
    for op in ("add", "sub", "mul", "div"):
        for first, second in (("%f1", "%f2"), ("%f2", "%f1")):
            body = [Instruction(OPCODES[op], (Reg("%f1"), Reg(first), Reg(second)), None, False, 1, "x")]
            kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32"}))
            got = evaluate(kernel.body, {"%f1": a, "%f2": b}, 2000)["%f1"]
            expect = reference(op, a, b) if first == "%f1" else reference(op, b, a)
            np.testing.assert_array_equal(got, expect, err_msg=op)
    for op in UNARY:
        body = [Instruction(OPCODES[op], (Reg("%f1"), Reg("%f1")), None, False, 1, "x")]
        kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32"}))
        np.testing.assert_array_equal(evaluate(kernel.body, {"%f1": a}, 2000)["%f1"], reference(op, a), err_msg=op)


# ------------------------------------------------------------------------------------------------ launched

ARITHMETIC_CU = r"""
extern "C" __global__ void arith(float *y, float a, float b, int i, unsigned u)
{
    y[0] = a + b;
    y[1] = a - b;
    y[2] = a * b;
    y[3] = (float)i;
    y[4] = (float)u;
}

// operands the machine holds: mode picks the operation (folded when lowering), lanes with odd i only for 5
extern "C" __global__ void lanes(float *y, const float *a, const float *b, int mode)
{
    int i = threadIdx.x;
    float r = a[i];
    if (mode == 0) r = a[i] + b[i];
    if (mode == 1) r = a[i] - b[i];
    if (mode == 2) r = a[i] * b[i];
    if (mode == 3) r = (float)((const int *)a)[i];
    if (mode == 4) r = (float)((const unsigned *)a)[i];
    if (mode == 5) { if (i & 1) r = a[i] + b[i]; }
    if (mode == 6) r = a[i] * 0.75f;
    if (mode == 7) r = a[i] / b[i];
    if (mode == 8) r = sqrtf(a[i]);
    if (mode == 9) r = 1.0f / a[i];
    if (mode == 10) r = a[i] / 3.0f;
    y[i] = r;
}

// the first kernel people write with a division: lanes past n branch around it
extern "C" __global__ void vdiv(float *c, const float *a, const float *b, int n)
{
    int i = threadIdx.x;
    if (i < n)
        c[i] = a[i] / b[i];
}
"""


@pytest.fixture(scope="module")
def device():
    dev = Device(backend="interpreter")
    return dev, compile_cuda(ARITHMETIC_CU)


def test_launch_arguments_fold_to_constant_stores(device):
    """Operands that are launch arguments: the lowering's constant propagation folds each rewritten sequence, so
    the kernel is five stores, whatever the values."""
    dev, text = device
    kernel = dev.load_kernel(text, "arith")
    rng = np.random.default_rng(17)
    a = np.concatenate([np.array(EDGE[::2], dtype=U32), mixed_scale(rng, 16)])
    b = np.concatenate([np.array(EDGE[1::2], dtype=U32), near(rng, a[-16:])])
    ints = random_bits(rng, len(a)) >> rng.integers(0, 32, len(a)).astype(U32)
    y = dev.alloc(8)
    for k in range(len(a)):
        dev.launch(kernel, threads=1, args=[y, float(f32(a[k])), float(f32(b[k])), int(ints[k].view(np.int32)),
                                            int(ints[k] ^ U32(0x80000000))])
        got = dev.read(y, 5).view(U32)
        one, word = slice(k, k + 1), ints[k:k + 1]
        expect = [reference(op, a[one], b[one])[0] for op in ("add", "sub", "mul")] + \
            [reference("s32", word)[0], reference("u32", word ^ U32(0x80000000))[0]]
        assert list(got) == expect, (hex(a[k]), hex(b[k]), hex(ints[k]), [hex(g) for g in got])


def test_the_machine_computes_them(device):
    """Operands in memory: the machine runs the integer code (longer than the ROM: overlays), four lanes at a time,
    a guarded add under a lane-dependent branch among them."""
    dev, text = device
    kernel = dev.load_kernel(text, "lanes")
    rng = np.random.default_rng(99)
    n = 200
    a = np.concatenate([np.array(EDGE, dtype=U32), mixed_scale(rng, n // 2 - len(EDGE)), random_bits(rng, n // 2)])
    b = np.concatenate([np.array(EDGE[::-1], dtype=U32), near(rng, a[len(EDGE):n // 2]), random_bits(rng, n // 2)])
    y, x, z = dev.alloc(4), dev.alloc(4), dev.alloc(4)
    for mode, op in enumerate(["add", "sub", "mul", "s32", "u32", "guarded", "literal", "div", "sqrt", "rcp",
                               "third"]):
        got = np.zeros(n, dtype=U32)
        for k in range(0, n, 4):
            dev.write(x, a[k:k + 4].view(np.int32))
            dev.write(z, b[k:k + 4].view(np.int32))
            dev.launch(kernel, threads=4, args=[y, x, z, mode])
            got[k:k + 4] = dev.read(y, 4).view(U32)
        if op in ("s32", "u32"):
            expect = reference(op, a)
        elif op == "guarded":
            expect = np.where(np.arange(n) & 1, reference("add", a, b), a)
        elif op == "literal":
            expect = reference("mul", a, np.full(n, 0x3F400000, dtype=U32))
        elif op == "third":
            expect = reference("div", a, np.full(n, 0x40400000, dtype=U32))
        elif op in UNARY:
            expect = reference(op, a)
        else:
            expect = reference(op, a, b)
        np.testing.assert_array_equal(got, expect, err_msg=op)


def _vdiv(dev, kernel, a, b, n_of) -> np.ndarray:
    """c = a / b launched four at a time, lanes at and past n_of(k) left alone (their c words keep 7)."""
    c, x, z = dev.alloc(4), dev.alloc(4), dev.alloc(4)
    got = np.zeros(len(a), dtype=U32)
    for k in range(0, len(a), 4):
        dev.write(c, np.full(4, 7, dtype=np.int32))
        dev.write(x, a[k:k + 4].view(np.int32))
        dev.write(z, b[k:k + 4].view(np.int32))
        dev.launch(kernel, threads=4, args=[c, x, z, n_of(k)])
        got[k:k + 4] = dev.read(c, 4).view(U32)
    return got


def test_a_division_under_a_divergent_branch(device):
    """``if (i < n) c[i] = a[i] / b[i];``: NVRTC branches around the division, so the machine runs it predicated on
    the lanes below n; the others keep their words."""
    dev, text = device
    kernel = dev.load_kernel(text, "vdiv")
    rng = np.random.default_rng(31)
    a, b = hard_quotients(rng, 60, "normal")
    a = np.concatenate([a, mixed_scale(rng, 40)])
    b = np.concatenate([b, mixed_scale(rng, 40)])
    n_of = lambda k: k // 4 % 5                 # 0 .. 4 lanes
    got = _vdiv(dev, kernel, a, b, n_of)
    inside = np.arange(len(a)) % 4 < np.array([n_of(k - k % 4) for k in range(len(a))])
    np.testing.assert_array_equal(got, np.where(inside, reference("div", a, b), 7))
    before = dict(dev.stats)
    _vdiv(dev, kernel, a[:4], b[:4], lambda k: 3)
    print("c[i] = a[i] / b[i] under if (i < 3), 4 threads:",
          {key: dev.stats[key] - before[key] for key in ("records", "tokens_written", "tokens_fed")})


@pytest.mark.parametrize("division, root", [(6, 1)])
def test_the_loop_forms_on_the_machine(monkeypatch, division, root):
    """The loop forms lowered and run: a uniform loop, and a SIMT one under the divergent branch."""
    from qwengpu.lowering.floats import _Rewriter
    monkeypatch.setattr(_Rewriter, "DIVISION_LOOP", division)
    monkeypatch.setattr(_Rewriter, "ROOT_LOOP", root)
    dev = Device(backend="interpreter")
    text = compile_cuda(ARITHMETIC_CU)
    rng = np.random.default_rng(32)
    a, b = mixed_scale(rng, 8), mixed_scale(rng, 8)
    got = _vdiv(dev, dev.load_kernel(text, "vdiv"), a, b, lambda k: 3)
    np.testing.assert_array_equal(got, np.where(np.arange(8) % 4 < 3, reference("div", a, b), 7))
    kernel = dev.load_kernel(text, "lanes")
    y, x = dev.alloc(4), dev.alloc(4)
    dev.write(x, a[:4].view(np.int32))
    dev.launch(kernel, threads=4, args=[y, x, x, 8])
    np.testing.assert_array_equal(dev.read(y, 4).view(U32), reference("sqrt", a[:4]))


# ------------------------------------------------------------------------------------------------ refusals

def test_a_math_function_built_on_the_approximate_reciprocal_says_so():
    """fmodf is exact in C, but CUDA's math library computes it with rcp.approx.ftz: the refusal names the
    approximation and the user's line, not --use_fast_math, which the user did not ask for."""
    source = ('extern "C" __global__ void k(float *y, const float *x)\n'
              '{\n    y[threadIdx.x] = fmodf(x[threadIdx.x], 2.0f);\n}\n')
    dev = Device()
    kernel = dev.load_kernel(source, "k")
    with pytest.raises(MachineError, match=r"rcp\.approx is the GPU's own hardware approximation.* fmodf.*\n"
                                           r"  from kernel\.cu line 3: y\[threadIdx\.x\] = fmodf"):
        dev.launch(kernel, threads=4, args=[dev.alloc(4), dev.alloc(4)])


def test_lrintf_and_a_long_long_of_a_float_run_and_a_store_of_their_64_bits_is_refused():
    """lrintf / (long long)x assigned to an int keep the low word; storing all 64 bits would need the high word,
    which the machine's registers do not hold: refused by name."""
    source = ('extern "C" __global__ void k(int *y, const float *x)\n{\n    int i = threadIdx.x;\n'
              '    y[i] = lrintf(x[i]);\n    y[i + 4] = (int)(long long)x[i + 4];\n}\n'
              'extern "C" __global__ void wide(long long *y, const float *x)\n{\n'
              '    y[threadIdx.x] = llrintf(x[threadIdx.x]);\n}\n')
    values = np.array([2.5, -3.5, 3e9, -1e20, 7.9, -7.9, 5e9, np.nan], np.float32)
    dev = Device()
    y, x = dev.alloc(8), dev.alloc(8)
    dev.write(x, values.view(np.int32))
    dev.launch(dev.load_kernel(source, "k"), threads=4, args=[y, x])

    def low(n: int) -> int:
        return n & 0xFFFFFFFF
    rint = [round(float(v)) for v in values[:4]]                 # ties to even; -1e20 saturates below
    rint[3] = -2 ** 63
    trunc = [math.trunc(float(v)) if not np.isnan(v) else 0 for v in values[4:]]
    assert dev.read(y, 8).astype(np.int64).astype(np.uint32).tolist() == [low(n) for n in rint + trunc]
    with pytest.raises(MachineError, match=r"64-bit .*\n  from kernel\.cu line 9: y\[threadIdx\.x\] = llrintf"):
        dev.launch(dev.load_kernel(source, "wide"), threads=4, args=[y, x])


WIDENED = r'''extern "C" __global__ void ramp(float *y, const int *x)
{
    size_t i = threadIdx.x;
    long long v = x[i];
    y[i] = (float)i * 0.5f + (float)v;
}

extern "C" __global__ void grid(float *y, int n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = (float)i;
}
'''


def test_a_float_of_a_widened_size_t_or_long_long_and_of_a_64_bit_sum_runs():
    """(float)i of a size_t or long long every write of which widens an int (cvt.u64.u32 / cvt.s64.s32) converts
    its low word as what it was; one computed in 64 bits (a mul.wide and an add), refused there, is converted
    from a pair of words (qwengpu.lowering.pairs)."""
    dev = Device()
    y, x = dev.alloc(4), dev.alloc(4)
    ints = np.array([-5, 7, 2 ** 31 - 1, -2 ** 31])
    dev.write(x, ints)
    dev.launch(dev.load_kernel(WIDENED, "ramp"), threads=4, args=[y, x])
    want = np.arange(4, dtype=np.float32) * np.float32(0.5) + ints.astype(np.float32)
    assert dev.read(y, 4).astype(np.int32).view(np.float32).tolist() == want.tolist()
    dev.launch(dev.load_kernel(WIDENED, "grid"), threads=2, blocks=2, args=[y, 4])
    assert dev.read(y, 4).view(np.float32).tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("opcode, named", [
    ("add.sat.f32", r"runs with a rounding modifier \(\.rn, \.rz, \.rm, \.rp\) and without \.sat, not with \.sat"),
    ("mul.rz.sat.f32", r"not with \.rz, \.sat"),
    ("add.ftz.f32", r"\.ftz flushes subnormals"),
    ("mad.f32", r"mad.f32 without a rounding modifier is not a fused multiply-add of sm_20 and later"),
    ("fma.rn.sat.f32", r"not with \.rn, \.sat"),
    ("div.approx.f32", r"a division of floats runs correctly rounded to nearest even \(\.rn.*\.approx.*hardware"),
    ("div.full.f32", r"a division of floats runs correctly rounded .*not with \.full"),
    ("div.f32", r"a division of floats runs correctly rounded .*not with no rounding modifier"),
    ("div.rz.f32", r"not with \.rz: other roundings"),
    ("sqrt.approx.f32", r"a square root of floats runs correctly rounded .*not with \.approx"),
    ("rcp.approx.f32", r"a reciprocal of floats runs correctly rounded .*not with \.approx"),
    ("rsqrt.approx.f32", r"rsqrt\.approx is the GPU's own hardware approximation.* rsqrtf, asinf"),
    ("ex2.approx.f32", r"ex2\.approx is the GPU's own hardware approximation.* expf, exp2f"),
    ("rcp.approx.ftz.f32", r"rcp\.approx is the GPU's own hardware approximation.* powf, fmodf"),
    ("cvt.rz.f32.s64", r"\(float\) of a 64-bit integer runs where every write of it widens a 32-bit value"),
    ("cvt.rn.f32.s64", r"this \.s64 may hold more than its low word"),
    ("cvt.rn.f64.s32", r"a double instruction; of double arithmetic the machine builds"),
    ("cvt.rn.s64.f32", r"to \.s64 / \.u64 \(their low word.*conversions of doubles"),
    ("cvt.rz.f16.f32", r"of the float types \.f32 runs .*not \.f16"),
    ("atom.global.max.f32", r"of the atomic operations on floats, add .*not atom with \.max"),
    ("red.global.add.ftz.f32", r"\.ftz flushes subnormals"),
    ("atom.add.f32", r"add \(CUDA's atomicAdd\) on \.global or \.shared memory runs"),
    ("add.f64", r"a double instruction; .* write float, and 2\.0f"),
])
def test_other_arithmetic_is_refused_by_name(opcode, named):
    operands = 3 if opcode.startswith(("fma", "mad")) else \
        1 if opcode.startswith(("sqrt", "rcp", "rsqrt", "ex2", "cvt")) else 2
    kernel = float_kernel(opcode, operands)
    if opcode.startswith(("atom", "red")):
        address = Mem(Reg("%rd1"), 0)
        operands = (address, Reg("%f1")) if opcode.startswith("red") else (Reg("%f3"), address, Reg("%f1"))
        kernel.body[0] = Instruction(opcode, operands, None, False, 3, f"{opcode} ...")
    if operands == 3:
        kernel.body[0] = Instruction(opcode, (Reg("%f3"), Reg("%f1"), Reg("%f2"), Reg("%f1")), None, False, 3,
                                     f"{opcode} %f3, ...")
    with pytest.raises(MachineError, match=r"line 3 \(.*" + named):
        as_integers(kernel)


def test_an_approximation_is_refused_before_what_comes_ahead_of_it():
    """expf's PTX clamps with cvt.sat before its ex2.approx: the refusal names the approximation (why expf cannot
    run), not the clamp."""
    kernel = float_kernel("cvt.sat.f32.f32", 1)
    kernel.body.insert(1, Instruction("ex2.approx.ftz.f32", (Reg("%f3"), Reg("%f3")), None, False, 4,
                                      "ex2.approx.ftz.f32 %f3, %f3"))
    with pytest.raises(MachineError, match=r"line 4 \(.*ex2\.approx .* expf.*\): ex2\.approx\.ftz\.f32"):
        as_integers(kernel)


# ------------------------------------------------------------------------------------------------ rounding to an integer

def bits_of(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(U32)


def _convert(opcode: str, a: np.ndarray) -> np.ndarray:
    """cvt ``opcode`` %d, %f1 rewritten and evaluated on each word of a."""
    out = Reg("%f3") if opcode.endswith(".f32.f32") else Reg("%r3")
    body = [Instruction(opcode, (out, Reg("%f1")), None, False, 3, f"{opcode} {out.name}, %f1")]
    kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32", "%r": "b32"}))
    return evaluate(kernel.body, {"%f1": a, out.name: np.zeros(len(a), U32)}, len(a))[out.name]


def _low_word_of_wide(a: np.ndarray, kind: str, rounding) -> np.ndarray:
    """PTX's cvt.r*i.s64 / u64 .f32, one value at a time in Python's integers: the float rounded to an integer,
    saturated to the 64-bit type's range, a NaN 0; then the low word the machine keeps."""
    lo, hi = (-2 ** 63, 2 ** 63 - 1) if kind == "s64" else (0, 2 ** 64 - 1)
    out = []
    with np.errstate(invalid="ignore"):         # signalling NaNs widen quietly here
        values = f32(a).astype(np.float64).tolist()
    for v in values:
        n = 0 if math.isnan(v) else lo if v == -math.inf else hi if v == math.inf else min(max(int(rounding(v)), lo), hi)
        out.append(n & 0xFFFFFFFF)
    return np.array(out, dtype=U32)


@pytest.mark.parametrize("kind", ["s64", "u64"])
def test_conversions_to_64_bit_integers_keep_the_low_word(kind):
    """(long long)x, llrintf, lrintf (cvt.rzi / rni / rmi / rpi .s64 / .u64 .f32): the low word of the saturated
    64-bit result, against Python's integers, on every rounding boundary and saturation edge and random words."""
    rng = np.random.default_rng(64)
    edges = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.0 ** 31, -2.0 ** 31, 2.0 ** 32 + 2 ** 9, 3e9, -3e9, 2.0 ** 54,
             2.0 ** 55, 2.0 ** 62 + 2 ** 39, 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 1.8e19, 1e30, -1e30, np.inf, -np.inf,
             np.nan, -0.0, 1e-45, 8388607.5, -8388607.5, 0.49999997]
    a = np.concatenate([bits_of(edges), rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(U32),
                        bits_of(rng.uniform(-2.0 ** 40, 2.0 ** 40, 2000))])
    for rounding, fn in (("rzi", math.trunc), ("rni", round), ("rmi", math.floor), ("rpi", math.ceil)):
        np.testing.assert_array_equal(_convert(f"cvt.{rounding}.{kind}.f32", a), _low_word_of_wide(a, kind, fn),
                                      err_msg=rounding)


def _nearest_int(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """PTX's cvt.rni to an integer: ties to even, saturated to [lo, hi], a NaN 0."""
    with np.errstate(invalid="ignore"):
        r = np.rint(f32(a).astype(np.float64))
        r = np.where(np.isnan(r), 0, np.clip(r, lo, hi))
    return r.astype(np.int64).astype(np.uint64).astype(U32)


def rounding_operands(rng) -> np.ndarray:
    """Edge values, halves and their neighbours (ties both ways), the integer limits' neighbours, random bits and
    floats of every scale, both signs."""
    halves = (np.arange(-70, 70) + 0.5).astype(np.float32).view(U32)
    near_limits = np.array([0x4EFFFFFF, 0x4F000000, 0x4F000001, 0x4F7FFFFF, 0x4F800000, 0x4F800001, 0x4B000000,
                            0x4AFFFFFF, 0x4B7FFFFF, 0x3EFFFFFF, 0x3F000000, 0x3F000001, 0x3F7FFFFF, 0x3F800000,
                            0x3FBFFFFF, 0x3FC00000, 0x3FC00001], dtype=U32)
    a = np.concatenate([np.array(EDGE, dtype=U32), halves, halves - U32(1), halves + U32(1), near_limits,
                        random_bits(rng, 20000), mixed_scale(rng, 20000),
                        (rng.integers(-2 ** 26, 2 ** 26, 20000) / 2.0 ** rng.integers(0, 4, 20000)).astype(
                            np.float32).view(U32),
                        np.arange(0x3E800000, 0x4B800000, 997, dtype=U32)])      # [0.25, 2^24): every exponent
    return np.concatenate([a, a ^ U32(0x80000000)])


def test_rint_and_float_to_int_rounding_to_nearest_even():
    """cvt.rni.f32.f32 (rintf, nearbyintf) against numpy's rint (ties to even), a NaN the canonical NaN; cvt.rni
    .s32 / .u32 .f32 (__float2int_rn, __float2uint_rn) saturated to the type's range, a NaN 0, as PTX says."""
    a = rounding_operands(np.random.default_rng(41))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(_convert("cvt.rni.f32.f32", a), canonical(np.rint(f32(a))))
    np.testing.assert_array_equal(_convert("cvt.rni.s32.f32", a), _nearest_int(a, -2 ** 31, 2 ** 31 - 1))
    np.testing.assert_array_equal(_convert("cvt.rni.u32.f32", a), _nearest_int(a, 0, 2 ** 32 - 1))
    got = f32(_convert("cvt.rni.f32.f32", bits_of([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.7, 8388607.5])))
    assert list(got) == [0.0, 2.0, 2.0, -0.0, -2.0, 0.0, -1.0, 8388608.0]
    assert np.signbit(got[3]) and not np.signbit(got[5])
    ints = _convert("cvt.rni.s32.f32", bits_of([2.5, -2.5, 3.5, 2147483520.0, 2.2e9, -2.2e9, np.nan]))
    assert list(ints.view(np.int32)) == [2, -2, 4, 2147483520, 2 ** 31 - 1, -2 ** 31, 0]
    counts = {op: len(as_integers(Kernel("k", body=[Instruction(op, (Reg("%r3"), Reg("%f1")), None, False, 3, op)],
                                         registers={"%f": "f32", "%r": "b32"})).body)
              for op in ("cvt.rni.f32.f32", "cvt.rni.s32.f32", "cvt.rni.u32.f32")}
    print("integer PTX instructions:", counts)
    assert max(counts.values()) <= 26


ROUNDING_CU = r"""
extern "C" __global__ void rounding(float *y, int *n, unsigned *u, const float *x)
{
    int i = threadIdx.x;
    y[i] = rintf(x[i]);
    n[i] = __float2int_rn(x[i]);
    u[i] = __float2uint_rn(x[i]);
}
"""


def test_rounding_to_nearest_launched():
    """rintf, __float2int_rn, __float2uint_rn (NVRTC: cvt.rni .f32 / .s32 / .u32 .f32) on the interpreter."""
    dev = Device(backend="interpreter")
    kernel = dev.load_kernel(compile_cuda(ROUNDING_CU), "rounding")
    rng = np.random.default_rng(42)
    a = np.concatenate([bits_of([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 8388607.5, 3e9, -3e9, np.inf, -np.inf,
                                 np.nan, -0.0, 1e-40, -0.75, 4294967040.0]), mixed_scale(rng, 16),
                        (rng.standard_normal(32) * 100).astype(np.float32).view(U32)])
    y, n, u, x = dev.alloc(4), dev.alloc(4), dev.alloc(4), dev.alloc(4)
    got = np.zeros((3, len(a)), dtype=U32)
    for k in range(0, len(a), 4):
        dev.write(x, a[k:k + 4].view(np.int32))
        dev.launch(kernel, threads=4, args=[y, n, u, x])
        for row, p in enumerate((y, n, u)):
            got[row, k:k + 4] = dev.read(p, 4).view(U32)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got[0], canonical(np.rint(f32(a))))
    np.testing.assert_array_equal(got[1], _nearest_int(a, -2 ** 31, 2 ** 31 - 1))
    np.testing.assert_array_equal(got[2], _nearest_int(a, 0, 2 ** 32 - 1))


NARROW_CU = r"""
// (float) of a short, an unsigned short, a signed and an unsigned char: NVRTC converts the 16-bit register
// (cvt.rn.f32.s16 / u16), the char sign- or zero-extended into it by its load
extern "C" __global__ void narrow(float *y, const short *s, const unsigned short *us, const signed char *c,
                                  const unsigned char *uc)
{
    unsigned i = threadIdx.x;
    y[i] = (float)s[i];
    y[i + 8] = us[i] * 0.5f;
    y[i + 16] = c[i];
    y[i + 24] = uc[i] / 255.0f;
}
"""


def test_narrow_integers_to_float_launched():
    """The first kernel that reads bytes as floats (pixels / 255.0f): chars and shorts of every sign and the
    extremes of each type, converted on the interpreter, equal numpy's float32 arithmetic on the same values."""
    dev = Device(backend="interpreter")
    kernel = dev.load_kernel(compile_cuda(NARROW_CU), "narrow")
    rng = np.random.default_rng(9)
    y, s, us, c, uc = dev.alloc(32), dev.alloc(4), dev.alloc(4), dev.alloc(2), dev.alloc(2)
    rounds = [(np.array([-32768, -1, 0, 1, 32767, -129, 128, 255], np.int16),
               np.array([0, 1, 65535, 32768, 32767, 255, 256, 3], np.uint16),
               np.array([-128, -1, 0, 1, 127, -2, 64, -65], np.int8),
               np.array([0, 1, 255, 128, 127, 254, 17, 200], np.uint8))]
    rounds += [(rng.integers(-32768, 32768, 8).astype(np.int16), rng.integers(0, 65536, 8).astype(np.uint16),
                rng.integers(-128, 128, 8).astype(np.int8), rng.integers(0, 256, 8).astype(np.uint8))
               for _ in range(2)]
    for shorts, ushorts, chars, uchars in rounds:
        for address, values in ((s, shorts), (us, ushorts), (c, chars), (uc, uchars)):
            dev.write(address, values.view(np.int32))
        dev.launch(kernel, threads=8, args=[y, s, us, c, uc])
        expect = np.concatenate([shorts.astype(np.float32), ushorts.astype(np.float32) * np.float32(0.5),
                                 chars.astype(np.float32), uchars.astype(np.float32) / np.float32(255)])
        np.testing.assert_array_equal(dev.read(y, 32).view(U32), expect.view(U32))


DIRECTED_CU = r"""
extern "C" __global__ void directed(float *y, const float *a, const float *b)
{
    unsigned i = threadIdx.x;
    y[i] = roundf(a[i]);                        // NVRTC: truncf(a + copysignf(0.5f, a)), the add toward zero
    y[i + 4] = __fadd_rd(a[i], b[i]);
    y[i + 8] = __fsub_ru(a[i], b[i]);
    y[i + 12] = __fmul_rz(a[i], b[i]);
}
"""


def _round_half_away(words: np.ndarray) -> np.ndarray:
    """C's roundf, exactly (Python's double holds |x| + 0.5 for |x| < 2^23), a NaN the canonical one."""
    out = []
    for x in f32(words).tolist():
        if np.isnan(x):
            out.append(CANONICAL_NAN)
        elif abs(x) >= 2 ** 23:
            out.append(int(np.float32(x).view(U32)))
        else:
            out.append(int(np.float32(math.copysign(math.floor(abs(x) + 0.5), x)).view(U32)))
    return np.array(out, dtype=U32)


def test_roundf_and_the_directed_rounding_intrinsics_launched():
    """roundf (its add rounds toward zero, so 0.49999997f + 0.5f stays below 1), __fadd_rd, __fsub_ru and
    __fmul_rz on the interpreter, against C's roundf and the exact rounding of each result."""
    text = compile_cuda(DIRECTED_CU)
    assert "add.rz.f32" in text and "add.rm.f32" in text and "sub.rp.f32" in text and "mul.rz.f32" in text
    dev = Device(backend="interpreter")
    kernel = dev.load_kernel(text, "directed")
    rng = np.random.default_rng(3)
    a = np.concatenate([bits_of([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.49999997, 8388607.5, 8388609.0, 3e9,
                                 np.inf, -np.inf, np.nan, -0.0, 1e-40, -0.75, 3.4e38, -3.4e38, 1.0, -1.0]),
                        mixed_scale(rng, 20)])
    b = np.concatenate([bits_of([1e-8, -1e-8, 3.0, 0.1, -0.1, 1e-45, -1e-45, 0.5, 3e38, -3e38, 1.0, 2.0, 1.0,
                                 0.0, 1e-40, 0.75, 3.4e38, 3.4e38, -1.0, 1.0]), mixed_scale(rng, 20)])
    y, pa, pb = dev.alloc(16), dev.alloc(4), dev.alloc(4)
    got = np.zeros((4, len(a)), dtype=U32)
    for k in range(0, len(a), 4):
        dev.write(pa, a[k:k + 4].view(np.int32))
        dev.write(pb, b[k:k + 4].view(np.int32))
        dev.launch(kernel, threads=4, args=[y, pa, pb])
        got[:, k:k + 4] = dev.read(y, 16).view(U32).reshape(4, 4)
    np.testing.assert_array_equal(got[0], _round_half_away(a))
    np.testing.assert_array_equal(got[1], exactly_rounded("add", "rm", a, b))
    np.testing.assert_array_equal(got[2], exactly_rounded("sub", "rp", a, b))
    np.testing.assert_array_equal(got[3], exactly_rounded("mul", "rz", a, b))


# ------------------------------------------------------------------------------------------------ atomicAdd on a float

ATOMIC_CU = r"""
extern "C" __global__ void add_one(float *y, const float *x)
{
    atomicAdd(&y[0], x[threadIdx.x]);
}

extern "C" __global__ void add_two(float *y, const float *x, float *old)
{
    int i = threadIdx.x;
    old[i] = atomicAdd(&y[i % 2], x[i]);
}

// sm_90's vector atomicAdd: atomic element by element (atom.global.add.v2.f32 / .v4.f32)
extern "C" __global__ void add_float2(float2 *y, const float *x, float2 *old)
{
    int i = threadIdx.x;
    old[i] = atomicAdd(y, make_float2(x[i], x[i + 4]));
}

extern "C" __global__ void add_float4(float4 *y, const float *x)
{
    int i = threadIdx.x;
    atomicAdd(y, make_float4(x[i], -x[i], x[i + 4], 0.5f));
}

extern "C" __global__ void add_some(float *y, const float *x, int n)
{
    int i = threadIdx.x;
    if (i < n)
        atomicAdd(&y[0], x[i]);
}

extern "C" __global__ void add_shared(float *y, const float *x)
{
    __shared__ float s[1];
    int i = threadIdx.x;
    if (i == 0) s[0] = y[0];
    __syncthreads();
    atomicAdd(&s[0], x[i]);
    __syncthreads();
    if (i == 0) y[0] = s[0];
}
"""


def _flush(values: np.ndarray) -> np.ndarray:
    """float32 values with subnormals flushed to a zero of their sign (FTZ)."""
    values = np.asarray(values, dtype=np.float32).copy()
    tiny = (values != 0) & (np.abs(values) < np.float32(2.0 ** -126))
    values[tiny] = np.copysign(np.float32(0), values[tiny])
    return values


def sequential_sum(start: int, xs, ftz: bool) -> tuple[int, list[int]]:
    """start + xs[0] + xs[1] + ... in float32, one add at a time (FTZ: CUDA's atomicAdd on global memory, which
    flushes subnormal inputs and results; shared memory keeps them); the final word and the word before each add."""
    word, olds = np.array([start], dtype=U32), []
    for x in np.asarray(xs, dtype=U32):
        olds.append(int(word[0]))
        a, b = f32(word), f32([x])
        with np.errstate(all="ignore"):
            total = _flush(_flush(a) + _flush(b)) if ftz else a + b
        word = canonical(total)
    return int(word[0]), olds


@pytest.fixture
def atomics():
    """A fresh device (memory from word 0: with 8 threads the overlays' state takes most of it) and the kernels."""
    return Device(backend="interpreter"), compile_cuda(ATOMIC_CU)


def test_atomic_add_one_address_in_lane_then_warp_order(atomics):
    """atomicAdd(&y[0], x[i]) from 4 and 8 threads: the compare-and-swap loop lands the adds in lane order within a
    warp (the machine's atom.cas takes lanes in order; each trip the first waiting lane succeeds), warps one after
    another: bit for bit the float32 sum in thread order."""
    dev, text = atomics
    kernel = dev.load_kernel(text, "add_one")
    rng = np.random.default_rng(51)
    y, x = dev.alloc(1), dev.alloc(8)
    for threads in (4, 8):
        for trial in range(3):
            xs = (rng.standard_normal(8) * 10.0 ** rng.integers(-3, 4, 8)).astype(np.float32).view(U32)
            start = int(mixed_scale(rng, 1)[0] & U32(0x3FFFFFFF)) if trial else 0
            dev.write(y, np.array([start], dtype=U32).view(np.int32))
            dev.write(x, xs.view(np.int32))
            before = dict(dev.stats)
            dev.launch(kernel, threads=threads, args=[y, x])
            if threads == 4 and trial == 0:
                print("atomicAdd(&y[0], x[i]), 4 threads:",
                      {k: dev.stats[k] - before[k] for k in ("records", "tokens_written", "tokens_fed")})
            assert int(dev.read(y, 1).view(U32)[0]) == sequential_sum(start, xs[:threads], ftz=True)[0]
    # a different order gives a different sum here: the test tells the orders apart
    xs = bits_of([1.0, 2.0 ** -24, 2.0 ** -24, -1.0])
    dev.write(y, np.zeros(1, dtype=np.int32))
    dev.write(x, xs.view(np.int32))
    dev.launch(kernel, threads=4, args=[y, x])
    assert dev.read(y, 1).view(np.float32)[0] == 0.0 == f32([sequential_sum(0, xs, True)[0]])[0]
    assert f32([sequential_sum(0, xs[::-1], True)[0]])[0] != 0.0


def test_atomic_add_two_addresses_and_the_old_values(atomics):
    """old[i] = atomicAdd(&y[i % 2], x[i]), 4 and 8 threads: each address's adds in thread order, each thread's
    returned word the one before its own add."""
    dev, text = atomics
    kernel = dev.load_kernel(text, "add_two")
    rng = np.random.default_rng(52)
    y, x, old = dev.alloc(2), dev.alloc(8), dev.alloc(8)
    for threads in (4, 8):
        xs = rng.standard_normal(threads).astype(np.float32).view(U32)
        starts = rng.standard_normal(2).astype(np.float32).view(U32)
        dev.write(y, starts.view(np.int32))
        dev.write(x, xs.view(np.int32))
        dev.launch(kernel, threads=threads, args=[y, x, old])
        expect_old = np.zeros(threads, dtype=U32)
        for k in (0, 1):
            final, olds = sequential_sum(int(starts[k]), xs[k::2], ftz=True)
            assert int(dev.read(y, 2).view(U32)[k]) == final
            expect_old[k::2] = olds
        np.testing.assert_array_equal(dev.read(old, threads).view(U32), expect_old)


def test_vector_atomic_adds_are_element_by_element(atomics):
    """atomicAdd(float2 *, float2) and atomicAdd(float4 *, float4) (sm_90's atom.global.add.v2 / .v4.f32): each
    element its own float atomicAdd at its word, in thread order, with the old pair of each thread; against the
    float32 sums one add at a time (FTZ, global memory)."""
    dev, text = atomics
    rng = np.random.default_rng(53)
    y, x, old = dev.alloc(4), dev.alloc(8), dev.alloc(8)
    xs = (rng.standard_normal(8) * 10.0 ** rng.integers(-3, 4, 8)).astype(np.float32).view(U32)
    starts = rng.standard_normal(4).astype(np.float32).view(U32)
    dev.write(x, xs.view(np.int32))
    dev.write(y, starts.view(np.int32))
    dev.launch(dev.load_kernel(text, "add_float2"), threads=4, args=[y, x, old])
    for k, column in enumerate((xs[:4], xs[4:])):
        final, olds = sequential_sum(int(starts[k]), column, ftz=True)
        assert int(dev.read(y, 2).view(U32)[k]) == final
        np.testing.assert_array_equal(dev.read(old, 8).view(U32)[k::2], olds)
    dev.write(y, starts.view(np.int32))
    dev.launch(dev.load_kernel(text, "add_float4"), threads=4, args=[y, x])
    negated = (xs[:4] ^ U32(0x80000000)).astype(U32)
    for k, column in enumerate((xs[:4], negated, xs[4:], bits_of([0.5] * 4))):
        assert int(dev.read(y, 4).view(U32)[k]) == sequential_sum(int(starts[k]), column, ftz=True)[0], k


def test_atomic_add_edge_values(atomics):
    """Infinities, NaNs (the canonical NaN, a NaN in memory included: the loop compares bits), -0 + -0, inf - inf,
    and subnormals, which an atomic add on global memory flushes to zero of their sign (CUDA's FADD.FTZ.RN) and one
    on shared memory keeps."""
    dev, text = atomics
    one, shared = dev.load_kernel(text, "add_one"), dev.load_kernel(text, "add_shared")
    y, x = dev.alloc(1), dev.alloc(4)
    inf, nan, neg0, tiny = 0x7F800000, 0x7FC00000, 0x80000000, 0x00000003
    cases = [(0, [inf, 0x3F800000, 0xBF800000, 0]), (inf, [0xFF800000, 0, 0, 0]), (nan, [0, 0, 0, 0]),
             (0xFFC00123, [0x3F800000, 0, 0, 0]), (neg0, [neg0] * 4), (0, [neg0] * 4), (neg0, [0, neg0, neg0, neg0]),
             (tiny, [tiny, tiny, 0x80000001, 0]), (0x00800000, [0x80000001, 0, 0, 0]), (0x00800001, [0x80000001] * 4),
             (0x7F7FFFFF, [0x7F7FFFFF, 0xFF7FFFFF, 0, 0]), (0x3F800000, [0x007FFFFF] * 4)]
    for start, xs in cases:
        xs = np.array(xs, dtype=U32)
        for kernel, ftz in ((one, True), (shared, False)):
            dev.write(y, np.array([start], dtype=U32).view(np.int32))
            dev.write(x, xs.view(np.int32))
            dev.launch(kernel, threads=4, args=[y, x])
            got = int(dev.read(y, 1).view(U32)[0])
            assert got == sequential_sum(start, xs, ftz)[0], (hex(start), [hex(v) for v in xs], hex(got), ftz)
    dev.write(y, np.array([neg0], dtype=U32).view(np.int32))
    dev.write(x, np.full(4, neg0, dtype=U32).view(np.int32))
    dev.launch(one, threads=4, args=[y, x])
    assert int(dev.read(y, 1).view(U32)[0]) == neg0                    # -0 + -0 = -0


def test_atomic_add_under_a_divergent_branch_and_on_shared_memory(atomics):
    """``if (i < n) atomicAdd(&y[0], x[i])`` with n = 0..8 of 8 threads, and a __shared__ float summed by 8 threads
    (two warps, barriers around): thread order, subnormals kept on shared memory."""
    dev, text = atomics
    some, shared = dev.load_kernel(text, "add_some"), dev.load_kernel(text, "add_shared")
    rng = np.random.default_rng(53)
    y, x = dev.alloc(1), dev.alloc(8)
    xs = rng.standard_normal(8).astype(np.float32).view(U32)
    dev.write(x, xs.view(np.int32))
    for n in (0, 1, 3, 6, 8):
        dev.write(y, np.zeros(1, dtype=np.int32))
        dev.launch(some, threads=8, args=[y, x, n])
        assert int(dev.read(y, 1).view(U32)[0]) == sequential_sum(0, xs[:n], ftz=True)[0], n
    xs = np.concatenate([xs[:6], np.array([0x00000005, 0x80000002], dtype=U32)])
    dev.write(x, xs.view(np.int32))
    for threads in (4, 8):
        dev.write(y, np.array([0x00000007], dtype=np.int32))
        dev.launch(shared, threads=threads, args=[y, x])
        assert int(dev.read(y, 1).view(U32)[0]) == sequential_sum(7, xs[:threads], ftz=False)[0], threads


def test_atomic_add_rewrite():
    """The rewrite: a plain ld of the word, a loop label, the add, atom.cas.b32 on the same address and a branch
    back where the swap failed; red (no old value) the same without the final move; the global one flushes."""
    address = Mem(Reg("%rd1"), 4)
    for opcode, operands in (("atom.global.add.f32", (Reg("%f3"), address, Reg("%f1"))),
                             ("red.shared.add.f32", (address, Reg("%f1")))):
        body = [Instruction(opcode, operands, None, False, 5, opcode)]
        out = as_integers(Kernel("k", body=body, registers={"%f": "f32", "%rd": "b64"})).body
        opcodes = [i.opcode for i in out if isinstance(i, Instruction)]
        space = opcode.split(".")[1]
        assert opcodes[0] == f"ld.{space}.b32" and f"atom.{space}.cas.b32" in opcodes
        assert sum(isinstance(i, Label) for i in out) == 1 and opcodes.count("bra") == 1
        cas = next(i for i in out if isinstance(i, Instruction) and i.base == "atom")
        assert cas.operands[1] == address and all(i.line == 5 for i in out if isinstance(i, Instruction))
        assert (opcodes[-1] == "mov.b32") == opcode.startswith("atom")
        print(opcode, "integer PTX instructions:", len(opcodes))
