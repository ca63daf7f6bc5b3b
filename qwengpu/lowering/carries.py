"""Carry chains as plain integer PTX: ``add.cc`` / ``addc``, ``sub.cc`` / ``subc``, ``mad.lo.cc`` / ``madc``.

PTX's extended-precision instructions pass a carry (or a borrow) from one instruction to the next through the
condition code CC.CF, which the machine does not have. Multi-word arithmetic in inline assembly is written with
them: a 96- or 128-bit sum, product or difference a word at a time (CUDA's double ``sin`` / ``cos`` reduce a huge
argument so, a product of the argument with 2/pi's bits, in its ``__internal_trig_reduction_slowpathd``). This
stage gives CC.CF a register of its own, a word that holds 0 or 1, and writes each such instruction as the plain
instructions that compute its result and the carry out:

- ``add.cc d, a, b``: d = a + b, carry = d < a (unsigned: the sum wrapped);
- ``addc d, a, b``: d = a + b + carry; with ``.cc`` the carry out is that of either add;
- ``sub.cc d, a, b``: d = a - b, borrow = a < b; ``subc``: d = a - b - borrow, either subtraction's borrow out;
- ``mad.lo.cc`` / ``mad.hi.cc d, a, b, c``: the product's low or high half plus c, and its carry;
  ``madc.lo`` / ``madc.hi``: plus the carry in too.

An instruction under a guard writes its destination and the carry under it (a lane that skips it keeps both).
Widths are the instruction's: ``.u32`` / ``.s32`` words, ``.u64`` / ``.s64`` values that the pairs stage keeps as
pairs of words. The carry register starts at 0, as the condition code's value is undefined before a carry is
written (PTX reads it only after an instruction that wrote it).

Example::

    >>> from qwengpu.ptx import Instruction, Reg, Kernel
    >>> add = Instruction("add.cc.u32", (Reg("%r3"), Reg("%r1"), Reg("%r2")), None, False, 3, "add.cc.u32 ...")
    >>> k = rewrite(Kernel("k", body=[add], registers={"%r": "b32"}))
    >>> [i.opcode for i in k.body]
    ['add.u32', 'setp.lt.u32', 'selp.b32', 'mov.b32', 'mov.b32']
"""
from __future__ import annotations

from ..isa import MachineError
from ..ptx import Imm, Instruction, Kernel, Reg
from .rewriting import Rewriter, rewrite_chosen

__all__ = ["rewrite", "CARRYING"]

CARRYING = ("addc", "subc", "madc")     # instructions that read the carry; ``.cc`` on any of these or on
#                                         add / sub / mad writes it
TYPES = ("u32", "s32", "u64", "s64")


def _carries(inst: Instruction) -> bool:
    return inst.base in CARRYING or (inst.base in ("add", "sub", "mad") and "cc" in inst.modifiers)


def rewrite(kernel: Kernel) -> Kernel:
    """The kernel with each carry-chain instruction written as plain instructions and a carry register."""
    return rewrite_chosen(kernel, _carries, _Builder)


class _Builder(Rewriter):
    """Writes one carry-chain instruction at a time into ``body``, with fresh temporaries and one carry word."""

    def __init__(self, kernel: Kernel):
        super().__init__(kernel, "%carry_")
        self.carry = Reg(self.prefix + "cf")
        self.temporaries[self.prefix + "cf"] = "b32"

    def rewrite(self, inst: Instruction) -> None:
        self.inst = inst
        types = [m for m in inst.modifiers if m in TYPES]
        if len(types) != 1:
            raise MachineError(f"PTX line {inst.line}: a carry-chain instruction takes one of the integer types "
                               f"{', '.join('.' + t for t in TYPES)}: {inst.text}")
        bits = types[0][1:]
        word = f"b{bits}"
        unsigned = f"u{bits}"
        dst, a, b, *rest = inst.operands
        reads = inst.base in CARRYING
        writes = "cc" in inst.modifiers
        carry_in = self.carry if bits == "32" else self.emit("cvt.u64.u32", self.temp("b64"), self.carry)
        carries = []        # predicates: a carry out of one of the steps
        if inst.base in ("add", "addc", "mad", "madc"):
            if inst.base in ("mad", "madc"):
                half = next(m for m in inst.modifiers if m in ("lo", "hi"))
                a = self.emit(f"mul.{half}.{types[0]}", self.temp(word), a, b)
                b = rest[0]
            total = self.emit(f"add.{unsigned}", self.temp(word), a, b)
            carries.append(self.emit(f"setp.lt.{unsigned}", self.temp("pred"), total, a))
            if reads:
                first = total
                total = self.emit(f"add.{unsigned}", self.temp(word), first, carry_in)
                carries.append(self.emit(f"setp.lt.{unsigned}", self.temp("pred"), total, first))
        else:       # sub, subc: a borrow
            total = self.emit(f"sub.{unsigned}", self.temp(word), a, b)
            carries.append(self.emit(f"setp.lt.{unsigned}", self.temp("pred"), a, b))
            if reads:
                first = total
                total = self.emit(f"sub.{unsigned}", self.temp(word), first, carry_in)
                carries.append(self.emit(f"setp.lt.{unsigned}", self.temp("pred"), first, carry_in))
        if writes:
            out = carries[0] if len(carries) == 1 else self.emit("or.pred", self.temp("pred"), *carries)
            flag = self.emit("selp.b32", self.temp("b32"), Imm(1), Imm(0), out)
        self.emit(f"mov.{word}", dst, total, guarded=True)
        if writes:
            self.emit("mov.b32", self.carry, flag, guarded=True)
