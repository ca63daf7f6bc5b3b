"""What the stages that rewrite PTX instructions as other PTX instructions share (qwengpu.lowering.doubles,
qwengpu.lowering.carries, qwengpu.lowering.packed): fresh temporaries under a prefix no register of the kernel has,
and instructions that keep the line and text of the one they replace (a refusal names the CUDA line it comes from).

Example::

    >>> from qwengpu.ptx import Imm, Instruction, Kernel, Reg
    >>> r = Rewriter(Kernel("k", registers={"%r": "b32"}), "%tmp_")
    >>> r.inst = Instruction("neg.s32", (Reg("%r2"), Reg("%r1")), None, False, 4, "neg.s32 %r2, %r1")
    >>> r.emit("sub.s32", r.temp("b32"), Imm(0), Reg("%r1")), r.temporaries
    (Reg(name='%tmp_r1'), {'%tmp_r': 'b32'})
"""
from __future__ import annotations

import dataclasses

from ..ptx import Instruction, Kernel, Reg

__all__ = ["Rewriter", "rewrite_chosen"]


def rewrite_chosen(kernel: Kernel, chosen, builder) -> Kernel:
    """The kernel with each instruction ``chosen`` picks written by ``builder(kernel)`` (a Rewriter), its
    temporaries declared; the kernel itself where ``chosen`` picks none."""
    if not any(isinstance(i, Instruction) and chosen(i) for i in kernel.body):
        return kernel
    writer = builder(kernel)
    body = writer.run(kernel.body, chosen)
    return dataclasses.replace(kernel, body=body, registers={**kernel.registers, **writer.temporaries})


class Rewriter:
    """Writes instructions into ``body`` in place of ``inst``, with fresh temporaries (``temporaries``: each
    prefix's type, for the kernel's register declarations)."""

    def __init__(self, kernel: Kernel, prefix: str):
        while any(name.startswith(prefix) for name in kernel.registers):
            prefix += "_"
        self.prefix = prefix
        self.body: list = []
        self.temporaries: dict[str, str] = {}
        self.count = 0
        self.inst: Instruction | None = None

    def temp(self, kind: str) -> Reg:
        """A fresh register of ``kind``: "pred", "b32" or "b64"."""
        prefix = self.prefix + {"pred": "p", "b32": "r", "b64": "d"}[kind]
        self.temporaries[prefix] = kind
        self.count += 1
        return Reg(f"{prefix}{self.count}")

    def emit(self, opcode: str, dst: Reg, *operands, guarded: bool = False) -> Reg:
        """``opcode dst, operands`` with the replaced instruction's line and text (and its guard, if ``guarded``)."""
        inst = self.inst
        guard, negated = (inst.guard, inst.guard_negated) if guarded else (None, False)
        self.body.append(Instruction(opcode, (dst,) + operands, guard, negated, inst.line, inst.text))
        return dst

    def run(self, body: list, chosen) -> list:
        """``body`` with each instruction that ``chosen`` picks written by ``self.rewrite`` (the subclass's), the
        rest as they were."""
        for item in body:
            if isinstance(item, Instruction) and chosen(item):
                self.rewrite(item)
            else:
                self.body.append(item)
        return self.body
