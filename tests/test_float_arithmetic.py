"""float32 add, sub, mul and int to float (qwengpu/lowering/floats.py, ``_sum``, ``_mul``, ``_from_integer``): the
integer PTX they are rewritten into, held bit for bit against numpy's IEEE float32 (round to nearest even,
subnormals kept, a NaN result the canonical NaN 0x7fffffff, as NVIDIA's non-FTZ float unit writes it).

Two ways: the rewritten instructions run by a small evaluator of PTX's integer semantics written here (independent
of the lowering's constant folder), on every pair of edge values, ties both ways, cancellations, overflow and
underflow, and tens of thousands of random bit patterns and random floats of mixed scale; and CUDA kernels whose
operands are launch arguments, launched on the interpreter (the lowering folds the whole sequence to a constant
store), a few hundred pairs. Then the refusals."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from qwengpu import Device, MachineError
from qwengpu.lowering.floats import as_integers
from qwengpu.ptx import Imm, Instruction, Kernel, Reg
from qwengpu.toolchain import compile_cuda

CANONICAL_NAN = 0x7FFFFFFF
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


def evaluate(body: list, registers: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """Run straight-line integer PTX on n lanes at once (numpy uint32 words, predicates 0 / 1), PTX's meaning
    written from the ISA manual: wrap-around arithmetic, shift amounts of 32 or more give 0 (shr.s32: the sign),
    guarded instructions write only where the guard holds. Only the opcodes the float rewrites emit."""
    regs = dict(registers)

    def value(operand):
        if isinstance(operand, Imm):
            return np.full(n, operand.value & 0xFFFFFFFF, dtype=U32)
        return regs[operand.name]

    for inst in body:
        assert isinstance(inst, Instruction), inst
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


def float_kernel(opcode: str, operands: int = 2, guard: bool = False, literal: int | None = None) -> Kernel:
    """One float instruction on registers %f1 (and %f2, or a literal), writing %f3 (cvt reads %r1)."""
    if opcode.startswith("cvt"):
        sources = (Reg("%r1"),)
    else:
        sources = (Reg("%f1"), Reg("%f2") if literal is None else Imm(literal))[:operands]
    text = f"{opcode} %f3, ..."
    body = [Instruction(opcode, (Reg("%f3"),) + sources, Reg("%p1") if guard else None, False, 3, text)]
    return Kernel("k", body=body, registers={"%f": "f32", "%r": "b32", "%p": "pred"})


def run(opcode: str, a: np.ndarray, b: np.ndarray | None = None, literal: int | None = None) -> np.ndarray:
    """The rewritten instructions of ``opcode`` evaluated on each (a, b)."""
    kernel = as_integers(float_kernel(opcode, literal=literal))
    a = np.asarray(a, dtype=U32)
    n = len(a)
    registers = {"%r1": a} if opcode.startswith("cvt") else {"%f1": a}
    if b is not None:
        registers["%f2"] = np.asarray(b, dtype=U32)
    registers["%f3"] = np.full(n, 0x5A5A5A5A, dtype=U32)
    return evaluate(kernel.body, registers, n)["%f3"]


OPCODES = {"add": "add.rn.f32", "sub": "sub.f32", "mul": "mul.rn.f32"}


def check(op: str, a, b=None, literal: int | None = None) -> None:
    a = np.asarray(a, dtype=U32)
    if op in ("s32", "u32"):
        got, expect = run(f"cvt.rn.f32.{op}", a), reference(op, a)
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

@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_every_pair_of_edge_values(op):
    check(op, *pairs(EDGE))


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_random_bit_patterns_and_floats_of_mixed_scale(op):
    rng = np.random.default_rng({"add": 1, "sub": 2, "mul": 3}[op])
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


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_a_literal_operand(op):
    rng = np.random.default_rng(21)
    a = np.concatenate([np.array(EDGE, dtype=U32), mixed_scale(rng, 3000)])
    for literal in (0x3F800000, 0x80000000, 0x00000001, 0x7F800000, 0x7FC00000, 0x4B400000, 0xBF000000):
        check(op, a, literal=literal)
        # the literal first (1.5f - x), and both literals (folded when rewriting: one mov)
        body = [Instruction(OPCODES[op], (Reg("%f3"), Imm(literal), Reg("%f2")), None, False, 3, "x")]
        kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32"}))
        got = evaluate(kernel.body, {"%f2": a, "%f3": a}, len(a))["%f3"]
        np.testing.assert_array_equal(got, reference(op, np.full(len(a), literal, dtype=U32), a))
        for k in range(0, 400, 7):
            body = [Instruction(OPCODES[op], (Reg("%f3"), Imm(literal), Imm(int(a[k]))), None, False, 3, "x")]
            kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32"}))
            assert {inst.opcode for inst in kernel.body} == {"mov.b32"}
            assert kernel.body[-1].operands[1].value == reference(op, np.array([literal], U32), a[k:k + 1])[0]


def test_int_to_float():
    rng = np.random.default_rng(8)
    edges = [0, 1, 2, 3, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFF, 0x1000000, 0x1000001, 0x1000003,
             0x2000002, 0x2000006, 0x2000001, 0xFFFFFF80, 0xFFFFFF7F, 0xFFFFFFC0, 0xFFFFFF81, 0x7FFFFFC0, 0x7FFFFFBF]
    values = np.concatenate([np.array(edges, dtype=U32), random_bits(rng, 20000),
                             random_bits(rng, 20000) >> rng.integers(0, 32, 20000).astype(U32)])
    for kind in ("s32", "u32"):
        check(kind, values)
        check(kind, -values.view(np.int32).astype(np.int64) & 0xFFFFFFFF)


def instruction_count(opcode: str) -> int:
    return len(as_integers(float_kernel(opcode)).body)


def test_the_rewrites_are_integer_and_short():
    counts = {op: instruction_count(op) for op in ("add.f32", "sub.f32", "mul.f32", "cvt.rn.f32.s32",
                                                   "cvt.rn.f32.u32")}
    print("integer PTX instructions:", counts)
    assert counts["add.f32"] <= 64 and counts["mul.f32"] <= 72 and counts["cvt.rn.f32.u32"] <= 32
    for opcode in counts:
        for inst in as_integers(float_kernel(opcode)).body:
            assert not re.search(r"\.(f32|rn)\b", inst.opcode), inst.opcode
            assert inst.line == 3 and inst.text.startswith(opcode.split(".")[0])


def test_a_guarded_float_instruction_keeps_the_destination_elsewhere():
    rng = np.random.default_rng(3)
    a, b = mixed_scale(rng, 1000), mixed_scale(rng, 1000)
    guard = (np.arange(1000) % 3 == 0).astype(U32)
    for op in ("add", "mul"):
        kernel = as_integers(float_kernel(OPCODES[op], guard=True))
        old = random_bits(rng, 1000)
        got = evaluate(kernel.body, {"%f1": a, "%f2": b, "%f3": old, "%p1": guard}, 1000)["%f3"]
        np.testing.assert_array_equal(got, np.where(guard != 0, reference(op, a, b), old))


def test_the_destination_may_be_a_source():
    """add.f32 %f1, %f1, %f2: the sources are read before the destination is written."""
    rng = np.random.default_rng(4)
    a, b = mixed_scale(rng, 2000), mixed_scale(rng, 2000)
    for op in ("add", "sub", "mul"):
        body = [Instruction(OPCODES[op], (Reg("%f1"), Reg("%f1"), Reg("%f2")), None, False, 1, "x")]
        kernel = as_integers(Kernel("k", body=body, registers={"%f": "f32"}))
        got = evaluate(kernel.body, {"%f1": a, "%f2": b}, 2000)["%f1"]
        np.testing.assert_array_equal(got, reference(op, a, b), err_msg=op)


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
    y[i] = r;
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
    for mode, op in enumerate(["add", "sub", "mul", "s32", "u32", "guarded", "literal"]):
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
        else:
            expect = reference(op, a, b)
        np.testing.assert_array_equal(got, expect, err_msg=op)


# ------------------------------------------------------------------------------------------------ refusals

@pytest.mark.parametrize("opcode, named", [
    ("add.rz.f32", r"rounding to nearest even \(\.rn\), without \.sat, not with \.rz"),
    ("sub.rm.f32", r"not with \.rm"),
    ("mul.rp.f32", r"not with \.rp"),
    ("add.sat.f32", r"not with \.sat"),
    ("add.ftz.f32", r"\.ftz flushes subnormals"),
    ("fma.rn.f32", r"needs the exact 48-bit product.*--fmad=false"),
    ("mad.f32", r"needs the exact 48-bit product.*--fmad=false"),
    ("div.rn.f32", r"a division of floats needs IEEE arithmetic"),
    ("sqrt.rn.f32", r"a square root of floats"),
    ("rcp.rn.f32", r"a reciprocal of floats"),
    ("cvt.rz.f32.s32", r"a conversion that rounds or normalises"),
    ("cvt.rn.f32.s64", r"a conversion that rounds or normalises"),
    ("add.f64", r"not \.f64"),
])
def test_other_arithmetic_is_refused_by_name(opcode, named):
    operands = 3 if opcode.startswith(("fma", "mad")) else 1 if opcode.startswith(("sqrt", "rcp", "cvt")) else 2
    kernel = float_kernel(opcode, operands)
    if operands == 3:
        kernel.body[0] = Instruction(opcode, (Reg("%f3"), Reg("%f1"), Reg("%f2"), Reg("%f1")), None, False, 3,
                                     f"{opcode} %f3, ...")
    with pytest.raises(MachineError, match=r"line 3 \(.*" + named):
        as_integers(kernel)
