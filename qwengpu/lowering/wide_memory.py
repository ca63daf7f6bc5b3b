"""64-bit integers in memory as two words, the low word first (little-endian, as a GPU lays them out): ``long long``
and ``size_t`` arrays, and ``atomicAdd`` on an ``unsigned long long`` count, on the machine's 32-bit words.

The machine's registers hold a 64-bit value's low word; the lowering knows the high word where it follows from how
the value was made (a word extended, a product of words, a loop counter, two words joined: ``arithmetic``'s ``shr``
by 32). So each 64-bit access of an integer becomes word accesses::

    ld.u64  d, [a]        ld.u32 lo, [a];  ld.u32 hi, [a+4];  d = (u64)lo | (u64)hi << 32
    st.u64  [a], v        st.u32 [a], (u32)v;  st.u32 [a+4], (u32)(v >> 32)
    atom.add.u64 [a], v   old = atom.add.u32 [a], (u32)v;  carry = old + (u32)v < old;
                          red.add.u32 [a+4], (u32)(v >> 32) + carry

- A load joins its two words as NVRTC joins two words itself, so the register holds the low word and its ``>> 32``
  is the high word: a copy (``y[i] = x[i]``), a truncation (``(int)x[i]``) and a store of what was loaded run.
- A store's high word is ``v >> 32`` as the machine computes it: where it does not hold it (``x[i] += 1`` of a
  loaded value: the carry into the high word is not kept) the ``shr`` is refused, naming the store.
- An atomic add whose old value is not read adds the low word, then the high word plus the carry of the low add,
  from the old low word each lane got: in any order of such adds the two words end as the 64-bit sum. A reader
  between the two sees the low word added and the carry not yet. Other 64-bit atomics, and an add's old value, are
  refused (the machine updates the two words one after the other, so no lane could be given both as one value).

Float64 accesses are left to the floats stage, which refuses doubles.
"""
from __future__ import annotations

import dataclasses

from ..isa import MachineError
from ..ptx import Imm, Instruction, Kernel, Mem, Reg
from .pointers import address_registers
from .transfer import registers_read
from .values import destination, width

INTEGER = ("u64", "s64", "b64")
WORD, DOUBLE, PRED = "%__wide_w", "%__wide_d", "%__wide_p"     # the stage's registers: b32, b64, pred


def rewrite(kernel: Kernel) -> Kernel:
    """The kernel with each 64-bit integer load, store and atomic add written as word accesses (itself if none)."""
    body = kernel.body
    if not any(_wide(item) for item in body):
        return kernel
    read = {name for item in body if isinstance(item, Instruction) for name in registers_read(item)}
    counter = iter(range(1, 1 << 30))

    def temp(prefix: str) -> Reg:
        return Reg(f"{prefix}{next(counter)}")

    addresses, from_parameters = address_registers(body), _from_parameters(body)
    out = []
    for item in body:
        if not _wide(item):
            out.append(item)
            continue

        def at(opcode: str, *operands, why: str = "") -> Instruction:
            return Instruction(opcode, operands, item.guard, item.guard_negated, item.line,
                               item.text if not why else f"{why} ({item.text})")
        space = ".".join(m for m in item.modifiers if m not in INTEGER and m != "add")
        if item.base == "ld":
            dst, mem = item.operands
            if dst.name in addresses:
                raise MachineError(f"line {item.line}: {dst.name} is loaded from memory and used as an address (the "
                                   f"machine keeps no pointers in its words): {item.text}", line=item.line)
            lo, hi, low, high, shifted = temp(WORD), temp(WORD), temp(DOUBLE), temp(DOUBLE), temp(DOUBLE)
            out += [at(f"ld.{space}.u32", lo, mem), at(f"ld.{space}.u32", hi, _next_word(mem)),
                    at("cvt.u64.u32", low, lo), at("cvt.u64.u32", high, hi), at("shl.b64", shifted, high, Imm(32)),
                    at("or.b64", dst, low, shifted)]
        elif item.base == "st":
            mem, value = item.operands
            _check_not_a_pointer(item, value, from_parameters)
            lo, hi = _words(value, at, temp, "the high word of a 64-bit store")
            out += [*hi[1], at(f"st.{space}.u32", mem, lo[0]), at(f"st.{space}.u32", _next_word(mem), hi[0])]
        else:
            out += _atomic_add(item, at, temp, space, read, from_parameters)
    registers = {**kernel.registers, WORD: "b32", DOUBLE: "b64", PRED: "pred"}
    return dataclasses.replace(kernel, body=out, registers=registers)


def _wide(item) -> bool:
    """A 64-bit integer load, store or atomic of memory (not a parameter's)."""
    return (isinstance(item, Instruction) and item.base in ("ld", "st", "atom", "red") and width(item) == 64
            and any(m in INTEGER for m in item.modifiers) and "param" not in item.modifiers)


def _from_parameters(body) -> set[str]:
    """The 64-bit registers whose value may be computed from a 64-bit kernel parameter (through any instruction
    with a 64-bit result but a load or an atomic)."""
    insts = [i for i in body if isinstance(i, Instruction)]
    found = {i.operands[0].name for i in insts if i.base == "ld" and "param" in i.modifiers and width(i) == 64
             and isinstance(i.operands[0], Reg)}
    changed = True
    while changed:
        changed = False
        for inst in insts:
            dst = destination(inst)
            if dst is not None and dst not in found and width(inst) == 64 and inst.base not in ("ld", "atom") \
                    and registers_read(inst) & found:       # a loaded value is not computed from its address
                found.add(dst)
                changed = True
    return found


def _check_not_a_pointer(item: Instruction, value, from_parameters: set) -> None:
    """A 64-bit value computed from a 64-bit parameter may be a pointer, which PTX does not tell from an integer
    (``int *x`` and ``size_t n`` are both ``.u64``): the machine keeps no pointers in memory (its pointer arguments
    are word addresses, a GPU's are bytes), so such a store is refused rather than guessed at."""
    if isinstance(value, Reg) and value.name in from_parameters:
        raise MachineError(
            f"line {item.line}: the 64-bit value {value.name} stored here is computed from a 64-bit kernel parameter, "
            f"which may be a pointer (PTX does not tell int *x from size_t n), and the machine keeps no pointers in "
            f"memory; store a 32-bit value ((unsigned)n) or one the kernel computes: {item.text}", line=item.line)


def _next_word(mem: Mem) -> Mem:
    return Mem(mem.base, mem.offset + 4)


def _words(value, at, temp, why: str):
    """The low and high words of a 64-bit value: each (its operand, the instructions that compute it). The low word
    is the register itself, which a 32-bit access reads as its word (and refuses where it holds an address: the
    machine keeps no pointers in memory)."""
    if isinstance(value, Imm):
        bits = value.value & ((1 << 64) - 1)
        return (Imm(bits & 0xFFFFFFFF), []), (Imm(bits >> 32), [])
    shifted, hi = temp(DOUBLE), temp(WORD)
    return ((value, []), (hi, [at("shr.u64", shifted, value, Imm(32), why=why), at("cvt.u32.u64", hi, shifted)]))


def _atomic_add(item: Instruction, at, temp, space: str, read: set, from_parameters: set) -> list:
    """``atom`` / ``red .add.u64`` whose old value is not read: the low word's add, then the high word's with the
    carry (module docstring); anything else is refused."""
    result = item.operands[0] if item.base == "atom" else None
    if "add" not in item.modifiers or (result is not None and result.name in read):
        what = "an atomic add's old value" if "add" in item.modifiers else "a 64-bit atomic other than an add"
        raise MachineError(
            f"line {item.line}: {what} is not supported: the machine's words are 32 bits and it updates a 64-bit "
            f"value's two words one after the other, so no lane could be given both as one value ({item.text})",
            line=item.line)
    mem, value = item.operands[-2:]
    _check_not_a_pointer(item, value, from_parameters)
    lo, hi = _words(value, at, temp, "the high word of a 64-bit atomic add")
    old, low, total, carry, wrapped, high = (temp(WORD), temp(WORD), temp(WORD), temp(WORD), temp(PRED),
                                             temp(WORD))
    return [*hi[1],
            at(f"atom.{space}.add.u32", old, mem, lo[0]),
            at("cvt.u32.u64", low, lo[0]) if isinstance(lo[0], Reg) else at("mov.u32", low, lo[0]),
            at("add.u32", total, old, low),
            at("setp.lt.u32", wrapped, total, old),
            at("selp.u32", carry, Imm(1), Imm(0), wrapped),
            at("add.u32", high, hi[0], carry),
            at(f"red.{space}.add.u32", _next_word(mem), high)]
