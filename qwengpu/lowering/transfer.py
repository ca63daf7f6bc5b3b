"""The one transfer function per PTX instruction: what its destination becomes, abstractly.

``evaluate`` says what one instruction's destination holds (a constant, a thread-index expression, or DYNAMIC: the
machine computes it); ``step`` applies it to a state, guard included. Constant propagation, the emitter's scan for
the registers the machine must hold, and the emitter itself all call ``step``, so there is no second copy of an
instruction's meaning to disagree with (a guard that is constant false once meant three different things).

Example::

    >>> from qwengpu.ptx import Instruction, Reg, Imm
    >>> inst = Instruction("add.s32", (Reg("%r1"), Reg("%tid.x"), Imm(3)), None, False, 1, "add.s32 %r1, %tid.x, 3")
    >>> state = {}
    >>> step(inst, state, make_reader(state, Context({}, 4)), Context({}, 4)), state
    ('%r1', {'%r1': Affine(coef=1, offset=3)})
"""
from __future__ import annotations

from ..isa import MachineError
from ..ptx import Instruction, Mem, Reg
from .floats import is_float_type
from .packed import PACKED
from .semantics import bits_of, fold, types
from .values import (DYNAMIC, MASK32, MASK64, Affine, Const, Context, destination, join, make_reader,
                     signed, signed_value, unsupported, width)

__all__ = ["evaluate", "step", "guard_value", "make_reader", "sources", "WARP_INSTRUCTIONS"]

# Instructions that exchange values between the lanes of a warp (lowering.warp): nothing about their results is
# known before the machine runs.
WARP_INSTRUCTIONS = ("shfl", "vote", "activemask", "redux", "match")

FLOAT_MODIFIERS = {"rn", "rz", "rm", "rp", "ftz", "sat", "approx", "full"}

# The arithmetic and logic instructions, and the modifiers their builders read besides the types (lowering.
# arithmetic, lowering.bits): the halves of a product, bfind's shift amount, a funnel shift's direction and mode,
# vabsdiff's accumulate, setp's tests and combining ops, prmt's modes (the last two refused by their builders, by
# name). Any other modifier on one of these instructions is refused: one the lowering did not read would run as the
# plain instruction, silently (``max.relu`` once did).
ALU = {"add", "sub", "mul", "mad", "div", "rem", "abs", "neg", "min", "max", "and", "or", "xor", "not", "cnot",
       "shl", "shr", "shf", "popc", "clz", "brev", "bfe", "bfi", "bfind", "prmt", "lop3", "sad", "selp", "slct",
       "setp", "cvt", "dp4a", "dp2a", "vabsdiff2", "vabsdiff4"}
ALU_MODIFIERS = {"lo", "hi", "wide", "shiftamt", "l", "r", "wrap", "clamp", "add",
                 "eq", "ne", "lt", "le", "gt", "ge", "ls", "hs", "equ", "neu", "ltu", "leu", "gtu", "geu", "num",
                 "nan", "and", "or", "xor", "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"}


def sources(inst: Instruction) -> list:
    """The operands an instruction reads as values (memory operands excluded), in order."""
    ops = inst.operands
    first = 1 if destination(inst) is not None else 0
    return [o for o in ops[first:] if not isinstance(o, Mem)]


def registers_read(inst: Instruction) -> set[str]:
    """The registers an instruction reads: its value operands, the bases of its memory operands and its guard."""
    first = 1 if destination(inst) is not None else 0
    names = set()
    for operand in list(inst.operands[first:]) + [inst.guard]:
        if isinstance(operand, Mem):
            operand = operand.base
        if isinstance(operand, Reg):
            names.add(operand.name)
    return names


def check_integer(inst: Instruction) -> None:
    """Floating point is refused by name: the machine's ALU has integer ops only (the float32 instructions that are
    integer work were rewritten before: lowering.floats)."""
    if any(is_float_type(m) for m in inst.modifiers) or FLOAT_MODIFIERS & set(inst.modifiers) - {"sat"}:
        raise MachineError(f"unsupported PTX instruction at line {inst.line} (the machine has no floating point): "
                           f"{inst.text}", line=inst.line)
    if "sat" in inst.modifiers:
        raise unsupported(inst, "an integer instruction that saturates (.sat) is not built")
    if "relu" in inst.modifiers or any(PACKED.fullmatch(m) for m in inst.modifiers):  # not lowering.packed's
        raise unsupported(inst, "of the instructions on packed lanes, add / sub / min / max .u16x2 / .s16x2 run")
    if inst.base in ALU:
        unknown = [m for m in inst.modifiers if m not in ALU_MODIFIERS and bits_of(m) is None and m != "pred"]
        if unknown:
            raise unsupported(inst, f"the modifier .{unknown[0]} of {inst.base} is not built")


def param_value(inst: Instruction, context: Context) -> Const:
    """A read of a kernel parameter: its bytes at the operand's offset, at the instruction's width, extended to the
    destination register's (``ld.param.s32 %rd2``, NVRTC's ``(long long)n``, sign-extends into all 64 bits)."""
    mem = inst.operands[1]
    if not isinstance(mem, Mem) or not isinstance(mem.base, str) or mem.base not in context.params:
        raise unsupported(inst, "a parameter is read through its symbol")
    bits = width(inst)
    raw = context.params[mem.base].value
    value = (raw >> (8 * mem.offset)) & ((1 << bits) - 1)
    if signed(inst) and value >> (bits - 1):
        value -= 1 << bits
    wide = bits == 64 or context.register_bits(inst.operands[0].name) == 64
    return Const(value & (MASK64 if wide else MASK32))


def _affine(op: str, a, b):
    """coef * tid + offset arithmetic; None when the result is not affine."""
    if op == "add":
        if isinstance(a, Const) and isinstance(b, Affine):
            a, b = b, a
        if isinstance(a, Affine) and isinstance(b, Const):
            return Affine(a.coef, a.offset + signed_value(b.value, 64))
        if isinstance(a, Affine) and isinstance(b, Affine):
            coef = a.coef + b.coef
            return Affine(coef, a.offset + b.offset) if coef else Const((a.offset + b.offset) & MASK64)
    if op == "sub" and isinstance(a, Affine) and isinstance(b, Const):
        return Affine(a.coef, a.offset - signed_value(b.value, 64))
    if op == "mul":
        if isinstance(a, Const) and isinstance(b, Affine):
            a, b = b, a
        if isinstance(a, Affine) and isinstance(b, Const):
            k = signed_value(b.value, 64)
            return Affine(a.coef * k, a.offset * k) if k else Const(0)
    if op == "shl" and isinstance(a, Affine) and isinstance(b, Const) and b.value < 32:
        return Affine(a.coef << b.value, a.offset << b.value)
    return None


def _widened_index(value: Affine, is_signed: bool, context: Context):
    """A 32-bit thread-index value widened to 64 bits: the word each thread holds (its value mod 2^32), zero- or
    sign-extended. Where every thread's word lies in one window of 2^32 values (``tid``: [0, 2^32); ``tid - 1``
    sign-extended: [-2^31, 2^31)) that is the value moved by a multiple of 2^32, still affine; ``(unsigned)(tid -
    1)`` zero-extended is 2^32 - 1 on thread 0 and 0 on thread 1: not affine."""
    least, greatest = value.bounds(context.threads)
    low = -(1 << 31) if is_signed else 0
    window = (least - low) >> 32
    if (greatest - low) >> 32 != window:
        return DYNAMIC
    return Affine(value.coef, value.offset - (window << 32))


def _decided_by_range(inst: Instruction, a, b, context: Context):
    """A compare of a thread-index expression with a constant that every thread of the launch decides alike
    (``i < n`` with n >= threads) is a constant: the launch's thread count bounds tid to 0..threads-1."""
    if isinstance(b, Affine) and isinstance(a, Const):
        mirror = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "lo": "hi", "hi": "lo", "ls": "hs", "hs": "ls"}
        cmp = inst.modifiers[0]
        flipped = Instruction(".".join([inst.base, mirror.get(cmp, cmp)] + list(inst.modifiers[1:])), (),
                              None, False, inst.line, inst.text)
        return _decided_by_range(flipped, b, a, context)
    bits = width(inst)
    if not (isinstance(a, Affine) and isinstance(b, Const)):
        return DYNAMIC
    lo, hi = a.bounds(context.threads)
    if lo < -(1 << 31) or hi >= (1 << 31) or hi - lo > 4096:
        return DYNAMIC
    mask = MASK64 if bits > 32 else MASK32
    results = {fold(inst, [(a.coef * t + a.offset) & mask, b.value]) for t in range(context.threads)}
    return Const(results.pop()) if len(results) == 1 else DYNAMIC


def evaluate(inst: Instruction, read, context: Context):
    """Abstract result of ``inst`` (the value of its destination), given read(operand) -> abstract value."""
    check_integer(inst)
    base, mods = inst.base, inst.modifiers
    if base == "ld" and "param" in mods:
        return param_value(inst, context)
    if base in ("ld", "atom") or base in WARP_INSTRUCTIONS:
        return DYNAMIC
    values = [read(o) for o in sources(inst)]
    if any(v is None for v in values):
        return None
    if base == "selp" and isinstance(values[2], Const):
        return values[0] if values[2].value else values[1]
    if base in ("and", "or") and len(values) == 2:
        # x & 0 is 0 and x | ~0 is ~0 whatever x is (a float min / max whose operand is a literal, never a NaN,
        # asks whether both are NaNs: lowering.floats)
        bits = width(inst)
        absorbing = 0 if base == "and" else (1 << bits) - 1
        if any(isinstance(v, Const) and v.value & ((1 << bits) - 1) == absorbing for v in values):
            return Const(absorbing)
    if all(isinstance(v, Const) for v in values):
        result = fold(inst, [v.value for v in values])
        return DYNAMIC if result is None else Const(result)
    if base in ("mov", "cvta"):
        return values[0]
    typed = types(inst)
    if base == "cvt" and isinstance(values[0], Affine) and len(typed) == 2:
        if typed[0][1:] == typed[1][1:]:
            return values[0]
        if bits_of(typed[0]) == 64 and bits_of(typed[1]) == 32:
            return _widened_index(values[0], typed[1].startswith("s"), context)
    if base in ("add", "sub", "shl") and len(values) == 2:
        result = _affine(base, values[0], values[1])
        return DYNAMIC if result is None else result
    if base in ("mul", "mad") and "wide" in mods and len(values) >= 2:
        # a wide product multiplies the two words as 32-bit values (zero- or sign-extended), each thread's own
        values = [_widened_index(v, signed(inst), context) if isinstance(v, Affine) else
                  Const(signed_value(v.value, 32) if signed(inst) else v.value & MASK32) if isinstance(v, Const)
                  else v for v in values[:2]] + values[2:]
        if DYNAMIC in values[:2]:
            return DYNAMIC
    if base == "mul" and ("lo" in mods or "wide" in mods):
        result = _affine("mul", values[0], values[1])
        return DYNAMIC if result is None else result
    if base == "mad" and ("lo" in mods or "wide" in mods):
        product = _affine("mul", values[0], values[1])
        if isinstance(values[0], Const) and isinstance(values[1], Const):
            product = Const(fold(Instruction(inst.opcode.replace("mad", "mul", 1), (), None, False, 0, ""),
                                 [values[0].value, values[1].value]))
        result = _affine("add", product, values[2]) if product is not None else None
        return DYNAMIC if result is None else result
    if base == "setp" and len(values) == 2:
        return _decided_by_range(inst, values[0], values[1], context)
    return DYNAMIC


def guard_value(inst: Instruction, read):
    """Const(1) when the instruction runs on every lane that reaches it, Const(0) when on none, else DYNAMIC."""
    if inst.guard is None:
        return Const(1)
    guard = read(inst.guard)
    if isinstance(guard, Const):
        return Const(int(bool(guard.value) != inst.guard_negated))
    return DYNAMIC if guard is not None else None


def step(inst: Instruction, state: dict, read, context: Context) -> str | None:
    """Apply ``inst`` to ``state`` (its transfer function, guard included); returns the register it wrote.

    A guard that is constant false leaves the state as it was; a guard the machine decides joins the old and new
    values (a lane that skips keeps its old value)."""
    dst = destination(inst)
    if dst is None:
        return None
    guard = guard_value(inst, read)
    if guard == Const(0):
        return None
    value = evaluate(inst, read, context)
    if guard != Const(1):
        value = join(state.get(dst, Const(0)), value)
    state[dst] = value
    if inst.pair is not None:           # shfl's and match.all's "d|p": the predicate is the machine's too
        state[inst.pair.name] = DYNAMIC
    return dst

