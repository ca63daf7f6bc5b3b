"""Constant and thread-index propagation through the control-flow graph.

Launch arguments are bound as constants (the driver's "fixed device addresses, resident across launches"), so
address arithmetic and mode tests fold away; what stays is what the machine must compute. Every instruction's
effect is ``transfer.step``: the same function the emitter uses.

Example::

    >>> from qwengpu.ptx import parse
    >>> kernel = parse(PTX).kernels["k"]                                      # doctest: +SKIP
    >>> entry = propagate(kernel, basic_blocks(kernel), Context({}, 4))       # doctest: +SKIP
"""
from __future__ import annotations

from ..isa import MachineError
from . import deadline
from .cfg import BasicBlock
from .transfer import guard_value, make_reader, step
from .values import Const, Context, join


def propagate(kernel, blocks: list[BasicBlock], context: Context) -> dict[int, dict]:
    """Each executable block's entry state (register -> abstract value)."""
    entry: dict[int, dict] = {0: {}}
    work = [0]
    steps = 0
    while work:
        steps += 1
        if steps > 100 * (len(blocks) + 1) ** 2:
            raise MachineError(f"kernel {kernel.name}: constant propagation does not settle")
        deadline.check("constant propagation")
        index = work.pop(0)
        state = dict(entry[index])
        read = make_reader(state, context)
        for inst in blocks[index].body:
            step(inst, state, read, context)
        for successor in executable_successors(blocks[index], read):
            old = entry.get(successor)
            if old is None:
                merged = dict(state)
            else:
                merged = dict(old)
                for name in set(old) | set(state):
                    merged[name] = join(old.get(name, Const(0)), state.get(name, Const(0)))
            if old != merged:
                entry[successor] = merged
                if successor not in work:
                    work.append(successor)
    return entry


def executable_successors(block: BasicBlock, read) -> list[int]:
    """The successors a block can reach, given what is known of its terminator's guard."""
    term = block.terminator
    if term is None or term.guard is None:
        return block.successors
    taken = guard_value(term, read)
    if isinstance(taken, Const):
        if term.base == "bra":
            return block.successors[:1] if taken.value else block.successors[1:]
        return [] if taken.value else block.successors
    return block.successors
