"""Floats without arithmetic: the float32 instructions that are integer work, rewritten as integer PTX.

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
  away from zero for floor / ceil); ``(int)x`` and ``(unsigned)x`` (``cvt.rzi.s32 / u32 .f32``) shift the mantissa by
  the exponent, saturate and make a NaN 0, as PTX says.

Arithmetic that rounds (add, sub, mul, fma, div, sqrt, int to float, rounding to nearest, atomicAdd on a float)
needs more of the machine's integer ops than the 32-block ROM holds: one float32 add is about a hundred (qccl's float
reductions run one in four launches of qccl/kernels/fprim.cu). It is refused by name, as are float16 / bfloat16 /
float64 instructions and ``.ftz`` (flush-to-zero; NVRTC emits it for ``--use_fast_math``).

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
from ..ptx import Imm, Instruction, Kernel, Reg
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
              "red": "an atomic reduction"}


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
    for item in kernel.body:
        if isinstance(item, Instruction) and _float_types(item):
            rewriter.rewrite(item)
        else:
            rewriter.body.append(item)
    registers = {name: ("b32" if typ == "f32" else typ) for name, typ in kernel.registers.items()}
    registers.update(rewriter.temporaries)
    return dataclasses.replace(kernel, body=rewriter.body, registers=registers)


def _refuse(inst: Instruction, why: str) -> MachineError:
    return MachineError(f"unsupported PTX instruction at line {inst.line} ({why}): {inst.text}")


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
        if set(floats) != {"f32"}:
            kinds = ", ".join(f".{t}" for t in floats if t != "f32")
            raise _refuse(inst, f"the machine has no floating point; of the float types only .f32 moves, compares, "
                                f"min / max, neg / abs / copysign and testp run, not {kinds}")
        if "ftz" in inst.modifiers:
            raise _refuse(inst, "the machine has no floating point, and .ftz flushes subnormals to zero: compile "
                                "without --use_fast_math / -ftz=true")
        builder = self._move if inst.base in MOVES else getattr(self, f"_{inst.base}", None)
        if builder is None:
            what = ARITHMETIC.get(inst.base, f"{inst.base}")
            raise _refuse(inst, f"the machine has no floating point: {what} of floats needs IEEE arithmetic from "
                                "integer ops, more than the 32-block ROM holds; of float32 only moves, compares, "
                                "min / max, neg / abs / copysign and testp run (qwengpu/KERNELS.md)")
        if inst.guard is None or builder == self._move:
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
        """cvt.rzi / rmi / rpi .f32.f32 (truncf, floorf, ceilf) and cvt.rzi.s32 / u32 .f32 ((int)x, (unsigned)x):
        bit work on the exponent and the fraction. Other conversions round a sum or normalise an integer: refused."""
        mods = inst.modifiers
        dst, (x,) = self._operands(inst, 1)
        if mods in (("rzi", "f32", "f32"), ("rmi", "f32", "f32"), ("rpi", "f32", "f32")):
            self._round_to_integer(dst, x, mods[0])
        elif mods in (("rzi", "s32", "f32"), ("rzi", "u32", "f32")):
            self._to_integer(dst, x, signed=mods[1] == "s32")
        else:
            raise _refuse(inst, "the machine has no floating point: a conversion that rounds or normalises "
                                "(int to float, float to a narrow int, rounding to nearest) needs more integer ops "
                                "than the 32-block ROM holds; truncf, floorf, ceilf, (int) and (unsigned) of a float "
                                "run (qwengpu/KERNELS.md)")

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

    def _to_integer(self, dst: Reg, x, signed: bool) -> None:
        """(int)x / (unsigned)x, PTX's cvt.rzi: toward zero, saturated to the type's range, a NaN gives 0. The
        mantissa with its hidden bit shifted by the exponent (a shift of 32 or more gives 0 on the machine, as in
        PTX), then the sign."""
        magnitude = self.magnitude(x)
        shift = self._exponent_shift(magnitude)
        mantissa = self.emit("or.b32", self.emit("and.b32", magnitude, Imm(0x007FFFFF)), Imm(0x00800000))
        up = self.emit("shl.b32", mantissa, self.emit("neg.s32", shift))          # exponent >= 150
        down = self.emit("shr.u32", mantissa, shift)                                # exponent < 150
        whole = self.emit("or.b32", up, down)
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
