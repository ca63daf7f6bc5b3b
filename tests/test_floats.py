"""float32 without float arithmetic (qwengpu/lowering/floats.py, qwengpu/kernels/floats.cu): moves, PTX's fourteen
comparisons, testp's classes, min / max (and .NaN), neg / abs / copysign, float launch arguments, on the
interpreter, each held bit for bit against numpy's IEEE float32 on edge values (both zeros, subnormals, the largest
numbers, infinities, NaNs of both signs with payloads), with register and literal operands; the circuit writing the
interpreter's tokens; and the float arithmetic that is refused, by name."""
from __future__ import annotations

import itertools
import operator
from pathlib import Path

import numpy as np
import pytest

from qwengpu import Device, MachineError
from qwengpu.ptx import PTXError, parse

ROOT = Path(__file__).resolve().parents[1]
FLOATS = str(ROOT / "qwengpu" / "kernels" / "floats.cu")
CANONICAL_NAN = 0x7FFFFFFF

EDGE = np.array([0x00000000, 0x80000000, 0x3FC00000, 0xBFC00000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
                 0x7F800001, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0x3F800001],
                dtype=np.uint32)
PAIRS = np.array(list(itertools.product(range(len(EDGE)), repeat=2)))
A, B = EDGE[PAIRS[:, 0]], EDGE[PAIRS[:, 1]]          # every ordered pair of edge values
LITERALS = [0x00000000, 0x80000000, 0xBFC00000, 0xFF800000, 0x7FC00000, 0x00000001]


def f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


# ------------------------------------------------------------------------------------------------ PTX by hand

def ptx(name: str, body: str, sources: int = 2) -> str:
    """A kernel of ``sources`` float inputs a thread (%f1 = x[tid], %f2 = x[threads + tid], ...) that stores %r9 at
    out[tid]; launched with args [out, x, threads]."""
    loads = "\n".join(f"\tld.global.f32 %f{k + 1}, [%rd{20 + k}];\n\tadd.s64 %rd{21 + k}, %rd{20 + k}, %rd6;"
                      for k in range(sources))
    return f""".version 8.0
.target sm_90
.address_size 64
.visible .entry {name}(.param .u64 {name}_param_0, .param .u64 {name}_param_1, .param .u32 {name}_param_2)
{{
\t.reg .pred %p<4>;
\t.reg .f32 %f<8>;
\t.reg .b32 %r<12>;
\t.reg .b64 %rd<30>;
\tld.param.u64 %rd1, [{name}_param_0];
\tld.param.u64 %rd2, [{name}_param_1];
\tld.param.u32 %r2, [{name}_param_2];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd5, %r1, 4;
\tmul.wide.u32 %rd6, %r2, 4;
\tadd.s64 %rd20, %rd2, %rd5;
{loads}
{body}
\tadd.s64 %rd10, %rd1, %rd5;
\tst.global.u32 [%rd10], %r9;
\tret;
}}
"""


def run_ptx(text: str, name: str, columns: list[np.ndarray], chunk: int = 32) -> np.ndarray:
    """out[i] of the kernel for the i-th elements of the input columns, launched ``chunk`` threads at a time."""
    dev = Device()
    kernel = dev.load_kernel(text, name)
    n = len(columns[0])
    out = np.zeros(n, dtype=np.uint32)
    o, x = dev.alloc(chunk), dev.alloc(chunk * len(columns))
    for start in range(0, n, chunk):
        count = min(chunk, n - start)
        dev.write(x, np.concatenate([c[start:start + count] for c in columns]).astype(np.uint32).view(np.int32))
        dev.launch(kernel, threads=count, args=[o, x, count])
        out[start:start + count] = dev.read(o, count).view(np.uint32)
    return out


ORDERED = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
           "ge": operator.ge}


def ieee(test: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PTX's setp.<test>.f32 from numpy's IEEE comparisons: an ordered test is false where either is a NaN, an
    unordered one (equ, ltu, ...) true; num: neither is a NaN; nan: either is. (C's != is PTX's neu.)"""
    fa, fb = f32(a), f32(b)
    unordered = np.isnan(fa) | np.isnan(fb)
    if test in ("num", "nan"):
        return unordered if test == "nan" else ~unordered
    with np.errstate(invalid="ignore"):
        holds = ORDERED[test[:2]](fa, fb) & ~unordered          # numpy's != is true for a NaN: PTX's ne is not
    return holds | unordered if test.endswith("u") else holds


TESTS = list(ORDERED) + ["equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"]


@pytest.mark.parametrize("test", TESTS)
def test_every_comparison_of_two_registers_is_ieees(test):
    body = f"\tsetp.{test}.f32 %p1, %f1, %f2;\n\tselp.u32 %r9, 1, 0, %p1;"
    got = run_ptx(ptx("k", body), "k", [A, B])
    np.testing.assert_array_equal(got, ieee(test, A, B).astype(np.uint32), err_msg=test)


@pytest.mark.parametrize("test", TESTS)
def test_every_comparison_with_a_literal_on_either_side_is_ieees(test):
    """x against c and c against x: the literal's sets of words (bits_where), checked on every edge value."""
    for c, side in itertools.product(LITERALS, ("right", "left")):
        operands = f"%f1, 0f{c:08X}" if side == "right" else f"0f{c:08X}, %f1"
        body = f"\tsetp.{test}.f32 %p1, {operands};\n\tselp.u32 %r9, 1, 0, %p1;"
        got = run_ptx(ptx("k", body, sources=1), "k", [EDGE])
        literal = np.full(len(EDGE), c, dtype=np.uint32)
        expect = ieee(test, EDGE, literal) if side == "right" else ieee(test, literal, EDGE)
        np.testing.assert_array_equal(got, expect.astype(np.uint32), err_msg=f"{test} {side} 0f{c:08X}")


def test_isnan_of_one_register_and_a_comparison_of_two_literals():
    body = ("\tsetp.nan.f32 %p1, %f1, %f1;\n\tsetp.lt.f32 %p2, 0fBF800000, 0f00000001;\n"
            "\tselp.u32 %r2, 2, 0, %p2;\n\tselp.u32 %r3, 1, 0, %p1;\n\tor.b32 %r9, %r2, %r3;")
    got = run_ptx(ptx("k", body, sources=1), "k", [EDGE])
    np.testing.assert_array_equal(got, np.isnan(f32(EDGE)) + 2)


CLASSES = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda v: ~np.isnan(v), "notanumber": np.isnan,
           "normal": lambda v: np.isfinite(v) & (np.abs(v) >= np.finfo(np.float32).tiny),
           "subnormal": lambda v: (np.abs(v) > 0) & (np.abs(v) < np.finfo(np.float32).tiny)}


@pytest.mark.parametrize("name", list(CLASSES))
def test_testp_classes(name):
    values = np.concatenate([EDGE, [0x007FFFFF, 0x80800000, 0xFF7FFFFF, 0x00800001]]).astype(np.uint32)
    body = f"\ttestp.{name}.f32 %p1, %f1;\n\tselp.u32 %r9, 1, 0, %p1;"
    got = run_ptx(ptx("k", body, sources=1), "k", [values])
    np.testing.assert_array_equal(got, CLASSES[name](f32(values)).astype(np.uint32), err_msg=name)


def min_max(op: str, a: np.ndarray, b: np.ndarray, propagate: bool) -> np.ndarray:
    """PTX's min / max.f32: numpy's fmin / fmax (a NaN operand ignored), two NaNs (with .NaN: any) the canonical
    NaN, and of two zeros -0 below +0 (numpy gives its first operand there)."""
    fa, fb = f32(a), f32(b)
    result = (np.fmax if op == "max" else np.fmin)(fa, fb).view(np.uint32).copy()
    zeros = (fa == 0) & (fb == 0)
    either = np.where((a == 0) | (b == 0), 0, 0x80000000)       # max: +0 if either is; min: -0 if either is
    both = np.where((a == 0x80000000) | (b == 0x80000000), 0x80000000, 0)
    result[zeros] = (either if op == "max" else both)[zeros]
    nans = np.isnan(fa) | np.isnan(fb) if propagate else np.isnan(fa) & np.isnan(fb)
    result[nans] = CANONICAL_NAN
    return result


@pytest.mark.parametrize("op", ["min", "max", "min.NaN", "max.NaN"])
def test_min_max_of_registers_and_of_literals(op):
    base, propagate = op.split(".")[0], "NaN" in op
    body = f"\t{op}.f32 %f3, %f1, %f2;\n\tmov.b32 %r9, %f3;"
    got = run_ptx(ptx("k", body), "k", [A, B])
    np.testing.assert_array_equal(got, min_max(base, A, B, propagate), err_msg=op)
    for c in LITERALS:
        body = f"\t{op}.f32 %f3, 0f{c:08X}, %f1;\n\tmov.b32 %r9, %f3;"
        got = run_ptx(ptx("k", body, sources=1), "k", [EDGE])
        expect = min_max(base, np.full(len(EDGE), c, dtype=np.uint32), EDGE, propagate)
        np.testing.assert_array_equal(got, expect, err_msg=f"{op} 0f{c:08X}")


def test_guarded_float_instructions_and_a_register_set_once_to_a_literal():
    """Under a guard the machine decides (tid < 5), each rewritten sequence keeps it: the other lanes keep their
    values. %f4 holds 0.0f from its one mov (NVRTC's way of writing fmaxf(x, 0.0f)), so its max is a literal's."""
    rows = np.arange(32)
    first = rows < 5
    cases = [
        ("\tmov.f32 %f3, 0fC0000000;\n\t@%p3 max.f32 %f3, %f1, %f2;",
         np.where(first, min_max("max", A[rows], B[rows], False), 0xC0000000)),
        ("\tmov.f32 %f4, 0f00000000;\n\tmov.f32 %f3, %f2;\n\t@!%p3 max.f32 %f3, %f1, %f4;",
         np.where(first, B[rows], min_max("max", A[rows], np.zeros(32, np.uint32), False))),
        ("\tmov.f32 %f3, %f1;\n\t@%p3 neg.f32 %f3, %f2;", np.where(first, B[rows] ^ 0x80000000, A[rows])),
        ("\tmov.pred %p2, 0;\n\t@!%p3 setp.gtu.f32 %p2, %f1, %f2;\n\tselp.f32 %f3, %f1, %f2, %p2;",
         np.where(~first & ieee("gtu", A[rows], B[rows]), A[rows], B[rows])),
    ]
    for body, expect in cases:
        body = "\tsetp.lt.u32 %p3, %r1, 5;\n" + body + "\n\tmov.b32 %r9, %f3;"
        np.testing.assert_array_equal(run_ptx(ptx("k", body), "k", [A[rows], B[rows]]), expect, err_msg=body)


# ------------------------------------------------------------------------------------------------ CUDA kernels

def launch(name, threads, inputs: list[np.ndarray], extra=(), outputs=None):
    """Launch kernel ``name`` of floats.cu with out and one pointer per input array, then the extra arguments."""
    dev = Device()
    outputs = outputs or threads
    out = dev.alloc(outputs)
    dev.write(out, np.full(outputs, 0x5A5A5A5A, dtype=np.uint32).view(np.int32))
    pointers = []
    for values in inputs:
        pointers.append(dev.alloc(len(values)))
        dev.write(pointers[-1], np.asarray(values, dtype=np.float32))       # float32 arrays are words
    dev.launch(dev.load_kernel(FLOATS, name), threads=threads, args=[out, *pointers, *extra])
    return dev.read(out, outputs).view(np.uint32)


def test_relu_and_clamp_with_float_arguments():
    x = f32(EDGE)
    np.testing.assert_array_equal(launch("relu", 16, [x], [13])[:13],
                                  np.where(x > 0, x, np.float32(0)).view(np.uint32)[:13])
    got = launch("clamp", 16, [x], [-1.25, 2.5])
    expect = min_max("min", min_max("max", EDGE, np.full(16, f32([0xBFA00000])[0]).view(np.uint32), False),
                     np.full(16, 0x40200000, dtype=np.uint32), False)
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("mode, op", [(0, "max"), (1, "min")])
def test_fmaxf_and_fminf(mode, op):
    rows = slice(0, 32)
    got = launch("minmax", 32, [f32(A[rows]), f32(B[rows])], [mode])
    np.testing.assert_array_equal(got, min_max(op, A[rows], B[rows], False))


C_COMPARISONS = {0: "lt", 1: "le", 2: "gt", 3: "ge", 4: "eq", 5: "neu", 6: "ltu", 7: "geu", 8: "nan", 9: "num"}


@pytest.mark.parametrize("mode", list(C_COMPARISONS))
def test_the_comparisons_c_writes(mode):
    """C's <, <=, >, >=, ==, != and their negations on pairs of edge values (mode 6 is !(a < b), mode 7
    !(a >= b)), against numpy; NVRTC picks the PTX test (setp.ltu for a negated >=, and so on)."""
    rows = np.arange(mode * 24, mode * 24 + 32) % len(A)
    got = launch("compare", 32, [f32(A[rows]), f32(B[rows])], [mode])
    test = C_COMPARISONS[mode]
    expect = ~ieee("lt", A[rows], B[rows]) if mode == 6 else ~ieee("ge", A[rows], B[rows]) if mode == 7 else \
        ieee(test, A[rows], B[rows])
    np.testing.assert_array_equal(got, expect.astype(np.uint32), err_msg=test)


def test_classify_and_the_sign_operations():
    x = f32(EDGE)
    expect = (np.isnan(x) * 1 | np.isinf(x) * 2 | np.isfinite(x) * 4 | np.signbit(x) * 8 |
              (np.isfinite(x) & (np.abs(x) >= np.finfo(np.float32).tiny)) * 16)
    np.testing.assert_array_equal(launch("classify", 16, [x]), expect)
    s = f32(EDGE[::-1])
    for mode, reference in ((0, np.negative(x)), (1, np.abs(x)), (2, np.copysign(x, s))):
        np.testing.assert_array_equal(launch("sign_ops", 16, [x, s], [mode]), reference.view(np.uint32))


def test_count_above_a_threshold_warp_max_and_row_argmax():
    x = f32(EDGE)
    assert launch("count_above", 16, [x], [1.0], outputs=1)[0] - 0x5A5A5A5A == np.sum(x > 1.0)
    maxima = launch("warp_max", 16, [x], outputs=4)
    expect = [np.fmax.reduce(x[w:w + 4]) for w in range(0, 16, 4)]
    np.testing.assert_array_equal(maxima, np.array(expect, dtype=np.float32).view(np.uint32))
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((8, 6)).astype(np.float32)
    rows[1, 0], rows[2, :], rows[3, 2] = np.nan, 1.5, np.nan     # NaNs, and equals (the first wins)
    argmax = launch("row_argmax", 8, [rows.ravel()], [6])
    np.testing.assert_array_equal(argmax, [c_argmax(r) for r in rows])


def c_argmax(row: np.ndarray) -> int:
    """row_argmax's loop replayed with numpy's float32 comparisons (a NaN first element is never beaten)."""
    best, at = row[0], 0
    for j in range(1, len(row)):
        if row[j] > best:
            best, at = row[j], j
    return at


def conversion_values() -> np.ndarray:
    """Edge values, halves and neighbours of the integer limits, and random floats of every scale: 96, three
    launches of 32."""
    rng = np.random.default_rng(7)
    special = np.array([0.3, -0.3, 0.5, -0.5, 2.5, -2.5, 8388607.5, -8388607.5, 16777217.0, 2147483520.0,
                        -2147483648.0, -2147483904.0, 2147483648.0, 4294967040.0, 4294967296.0, -0.999999, 0.999999],
                       dtype=np.float32)
    scaled = (rng.standard_normal(63) * 10.0 ** rng.integers(-3, 11, 63)).astype(np.float32)
    return np.concatenate([f32(EDGE), special, scaled])


def c_conversion(mode: int, v: np.ndarray) -> np.ndarray:
    """truncf / floorf / ceilf from numpy (a NaN: the canonical NaN, as a GPU's cvt writes it), and PTX's cvt.rzi
    to s32 / u32: toward zero, saturated to the type's range, a NaN gives 0."""
    with np.errstate(invalid="ignore"):
        if mode < 3:
            rounded = (np.trunc, np.floor, np.ceil)[mode](v).astype(np.float32).view(np.uint32).copy()
            rounded[np.isnan(v)] = CANONICAL_NAN
            return rounded
        lo, hi = (-2.0 ** 31, 2.0 ** 31 - 1) if mode == 3 else (0.0, 2.0 ** 32 - 1)
        whole = np.clip(np.trunc(v.astype(np.float64)), lo, hi)
        whole[np.isnan(v)] = 0
        return (whole.astype(np.int64) % 2 ** 32).astype(np.uint32)


@pytest.mark.parametrize("mode", range(5), ids=["truncf", "floorf", "ceilf", "int", "unsigned"])
def test_conversions_that_are_bit_work(mode):
    values = conversion_values()
    got = np.concatenate([launch("to_integer", 32, [values[k:k + 32]], [mode]) for k in range(0, len(values), 32)])
    np.testing.assert_array_equal(got, c_conversion(mode, values))


def test_float4_copy():
    x = f32(EDGE)
    np.testing.assert_array_equal(launch("copy4", 4, [x], outputs=16), EDGE)


# ------------------------------------------------------------------------------------------------ other backends

def test_the_circuit_writes_the_interpreters_tokens_for_a_float_comparison_and_max():
    def tokens(backend):
        dev = Device(backend=backend)
        out, a, b = dev.alloc(4), dev.alloc(4), dev.alloc(4)
        dev.write(a, f32(EDGE[[0, 6, 9, 13]]))
        dev.write(b, f32(EDGE[[1, 2, 10, 4]]))
        dev.launch(dev.load_kernel(FLOATS, "minmax"), threads=4, args=[out, a, b, 0])
        return dev.read(out, 4).view(np.uint32), [(t.id, t.origin) for t in dev.tokens]
    (values, circuit), (ref_values, interpreter) = tokens("circuit"), tokens("interpreter")
    np.testing.assert_array_equal(values, min_max("max", EDGE[[0, 6, 9, 13]], EDGE[[1, 2, 10, 4]], False))
    np.testing.assert_array_equal(values, ref_values)
    assert circuit == interpreter


# ------------------------------------------------------------------------------------------------ refusals

@pytest.mark.parametrize("kind", ["s16", "u16", "s8", "u8", "s32", "u32"])
@pytest.mark.parametrize("rounding", ["rzi", "rni", "rmi", "rpi"])
def test_float_to_an_integer_in_every_rounding_saturates_to_its_range(kind, rounding):
    """PTX's cvt.rzi / rni / rmi / rpi to .s16 / u16 / s8 / u8 / s32 / u32 from .f32 (__float2int_rd / _ru; the
    narrow ones hand-written: NVRTC goes through an int): toward zero, to nearest even, down or up, saturated to the
    destination type's range, a NaN 0 (PTX's float-to-integer rule), against numpy."""
    bits = int(kind[1:])
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind[0] == "s" else (0, (1 << bits) - 1)
    if bits == 32:
        body = f"\tcvt.{rounding}.{kind}.f32 %r9, %f1;"
    else:
        body = f"\t.reg .b16 %rs<2>;\n\tcvt.{rounding}.{kind}.f32 %rs1, %f1;\n\tcvt.{kind[0]}32.{kind} %r9, %rs1;"
    dev = Device()
    kernel = dev.load_kernel(ptx("k", body, sources=1), "k")
    values = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.7, 126.5, 127.5, 128.0, -128.5, -129.0, 255.5, 256.0,
                       32767.5, 32768.0, -32768.5, -32769.0, 65535.4, 65536.0, 1e9, -1e9, 3e38, np.inf, -np.inf,
                       np.nan, 1e-40, -1e-40, 200.49, -100.51, 40000.0, 2147483520.0, 2147483648.0, -2147483648.0,
                       -2147483904.0, 4294967040.0, 4294967296.0, 3e9, -3e9], dtype=np.float32)
    out, x = dev.alloc(4), dev.alloc(4)
    got = []
    for k in range(0, len(values), 4):
        dev.write(x, values[k:k + 4].view(np.int32))
        dev.launch(kernel, threads=4, args=[out, x, 4])
        got += dev.read(out, 4).tolist()
    rounded = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil}[rounding](values.astype(np.float64))
    expect = np.where(np.isnan(values), 0, np.clip(np.nan_to_num(rounded, posinf=high, neginf=low), low, high))
    got = [v & 0xFFFFFFFF if kind == "u32" else v for v in got]
    assert got == expect.astype(np.int64).tolist()


@pytest.mark.parametrize("body, named", [
    ("\tdiv.approx.f32 %f3, %f1, %f2;", "a division of floats"),
    ("\tmad.f32 %f3, %f1, %f2, %f1;", "not a fused multiply-add of sm_20"),
    ("\tcvt.rn.f32.s64 %f3, %rd1;", "of a 64-bit integer runs where every write of it widens"),
    ("\tmax.ftz.f32 %f3, %f1, %f2;", ".ftz flushes subnormals"),
    ("\tmax.xorsign.abs.f32 %f3, %f1, %f2;", "max.f32 with .xorsign, .abs"),
    ("\tsetp.lt.and.f32 %p1, %f1, %f2, %p2;", "combining operation"),
    ("\tcvt.sat.f32.f32 %f3, %f1;", "a conversion that saturates"),
])
def test_float_arithmetic_is_refused_by_name_and_line(body, named):
    dev = Device()
    kernel = dev.load_kernel(ptx("k", body + "\n\tmov.b32 %r9, %f3;"), "k")
    with pytest.raises(MachineError, match=r"line \d+ \(.*" + named.replace(".", r"\.")):
        dev.launch(kernel, threads=4, args=[0, 8, 4])
    assert dev.tokens == []


def test_other_float_types_and_double_literals_are_refused():
    dev = Device()
    text = ptx("k", "\tmax.bf16 %rs1, %rs1, %rs1;").replace(".reg .pred", ".reg .b16 %rs<2>;\n\t.reg .pred")
    with pytest.raises(MachineError, match=r"of the float types \.f32 runs .* not \.bf16"):
        dev.launch(dev.load_kernel(text, "k"), threads=4, args=[0, 8, 4])
    # a double literal parses as its bits in a double instruction; one the doubles stage does not build (the
    # approximate reciprocal) is refused when lowered
    text = ptx("k", "\trcp.approx.ftz.f64 %fd1, 0d3FF8000000000000;").replace(
        ".reg .pred", ".reg .f64 %fd<2>;\n\t.reg .pred")
    with pytest.raises(MachineError, match=r"a double instruction; of double arithmetic the machine builds .*write "
                                           r"float, and 2\.0f"):
        dev.launch(dev.load_kernel(text, "k"), threads=4, args=[0, 8, 4])
    with pytest.raises(PTXError, match="a float64 literal"):       # elsewhere, refused by the parser
        parse(ptx("k", "\tmov.b32 %r1, 0d3FF8000000000000;"))


def test_float_arguments_are_converted_and_checked():
    dev = Device()
    kernel = dev.load_kernel(FLOATS, "count_above")
    assert kernel.arguments([0, 4, 1.5]) == (0, 4, 0x3FC00000)
    assert kernel.arguments([0, 4, np.float32(-0.0)]) == (0, 4, 0x80000000)
    assert kernel.arguments([0, 4, 2]) == (0, 4, 0x40000000)             # an int is its value, as C++ converts
    with pytest.raises(MachineError, match=r"count_above argument 3 \(float\): 1e\+39 is outside float32's range"):
        kernel.arguments([0, 4, 1e39])
    with pytest.raises(MachineError, match="must be a number"):
        kernel.arguments([0, 4, "1.5"])
    with pytest.raises(MachineError, match=r"relu argument 3 \(a 32-bit integer\) must be an integer, got 1.5"):
        dev.launch(dev.load_kernel(FLOATS, "relu"), threads=4, args=[0, 4, 1.5])
    with pytest.raises(MachineError, match="float16 array is not written"):
        dev.write(0, np.zeros(2, np.float16))
    assert dev.tokens == []
