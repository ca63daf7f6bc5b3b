"""Differential fuzzer for the lowering: random integer CUDA kernels, NVRTC -> PTX -> machine blocks -> interpreter,
against the same body compiled by the host's C compiler as an ordinary sequential C function per thread.

Each program is a body over ``tid`` (threadIdx.x), a read-only input ``x[0..7]``, two scalar arguments and the
thread's own output word: int / unsigned arithmetic, compares, ?:, casts to narrow types, if / else, constant-trip
loops, divergent loops (trip counts that differ across lanes) with break / continue, loads at computed indices. Threads do not interact, so the C reference runs them one after another. Signed
overflow is avoided (arithmetic is unsigned; signed values are only compared, shifted right and divided by positive
constants), so the C compiler's result is the language's, not an accident of undefined behaviour.

With ``--shared`` a fraction of the programs are block programs: a ``__shared__ unsigned sh[8]`` that every thread
fills at its own index, ``__syncthreads()``, optionally a phase of ``atomicAdd`` into shared words at computed
indices and a second barrier, then a phase that reads any thread's word (``sh[e % blockDim.x]``). The C reference
runs such a program phase by phase: every thread's first phase (its variables kept in an array), then every
thread's next phase, which is what the barriers mean on a GPU.

    python -m qccl_bench.kernel_fuzz --programs 10000 --seed 1
    python -m qccl_bench.kernel_fuzz --programs 2000 --seed 2 --shared 1.0
    python -m qccl_bench.kernel_fuzz --programs 2000 --seed 3 --shared 0.5 --narrow --atomics

``--narrow`` adds leaves that read x's bytes and halfwords at computed indices; ``--atomics`` makes the block
programs' atomics phase use all ten atomics with their old values kept (the machine runs warps in turn and lanes in
order, which is the reference's thread order). ``--floats`` adds float32 expressions without arithmetic (the words
read as floats, edge literals such as -0.0f, infinities, NaNs and subnormals, negation, fabsf, copysignf, fmaxf,
fminf, ?:, truncf, floorf, ceilf) compared (< <= > >= == !=, negated), classified (isnan, isinf, isfinite, signbit),
converted to int or unsigned (clamped: out of range is undefined in C) or read back as words; the C side is gcc's
IEEE float32 on x86-64 (SSE), with what C leaves open written from PTX's definition: fmaxf / fminf (a NaN operand
ignored, two NaNs the canonical NaN 0x7fffffff, -0 below +0), and the canonical NaN out of truncf, floorf and ceilf.
``--wide`` adds unsigned long long expressions (words zero- and sign-extended, 64-bit arithmetic, shifts, ?:) read
back as their low word, a shifted-down word, a comparison or a remainder: the lowering must refuse what depends on
the high word and run the rest exactly; with ``--floats`` also floats converted to 64-bit integers ((long long)x,
llrintf, clamped into range), read back as their low word. ``--arith`` (implies ``--floats``) puts float32
arithmetic into the float expressions: a + b, a - b and a * b (PTX add.rn / sub.rn / mul.rn.f32: round to nearest
even, subnormals in and out, overflow to infinity) of float subexpressions, words with their exponent held in a
window (near 1, near 2^24, among the subnormals, near the largest floats: so that adds round and products underflow
or overflow), edge literals (-0.0f, 1e-45f, 1.1754944e-38f, 3.4e38f, 16777216.0f, infinities) and (float) of int and
unsigned expressions (cvt.rn.f32.s32 / .u32; with ``--narrow`` also of shorts and chars, cvt.rn.f32.s16 / u16), and
(18% of the ops: each is ~170 machine ops) a / b, 1.0f / a and sqrtf(a) (div.rn / rcp.rn / sqrt.rn.f32, correctly
rounded: x / 0, 0 / 0, inf / inf, roots of negatives, of exact squares and of their neighbours), at most three
arithmetic ops per float use; half the plain programs write a float expression's bits to out[]. Every arithmetic
result is wrapped in ``canon()``, which makes a NaN the canonical NaN 0x7fffffff in both the CUDA and the C source:
the GPU (and the machine) write that NaN, x86 propagates payloads or makes 0xffc00000, and NVRTC's compiler may fold
``x + -0.0f`` to ``x``, payload and all; operands that must not be NaN (fmaxf / fminf's NaN-free side) are finite,
so their sum or product is never a NaN. The C reference is compiled with ``-ffp-contract=off`` (the toolchain's
--fmad=false), without -ffast-math, in SSE registers (``/`` is divss) and with ``-fno-math-errno`` (sqrtf is the
inlined, correctly rounded sqrtss, no libm call for errno). ``--fma`` (implies ``--arith``) adds fmaf(a, b, c),
rounded once, against glibc's fmaf (exact). ``--calls`` makes expressions call ``__noinline__`` functions of their
own (statements, loops, an early return, calls of further functions, x[] and out[] through pointer parameters),
which qwengpu.inline inlines where NVRTC keeps the call ("call kept" counts those programs) and gcc calls.
``--counters`` adds loops over an ``unsigned long long`` counter from a word to a word bound (``<``, ``<=``, two
bounds), stepping by 2^30 or more (the last sum often passes 2^32 - 1), by 1 or by 1 to 4, the counter read in the
body and, in a quarter, after the loop (refused). ``--pairs`` (implies ``--wide``) adds leaves that read x's words
two at a time as ``unsigned long long`` or ``long long`` values (64-bit loads: the machine keeps them, and what is
computed from them, as pairs of words: qwengpu.lowering.pairs), and ``(float)`` of 64-bit expressions, signed and
unsigned, read back as their bits (gcc's conversion rounds once, to nearest even). ``--bits`` (implies ``--pairs``)
adds the bit counts of 64-bit expressions (``__popcll``, ``__clzll``, ``__ffsll``, ``__brevll``: gcc's builtins, a
loop for the reversal) and, with ``--atomics``, 64-bit atomics in the block programs' atomics phase (add, and, or,
xor, exch, cas, min and max unsigned and signed, on ``sh`` read as four ``unsigned long long``, their old values
kept). ``--arith`` with ``--atomics`` makes 40% of those phases a float ``atomicAdd`` on a word of ``sh`` (any
bits), its old value kept: the C reference adds in float32 in thread order, subnormals kept (shared memory), a NaN
sum the canonical NaN. ``--doubles`` ends half the plain programs with a double expression
(qwengpu.lowering.doubles): x's words read two at a time as doubles (any bits), ``(double)`` of ints, unsigneds and
floats, edge literals, and at most three of + - * / ``sqrt``, ``dmin`` / ``dmax`` (PTX's min / max.f64), ``floor``,
``-``, ``fabs``, read back as its bits (a NaN made the canonical one on both sides), ``(float)`` of it, a compare,
or ``(int)`` of it clamped; with ``--pairs`` also ``(double)`` of 64-bit values (cvt.rn.f64.s64 / u64); gcc's
doubles are IEEE binary64 (x86-64 SSE2). ``--simd`` adds CUDA's SIMD intrinsics of two 16-bit or four 8-bit lanes
(``__vadd2``, ``__vsubss4``, ``__vavgs2``, ``__vsadu4``, ``__vcmpgts2``, ``__vabsss4``, ...), sm_90's DPX intrinsics
(``__vimax3_s32``, ``__viaddmin_u16x2``, ``__vimax_s16x2_relu``, ...), ``__dp4a`` / ``__dp2a_lo`` / ``_hi`` (signed
or unsigned), funnel shifts by any amount and ``__byte_perm`` by any selector, of unsigned expressions; the C side
defines each from the CUDA Math API's description. All twelve are off by default, so a seed's programs stay what
they were.

    python -m qccl_bench.kernel_fuzz --programs 2000 --seed 4 --floats
    python -m qccl_bench.kernel_fuzz --programs 3000 --seed 8 --wide
    python -m qccl_bench.kernel_fuzz --programs 600 --seed 31 --floats --arith
    python -m qccl_bench.kernel_fuzz --programs 1500 --seed 103 --calls

prints programs tried, run, refused (by reason), mismatches and internal errors (with --arith also how many of the
programs that ran hold a float add, sub, mul, div, rcp, sqrt and each conversion); a mismatch prints its source and
both results, an internal error (any exception but a MachineError refusal or an NVRTC compile error, the lowering's
"internal: ..." MachineErrors, and with --time-limit (on with --arith) a program not done in time, each run in a
forked child: a bug) its source and the exception; either makes the exit status 1. The run goes on past both.
"""
from __future__ import annotations

import argparse
import collections
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

import numpy as np

INPUTS = 8
OUT, X = 0, 16          # device word addresses of out[] and x[]


@dataclass
class Case:
    body: str
    threads: int
    s0: int
    s1: int
    x: list[int]
    out: list[int]
    phases: tuple[str, ...] = ()     # a block program: the bodies between barriers (body is then unused)
    features: frozenset = frozenset()   # what the program holds that a report counts (--arith: fadd, fsub, ...)
    functions: tuple[str, ...] = ()     # --calls: the __noinline__ functions it calls, defined callees first


class Generator:
    """Random kernel bodies over unsigned / int variables v0..v3."""

    def __init__(self, rng: np.random.Generator, narrow: bool = False, atomics: bool = False, floats: bool = False,
                 wide: bool = False, arith: bool = False, fma: bool = False, calls: bool = False,
                 counters: bool = False, pairs: bool = False, bits: bool = False, doubles: bool = False,
                 simd: bool = False):
        self.rng = rng
        self.simd = simd            # CUDA's SIMD and DPX intrinsics, dp4a / dp2a, funnel shifts, byte permutes
        self.doubles = doubles      # half the plain programs end with a double expression
        self.double_left = 0        # double arithmetic ops still allowed in the expression drawn
        self.bits = bits            # 64-bit bit counts; with atomics, 64-bit atomics in the atomics phase
        self.pairs = pairs          # 64-bit leaves may be x's words read two at a time
        self.counters = counters    # statements may be loops over an unsigned long long counter
        self.calls = calls      # expressions may call __noinline__ functions (qwengpu.inline inlines them)
        self.functions: list[str | None] = []       # their definitions, by number (f0, f1, ...)
        self.calling = 0        # how deep the function being generated is
        self.floats = floats or arith or fma  # unsigned expressions may compare, classify, read back float32 ones
        self.arith = arith or fma   # float expressions also + - * / sqrtf and convert ints (float)i, (float)u
        self.fma = fma          # and fmaf(a, b, c)
        self.arith_left = 0     # float arithmetic ops (+ - * / sqrtf) still allowed in the float expressions drawn
        self.features = set()   # fadd, fsub, fmul, fdiv, frcp, fsqrt, cvt.s32 / u32 / narrow: what this program holds
        self.wide = wide        # unsigned expressions may truncate, shift or compare 64-bit expressions
        self.loops = 0          # loop counters are named j1, j2, ... so nested loops never shadow
        self.shared = False     # leaves may read any thread's shared word (after the first barrier)
        self.narrow = narrow    # leaves also read x's bytes and halfwords at computed indices
        self.atomics = atomics  # the shared atomics phase uses every atomic and keeps their old values

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def const(self) -> str:
        choice = self.rng.integers(6)
        if choice == 0:
            return f"{int(self.rng.integers(0, 1 << 32))}u"
        return f"{int(self.rng.integers(0, 300))}u"

    def leaf(self) -> str:
        leaves = ["v0", "v1", "v2", "v3", "tid", "(unsigned)s0", "(unsigned)s1", self.const(),
                  "(unsigned)x[tid]", "(unsigned)x[(v0 & 7u)]", "(unsigned)x[(tid + 1u) & 7u]", "(unsigned)out[tid]"]
        if self.shared:
            leaves += ["sh[(tid + 1u) % NT]", f"sh[{self.pick(['v0', 'v1', 'v2', 'v3'])} % NT]", "sh[NT - 1u - tid]"]
        if self.narrow:
            var = self.pick(["v0", "v1", "v2", "v3", "tid", "(unsigned)x[tid]"])
            leaves += [f"(unsigned)((const unsigned char *)x)[{var} & 31u]",
                       f"(unsigned)((const signed char *)x)[({var} >> 3) & 31u]",
                       f"(unsigned)((const unsigned short *)x)[{var} & 15u]",
                       f"(unsigned)((const short *)x)[({var} ^ tid) & 15u]"]
        return self.pick(leaves)

    def expr(self, depth: int = 0) -> str:
        if self.calls and self.calling < 2 and depth <= 1 and self.rng.random() < 0.15:   # drawn only with --calls
            return self.call()
        if depth > 2 or self.rng.random() < 0.3:
            return self.leaf()
        a, b = self.expr(depth + 1), self.expr(depth + 1)
        kind = int(self.rng.integers(16 + 3 * self.floats + 3 * self.wide + 3 * self.simd))
        if kind >= 16:      # past the integer kinds: floats, then 64-bit values, then SIMD, as the flags say
            if self.floats and kind < 19:
                return self.float_use(depth + 1)
            if self.wide and kind < 19 + 3 * self.floats:
                return self.wide_use(depth + 1)
            return self.simd_use(a, b, self.expr(depth + 1))
        if kind <= 5:
            op = self.pick(["+", "-", "*", "&", "|", "^"])
            return f"({a} {op} {b})"
        if kind == 6:
            return f"({a} << ({b} & 31u))"
        if kind == 7:
            return f"({a} >> ({b} & 31u))"
        if kind == 8:
            return f"(unsigned)((int){a} >> ({b} & 31u))"
        if kind == 9:
            cmp = self.pick(["<", "<=", ">", ">=", "==", "!="])
            cast = self.pick(["", "(int)"])
            return f"(unsigned)({cast}{a} {cmp} {cast}{b})"
        if kind == 10:
            return f"({self.expr(depth + 1)} ? {a} : {b})"
        if kind == 11:
            return f"({a} {self.pick(['/', '%'])} {int(self.rng.integers(1, 20))}u)"
        if kind == 12:
            return f"(unsigned)((int){a} {self.pick(['/', '%'])} {int(self.rng.integers(1, 20))})"
        if kind == 13:
            cast = self.pick(["unsigned char", "signed char", "unsigned short", "short"])
            return f"(unsigned)({cast}){a}"
        if kind == 14:
            return self.pick([f"(~{a})", f"(-{a})", f"(unsigned)(!{a})"])
        return self.pick([f"min({a}, {b})", f"max({a}, {b})", f"(unsigned)min((int){a}, (int){b})",
                          f"(unsigned)max((int){a}, (int){b})", f"(unsigned)abs((int)({a} & 0x7fffffffu))"])

    def call(self) -> str:
        """A call of a new function (statements, loops, an early return, maybe calls of its own) of two unsigned
        arguments, which also reads the kernel's x[] and out[] through pointer parameters."""
        number = len(self.functions)
        self.functions.append(None)
        self.features.add("call" if not self.calling else "nested call")
        shared, self.shared = self.shared, False        # the function does not see the block's sh[]
        self.calling += 1
        lines = ["unsigned v0 = a, v1 = b, v2 = (unsigned)x[tid & 7u], v3 = a ^ b;"]
        lines += [self.statement(1) for _ in range(int(self.rng.integers(0, 3)))]
        if self.rng.random() < 0.5:
            lines.append(f"if ((({self.expr(2)}) & 3u) == 1u) return {self.expr(2)};")
        lines.append(f"return {self.expr(1)};")
        self.calling -= 1
        self.shared = shared
        self.functions[number] = (f"unsigned f{number}(unsigned tid, int s0, int s1, const int *x, int *out, "
                                  f"unsigned a, unsigned b) {{ {' '.join(lines)} }}")
        return f"f{number}(tid, s0, s1, x, out, {self.expr(2)}, {self.expr(2)})"

    # fmaxf / fminf of two NaNs is the canonical NaN on a GPU, but NVRTC's compiler may fold it to one of them
    # (fminf(a, a) becomes a; two NaN constants fold to a NaN of its choosing), so the generator never gives a
    # min / max two NaN operands: one of them is always NaN-free (tests/test_floats.py checks two NaNs directly).
    # The NaN literals are not constants NVRTC could see: x[0] is in -20..19, so (x[0] + 20) >> 8 is 0 at run time.
    FLOAT_LITERALS = ("0.0f", "(-0.0f)", "1.5f", "(-2.5f)", "1e-40f", "(-3.0e38f)", "__uint_as_float(0x7f800000u)",
                      "__uint_as_float(0xff800000u)")
    NAN_LITERALS = ("__uint_as_float(0x7fc00000u | (((unsigned)x[0] + 20u) >> 8))",
                    "__uint_as_float(0xffc00001u | (((unsigned)x[0] + 20u) >> 8))")

    # --arith: literals around the edges of rounding (the smallest subnormal, the largest normal's neighbourhood, the
    # smallest normal, 2^24 where the integers stop being exact, a value that does not round exactly) and infinities.
    ARITH_LITERALS = ("(-0.0f)", "0.0f", "1.0f", "(-1.0f)", "0.1f", "1.5f", "(-3.0f)", "1e-45f", "(-1e-45f)",
                      "1.1754944e-38f", "5.877472e-39f", "3.4e38f", "(-3.4028235e38f)", "1.7014118e38f",
                      "16777216.0f", "8388608.5f", "__uint_as_float(0x7f800000u)", "__uint_as_float(0xff800000u)")

    def convert(self) -> str:
        """(float) of an int or unsigned expression (cvt.rn.f32.s32 / .u32): never a NaN, never infinite; a shift
        gives magnitudes where the value is exact or rounds at different places."""
        word = self.pick([self.leaf(), self.expr(3), f"({self.leaf()} >> {int(self.rng.integers(1, 31))}u)",
                          f"({self.leaf()} & {self.pick(['0x01ffffffu', '0xff000001u', '0x80000000u', '0xffffu'])})"])
        # with --narrow also (float) of a short or a char (cvt.rn.f32.s16 / u16): drawn only then, so the programs
        # of a seed without --narrow stay those of the runs recorded before
        if self.narrow and self.rng.random() < 0.4:
            kind = self.pick(["short", "unsigned short", "signed char", "unsigned char"])
            self.features.add("cvt.narrow")
            return f"(float)({kind})({word})"
        if self.rng.random() < 0.5:
            self.features.add("cvt.s32")
            return f"(float)(int)({word})"
        self.features.add("cvt.u32")
        return f"(float)({word})"

    # (mask, base): a word's sign and low bits in a window of exponents, so that operands of an add are close enough
    # to round, and products land among the subnormals or overflow: [1, 2), [0.5, 2), the subnormals and smallest
    # normals, the largest binades, 2^23..2^25 (where the integers stop being exact). Never a NaN nor infinite.
    WINDOWS = (("0x807fffffu", "0x3f800000u"), ("0x80ffffffu", "0x3f000000u"), ("0x80ffffffu", "0x00000000u"),
               ("0x80ffffffu", "0x7e800000u"), ("0x81ffffffu", "0x4b000000u"), ("0x80ffffffu", "0x1f800000u"))

    def windowed(self) -> str:
        mask, base = self.pick(self.WINDOWS)
        word = self.pick([self.leaf(), "(unsigned)x[tid]", "(unsigned)x[(tid + 1u) & 7u]", self.expr(3)])
        return f"__uint_as_float(({word} & {mask}) | {base})"

    def finite_expr(self) -> str:
        """A float32 expression that is never a NaN nor infinite (the word read as a float keeps an even exponent)."""
        choice = self.rng.random()
        if choice < 0.25:
            return self.convert()
        if choice < 0.5:
            return self.windowed()
        word = self.pick([self.leaf(), "(unsigned)x[tid]", self.expr(3)])
        leaf = self.pick([f"__uint_as_float(({word}) & 0xff7fffffu)", self.pick(self.ARITH_LITERALS[:-2])])
        return self.pick([leaf, leaf, f"(-{leaf})", f"fabsf({leaf})"])

    def arith_expr(self, depth: int, nan_free: bool) -> str:
        """``a + b``, ``a - b``, ``a * b``, ``a / b``, ``1.0f / a`` or ``sqrtf(a)`` of float subexpressions,
        canonicalised: a NaN result becomes the canonical NaN 0x7fffffff on both sides (the GPU writes it, x86
        propagates payloads or makes 0xffc00000, and NVRTC's compiler may fold x + -0.0f to x, payload and all).
        ``nan_free``: operands that are never NaN nor infinite (a divisor never zero, a root's operand a magnitude),
        so the result is never a NaN (it may overflow to infinity)."""
        self.arith_left -= 1

        def operand():
            if nan_free:
                return self.finite_expr()
            choice = self.rng.random()
            if choice < 0.2:
                return self.pick(self.ARITH_LITERALS)
            if choice < 0.4:
                return self.convert()
            if choice < 0.65:
                return self.windowed()
            return self.float_expr(depth + 1)
        if self.fma and self.rng.random() < 0.15:       # drawn only with --fma: the other seeds stay as they were
            self.features.add("ffma")
            return f"canon(fmaf({operand()}, {operand()}, {operand()}))"
        # a division or a square root is ~170 machine ops (ROM overlays): 18% of the ops, the rest + - *
        choice = self.rng.random()
        if choice < 0.08:
            self.features.add("fdiv")
            # NaN-free: a divisor whose exponent is never zero (0 / 0 is the only NaN of finite operands)
            divisor = self.nonzero_expr() if nan_free else operand()
            return f"canon({operand()} / {divisor})"
        if choice < 0.12:
            self.features.add("frcp")
            return f"canon(1.0f / {self.nonzero_expr() if nan_free else operand()})"     # rcp.rn.f32
        if choice < 0.18:
            self.features.add("fsqrt")
            if self.rng.random() < 0.2:
                # an exact square (of a 12-bit integer, of 1.m with 11 bits of m, or a subnormal one: k * 2^-74
                # with k < 2^11, its square k^2 * 2^-148), or the float just above or below one
                word = self.pick([self.leaf(), "(unsigned)x[tid]", self.expr(3)])
                root = self.pick([f"(float)(({word}) & 0xfffu)",
                                  f"__uint_as_float((({word}) & 0x807ff000u) | 0x3f800000u)",
                                  f"((float)(({word}) & 0x7ffu) * __uint_as_float(0x1a800000u))"])
                square = f"canon({root} * {root})"
                if self.rng.random() < 0.5:
                    square = f"__uint_as_float(__float_as_uint({square}) + {self.pick(['1u', '0xffffffffu'])})"
                return f"canon(sqrtf({square}))"
            a = operand()
            # NaN-free (or half the time): of a magnitude, so that the root is a number
            return f"canon(sqrtf({f'fabsf({a})' if nan_free or self.rng.random() < 0.5 else a}))"
        op = self.pick(["+", "-", "*"])
        self.features.add({"+": "fadd", "-": "fsub", "*": "fmul"}[op])
        a, b = operand(), operand()
        return f"canon({a} {op} {b})"

    def nonzero_expr(self) -> str:
        """A float32 expression that is never zero, NaN nor infinite: a word in a window whose exponent is never 0,
        or a nonzero literal."""
        if self.rng.random() < 0.3:
            return self.pick(("1.0f", "(-1.0f)", "0.1f", "1.5f", "(-3.0f)", "1e-45f", "(-1e-45f)", "5.877472e-39f",
                              "3.4e38f", "16777216.0f", "8388608.5f"))
        mask, base = self.pick([w for w in self.WINDOWS if w[1] != "0x00000000u"])
        word = self.pick([self.leaf(), "(unsigned)x[tid]", "(unsigned)x[(tid + 1u) & 7u]", self.expr(3)])
        return f"__uint_as_float(({word} & {mask}) | {base})"

    def float_expr(self, depth: int, nan_free: bool = False) -> str:
        """A float32 expression: words read as floats, edge literals, and the float operations that do not round
        (with --arith also + - * and conversions from int / unsigned); ``nan_free``: one that is never a NaN (a word
        read as a float has its exponent's low bit cleared)."""
        if self.arith and self.arith_left > 0 and depth <= 3 and self.rng.random() < 0.45:
            return self.arith_expr(depth, nan_free)
        if self.arith and self.rng.random() < 0.15:
            return self.convert()
        if depth > 3 or self.rng.random() < 0.4:
            if nan_free:
                word = self.pick([self.leaf(), "(unsigned)x[tid]", self.expr(3)])
                return self.pick([f"__uint_as_float(({word}) & 0xff7fffffu)", self.pick(self.FLOAT_LITERALS)])
            return self.pick([f"__uint_as_float({self.leaf()})", self.pick(self.FLOAT_LITERALS + self.NAN_LITERALS),
                              "__uint_as_float((unsigned)x[tid])", f"__uint_as_float({self.expr(3)})"])
        f, g = self.float_expr(depth + 1, nan_free), self.float_expr(depth + 1, nan_free)
        h = self.float_expr(depth + 1, True)
        pair = self.pick([(f, h), (h, f)])
        return self.pick([f"(-{f})", f"fabsf({f})", f"copysignf({f}, {self.float_expr(depth + 1)})",
                          f"fmaxf({pair[0]}, {pair[1]})", f"fminf({pair[0]}, {pair[1]})",
                          f"(({self.expr(3)} & 1u) ? {f} : {g})", f"{self.pick(['truncf', 'floorf', 'ceilf'])}({f})"])

    SIMD_BINARY = ("vabsdiffs", "vabsdiffu", "vadd", "vaddss", "vaddus", "vavgs", "vavgu", "vhaddu", "vmaxs",
                   "vmaxu", "vmins", "vminu", "vsads", "vsadu", "vsub", "vsubss", "vsubus", "vcmpeq", "vcmpne",
                   "vcmplts", "vcmpltu", "vcmples", "vcmpleu", "vcmpgts", "vcmpgtu", "vcmpges", "vcmpgeu", "vseteq",
                   "vsetne", "vsetlts", "vsetltu", "vsetles", "vsetleu", "vsetgts", "vsetgtu", "vsetges", "vsetgeu")
    SIMD_UNARY = ("vabs", "vabsss", "vneg", "vnegss")

    def simd_use(self, a: str, b: str, c: str) -> str:
        """--simd: a SIMD intrinsic of two 16-bit or four 8-bit lanes, a DPX intrinsic (three-way and add-then min
        / max, .relu), a dot product of bytes, a funnel shift or a byte permute by any amount or selector."""
        choice = self.rng.random()
        if choice < 0.45:
            self.features.add("SIMD")
            lanes = self.pick(["2", "4"])
            if self.rng.random() < 0.15:
                return f"__{self.pick(self.SIMD_UNARY)}{lanes}({a})"
            return f"__{self.pick(self.SIMD_BINARY)}{lanes}({a}, {b})"
        if choice < 0.7:
            self.features.add("DPX")
            op, typ = self.pick(["max", "min"]), self.pick(["s32", "u32", "s16x2", "u16x2"])
            form = self.pick(["3", "add"] + (["relu", "3relu", "addrelu"] if typ[0] == "s" else []))
            name = {"3": f"__vi{op}3_{typ}", "add": f"__viadd{op}_{typ}", "relu": f"__vi{op}_{typ}_relu",
                    "3relu": f"__vi{op}3_{typ}_relu", "addrelu": f"__viadd{op}_{typ}_relu"}[form]
            cast = "(int)" if typ == "s32" else ""
            args = [f"{cast}{v}" for v in ((a, b) if form == "relu" else (a, b, c))]
            return f"(unsigned){name}({', '.join(args)})"
        if choice < 0.82:
            self.features.add("dot product")
            cast = self.pick(["(int)", ""])
            return self.pick([f"(unsigned)__dp4a({cast}{a}, {cast}{b}, {cast}{c})",
                              f"(unsigned)__dp2a_{self.pick(['lo', 'hi'])}({cast}{a}, {cast}{b}, {cast}{c})"])
        self.features.add("funnel shift / byte permute")
        return self.pick([f"__funnelshift_{self.pick(['l', 'r', 'lc', 'rc'])}({a}, {b}, {c})",
                          f"__byte_perm({a}, {b}, {c})"])

    def wide_expr(self, depth: int) -> str:
        """An unsigned long long expression: words widened (zero- or sign-extended), 64-bit arithmetic and shifts."""
        if depth > 3 or self.rng.random() < 0.35:
            if self.pairs and self.rng.random() < 0.3:     # x's words two at a time, as 64-bit values
                self.features.add("64-bit load")
                kind = self.pick(["unsigned long long", "long long"])
                return f"(unsigned long long)((const {kind} *)x)[{self.expr(3)} & 3u]"
            return self.pick([f"(unsigned long long){self.expr(3)}", f"(unsigned long long)(int){self.expr(3)}",
                              f"{int(self.rng.integers(0, 1 << 63))}ull", "(unsigned long long)tid"])
        a, b = self.wide_expr(depth + 1), self.wide_expr(depth + 1)
        return self.pick([f"({a} + {b})", f"({a} - {b})", f"({a} * {b})", f"({a} & {b})", f"({a} | {b})",
                          f"({a} ^ {b})", f"(~{a})", f"({a} << ({self.expr(3)} & 63u))",
                          f"({a} >> {int(self.rng.integers(0, 64))})", f"({a} >> ({self.expr(3)} & 63u))",
                          f"({self.expr(3)} & 1u ? {a} : {b})"])

    def wide_use(self, depth: int) -> str:
        """An unsigned expression of 64-bit values: the low word, a shifted-down word, or a comparison."""
        a, b = self.wide_expr(depth), self.wide_expr(depth)
        cmp = self.pick(["<", "<=", ">", ">=", "==", "!="])
        if self.bits and self.rng.random() < 0.25:
            self.features.add("64-bit bit count")
            return self.pick([f"(unsigned)__popcll({a})", f"(unsigned)__clzll((long long)({a}))",
                              f"(unsigned)__ffsll((long long)({a}))",
                              f"(unsigned)(__brevll({a}) >> {int(self.rng.integers(0, 64))})"])
        if self.pairs and self.rng.random() < 0.2:      # (float) of 64 bits, to nearest: its bits
            self.features.add("(float) of 64 bits")
            return self.pick([f"__float_as_uint((float)({a}))", f"__float_as_uint((float)(long long)({a}))"])
        return self.pick([f"(unsigned)({a})", f"(unsigned)({a} >> {int(self.rng.integers(1, 64))})",
                          f"(unsigned)({a} {cmp} {b})", f"(unsigned)((long long)({a}) {cmp} (long long)({b}))",
                          f"(unsigned)(({a}) % {int(self.rng.integers(1, 20))}ull)"])

    def float_use(self, depth: int) -> str:
        """An unsigned expression of float32 values: a comparison, a class, or the bits."""
        if self.arith:
            self.arith_left = 3     # float arithmetic ops in this use's expressions: an add is ~60 machine ops
            if self.rng.random() < 0.3:
                return f"__float_as_uint({self.float_expr(depth)})"     # the bits, most often
        f, g = self.float_expr(depth), self.float_expr(depth)
        cmp = self.pick(["<", "<=", ">", ">=", "==", "!="])
        # (int) / (unsigned) of a float out of range is undefined in C, which NVRTC's compiler may use: the fuzzer
        # converts clamped values (tests/test_floats.py checks PTX's saturation and NaN -> 0 on loaded values).
        uses = [f"__float_as_uint({f})", f"(unsigned)({f} {cmp} {g})", f"(unsigned)!({f} {cmp} {g})",
                f"(unsigned)({self.pick(['isnan', 'isinf', 'isfinite', 'signbit'])}({f}) != 0)",
                f"(unsigned)(int)fminf(fmaxf({f}, -2.0e9f), 2.0e9f)", f"(unsigned)fminf(fmaxf({f}, 0.0f), 4.0e9f)"]
        if self.wide:   # with --wide also to 64 bits, whose low word the machine keeps (cvt.rzi / rni .s64 / u64)
            clamped = f"fminf(fmaxf({f}, -9.0e18f), 9.0e18f)"
            wide = [f"(unsigned)(long long){clamped}", f"(unsigned)llrintf({clamped})",
                    f"(unsigned)(unsigned long long)fminf(fmaxf({f}, 0.0f), 1.8e19f)"]
            if self.rng.random() < 3 / (len(uses) + 3):
                self.features.add("cvt.to64")
                return self.pick(wide)
        return self.pick(uses)

    def statement(self, depth: int = 0) -> str:
        kind = int(self.rng.integers(13 + 3 * self.counters))
        var = self.pick(["v0", "v1", "v2", "v3"])
        if kind >= 13:
            return self.counter_loop(var, depth) if depth < 2 else f"{var} = {self.expr()};"
        if depth < 2 and kind >= 10:
            # A divergent loop: the trip count differs across lanes; break / continue on lane data.
            self.loops += 1
            j = f"j{self.loops}"
            bound = f"({self.expr(1)} & {self.pick(['3u', '7u'])})"
            inner = self.statement(depth + 1)
            if kind == 10:
                return f"for (unsigned {j} = 0u; {j} < {bound}; {j}++) {{ {inner} }}"
            if kind == 11:
                return (f"for (unsigned {j} = 0u; {j} < {bound}; {j}++) {{ if (({self.expr(2)} & 3u) == 1u) "
                        f"{self.pick(['break;', 'continue;'])} {inner} }}")
            return (f"{{ unsigned {j} = {bound}; while ({j} != 0u) {{ {inner} if (({var} & 5u) == 4u) break; "
                    f"{j}--; }} }}")
        if depth < 2 and kind == 0:
            return (f"if ({self.expr(1)} {self.pick(['<', '>', '==', '!='])} {self.expr(1)}) {{ "
                    f"{self.statement(depth + 1)} }} else {{ {self.statement(depth + 1)} }}")
        if depth < 2 and kind == 1:
            return f"if ({self.expr(1)} & 1u) {{ {self.statement(depth + 1)} }}"
        if depth < 1 and kind == 2:
            n = int(self.rng.integers(1, 4))
            self.loops += 1
            return f"for (int j{self.loops} = 0; j{self.loops} < {n}; j{self.loops}++) {{ {self.statement(depth + 1)} }}"
        return f"{var} = {self.expr()};"

    def counter_loop(self, var: str, depth: int) -> str:
        """A loop over an unsigned long long counter from a word to a word bound (qwengpu.lowering.counters):
        ``<`` or ``<=``, or two bounds; a step of 2^30 or more, so that the last trip's sum often passes 2^32 - 1
        and the loop ends after at most 5 trips, or a step of 1 (``j++``) or of 1 to 4 below a bound at most 15
        past the start.
        The counter is read in the body (its low word, shifted down, compared) and, in a quarter of the loops,
        after the loop (which the machine refuses: the counter may be past 2^32 - 1 there)."""
        self.loops += 1
        self.features.add("counter loop")
        j, start = f"j{self.loops}", f"(unsigned long long){self.expr(1)}"
        end = ""
        if self.rng.random() < 0.5:
            step = f"((unsigned long long)({self.expr(2)}) | 0x40000000ull)"
            cond = self.pick([f"{j} < (unsigned long long){self.expr(1)}", f"{j} <= (unsigned long long){self.expr(1)}",
                              f"{j} < (unsigned long long){self.expr(1)} && {j} < (unsigned long long){self.expr(1)}"])
        else:
            # the bound fixed before the loop: one the body moves could keep a small step going for millions of trips
            # j++ (NVRTC unrolls it by four, its exit a 64-bit sum compared with 0) or a step of 1 to 4
            step = self.pick(["1ull", f"(unsigned long long)(({self.expr(2)} & 3u) + 1u)"])
            end = f", {j}e = (unsigned long long)((unsigned){start} + ({self.expr(1)} & 15u))"
            cond = f"{j} < {j}e"
        use = self.pick([f"{var} += (unsigned){j};", f"{var} ^= (unsigned)({j} >> 3);",
                         f"{var} = {var} * 3u + (unsigned)({j} > (unsigned long long){self.expr(1)});"])
        loop = f"for ({j} = {start}; {cond}; {j} += {step}) {{ {use} {self.statement(depth + 1)} }}"
        after = f" {var} ^= (unsigned){j};" if self.rng.random() < 0.25 else ""
        return f"{{ unsigned long long {j}{end}; {loop}{after} }}"

    DOUBLE_LITERALS = ("0.0", "(-0.0)", "1.5", "(-2.5)", "0.1", "1e300", "(-1e-310)", "5e-324", "1.7976931348623157e308",
                       "__longlong_as_double(0x7ff0000000000000ll)", "3.0")

    def double_expr(self, depth: int = 0) -> str:
        """A double expression: leaves of every kind, at most ``double_left`` arithmetic ops (each is hundreds of
        machine ops); every result that may be a NaN made the canonical NaN (canon64)."""
        if depth > 2 or self.double_left <= 0 or self.rng.random() < 0.3:
            leaves = [f"((const double *)x)[{self.expr(2)} & 3u]", f"(double)(int){self.expr(2)}",
                      f"(double){self.expr(2)}", f"(double)__uint_as_float({self.expr(2)})",
                      self.pick(self.DOUBLE_LITERALS)]
            if self.pairs:      # (with --pairs only, so that --doubles alone draws the programs it drew before)
                leaves += [f"(double)(long long)(((unsigned long long){self.expr(2)} << 32) | {self.expr(2)})",
                           f"(double)(((unsigned long long){self.expr(2)} << {self.pick([11, 40])}) + {self.expr(2)})"]
            leaf = self.pick(leaves)
            if "long long" in leaf:
                self.features.add("dlong")
            return leaf
        self.double_left -= 1
        a, b = self.double_expr(depth + 1), self.double_expr(depth + 1)
        op = self.pick(["+", "-", "*", "/", "sqrt", "dmin", "dmax", "floor", "-", "fabs"])
        self.features.add({"+": "dadd", "-": "dsub", "*": "dmul", "/": "ddiv", "sqrt": "dsqrt"}.get(op, "double"))
        if op in "+-*/":
            return f"canon64({a} {op} {b})"
        if op in ("dmin", "dmax"):
            return f"{op}({a}, {b})"
        return f"canon64({op}({a}))" if op != "-" else f"(-{a})"

    def double_use(self) -> str:
        """An unsigned expression of a double: its bits (a NaN canonical), (float) of it, a compare, (int) of it
        clamped (C leaves an int out of range undefined)."""
        self.double_left = 3
        d, e = self.double_expr(), self.double_expr()
        cmp = self.pick(["<", "<=", ">", ">=", "==", "!="])
        return self.pick([f"(unsigned)(__double_as_longlong(canon64({d})) >> {self.pick([0, 32, 20])})",
                          f"__float_as_uint(canon((float)({d})))", f"(unsigned)({d} {cmp} {e})",
                          f"(unsigned)(int)dmin(dmax({d}, -2.0e9), 2.0e9)"])

    def body(self) -> str:
        lines = ["unsigned v0 = tid, v1 = (unsigned)s0, v2 = (unsigned)x[tid], v3 = 0u;"]
        lines += [self.statement() for _ in range(int(self.rng.integers(1, 5)))]
        if self.doubles and self.rng.random() < 0.5:
            # the program's end, unpredicated: a double expression's long sequences lower fast there
            lines.append(f"out[tid] = (int)({self.double_use()});")
        elif self.arith and self.rng.random() < 0.5:
            # the bits of a float expression straight to out[], so that a wrong rounding shows
            self.arith_left = 3
            lines.append(f"out[tid] = (int)__float_as_uint({self.float_expr(1)});")
        else:
            lines.append(f"out[tid] = (int)({self.expr(1)});")
        return " ".join(lines)


    def phases(self) -> tuple[str, ...]:
        """A block program: sh[tid] filled, a barrier, maybe shared atomics and a second barrier, then reads of any
        thread's word."""
        first = ["unsigned v0 = tid, v1 = (unsigned)s0, v2 = (unsigned)x[tid], v3 = 0u;"]
        first += [self.statement() for _ in range(int(self.rng.integers(0, 3)))]
        first.append(f"sh[tid] = {self.expr(1)};")
        phases = [" ".join(first)]
        if self.rng.random() < (0.8 if self.bits and self.atomics else 0.4):
            # The atomics' condition, index and value read no shared word: other threads are adding to them (a
            # race on a GPU too).
            if not self.atomics:
                phases.append(f"if ({self.expr(2)} & 1u) atomicAdd(&sh[{self.expr(2)} % NT], {self.expr(2)});")
            elif self.bits and self.rng.random() < 0.75:
                # sh as four unsigned long long (NT / 2 of them used: every block program has 5 to 8 threads)
                fn = self.pick(["add", "and", "or", "xor", "exch", "cas", "min", "max", "min_s", "max_s"])
                self.features.add("64-bit atomic")
                args = f"{self.wide_expr(2)}, {self.wide_expr(2)}" if fn == "cas" else self.wide_expr(2)
                var = self.pick(["v0", "v1", "v2", "v3"])
                shift = self.pick([0, 32, int(self.rng.integers(1, 64))])
                phases.append(f"if ({self.expr(2)} & 1u) {var} = (unsigned)(atomic64_{fn}((unsigned long long *)sh "
                              f"+ {self.expr(2)} % (NT / 2u), {args}) >> {shift});")
            elif self.arith and self.rng.random() < 0.4:
                # A float atomicAdd on sh's words, its old value kept (the machine's compare-and-swap loop, cut into
                # overlays: warps that come to it after the barrier add in thread order, the C reference's)
                self.features.add("float atomicAdd")
                var = self.pick(["v0", "v1", "v2", "v3"])
                phases.append(f"if ({self.expr(2)} & 1u) {var} = atomic_fadd(&sh[{self.expr(2)} % NT], "
                              f"{self.expr(2)});")
            else:
                # Every atomic, its old value kept: the machine's order (warps in turn, lanes in order) is the C
                # reference's thread order.
                fn = self.pick(["atomicAdd", "atomicMin", "atomicMax", "atomicAnd", "atomicOr", "atomicXor",
                                "atomicExch", "atomicCAS", "atomicInc", "atomicDec"])
                args = f"{self.expr(2)}, {self.expr(2)}" if fn == "atomicCAS" else self.expr(2)
                var = self.pick(["v0", "v1", "v2", "v3"])
                phases.append(f"if ({self.expr(2)} & 1u) {var} = {fn}(&sh[{self.expr(2)} % NT], {args});")
        self.shared = True
        last = [self.statement() for _ in range(int(self.rng.integers(1, 3)))]
        last.append(f"out[tid] = (int)({self.expr(1)});")
        phases.append(" ".join(last))
        return tuple(phases)


# --arith: a float arithmetic result's NaN is made the canonical NaN (setp.nan and selp on the GPU), so what is
# compared is the value, not a payload that the compilers leave open.
CUDA_CANON = "__device__ __forceinline__ float canon(float f) { return f != f ? __int_as_float(0x7fffffff) : f; }\n"


# --bits --atomics: the 64-bit atomics under names of their own, which the C reference defines too.
CUDA_ATOMICS64 = "".join(
    f"__device__ __forceinline__ unsigned long long atomic64_{name}(unsigned long long *p, {params}) "
    f"{{ return (unsigned long long){call}; }}\n" for name, params, call in [
        ("add", "unsigned long long v", "atomicAdd(p, v)"), ("and", "unsigned long long v", "atomicAnd(p, v)"),
        ("or", "unsigned long long v", "atomicOr(p, v)"), ("xor", "unsigned long long v", "atomicXor(p, v)"),
        ("exch", "unsigned long long v", "atomicExch(p, v)"),
        ("cas", "unsigned long long c, unsigned long long v", "atomicCAS(p, c, v)"),
        ("min", "unsigned long long v", "atomicMin(p, v)"), ("max", "unsigned long long v", "atomicMax(p, v)"),
        ("min_s", "unsigned long long v", "atomicMin((long long *)p, (long long)v)"),
        ("max_s", "unsigned long long v", "atomicMax((long long *)p, (long long)v)")])


# --arith --atomics: a float atomicAdd on a word of sh, as bits; the C reference adds in float32 (shared memory
# keeps subnormals) and writes a NaN sum as the canonical NaN, as the GPU and the machine do.
CUDA_FADD = ("__device__ __forceinline__ unsigned atomic_fadd(unsigned *p, unsigned v) "
             "{ return __float_as_uint(atomicAdd((float *)p, __uint_as_float(v))); }\n")


# --doubles: a NaN double the canonical one (0x7fffffffffffffff, as the machine writes it), PTX's min / max.f64.
CUDA_DOUBLES = ("__device__ __forceinline__ double canon64(double d) "
                "{ return d != d ? __longlong_as_double(0x7fffffffffffffffll) : d; }\n"
                "__device__ __forceinline__ double dmin(double a, double b) { return fmin(a, b); }\n"
                "__device__ __forceinline__ double dmax(double a, double b) { return fmax(a, b); }\n")


def cuda_source(body: str, phases: tuple[str, ...] = (), functions: tuple[str, ...] = ()) -> str:
    text = body + "".join(phases) + "".join(functions)
    prelude = CUDA_CANON if "canon(" in text else ""
    prelude += CUDA_DOUBLES if "canon64(" in text or "dmin(" in text else ""
    prelude += CUDA_ATOMICS64 if "atomic64_" in text else ""
    prelude += CUDA_FADD if "atomic_fadd(" in text else ""
    prelude += "".join(f"__device__ __noinline__ {f}\n" for f in functions)
    if phases:
        # aligned for the 64-bit atomics (a GPU's 64-bit access needs an address of 8 bytes' alignment)
        align = "__align__(8) " if "atomic64_" in text else ""
        return (prelude + '#define NT blockDim.x\n'
                'extern "C" __global__ void k(int *out, const int *x, int s0, int s1) {\n'
                f'  __shared__ {align}unsigned sh[8];\n  const unsigned tid = threadIdx.x;\n  '
                + "\n  __syncthreads();\n  ".join(phases) + "\n}\n")
    return (prelude + 'extern "C" __global__ void k(int *out, const int *x, int s0, int s1) {\n'
            '  const unsigned tid = threadIdx.x;\n  ' + body + "\n}\n")


C_PRELUDE = """#include <stdio.h>
#include <stdlib.h>
static unsigned min_u(unsigned a, unsigned b) { return a < b ? a : b; }
static unsigned max_u(unsigned a, unsigned b) { return a > b ? a : b; }
static int min_i(int a, int b) { return a < b ? a : b; }
static int max_i(int a, int b) { return a > b ? a : b; }
#define min(a, b) _Generic((a), int: min_i, default: min_u)(a, b)
#define max(a, b) _Generic((a), int: max_i, default: max_u)(a, b)
"""


# float32 in the C reference: gcc's IEEE single precision (x86-64 SSE); fmaxf / fminf from PTX's definition (C
# leaves the zero signs and the NaN open), the bit casts through memcpy.
C_FLOATS = """#include <math.h>
#include <string.h>
static float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static float ptx_max(float a, float b, int is_max) {
  if (isnan(a) && isnan(b)) return __uint_as_float(0x7fffffffu);
  if (isnan(a)) return b;
  if (isnan(b)) return a;
  if (a == 0.0f && b == 0.0f) return (signbit(a) != 0) == is_max ? b : a;      /* -0 below +0 */
  return (is_max ? a > b : a < b) ? a : b; }
#define fmaxf(a, b) ptx_max((a), (b), 1)
#define fminf(a, b) ptx_max((a), (b), 0)
static float ptx_canonical(float f) { return isnan(f) ? __uint_as_float(0x7fffffffu) : f; }
#define truncf(a) ptx_canonical(truncf(a))
#define floorf(a) ptx_canonical(floorf(a))
#define ceilf(a) ptx_canonical(ceilf(a))
#define canon(a) ptx_canonical(a)
"""


C_ATOMICS = """static unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
static unsigned atomicMin(unsigned *p, unsigned v) { unsigned o = *p; *p = o < v ? o : v; return o; }
static unsigned atomicMax(unsigned *p, unsigned v) { unsigned o = *p; *p = o > v ? o : v; return o; }
static unsigned atomicAnd(unsigned *p, unsigned v) { unsigned o = *p; *p = o & v; return o; }
static unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p = o | v; return o; }
static unsigned atomicXor(unsigned *p, unsigned v) { unsigned o = *p; *p = o ^ v; return o; }
static unsigned atomicExch(unsigned *p, unsigned v) { unsigned o = *p; *p = v; return o; }
static unsigned atomicCAS(unsigned *p, unsigned c, unsigned v) { unsigned o = *p; if (o == c) *p = v; return o; }
static unsigned atomicInc(unsigned *p, unsigned v) { unsigned o = *p; *p = o >= v ? 0u : o + 1u; return o; }
static unsigned atomic_fadd(unsigned *p, unsigned v) {
  unsigned o = *p; *p = __float_as_uint(ptx_canonical(__uint_as_float(o) + __uint_as_float(v))); return o; }
static unsigned atomicDec(unsigned *p, unsigned v) {
  unsigned o = *p; *p = (o == 0u || o > v) ? v : o - 1u; return o; }
typedef unsigned long long u64;
static u64 atomic64_add(u64 *p, u64 v) { u64 o = *p; *p = o + v; return o; }
static u64 atomic64_and(u64 *p, u64 v) { u64 o = *p; *p = o & v; return o; }
static u64 atomic64_or(u64 *p, u64 v) { u64 o = *p; *p = o | v; return o; }
static u64 atomic64_xor(u64 *p, u64 v) { u64 o = *p; *p = o ^ v; return o; }
static u64 atomic64_exch(u64 *p, u64 v) { u64 o = *p; *p = v; return o; }
static u64 atomic64_cas(u64 *p, u64 c, u64 v) { u64 o = *p; if (o == c) *p = v; return o; }
static u64 atomic64_min(u64 *p, u64 v) { u64 o = *p; *p = o < v ? o : v; return o; }
static u64 atomic64_max(u64 *p, u64 v) { u64 o = *p; *p = o > v ? o : v; return o; }
static u64 atomic64_min_s(u64 *p, u64 v) { u64 o = *p; *p = (long long)o < (long long)v ? o : v; return o; }
static u64 atomic64_max_s(u64 *p, u64 v) { u64 o = *p; *p = (long long)o > (long long)v ? o : v; return o; }
"""


# --doubles: gcc's IEEE binary64; the bit casts through memcpy, PTX's min / max.f64 (a NaN operand ignored, two NaNs
# the canonical NaN, -0 below +0), a NaN made the canonical one.
C_DOUBLES = """static double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
static long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static double canon64(double d) { return isnan(d) ? __longlong_as_double(0x7fffffffffffffffll) : d; }
static double ptx_dmax(double a, double b, int is_max) {
  if (isnan(a) && isnan(b)) return __longlong_as_double(0x7fffffffffffffffll);
  if (isnan(a)) return b;
  if (isnan(b)) return a;
  if (a == 0.0 && b == 0.0) return (signbit(a) != 0) == is_max ? b : a;
  return (is_max ? a > b : a < b) ? a : b; }
#define dmax(a, b) ptx_dmax((a), (b), 1)
#define dmin(a, b) ptx_dmax((a), (b), 0)
"""


# --bits: CUDA's 64-bit bit counts, from gcc's builtins (clz and ffs of 0 as CUDA defines them: 64 and 0).
C_BITS = """static int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static int __ffsll(long long x) { return __builtin_ffsll(x); }
static unsigned long long __brevll(unsigned long long x) {
  unsigned long long r = 0; int i; for (i = 0; i < 64; i++) r |= ((x >> i) & 1ull) << (63 - i); return r; }
"""


# --simd: CUDA's SIMD and DPX intrinsics, dot products, funnel shifts and byte permutes, from the CUDA Math API's
# definitions: each lane of 16 or 8 bits signed or unsigned, results wrapped or saturated into the lane; a signed
# rounded average rounds a half away from zero.
C_SIMD = """static int lane_s(unsigned w, int i, int bits) {
  int v = (int)((w >> (bits * i)) & ((1u << bits) - 1)); return v >= (1 << (bits - 1)) ? v - (1 << bits) : v; }
static int lane_u(unsigned w, int i, int bits) { return (int)((w >> (bits * i)) & ((1u << bits) - 1)); }
static int clamp_i(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
enum { ADD, SUB, ADDSS, ADDUS, SUBSS, SUBUS, ABSDIFFS, ABSDIFFU, AVGS, AVGU, HADDU, MAXS, MAXU, MINS, MINU,
       EQ, NE, LTS, LTU, LES, LEU, GTS, GTU, GES, GEU, ABS, ABSSS, NEG, NEGSS };
static unsigned simd(unsigned a, unsigned b, int bits, int op, int all_ones) {
  unsigned r = 0; int i, m = (1 << bits) - 1, lo = -(1 << (bits - 1)), hi = (1 << (bits - 1)) - 1, t = 0;
  for (i = 0; i < 32 / bits; i++) {
    int sa = lane_s(a, i, bits), sb = lane_s(b, i, bits), ua = lane_u(a, i, bits), ub = lane_u(b, i, bits), v = 0;
    switch (op) {
    case ADD: v = ua + ub; break;                 case SUB: v = ua - ub; break;
    case ADDSS: v = clamp_i(sa + sb, lo, hi); break;  case ADDUS: v = clamp_i(ua + ub, 0, m); break;
    case SUBSS: v = clamp_i(sa - sb, lo, hi); break;  case SUBUS: v = clamp_i(ua - ub, 0, m); break;
    case ABSDIFFS: v = abs(sa - sb); break;       case ABSDIFFU: v = abs(ua - ub); break;
    case AVGS: v = (sa + sb + (sa + sb >= 0 ? 1 : -1)) / 2; break;
    case AVGU: v = (ua + ub + 1) >> 1; break;     case HADDU: v = (ua + ub) >> 1; break;
    case MAXS: v = sa > sb ? sa : sb; break;      case MAXU: v = ua > ub ? ua : ub; break;
    case MINS: v = sa < sb ? sa : sb; break;      case MINU: v = ua < ub ? ua : ub; break;
    case EQ: t = ua == ub; break;  case NE: t = ua != ub; break;
    case LTS: t = sa < sb; break;  case LTU: t = ua < ub; break;  case LES: t = sa <= sb; break;
    case LEU: t = ua <= ub; break; case GTS: t = sa > sb; break;  case GTU: t = ua > ub; break;
    case GES: t = sa >= sb; break; case GEU: t = ua >= ub; break;
    case ABS: v = abs(sa); break;  case ABSSS: v = clamp_i(abs(sa), lo, hi); break;
    case NEG: v = -sa; break;      case NEGSS: v = clamp_i(-sa, lo, hi); break; }
    if (op >= EQ && op <= GEU) v = t ? (all_ones ? -1 : 1) : 0;
    r |= (unsigned)(v & m) << (bits * i); }
  return r; }
static unsigned sad(unsigned a, unsigned b, int bits, int is_signed) {
  unsigned r = 0; int i;
  for (i = 0; i < 32 / bits; i++)
    r += is_signed ? abs(lane_s(a, i, bits) - lane_s(b, i, bits)) : abs(lane_u(a, i, bits) - lane_u(b, i, bits));
  return r; }
#define SIMD_PAIR(name, op, ones) \
  static unsigned __##name##2(unsigned a, unsigned b) { return simd(a, b, 16, op, ones); } \
  static unsigned __##name##4(unsigned a, unsigned b) { return simd(a, b, 8, op, ones); }
#define SIMD_ONE(name, op) \
  static unsigned __##name##2(unsigned a) { return simd(a, 0, 16, op, 0); } \
  static unsigned __##name##4(unsigned a) { return simd(a, 0, 8, op, 0); }
SIMD_PAIR(vadd, ADD, 0) SIMD_PAIR(vsub, SUB, 0) SIMD_PAIR(vaddss, ADDSS, 0) SIMD_PAIR(vaddus, ADDUS, 0)
SIMD_PAIR(vsubss, SUBSS, 0) SIMD_PAIR(vsubus, SUBUS, 0) SIMD_PAIR(vabsdiffs, ABSDIFFS, 0)
SIMD_PAIR(vabsdiffu, ABSDIFFU, 0) SIMD_PAIR(vavgs, AVGS, 0) SIMD_PAIR(vavgu, AVGU, 0) SIMD_PAIR(vhaddu, HADDU, 0)
SIMD_PAIR(vmaxs, MAXS, 0) SIMD_PAIR(vmaxu, MAXU, 0) SIMD_PAIR(vmins, MINS, 0) SIMD_PAIR(vminu, MINU, 0)
SIMD_PAIR(vcmpeq, EQ, 1) SIMD_PAIR(vcmpne, NE, 1) SIMD_PAIR(vcmplts, LTS, 1) SIMD_PAIR(vcmpltu, LTU, 1)
SIMD_PAIR(vcmples, LES, 1) SIMD_PAIR(vcmpleu, LEU, 1) SIMD_PAIR(vcmpgts, GTS, 1) SIMD_PAIR(vcmpgtu, GTU, 1)
SIMD_PAIR(vcmpges, GES, 1) SIMD_PAIR(vcmpgeu, GEU, 1) SIMD_PAIR(vseteq, EQ, 0) SIMD_PAIR(vsetne, NE, 0)
SIMD_PAIR(vsetlts, LTS, 0) SIMD_PAIR(vsetltu, LTU, 0) SIMD_PAIR(vsetles, LES, 0) SIMD_PAIR(vsetleu, LEU, 0)
SIMD_PAIR(vsetgts, GTS, 0) SIMD_PAIR(vsetgtu, GTU, 0) SIMD_PAIR(vsetges, GES, 0) SIMD_PAIR(vsetgeu, GEU, 0)
SIMD_ONE(vabs, ABS) SIMD_ONE(vabsss, ABSSS) SIMD_ONE(vneg, NEG) SIMD_ONE(vnegss, NEGSS)
static unsigned __vsads2(unsigned a, unsigned b) { return sad(a, b, 16, 1); }
static unsigned __vsads4(unsigned a, unsigned b) { return sad(a, b, 8, 1); }
static unsigned __vsadu2(unsigned a, unsigned b) { return sad(a, b, 16, 0); }
static unsigned __vsadu4(unsigned a, unsigned b) { return sad(a, b, 8, 0); }
/* DPX: each lane (one of 32 bits, or two of 16) a max / min of three, or of a + b (wrapped in the lane) and c,
   with .relu a negative result 0 */
static unsigned dpx(unsigned a, unsigned b, unsigned c, int bits, int is_signed, int is_max, int add, int relu,
                    int three) {
  unsigned r = 0; int i; unsigned m = bits == 32 ? 0xffffffffu : 0xffffu;
  for (i = 0; i < 32 / bits; i++) {
    long long x = (a >> (bits * i)) & m, y = (b >> (bits * i)) & m, z = (c >> (bits * i)) & m, v;
    if (add) { x = (x + y) & m; }
    if (is_signed) { long long h = (long long)m + 1; x = x > (long long)(m >> 1) ? x - h : x;
                     y = y > (long long)(m >> 1) ? y - h : y; z = z > (long long)(m >> 1) ? z - h : z; }
    if (add) v = is_max ? (x > z ? x : z) : (x < z ? x : z);
    else { v = is_max ? (x > y ? x : y) : (x < y ? x : y); if (three) v = is_max ? (v > z ? v : z) : (v < z ? v : z); }
    if (relu && v < 0) v = 0;
    r |= (unsigned)(v & m) << (bits * i); }
  return r; }
#define DPX_OPS(op, M) \
  static int __vi##op##3_s32(int a, int b, int c) { return (int)dpx(a, b, c, 32, 1, M, 0, 0, 1); } \
  static unsigned __vi##op##3_u32(unsigned a, unsigned b, unsigned c) { return dpx(a, b, c, 32, 0, M, 0, 0, 1); } \
  static unsigned __vi##op##3_s16x2(unsigned a, unsigned b, unsigned c) { return dpx(a, b, c, 16, 1, M, 0, 0, 1); } \
  static unsigned __vi##op##3_u16x2(unsigned a, unsigned b, unsigned c) { return dpx(a, b, c, 16, 0, M, 0, 0, 1); } \
  static int __viadd##op##_s32(int a, int b, int c) { return (int)dpx(a, b, c, 32, 1, M, 1, 0, 0); } \
  static unsigned __viadd##op##_u32(unsigned a, unsigned b, unsigned c) { return dpx(a, b, c, 32, 0, M, 1, 0, 0); } \
  static unsigned __viadd##op##_s16x2(unsigned a, unsigned b, unsigned c) { return dpx(a, b, c, 16, 1, M, 1, 0, 0); } \
  static unsigned __viadd##op##_u16x2(unsigned a, unsigned b, unsigned c) { return dpx(a, b, c, 16, 0, M, 1, 0, 0); } \
  static int __vi##op##_s32_relu(int a, int b) { return (int)dpx(a, b, 0, 32, 1, M, 0, 1, 0); } \
  static unsigned __vi##op##_s16x2_relu(unsigned a, unsigned b) { return dpx(a, b, 0, 16, 1, M, 0, 1, 0); } \
  static int __vi##op##3_s32_relu(int a, int b, int c) { return (int)dpx(a, b, c, 32, 1, M, 0, 1, 1); } \
  static unsigned __vi##op##3_s16x2_relu(unsigned a, unsigned b, unsigned c) { \
    return dpx(a, b, c, 16, 1, M, 0, 1, 1); } \
  static int __viadd##op##_s32_relu(int a, int b, int c) { return (int)dpx(a, b, c, 32, 1, M, 1, 1, 0); } \
  static unsigned __viadd##op##_s16x2_relu(unsigned a, unsigned b, unsigned c) { \
    return dpx(a, b, c, 16, 1, M, 1, 1, 0); }
DPX_OPS(max, 1) DPX_OPS(min, 0)
/* byte dot products: signed or unsigned as the arguments' type (int or unsigned: _Generic on the first) */
static unsigned dot(unsigned a, unsigned b, unsigned c, int is_signed, int a_bits, int first) {
  unsigned r = c; int i;
  for (i = 0; i < (a_bits == 8 ? 4 : 2); i++) {
    long long x = is_signed ? lane_s(a, i, a_bits) : lane_u(a, i, a_bits);
    long long y = is_signed ? lane_s(b, first + i, 8) : lane_u(b, first + i, 8);
    r += (unsigned)(x * y); }
  return r; }
#define __dp4a(a, b, c) _Generic((a), int: dot((a), (b), (c), 1, 8, 0), default: dot((a), (b), (c), 0, 8, 0))
#define __dp2a_lo(a, b, c) _Generic((a), int: dot((a), (b), (c), 1, 16, 0), default: dot((a), (b), (c), 0, 16, 0))
#define __dp2a_hi(a, b, c) _Generic((a), int: dot((a), (b), (c), 1, 16, 2), default: dot((a), (b), (c), 0, 16, 2))
static unsigned funnel(unsigned lo, unsigned hi, unsigned n, int left) {
  unsigned long long w = (unsigned long long)hi << 32 | lo;
  return left ? (unsigned)((w << n) >> 32) : (unsigned)(w >> n); }
static unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned n) { return funnel(lo, hi, n & 31u, 1); }
static unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned n) { return funnel(lo, hi, n & 31u, 0); }
static unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned n) { return n >= 32u ? lo : funnel(lo, hi, n, 1); }
static unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned n) { return n >= 32u ? hi : funnel(lo, hi, n, 0); }
static unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long w = (unsigned long long)y << 32 | x; unsigned r = 0; int i;
  for (i = 0; i < 4; i++) r |= (unsigned)((w >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r; }
"""


def c_reference(cases: list[Case], workdir: str) -> list[list[int]]:
    """Every case's out[] computed by the host C compiler, threads one after another."""
    parts = [C_PRELUDE, C_FLOATS, C_ATOMICS, C_BITS, C_DOUBLES, C_SIMD]
    keep = "V[tid][0] = v0; V[tid][1] = v1; V[tid][2] = v2; V[tid][3] = v3;"
    restore = "unsigned v0 = V[tid][0], v1 = V[tid][1], v2 = V[tid][2], v3 = V[tid][3];"
    for i, case in enumerate(cases):
        # --calls: each case's functions, named apart from the other cases' (f0 -> c3_f0)
        def own(text: str, i=i) -> str:
            return re.sub(r"\bf(\d+)\(", rf"c{i}_f\1(", text)
        parts += [f"static {own(f)}\n" for f in case.functions]
        case = Case(own(case.body), case.threads, case.s0, case.s1, case.x, case.out,
                    tuple(own(p) for p in case.phases))
        if not case.phases:
            parts.append(f"static void p{i}(unsigned tid, int *out, const int *x, int s0, int s1) {{ {case.body} }}\n")
            continue
        # A block program: one C function per phase; a thread's variables live in V between its phases.
        for k, phase in enumerate(case.phases):
            enter = "" if k == 0 else restore
            leave = keep if k < len(case.phases) - 1 else ""
            parts.append(f"static void p{i}_{k}(unsigned tid, int *out, const int *x, int s0, int s1, unsigned NT, "
                         f"unsigned *sh, unsigned (*V)[4]) {{ {enter} {phase} {leave} }}\n")
    parts.append("int main(void) { int out[16]; int x[8]; int s0, s1, t; unsigned n; _Alignas(8) unsigned sh[8]; "
                 "unsigned V[8][4];\n")
    for i, case in enumerate(cases):
        if case.phases:
            runs = "".join(f"    for (n = 0; n < {case.threads}u; n++) p{i}_{k}(n, out, x, {case.s0}, {case.s1}, "
                           f"{case.threads}u, sh, V);\n" for k in range(len(case.phases)))
        else:
            runs = f"    for (n = 0; n < {case.threads}u; n++) p{i}(n, out, x, {case.s0}, {case.s1});\n"
        xs = ", ".join(str(int(v)) for v in case.x)
        outs = ", ".join(str(int(v)) for v in case.out)
        parts.append(f"  {{ int xi[8] = {{{xs}}}; int oi[{len(case.out)}] = {{{outs}}};\n"
                     f"    for (t = 0; t < 8; t++) x[t] = xi[t];\n"
                     f"    for (t = 0; t < {len(case.out)}; t++) out[t] = oi[t];\n"
                     + runs +
                     f"    for (t = 0; t < {case.threads}; t++) printf(\"%d \", out[t]); printf(\"\\n\"); }}\n")
    parts.append("  return 0; }\n")
    source = os.path.join(workdir, "ref.c")
    binary = os.path.join(workdir, "ref")
    with open(source, "w") as f:
        f.write("".join(parts))
    # -fwrapv: int conversions of out-of-range unsigned values wrap as on the GPU (no UB is relied upon).
    # -ffp-contract=off: a * b + c is a rounded multiply, then a rounded add (the toolchain's --fmad=false); no
    # -ffast-math; float arithmetic in SSE registers (x86-64's default; said outright for a 32-bit x86 host, whose
    # default x87 would round to a wider precision first).
    # -fno-strict-aliasing: --pairs reads x's words two at a time, as unsigned long long, as the kernel does.
    flags = ["-O1", "-fwrapv", "-fno-strict-aliasing", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-w"]
    if platform.machine().lower() in ("i386", "i486", "i586", "i686", "x86"):
        flags += ["-msse2", "-mfpmath=sse"]
    subprocess.run(["gcc", *flags, "-o", binary, source, "-lm"], check=True, timeout=300)
    run = subprocess.run([binary], check=True, capture_output=True, text=True, timeout=60)
    return [[int(v) for v in line.split()] for line in run.stdout.splitlines()]


def int_arg(v: int) -> str:
    return f"(int){v & 0xFFFFFFFF}u"


def make_case(rng: np.random.Generator, shared: float = 0.0, narrow: bool = False, atomics: bool = False,
              floats: bool = False, wide: bool = False, arith: bool = False, fma: bool = False,
              calls: bool = False, counters: bool = False, pairs: bool = False, bits: bool = False,
              doubles: bool = False, simd: bool = False) -> Case:
    gen = Generator(rng, narrow, atomics, floats, wide or pairs or bits, arith, fma, calls, counters, pairs or bits,
                    bits, doubles, simd)
    x = [int(v) for v in rng.integers(-(1 << 31), 1 << 31, INPUTS)]
    x[:2] = [int(v) for v in rng.integers(-20, 20, 2)]
    threads = int(rng.choice([3, 4, 4, 6, 8]))         # one warp, a partial warp, two warps
    out = [int(v) for v in rng.integers(-100, 100, threads)]
    s0, s1 = (int(v) for v in rng.integers(-(1 << 31), 1 << 31, 2))
    if shared and rng.random() < shared:
        threads = int(rng.choice([5, 6, 8, 8]))         # block programs: several warps (a partial last one)
        out = [int(v) for v in rng.integers(-100, 100, threads)]
        phases = gen.phases()
        return _kept_calls(Case("", threads, s0, s1, x, out, phases, frozenset(gen.features),
                                tuple(reversed(gen.functions))))
    body = gen.body()
    case = Case(body, threads, s0, s1, x, out, features=frozenset(gen.features),
                functions=tuple(reversed(gen.functions)))
    return _kept_calls(case)


def _kept_calls(case: Case) -> Case:
    """--calls: count the programs whose PTX kept a call for the inliner (NVRTC folds the calls of many functions
    away, __noinline__ or not), the "call kept" feature; compiled once here, NVRTC's cache serves the run."""
    if not case.functions:
        return case
    from qwengpu.toolchain import CompileError, compile_cuda
    try:
        ptx = compile_cuda(cuda_source(case.body, case.phases, case.functions))
    except CompileError:
        return case
    if any("call" in entry for entry in ptx.split(".entry")[1:]):
        case.features = case.features | {"call kept"}
    return case


def classify(error: Exception) -> str:
    return classify_text(str(error))


def classify_text(text: str) -> str:
    for key in ("blocks; the ROM holds", "registers per lane", "words of block memory", "floating point", "divergent", "not a whole number",
                "holds an address", "overlaps them", "mul.hi", "compares the loop counter", "depends on the high word",
                "unsupported PTX"):
        if key in text:
            return key
    return text.split(":")[0][:60]


def run_machine(case: Case):
    """The interpreter's out[] for a case, or the MachineError that refused it."""
    from qwengpu import Device
    dev = Device()
    # allocated, so a program whose block memory (shared arrays, barrier or overlay state) would cover them is refused
    dev.alloc(len(case.out), at=OUT)
    dev.alloc(len(case.x), at=X)
    dev.write(X, np.array(case.x, dtype=np.int64))
    dev.write(OUT, np.array(case.out, dtype=np.int64))
    kernel = dev.load_kernel(cuda_source(case.body, case.phases, case.functions), "k")
    dev.launch(kernel, threads=case.threads, args=[OUT, X, case.s0 & 0xFFFFFFFF, case.s1 & 0xFFFFFFFF])
    return [int(v) for v in dev.read(OUT, case.threads)]


def attempt(case: Case) -> tuple[str, object]:
    """("ok", out[]), ("compile", text), ("refused", the MachineError's text) or ("internal", what went wrong)."""
    from qwengpu.isa import MachineError
    from qwengpu.toolchain import CompileError
    try:
        return "ok", run_machine(case)
    except CompileError as e:
        return "compile", str(e)
    except Exception as e:
        if isinstance(e, MachineError) and not str(e).startswith("internal"):
            return "refused", str(e)
        where = traceback.extract_tb(e.__traceback__)[-1]
        return "internal", f"{type(e).__name__}: {e} (at {where.filename}:{where.lineno} in {where.name})"


def outcome(case: Case, time_limit: float | None = None) -> tuple[str, object]:
    """``attempt(case)``, in a forked child killed after ``time_limit`` seconds (then ("internal", "timeout ...")):
    a lowering that never ends is a bug to report, not a run that never ends. None: in this process."""
    if time_limit is None or not hasattr(os, "fork"):
        return attempt(case)
    import pickle
    import select
    import signal
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:    # the child: its outcome down the pipe, then out without running the parent's cleanup
        status = 1
        try:
            os.close(read)
            data = pickle.dumps(attempt(case))
            with os.fdopen(write, "wb") as pipe:
                pipe.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    chunks, deadline = [], time.time() + time_limit
    with os.fdopen(read, "rb") as pipe:
        while True:
            left = deadline - time.time()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "internal", f"timeout: not done after {time_limit:g} s (the lowering or the run hangs)"
            chunk = os.read(pipe.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return "internal", f"the child running the program died (wait status {status})"
    return pickle.loads(b"".join(chunks))


def fuzz(programs: int, seed: int, batch: int = 200, verbose: bool = False, shared: float = 0.0,
         narrow: bool = False, atomics: bool = False, floats: bool = False, wide: bool = False,
         arith: bool = False, time_limit: float | None = None, fma: bool = False, calls: bool = False,
         counters: bool = False, pairs: bool = False, bits: bool = False, doubles: bool = False,
         simd: bool = False) -> dict:
    """Run ``programs`` random kernels (``shared``: the fraction that are block programs with __shared__ memory and
    barriers; ``narrow``: leaves also read bytes and halfwords at computed indices; ``atomics``: the block programs'
    atomics are all ten kinds with their old values kept; ``floats``: float32 comparisons, classes and bits;
    ``wide``: 64-bit expressions; ``arith``: float32 + - * / sqrtf and (float) of ints, implies ``floats``; ``fma``:
    with them fmaf(a, b, c), rounded once, against libm's; ``calls``: calls of __noinline__ functions;
    ``counters``: loops over unsigned long long counters; ``pairs``: x's words read as 64-bit values; ``bits``: with
    them 64-bit bit counts, and with ``atomics`` 64-bit atomics; ``doubles``: a double expression ends half the
    plain programs; ``simd``: SIMD and DPX intrinsics, dot products, funnel shifts and byte permutes); returns
    counts (tried, ran, refused by reason, and ``features``: how many programs that ran hold a float add, sub, mul,
    div, rcp, sqrt, an int / unsigned conversion, a call, a call NVRTC kept), the mismatches and the internal errors
    (case, the exception's text): a program whose lowering or run raises anything but a refusal is counted and the
    run goes on with the next. Without those options a seed gives the same programs as before they existed.
    ``time_limit``: each program is lowered and run in a forked child that is killed after that many seconds (an
    internal error: the lowering hangs); None runs it in this process."""
    import qwengpu.isa          # noqa: F401  imported once here, not again in each forked child
    import qwengpu.toolchain    # noqa: F401
    from qwengpu import Device  # noqa: F401
    rng = np.random.default_rng(seed)
    report = {"tried": 0, "ran": 0, "refused": collections.Counter(), "mismatches": [], "compile_errors": 0,
              "internal_errors": [], "features": collections.Counter()}
    with tempfile.TemporaryDirectory() as workdir:
        done = 0
        while done < programs:
            cases = [make_case(rng, shared, narrow, atomics, floats, wide, arith, fma, calls, counters, pairs, bits,
                               doubles, simd)
                     for _ in range(min(batch, programs - done))]
            expected = c_reference(cases, workdir)
            for case, want in zip(cases, expected):
                report["tried"] += 1
                kind, got = outcome(case, time_limit)
                if kind == "compile":
                    report["compile_errors"] += 1
                    continue
                if kind == "refused":
                    report["refused"][classify_text(got)] += 1
                    continue
                if kind == "internal":
                    # A bug, not a refusal (an exception such as KeyError, the lowering's own "internal: ..."
                    # MachineError, or a program that ran past time_limit): counted with the program, and the run
                    # goes on.
                    report["internal_errors"].append((case, got))
                    if verbose:
                        source = cuda_source(case.body, case.phases, case.functions)
                        print(f"INTERNAL ERROR {got}\n{source}x={case.x} s0={case.s0} "
                              f"s1={case.s1} out0={case.out} threads={case.threads}", flush=True)
                    continue
                report["ran"] += 1
                report["features"].update(case.features)
                if got != want:
                    report["mismatches"].append((case, got, want))
                    if verbose:
                        source = cuda_source(case.body, case.phases, case.functions)
                        print(f"MISMATCH\n{source}x={case.x} s0={case.s0} s1={case.s1} "
                              f"out0={case.out}\n machine {got}\n C       {want}", flush=True)
            done += len(cases)
            if verbose:
                print(f"... {report['tried']} tried, {report['ran']} ran, {len(report['mismatches'])} mismatches, "
                      f"{len(report['internal_errors'])} internal errors", flush=True)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shared", type=float, default=0.0,
                        help="the fraction of programs that are block programs with __shared__ memory and barriers")
    parser.add_argument("--narrow", action="store_true",
                        help="leaves also read x's bytes and halfwords (signed and unsigned) at computed indices")
    parser.add_argument("--atomics", action="store_true",
                        help="block programs use all ten atomics (min, max, exch, cas, inc, dec, ...) and keep their "
                             "old values")
    parser.add_argument("--floats", action="store_true",
                        help="float32 comparisons, classes (isnan, ...), fmaxf / fminf, fabsf, copysignf, negation "
                             "and bits of words read as floats")
    parser.add_argument("--wide", action="store_true",
                        help="unsigned long long expressions (widened words, 64-bit arithmetic, shifts, compares) "
                             "read back as their low word, a shifted word or a comparison; with --floats also "
                             "(long long)x and llrintf(x) of floats")
    parser.add_argument("--arith", action="store_true",
                        help="with --floats (implied): float32 a + b, a - b, a * b (round to nearest even, "
                             "subnormals, overflow to infinity; a NaN result canonicalised on both sides) and "
                             "(float) of int and unsigned expressions, among edge literals; a / b, 1.0f / a and "
                             "sqrtf(a) correctly rounded")
    parser.add_argument("--fma", action="store_true",
                        help="with --arith (implied): also fmaf(a, b, c), one rounding of the exact a * b + c, "
                             "against glibc's fmaf")
    parser.add_argument("--calls", action="store_true",
                        help="expressions call __noinline__ functions (loops, early returns, nested calls, pointer "
                             "parameters), which the toolchain inlines; gcc calls them")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds a program may take to lower and run (in a forked child) before it is counted "
                             "an internal error; 0 runs each in this process without a limit (the default, but 60 "
                             "with --arith: long float programs are where a hang in the lowering would show; the "
                             "specializer's exponential trace of divisions of launch arguments was one)")
    parser.add_argument("--counters", action="store_true",
                        help="loops over an unsigned long long counter (size_t i = ...; i < n; i += step), whose "
                             "last step may pass 2^32 - 1, the counter read in the body and sometimes after")
    parser.add_argument("--pairs", action="store_true",
                        help="with --wide (implied): x's words read two at a time as unsigned long long / long long "
                             "values (64-bit loads, kept as pairs of words)")
    parser.add_argument("--bits", action="store_true",
                        help="with --pairs (implied): __popcll, __clzll, __ffsll and __brevll of 64-bit expressions; "
                             "with --atomics also 64-bit atomics in the block programs' atomics phase")
    parser.add_argument("--doubles", action="store_true",
                        help="half the plain programs end with a double expression (+ - * / sqrt, dmin / dmax, floor, "
                             "conversions) read back as its bits, (float) of it, a compare or (int) of it")
    parser.add_argument("--simd", action="store_true",
                        help="CUDA's SIMD intrinsics (__vadd2, __vsadu4, __vcmpgts2, ...), sm_90's DPX intrinsics "
                             "(__vimax3_s32, __viaddmin_u16x2, ..._relu), __dp4a / __dp2a, funnel shifts and "
                             "__byte_perm of unsigned expressions")
    args = parser.parse_args(argv)
    start = time.time()
    report = fuzz(args.programs, args.seed, verbose=True, shared=args.shared, narrow=args.narrow,
                  atomics=args.atomics, floats=args.floats, wide=args.wide, arith=args.arith or args.fma, fma=args.fma,
                  calls=args.calls, counters=args.counters, pairs=args.pairs, bits=args.bits, doubles=args.doubles,
                  simd=args.simd, time_limit=(60.0 if args.arith or args.fma else None) if args.time_limit is None
                  else args.time_limit or None)
    print(f"programs tried {report['tried']}, ran {report['ran']}, refused {sum(report['refused'].values())}, "
          f"compile errors {report['compile_errors']}, mismatches {len(report['mismatches'])}, "
          f"internal errors {len(report['internal_errors'])} ({time.time() - start:.0f} s)")
    for reason, count in report["refused"].most_common():
        print(f"  refused {count:5d}: {reason}")
    if report["features"]:
        print("  ran with " + ", ".join(f"{name} {count}" for name, count in sorted(report["features"].items())))
    return 1 if report["mismatches"] or report["internal_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
