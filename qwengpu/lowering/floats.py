"""Floats as integers: float32 instructions rewritten as integer PTX.

The machine has no floating point, but a float32 is a word, and much of what CUDA does with floats never rounds:

- moving one (``ld`` / ``st`` / ``mov`` / ``selp`` ``.f32``, a float parameter) moves a word: the type becomes
  ``.b32``;
- ``neg``, ``abs`` and ``copysign`` change the sign bit alone (as NVIDIA's float unit does, a NaN's too);
- comparisons (``setp`` with all fourteen of PTX's ordered and unordered tests), ``testp``, ``min`` and ``max``
  order the bits. IEEE floats are sign and magnitude, so ``key(x) = sign ? -magnitude : magnitude`` (two's
  complement) orders every non-NaN float as a signed integer, with -0 == +0 as IEEE compares them; a NaN (magnitude
  above infinity's 0x7f800000) makes an ordered test false and an unordered one true. ``min`` / ``max`` use the
  total order ``x ^ ((x >> 31) >>> 1)`` (-0 below +0, so max(+0, -0) is +0 and min is -0, as qccl's float
  reductions order them where CUDA leaves the sign open) and follow PTX: a NaN operand is ignored, two NaNs give
  the canonical NaN 0x7fffffff; with ``.NaN`` any NaN operand gives it.
- against a literal (``x > 0.0f``, ``fmaxf(x, 0.0f)``, ``isnan``: testp), the floats that pass are a few ranges of
  x's words, worked out here from IEEE's order (``bits_where``): one or two unsigned compares a range, so
  ``x > 0.0f`` costs the machine two ops where two registers cost thirteen.

- ``truncf``, ``floorf``, ``ceilf`` (``cvt.rzi / rmi / rpi .f32.f32``) clear the fraction bits (and move one unit
  away from zero for floor / ceil); ``rintf`` / ``nearbyintf`` (``cvt.rni.f32.f32``) add half a unit less one plus
  the units bit first (ties to even), 20 integer instructions; ``(int)x`` and ``(unsigned)x`` (``cvt.rzi.s32 / u32
  .f32``) shift the mantissa by the exponent, saturate and make a NaN 0, as PTX says, and ``__float2int_rn`` /
  ``__float2uint_rn`` (``cvt.rni.s32 / u32 .f32``) round the shifted-out bits to nearest even the same way (25 / 24);
  to a 64-bit integer (``(long long)x``, ``lrintf``: ``cvt.r*i.s64 / u64 .f32``) the same, its low word, which is
  what the machine's registers hold of a 64-bit one; ``(float)`` of a 64-bit integer every write of which widens a
  32-bit one (``size_t i = threadIdx.x``) converts its low word as that.

- ``add``, ``sub`` and ``mul`` (rounding to nearest even: ``.rn`` or no rounding modifier; or toward zero, minus or
  plus infinity: ``.rz`` / ``.rm`` / ``.rp``, so ``roundf``, whose NVRTC code adds with ``.rz``, and ``__fadd_rz`` /
  ``__fmul_rd`` / ...) and ``cvt.rn.f32.s32 / u32`` (int to float) are IEEE binary32 arithmetic from integer ops, as
  NVIDIA's non-FTZ float unit computes it: subnormals in and out, overflow to infinity, x + (-x) = +0, any NaN
  result the canonical NaN. Straight-line code, branch-free, a guarded instruction where a step applies on some
  lanes only: about 60 of the machine's ops an add (qccl/kernels/fprim.cu's algorithm: align with a sticky bit, add,
  normalise by a binary search of the leading zeros, round), 70 a multiply (the 48-bit product from three 8 x 24-bit
  multiplies and a 32-bit one for the sticky bit, a subnormal operand normalised first), 30 a conversion; longer
  than the 32-block ROM, they run as overlays.
- ``div.rn``, ``rcp.rn`` and ``sqrt.rn`` (CUDA's ``a / b``, ``1.0f / x`` and ``sqrtf`` as NVRTC compiles them by
  default, -prec-div=true / -prec-sqrt=true) are correctly rounded the same way, x / 0 = inf, 0 / 0 and inf / inf
  and sqrt(x < 0) NaN, sqrt(-0) = -0: long division of the significands and fdlibm's digit-by-digit root, a bit a
  step (3 ops a quotient bit, 5 a root bit), about 175 integer instructions a division, 155 a square root.

- ``atomicAdd`` on a float (``atom`` / ``red`` ``.global`` / ``.shared`` ``.add.f32``) is the compare-and-swap loop
  ``old = ld [a]; loop: new = old + x; prev = atom.cas.b32 [a], old, new; old = prev; if prev != old goto loop``
  (a SIMT loop on the machine; its atom.cas takes the lanes in lane order, so the adds land in lane order, warps one
  after another); as NVIDIA's units do, the global one flushes subnormal inputs and results to zero of their sign
  (FADD.FTZ.RN), the shared one keeps them. About 80 integer instructions (70 on shared memory).

- ``fma`` / ``mad`` with a rounding (``fmaf``, ``__fmaf_rn`` / ``_rz`` / ...: a * b + c rounded once) is the exact
  48-bit product and c added in a 64-bit window of two words, normalised and rounded like a product: about 190
  integer instructions (``_fused``). The toolchain still compiles with ``--fmad=false``, so CUDA's ``a * b + c`` is
  a mul and an add, as a numpy replay rounds it, and costs less; ``hypotf`` (which NVRTC writes with an fma) runs.

The rest of float arithmetic is refused by name: math functions such as ``expf`` (the GPU's approximate ex2 / lg2 /
sin units, whose bits are the GPU's own), the approximate ``div.approx`` / ``div.full`` /
``rcp.approx`` / ``sqrt.approx`` / ``rsqrt`` / ``ex2`` / ``lg2`` / ``sin`` / ``cos`` (their bits are the GPU's hardware
approximation's; ``--use_fast_math`` emits them), other roundings of divisions, roots and conversions (``.rz`` /
``.rm`` / ``.rp``), ``.sat``, ``(float)`` of a 64-bit integer computed in 64 bits, other atomic
operations on floats, as are float16 / bfloat16 instructions, the float64 ones the doubles stage does not build
(qwengpu.lowering.doubles, which runs before this one) and ``.ftz`` (flush-to-zero; NVRTC emits it for
``--use_fast_math``).

This is the lowering's first stage: every later one sees integer PTX only (``transfer.check_integer`` still refuses
any float type left). Each rewritten instruction keeps the float instruction's line and text, so errors still name
it; a guarded one computes into a fresh register and one guarded mov writes its destination.

Example::

    >>> from qwengpu.ptx import Instruction, Reg, Imm
    >>> from qwengpu.ptx import Kernel
    >>> k = Kernel("k", body=[Instruction("neg.f32", (Reg("%f2"), Reg("%f1")), None, False, 7, "neg.f32 %f2, %f1")],
    ...            registers={"%f": "f32"})
    >>> [i.opcode for i in as_integers(k).body]
    ['xor.b32']
"""
from __future__ import annotations

import dataclasses
import math
import operator
import struct

from ..isa import MachineError
from ..ptx import Imm, Instruction, Kernel, Label, Reg
from .semantics import fold
from .values import destination

__all__ = ["as_integers", "is_float_type", "FLOAT_TYPES"]

FLOAT_TYPES = {"f16", "f16x2", "bf16", "bf16x2", "tf32", "f32", "f64", "e4m3x2", "e5m2x2"}
SIGN = 0x80000000
MAGNITUDE = 0x7FFFFFFF
INFINITY = 0x7F800000           # the magnitude of an infinity; a NaN's is above it
SMALLEST_NORMAL = 0x00800000
SMALLEST_NORMAL_VALUE = 2.0 ** -126
WORD = 0xFFFFFFFF
CANONICAL_NAN = 0x7FFFFFFF      # what NVIDIA's float unit writes for a NaN result
LARGEST = 0x7F7FFFFF            # the largest finite magnitude
# What to write instead of a double, which the first float kernels hold by accident: C reads 2.0 as a double.
DOUBLE_HINT = ("; of double arithmetic the machine builds add, sub, mul, fma, div, sqrt, compares, min / max, "
               "trunc / floor / ceil / rint, the conversions to and from float and int (64-bit too) and atomicAdd, "
               "in integer ops on pairs of words (qwengpu/lowering/doubles.py), not this one: write float, and 2.0f "
               "for a literal (C reads 2.0 or 1e-3 as a double and computes the expression in double)")
# An atomic add on a float (and on a double: qwengpu.lowering.doubles) runs on these spaces, with these qualifiers
# (its memory order and scope: the machine runs warps and blocks one after another, so every order holds).
ATOMIC_SPACES = ("global", "shared")
ATOMIC_QUALIFIERS = ("relaxed", "acquire", "release", "acq_rel", "cta", "cluster", "gpu", "sys")
# float32 <-> float16 / bfloat16 (cuda_fp16.h's __half2float / __float2half, cuda_bf16.h's): a half is 16 bits of a
# b16 register; its arithmetic is float32's, rounded back (exact: float32 holds twice a half's digits and more).
HALF_CONVERSIONS = {("f32", "f16"), ("f32", "bf16"), ("rn", "f16", "f32"), ("rn", "bf16", "f32")}
HALF_NAN = 0x7FFF               # the canonical NaN of float16 and bfloat16, as of float32 0x7fffffff
ROUNDINGS = ("rn", "rz", "rm", "rp")     # IEEE's four: to nearest even, toward zero, minus and plus infinity
NARROW_INTEGERS = ("s16", "u16", "s8", "u8")     # sources of (float)c a char or short register holds
WIDE_INTEGERS = ("s64", "u64")      # (long long)x, llrintf: the machine keeps the result's low word
# Keys of the total order (x ^ ((x >> 31) >>> 1), signed) below and above every float: a NaN operand of max / min
# takes one of them, so the other operand wins.
BELOW_ALL, ABOVE_ALL = 0x80000000, 0x7FFFFFFF

# The word moves: a float32 in them is a word.
MOVES = ("ld", "st", "mov", "selp", "slct", "shfl")
ORDERED = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
UNORDERED = {"equ": "eq", "neu": "ne", "ltu": "lt", "leu": "le", "gtu": "gt", "geu": "ge"}
COMPARISONS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
               "ge": operator.ge}
MIRRORED = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "ltu": "gtu", "gtu": "ltu", "leu": "geu", "geu": "leu"}
ARITHMETIC = {"add": "an add", "sub": "a subtraction", "mul": "a multiply", "fma": "a fused multiply-add",
              "mad": "a multiply-add", "div": "a division", "rcp": "a reciprocal", "sqrt": "a square root",
              "rsqrt": "a reciprocal square root", "cvt": "a conversion", "atom": "an atomic operation",
              "red": "an atomic reduction", "ex2": "a power of two", "lg2": "a logarithm", "sin": "a sine",
              "cos": "a cosine", "tanh": "a hyperbolic tangent"}
APPROXIMATE = ("rsqrt", "ex2", "lg2", "sin", "cos", "tanh")     # PTX has these .approx only
# Who computes with each approximation, so a refusal names what the user wrote (CUDA 13's math library, by its PTX)
# and, where there is one, what runs in its place with the same bits on a GPU and on the machine
APPROXIMATED_IN = {
    "ex2": "expf, exp2f, exp10f, expm1f, sinhf, coshf, tanhf, erff and __expf compute with it; CUDA's double exp, "
           "exp2, exp10, expm1 and sinh are built of fmas and run, so (float)exp((double)x) is an exp whose bits a "
           "GPU computes too",
    "lg2": "cbrtf, __logf, __log2f and __powf compute with it (logf, log2f and log10f do not, and run)",
    "rcp": "powf, fmodf, remainderf, tanf, atanf, erfcf, normcdff, lgammaf and tgammaf compute with it, and "
           "--use_fast_math's division; fmodf and remainderf are exact, so (float)fmod((double)x, (double)y) and "
           "(float)remainder(...) give their bits, and run",
    "rsqrt": "rsqrtf, asinf, acosf and asinhf compute with it, and --use_fast_math's 1.0f / sqrtf(x); 1.0f / "
             "sqrtf(x) itself runs (correctly rounded, as CUDA compiles it by default)",
    "sin": "__sinf and __sincosf compute with it, and --use_fast_math's sinf (sinf itself runs)",
    "cos": "__cosf and __sincosf compute with it, and --use_fast_math's cosf (cosf itself runs)",
    "tanh": "--use_fast_math's tanhf computes with it",
}


def _value(bits: int) -> float:
    """The float32 these bits are, as a Python float (exact: every float32 is a double)."""
    return struct.unpack("<f", struct.pack("<I", bits & WORD))[0]


def _total(bits: int) -> int:
    """The total order of float bits (-0 below +0) as a signed integer: min / max's order."""
    key = bits ^ MAGNITUDE if bits & SIGN else bits
    return key - (1 << 32) if key & SIGN else key


# The places where a float's relation to a literal c can change, besides those of c itself: zeros, infinities,
# the NaN ranges' ends, and the halves' ends.
_EDGES = (0, 1, SIGN | 1, INFINITY, INFINITY + 1, SIGN, SIGN | INFINITY, (SIGN | INFINITY) + 1, 1 << 32)


def bits_where(holds, literal: int | None = None) -> list[tuple[int, int]]:
    """The words x for which ``holds(x)`` is true, as circular intervals (lo, hi) of unsigned words, inclusive
    (hi < lo wraps past 0xffffffff). ``holds`` is a relation between a float and ``literal`` (or a class of floats:
    testp): monotone in x's value within each half, so it changes only at the edges of the halves and next to c
    and -c. The relation must agree at both ends of each interval between those places: a place missed shows as an
    internal error where they disagree, not as a wrong program."""
    edges = set(_EDGES)
    if literal is not None:
        for c in (literal, literal ^ SIGN):
            edges.update(e for e in (c - 1, c, c + 1, c + 2) if 0 <= e <= 1 << 32)
    edges = sorted(edges)
    runs = []
    for lo, stop in zip(edges, edges[1:]):
        inside = holds(lo)
        if holds(stop - 1) != inside:
            raise MachineError(f"internal: a float relation changes inside words {lo:#x}..{stop - 1:#x}")
        if inside:
            if runs and runs[-1][1] == lo - 1:
                runs[-1] = (runs[-1][0], stop - 1)
            else:
                runs.append((lo, stop - 1))
    if len(runs) > 1 and runs[0][0] == 0 and runs[-1][1] == WORD:      # one run across 0xffffffff -> 0
        runs = [(runs[-1][0], runs[0][1])] + runs[1:-1]
    return runs


def _within(x: int, run: tuple[int, int]) -> bool:
    lo, hi = run
    return (x - lo) & WORD <= (hi - lo) & WORD


def _compares(test: str, literal: int):
    """x -> whether ``x test c`` holds for the float c with bits ``literal`` (IEEE: NaNs unordered, -0 == +0)."""
    cmp = COMPARISONS[ORDERED.get(test) or UNORDERED.get(test) or "eq"]
    c = _value(literal)

    def holds(x: int) -> bool:
        v = _value(x)
        unordered = math.isnan(v) or math.isnan(c)
        if test in ("num", "nan"):
            return unordered == (test == "nan")
        return test in UNORDERED if unordered else cmp(v, c)
    return holds


CLASSES = {"finite": math.isfinite, "infinite": math.isinf, "number": lambda v: not math.isnan(v),
           "notanumber": math.isnan, "normal": lambda v: math.isfinite(v) and abs(v) >= SMALLEST_NORMAL_VALUE,
           "subnormal": lambda v: 0 < abs(v) < SMALLEST_NORMAL_VALUE}


def is_float_type(modifier: str) -> bool:
    return modifier in FLOAT_TYPES


def _float_types(inst: Instruction) -> list[str]:
    return [m for m in inst.modifiers if is_float_type(m)]


def as_integers(kernel: Kernel) -> Kernel:
    """The kernel with its float32 instructions written as integer ones (the kernel itself if it has none)."""
    if not any(isinstance(i, Instruction) and _float_types(i) for i in kernel.body) and \
            not any(is_float_type(t) for t in kernel.registers.values()):
        return kernel
    rewriter = _Rewriter(kernel)
    approximation = _approximation(kernel)
    if approximation is not None:
        raise _refuse(approximation, _approximate(approximation.base))
    for item in kernel.body:
        if isinstance(item, Instruction) and _float_types(item):
            rewriter.rewrite(item)
        else:
            rewriter.body.append(item)
    registers = {name: {"f32": "b32", "f16": "b16", "bf16": "b16"}.get(typ, typ)
                 for name, typ in kernel.registers.items()}
    registers.update(rewriter.temporaries)
    return dataclasses.replace(kernel, body=rewriter.body, registers=registers)


def _refuse(inst: Instruction, why: str) -> MachineError:
    return MachineError(f"unsupported PTX instruction at line {inst.line} ({why}): {inst.text}", line=inst.line)


def _refusal(base: str) -> str:
    """Why a float32 instruction without a builder is refused."""
    what = ARITHMETIC.get(base, base)
    if base in APPROXIMATE:
        return _approximate(base)
    return (f"the machine has no floating point: {what} of floats needs IEEE arithmetic from integer ops, many times "
            "the ops of an add or a multiply; of float32 arithmetic add, sub, mul and fma (each rounding), div, rcp "
            "and sqrt rounding to nearest, and the conversions to and from integers run (qwengpu/KERNELS.md)")


def _approximate(base: str) -> str:
    """Why an approximate instruction (``ex2.approx``, ``rcp.approx.ftz``, ...) is refused, and who uses it."""
    return (f"the machine has no floating point: {base}.approx is the GPU's own hardware approximation, which no "
            f"integer sequence reproduces; {APPROXIMATED_IN.get(base, '--use_fast_math emits it')}")


def _approximation(kernel: Kernel) -> Instruction | None:
    """The kernel's first approximate float instruction: refused first, since it is why the function that holds
    it cannot run (expf's cvt.sat comes before its ex2.approx, and is not the reason)."""
    return next((item for item in kernel.body if isinstance(item, Instruction) and _float_types(item) == ["f32"]
                 and (item.base in APPROXIMATE or {"approx", "ftz"} <= set(item.modifiers))), None)


class _Rewriter:
    """Writes one float instruction at a time as integer instructions into ``body``, with fresh temporaries."""

    def __init__(self, kernel: Kernel):
        self.body: list = []
        self.temporaries: dict[str, str] = {}
        prefix = "%float_"
        while any(name.startswith(prefix) for name in kernel.registers):
            prefix += "_"
        self.prefix = prefix
        self.count = 0
        self.inst: Instruction | None = None
        # Registers whose one definition is a move of a float literal (NVRTC's ``mov.f32 %f2, 0f00000000`` before
        # a max): their uses are that literal, which the helpers below fold.
        definitions: dict[str, list] = {}
        for item in kernel.body:
            if isinstance(item, Instruction) and destination(item) is not None:
                definitions.setdefault(destination(item), []).append(item)
        self.definitions = definitions
        self.literals = {name: found[0].operands[1] for name, found in definitions.items()
                         if len(found) == 1 and found[0].base == "mov" and found[0].guard is None
                         and len(found[0].operands) == 2 and isinstance(found[0].operands[1], Imm)}

    # -- building blocks -------------------------------------------------------------------------------------------
    def temp(self, kind: str = "b32") -> Reg:
        """A fresh register; its name's prefix is declared with its type (the lowering reads widths by prefix)."""
        prefix = f"{self.prefix}{'p' if kind == 'pred' else 'r'}"
        self.temporaries[prefix] = kind
        self.count += 1
        return Reg(f"{prefix}{self.count}")

    def emit(self, opcode: str, *operands, dst: Reg | None = None) -> Reg:
        """Append ``opcode dst, operands`` (unguarded: see rewrite); returns dst (fresh if not given)."""
        if dst is None:
            dst = self.temp("pred" if opcode.endswith(".pred") or opcode.startswith(("setp", "testp")) else "b32")
        inst = self.inst
        self.body.append(Instruction(opcode, (dst,) + operands, None, False, inst.line, inst.text))
        return dst

    def replace_where(self, register: Reg, value, condition: Reg) -> Reg:
        """register = condition ? value : register: one guarded mov (the machine's predicated op)."""
        inst = self.inst
        self.body.append(Instruction("mov.b32", (register, value), condition, False, inst.line, inst.text))
        return register

    def magnitude(self, x):
        return Imm(x.value & MAGNITUDE) if isinstance(x, Imm) else self.emit("and.b32", x, Imm(MAGNITUDE))

    def is_nan(self, magnitude: Reg, dst: Reg | None = None) -> Reg:
        return self.emit("setp.gt.u32", magnitude, Imm(INFINITY), dst=dst)

    def is_number(self, magnitude: Reg, dst: Reg | None = None) -> Reg:
        return self.emit("setp.le.u32", magnitude, Imm(INFINITY), dst=dst)

    def either(self, opcode: str, *flags, dst: Reg | None = None):
        """The or / and of predicates (into dst if given), True / False folded."""
        absorbing = opcode == "or.pred"                 # True absorbs an or, False an and
        if absorbing in flags:
            result = absorbing
        else:
            rest = list(dict.fromkeys(f for f in flags if not isinstance(f, bool)))
            if len(rest) == 2:
                return self.emit(opcode, *rest, dst=dst)
            result = rest[0] if rest else not absorbing
        if dst is not None:
            self.emit("mov.pred", Imm(int(result)) if isinstance(result, bool) else result, dst=dst)
        return result

    def compare_key(self, x: Reg, magnitude: Reg) -> Reg:
        """sign ? -magnitude : magnitude, as a signed word: the IEEE order of non-NaN floats, -0 == +0."""
        sign = self.emit("shr.s32", x, Imm(31))                 # all ones for a negative float
        return self.emit("sub.s32", self.emit("xor.b32", magnitude, sign), sign)

    def total_key(self, x: Reg) -> Reg:
        """x ^ ((x >> 31) >>> 1): the total order of float bits as signed words, -0 below +0."""
        return self.emit("xor.b32", x, self.emit("shr.u32", self.emit("shr.s32", x, Imm(31)), Imm(1)))

    # -- the instructions --------------------------------------------------------------------------------------------
    def rewrite(self, inst: Instruction) -> None:
        self.inst = inst
        floats = _float_types(inst)
        if inst.base == "cvt" and inst.modifiers in HALF_CONVERSIONS:
            self._half_conversion(inst)
            return
        if "f64" in floats:
            raise _refuse(inst, "the machine has no floating point: a double instruction" + DOUBLE_HINT)
        if set(floats) != {"f32"}:
            kinds = ", ".join(f".{t}" for t in floats if t != "f32")
            raise _refuse(inst, f"the machine has no floating point; of the float types .f32 runs (its arithmetic "
                                f"as integer ops) and .f64 in part (qwengpu/lowering/doubles.py), not {kinds}")
        if "approx" in inst.modifiers and "ftz" in inst.modifiers:
            # what CUDA's math library computes expf, powf, fmodf, ... with, fast math or not
            raise _refuse(inst, _approximate(inst.base))
        if "ftz" in inst.modifiers:
            raise _refuse(inst, "the machine has no floating point, and .ftz flushes subnormals to zero: compile "
                                "without --use_fast_math / -ftz=true")
        builder = self._move if inst.base in MOVES else getattr(self, f"_{inst.base}", None)
        if builder is None:
            raise _refuse(inst, _refusal(inst.base))
        if inst.guard is None or builder in (self._move, self._atom, self._red):
            builder(inst)
            return
        # Guarded (@%p max.f32 ...): the sequence computes into a fresh register on every lane, and one guarded mov
        # writes the destination. Guarding each step instead would keep every temporary's old value alive across
        # the sequence, which 15 registers do not hold.
        dst = inst.operands[0]
        if not isinstance(dst, Reg):
            raise _refuse(inst, f"{inst.base}.f32 writes a register")
        kind = "pred" if inst.base in ("setp", "testp") else "b32"
        result = self.temp(kind)
        builder(dataclasses.replace(inst, operands=(result,) + inst.operands[1:], guard=None, guard_negated=False))
        self.body.append(Instruction(f"mov.{kind}", (dst, result), inst.guard, inst.guard_negated, inst.line,
                                     inst.text))

    def _move(self, inst: Instruction) -> None:
        """A float32 is a word: ld / st / mov / selp / shfl of .f32 are those of .b32, and so is slct.f32.s32 (the
        selector an integer; slct.b32.f32, whose selector is a float, is refused)."""
        if inst.base == "slct" and inst.modifiers[-1] == "f32":
            raise _refuse(inst, "slct with a float selector")
        opcode = ".".join(["b32" if m == "f32" else m for m in inst.opcode.split(".")])
        self.body.append(dataclasses.replace(inst, opcode=opcode))

    # -- atomicAdd on a float: a compare-and-swap loop ------------------------------------------------------------------

    def _atom(self, inst: Instruction) -> None:
        self._atomic_add(inst, returns=True)

    def _red(self, inst: Instruction) -> None:
        self._atomic_add(inst, returns=False)

    def _atomic_add(self, inst: Instruction, returns: bool) -> None:
        """``atom`` / ``red`` ``.global`` / ``.shared`` ``.add.f32`` (CUDA's ``atomicAdd`` on a float) as the classic
        compare-and-swap loop in integer PTX::

                old = ld [a]                            (a plain load of the word)
            loop:
                new = old + x                           (the soft-float add)
                prev = atom.cas.b32 [a], old, new       (the word, swapped for new where it still was old)
                again = prev != old;  old = prev
                @again bra loop                         (a lane-dependent exit: the machine's SIMT loop)
                d = old                                 (atom: the word before this lane's add)

        The machine's ``atom.cas`` lets the lanes take turns in lane order, so on each trip the first lane (in lane
        order) still waiting on an address succeeds, and the others on that address read the new word and go round
        again: the adds land in lane order, each on the word its lane last read (which is the word, as the loop
        compares bits: a NaN or -0 in memory is no obstacle). Blocks run one after another. The loop is cut into
        overlays (a kernel of one such atomicAdd is about 170 blocks, six ROMs), at whose ends the block's warps take
        turns; a later warp's swap fails in each round in which an earlier warp's lane changed the word, so warps
        that come to the loop in the same round add in thread order (lowering.overlays says when they do).

        As NVIDIA's float units do (CUDA Programming Guide, floating-point standard): an atomic add on global memory
        flushes subnormal inputs and results to zero of their sign (FADD.F32.FTZ.RN), one on shared memory keeps
        them (FADD.F32.RN); any NaN sum is the canonical NaN. A guarded atom / red is the loop under a branch around
        it. Other atomic operations on floats, and .ftz (refused before this), are refused by name."""
        mods = [m for m in inst.modifiers if m != "f32"]
        spaces = [m for m in mods if m in ATOMIC_SPACES]
        other = [m for m in mods if m != "add" and m not in ATOMIC_SPACES + ATOMIC_QUALIFIERS]
        if "add" not in mods or other or len(spaces) != 1:
            named = ", ".join(f".{m}" for m in (other or mods)) or "no operation"
            raise _refuse(inst, f"the machine has no floating point: of the atomic operations on floats, add (CUDA's "
                                f"atomicAdd) on .global or .shared memory runs, as a compare-and-swap loop; not "
                                f"{inst.base} with {named}")
        if returns:
            if len(inst.operands) != 3 or not isinstance(inst.operands[0], Reg):
                raise _refuse(inst, "atom.add.f32 takes a register, an address and a value")
            dst, mem, x = inst.operands
        else:
            if len(inst.operands) != 2:
                raise _refuse(inst, "red.add.f32 takes an address and a value")
            dst, (mem, x) = None, inst.operands
        x = self.literals.get(x.name, x) if isinstance(x, Reg) else x
        ftz = spaces[0] == "global"
        qualifiers = [m for m in mods if m != "add"]
        skip = None
        if inst.guard is not None:          # @p atom ...: the loop under a branch around it where p does not hold
            self.count += 1
            skip = Label(f"{self.prefix.replace('%', '$')}atomic_skip{self.count}")
            self.body.append(Instruction("bra", (skip,), inst.guard, not inst.guard_negated, inst.line, inst.text))
        old = self.temp()
        self.body.append(Instruction(f"ld.{spaces[0]}.b32", (old, mem), None, False, inst.line, inst.text))
        if ftz:
            x = self._flushed(x)
        self.count += 1
        label = Label(f"{self.prefix.replace('%', '$')}atomic{self.count}")
        self.body.append(label)
        new = self.temp()
        self._sum(new, self._flushed(old) if ftz else old, x)
        if ftz:
            self._flush(new)
        prev = self.temp()
        self.body.append(Instruction(".".join(["atom", *qualifiers, "cas", "b32"]), (prev, mem, old, new), None,
                                     False, inst.line, inst.text))
        again = self.emit("setp.ne.u32", prev, old)
        self.emit("mov.b32", prev, dst=old)
        self.body.append(Instruction("bra", (label,), again, False, inst.line, inst.text))
        if dst is not None:
            self.emit("mov.b32", old, dst=dst)
        if skip is not None:
            self.body.append(skip)

    def _flushed(self, x):
        """x with a subnormal flushed to a zero of its sign (flush-to-zero's input rule), in a fresh register."""
        if isinstance(x, Imm):
            return Imm(x.value & SIGN) if x.value & MAGNITUDE < SMALLEST_NORMAL else x
        normal = self.emit("setp.ge.u32", self.emit("shl.b32", x, Imm(1)), Imm(SMALLEST_NORMAL << 1))
        flushed = self.emit("and.b32", x, Imm(SIGN))
        return self.replace_where(flushed, x, normal)

    def _flush(self, register: Reg) -> None:
        """A subnormal in register flushed to a zero of its sign, in place."""
        tiny = self.emit("setp.lt.u32", self.emit("shl.b32", register, Imm(1)), Imm(SMALLEST_NORMAL << 1))
        self.where(tiny, "and.b32", register, register, Imm(SIGN))

    def _operands(self, inst: Instruction, n: int) -> tuple:
        dst, *sources = inst.operands
        if len(sources) != n or not isinstance(dst, Reg):
            raise _refuse(inst, f"{inst.base}.f32 takes a register and {n} source operands")
        return dst, [self.literals.get(x.name, x) if isinstance(x, Reg) else x for x in sources]

    def _neg(self, inst: Instruction) -> None:
        dst, (x,) = self._operands(inst, 1)
        self.emit("xor.b32", x, Imm(SIGN), dst=dst)

    def _abs(self, inst: Instruction) -> None:
        dst, (x,) = self._operands(inst, 1)
        self.emit("and.b32", x, Imm(MAGNITUDE), dst=dst)

    def _copysign(self, inst: Instruction) -> None:
        """copysign.f32 d, a, b: b's magnitude with a's sign (PTX's operand order)."""
        dst, (a, b) = self._operands(inst, 2)
        sign = self.emit("and.b32", a, Imm(SIGN))
        self.emit("or.b32", self.magnitude(b), sign, dst=dst)

    def _setp(self, inst: Instruction) -> None:
        mods = [m for m in inst.modifiers if m != "f32"]
        if len(mods) != 1 or inst.pair is not None:
            raise _refuse(inst, "setp with a combining operation or a second destination")
        test = mods[0]
        cmp = ORDERED.get(test) or UNORDERED.get(test)
        if cmp is None and test not in ("num", "nan"):
            raise _refuse(inst, f"unknown float comparison .{test}")
        dst, (a, b) = self._operands(inst, 2)
        if isinstance(a, Imm) and isinstance(b, Reg):       # c < x is x > c
            a, b, test = b, a, MIRRORED.get(test, test)
        if isinstance(b, Imm):                              # x against a literal: a set of x's words
            if isinstance(a, Imm):
                self.either("and.pred", _compares(test, b.value)(a.value), dst=dst)
            else:
                self.member(a, bits_where(_compares(test, b.value), b.value), dst=dst)
            return
        # two registers: keys ordered as signed words, and each operand's NaN test beside
        magnitudes = [self.magnitude(a)] + ([] if b == a else [self.magnitude(b)])    # isnan(x): setp.nan x, x
        if len(magnitudes) == 1 and test in ("nan", "num"):
            (self.is_nan if test == "nan" else self.is_number)(magnitudes[0], dst=dst)
            return
        if test in UNORDERED or test == "nan":
            unordered = self.either("or.pred", *[self.is_nan(m) for m in magnitudes],
                                    dst=dst if test == "nan" else None)
            if test == "nan":
                return
        else:
            ordered = self.either("and.pred", *[self.is_number(m) for m in magnitudes],
                                  dst=dst if test == "num" else None)
            if test == "num":
                return
        holds = self.emit(f"setp.{cmp}.s32", self.compare_key(a, magnitudes[0]), self.compare_key(b, magnitudes[-1]))
        if test in UNORDERED:
            self.either("or.pred", holds, unordered, dst=dst)
        else:
            self.either("and.pred", holds, ordered, dst=dst)

    def member(self, x: Reg, runs: list[tuple[int, int]], dst: Reg | None = None):
        """Whether the word in x lies in ``runs`` (bits_where's intervals): one unsigned compare per interval (a
        subtraction first where it starts elsewhere than 0), or'ed. A set that a sign flip maps onto itself (NaN,
        infinity, the classes of testp) is tested on the magnitude, so it is one interval there."""
        if not runs or runs == [(0, WORD)] or runs == [(1, 0)]:
            return self.either("and.pred", bool(runs), dst=dst)
        halves = [(lo, hi) for lo, hi in runs if lo <= hi]
        positive = [(lo, hi) for lo, hi in halves if hi < SIGN]
        if positive and halves == runs and len(positive) < len(runs) and sorted(halves) == sorted(
                positive + [(lo | SIGN, hi | SIGN) for lo, hi in positive]):
            x, runs = self.magnitude(x), positive
        found = None
        for i, (lo, hi) in enumerate(runs):
            here = self._in_run(x, lo, hi, dst if i == len(runs) - 1 and found is None else None)
            found = here if found is None else self.emit("or.pred", found, here,
                                                         dst=dst if i == len(runs) - 1 else None)
        return found

    def _in_run(self, x: Reg, lo: int, hi: int, dst: Reg | None):
        size = (hi - lo) & WORD
        if size == 0:
            return self.emit("setp.eq.u32", x, Imm(lo), dst=dst)
        if size == WORD - 1:
            return self.emit("setp.ne.u32", x, Imm((hi + 1) & WORD), dst=dst)
        if lo == 0:
            return self.emit("setp.le.u32", x, Imm(hi), dst=dst)
        if hi == WORD:
            return self.emit("setp.ge.u32", x, Imm(lo), dst=dst)
        return self.emit("setp.le.u32", self.emit("sub.s32", x, Imm(lo)), Imm(size), dst=dst)

    def _testp(self, inst: Instruction) -> None:
        """A class of floats is a set of words: a compare or two of the magnitude."""
        mods = [m for m in inst.modifiers if m != "f32"]
        dst, (x,) = self._operands(inst, 1)
        if len(mods) != 1 or mods[0] not in CLASSES:
            raise _refuse(inst, f"testp takes one of .{', .'.join(CLASSES)}")
        runs = bits_where(lambda bits: CLASSES[mods[0]](_value(bits)), SMALLEST_NORMAL)
        if isinstance(x, Imm):
            self.either("and.pred", any(_within(x.value, run) for run in runs), dst=dst)
        else:
            self.member(x, runs, dst=dst)

    def _min(self, inst: Instruction) -> None:
        self._min_max(inst, "le")

    def _max(self, inst: Instruction) -> None:
        self._min_max(inst, "ge")

    def _min_max(self, inst: Instruction, keeps_first: str) -> None:
        """a where key(a) is at or on the winning side of key(b), else b; a NaN operand's key is moved past every
        float so the other wins, and two NaNs (with .NaN: any) give the canonical NaN."""
        mods = [m for m in inst.modifiers if m != "f32"]
        if mods not in ([], ["NaN"]):
            raise _refuse(inst, f"{inst.base}.f32 with .{', .'.join(mods)}")
        dst, (a, b) = self._operands(inst, 2)
        if isinstance(a, Imm):                  # min / max are commutative bit for bit (no two floats tie)
            a, b = b, a
        if isinstance(b, Imm):
            self._min_max_literal(dst, a, b.value, keeps_first, propagate_nan=bool(mods))
            return
        loser = BELOW_ALL if keeps_first == "ge" else ABOVE_ALL
        nan_a, nan_b = self.is_nan(self.magnitude(a)), self.is_nan(self.magnitude(b))
        key_a = self.replace_where(self.total_key(a), Imm(loser), nan_a)
        key_b = self.replace_where(self.total_key(b), Imm(loser), nan_b)
        first = self.emit(f"setp.{keeps_first}.s32", key_a, key_b)
        nan = self.emit("or.pred" if mods else "and.pred", nan_a, nan_b)
        self.emit("selp.b32", a, b, first, dst=dst)
        self.replace_where(dst, Imm(CANONICAL_NAN), nan)

    def _min_max_literal(self, dst: Reg, x, c: int, keeps_first: str, propagate_nan: bool) -> None:
        """min / max of x and the float literal c: x where x wins (a set of x's words), else c; a NaN c makes every
        non-NaN x win, and the canonical NaN stands for c."""
        c_nan = math.isnan(_value(c))
        if isinstance(x, Imm) or c_nan and propagate_nan:
            self.emit("mov.b32", Imm(CANONICAL_NAN if c_nan and propagate_nan else
                                     self._reference_min_max(x.value, c, keeps_first, propagate_nan)), dst=dst)
            return
        wins = COMPARISONS[keeps_first]

        def x_wins(bits: int) -> bool:
            return not math.isnan(_value(bits)) and (c_nan or wins(_total(bits), _total(c)))
        self.emit("selp.b32", x, Imm(CANONICAL_NAN if c_nan else c),
                  self.member(x, bits_where(x_wins, c)), dst=dst)
        if propagate_nan:
            self.replace_where(dst, Imm(CANONICAL_NAN), self.member(x, bits_where(lambda b: math.isnan(_value(b)))))

    @staticmethod
    def _reference_min_max(x: int, c: int, keeps_first: str, propagate_nan: bool) -> int:
        """min / max of two literals, folded here."""
        nans = [math.isnan(_value(v)) for v in (x, c)]
        if all(nans) or propagate_nan and any(nans):
            return CANONICAL_NAN
        if any(nans):
            return c if nans[0] else x
        return x if COMPARISONS[keeps_first](_total(x), _total(c)) else c

    # -- conversions that need no rounding of a sum: truncf / floorf / ceilf, and (int) / (unsigned) of a float ----
    def _cvt(self, inst: Instruction) -> None:
        """cvt.rzi / rmi / rpi .f32.f32 (truncf, floorf, ceilf) and cvt.rzi / rni / rmi / rpi to an integer ((int)x,
        __float2int_rn / _rd / _ru): bit work on the exponent and the fraction; cvt.rn.f32.s32 / u32 ((float)i) and of the narrow integers
        (s16 / u16 / s8 / u8, widened first): _from_integer. Other conversions are refused."""
        mods = inst.modifiers
        if "sat" in mods:
            raise _refuse(inst, "the machine has no floating point: a conversion that saturates (.sat: __saturatef, "
                                "and the clamp fminf(fmaxf(x, 0.0f), 1.0f), which NVRTC writes so) is not built, as "
                                "the sign it gives -0 is a GPU's to tell and none has checked it")
        dst, (x,) = self._operands(inst, 1)
        if mods in (("rzi", "f32", "f32"), ("rmi", "f32", "f32"), ("rpi", "f32", "f32")):
            self._round_to_integer(dst, x, mods[0])
        elif mods == ("rni", "f32", "f32"):
            self._round_to_even(dst, x)
        elif mods in (("rzi", "s32", "f32"), ("rzi", "u32", "f32"), ("rni", "s32", "f32"), ("rni", "u32", "f32")):
            self._to_integer(dst, x, signed=mods[1] == "s32", nearest=mods[0] == "rni")
        elif mods[0] in ROUNDINGS and mods[1:] in (("f32", "s32"), ("f32", "u32")):
            # (float)i, and __int2float_rz / _rd / _ru (the directed roundings of the same sequence)
            self._from_integer(dst, x, signed=mods[2] == "s32", mode=mods[0])
        elif mods[0] in ("rzi", "rni") and mods[1] in WIDE_INTEGERS and mods[2] == "f32":
            self._to_wide_integer(dst, x, signed=mods[1] == "s64", nearest=mods[0] == "rni")
        elif mods[0] in ("rmi", "rpi") and mods[1] in ("s32", "u32") + NARROW_INTEGERS + WIDE_INTEGERS and \
                mods[2] == "f32":
            # __float2int_rd / _ru: floorf / ceilf (an integer, exact), then toward zero, saturated as PTX says
            whole = self.temp()
            self._round_to_integer(whole, x, mods[0])
            if mods[1] in NARROW_INTEGERS:
                self._to_narrow_integer(dst, whole, mods[1], nearest=False)
            elif mods[1] in WIDE_INTEGERS:
                self._to_wide_integer(dst, whole, signed=mods[1] == "s64")
            else:
                self._to_integer(dst, whole, signed=mods[1] == "s32")
        elif mods[0] in ("rzi", "rni") and mods[1] in NARROW_INTEGERS and mods[2] == "f32":
            self._to_narrow_integer(dst, x, mods[1], nearest=mods[0] == "rni")
        elif mods[0] in ROUNDINGS and mods[1] == "f32" and mods[2] in WIDE_INTEGERS:
            # (float)i of a size_t or long long that is an int or unsigned widened (size_t i = threadIdx.x): its low
            # word, converted as what it was
            widened = self._widened(x, mods[2])
            if widened is None:
                error = _refuse(inst, f"(float) of a 64-bit integer runs where every write of it widens a 32-bit "
                                      f"value (cvt.u64.u32 or cvt.s64.s32: size_t i = threadIdx.x), or of one kept "
                                      f"as a pair of words (qwengpu.lowering.pairs); this .{mods[2]} may hold more "
                                      f"than its low word, which is all a register of the machine holds: compute it "
                                      "as an int or unsigned")
                # as a pair of words (lowering.pairs) its high word is there: the lowering tries again with it
                source = inst.operands[1]       # (x may be the value it holds: _operands)
                error.high_words = frozenset({source.name}) if isinstance(source, Reg) else frozenset()
                raise error
            self._from_integer(dst, self.emit("cvt.u32.u64", x), signed=widened == "s", mode=mods[0])
        elif mods[0] in ROUNDINGS and mods[1] == "f32" and mods[2] in NARROW_INTEGERS:
            # (float) of a char or short (NVRTC: cvt.rn.f32.s16 / u16 of its 16-bit register): widened by the
            # integer lowering's own cvt, then converted as an int (exact in every rounding: 16 bits fit)
            signed = mods[2].startswith("s")
            wide = self.emit(f"cvt.{'s' if signed else 'u'}32.{mods[2]}", x)
            self._from_integer(dst, wide, signed=signed)
        else:
            raise _refuse(inst, "the machine has no floating point: of the conversions of float32, cvt.rzi / rmi / "
                                "rpi / rni .f32.f32 (truncf, floorf, ceilf, rintf), cvt.rzi / rmi / rpi / rni to "
                                ".s32 / .u32 / .s16 / .u16 / .s8 / .u8 ((int)x, __float2int_rn / _rd / _ru, ...) and "
                                "to .s64 / .u64 (their low word: (long long)x, lrintf), and cvt.rn / rz / rm / rp "
                                ".f32 of a 32-, 16- or 8-bit integer (or of a 64-bit one widened from it) run; "
                                "conversions of doubles and of PTX's own half types other than cvt.f32.f16 / .bf16 "
                                "and cvt.rn.f16 / .bf16 .f32 are not built (qwengpu/KERNELS.md)")

    def _widened(self, x, kind: str) -> str | None:
        """How a 64-bit register of type ``kind`` (s64 / u64) holds a 32-bit value, where every instruction that
        writes it widens one (NVRTC's ``cvt.u64.u32`` of ``size_t i = threadIdx.x``, ``cvt.s64.s32`` of
        ``(long long)n``): "u" zero-extended (its value is its low word, unsigned), "s" sign-extended and read as
        signed (its low word as an int); None where the high word may hold more (then the conversion is refused:
        the machine keeps a 64-bit register's low word only)."""
        if not isinstance(x, Reg) or not self.definitions.get(x.name):
            return None
        found = set()
        for inst in self.definitions[x.name]:
            mods = inst.modifiers
            if inst.base != "cvt" or len(mods) != 2 or mods[0] not in WIDE_INTEGERS or mods[1] not in (
                    "s32", "u32", "s16", "u16", "s8", "u8"):
                return None
            found.add("s" if mods[1][0] == "s" else "u")
        if found == {"u"}:
            return "u"
        return "s" if found == {"s"} and kind == "s64" else None

    def _half_conversion(self, inst: Instruction) -> None:
        """cvt.f32.f16 / .bf16 (exact) and cvt.rn.f16 / .bf16 .f32 (to nearest even), the half in a b16 register.
        A NaN becomes the canonical NaN of its new width, as NVIDIA's float unit writes NaN results."""
        dst, (x,) = self._operands(inst, 1)
        if inst.modifiers[0] == "f32":
            word = self.emit("cvt.u32.u16", x)
            self._from_half(dst, word, inst.modifiers[1])
        else:
            half = self.temp()
            self._to_half(half, x, inst.modifiers[1])
            self.emit("cvt.u16.u32", half, dst=dst)

    def _from_half(self, dst: Reg, word: Reg, kind: str) -> None:
        """The float32 of a half's bits (in a word's low 16): bfloat16 is float32's top half; a float16's exponent
        is rebased (a subnormal's significand converted as an integer, then scaled by 2^-24: exact)."""
        magnitude = self.emit("and.b32", word, Imm(0x7FFF))
        sign = self.emit("shl.b32", self.emit("and.b32", word, Imm(0x8000)), Imm(16))
        if kind == "bf16":
            self.emit("shl.b32", word, Imm(16), dst=dst)
            self.replace_where(dst, Imm(CANONICAL_NAN), self.emit("setp.gt.u32", magnitude, Imm(0x7F80)))
            return
        # normal: exponent + 112, the 10 fraction bits at the top of float32's 23
        self.emit("add.s32", self.emit("shl.b32", magnitude, Imm(13)), Imm(112 << 23), dst=dst)
        subnormal = self.temp()
        self._from_integer(subnormal, magnitude, signed=False)          # (float)m, m < 1024: exact
        self.where(self.emit("setp.lt.u32", magnitude, Imm(0x0400)), "sub.s32", dst, subnormal, Imm(24 << 23))
        self.replace_where(dst, Imm(0), self.emit("setp.eq.u32", magnitude, Imm(0)))
        self.replace_where(dst, Imm(INFINITY), self.emit("setp.ge.u32", magnitude, Imm(0x7C00)))
        self.emit("or.b32", dst, sign, dst=dst)                        # (float)0 is +0: the sign makes -0
        self.replace_where(dst, Imm(CANONICAL_NAN), self.emit("setp.gt.u32", magnitude, Imm(0x7C00)))

    def _to_half(self, dst: Reg, x, kind: str) -> None:
        """A float32 rounded to nearest even as a half's 16 bits: bfloat16 keeps float32's exponent (add half a unit
        less one plus the units bit, keep the top 16 bits: a carry runs into the exponent, to infinity at the top);
        float16 rebases it, 65520 and above overflow to infinity, below 2^-14 the significand is shifted into a
        subnormal and rounded there (a carry gives the smallest normal, as it should)."""
        magnitude = self.magnitude(x)
        nan = self.is_nan(magnitude)
        if kind == "bf16":
            units = self.emit("and.b32", self.emit("shr.u32", x, Imm(16)), Imm(1))
            rounded = self.emit("add.s32", self.emit("add.s32", x, Imm(0x7FFF)), units)
            self.emit("shr.u32", rounded, Imm(16), dst=dst)
            self.replace_where(dst, Imm(HALF_NAN), nan)
            return
        sign = self.emit("and.b32", self.emit("shr.u32", x, Imm(16)), Imm(0x8000))
        units = self.emit("and.b32", self.emit("shr.u32", magnitude, Imm(13)), Imm(1))
        normal = self.emit("add.s32", self.emit("add.s32", magnitude, Imm(0x0FFF)), units)
        self.emit("sub.s32", self.emit("shr.u32", normal, Imm(13)), Imm(112 << 10), dst=dst)
        # below 2^-14: m = the significand (hidden bit set) shifted right by 126 - exponent (14..; 32 or more: 0)
        significand = self.emit("or.b32", self.emit("and.b32", magnitude, Imm(0x007FFFFF)), Imm(0x00800000))
        shift = self.emit("sub.s32", Imm(126), self.emit("shr.u32", magnitude, Imm(23)))
        kept = self.emit("shr.u32", significand, shift)
        half = self.emit("shl.b32", Imm(1), self.emit("sub.s32", shift, Imm(1)))
        bias = self.emit("add.s32", self.emit("sub.s32", half, Imm(1)), self.emit("and.b32", kept, Imm(1)))
        small = self.emit("shr.u32", self.emit("add.s32", significand, bias), shift)
        self.replace_where(dst, small, self.emit("setp.lt.u32", magnitude, Imm(0x38800000)))
        self.replace_where(dst, Imm(0x7C00), self.emit("setp.ge.u32", magnitude, Imm(0x477FF000)))
        self.emit("or.b32", dst, sign, dst=dst)
        self.replace_where(dst, Imm(HALF_NAN), nan)

    def _exponent_shift(self, magnitude) -> Reg:
        """150 - exponent: how many of the 23 fraction bits lie below the units (<= 0: none, the float is an
        integer already; > 23: all, |x| < 1)."""
        return self.emit("sub.s32", Imm(150), self.emit("shr.u32", magnitude, Imm(23)))

    def _round_to_integer(self, dst: Reg, x, mode: str) -> None:
        """The float's fraction bits cleared (truncf); floorf / ceilf then add one unit to the magnitude of a
        negative / positive number that had any (IEEE's magnitudes are ordered words, so the carry runs into the
        exponent as it should: -1.5 -> -2.0), and |x| < 1 goes to -1.0 / 1.0. A NaN gives the canonical NaN."""
        magnitude = self.magnitude(x)
        shift = self.emit("max.s32", self._exponent_shift(magnitude), Imm(0))
        below_one = self.emit("setp.lt.u32", magnitude, Imm(0x3F800000))
        keep = self.emit("or.b32", self.emit("shl.b32", Imm(WORD), shift), Imm(SIGN))
        self.replace_where(keep, Imm(SIGN), below_one)              # |x| < 1: the sign alone (a zero)
        if mode == "rzi":
            self.emit("and.b32", x, keep, dst=dst)
        else:
            truncated = self.emit("and.b32", x, keep)
            fraction = self.emit("setp.ne.u32", self.emit("and.b32", x, self.emit("not.b32", keep)), Imm(0))
            # floorf moves a negative number with a fraction away from zero, ceilf a positive one
            side = self.emit("setp.lt.s32" if mode == "rmi" else "setp.gt.s32", x, Imm(0))
            away = self.emit("and.pred", fraction, side)
            self.emit("selp.b32", self.emit("add.s32", truncated, self.emit("shl.b32", Imm(1), shift)), truncated,
                      away, dst=dst)
            one = 0xBF800000 if mode == "rmi" else 0x3F800000     # floorf(-0.3) = -1, ceilf(0.3) = 1
            self.replace_where(dst, Imm(one), self.emit("and.pred", away, below_one))
        self.replace_where(dst, Imm(CANONICAL_NAN), self.is_nan(magnitude))

    def _round_to_even(self, dst: Reg, x) -> None:
        """rintf / nearbyintf (cvt.rni.f32.f32): to the nearest integer, ties to even, a float. On the word itself:
        with k = 150 - exponent fraction bits (0 for |x| >= 2^23, an integer already, an infinity or a NaN), add
        2^(k-1) - 1 plus the units bit, then clear the k bits (a carry runs into the exponent: 1.5 -> 2.0; for
        k = 23 the units bit is the hidden one, and the exponent's lowest bit, 127's, is 1 as it is). |x| < 1 (k > 23)
        gives 1.0 above one half, else 0, with x's sign. A NaN gives the canonical NaN."""
        magnitude = self.magnitude(x)
        shift = self.emit("max.s32", self._exponent_shift(magnitude), Imm(0))
        keep = self.emit("shl.b32", Imm(WORD), shift)
        fraction = self.emit("not.b32", keep)
        units = self.emit("and.b32", self.emit("shr.u32", x, shift), self.emit("min.u32", fraction, Imm(1)))
        bias = self.emit("add.s32", self.emit("shr.u32", fraction, Imm(1)), units)      # 2^(k-1) - 1 + units
        self.emit("and.b32", self.emit("add.s32", x, bias), keep, dst=dst)
        self.where(self.emit("setp.lt.u32", magnitude, Imm(0x3F800000)), "and.b32", dst, x, Imm(SIGN))
        above_half = self.emit("setp.lt.u32", self.emit("sub.s32", magnitude, Imm(0x3F000001)),
                               Imm(0x3F800000 - 0x3F000001))                        # 0.5 < |x| < 1
        self.where(above_half, "or.b32", dst, dst, Imm(0x3F800000))
        self.replace_where(dst, Imm(CANONICAL_NAN), self.is_nan(magnitude))

    def _to_integer(self, dst: Reg, x, signed: bool, nearest: bool = False) -> None:
        """(int)x / (unsigned)x, PTX's cvt.rzi: toward zero, saturated to the type's range, a NaN gives 0. The
        mantissa with its hidden bit shifted by the exponent (a shift of 32 or more gives 0 on the machine, as in
        PTX), then the sign. ``nearest``: cvt.rni (__float2int_rn / __float2uint_rn), to the nearest integer, ties
        to even: where the mantissa is shifted right by k, 2^(k-1) - 1 plus the units bit is added first (at most
        2^30 + 2^24: no carry out); saturated and NaN as cvt.rzi (a float at or above 2^23 is an integer already)."""
        magnitude = self.magnitude(x)
        whole = self._whole_word(magnitude, nearest)
        if signed:
            sign = self.emit("shr.s32", x, Imm(31))
            self.emit("sub.s32", self.emit("xor.b32", whole, sign), sign, dst=dst)
            # |x| >= 2^31: INT_MAX, or INT_MIN for a negative x
            self.replace_where(dst, self.emit("xor.b32", sign, Imm(0x7FFFFFFF)),
                               self.emit("setp.ge.u32", magnitude, Imm(0x4F000000)))
        else:
            negative = self.emit("setp.lt.s32", x, Imm(0))
            self.emit("mov.b32", whole, dst=dst)
            self.replace_where(dst, Imm(WORD), self.emit("setp.ge.u32", magnitude, Imm(0x4F800000)))   # >= 2^32
            self.replace_where(dst, Imm(0), negative)
        self.replace_where(dst, Imm(0), self.is_nan(magnitude))

    def _whole_word(self, magnitude, nearest: bool) -> Reg:
        """The low word of the integer part of |x| (rounded to nearest even with ``nearest``): the mantissa with its
        hidden bit shifted by the exponent; a shift of 32 or more gives 0 on the machine, as in PTX, so |x| >= 2^55,
        which has no bits in the low word, gives 0 too."""
        shift = self._exponent_shift(magnitude)
        mantissa = self.emit("or.b32", self.emit("and.b32", magnitude, Imm(0x007FFFFF)), Imm(0x00800000))
        up = self.emit("shl.b32", mantissa, self.emit("neg.s32", shift))          # exponent >= 150
        if nearest:     # exponent < 150: rounded; otherwise the shift is 2^32 - (exponent - 150) and gives 0
            fraction = self.emit("sub.s32", self.emit("shl.b32", Imm(1), shift), Imm(1))
            units = self.emit("and.b32", self.emit("shr.u32", mantissa, shift),
                              self.emit("min.u32", fraction, Imm(1)))     # none where the shift is 0
            bias = self.emit("add.s32", self.emit("shr.u32", fraction, Imm(1)), units)
            down = self.emit("shr.u32", self.emit("add.s32", mantissa, bias), shift)
        else:
            down = self.emit("shr.u32", mantissa, shift)                            # exponent < 150
        return self.emit("or.b32", up, down)

    def _to_wide_integer(self, dst: Reg, x, signed: bool, nearest: bool = False) -> None:
        """The low word of PTX's cvt.rzi / rni .s64 / .u64 .f32 (``(long long)x``, ``llrintf``, ``int k =
        lrintf(x)``): |x|'s whole part's low word (``_whole_word``), negated for a negative x, saturated as PTX says
        (signed, |x| >= 2^63: the low word of INT64_MAX, all ones, or of INT64_MIN, 0; unsigned: 2^64 or more all
        ones, below 0 zero), a NaN 0. The machine holds a 64-bit register's low word; these instructions say
        nothing of the high word, so the integer lowering refuses what reads it (a 64-bit compare or store)."""
        magnitude = self.magnitude(x)
        whole = self._whole_word(magnitude, nearest)
        if signed:
            sign = self.emit("shr.s32", x, Imm(31))
            self.emit("sub.s32", self.emit("xor.b32", whole, sign), sign, dst=dst)
            self.replace_where(dst, self.emit("xor.b32", sign, Imm(WORD)),
                               self.emit("setp.ge.u32", magnitude, Imm(0x5F000000)))      # |x| >= 2^63
        else:
            self.emit("mov.b32", whole, dst=dst)
            self.replace_where(dst, Imm(WORD), self.emit("setp.ge.u32", magnitude, Imm(0x5F800000)))   # >= 2^64
            self.replace_where(dst, Imm(0), self.emit("setp.lt.s32", x, Imm(0)))
        self.replace_where(dst, Imm(0), self.is_nan(magnitude))

    def _to_narrow_integer(self, dst: Reg, x, kind: str, nearest: bool) -> None:
        """PTX's cvt.rzi / rni .s16 / u16 / s8 / u8 .f32: as to an int, then saturated to the narrow type's range
        (PTX saturates every float-to-integer conversion to its destination type; NVRTC writes C's (short)x through
        an int instead, whose low bits the store keeps), narrowed by the integer lowering's own cvt."""
        signed, bits = kind.startswith("s"), int(kind[1:])
        wide = self.temp()
        self._to_integer(wide, x, signed=signed, nearest=nearest)
        if signed:
            low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            wide = self.emit("min.s32", self.emit("max.s32", wide, Imm(low & WORD)), Imm(high))
        else:       # a negative float is 0 already
            wide = self.emit("min.u32", wide, Imm((1 << bits) - 1))
        self.emit(f"cvt.{kind}.{kind[0]}32", wide, dst=dst)

    # -- arithmetic that rounds: add, sub, mul, int to float -----------------------------------------------------------
    # Straight-line integer code (no branches: a float op is a few dozen of the machine's ops either way, and every
    # lane runs the same ones). A step that applies on some lanes only is one guarded instruction writing a register
    # of the sequence in place (the machine's predicated op: 1 op, where a selp costs 2); a literal operand folds
    # here (``op``), so x + 1.0f skips the work on the literal.
    def op(self, opcode: str, *operands, dst: Reg | None = None):
        """``emit``, folded here where every operand is a literal: then an Imm (or a mov of it into dst)."""
        if all(isinstance(o, Imm) for o in operands):
            value = fold(Instruction(opcode, (), None, False, 0, ""), [o.value & WORD for o in operands])
            if value is not None:
                if dst is None:
                    return Imm(value)
                return self.emit("mov.pred" if opcode.startswith("setp") else "mov.b32", Imm(value), dst=dst)
        return self.emit(opcode, *operands, dst=dst)

    def where(self, guard, opcode: str, target, *operands):
        """target = opcode(operands) on the lanes where the predicate guard holds, else target as it was: one
        guarded instruction writing target, a register of this sequence (a literal target is moved into one
        first). Returns the register (or the literal, where the guard is one)."""
        if isinstance(guard, Imm):
            if not guard.value:
                return target
            return self.op(opcode, *operands, dst=target if isinstance(target, Reg) else None)
        if isinstance(target, Imm):
            target = self.emit("mov.b32", target)
        inst = self.inst
        self.body.append(Instruction(opcode, (target,) + tuple(operands), guard, False, inst.line, inst.text))
        return target

    def _rounding(self, inst: Instruction, operands: int) -> tuple:
        """The rounding (``ROUNDINGS``: ``.rn``, PTX's default without a modifier, ``.rz``, ``.rm``, ``.rp``), the
        destination and the sources of add / sub / mul .f32; .sat is refused."""
        mods = [m for m in inst.modifiers if m != "f32"]
        if mods not in [[]] + [[r] for r in ROUNDINGS]:
            named = ", ".join(f".{m}" for m in mods)
            raise _refuse(inst, f"the machine has no floating point: {inst.base}.f32 runs with a rounding modifier "
                                f"(.rn, .rz, .rm, .rp) and without .sat, not with {named}")
        return (mods or ["rn"])[0], *self._operands(inst, operands)

    def _add(self, inst: Instruction) -> None:
        mode, dst, (a, b) = self._rounding(inst, 2)
        self._sum(dst, a, b, mode)

    def _sub(self, inst: Instruction) -> None:
        """a - b is a + (-b): b's sign bit flipped (a NaN's too: the result is the canonical NaN anyway)."""
        mode, dst, (a, b) = self._rounding(inst, 2)
        self._sum(dst, a, self.op("xor.b32", b, Imm(SIGN)), mode)

    def _sum(self, dst: Reg, a, b, mode: str = "rn") -> None:
        """IEEE binary32 a + b, rounding to nearest even, subnormals kept, as NVIDIA's non-FTZ float unit: the
        algorithm of qccl/kernels/fprim.cu's float add in one sequence.

        The larger magnitude X and the smaller Y; their significands with the hidden bit (none for a subnormal,
        whose exponent counts as 1) at bit 29, six guard bits below; Y's shifted right by the exponent difference
        with a sticky bit (a bit shifted out sets bit 0), negated where the signs differ, and added. The sum is
        normalised to bit 30 by a binary search of its leading zeros (at most exponent - 1 of them: a floor bit
        stops the search where the result becomes subnormal), rounded to nearest even at bit 7, and the exponent
        added to it (a carry of the rounding runs into the exponent; overflow is clamped to infinity). The sign is
        the larger magnitude's; x + (-x) is +0; an infinity or a NaN operand gives itself, inf - inf and any NaN
        the canonical NaN. The special cases are settled early in the sign word (as ``_quotient`` does), so that only
        it, the exponent and the working words are live while the sum is normalised: 1 for x + (-x) (the result is
        then +0), 0x7fffffff for a NaN (or'ed with any magnitude, the canonical NaN).

        ``mode``: the rounding (``_round``); toward minus infinity x + (-x) is -0, as IEEE says."""
        ab = self.op("xor.b32", a, b)
        ma, mb = self.magnitude(a), self.magnitude(b)
        big, small = self.op("max.u32", ma, mb), self.op("min.u32", ma, mb)
        sign = self.op("and.b32", a, Imm(SIGN))                      # the larger magnitude's (first: a, b die)
        sign = self.where(self.op("setp.lt.u32", ma, mb), "and.b32", sign, b, Imm(SIGN))
        # the exponents (at least 1) in place: exponent << 23, so the significand is magnitude - that + 2^23 (each
        # magnitude's work done before the other's, so that few words are live at once)
        big_exp = self.op("max.u32", self.op("and.b32", big, Imm(INFINITY)), Imm(SMALLEST_NORMAL))
        big_sig = self.op("shl.b32", self.op("add.s32", self.op("sub.s32", big, big_exp), Imm(SMALLEST_NORMAL)),
                          Imm(6))
        # x + (-x): +0, marked by a sign word of 1; inf - inf (big + 1 above infinity) and a NaN: the canonical NaN
        opposite = self.op("setp.eq.u32", ab, Imm(SIGN))
        sign = self.where(opposite, "mov.b32", sign, Imm(1))
        big = self.where(opposite, "add.s32", big, big, Imm(1))
        sign = self.where(self.op("setp.gt.u32", big, Imm(INFINITY)), "mov.b32", sign, Imm(CANONICAL_NAN))
        small_exp = self.op("max.u32", self.op("and.b32", small, Imm(INFINITY)), Imm(SMALLEST_NORMAL))
        shift = self.op("shr.u32", self.op("sub.s32", big_exp, small_exp), Imm(23))
        small_sig = self.op("shl.b32", self.op("add.s32", self.op("sub.s32", small, small_exp),
                                               Imm(SMALLEST_NORMAL)), Imm(6))
        # the smaller significand aligned (a shift of 32 or more gives 0), the bits shifted out kept as bit 0
        aligned = self.op("shr.u32", small_sig, shift)
        inexact = self.op("setp.ne.u32", self.op("shl.b32", aligned, shift), small_sig)
        aligned = self.where(inexact, "or.b32", aligned, aligned, Imm(1))
        aligned = self.where(self.op("setp.lt.s32", ab, Imm(0)), "sub.s32", aligned, Imm(0), aligned)  # signs differ
        total = self.op("add.s32", big_sig, aligned)                  # < 2^31: the leading bit at 30 at most
        # normalise: leading zeros down to bit 30, at most exponent - 1 (the floor bit); (v - t) >> 31 is v < t
        exponent = self.op("shr.u32", big_exp, Imm(23))
        v = self.op("or.b32", total, self.op("shr.u32", Imm(1 << 30), exponent))
        lead = self.op("shl.b32", self.op("shr.u32", self.op("sub.s32", v, Imm(1 << 15)), Imm(31)), Imm(4))
        v = self.op("shl.b32", v, lead)
        for k in (8, 4, 2, 1):
            below = self.op("setp.lt.u32", v, Imm(1 << (31 - k)))
            if k > 1:
                v = self.where(below, "shl.b32", v, v, Imm(k))
            lead = self.where(below, "add.s32", lead, lead, Imm(k))
        normal = self.op("shl.b32", total, lead)
        toward = self._toward(mode, sign)
        rounded = self._round(normal, 7, mode, toward)
        # (exponent - lead) << 23 plus the rounded significand, whose hidden bit adds one to the exponent; an
        # infinite or NaN operand (its exponent field all ones) gives infinity, a NaN's sign word makes it the NaN
        infinite = self.op("setp.ge.u32", big_exp, Imm(INFINITY))
        magnitude = self.op("add.s32", self.op("sub.s32", big_exp, self.op("shl.b32", lead, Imm(23))), rounded)
        magnitude = self.op("min.u32", magnitude, self._overflow(mode, toward))
        magnitude = self.where(infinite, "mov.b32", magnitude, Imm(INFINITY))
        self.op("or.b32", magnitude, sign, dst=dst)
        self.where(self.op("setp.eq.u32", sign, Imm(1)), "mov.b32", dst, Imm(SIGN if mode == "rm" else 0))

    def _toward(self, mode: str, sign):
        """For rounding toward minus / plus infinity (``rm`` / ``rp``): the predicate that the result's sign (bit 31
        of the word ``sign``) is that infinity's, which ``_round`` and ``_overflow`` read; None for the others."""
        if mode not in ("rm", "rp"):
            return None
        return self.op("setp.lt.s32" if mode == "rm" else "setp.ge.s32", sign, Imm(0))

    def _round(self, x, bits: int, mode: str, toward=None):
        """The magnitude x >> bits rounded by ``mode``: to nearest even (``rn``), toward zero (``rz``: the bits cut),
        toward minus / plus infinity (``rm`` / ``rp``: one more where bits are cut and ``toward``, ``_toward``'s
        predicate, holds). x + 2^bits must not overflow."""
        if mode == "rn":
            return self._round_nearest_even(x, bits)
        truncated = self.op("shr.u32", x, Imm(bits))
        if mode == "rz":
            return truncated
        inexact = self.op("setp.ne.u32", self.op("and.b32", x, Imm((1 << bits) - 1)), Imm(0))
        return self.where(self.op("and.pred", inexact, toward), "add.s32", truncated, truncated, Imm(1))

    def _overflow(self, mode: str, toward=None):
        """The largest magnitude a finite result rounds to: infinity, except toward zero, and toward the infinity
        of the other sign (``toward`` false: ``_toward``), where a result too large gives the largest finite float
        0x7f7fffff."""
        if mode == "rn":
            return Imm(INFINITY)
        if mode == "rz":
            return Imm(LARGEST)
        return self.op("selp.b32", Imm(INFINITY), Imm(LARGEST), toward)

    def _round_nearest_even(self, x, bits: int):
        """x >> bits rounded to nearest, ties to even (x + 2^bits must not overflow)."""
        odd = self.op("and.b32", self.op("shr.u32", x, Imm(bits)), Imm(1))
        return self.op("shr.u32", self.op("add.s32", self.op("add.s32", x, odd), Imm((1 << (bits - 1)) - 1)),
                       Imm(bits))

    def _mul(self, inst: Instruction) -> None:
        """IEEE binary32 a * b, rounding to nearest even, subnormals kept, as NVIDIA's non-FTZ float unit.

        The 48-bit product of the significands (``_product``): its top 32 bits, its low 16 bits as a sticky bit;
        it is shifted right to bit 30 (one more where it reached bit 47, more where the result is subnormal) with a
        sticky bit, rounded to nearest even at bit 7, and the exponent added to it (overflow clamped to infinity). The sign is the xor of the signs (zeros and infinities
        too); 0 * inf and a NaN operand give the canonical NaN."""
        mode, dst, (a, b) = self._rounding(inst, 2)
        sign = self.op("and.b32", self.op("xor.b32", a, b), Imm(SIGN))
        big, small, top, bottom, exponents = self._product(self.magnitude(a), self.magnitude(b))
        top = self.where(self.op("setp.ne.u32", bottom, Imm(0)), "or.b32", top, top, Imm(1))  # bits 15..0: sticky
        # value = top * 2^(exponents - 283)
        magnitude = self._pack(top, exponents, mode=mode, sign=sign)
        self._finish(dst, magnitude, big, small, sign)

    def _fma(self, inst: Instruction) -> None:
        """fma.rn / rz / rm / rp .f32 (CUDA's ``fmaf``, ``__fmaf_rn``, ..., and ``mad`` with a rounding, the same
        instruction): a * b + c rounded once (``_fused``)."""
        if not {"rn", "rz", "rm", "rp"} & set(inst.modifiers):
            raise _refuse(inst, f"{inst.base}.f32 without a rounding modifier is not a fused multiply-add of sm_20 "
                                "and later; write .rn")
        mode, dst, (a, b, c) = self._rounding(inst, 3)
        self._fused(dst, a, b, c, mode)

    _mad = _fma

    def _fused(self, dst: Reg, a, b, c, mode: str) -> None:
        """IEEE binary32 a * b + c with one rounding (by ``mode``), subnormals kept.

        The exact 48-bit product (``_product``) sits in a 64-bit window of two words, its leading bit at 60 or 61;
        c's significand is placed by the difference of the exponents: where its leading bit would land above 61 it is
        put at 61 and the product shifted right instead, a shifted-out bit kept as a sticky bit 0 (only the smaller
        operand loses bits, and 38 bits below c's significand are guard bits). The two are added or subtracted as
        64-bit numbers (a negative difference, which only an exact alignment gives, negated with the sign turned),
        normalised to bit 62 by the leading zeros of the high word (the low word moved up first where the high one
        is 0), and the high word, the low one as a sticky bit, rounded like a product (``_pack``). Special cases
        are settled first into a word and a flag: a NaN operand, inf * 0 and inf - inf give the canonical NaN; an
        infinite product its infinity; an infinite c itself; a zero product c, or a zero of the signs' sum (-0 only
        where both are negative, or toward minus infinity where one is); an exact cancellation +0 (-0 toward minus
        infinity)."""
        sign_p = self.op("and.b32", self.op("xor.b32", a, b), Imm(SIGN))
        sign_c = self.op("and.b32", c, Imm(SIGN))
        ma, mb, mc = self.magnitude(a), self.magnitude(b), self.magnitude(c)
        # -- the special cases, lowest priority first: (special, value)
        zero_p = self.op("or.pred", self.op("setp.eq.u32", ma, Imm(0)), self.op("setp.eq.u32", mb, Imm(0)))
        inf_p = self.op("or.pred", self.op("setp.eq.u32", ma, Imm(INFINITY)), self.op("setp.eq.u32", mb, Imm(INFINITY)))
        both = self.op("and.b32", sign_p, sign_c) if mode != "rm" else self.op("or.b32", sign_p, sign_c)
        value = self.op("selp.b32", both, c, self.op("setp.eq.u32", mc, Imm(0)))    # 0 * x + c
        inf_c = self.op("setp.eq.u32", mc, Imm(INFINITY))
        value = self.where(inf_c, "mov.b32", value, c)
        value = self.where(inf_p, "or.b32", value, sign_p, Imm(INFINITY))
        invalid = self.op("or.pred", self.op("and.pred", inf_p, zero_p), self.op("and.pred", inf_p, self.op(
            "and.pred", inf_c, self.op("setp.ne.u32", sign_p, sign_c))))
        for m in (ma, mb, mc):
            invalid = self.op("or.pred", invalid, self.is_nan(m))
        value = self.where(invalid, "mov.b32", value, Imm(CANONICAL_NAN))
        special = self.op("or.pred", self.op("or.pred", zero_p, inf_p), self.op("or.pred", inf_c, invalid))
        # -- the product's significand sp (hi: bits 47..16, lo: bits 15..0 at the top) = sp * 2^(pe - 299)
        _, _, hi, lo, pe = self._product(ma, mb)
        # the window: A = sp << 14, its leading bit at 60 or 61
        a_hi = self.op("shr.u32", hi, Imm(2))
        a_lo = self.op("or.b32", self.op("shl.b32", hi, Imm(30)), self.op("shr.u32", lo, Imm(2)))
        exp_c = self.op("max.u32", self.op("and.b32", mc, Imm(INFINITY)), Imm(SMALLEST_NORMAL))
        sig_c = self.op("add.s32", self.op("sub.s32", mc, exp_c), Imm(SMALLEST_NORMAL))
        # d: where c's significand's lowest bit lands in the window; k: how far A moves right for c's to fit
        d = self.op("sub.s32", self.op("add.s32", self.op("shr.u32", exp_c, Imm(23)), Imm(163)), pe)
        k = self.op("max.s32", self.op("sub.s32", d, Imm(38)), Imm(0))
        d = self.op("sub.s32", d, k)
        # A >> k (0 where k >= 64) with a sticky bit
        back = self.op("sub.s32", Imm(32), k)
        shifted_lo = self.op("or.b32", self.op("or.b32", self.op("shr.u32", a_lo, k), self.op("shl.b32", a_hi, back)),
                             self.op("shr.u32", a_hi, self.op("sub.s32", k, Imm(32))))
        lost = self.op("or.b32", self.op("shl.b32", a_lo, back),
                       self.op("shl.b32", a_hi, self.op("sub.s32", Imm(64), k)))     # the bits below the window
        lost = self.where(self.op("setp.ge.u32", k, Imm(32)), "or.b32", lost, lost, a_lo)
        lost = self.where(self.op("setp.ge.u32", k, Imm(64)), "or.b32", lost, lost, a_hi)
        a_hi = self.op("shr.u32", a_hi, k)
        a_lo = self.where(self.op("setp.ne.u32", lost, Imm(0)), "or.b32", shifted_lo, shifted_lo, Imm(1))
        # C at bit d: shifted left into both words, or right with a sticky bit where d < 0
        c_hi = self.op("or.b32", self.op("shr.u32", sig_c, self.op("sub.s32", Imm(32), d)),
                       self.op("shl.b32", sig_c, self.op("sub.s32", d, Imm(32))))
        c_lo = self.op("shl.b32", sig_c, d)
        right = self.op("neg.s32", d)
        down = self.op("shr.u32", sig_c, right)
        down = self.where(self.op("setp.ne.u32", self.op("shl.b32", down, right), sig_c), "or.b32", down, down, Imm(1))
        c_lo = self.where(self.op("setp.lt.s32", d, Imm(0)), "mov.b32", c_lo, down)
        # add, or subtract where the signs differ (then a negative difference is negated, its sign c's)
        subtract = self.op("setp.ne.u32", sign_p, sign_c)
        c_hi = self.where(subtract, "not.b32", c_hi, c_hi)
        c_lo = self.where(subtract, "neg.s32", c_lo, c_lo)
        c_hi = self.where(self.op("and.pred", subtract, self.op("setp.eq.u32", c_lo, Imm(0))), "add.s32", c_hi, c_hi,
                          Imm(1))                               # two's complement of the 64-bit C
        lo = self.op("add.s32", a_lo, c_lo)
        hi = self.op("add.s32", self.op("add.s32", a_hi, c_hi),
                     self.op("selp.b32", Imm(1), Imm(0), self.op("setp.lt.u32", lo, a_lo)))   # the carry
        negative = self.op("setp.lt.s32", hi, Imm(0))
        sign = self.op("selp.b32", sign_c, sign_p, negative)
        hi = self.where(negative, "not.b32", hi, hi)
        lo = self.where(negative, "neg.s32", lo, lo)
        hi = self.where(self.op("and.pred", negative, self.op("setp.eq.u32", lo, Imm(0))), "add.s32", hi, hi, Imm(1))
        # normalise to bit 62: the low word up first where the high one is 0 (then its bit 31 may be set: one right),
        # else the high word's leading zeros to bit 30 with the low word's bits shifted in; what is left below, a
        # sticky bit
        cancelled = self.op("setp.eq.u32", self.op("or.b32", hi, lo), Imm(0))
        empty = self.op("setp.eq.u32", hi, Imm(0))
        hi = self.where(empty, "mov.b32", hi, lo)
        lo = self.where(empty, "mov.b32", lo, Imm(0))
        shift, x = self.op("selp.b32", Imm(32), Imm(0), empty), hi
        zeros = Imm(0)
        for step in (16, 8, 4, 2, 1):
            below = self.op("setp.lt.u32", x, Imm(1 << (31 - step)))
            x = self.where(below, "shl.b32", x, x, Imm(step))
            zeros = self.where(below, "add.s32", zeros, zeros, Imm(step))
        top = self.op("or.b32", x, self.op("shr.u32", lo, self.op("sub.s32", Imm(32), zeros)))
        rest = self.op("shl.b32", lo, zeros)
        shift = self.op("add.s32", shift, zeros)
        at_31 = self.op("setp.ge.u32", hi, Imm(1 << 31))
        top = self.where(at_31, "shr.u32", top, hi, Imm(1))
        rest = self.where(at_31, "shl.b32", rest, hi, Imm(31))
        shift = self.where(at_31, "sub.s32", shift, shift, Imm(1))
        top = self.where(self.op("setp.ne.u32", rest, Imm(0)), "or.b32", top, top, Imm(1))
        # value = top * 2^(pe + k - shift + 2 - 283): _pack's form
        exponents = self.op("sub.s32", self.op("add.s32", self.op("add.s32", pe, k), Imm(2)), shift)
        magnitude = self._pack(top, exponents, carry=False, mode=mode, sign=sign)
        self.op("or.b32", magnitude, sign, dst=dst)
        self.where(cancelled, "mov.b32", dst, Imm(SIGN if mode == "rm" else 0))
        self.where(special, "mov.b32", dst, value)

    def _product(self, ma, mb) -> tuple:
        """The exact product of two float magnitudes' significands, for ``_mul`` and ``_fused``: the larger
        magnitude X and the smaller Y (only Y can be a subnormal that matters: two subnormals underflow), Y's
        significand normalised to bit 23 (a binary search), X's with its hidden bit; the product's bits 47..16 from
        three 8 x 24-bit products (X's significand in bytes, each exact in a word), its bits 15..0 in the top half
        of a word (of a 32-bit multiply), and ``exponents``: the biased exponents (at least 1) summed, minus 1, less
        Y's normalisation, so that the product is the 48 bits times 2^(exponents - 299)."""
        big, small = self.op("max.u32", ma, mb), self.op("min.u32", ma, mb)
        big_exp = self.op("max.u32", self.op("and.b32", big, Imm(INFINITY)), Imm(SMALLEST_NORMAL))
        big_sig = self.op("add.s32", self.op("sub.s32", big, big_exp), Imm(SMALLEST_NORMAL))
        # Y's exponent - 1, at least 0, in place (<< 23): its significand is Y minus it
        small_exp = self.op("max.s32", self.op("sub.s32", self.op("and.b32", small, Imm(INFINITY)),
                                               Imm(SMALLEST_NORMAL)), Imm(0))
        small_sig = self.op("sub.s32", small, small_exp)
        exponents = self.op("shr.u32", self.op("add.s32", big_exp, small_exp), Imm(23))
        small_sig, exponents = self._normalise(small_sig, exponents, "sub.s32")    # a subnormal Y
        high = self.op("mul.lo.u32", self.op("shr.u32", big_sig, Imm(16)), small_sig)
        middle = self.op("mul.lo.u32", self.op("and.b32", self.op("shr.u32", big_sig, Imm(8)), Imm(0xFF)),
                         small_sig)
        low = self.op("mul.lo.u32", self.op("and.b32", big_sig, Imm(0xFF)), small_sig)
        middle = self.op("add.s32", middle, self.op("shr.u32", low, Imm(8)))
        top = self.op("add.s32", high, self.op("shr.u32", middle, Imm(8)))
        bottom = self.op("shl.b32", self.op("mul.lo.u32", big_sig, small_sig), Imm(16))
        return big, small, top, bottom, exponents

    def _normalise(self, sig, exponents, adjust: str) -> tuple:
        """A significand of at most 24 bits (a subnormal's, or 0) shifted until its leading bit is bit 23, by a
        binary search of its leading zeros, each shift subtracted from (adjust ``sub.s32``) or added to
        (``add.s32``) ``exponents``; a normal float's significand passes unchanged (five compares, folded for a
        literal)."""
        for k in (16, 8, 4, 2, 1):
            below = self.op("setp.lt.u32", sig, Imm(1 << (24 - k)))
            sig = self.where(below, "shl.b32", sig, sig, Imm(k))
            exponents = self.where(below, adjust, exponents, exponents, Imm(k))
        return sig, exponents

    def _pack(self, top, exponents, carry: bool = True, mode: str = "rn", sign=None):
        """The magnitude of the float top * 2^(exponents - 283), rounded to nearest even (or by ``mode``, the
        result's sign in ``sign``: ``_round``), subnormal or clamped to infinity (``_overflow``): top (a bit
        shifted out below kept as bit 0) has its leading bit at 30, or at 31 where ``carry`` (mul's product may
        reach bit 47). It is shifted right to bit 30 (one more where it reached 31, more where
        the result is subnormal) with a sticky bit, rounded at bit 7, and the exponent added to it (a carry of the
        rounding runs into the exponent; overflow is clamped to infinity)."""
        # shifted right to bit 30 (carry: top reached bit 31) and down to the subnormal range where the biased
        # exponent exponents + carry - 126 is below 1; the bits shifted out kept as bit 0
        carry = self.op("shr.u32", top, Imm(31)) if carry else Imm(0)
        shift = self.op("max.s32", self.op("sub.s32", Imm(127), exponents), carry)
        aligned = self.op("shr.u32", top, shift)
        inexact = self.op("setp.ne.u32", self.op("shl.b32", aligned, shift), top)
        aligned = self.where(inexact, "or.b32", aligned, aligned, Imm(1))
        toward = self._toward(mode, sign)
        rounded = self._round(aligned, 7, mode, toward)
        # (biased exponent - 1) << 23 plus the rounded significand (its hidden bit adds the 1): the biased exponent
        # is exponents + carry - 126 where that is 1 or more, else 1 with no hidden bit; in both cases
        # exponents + shift - 127 is the field
        field = self.op("shl.b32", self.op("add.s32", exponents, shift), Imm(23))
        magnitude = self.op("add.s32", self.op("add.s32", field, rounded), Imm(-(127 << 23) & WORD))
        return self.op("min.u32", magnitude, self._overflow(mode, toward))

    def _finish(self, dst: Reg, magnitude, big, small, sign) -> None:
        """dst = the magnitude with the sign, where big / small (the larger and the smaller of two magnitudes) are
        finite and nonzero; else a product's special cases: a zero small gives 0, an infinite or NaN big itself,
        both (inf * 0) the canonical NaN, as does a NaN big."""
        special = self.op("setp.ge.u32", big, Imm(INFINITY))
        zero = self.op("setp.eq.u32", small, Imm(0))
        magnitude = self.where(zero, "mov.b32", magnitude, Imm(0))
        big = self.where(zero, "add.s32", big, big, Imm(1))            # inf * 0: a NaN
        magnitude = self.where(special, "mov.b32", magnitude, big)
        self.op("or.b32", magnitude, sign, dst=dst)
        self.where(self.op("setp.gt.u32", magnitude, Imm(INFINITY)), "mov.b32", dst, Imm(CANONICAL_NAN))

    def _from_integer(self, dst: Reg, x, signed: bool, mode: str = "rn") -> None:
        """(float)i and (float)u, PTX's cvt.rn.f32.s32 / u32: the magnitude normalised by a binary search of its
        leading zeros, rounded to nearest even, the exponent added (a carry of the rounding runs into it); the sign
        of a negative int; 0 gives +0. |i| is at most 2^31: normalised to bit 30 (only INT_MIN has bit 31, and no
        bits below), rounded at bit 7; u normalised to bit 31, rounded at bit 8 without an add that overflows."""
        if signed:
            sign = self.op("and.b32", x, Imm(SIGN))
            value = self.op("abs.s32", x)                   # |INT_MIN| is 2^31, read unsigned
            # (v - t) >> 31 is v < t for v <= 2^31
            lead = self.op("shl.b32", self.op("shr.u32", self.op("sub.s32", value, Imm(1 << 15)), Imm(31)), Imm(4))
            top = 30
        else:
            lead = self.op("selp.b32", Imm(16), Imm(0), self.op("setp.lt.u32", x, Imm(1 << 16)))
            top = 31
        value = self.op("shl.b32", x if not signed else value, lead)
        for k in (8, 4, 2, 1):
            below = self.op("setp.lt.u32", value, Imm(1 << (top + 1 - k)))
            value = self.where(below, "shl.b32", value, value, Imm(k))
            lead = self.where(below, "add.s32", lead, lead, Imm(k))
        if mode != "rn":        # toward zero, or away from it where the sign is that infinity's (_round)
            units = self._round(value, 7 if signed else 8, mode,
                                self._toward(mode, self.op("and.b32", x, Imm(SIGN)) if signed else Imm(0)))
        elif signed:
            units = self._round_nearest_even(value, 7)
        else:       # the 8 bits below the unit, plus the unit's lowest bit, above one half
            units = self.op("shr.u32", value, Imm(8))
            beyond = self.op("add.s32", self.op("and.b32", value, Imm(0xFF)), self.op("and.b32", units, Imm(1)))
            units = self.where(self.op("setp.gt.u32", beyond, Imm(0x80)), "add.s32", units, units, Imm(1))
        # the biased exponent is 127 + top - lead; (exponent - 1) << 23 plus the significand with its hidden bit
        magnitude = self.op("add.s32", self.op("sub.s32", units, self.op("shl.b32", lead, Imm(23))),
                            Imm((126 + top) << 23))
        if signed:
            self.op("or.b32", magnitude, sign, dst=dst)
        else:
            self.op("mov.b32", magnitude, dst=dst)
        self.where(self.op("setp.eq.u32", x, Imm(0)), "mov.b32", dst, Imm(0))

    # -- division and square root: long division and the digit-by-digit root, one bit a step ---------------------------
    def _precise(self, inst: Instruction, what: str) -> tuple:
        """The destination and sources of div / rcp / sqrt .rn.f32 (correctly rounded to nearest even, what CUDA's
        ``a / b``, ``1.0f / x`` and ``sqrtf`` compile to by default); .approx and .full are refused."""
        mods = [m for m in inst.modifiers if m != "f32"]
        if mods != ["rn"]:
            named = ", ".join(f".{m}" for m in mods) or "no rounding modifier"
            why = ("an approximate one's bits are those of the GPU's own hardware approximation, which no integer "
                   "sequence reproduces; compile without --use_fast_math / -prec-div=false / -prec-sqrt=false"
                   if set(mods) & {"approx", "full"} or not mods else "other roundings are not built")
            raise _refuse(inst, f"the machine has no floating point: {what} of floats runs correctly rounded to "
                                f"nearest even (.rn, CUDA's default -prec-div=true / -prec-sqrt=true), not with "
                                f"{named}: {why}")
        return self._operands(inst, 2 if inst.base == "div" else 1)

    def _div(self, inst: Instruction) -> None:
        dst, (a, b) = self._precise(inst, "a division")
        self._quotient(dst, a, b)

    def _rcp(self, inst: Instruction) -> None:
        """rcp.rn.f32 (1.0f / x correctly rounded) is the division of 1.0 by x."""
        dst, (x,) = self._precise(inst, "a reciprocal")
        self._quotient(dst, Imm(0x3F800000), x)

    def _loop(self, trips: int, body) -> None:
        """``body()`` emitted once and run ``trips`` times: a label, the body, a counter counted down and a branch
        back while it is nonzero (a uniform loop on the machine; a SIMT one with the rest under a divergent branch)."""
        counter = self.emit("mov.b32", Imm(trips))
        self.count += 1
        label = Label(f"{self.prefix.replace('%', '$')}loop{self.count}")
        self.body.append(label)
        body()
        self.emit("sub.s32", counter, Imm(1), dst=counter)
        inst = self.inst
        self.body.append(Instruction("bra", (label,), self.emit("setp.ne.u32", counter, Imm(0)), False, inst.line,
                                     inst.text))

    # Quotient bits a trip of the division's loop (None: straight-line) and root bits a trip of the square root's.
    # Straight-line by default: overlays are cut wherever a run of ops fills the ROM, and a loop cut through costs a
    # round of ROM feeds a trip (tests/test_float_arithmetic.py measures both forms).
    DIVISION_LOOP: int | None = None        # 1, 2, 3, 4 or 6 (a divisor of 24, at most 7)
    ROOT_LOOP: int | None = None            # 1, 2 or 11 (a divisor of 22)

    def _quotient(self, dst: Reg, a, b) -> None:
        """IEEE binary32 a / b, correctly rounded to nearest even, subnormals in and out, as NVIDIA's non-FTZ float
        unit (and CUDA's ``a / b``) computes it.

        Both significands with the hidden bit at 23 (a subnormal's normalised, its leading zeros taken from its
        exponent); the dividend's doubled where it is the smaller, so the quotient q lies in [1, 2). Long division
        then finds q's 24 bits below its leading one, one a step, the remainder r < divisor d kept above seven
        quotient bits in one word W = r << 7 | bits: a step is W = 2W, then W = min(W, W - (d << 7 - 1)) (unsigned:
        where 2r < d the subtraction wraps past W; else it subtracts d from 2r and sets the new quotient bit), three
        ops; every 6 steps the bits move into the quotient Q. The 25-bit quotient, shifted to bit 30 with the
        remainder's nonzero as a sticky bit, is rounded and packed as a product is (``_pack``: subnormal results
        shifted right with the sticky bit first, overflow clamped to infinity). Straight-line, or with
        ``DIVISION_LOOP`` a loop of that many steps a trip. Special operands as a product's with the divisor
        inverted (0 <-> inf): x / 0 = inf, x / inf = 0, 0 / 0, inf / inf and any NaN the canonical NaN; the sign is
        the xor of the signs."""
        sign = self.op("and.b32", self.op("xor.b32", a, b), Imm(SIGN))
        ma, mb = self.magnitude(a), self.magnitude(b)
        ea = self.op("max.u32", self.op("and.b32", ma, Imm(INFINITY)), Imm(SMALLEST_NORMAL))
        eb = self.op("max.u32", self.op("and.b32", mb, Imm(INFINITY)), Imm(SMALLEST_NORMAL))
        sig_a = self.op("add.s32", self.op("sub.s32", ma, ea), Imm(SMALLEST_NORMAL))
        sig_b = self.op("add.s32", self.op("sub.s32", mb, eb), Imm(SMALLEST_NORMAL))
        # value = top * 2^(exponents - 283), top = the quotient with its leading bit at 30: ea - eb + 253 (in
        # [0, 506], so the sum in place stays below 2^32)
        if isinstance(eb, Imm):
            exponents = self.op("shr.u32", self.op("add.s32", ea, Imm(((253 << 23) - eb.value) & WORD)), Imm(23))
        else:
            exponents = self.op("shr.u32", self.op("sub.s32", self.op("add.s32", ea, Imm(253 << 23)), eb), Imm(23))
        # The special operands, as a product's with the divisor's magnitude inverted (0 <-> infinity, a NaN kept):
        # of big / small, the larger and the smaller of that and the dividend's, a zero small gives 0, an infinite
        # big infinity, both (0 / 0, inf / inf) or a NaN big the canonical NaN. Worked out here, so that only the
        # sign and the exponent are live during the division: a result of 0 or infinity is an exponent that
        # ``_pack`` takes below the subnormals or above the largest float (whatever the significands and the
        # normalisation below, at most 32 either way, make of it), and a NaN is a sign word 0x7fffffff, which or'ed
        # with any magnitude is the canonical NaN.
        inverse = self.where(self.op("setp.eq.u32", mb, Imm(0)), "mov.b32",
                             mb if isinstance(mb, Imm) else self.emit("mov.b32", mb), Imm(INFINITY))
        inverse = self.where(self.op("setp.eq.u32", mb, Imm(INFINITY)), "mov.b32", inverse, Imm(0))
        big, small = self.op("max.u32", ma, inverse), self.op("min.u32", ma, inverse)
        zero = self.op("setp.eq.u32", small, Imm(0))
        exponents = self.where(self.op("setp.ge.u32", big, Imm(INFINITY)), "mov.b32", exponents, Imm(500))
        exponents = self.where(zero, "mov.b32", exponents, Imm(-256 & WORD))
        big = self.where(zero, "add.s32", big, big, Imm(1))                    # 0 / 0, inf / inf: a NaN
        sign = self.where(self.op("setp.gt.u32", big, Imm(INFINITY)), "mov.b32", sign, Imm(CANONICAL_NAN))
        sig_a, exponents = self._normalise(sig_a, exponents, "sub.s32")
        sig_b, exponents = self._normalise(sig_b, exponents, "add.s32")
        smaller = self.op("setp.lt.u32", sig_a, sig_b)
        sig_a = self.where(smaller, "shl.b32", sig_a, sig_a, Imm(1))
        exponents = self.where(smaller, "sub.s32", exponents, exponents, Imm(1))
        # the leading quotient bit (1) taken: W = (sig_a - sig_b) << 7, the remainder above 7 free bits
        work = self.op("shl.b32", self.op("sub.s32", sig_a, sig_b), Imm(7))
        if isinstance(work, Imm):
            work = self.emit("mov.b32", work)
        divisor = self.op("sub.s32", self.op("shl.b32", sig_b, Imm(7)), Imm(1))
        group = self.DIVISION_LOOP or 6
        quotient = self.emit("mov.b32", Imm(1)) if self.DIVISION_LOOP else Imm(1)

        def trip() -> None:
            nonlocal quotient
            for _ in range(group):
                self.emit("add.s32", work, work, dst=work)
                self.emit("min.u32", work, self.emit("sub.s32", work, divisor), dst=work)
            bits = self.emit("and.b32", work, Imm((1 << group) - 1))
            self.emit("xor.b32", work, bits, dst=work)
            quotient = self.op("or.b32", self.op("shl.b32", quotient, Imm(group)), bits,
                               dst=quotient if isinstance(quotient, Reg) else None)

        if self.DIVISION_LOOP:
            self._loop(24 // group, trip)
        else:
            for _ in range(24 // group):
                trip()
        # Q has 25 bits (the leading one at 24); W holds the remainder (<< 7): nonzero, the quotient is inexact
        top = self.op("shl.b32", quotient, Imm(6))
        top = self.where(self.op("setp.ne.u32", work, Imm(0)), "or.b32", top, top, Imm(1))
        self.op("or.b32", self._pack(top, exponents, carry=False), sign, dst=dst)

    def _sqrt(self, inst: Instruction) -> None:
        """IEEE binary32 sqrt(x), correctly rounded to nearest even (CUDA's ``sqrtf``), subnormal operands included.

        The significand with its hidden bit at 23 (a subnormal's normalised), doubled where the exponent is even
        (odd unbiased), so the root's exponent is half of it; the root's 25 bits (24 and a rounding bit) digit by
        digit, one a step (fdlibm's e_sqrtf: with the partial root s (doubled) and the bit r, a step is t = s + r;
        where t <= x: x -= t, s = t + r; then x = 2x, r = r / 2), straight-line (``ROOT_LOOP``: a loop of that many
        steps a trip). A root is never half-way between two floats, so rounding is adding the rounding bit; it is
        never subnormal nor overflows. sqrt(+-0) = +-0, sqrt(+inf) = +inf, a negative number or a NaN gives the
        canonical NaN."""
        dst, (x,) = self._precise(inst, "a square root")
        magnitude = self.magnitude(x)
        field = self.op("max.u32", self.op("and.b32", magnitude, Imm(INFINITY)), Imm(SMALLEST_NORMAL))
        sig = self.op("add.s32", self.op("sub.s32", magnitude, field), Imm(SMALLEST_NORMAL))
        # e = the biased exponent (at least 1) + 125: the root's is e >> 1 + 1, and e is odd where the biased exponent
        # is even
        e = self.op("shr.u32", self.op("add.s32", field, Imm(125 << 23)), Imm(23))
        sig, e = self._normalise(sig, e, "sub.s32")
        # The result's exponent field, (the root's biased exponent - 1) << 23, to which the rounded root (its hidden
        # bit adding the 1) is added; where the operand is special, the result itself (no field is 0, negative or
        # above infinity's): so only this word is live during the root besides its own.
        result = self.op("shl.b32", self.op("shr.u32", e, Imm(1)), Imm(23))
        result = self.where(self.op("setp.gt.u32", x, Imm(INFINITY)), "mov.b32", result, Imm(CANONICAL_NAN))  # < 0
        result = self.where(self.op("setp.eq.u32", x, Imm(INFINITY)), "mov.b32", result, Imm(INFINITY))
        result = self.where(self.op("setp.eq.u32", magnitude, Imm(0)), "mov.b32", result, x)                # +-0
        # the first step taken (its bit is always 1): x = 2 * (2 * sig - 2^24), with sig doubled for an odd e
        rest = self.op("sub.s32", self.op("shl.b32", sig, self.op("add.s32", self.op("and.b32", e, Imm(1)), Imm(2))),
                       Imm(1 << 25))
        if isinstance(rest, Imm):       # a literal operand (sqrtf(4.0f) NVRTC did not fold): the steps update it
            rest = self.emit("mov.b32", rest)
        root = Imm(1 << 25)                                 # s: the partial root, doubled
        if self.ROOT_LOOP:
            root = self.emit("mov.b32", root)
            # the bits 2^23 .. 2^2 by the loop (r a register), 2^1 after it
            bit = self.emit("mov.b32", Imm(1 << 23))

            def trip() -> None:
                for _ in range(self.ROOT_LOOP):
                    self._root_step(rest, root, bit)
                    self.emit("shr.u32", bit, Imm(1), dst=bit)
            self._loop(22 // self.ROOT_LOOP, trip)
            self._root_step(rest, root, Imm(2))
        else:
            for k in range(23, 0, -1):
                root = self._root_step(rest, root, Imm(1 << k))
        # the last bit (r = 1) is the rounding bit: the root rounded is s / 4 plus it
        last = self.op("setp.ge.u32", rest, self.op("add.s32", root, Imm(1)))
        rounded = self.op("shr.u32", root, Imm(2))
        rounded = self.where(last, "add.s32", rounded, rounded, Imm(1))
        self.op("add.s32", result, rounded, dst=dst)
        special = self.op("setp.ge.u32", self.op("sub.s32", result, Imm(1)), Imm(INFINITY - 1))
        self.where(special, "mov.b32", dst, result)

    def _root_step(self, rest: Reg, root, bit) -> Reg:
        """One bit of the square root: t = s + r; where t <= x: x -= t, s = t + r; then x = 2x. Returns s's
        register (a literal s, the first step's, is moved into one)."""
        trial = self.op("add.s32", root, bit)
        fits = self.emit("setp.ge.u32", rest, trial)
        self.where(fits, "sub.s32", rest, rest, trial)
        root = self.where(fits, "add.s32", root, trial, bit)
        self.emit("add.s32", rest, rest, dst=rest)
        return root
