"""Address arithmetic: registers that hold addresses computed in words, or in bytes where a byte offset is not
known to be a whole number of words (mixed into ``emit.Emitter``; ``pointers.address_registers`` says which
registers are addresses).

An index times an element size of a multiple of 4 is exact in words; a byte offset of another size is exact only
when the index is itself a multiple of 4 (``_aligned``), or when it is kept in bytes and taken back to words by an
``and`` with a multiple of 4. Anything else is refused, naming the instruction.
"""
from __future__ import annotations

from ..isa import MachineError
from ..ptx import Imm, Reg
from .values import DYNAMIC, MASK32, Const, signed, unsupported
from .semantics import bits_of, to_signed, types


class AddressOps:
    """Arithmetic whose destination is an address or a byte offset. Uses the emitter's ``word``,
    ``byte_operand``, ``value_operand``, ``src``, ``op`` and ``_select``."""

    def _address_arithmetic(self, read, dst: str) -> None:
        """Arithmetic whose result is an address or byte offset, computed in words."""
        inst = self.inst
        base, ops = inst.base, inst.operands
        if dst in self.bytes or (base == "and" and any(
                isinstance(o, Reg) and o.name in self.bytes or not self._whole_words(read(o)) and read(o) != DYNAMIC
                for o in ops[1:])):
            self._byte_arithmetic(read, dst)
            return
        if base in ("mov", "cvta") or (base == "cvt" and isinstance(ops[1], Reg) and ops[1].name in self.addresses):
            # (cvt.u32.u64 of an address: __cvta_generic_to_shared's 32-bit shared address, the same words)
            self.op("a", self.word(read, ops[1]), dst=dst)
        elif base in ("add", "sub", "and", "or", "xor"):
            self.op(base, self.word(read, ops[1]), self.word(read, ops[2]), dst=dst)
        elif base == "selp":
            self._select(read, dst, self.word(read, ops[1]), self.word(read, ops[2]), ops[3])
        elif base in ("mul", "shl") or (base == "cvt" and len(types(inst)) == 2):
            # An index times the element size: the product in bytes, divided by 4 (exact for aligned addresses).
            if base == "cvt":
                index, factor = self.src(read, 0), 1
            elif base == "shl":
                if not isinstance(read(ops[2]), Const):
                    raise unsupported(inst, "an address shifted by a register")
                index, factor = self.src(read, 0), 1 << read(ops[2]).value
            else:
                a, b = read(ops[1]), read(ops[2])
                if isinstance(a, Const):
                    a, b = b, a
                    index_op = ops[2]
                else:
                    index_op = ops[1]
                if not isinstance(b, Const):
                    raise unsupported(inst, "an address that is a product of two machine values")
                index, factor = self.value_operand(index_op, a), to_signed(b.value, 64)
                if isinstance(index_op, Reg) and index_op.name in self.addresses:
                    raise unsupported(inst, "an address multiplied")
            whole = index[0] is not None and index[1] == 0 and self._aligned(index[0])
            if base == "cvt" and (bits_of(types(inst)[1]) or 32) < 32:
                index = (self.op("and", index, (None, (1 << bits_of(types(inst)[1])) - 1)), 0)
            if factor % 4 == 0:
                if factor // 4 == 1:
                    self.op("a", index, dst=dst)
                else:
                    self.op("mul", index, (None, (factor // 4) & MASK32), dst=dst)
            elif whole:
                # The index is itself a multiple of 4 (``i << 2`` made by the compiler): exact in words.
                shift = "shr_s" if (base == "cvt" and types(inst)[1].startswith("s")) or signed(inst) else "shr_u"
                words_ = self.op(shift, index, (None, 2))
                if factor == 1:
                    self.op("a", (words_, 0), dst=dst)
                else:
                    self.op("mul", (words_, 0), (None, factor & MASK32), dst=dst)
            else:
                raise MachineError(f"line {inst.line}: a byte offset of {factor} x a machine value is not a whole "
                                   f"number of words; byte-granular addresses must be known at launch (from the "
                                   f"thread index and arguments): {inst.text}", line=inst.line)
        else:
            raise unsupported(inst, "this instruction cannot compute an address")

    def _byte_arithmetic(self, read, dst: str) -> None:
        """Address arithmetic kept in bytes (dst in self.bytes), or an ``and`` with a multiple of 4 that takes a
        byte-kept register back to words (the and in bytes, then >> 2)."""
        inst = self.inst
        base, ops = inst.base, inst.operands
        if base in ("mov", "cvta"):
            result = self.op("a", self.byte_operand(read, ops[1]), dst=dst if dst in self.bytes else None)
        elif base == "add" and id(inst) in self.counters.steps:
            # a loop counter that is also a byte offset (``p[i]`` of bytes): its step saturates (lowering.counters)
            self._saturating_add(self.byte_operand(read, ops[1]), self.byte_operand(read, ops[2]), dst)
            return
        elif base in ("add", "sub", "and", "or", "xor"):
            result = self.op(base, self.byte_operand(read, ops[1]), self.byte_operand(read, ops[2]),
                             dst=dst if dst in self.bytes else None)
        elif base == "selp":
            self._select(read, dst, self.byte_operand(read, ops[1]), self.byte_operand(read, ops[2]), ops[3])
            return
        elif base == "cvt":
            index = self.src(read, 0)
            source_bits = bits_of(types(inst)[1]) or 32
            if source_bits < 32:
                index = (self.op("and", index, (None, (1 << source_bits) - 1)), 0)
            self.op("a", index, dst=dst)
            return
        elif base == "shl":
            amount = read(ops[2])
            if not isinstance(amount, Const):
                raise unsupported(inst, "an address shifted by a register")
            self.op("shl", self.src(read, 0), (None, min(amount.value, 32)), dst=dst)
            return
        elif base == "mul":
            a, b = read(ops[1]), read(ops[2])
            index_op, factor = (ops[2], a) if isinstance(a, Const) else (ops[1], b)
            if not isinstance(factor, Const):
                raise unsupported(inst, "an address that is a product of two machine values")
            if isinstance(index_op, Reg) and index_op.name in self.addresses:
                raise unsupported(inst, "an address multiplied")
            self.op("mul", self.value_operand(index_op, read(index_op)), (None, factor.value & MASK32), dst=dst)
            return
        else:
            method = getattr(self, "_op_" + base, None)
            if method is None or dst not in self.bytes:
                raise unsupported(inst, "this instruction cannot compute an address")
            method(read, dst)       # a plain value (its low word) that is used as a byte offset
            return
        if dst not in self.bytes:
            self.op("shr_u", (result, 0), (None, 2), dst=dst)

    def _aligned(self, register: str, seen: frozenset = frozenset()) -> bool:
        """Whether every definition of a plain register makes a multiple of 4 (so a byte offset held in it is a
        whole number of words)."""
        if register in seen:
            return False
        defs = self.definitions.get(register)
        if not defs:
            return False
        for inst in defs:
            ops = inst.operands
            const = [o.value for o in ops[1:] if isinstance(o, Imm)]
            regs = [o.name for o in ops[1:] if isinstance(o, Reg)]
            if inst.base == "shl" and const and const[0] >= 2:
                continue
            if inst.base in ("mul", "and") and any(c % 4 == 0 for c in const):
                continue
            if inst.base in ("add", "sub", "mov", "selp", "or", "xor", "and") and all(
                    c % 4 == 0 for c in const) and all(
                    self._aligned(r, seen | {register}) for r in regs[:2 if inst.base == "selp" else 3]):
                continue
            return False
        return True
