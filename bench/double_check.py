"""Doubles on the machine (qwengpu.lowering.doubles) against IEEE binary64: many random add / sub / mul (or
division and square root, or fma) in each rounding, checked against the exact result rounded once (Python's
fractions and integer roots), CUDA's double math library (exp, sin, ...) against mpmath, and what a double op costs
beside a float one.

    python -m qccl_bench.double_check --ops 3000 --seed 1            # add, sub, mul to nearest
    python -m qccl_bench.double_check --ops 600 --seed 2 --mode rz    # rz, rm or rp: __dadd_rz, __dmul_rd, ...
    python -m qccl_bench.double_check --ops 100 --seed 3 --roots      # a / b and sqrt(a): __ddiv_rz, __dsqrt_ru ...
    python -m qccl_bench.double_check --ops 800 --seed 4 --fma        # fma(a, b, c) in all four roundings
    python -m qccl_bench.double_check --cost                          # tokens written: float vs double
    python -m qccl_bench.double_check --library --ops 40              # exp, sin, ...: ulps, lowering time
    python -m qccl_bench.double_check --library --functions sin,cos   # some of them

The operands are random bits of every kind (subnormals, huge values, NaNs, infinities), values near 1 over a range
of exponents, IEEE's edge values, and cancellations (b = -a, b = a neighbour of a; for fma, c = -(a * b) or a
neighbour of it, and c at a scale near the product's). Each launch computes the three
ops of two operand pairs on two threads (straight-line code: its lowering is cut into overlays once, then reused).
"""
from __future__ import annotations

import argparse
import math
import time
from fractions import Fraction

import numpy as np

CANONICAL_NAN = 0x7FFFFFFFFFFFFFFF      # NVIDIA's NaN result (doubles.CANONICAL_NAN, written here independently)
# (significand bits with the hidden one, smallest normal exponent, largest exponent, exponent bias)
BINARY64, BINARY32 = (53, -1022, 1023, 1023), (24, -126, 127, 127)
EDGES = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 5e-324, -5e-324, 2.2250738585072014e-308,
         2.225073858507201e-308, 1.7976931348623157e308, -1.7976931348623157e308, 1.5, 3.0, 0.1, 2.0 ** 53,
         1.5e-323, 1e-310, 1.0 + 2 ** -52, 2.0 ** 1023, 2.0 ** -1022 * 1.5, -2.0 ** -537]
CUDA_MODE = {"rz": "rz", "rm": "rd", "rp": "ru"}
ROUNDINGS = ("rn", "rz", "rm", "rp")
INTRINSICS = {"rn": ("{a} + {b}", "{a} - {b}", "{a} * {b}"),
              **{mode: (f"__dadd_{cuda}({{a}}, {{b}})", f"__dsub_{cuda}({{a}}, {{b}})", f"__dmul_{cuda}({{a}}, {{b}})")
                 for mode, cuda in CUDA_MODE.items()}}
ROOTS = {"rn": ("{a} / {b}", "sqrt({a})"),
         **{mode: (f"__ddiv_{cuda}({{a}}, {{b}})", f"__dsqrt_{cuda}({{a}})") for mode, cuda in CUDA_MODE.items()}}


def rounded(q: Fraction, mode: str, negative_zero: bool = False, form=BINARY64) -> int:
    """The bits of the IEEE number nearest q in ``mode`` (rn, rz, rm, rp), exactly (a zero's sign given)."""
    p, emin, emax, bias = form
    sign = 1 << (63 if form is BINARY64 else 31)
    if q == 0:
        return sign if negative_zero else 0
    negative, m = q < 0, abs(q)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if Fraction(2) ** e > m:
        e -= 1
    e = max(e, emin)                                    # below: a subnormal's scale
    scaled = m / Fraction(2) ** (e - p + 1)
    kept = scaled.numerator // scaled.denominator
    rest = scaled - kept
    up = {"rn": rest > Fraction(1, 2) or rest == Fraction(1, 2) and kept & 1, "rz": False,
          "rm": negative and rest > 0, "rp": not negative and rest > 0}[mode]
    kept += up
    if kept == 1 << p:
        kept, e = kept >> 1, e + 1
    if e > emax:
        infinite = mode == "rn" or mode == ("rm" if negative else "rp")
        magnitude = (2 * emax + 1) << (p - 1) if infinite else ((2 * emax + 1) << (p - 1)) - 1
    elif kept < 1 << (p - 1):
        magnitude = kept                                 # a subnormal
    else:
        magnitude = ((e + bias) << (p - 1)) + kept - (1 << (p - 1))
    return magnitude | (sign if negative else 0)


def bits(x: float) -> int:
    return int(np.float64(x).view(np.uint64))


def expected(a: float, b: float, op: str, mode: str) -> int:
    """IEEE's a op b in ``mode``: exact then rounded once; infinities and NaNs as numpy computes them (no rounding
    there), any NaN the canonical one."""
    if not (math.isfinite(a) and math.isfinite(b)):
        with np.errstate(all="ignore"):
            special = {"+": np.add, "-": np.subtract, "*": np.multiply}[op](np.float64(a), np.float64(b))
        return CANONICAL_NAN if np.isnan(special) else bits(float(special))
    x, y = Fraction(a), Fraction(b)
    exact = {"+": x + y, "-": x - y, "*": x * y}[op]
    if exact != 0 or op == "*":
        # a zero product keeps the operands' signs; a sum that is exactly zero: +0, or -0 rounding down, or where
        # both operands are zeros of that sign
        return rounded(exact, mode, negative_zero=math.copysign(1, a) * math.copysign(1, b) < 0)
    sign_b = -math.copysign(1, b) if op == "-" else math.copysign(1, b)
    same = math.copysign(1, a) == sign_b
    return rounded(exact, mode, negative_zero=(same and math.copysign(1, a) < 0) or (not same and mode == "rm"))


def fused(a: float, b: float, c: float, mode: str) -> int:
    """IEEE's fma(a, b, c) in ``mode``: a * b + c exact, then rounded once. A NaN operand, inf * 0, and an
    infinite product plus the other infinity are the canonical NaN; an infinite product is that infinity, a finite
    one beside an infinite c is c. An exact zero: +0 (-0 rounding down) unless both terms are zeros of one sign
    (a zero product has a * b's sign)."""
    sign_p = math.copysign(1, a) * math.copysign(1, b)
    if not all(math.isfinite(v) for v in (a, b, c)):
        if math.isnan(a) or math.isnan(b) or math.isnan(c):
            return CANONICAL_NAN
        if math.isinf(a) or math.isinf(b):
            if a == 0 or b == 0 or (math.isinf(c) and math.copysign(1, c) != sign_p):
                return CANONICAL_NAN
            return bits(math.copysign(math.inf, sign_p))
        return bits(c)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    same = sign_p == math.copysign(1, c)
    return rounded(exact, mode, negative_zero=(same and sign_p < 0) or (not same and mode == "rm"))


def quotient(a: float, b: float, mode: str) -> int:
    """IEEE's a / b in ``mode``: zeros, infinities and NaNs as numpy computes them, any NaN the canonical one."""
    if not (math.isfinite(a) and math.isfinite(b)) or a == 0 or b == 0:
        with np.errstate(all="ignore"):
            special = np.float64(a) / np.float64(b)
        return CANONICAL_NAN if np.isnan(special) else bits(float(special))
    return rounded(Fraction(a) / Fraction(b), mode)


def root(x: float, mode: str) -> int:
    """IEEE's sqrt(x) in ``mode``: the integer root of x scaled by 4^k, exact or strictly between two steps (all a
    rounding needs to see); sqrt(-0) = -0, a negative number or a NaN the canonical NaN."""
    if math.isnan(x) or x < 0:
        return CANONICAL_NAN
    if x == 0 or math.isinf(x):
        return bits(x)
    q = Fraction(x)
    k = 600
    radicand = q.numerator * q.denominator * 4 ** k
    whole = math.isqrt(radicand)
    below = Fraction(whole, q.denominator * 2 ** k)
    return rounded(below if whole * whole == radicand else below + Fraction(1, q.denominator * 2 ** (k + 1)), mode)


def draw(rng: np.random.Generator, n: int) -> np.ndarray:
    """Doubles of every kind: random bits (subnormals, huge, NaNs), values near 1, and the edges."""
    kind = rng.integers(0, 3, n)
    raw = rng.integers(0, 2 ** 63, n, dtype=np.int64).astype(np.uint64) | (
        rng.integers(0, 2, n).astype(np.uint64) << np.uint64(63))
    values = raw.view(np.float64).copy()
    near = rng.uniform(-4, 4, n) * 2.0 ** rng.integers(-30, 30, n)
    values[kind == 1] = near[kind == 1]
    values[kind == 2] = rng.choice(np.array(EDGES), n)[kind == 2]
    return values


def source(mode: str, roots: bool = False) -> str:
    """A kernel computing the ops of a[i] and b[i] in ``mode`` (add, sub, mul; or a / b and sqrt(a))."""
    forms = (ROOTS if roots else INTRINSICS)[mode]
    ops = "".join(f"    out[{len(forms)} * i + {j}] = {form.format(a='a[i]', b='b[i]')};\n"
                  for j, form in enumerate(forms))
    return (f'extern "C" __global__ void ops(const double *a, const double *b, double *out)\n'
            f'{{\n    int i = threadIdx.x;\n{ops}}}\n')


def check(ops: int, seed: int, mode: str = "rn", roots: bool = False) -> dict:
    """Run ``ops`` random ops (a third each of add, sub, mul; or half each of a / b and sqrt(a)) in ``mode``;
    returns counts and the mismatches."""
    from qwengpu import Device
    rng = np.random.default_rng(seed)
    dev = Device()
    kernel = dev.load_kernel(source(mode, roots), "ops")
    names = "/r" if roots else "+-*"
    per = len(names)
    pa, pb, out = dev.alloc(4), dev.alloc(4), dev.alloc(4 * per)
    report = {"ops": 0, "mismatches": [], "records": 0}
    start = time.time()
    while report["ops"] < ops:
        a, b = draw(rng, 2), draw(rng, 2)
        if rng.random() < 0.3:          # a cancellation: b = -a or a neighbour of a
            b[0] = a[0] * rng.choice([1.0, -1.0, 1 + 2 ** -52, -(1 - 2 ** -53)])
        dev.write(pa, a)
        dev.write(pb, b)
        before = dev.stats["records"]
        dev.launch(kernel, threads=2, args=[pa, pb, out])
        report["records"] += dev.stats["records"] - before
        got = dev.read(out, 4 * per).view(np.uint64).reshape(2, per)
        for i in range(2):
            for j, op in enumerate(names):
                x, y = float(a[i]), float(b[i])
                want = quotient(x, y, mode) if op == "/" else root(x, mode) if op == "r" else expected(x, y, op,
                                                                                                          mode)
                report["ops"] += 1
                if int(got[i, j]) != want:
                    report["mismatches"].append((float(a[i]), op, float(b[i]), mode, hex(int(got[i, j])), hex(want)))
    report["seconds"] = time.time() - start
    return report


FUSED = ('extern "C" __global__ void fused(const double *a, const double *b, const double *c, double *out)\n'
         '{\n    int i = threadIdx.x;\n    out[4 * i + 0] = fma(a[i], b[i], c[i]);\n'
         '    out[4 * i + 1] = __fma_rz(a[i], b[i], c[i]);\n    out[4 * i + 2] = __fma_rd(a[i], b[i], c[i]);\n'
         '    out[4 * i + 3] = __fma_ru(a[i], b[i], c[i]);\n}\n')


def check_fused(ops: int, seed: int) -> dict:
    """Run ``ops`` random fma(a, b, c), each in the four roundings; returns counts and the mismatches."""
    from qwengpu import Device
    rng = np.random.default_rng(seed)
    dev = Device()
    kernel = dev.load_kernel(FUSED, "fused")
    pa, pb, pc, out = dev.alloc(4), dev.alloc(4), dev.alloc(4), dev.alloc(16)
    report = {"ops": 0, "mismatches": [], "records": 0}
    start = time.time()
    while report["ops"] < ops:
        a, b, c = draw(rng, 2), draw(rng, 2), draw(rng, 2)
        with np.errstate(all="ignore"):
            if rng.random() < 0.3:      # a cancellation: c = -(a * b) or a neighbour of it
                c[0] = -(a[0] * b[0]) * rng.choice([1.0, 1 + 2 ** -52, 1 - 2 ** -53])
            if rng.random() < 0.3:      # c near the product's scale (the terms overlap: short shifts)
                c[1] = a[1] * b[1] * rng.uniform(-4, 4) * 2.0 ** int(rng.integers(-60, 60))
        for pointer, values in ((pa, a), (pb, b), (pc, c)):
            dev.write(pointer, values)
        before = dev.stats["records"]
        dev.launch(kernel, threads=2, args=[pa, pb, pc, out])
        report["records"] += dev.stats["records"] - before
        got = dev.read(out, 16).view(np.uint64).reshape(2, 4)
        for i in range(2):
            x, y, z = float(a[i]), float(b[i]), float(c[i])
            for j, mode in enumerate(ROUNDINGS):
                want = fused(x, y, z, mode)
                report["ops"] += 1
                if int(got[i, j]) != want:
                    report["mismatches"].append((x, y, z, mode, hex(int(got[i, j])), hex(want)))
    report["seconds"] = time.time() - start
    return report


def _spread(rng: np.random.Generator, top: float, n: int) -> np.ndarray:
    """Uniform in (-top, top), each scaled by 1, 1e-3 or 1e-9 (the small arguments take other paths)."""
    return rng.uniform(-top, top, n) * rng.choice([1.0, 1e-3, 1e-9], n)


def _magnitudes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Signed magnitudes 10^-6 .. 10^22 for three in four, 10^22 .. 10^300 for the rest: sin's and cos's reduction
    of a huge argument (Payne and Hanek's, over 2/pi's bits) is a path of its own."""
    exponents = np.where(rng.random(n) < 0.75, rng.uniform(-6, 22, n), rng.uniform(22, 300, n))
    return rng.choice([-1.0, 1.0], n) * 10.0 ** exponents


# name: (how arguments are drawn, threads a launch). Two threads for the exp family; one for
# the functions whose paths branch, whose tables of constants and overlay state (about 46 words a thread) leave no
# room for a second thread's state in the machine's 127 words.
LIBRARY = {
    "exp": (lambda rng, n: _spread(rng, 700.0, n), 2),
    "exp2": (lambda rng, n: _spread(rng, 1020.0, n), 2),
    "exp10": (lambda rng, n: _spread(rng, 300.0, n), 2),
    "sin": (_magnitudes, 1),
    "cos": (_magnitudes, 1),
    "sinpi": (lambda rng, n: _spread(rng, 1000.0, n), 1),
    "cospi": (lambda rng, n: _spread(rng, 1000.0, n), 1),
    "expm1": (lambda rng, n: np.where(rng.random(n) < 0.5, _spread(rng, 1.0, n), rng.uniform(-50, 709, n)),
              1),
}


def exactly(name: str, value: float):
    """CUDA's function ``name`` of ``value`` by mpmath at 1,400 bits (enough to reduce 1e300 by pi exactly)."""
    import mpmath          # (the test extra's reference; only --library needs it)
    functions = {"exp2": lambda x: mpmath.power(2, x), "exp10": lambda x: mpmath.power(10, x)}
    with mpmath.workprec(1400):
        function = functions[name] if name in functions else getattr(mpmath, name)
        return function(mpmath.mpf(value))


def library(ops: int, seed: int, names=tuple(LIBRARY)) -> list[dict]:
    """CUDA's double exp, exp2, exp10 and the functions whose paths branch (sin, cos, sinpi, cospi, expm1) on
    ``ops`` random arguments each (where the result is a finite double): the worst error in ulps against mpmath
    (CUDA documents 1 ulp for the exp family and expm1, 2 for the others), the seconds the first launch takes (the
    lowering, then the run) and the records a launch."""
    import mpmath
    from qwengpu import Device
    rng = np.random.default_rng(seed)
    rows = []
    for name in names:
        draw_arguments, threads = LIBRARY[name]
        dev = Device()
        kernel = dev.load_kernel(f'#include <math.h>\nextern "C" __global__ void k(double *y, const double *x)\n'
                                 f'{{ int i = threadIdx.x; y[i] = {name}(x[i]); }}\n', "k")
        y, x = dev.alloc(2 * threads), dev.alloc(2 * threads)
        worst, first, records = 0.0, None, 0
        for _ in range(0, ops, threads):
            values = draw_arguments(rng, threads)
            dev.write(x, values)
            start, before = time.time(), dev.stats["records"]
            dev.launch(kernel, threads=threads, args=[y, x])
            first = time.time() - start if first is None else first
            records = dev.stats["records"] - before
            for value, got in zip(values, dev.read(y, 2 * threads).view(np.float64)):
                want = exactly(name, float(value))
                with mpmath.workprec(1400):
                    error = abs(mpmath.mpf(float(got)) - want) / mpmath.mpf(math.ulp(float(want)))
                worst = max(worst, float(error))
        rows.append({"function": name, "ops": ops, "threads": threads, "worst_ulps": worst, "first_launch_s": first,
                     "records": records})
    return rows


def cost() -> list[tuple[str, float, float]]:
    """Tokens written per element (a thread an element, 2 threads) of y = a op b (and fma(a, b, a)), float32 beside
    float64."""
    from qwengpu import Device
    rows = []
    forms = dict(zip(("add", "sub", "mul"), ((form, form) for form in INTRINSICS["rn"])))
    forms["fma"] = ("fmaf({a}, {b}, {a})", "fma({a}, {b}, {a})")
    for name, (single, double) in forms.items():
        written = []
        for dtype, words, form in (("float", 1, single), ("double", 2, double)):
            dev = Device()
            text = (f'extern "C" __global__ void op(const {dtype} *a, const {dtype} *b, {dtype} *out)\n'
                    f'{{ int i = threadIdx.x; out[i] = {form.format(a="a[i]", b="b[i]")}; }}\n')
            kernel = dev.load_kernel(text, "op")
            pa, pb, out = dev.alloc(2 * words), dev.alloc(2 * words), dev.alloc(2 * words)
            values = np.array([1.1, -2.7], np.float32 if dtype == "float" else np.float64)
            dev.write(pa, values)
            dev.write(pb, values[::-1].copy())
            dev.launch(kernel, threads=2, args=[pa, pb, out])        # lowered (and warmed) once
            before = dev.stats["tokens_written"]
            dev.launch(kernel, threads=2, args=[pa, pb, out])
            written.append((dev.stats["tokens_written"] - before) / 2)
        rows.append((name, *written))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mode", choices=sorted(INTRINSICS), default="rn")
    parser.add_argument("--roots", action="store_true", help="a / b and sqrt(a) instead of add, sub, mul")
    parser.add_argument("--fma", action="store_true", help="fma(a, b, c) in the four roundings instead")
    parser.add_argument("--cost", action="store_true", help="tokens written per element, float beside double")
    parser.add_argument("--library", action="store_true",
                        help="exp, exp2, exp10, sin, cos, sinpi, cospi, expm1: ulps and lowering time")
    parser.add_argument("--functions", default=",".join(LIBRARY),
                        help="with --library: which (comma-separated; default all)")
    args = parser.parse_args(argv)
    if args.library:
        names = args.functions.split(",")
        unknown = [name for name in names if name not in LIBRARY]
        if unknown:
            parser.error(f"--functions: {', '.join(unknown)} not among {', '.join(LIBRARY)}")
        print("function  ops  worst ulps  first launch (lowering + run)  records a launch  threads")
        for row in library(args.ops, args.seed, names):
            print(f"{row['function']:8} {row['ops']:4}  {row['worst_ulps']:10.3f}  {row['first_launch_s']:28.1f} s"
                  f"  {row['records']:16}  {row['threads']:7}")
        return 0
    if args.cost:
        print("op   float32 tokens  float64 tokens  ratio   (per element, interpreter)")
        for name, single, double in cost():
            print(f"{name:4} {single:14.0f}  {double:14.0f}  {double / single:5.1f}x")
        return 0
    report = check_fused(args.ops, args.seed) if args.fma else check(args.ops, args.seed, args.mode, args.roots)
    what = "fma, every rounding" if args.fma else args.mode
    print(f"ops {report['ops']} ({what}), mismatches {len(report['mismatches'])}, records {report['records']} "
          f"({report['seconds']:.0f} s)")
    for mismatch in report["mismatches"][:20]:
        print("MISMATCH", *mismatch)
    return 1 if report["mismatches"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
