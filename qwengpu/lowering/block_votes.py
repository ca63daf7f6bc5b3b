"""``__syncthreads_count`` / ``__syncthreads_and`` / ``__syncthreads_or`` (PTX's ``bar.red``) as integer PTX: a
barrier whose threads also count a predicate across the block.

Each ``bar.red.popc.u32 d, 0, p`` (``.and.pred`` / ``.or.pred``: ``d`` a predicate) becomes::

    atom.shared.add   [count], p ? 1 : 0        every thread adds its predicate to the block's count word
    bar.sync 0                                  every thread has added
    ld.shared         total, [count]
    bar.sync 0                                  every thread has read (so no thread adds the next one's before)
    d = total - seen;  seen = total             popc; and: d == the block's threads; or: d != 0

The count word is a hidden ``__shared__`` word, set to 0 by thread 0 where the kernel starts (the machine runs warp
0 first, so no thread adds before it); it only grows, and ``seen``, a register of each thread, holds what it had
after the last one, so nothing resets it between two reductions. The barriers are the kernel's own ``bar.sync``,
which the barrier stage expands (qwengpu.lowering.barriers).
"""
from __future__ import annotations

import dataclasses

from ..isa import MachineError
from ..ptx import Imm, Instruction, Kernel, Mem, Reg

COUNT = "__bar_red_count"       # the hidden shared word: not a PTX identifier users write (two underscores)
OPS = {"popc": "u32", "and": "pred", "or": "pred"}


def rewrite(kernel: Kernel) -> Kernel:
    """The kernel with each bar.red written as the sequence above (the kernel itself if it has none)."""
    if not any(isinstance(i, Instruction) and i.base == "bar" and "red" in i.modifiers for i in kernel.body):
        return kernel
    prefix = "%bar_red_"
    while any(name.startswith(prefix) for name in kernel.registers):
        prefix += "_"
    count = [0]

    def temp() -> Reg:
        count[0] += 1
        return Reg(f"{prefix}{count[0]}")

    seen = temp()
    first = next(i for i in kernel.body if isinstance(i, Instruction))
    where = (first.line, first.text)
    linear = temp()
    body = [Instruction("or.b32", (linear, Reg("%tid.x"), Reg("%tid.y")), None, False, *where),
            Instruction("or.b32", (linear, linear, Reg("%tid.z")), None, False, *where),
            Instruction("setp.eq.u32", (Reg(f"{prefix}p"), linear, Imm(0)), None, False, *where),
            Instruction("st.shared.u32", (Mem(COUNT, 0), Imm(0)), Reg(f"{prefix}p"), False, *where),
            Instruction("mov.u32", (seen, Imm(0)), None, False, *where)]
    for item in kernel.body:
        if not (isinstance(item, Instruction) and item.base == "bar" and "red" in item.modifiers):
            body.append(item)
            continue
        body += _reduction(item, seen, temp)
    registers = dict(kernel.registers)
    registers[prefix] = "b32"
    registers[f"{prefix}p"] = "pred"
    shared = dict(kernel.shared)
    shared[COUNT] = 4
    return dataclasses.replace(kernel, body=body, registers=registers, shared=shared)


def _reduction(inst: Instruction, seen: Reg, temp) -> list[Instruction]:
    op = next((m for m in inst.modifiers if m in OPS), None)
    if op is None or OPS[op] not in inst.modifiers or len(inst.operands) not in (3, 4):
        raise MachineError(f"unsupported PTX instruction at line {inst.line} (the block reductions are "
                           f"bar.red.popc.u32 / .and.pred / .or.pred of the whole block: __syncthreads_count / _and "
                           f"/ _or): {inst.text}", line=inst.line)
    if inst.guard is not None:
        raise MachineError(f"unsupported PTX instruction at line {inst.line} (a barrier under a lane predicate): "
                           f"{inst.text}", line=inst.line)
    d, barrier, *count, p = inst.operands
    where = (inst.line, inst.text)
    one, total = temp(), temp()
    out = [Instruction("selp.u32", (one, Imm(1), Imm(0), p), None, False, *where),
           Instruction("red.shared.add.u32", (Mem(COUNT, 0), one), None, False, *where),
           Instruction("bar.sync", (barrier, *count), None, False, *where),
           Instruction("ld.shared.u32", (total, Mem(COUNT, 0)), None, False, *where),
           Instruction("bar.sync", (barrier, *count), None, False, *where)]
    if op == "popc":
        out.append(Instruction("sub.u32", (d, total, seen), None, False, *where))
    else:
        new = temp()
        out.append(Instruction("sub.u32", (new, total, seen), None, False, *where))
        if op == "or":
            out.append(Instruction("setp.ne.u32", (d, new, Imm(0)), None, False, *where))
        else:
            threads = temp()
            out += [Instruction("mul.lo.u32", (threads, Reg("%ntid.x"), Reg("%ntid.y")), None, False, *where),
                    Instruction("mul.lo.u32", (threads, threads, Reg("%ntid.z")), None, False, *where),
                    Instruction("setp.eq.u32", (d, new, threads), None, False, *where)]
    out.append(Instruction("mov.u32", (seen, total), None, False, *where))
    return out
