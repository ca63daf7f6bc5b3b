"""Packed 16-bit lanes, and ``.relu``, as plain word instructions: PTX's ``.u16x2`` / ``.s16x2`` add, sub, min and
max, and ``min`` / ``max .relu``.

sm_90's PTX adds and compares two 16-bit lanes of a word at once; CUDA's SIMD intrinsics (``__vadd2``,
``__vsub2``, ``__vmaxs2``, ``__vabsdiffs2``, ...) write these in inline assembly. The machine's ops are 32-bit, so
a lane's carry must be kept from crossing into the other lane (a plain 32-bit add of the word would carry the low
lane's overflow into the high lane, silently). This stage writes each such instruction as plain ``.b32``
instructions, before the later stages read any, so they see integer PTX only:

- add: the lanes' low 15 bits added (no carry leaves a lane), then each lane's top bit as the xor of the operands'
  and the carry into it: ``((a & 0x7fff7fff) + (b & 0x7fff7fff)) ^ ((a ^ b) & 0x80008000)``, 5 instructions;
- sub: each lane's top bit set in a and cleared in b (no borrow leaves a lane), then the top bits put right:
  ``((a | 0x80008000) - (b & 0x7fff7fff)) ^ ((a ^ ~b) & 0x80008000)``, 6 instructions;
- min / max: the lanes taken apart (sign- or zero-extended), compared as words, put together: 9 instructions.

``min`` / ``max .relu`` (``.s32`` and ``.s16x2``: sm_90's DPX, CUDA's ``__vimax_s32_relu``, ``__vimin3_s16x2_relu``)
gives 0 for a negative result, or a negative lane: the plain instruction, then a ``max`` with 0 (the later stages
would read a ``.relu`` they did not know as the plain instruction, silently). Any other instruction on packed lanes
(a type of more lanes, ``.relu`` of unsigned lanes) is refused naming it.

Example::

    >>> from qwengpu.ptx import Instruction, Kernel, Reg
    >>> add = Instruction("add.u16x2", (Reg("%r3"), Reg("%r1"), Reg("%r2")), None, False, 3, "add.u16x2 ...")
    >>> [i.opcode for i in rewrite(Kernel("k", body=[add], registers={"%r": "b32"})).body]
    ['and.b32', 'and.b32', 'add.u32', 'xor.b32', 'and.b32', 'xor.b32']
"""
from __future__ import annotations

import re

from ..ptx import Imm, Instruction, Kernel
from .rewriting import Rewriter, rewrite_chosen
from .values import unsupported

__all__ = ["rewrite", "is_packed"]

LANE_TOPS = 0x80008000          # each 16-bit lane's top bit
LANE_RESTS = 0x7FFF7FFF         # and the bits below it
PACKED = re.compile(r"[usb]\d+x\d+")


def is_packed(inst: Instruction) -> bool:
    """Whether an instruction computes on packed integer lanes (a type such as ``.u16x2``) or has ``.relu``."""
    return "relu" in inst.modifiers or any(PACKED.fullmatch(m) for m in inst.modifiers)


def rewrite(kernel: Kernel) -> Kernel:
    """The kernel with each ``.u16x2`` / ``.s16x2`` add, sub, min and max, and each ``.relu``, written as word
    instructions."""
    return rewrite_chosen(kernel, is_packed, _Builder)


class _Builder(Rewriter):
    def __init__(self, kernel: Kernel):
        super().__init__(kernel, "%packed_")

    def rewrite(self, inst: Instruction) -> None:
        self.inst = inst
        if "relu" in inst.modifiers:
            mods = tuple(m for m in inst.modifiers if m != "relu")
            if inst.base not in ("min", "max") or mods not in (("s32",), ("s16x2",)) or len(inst.operands) != 3:
                raise unsupported(inst, ".relu is built on min / max .s32 and .s16x2")
            result = self.temp("b32")
            self._plain(Instruction(f"{inst.base}.{mods[0]}", (result,) + inst.operands[1:], None, False,
                                    inst.line, inst.text))
            self._plain(Instruction(f"max.{mods[0]}", (inst.operands[0], result, Imm(0)), inst.guard,
                                    inst.guard_negated, inst.line, inst.text))
            return
        if inst.base not in ("add", "sub", "min", "max") or inst.modifiers not in (("u16x2",), ("s16x2",)) \
                or len(inst.operands) != 3:
            raise unsupported(inst, "of the instructions on packed lanes, add / sub / min / max .u16x2 / .s16x2 run")
        dst, a, b = inst.operands
        if inst.base == "add":
            total = self.emit("add.u32", self.temp("b32"), self._and(a, LANE_RESTS), self._and(b, LANE_RESTS))
            tops = self._and(self.emit("xor.b32", self.temp("b32"), a, b), LANE_TOPS)
            self.emit("xor.b32", dst, total, tops, guarded=True)
        elif inst.base == "sub":
            raised = self.emit("or.b32", self.temp("b32"), a, Imm(LANE_TOPS))
            difference = self.emit("sub.u32", self.temp("b32"), raised, self._and(b, LANE_RESTS))
            flipped = self.emit("xor.b32", self.temp("b32"), a, self.emit("not.b32", self.temp("b32"), b))
            self.emit("xor.b32", dst, difference, self._and(flipped, LANE_TOPS), guarded=True)
        else:
            kind = inst.modifiers[0][0]            # "s": lanes compared as signed halves, "u" as unsigned
            low = self.emit(f"{inst.base}.{kind}32", self.temp("b32"), self._low_lane(a, kind),
                            self._low_lane(b, kind))
            high = self.emit(f"{inst.base}.{kind}32", self.temp("b32"), self._high_lane(a, kind),
                             self._high_lane(b, kind))
            moved = self.emit("shl.b32", self.temp("b32"), high, Imm(16))
            self.emit("or.b32", dst, moved, self._and(low, 0xFFFF), guarded=True)

    def _plain(self, inst: Instruction) -> None:
        """An instruction without .relu: written as word instructions where its lanes are packed, else kept."""
        if is_packed(inst):
            self.rewrite(inst)
        else:
            self.body.append(inst)

    def _and(self, x, mask: int):
        return self.emit("and.b32", self.temp("b32"), x, Imm(mask))

    def _low_lane(self, x, kind: str):
        if kind == "u":
            return self._and(x, 0xFFFF)
        return self.emit("shr.s32", self.temp("b32"), self.emit("shl.b32", self.temp("b32"), x, Imm(16)), Imm(16))

    def _high_lane(self, x, kind: str):
        return self.emit(f"shr.{kind}32", self.temp("b32"), x, Imm(16))
