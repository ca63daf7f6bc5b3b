"""Which registers hold addresses, decided by how they are used, not guessed from a multiplier.

A PTX address is a byte address in a 64-bit register; the machine's addresses are words. A register whose value
reaches the base of a memory operand (directly or through add / sub / mov / cvta / selp / and / or / xor of 64-bit
registers) holds an address or a byte offset, and the machine keeps it in words (its value divided by 4), or in
bytes where the emitter cannot show it is a whole number of words (emit.Emitter.bytes). Every other register holds a
plain value, whatever its width or multiplier: ``(int)(x > 0) * 8192`` is a value even though 8192 is a multiple
of 4.

Example::

    >>> from qwengpu.ptx import parse
    >>> address_registers(parse(PTX).kernels["k"].body)        # doctest: +SKIP
    {'%rd1', '%rd4'}
"""
from __future__ import annotations

from ..ptx import Instruction, Mem, Reg
from .by_body import ByBody
from .values import SPECIAL, destination

# Instructions through which an address stays an address (each source register is then an address or an offset).
THROUGH = {"add", "sub", "mov", "cvta", "selp", "and", "or", "xor"}


_KNOWN = ByBody()          # each body's address registers


def address_registers(body) -> frozenset[str]:
    """Registers that hold byte addresses (or byte offsets added to them) somewhere they are used as addresses."""
    return _KNOWN.get(body, lambda: frozenset(_address_registers(body)))


def _address_registers(body) -> set[str]:
    insts = [i for i in body if isinstance(i, Instruction)]
    found: set[str] = set()
    for inst in insts:
        if inst.base in ("ld", "st", "atom", "red") and "param" not in inst.modifiers:
            for op in inst.operands:
                if isinstance(op, Mem) and isinstance(op.base, Reg):
                    found.add(op.base.name)
    changed = True
    while changed:
        changed = False
        for inst in insts:
            dst = destination(inst)
            if dst not in found or inst.base not in THROUGH or "pred" in inst.modifiers:
                continue
            regs = inst.operands[1:3] if inst.base == "selp" else inst.operands[1:]
            for op in regs:
                if isinstance(op, Reg) and op.name not in SPECIAL and op.name not in found:
                    found.add(op.name)
                    changed = True
    return found
