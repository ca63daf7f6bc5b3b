"""Doubles as integers: float64 instructions rewritten as 64-bit integer PTX, whose values the pairs stage keeps in
two words (qwengpu.lowering.pairs), as it keeps a ``long long``.

The machine has no floating point and 32-bit words, but a double is 64 bits of IEEE binary64, and its arithmetic
can be computed with integer instructions on those bits, as the floats stage does for float32. This stage writes
each double instruction it builds as 64-bit integer PTX (add, shifts, compares, ``clz.b64``, ``mul.lo`` /
``mul.hi.u64``), and ``lower`` gives every 64-bit register it writes to the pairs stage as a pair of words:

- moving one (``ld`` / ``st`` / ``mov`` / ``selp`` ``.f64``, a ``double`` parameter, a literal ``0d3FB9...``) moves
  64 bits: the type becomes ``.b64``; in memory a double is two words, the low word first (a GPU's layout);
- ``neg``, ``abs`` and ``copysign`` change the sign bit alone (a NaN's too, as the floats stage does);
- ``setp`` (PTX's fourteen ordered and unordered tests, ``num``, ``nan``) orders ``sign ? -magnitude : magnitude``
  as signed 64-bit integers (-0 == +0), each operand's NaN test beside; ``testp`` reads the magnitude; ``min`` /
  ``max`` follow PTX (a NaN operand ignored, two NaNs the canonical NaN, -0 below +0) through the total order
  ``x ^ ((x >> 63) >>> 1)``;
- ``add``, ``sub`` and ``mul`` in each rounding (``.rn``, ``.rz``, ``.rm``, ``.rp``), IEEE binary64 as NVIDIA's
  double unit computes it: subnormals in and out, overflow to infinity (or the largest finite double, rounding
  toward zero), x + (-x) = +0 (-0 rounding down), any NaN result the canonical NaN 0x7fffffffffffffff (NVIDIA's
  float unit writes 0x7fffffff for float32; tests/test_doubles.py checks the double one where a GPU is lent). An
  add aligns the smaller significand with a sticky bit, adds or subtracts, normalises by ``clz``, rounds; a
  multiply takes the 106-bit product of the significands from ``mul.lo`` and ``mul.hi``, normalised the same way;
- ``fma`` (and ``mad``) in each rounding (CUDA's ``fma``, ``__fma_rn`` / ``_rz`` / ``_rd`` / ``_ru``, and what
  CUDA's math library computes ``exp``, ``exp2``, ``sinh``, ... with): a * b + c rounded once, the 106-bit product
  and c aligned in 128 bits (pairs of 64-bit values) with a sticky bit, added, normalised and rounded as a sum's;
- ``div``, ``rcp`` and ``sqrt`` in each rounding (CUDA's ``a / b``, ``1.0 / x``, ``sqrt``, ``__ddiv_rz``,
  ``__dsqrt_ru``, ...): correctly rounded, x / 0 an infinity, 0 / 0 and sqrt of a negative number NaN,
  sqrt(-0) = -0: 63 quotient bits by restoring division and 56 root bits by the digit-by-digit root, a bit a trip
  of a uniform loop, the remainder a sticky bit;
- conversions: ``cvt.f64.f32`` (exact, a float32 subnormal normalised), ``cvt.rn / rz / rm / rp .f32.f64`` (a
  float's 24 bits rounded once, float32 subnormals and overflow as IEEE), ``cvt.rn.f64.s32 / u32`` (exact),
  ``cvt.rn / rz / rm / rp .f64.s64 / u64`` (``(double)`` of a ``long long``, ``__ll2double_rz``, ...: the magnitude
  normalised to bit 62 with a sticky bit, rounded once),
  ``cvt.rzi.s32 / u32 / s64 / u64 .f64`` (C's ``(int)d``, ``(long long)d``: toward zero, saturated, a NaN 0; and
  ``.rni`` / ``.rmi`` / ``.rpi``: ``__double2int_rn`` / ``_rd`` / ``_ru``, ``lrint``: the integral value first), and
  ``cvt.rzi / rmi / rpi / rni .f64.f64`` (``trunc``, ``floor``, ``ceil``, ``rint``: the fraction's bits cleared,
  a unit added where the mode rounds away);
- ``atom`` / ``red`` ``.global`` / ``.shared`` ``.add.f64`` (CUDA's ``atomicAdd`` on a double): a compare-and-swap
  loop of 64-bit words around the double add, the adds landing in lane order (as the floats' atomicAdd).

So a double by accident (``y[i] = 0.1 * x[i]``: a float widened, a double multiply, the product rounded to a float)
runs, bit for bit as a GPU computes it, and so do double arrays and arguments, ``printf("%f", d)``, the textbook
integration of pi, and the functions of CUDA's math library built of these: the GPU's own algorithm, each fma
exact (``exp``, ``exp2``, ``exp10``; and those whose paths branch, ``sin``, ``cos``, ``sinpi``, ``cospi``,
``expm1``, ``sinh``: sin's reduction of a huge argument is a loop of carry chains, qwengpu.lowering.carries). The
rest of double arithmetic (the approximate units some library functions start from: ``log``, ``pow``, ``cosh``,
``tanh`` take ``rcp.approx.ftz.f64``, and ``tan`` and ``atan`` do for some arguments; ``asin``, ``hypot``
``rsqrt.approx``) is refused where a thread takes its path (qwengpu.lowering.paths), naming the instruction.

Cost (``python -m qccl_bench.double_check --cost``, tokens the model writes per element, a thread an element):
an add 2,568 beside float32's 429 (6.0x), a multiply 3,600 beside 440 (8.2x), an fma 7,290 beside 1,446 (5.0x);
each 64-bit op is 2 to 20 of the machine's ops once the pairs stage has written it in words (a ``clz.b64`` about
50, a ``mul.hi.u64`` about 90).
A division or a square root is a loop of 63 or 56 trips whose body is longer than the ROM: each trip is a round of
overlays, about 8,100 records (81,600 tokens) a division of a warp.
Longer than the ROM, such programs run as overlays; a kernel of several double ops under a branch or in a loop
(every op under a lane predicate) takes seconds to a minute to lower, once per argument shape, as does a library
function (``exp``: 15,700 machine ops before fusion, about 13 s on 2 cores, then 19,997 records a warp of 2;
``python -m qccl_bench.double_check --library``).

Example::

    >>> from qwengpu.ptx import Instruction, Reg, Kernel
    >>> k = Kernel("k", body=[Instruction("neg.f64", (Reg("%fd2"), Reg("%fd1")), None, False, 7, "neg.f64 %fd2, %fd1")],
    ...            registers={"%fd": "f64"})
    >>> body, doubles = rewrite(k)
    >>> [i.opcode for i in body.body], sorted(doubles)       # the sign flipped, then the destination written
    (['xor.b64', 'mov.b64'], ['%dbl_d1', '%fd1', '%fd2'])
"""
from __future__ import annotations

import dataclasses

from ..ptx import Imm, Instruction, Kernel, Label, Reg
from .floats import ATOMIC_QUALIFIERS, ATOMIC_SPACES
from .rewriting import Rewriter

__all__ = ["rewrite", "supported"]

SIGN = 1 << 63
MAGNITUDE = SIGN - 1
INFINITY = 0x7FF0000000000000       # the magnitude of an infinity; a NaN's is above it
FRACTION = (1 << 52) - 1
HIDDEN = 1 << 52
SMALLEST_NORMAL = HIDDEN
LARGEST = 0x7FEFFFFFFFFFFFFF
CANONICAL_NAN = 0x7FFFFFFFFFFFFFFF  # NVIDIA's NaN result, as its float32 one 0x7fffffff
FLOAT_NAN = 0x7FFFFFFF
ROUNDINGS = ("rn", "rz", "rm", "rp")
# Significands are worked on with their top bit at bit 62 (bit 63 takes an add's carry) and 10 bits below the
# double's last: the rounding's bit (9) and the sticky bits.
GUARD = 10
MOVES = ("ld", "st", "mov", "selp")
ORDERED = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
UNORDERED = {"equ": "eq", "neu": "ne", "ltu": "lt", "leu": "le", "gtu": "gt", "geu": "ge"}
TESTS = {"finite", "infinite", "number", "notanumber", "normal", "subnormal"}
ZERO_SCALE = -(1 << 20)   # a zero term's scale in a fused multiply-add: below every other (they reach -1100 or so)
INTEGRAL = ("rzi", "rmi", "rpi", "rni")     # trunc, floor, ceil, rint of a double: cvt.r*i.f64.f64


def _rounding(inst: Instruction) -> str | None:
    modes = [m for m in inst.modifiers if m in ROUNDINGS]
    return modes[0] if modes else None


def supported(inst: Instruction) -> bool:
    """Whether this stage builds a double instruction (the others are refused where a thread meets one:
    qwengpu.lowering.paths)."""
    mods = inst.modifiers
    if "f64" not in mods or {"ftz", "sat", "approx"} & set(mods):
        return False
    base = inst.base
    if base in MOVES or base in ("neg", "abs", "copysign", "min", "max"):
        return True
    if base == "setp":
        tests = [m for m in mods if m != "f64"]
        return len(tests) == 1 and inst.pair is None and (tests[0] in ORDERED or tests[0] in UNORDERED or
                                                           tests[0] in ("num", "nan"))
    if base == "testp":
        return any(m in TESTS for m in mods)
    rounded = len(mods) == 2 and mods[0] in ROUNDINGS
    if base in ("add", "sub", "mul"):
        return mods == ("f64",) or rounded       # no rounding modifier: to nearest
    if base in ("div", "rcp", "sqrt", "fma", "mad"):
        return rounded
    if base in ("atom", "red"):
        return _atomic_add(inst) is not None
    if base == "cvt":
        if mods in (("f64", "f32"), ("rn", "f64", "s32"), ("rn", "f64", "u32")):
            return True
        if len(mods) != 3:
            return False
        rounding, to, of = mods
        return (rounding in ROUNDINGS and (to, of) in (("f32", "f64"), ("f64", "s64"), ("f64", "u64"))) or (
            rounding in INTEGRAL and of == "f64" and to in ("f64", "s32", "u32", "s64", "u64"))
    return False


def _atomic_add(inst: Instruction) -> tuple[str, list[str]] | None:
    """An ``atom`` / ``red`` ``.add.f64`` on ``.global`` or ``.shared`` memory (CUDA's atomicAdd on a double): its
    space and qualifiers; None for any other atomic operation on doubles (refused where a thread meets it)."""
    mods = [m for m in inst.modifiers if m != "f64"]
    spaces = [m for m in mods if m in ATOMIC_SPACES]
    qualifiers = [m for m in mods if m != "add"]
    if "add" not in mods or len(spaces) != 1 or any(m not in ATOMIC_SPACES + ATOMIC_QUALIFIERS for m in qualifiers):
        return None
    return spaces[0], qualifiers


def rewrite(kernel: Kernel) -> tuple[Kernel, frozenset]:
    """The kernel with the double instructions this stage builds as 64-bit integer ones, and the 64-bit registers
    that hold doubles (its temporaries among them): the pairs stage keeps them as pairs of words. Others are left
    for the paths stage, which refuses them where a thread meets one."""
    if not any(isinstance(i, Instruction) and "f64" in i.modifiers for i in kernel.body):
        return kernel, frozenset()
    builder = _Builder(kernel)
    builder.run(kernel.body, supported)
    registers = {name: ("b64" if typ == "f64" else typ) for name, typ in kernel.registers.items()}
    registers.update(builder.temporaries)
    # every register declared .f64 (also one only moved: ``mov.b64 {lo, hi}, %fd1``), and the temporaries
    declared = {o.name for i in kernel.body if isinstance(i, Instruction) for o in i.operands
                if isinstance(o, Reg) and kernel.registers.get(_prefix(o.name)) == "f64"}
    return dataclasses.replace(kernel, body=builder.body, registers=registers), frozenset(builder.doubles | declared)


class _Builder(Rewriter):
    """Writes one double instruction at a time as integer instructions into ``body``, with fresh temporaries."""

    def __init__(self, kernel: Kernel):
        super().__init__(kernel, "%dbl_")
        self.doubles: set[str] = set()

    # -- building blocks -------------------------------------------------------------------------------------------
    def temp(self, kind: str) -> Reg:
        """A fresh register (a 64-bit one holds a double's bits or its parts: kept as a pair of words)."""
        reg = super().temp(kind)
        if kind == "b64":
            self.doubles.add(reg.name)
        return reg

    def d(self, opcode: str, *operands) -> Reg:
        """A 64-bit result."""
        return self.emit(opcode, self.temp("b64"), *operands)

    def w(self, opcode: str, *operands) -> Reg:
        """A word."""
        return self.emit(opcode, self.temp("b32"), *operands)

    def p(self, opcode: str, *operands) -> Reg:
        """A predicate."""
        return self.emit(opcode, self.temp("pred"), *operands)

    def pick(self, condition, chosen, other, kind: str = "b64") -> Reg:
        return self.emit(f"selp.{kind}", self.temp(kind), chosen, other, condition)

    def magnitude(self, x):
        return Imm(x.value & MAGNITUDE) if isinstance(x, Imm) else self.d("and.b64", x, Imm(MAGNITUDE))

    def negative(self, x) -> Reg:
        return self.p("setp.lt.s64", x, Imm(0))

    def exponent(self, x) -> Reg:
        """The biased exponent field, a word."""
        return self.w("and.b32", self.w("cvt.u32.u64", self.d("shr.u64", x, Imm(52))), Imm(0x7FF))

    def significand(self, x, exponent: Reg) -> Reg:
        """The fraction with the hidden bit where the exponent is not 0 (a normal double)."""
        fraction = self.d("and.b64", x, Imm(FRACTION))
        normal = self.p("setp.ne.u32", exponent, Imm(0))
        return self.d("or.b64", fraction, self.pick(normal, Imm(HIDDEN), Imm(0)))

    def shift_right_sticky(self, m: Reg, amount: Reg) -> Reg:
        """m >> amount (amount 0..63, a word), the bits shifted out folded into bit 0."""
        lost = self.d("shl.b64", m, self.w("sub.u32", Imm(64), amount))     # an amount of 0 shifts by 64: 0
        sticky = self.pick(self.p("setp.ne.u64", lost, Imm(0)), Imm(1), Imm(0))
        return self.d("or.b64", self.d("shr.u64", m, amount), sticky)

    def normalise(self, m: Reg, exponent: Reg) -> tuple[Reg, Reg]:
        """A nonzero significand with its top bit anywhere moved to bit 62 (a carry into bit 63 moved down, its
        bit kept as a sticky bit), and its exponent moved by as much."""
        shift = self.w("sub.u32", self.w("clz.b64", m), Imm(1))        # -1 (a carry) .. 62
        carried = self.p("setp.eq.u32", shift, Imm(0xFFFFFFFF))
        down = self.d("or.b64", self.d("shr.u64", m, Imm(1)), self.d("and.b64", m, Imm(1)))
        up = self.d("shl.b64", m, shift)
        return self.pick(carried, down, up), self.w("sub.s32", exponent, shift)

    def top_bits(self, high: Reg, low: Reg) -> tuple[Reg, Reg]:
        """128 bits (nonzero where the result is used, bit 127 clear) shifted left by their leading zeros less
        one, so their top bit is bit 126: the high 64 bits with a sticky bit for the low ones (a significand with
        its top bit at 62, as ``round_and_pack`` takes it), and the shift (a word)."""
        top_zeros = self.w("clz.b64", high)
        empty = self.p("setp.eq.u64", high, Imm(0))
        zeros = self.w("add.u32", top_zeros, self.pick(empty, self.w("clz.b64", low), Imm(0), "b32"))
        shift = self.w("sub.u32", zeros, Imm(1))
        # shift < 64: high << s | low >> (64 - s), low << s left; 64 or more: low << (s - 64), nothing left
        wide = self.p("setp.ge.u32", shift, Imm(64))
        joined = self.d("or.b64", self.d("shl.b64", high, shift),
                        self.d("shr.u64", low, self.w("sub.u32", Imm(64), shift)))
        top = self.pick(wide, self.d("shl.b64", low, self.w("sub.u32", shift, Imm(64))), joined)
        rest = self.d("shl.b64", low, shift)                # 0 for a shift of 64 or more
        return self.d("or.b64", top, self.pick(self.p("setp.ne.u64", rest, Imm(0)), Imm(1), Imm(0))), shift

    def round_and_pack(self, sign: Reg, exponent: Reg, m: Reg, mode: str) -> Reg:
        """The double nearest (in ``mode``) to m * 2^(exponent - 1023 - 62), m's top bit at 62, with its sign:
        below the smallest normal exponent the significand is shifted right (a subnormal, sticky bit kept),
        then rounded at bit GUARD; exponent - 1 + the significand with its hidden bit packs the fields (a
        rounding that carries into bit 53, or a subnormal that rounds up to the smallest normal, raises the
        exponent by the carry); past the largest finite, infinity or the largest finite as the mode says."""
        below = self.p("setp.lt.s32", exponent, Imm(1))
        under = self.w("min.u32", self.w("sub.u32", Imm(1), exponent), Imm(63))
        m = self.pick(below, self.shift_right_sticky(m, under), m)
        exponent = self.w("max.s32", exponent, Imm(1))
        kept = self.d("shr.u64", m, Imm(GUARD))
        tail = self.d("and.b64", m, Imm((1 << GUARD) - 1))
        up = self.rounds_up(sign, tail, 1 << (GUARD - 1), mode,
                            lambda: self.p("setp.ne.u64", self.d("and.b64", kept, Imm(1)), Imm(0)))
        if up is not None:
            kept = self.d("add.u64", kept, self.pick(up, Imm(1), Imm(0)))
        field = self.d("shl.b64", self.d("cvt.u64.u32", self.w("sub.u32", exponent, Imm(1))), Imm(52))
        packed = self.d("add.u64", field, kept)
        overflow = self.p("setp.ge.u64", packed, Imm(INFINITY))
        packed = self.pick(overflow, self.overflowed(sign, mode, INFINITY, LARGEST), packed)
        return self.d("or.b64", packed, self.pick(sign, Imm(SIGN), Imm(0)))

    def rounds_up(self, sign: Reg, tail: Reg, half: int, mode: str, odd):
        """Whether a value cut to what it keeps, with ``tail`` the (64-bit) bits cut, rounds away from zero; None
        toward zero. To nearest: the tail above ``half``, or half and what is kept odd (``odd()``, a predicate);
        toward an infinity: any tail, where the sign is that infinity's."""
        if mode == "rz":
            return None
        if mode != "rn":
            toward = self.emit("not.pred", self.temp("pred"), sign) if mode == "rp" else sign
            return self.p("and.pred", self.p("setp.ne.u64", tail, Imm(0)), toward)
        above = self.p("setp.gt.u64", tail, Imm(half))
        tie = self.p("setp.eq.u64", tail, Imm(half))
        return self.p("or.pred", above, self.p("and.pred", tie, odd()))

    def overflowed(self, sign: Reg, mode: str, infinity: int, largest: int):
        """What a finite result past the largest finite becomes: infinity to nearest, toward zero the largest
        finite, toward an infinity that infinity on its sign's side and the largest finite on the other."""
        if mode == "rn":
            return Imm(infinity)
        if mode == "rz":
            return Imm(largest)
        infinite_side = self.emit("not.pred", self.temp("pred"), sign) if mode == "rp" else sign
        kind = "b64" if infinity > 0xFFFFFFFF else "b32"
        return self.pick(infinite_side, Imm(infinity), Imm(largest), kind)

    # -- the instructions --------------------------------------------------------------------------------------------
    def rewrite(self, inst: Instruction) -> None:
        self.inst = inst
        if inst.base in MOVES:
            self._move(inst)
            return
        if inst.base in ("atom", "red"):
            self._atomic_add(inst)
            return
        dst = inst.operands[0]
        written = [m for m in inst.modifiers if m not in ROUNDINGS + INTEGRAL][0]      # the result's type
        kind = "pred" if inst.base in ("setp", "testp") else ("b64" if written == "f64" else "b32")
        result = getattr(self, f"_{inst.base}")(inst, *inst.operands[1:])
        # one write of the destination, under the instruction's guard (the sequence before it runs on every lane)
        self.body.append(Instruction(f"mov.{kind}", (dst, result), inst.guard, inst.guard_negated, inst.line,
                                     inst.text))

    def _move(self, inst: Instruction) -> None:
        """ld / st / mov / selp .f64 are those of .b64: a double is 64 bits."""
        opcode = ".".join([inst.base] + ["b64" if m == "f64" else m for m in inst.modifiers])
        self.body.append(dataclasses.replace(inst, opcode=opcode))

    def _atomic_add(self, inst: Instruction) -> None:
        """``atom`` / ``red`` ``.add.f64`` (CUDA's atomicAdd on a double) as the compare-and-swap loop of the floats'
        atomicAdd (qwengpu.lowering.floats), in 64 bits::

                old = ld.b64 [a]
            loop:
                new = old + x                           (the double add, to nearest)
                prev = atom.cas.b64 [a], old, new       (the pairs stage's: the lanes take turns in lane order)
                again = prev != old;  old = prev
                @again bra loop
                d = old                                 (atom: the value before this lane's add)

        so the adds land in lane order, each on the value its lane last read. A double add flushes nothing
        (NVIDIA's double unit keeps subnormals), and any NaN sum is the canonical NaN, as ``add.f64``'s. A guarded
        atom / red is the loop under a branch around it."""
        space, qualifiers = _atomic_add(inst)
        dst, mem, x = inst.operands if inst.base == "atom" else (None, *inst.operands)
        skip = None
        if inst.guard is not None:
            self.count += 1
            skip = Label(f"$__double_atomic_skip{self.count}")
            self.body.append(Instruction("bra", (skip,), inst.guard, not inst.guard_negated, inst.line, inst.text))
        old = self.emit(f"ld.{space}.b64", self.temp("b64"), mem)
        self.count += 1
        head = Label(f"$__double_atomic{self.count}")
        self.body.append(head)
        new = self._sum(old, x, "rn")
        prev = self.emit(".".join(["atom", *qualifiers, "cas", "b64"]), self.temp("b64"), mem, old, new)
        again = self.p("setp.ne.u64", prev, old)
        self.emit("mov.b64", old, prev)
        self.body.append(Instruction("bra", (head,), again, False, inst.line, inst.text))
        if dst is not None:
            self.emit("mov.b64", dst, old)
        if skip is not None:
            self.body.append(skip)

    def _neg(self, inst, x):
        return self.d("xor.b64", x, Imm(SIGN))

    def _abs(self, inst, x):
        return self.d("and.b64", x, Imm(MAGNITUDE))

    def _copysign(self, inst, a, b):
        """copysign.f64 d, a, b: b's magnitude with a's sign (PTX's operand order)."""
        return self.d("or.b64", self.magnitude(b), self.d("and.b64", a, Imm(SIGN)))

    def _setp(self, inst, a, b):
        test = next(m for m in inst.modifiers if m != "f64")
        nans = [self.p("setp.gt.u64", self.magnitude(x), Imm(INFINITY)) for x in ((a,) if a == b else (a, b))]
        unordered = nans[0] if len(nans) == 1 else self.p("or.pred", *nans)
        if test == "nan":
            return unordered
        ordered = self.emit("not.pred", self.temp("pred"), unordered)
        if test == "num":
            return ordered
        cmp = ORDERED.get(test) or UNORDERED[test]
        holds = self.p(f"setp.{cmp}.s64", self.compare_key(a), self.compare_key(b))
        if test in UNORDERED:
            return self.p("or.pred", holds, unordered)
        return self.p("and.pred", holds, ordered)

    def compare_key(self, x):
        """sign ? -magnitude : magnitude, as a signed 64-bit integer: the IEEE order of non-NaN doubles."""
        if isinstance(x, Imm):
            bits = x.value & ((1 << 64) - 1)
            return Imm((-(bits & MAGNITUDE) if bits & SIGN else bits) & ((1 << 64) - 1))
        magnitude = self.magnitude(x)
        return self.pick(self.negative(x), self.d("sub.s64", Imm(0), magnitude), magnitude)

    def _testp(self, inst, x):
        test = next(m for m in inst.modifiers if m in TESTS)
        magnitude = self.magnitude(x)
        if test == "finite":
            return self.p("setp.lt.u64", magnitude, Imm(INFINITY))
        if test == "infinite":
            return self.p("setp.eq.u64", magnitude, Imm(INFINITY))
        if test == "number":
            return self.p("setp.le.u64", magnitude, Imm(INFINITY))
        if test == "notanumber":
            return self.p("setp.gt.u64", magnitude, Imm(INFINITY))
        small = self.p("setp.lt.u64", magnitude, Imm(SMALLEST_NORMAL))
        if test == "subnormal":
            return self.p("and.pred", small, self.p("setp.ne.u64", magnitude, Imm(0)))
        return self.p("and.pred", self.emit("not.pred", self.temp("pred"), small),
                      self.p("setp.lt.u64", magnitude, Imm(INFINITY)))

    def _min(self, inst, a, b):
        return self._order(a, b, keep_first="lt")

    def _max(self, inst, a, b):
        return self._order(a, b, keep_first="gt")

    def _order(self, a, b, keep_first: str):
        """PTX's min / max: a NaN operand ignored, two NaNs the canonical NaN; -0 below +0 (the total order)."""
        def key(x):
            if isinstance(x, Imm):
                bits = x.value & ((1 << 64) - 1)
                return Imm(bits ^ (MAGNITUDE if bits & SIGN else 0))
            return self.d("xor.b64", x, self.d("shr.u64", self.d("shr.s64", x, Imm(63)), Imm(1)))
        first = self.p(f"setp.{keep_first}.s64", key(a), key(b))
        result = self.pick(first, a, b)
        nan_a = self.p("setp.gt.u64", self.magnitude(a), Imm(INFINITY))
        nan_b = self.p("setp.gt.u64", self.magnitude(b), Imm(INFINITY))
        result = self.pick(nan_a, b, result)
        result = self.pick(nan_b, a, result)
        return self.pick(self.p("and.pred", nan_a, nan_b), Imm(CANONICAL_NAN), result)

    def _sub(self, inst, a, b):
        flipped = Imm((b.value ^ SIGN) & ((1 << 64) - 1)) if isinstance(b, Imm) else self.d("xor.b64", b, Imm(SIGN))
        return self._sum(a, flipped, _rounding(inst) or "rn")

    def _add(self, inst, a, b):
        return self._sum(a, b, _rounding(inst) or "rn")

    def _sum(self, a, b, mode: str) -> Reg:
        """a + b rounded once: x the operand of the larger magnitude, y's significand shifted right by the
        exponents' difference with a sticky bit, added or (signs that differ) subtracted, normalised, rounded."""
        mag_a, mag_b = self.magnitude(a), self.magnitude(b)
        swap = self.p("setp.lt.u64", mag_a, mag_b)
        x, y = self.pick(swap, b, a), self.pick(swap, a, b)
        mag_x, mag_y = self.pick(swap, mag_b, mag_a), self.pick(swap, mag_a, mag_b)
        sign = self.negative(x)
        differ = self.p("xor.pred", sign, self.negative(y))
        ex, ey = self.exponent(x), self.exponent(y)
        mx = self.d("shl.b64", self.significand(x, ex), Imm(GUARD))
        my = self.d("shl.b64", self.significand(y, ey), Imm(GUARD))
        ex, ey = self.w("max.u32", ex, Imm(1)), self.w("max.u32", ey, Imm(1))       # a subnormal's scale
        distance = self.w("min.u32", self.w("sub.u32", ex, ey), Imm(63))
        my = self.shift_right_sticky(my, distance)
        total = self.pick(differ, self.d("sub.u64", mx, my), self.d("add.u64", mx, my))
        zero = self.p("setp.eq.u64", total, Imm(0))
        # a nonzero total: normalised (a zero one's clz would shift it by 63: its result is chosen below)
        m, exponent = self.normalise(total, ex)
        result = self.round_and_pack(sign, exponent, m, mode)
        # an exact zero: x + (-x) is +0 (-0 rounding down); two zeros of one sign keep it
        zero_sign = self.p("and.pred", sign, self.emit("not.pred", self.temp("pred"), differ))
        if mode == "rm":
            zero_sign = self.p("or.pred", zero_sign, differ)
        result = self.pick(zero, self.pick(zero_sign, Imm(SIGN), Imm(0)), result)
        # infinities and NaNs: x has the larger magnitude, so it is the NaN or the infinity if there is one
        infinite = self.p("setp.eq.u64", mag_x, Imm(INFINITY))
        result = self.pick(infinite, x, result)
        opposed = self.p("and.pred", self.p("and.pred", infinite, differ), self.p("setp.eq.u64", mag_y,
                                                                                   Imm(INFINITY)))
        nan = self.p("or.pred", self.p("setp.gt.u64", mag_x, Imm(INFINITY)), opposed)
        return self.pick(nan, Imm(CANONICAL_NAN), result)

    def _mul(self, inst, a, b):
        """a * b rounded once: the 106-bit product of the significands (``mul.lo`` / ``mul.hi.u64``) shifted left
        by its leading zeros less one, so its top bit is bit 126 of 128; the high 64 bits with a sticky bit for
        the low ones are rounded as a sum's."""
        mode = _rounding(inst) or "rn"
        mag_a, mag_b = self.magnitude(a), self.magnitude(b)
        sign = self.p("setp.lt.s64", self.d("xor.b64", a, b), Imm(0))
        ea, eb = self.exponent(a), self.exponent(b)
        ma, mb = self.significand(a, ea), self.significand(b, eb)
        low, high = self.d("mul.lo.u64", ma, mb), self.d("mul.hi.u64", ma, mb)
        m, shift = self.top_bits(high, low)                 # a shift of 21 .. 127
        exponent = self.w("sub.s32", self.w("add.s32", self.w("max.u32", ea, Imm(1)), self.w("max.u32", eb, Imm(1))),
                          self.w("add.u32", shift, Imm(1001)))
        result = self.round_and_pack(sign, exponent, m, mode)
        signed_zero = self.pick(sign, Imm(SIGN), Imm(0))
        zero = self.p("or.pred", self.p("setp.eq.u64", mag_a, Imm(0)), self.p("setp.eq.u64", mag_b, Imm(0)))
        result = self.pick(zero, signed_zero, result)
        infinite = self.p("or.pred", self.p("setp.eq.u64", mag_a, Imm(INFINITY)),
                          self.p("setp.eq.u64", mag_b, Imm(INFINITY)))
        result = self.pick(infinite, self.d("or.b64", signed_zero, Imm(INFINITY)), result)
        nan = self.p("or.pred", self.p("setp.gt.u64", mag_a, Imm(INFINITY)),
                     self.p("setp.gt.u64", mag_b, Imm(INFINITY)))
        nan = self.p("or.pred", nan, self.p("and.pred", infinite, zero))        # inf * 0
        return self.pick(nan, Imm(CANONICAL_NAN), result)

    def _fma(self, inst, a, b, c):
        """fma.r*.f64 (CUDA's ``fma``, ``__fma_rn`` / ``_rz`` / ``_rd`` / ``_ru``): a * b + c rounded once. The
        106-bit product of the significands and c's significand are placed in 128 bits (pairs of a high and a low
        64) at one scale, their top bits at bit 125 at most (the product's at 124 or 125, c's at 125, so a sum does
        not reach bit 127); the one of the lower scale is shifted right by the difference with a sticky bit, negated
        where the signs differ, and added; a negative total negated (the sign flipped), then normalised and rounded
        as a sum's. Bits lost to the sticky bit can only be a product's shifted more than its 20 or c's more than
        its 73 zero bits at the bottom: the other then lies 20 bits or more above, so the sticky bit stays far
        below the rounding's bit, and the operand not shifted has a 0 at bit 0 (a sticky bit and a true tail round
        alike). A zero product keeps a*b's sign; an exact zero total is +0 (-0 rounding down) unless both terms are
        zeros of one sign. inf * 0, a NaN, and the product's infinity plus c's of the other sign give the
        canonical NaN; the product's infinity otherwise, c's infinity beside a finite product c."""
        mode = _rounding(inst)
        mag_a, mag_b, mag_c = self.magnitude(a), self.magnitude(b), self.magnitude(c)
        sign_p = self.p("setp.lt.s64", self.d("xor.b64", a, b), Imm(0))
        sign_c = self.negative(c)
        differ = self.p("xor.pred", sign_p, sign_c)
        # the kind of result, a word, worked out first so that little stays live: 0 a number, 1 the product's
        # infinity, 2 c itself, 3 NaN
        zero_p = self.p("or.pred", self.p("setp.eq.u64", mag_a, Imm(0)), self.p("setp.eq.u64", mag_b, Imm(0)))
        infinite_p = self.p("or.pred", self.p("setp.eq.u64", mag_a, Imm(INFINITY)),
                            self.p("setp.eq.u64", mag_b, Imm(INFINITY)))
        infinite_c = self.p("setp.eq.u64", mag_c, Imm(INFINITY))
        nan = self.p("or.pred", self.p("setp.gt.u64", mag_a, Imm(INFINITY)),
                     self.p("setp.gt.u64", mag_b, Imm(INFINITY)))
        nan = self.p("or.pred", nan, self.p("setp.gt.u64", mag_c, Imm(INFINITY)))
        nan = self.p("or.pred", nan, self.p("and.pred", infinite_p, zero_p))
        nan = self.p("or.pred", nan, self.p("and.pred", self.p("and.pred", infinite_p, infinite_c), differ))
        kind = self.pick(infinite_c, Imm(2), Imm(0), "b32")
        kind = self.pick(infinite_p, Imm(1), kind, "b32")
        kind = self.pick(nan, Imm(3), kind, "b32")
        # the product, its top bit moved from bit 104 or 105 to 124 or 125: value (high, low) * 2^(scale - 1148)
        (ma, ea), (mb, eb) = self._normalised(a), self._normalised(b)
        low, high = self.d("mul.lo.u64", ma, mb), self.d("mul.hi.u64", ma, mb)
        p_high = self.d("or.b64", self.d("shl.b64", high, Imm(20)), self.d("shr.u64", low, Imm(44)))
        p_low = self.d("shl.b64", low, Imm(20))
        # a zero's scale lies below any other's, so that the other term is never shifted for it
        scale_p = self.pick(zero_p, Imm(ZERO_SCALE), self.w("sub.s32", self.w("add.s32", ea, eb), Imm(1022)), "b32")
        # c, its top bit from bit 52 to 125 (all in the high 64): value (high, 0) * 2^(scale - 1148)
        mc, ec = self._normalised(c)
        c_high = self.d("shl.b64", mc, Imm(9))
        scale_c = self.pick(self.p("setp.eq.u64", mag_c, Imm(0)), Imm(ZERO_SCALE), ec, "b32")
        # x: the term of the higher scale (the product where they are equal); y: the other
        swap = self.p("setp.lt.s32", scale_p, scale_c)
        x_high, x_low = self.pick(swap, c_high, p_high), self.pick(swap, Imm(0), p_low)
        y_high, y_low = self.pick(swap, p_high, c_high), self.pick(swap, p_low, Imm(0))
        sign = self.p("xor.pred", sign_p, self.p("and.pred", swap, differ))
        scale = self.w("max.s32", scale_p, scale_c)
        distance = self.w("min.u32", self.w("sub.s32", scale, self.w("min.s32", scale_p, scale_c)), Imm(127))
        # y >> distance in 128 bits, the bits shifted out a sticky bit (a shift of 64 or more in one word gives 0)
        far = self.p("setp.ge.u32", distance, Imm(64))
        back = self.w("sub.u32", Imm(64), distance)
        near_low = self.d("or.b64", self.d("shr.u64", y_low, distance), self.d("shl.b64", y_high, back))
        near_lost = self.d("shl.b64", y_low, back)
        far_low = self.d("shr.u64", y_high, self.w("sub.u32", distance, Imm(64)))
        far_lost = self.d("or.b64", y_low, self.d("shl.b64", y_high, self.w("sub.u32", Imm(128), distance)))
        lost = self.pick(far, far_lost, near_lost)
        y_high = self.pick(far, Imm(0), self.d("shr.u64", y_high, distance))
        y_low = self.d("or.b64", self.pick(far, far_low, near_low),
                       self.pick(self.p("setp.ne.u64", lost, Imm(0)), Imm(1), Imm(0)))
        # signs that differ: y negated, then added
        y_high, y_low = self.negated_where(differ, y_high, y_low)
        total_low = self.d("add.u64", x_low, y_low)
        carry = self.pick(self.p("setp.lt.u64", total_low, x_low), Imm(1), Imm(0))
        total_high = self.d("add.u64", self.d("add.u64", x_high, y_high), carry)
        # a negative total (bit 127 set: y was the larger): negated, the sign flipped
        below = self.p("setp.lt.s64", total_high, Imm(0))
        total_high, total_low = self.negated_where(below, total_high, total_low)
        sign = self.p("xor.pred", sign, below)
        zero = self.p("setp.eq.u64", self.d("or.b64", total_high, total_low), Imm(0))
        m, shift = self.top_bits(total_high, total_low)
        result = self.round_and_pack(sign, self.w("sub.s32", self.w("add.s32", scale, Imm(1)), shift), m, mode)
        # an exact zero: +0 (-0 rounding down) unless both terms are zeros of one sign, which it keeps
        zero_sign = self.p("and.pred", sign_p, self.emit("not.pred", self.temp("pred"), differ))
        if mode == "rm":
            zero_sign = self.p("or.pred", zero_sign, differ)
        result = self.pick(zero, self.pick(zero_sign, Imm(SIGN), Imm(0)), result)
        infinity = self.d("or.b64", self.pick(sign_p, Imm(SIGN), Imm(0)), Imm(INFINITY))
        result = self.pick(self.p("setp.eq.u32", kind, Imm(1)), infinity, result)
        result = self.pick(self.p("setp.eq.u32", kind, Imm(2)), c, result)
        return self.pick(self.p("setp.eq.u32", kind, Imm(3)), Imm(CANONICAL_NAN), result)

    def negated_where(self, condition: Reg, high, low) -> tuple[Reg, Reg]:
        """128 bits (high, low) negated (two's complement) where ``condition`` holds, else as they are."""
        negated_low = self.d("sub.u64", Imm(0), low)
        negated_high = self.d("add.u64", self.d("not.b64", high),
                              self.pick(self.p("setp.eq.u64", low, Imm(0)), Imm(1), Imm(0)))
        return self.pick(condition, negated_high, high), self.pick(condition, negated_low, low)

    _mad = _fma         # mad.rn.f64 is fma.rn.f64 (PTX: a fused multiply-add in either spelling)

    def _div(self, inst, a, b):
        return self._quotient(a, b, _rounding(inst))

    def _rcp(self, inst, x):
        return self._quotient(Imm(0x3FF0000000000000), x, _rounding(inst))

    def _quotient(self, a, b, mode: str) -> Reg:
        """a / b rounded once: both significands normalised (a subnormal's shifted up by its leading zeros), a's
        doubled where it is below b's, so the quotient is in [1, 2); 63 of its bits by restoring division (a
        uniform loop, a bit a trip: its top bit lands on bit 62), the remainder a sticky bit, rounded as a sum's.
        x / 0 is an infinity, 0 / 0, inf / inf and a NaN operand the canonical NaN, x / inf a zero. What the
        result is, number or not, is worked out before the loop into one word, so that little stays live across
        it."""
        mag_a, mag_b = self.magnitude(a), self.magnitude(b)
        sign = self.p("setp.lt.s64", self.d("xor.b64", a, b), Imm(0))
        nan = self.p("or.pred", self.p("setp.gt.u64", mag_a, Imm(INFINITY)),
                     self.p("setp.gt.u64", mag_b, Imm(INFINITY)))
        zeros = self.p("and.pred", self.p("setp.eq.u64", mag_a, Imm(0)), self.p("setp.eq.u64", mag_b, Imm(0)))
        infinities = self.p("and.pred", self.p("setp.eq.u64", mag_a, Imm(INFINITY)),
                            self.p("setp.eq.u64", mag_b, Imm(INFINITY)))
        nan = self.p("or.pred", nan, self.p("or.pred", zeros, infinities))
        infinite = self.p("or.pred", self.p("setp.eq.u64", mag_a, Imm(INFINITY)),
                          self.p("setp.eq.u64", mag_b, Imm(0)))
        zero = self.p("or.pred", self.p("setp.eq.u64", mag_a, Imm(0)), self.p("setp.eq.u64", mag_b, Imm(INFINITY)))
        # the kind of result, a word: 0 a number, 1 zero, 2 infinite, 3 NaN; 4 its sign
        kind = self.pick(zero, Imm(1), Imm(0), "b32")
        kind = self.pick(infinite, Imm(2), kind, "b32")
        kind = self.pick(nan, Imm(3), kind, "b32")
        kind = self.w("or.b32", kind, self.pick(sign, Imm(4), Imm(0), "b32"))
        (ma, ea), (mb, eb) = (self._normalised(x) for x in (a, b))
        below = self.p("setp.lt.u64", ma, mb)
        ma = self.pick(below, self.d("shl.b64", ma, Imm(1)), ma)
        exponent = self.w("add.s32", self.w("sub.s32", ea, eb),
                          self.pick(below, Imm(1022), Imm(1023), "b32"))
        remainder, quotient = self.temp("b64"), self.temp("b64")
        self.emit("mov.b64", remainder, ma)
        self.emit("mov.b64", quotient, Imm(0))

        def step():
            fits = self.p("setp.ge.u64", remainder, mb)
            self.emit("sub.u64", remainder, remainder, self.pick(fits, mb, Imm(0)))
            self.emit("shl.b64", quotient, quotient, Imm(1))
            self.emit("or.b64", quotient, quotient, self.pick(fits, Imm(1), Imm(0)))
            self.emit("shl.b64", remainder, remainder, Imm(1))
        self._loop(63, step)
        m = self.d("or.b64", quotient, self.pick(self.p("setp.ne.u64", remainder, Imm(0)), Imm(1), Imm(0)))
        sign = self.p("setp.ne.u32", self.w("and.b32", kind, Imm(4)), Imm(0))
        result = self.round_and_pack(sign, exponent, m, mode)
        kind = self.w("and.b32", kind, Imm(3))
        signed_zero = self.pick(sign, Imm(SIGN), Imm(0))
        result = self.pick(self.p("setp.eq.u32", kind, Imm(1)), signed_zero, result)
        result = self.pick(self.p("setp.eq.u32", kind, Imm(2)), self.d("or.b64", signed_zero, Imm(INFINITY)),
                           result)
        return self.pick(self.p("setp.eq.u32", kind, Imm(3)), Imm(CANONICAL_NAN), result)

    def _loop(self, trips: int, body) -> None:
        """``body()`` emitted as a uniform loop of ``trips`` trips (a counter every lane counts alike)."""
        count = self.temp("b32")
        self.emit("mov.b32", count, Imm(trips))
        self.count += 1
        head = Label(f"$__double_loop{self.count}")
        self.body.append(head)
        body()
        self.emit("sub.u32", count, count, Imm(1))
        inst = self.inst
        self.body.append(Instruction("bra", (head,), self.p("setp.ne.u32", count, Imm(0)), False, inst.line,
                                     inst.text))

    def _sqrt(self, inst, x):
        """sqrt rounded once: the significand normalised, doubled where the exponent is odd (an even exponent
        halves exactly), and the root of significand * 2^58 found a bit a trip, two of the radicand's bits at a
        time (56 trips of the digit-by-digit root: the root's top bit lands on bit 55); the root moved up to bit
        62, the remainder a sticky bit, rounded as a sum's. sqrt(-0) = -0, sqrt(+inf) = +inf, a negative number
        or a NaN the canonical NaN."""
        magnitude = self.magnitude(x)
        negative = self.negative(x)
        # the kind of result, a word: 0 a number, 1 x itself (a zero, +inf), 3 NaN
        kind = self.pick(self.p("or.pred", self.p("setp.eq.u64", magnitude, Imm(0)),
                                self.p("setp.eq.u64", x, Imm(INFINITY))), Imm(1), Imm(0), "b32")
        nan = self.p("or.pred", self.p("setp.gt.u64", magnitude, Imm(INFINITY)),
                     self.p("and.pred", negative, self.p("setp.ne.u64", magnitude, Imm(0))))
        kind = self.pick(nan, Imm(3), kind, "b32")
        m, e = self._normalised(x)
        power = self.w("sub.s32", e, Imm(1023))
        odd = self.p("setp.ne.u32", self.w("and.b32", power, Imm(1)), Imm(0))
        m = self.pick(odd, self.d("shl.b64", m, Imm(1)), m)          # 2^52 .. 2^54, the exponent now even
        exponent = self.w("add.s32", self.w("shr.s32", power, Imm(1)), Imm(1023))
        digits, remainder, root = self.temp("b64"), self.temp("b64"), self.temp("b64")
        self.emit("shl.b64", digits, m, Imm(10))                      # the radicand's top pair on bits 63..62
        self.emit("mov.b64", remainder, Imm(0))
        self.emit("mov.b64", root, Imm(0))

        def step():
            self.emit("shl.b64", remainder, remainder, Imm(2))
            self.emit("or.b64", remainder, remainder, self.d("shr.u64", digits, Imm(62)))
            self.emit("shl.b64", digits, digits, Imm(2))
            trial = self.d("or.b64", self.d("shl.b64", root, Imm(2)), Imm(1))
            fits = self.p("setp.ge.u64", remainder, trial)
            self.emit("sub.u64", remainder, remainder, self.pick(fits, trial, Imm(0)))
            self.emit("shl.b64", root, root, Imm(1))
            self.emit("or.b64", root, root, self.pick(fits, Imm(1), Imm(0)))
        self._loop(56, step)
        sticky = self.pick(self.p("setp.ne.u64", remainder, Imm(0)), Imm(1), Imm(0))
        positive = self.p("setp.lt.u32", kind, Imm(0))        # never: a root's sign is +
        result = self.round_and_pack(positive, exponent,
                                     self.d("or.b64", self.d("shl.b64", root, Imm(7)), sticky),
                                     _rounding(inst) or "rn")
        result = self.pick(self.p("setp.eq.u32", kind, Imm(1)), x, result)
        return self.pick(self.p("setp.eq.u32", kind, Imm(3)), Imm(CANONICAL_NAN), result)

    def _normalised(self, x) -> tuple[Reg, Reg]:
        """x's significand with its top bit on bit 52 (a subnormal's shifted up by its leading zeros) and its
        exponent (a subnormal's below 1 by as much)."""
        e = self.exponent(x)
        m = self.significand(x, e)
        shift = self.w("max.s32", self.w("sub.s32", self.w("clz.b64", m), Imm(11)), Imm(0))
        return self.d("shl.b64", m, shift), self.w("sub.s32", self.w("max.u32", e, Imm(1)), shift)

    def _cvt(self, inst, x):
        mods = inst.modifiers
        if mods == ("f64", "f32"):
            return self._widen(x)
        if mods[1:] == ("f32", "f64"):
            return self._narrow(x, mods[0])
        if mods[1:] in (("f64", "s32"), ("f64", "u32")):
            return self._from_word(x, mods[2] == "s32")
        if mods[1:] in (("f64", "s64"), ("f64", "u64")):
            return self._from_long(x, mods[2] == "s64", mods[0])
        if mods[1:] == ("f64", "f64"):
            return self._integral(x, mods[0])
        if mods[0] != "rzi":        # __double2int_rn / _rd / _ru, lrint: the integral value, then toward zero
            x = self._integral(x, mods[0])
        if mods[1] in ("s64", "u64"):
            return self._to_wide(x, mods[1] == "s64")
        return self._to_word(x, mods[1] == "s32")

    def _to_wide(self, x, signed: bool) -> Reg:
        """cvt.rzi.s64 / u64 .f64, (long long)d: the significand shifted by the exponent, toward zero; saturated as
        PTX says (to the type's range, a negative number to 0 unsigned), a NaN 0."""
        sign = self.negative(x)
        e = self.exponent(x)
        m = self.significand(x, e)
        power = self.w("sub.s32", e, Imm(1023))            # the value is m * 2^(power - 52)
        up = self.d("shl.b64", m, self.w("min.u32", self.w("sub.u32", power, Imm(52)), Imm(63)))
        down = self.d("shr.u64", m, self.w("min.u32", self.w("sub.u32", Imm(52), power), Imm(63)))
        whole = self.pick(self.p("setp.ge.s32", power, Imm(52)), up, down)
        whole = self.pick(self.p("setp.lt.s32", power, Imm(0)), Imm(0), whole)
        if signed:
            value = self.pick(sign, self.d("sub.s64", Imm(0), whole), whole)
            saturated = self.pick(sign, Imm(SIGN), Imm(MAGNITUDE))      # -2^63 itself is INT64_MIN
            value = self.pick(self.p("setp.ge.s32", power, Imm(63)), saturated, value)
        else:
            value = self.pick(self.p("setp.ge.s32", power, Imm(64)), Imm((1 << 64) - 1), whole)
            value = self.pick(sign, Imm(0), value)
        return self.pick(self.p("setp.gt.u64", self.magnitude(x), Imm(INFINITY)), Imm(0), value)

    def _integral(self, x, mode: str) -> Reg:
        """cvt.rzi / rmi / rpi / rni .f64.f64 (trunc, floor, ceil, rint): the fraction's bits below the exponent's
        units cleared, then one unit added to the magnitude where the mode rounds away from zero (floor of a
        negative number with a fraction, ceil of a positive one, rint above half or at half of an odd one; the carry
        runs into the exponent); |x| < 1 gives a zero of x's sign or 1.0 with it; an integer, an infinity stays,
        a NaN becomes the canonical NaN."""
        sign = self.negative(x)
        magnitude = self.magnitude(x)
        power = self.w("sub.s32", self.exponent(x), Imm(1023))
        # 0 <= power < 52: the fraction's bits below the units
        cut = self.d("shr.u64", Imm(FRACTION), self.w("min.u32", power, Imm(63)))
        fraction = self.d("and.b64", x, cut)
        kept = self.d("xor.b64", x, fraction)
        unit = self.d("add.u64", cut, Imm(1))
        inexact = self.p("setp.ne.u64", fraction, Imm(0))
        if mode == "rni":
            half = self.d("shr.u64", unit, Imm(1))
            odd = self.p("setp.ne.u64", self.d("and.b64", kept, unit), Imm(0))
            away = self.p("or.pred", self.p("setp.gt.u64", fraction, half),
                          self.p("and.pred", self.p("setp.eq.u64", fraction, half), odd))
        elif mode == "rzi":
            away = None
        else:
            toward = sign if mode == "rmi" else self.emit("not.pred", self.temp("pred"), sign)
            away = self.p("and.pred", inexact, toward)
        result = kept if away is None else self.d("add.u64", kept, self.pick(away, unit, Imm(0)))
        # |x| < 1: a zero of x's sign, or 1.0 of it (floor of a negative, ceil of a positive, rint above half)
        signed_zero = self.pick(sign, Imm(SIGN), Imm(0))
        if mode == "rni":
            one = self.p("setp.gt.u64", magnitude, Imm(0x3FE0000000000000))
        elif mode == "rzi":
            one = None
        else:
            toward = sign if mode == "rmi" else self.emit("not.pred", self.temp("pred"), sign)
            one = self.p("and.pred", toward, self.p("setp.ne.u64", magnitude, Imm(0)))
        small = signed_zero if one is None else self.pick(one, self.d("or.b64", signed_zero, Imm(0x3FF0000000000000)),
                                                          signed_zero)
        result = self.pick(self.p("setp.lt.s32", power, Imm(0)), small, result)
        result = self.pick(self.p("setp.ge.s32", power, Imm(52)), x, result)        # no fraction left
        return self.pick(self.p("setp.gt.u64", magnitude, Imm(INFINITY)), Imm(CANONICAL_NAN), result)

    def _joined(self, lo, hi) -> Reg:
        """(u64)hi << 32 | lo of two words."""
        return self.d("or.b64", self.d("shl.b64", self.d("cvt.u64.u32", hi), Imm(32)), self.d("cvt.u64.u32", lo))

    def _widen(self, f) -> Reg:
        """cvt.f64.f32, exact: the exponent rebiased (+896), the fraction moved to the top of 52 bits; a float32
        subnormal normalised first (it is a normal double); zeros keep their sign, infinities stay infinite, a NaN
        becomes the canonical NaN."""
        sign = self.w("and.b32", f, Imm(0x80000000))
        magnitude = self.w("and.b32", f, Imm(0x7FFFFFFF))
        exponent = self.w("shr.u32", magnitude, Imm(23))
        # a subnormal: shifted so its top bit is the hidden one (bit 23), its exponent 1 - shift
        shift = self.w("sub.u32", self.w("clz.b32", magnitude), Imm(8))
        subnormal = self.p("setp.eq.u32", exponent, Imm(0))
        fraction = self.w("and.b32", self.pick(subnormal, self.w("shl.b32", magnitude, shift), magnitude, "b32"),
                          Imm(0x7FFFFF))
        exponent = self.pick(subnormal, self.w("sub.u32", Imm(1), shift), exponent, "b32")
        high = self.w("or.b32", self.w("shl.b32", self.w("add.u32", exponent, Imm(896)), Imm(20)),
                      self.w("shr.u32", fraction, Imm(3)))
        high = self.pick(self.p("setp.eq.u32", magnitude, Imm(0)), Imm(0), high, "b32")
        high = self.pick(self.p("setp.eq.u32", magnitude, Imm(0x7F800000)), Imm(0x7FF00000), high, "b32")
        high = self.w("or.b32", high, sign)
        low = self.w("shl.b32", fraction, Imm(29))
        result = self._joined(low, high)
        return self.pick(self.p("setp.gt.u32", magnitude, Imm(0x7F800000)), Imm(CANONICAL_NAN), result)

    def _narrow(self, x, mode: str) -> Reg:
        """cvt.r*.f32.f64: the significand's top 24 bits rounded once at the float32 exponent (rebiased -896;
        below float32's smallest normal exponent shifted further, a subnormal), packed as exponent - 1 + the
        significand, past the largest float32 infinity or the largest finite as the mode says; a NaN the
        canonical float32 NaN."""
        sign = self.negative(x)
        magnitude = self.magnitude(x)
        e = self.exponent(x)
        m = self.significand(x, e)
        exponent = self.w("sub.s32", self.w("max.u32", e, Imm(1)), Imm(896))        # float32's biased exponent
        # 29 bits fall off a normal float32; below exponent 1, 1 - exponent more; 63 at most (the rest sticky)
        cut = self.w("min.u32", self.w("add.u32", Imm(29), self.w("max.s32", self.w("sub.s32", Imm(1), exponent),
                                                                     Imm(0))), Imm(63))
        kept = self.w("cvt.u32.u64", self.d("shr.u64", m, cut))
        tail = self.d("shl.b64", m, self.w("sub.u32", Imm(64), cut))      # the bits cut, at the top of 64
        up = self.rounds_up(sign, tail, SIGN, mode,
                            lambda: self.p("setp.ne.u32", self.w("and.b32", kept, Imm(1)), Imm(0)))
        if up is not None:
            kept = self.w("add.u32", kept, self.pick(up, Imm(1), Imm(0), "b32"))
        exponent = self.w("max.s32", exponent, Imm(1))
        packed = self.w("add.u32", self.w("shl.b32", self.w("sub.u32", exponent, Imm(1)), Imm(23)), kept)
        # an exponent past float32's: infinity (or the largest finite); packed may have wrapped past 2^32 there
        past = self.p("or.pred", self.p("setp.ge.u32", packed, Imm(0x7F800000)),
                      self.p("setp.gt.s32", exponent, Imm(254)))
        packed = self.pick(past, self.overflowed(sign, mode, 0x7F800000, 0x7F7FFFFF), packed, "b32")
        packed = self.w("or.b32", packed, self.pick(sign, Imm(0x80000000), Imm(0), "b32"))
        special = self.p("setp.ge.u64", magnitude, Imm(INFINITY))
        infinity = self.pick(sign, Imm(0xFF800000), Imm(0x7F800000), "b32")
        packed = self.pick(special, infinity, packed, "b32")
        return self.pick(self.p("setp.gt.u64", magnitude, Imm(INFINITY)), Imm(FLOAT_NAN), packed, "b32")

    def _from_word(self, x, signed: bool) -> Reg:
        """cvt.rn.f64.s32 / u32, exact: the magnitude's top bit moved to bit 31 (clz), the 31 bits below it the
        fraction's top, the exponent 1023 + 31 - clz; 0 is +0."""
        magnitude = x
        negative = None
        if signed:
            negative = self.p("setp.lt.s32", x, Imm(0))
            magnitude = self.pick(negative, self.w("sub.s32", Imm(0), x), x, "b32")
        zeros = self.w("clz.b32", magnitude)
        fraction = self.w("shl.b32", self.w("shl.b32", magnitude, zeros), Imm(1))     # the hidden bit dropped
        high = self.w("or.b32", self.w("shl.b32", self.w("sub.u32", Imm(1054), zeros), Imm(20)),
                      self.w("shr.u32", fraction, Imm(12)))
        if negative is not None:
            high = self.w("or.b32", high, self.pick(negative, Imm(0x80000000), Imm(0), "b32"))
        high = self.pick(self.p("setp.eq.u32", magnitude, Imm(0)), Imm(0), high, "b32")
        return self._joined(self.w("shl.b32", fraction, Imm(20)), high)

    def _from_long(self, x, signed: bool, mode: str) -> Reg:
        """cvt.rn / rz / rm / rp .f64.s64 / u64, (double) of a long long (``__ll2double_rz``, ...): the magnitude
        (-2^63's is 2^63, unsigned) with its top bit moved to bit 62, a bit shifted out past it kept as a sticky bit
        (``normalise``), rounded once to 53 bits at exponent 1023 + 62; 0 is +0."""
        if signed:
            sign = self.p("setp.lt.s64", x, Imm(0))
            magnitude = self.pick(sign, self.d("sub.s64", Imm(0), x), x)
        else:
            sign, magnitude = self.p("setp.ne.u64", x, x), x        # never: an unsigned value has no sign
        m, exponent = self.normalise(magnitude, Imm(1023 + 62))
        packed = self.round_and_pack(sign, exponent, m, mode)
        return self.pick(self.p("setp.eq.u64", x, Imm(0)), Imm(0), packed)

    def _to_word(self, x, signed: bool) -> Reg:
        """cvt.rzi.s32 / u32 .f64, C's (int)d: the significand shifted right by 52 - (exponent - 1023), toward
        zero; saturated as PTX says (to the type's range, a negative to 0 unsigned), a NaN 0."""
        sign = self.negative(x)
        e = self.exponent(x)
        m = self.significand(x, e)
        power = self.w("sub.s32", e, Imm(1023))            # the value is m * 2^(power - 52)
        small = self.p("setp.lt.s32", power, Imm(0))       # |x| < 1: 0
        shift = self.w("min.u32", self.w("sub.u32", Imm(52), self.w("max.s32", power, Imm(0))), Imm(63))
        whole = self.w("cvt.u32.u64", self.d("shr.u64", m, shift))
        whole = self.pick(small, Imm(0), whole, "b32")
        if signed:
            value = self.pick(sign, self.w("sub.s32", Imm(0), whole), whole, "b32")
            big = self.p("setp.ge.s32", power, Imm(31))     # |x| >= 2^31: saturated (-2^31 exactly is INT_MIN)
            value = self.pick(big, self.pick(sign, Imm(0x80000000), Imm(0x7FFFFFFF), "b32"), value, "b32")
        else:
            big = self.p("setp.ge.s32", power, Imm(32))
            value = self.pick(big, Imm(0xFFFFFFFF), whole, "b32")
            value = self.pick(sign, Imm(0), value, "b32")
        nan = self.p("setp.gt.u64", self.magnitude(x), Imm(INFINITY))
        return self.pick(nan, Imm(0), value, "b32")


def _prefix(name: str) -> str:
    """A register's declared prefix (%fd of %fd12)."""
    return name.rstrip("0123456789")

