"""Basic blocks: a kernel body split at labels and branches, with each block's successors; and the one rewrite the
body gets first, one latch per loop (:func:`merge_latches`).

Example::

    >>> from qwengpu.ptx import parse
    >>> blocks = basic_blocks(parse(PTX).kernels["k"])      # doctest: +SKIP
    >>> [b.successors for b in blocks]                       # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..isa import MachineError
from ..ptx import Instruction, Label


@dataclass
class BasicBlock:
    index: int
    labels: list[str]
    body: list[Instruction]
    terminator: Instruction | None     # bra or ret (possibly guarded), None when it falls through
    successors: list[int] = field(default_factory=list)


def basic_blocks(kernel) -> list[BasicBlock]:
    blocks: list[BasicBlock] = []
    current = BasicBlock(0, [], [], None)
    for item in kernel.body:
        if isinstance(item, Label):
            if current.body or current.terminator is not None:
                blocks.append(current)
                current = BasicBlock(len(blocks), [], [], None)
            current.labels.append(item.name)
            continue
        if current.terminator is not None:
            blocks.append(current)
            current = BasicBlock(len(blocks), [], [], None)
        if item.base in ("bra", "ret", "exit"):
            current.terminator = item
        else:
            current.body.append(item)
    blocks.append(current)
    label_index = {name: b.index for b in blocks for name in b.labels}
    for b in blocks:
        term = b.terminator
        fall = [b.index + 1] if b.index + 1 < len(blocks) else []
        if term is None:
            b.successors = fall
        elif term.base in ("ret", "exit"):
            b.successors = fall if term.guard is not None else []
        else:
            target = term.operands[0]
            if not isinstance(target, Label) or target.name not in label_index:
                raise MachineError(f"line {term.line}: branch to an unknown label: {term.text}")
            b.successors = [label_index[target.name]] + (fall if term.guard is not None else [])
    return blocks


def merge_latches(kernel):
    """One latch per loop: where several backward branches reach one label (nvcc's loops with ``continue`` or a
    nested loop's exit that re-enters the outer one), each goes to a new block right after the last of them, whose
    one instruction branches back; the last one's fall-through jumps over it. The loops the emitter sees then have one
    latch each, and every path means what it meant. Returns ``kernel`` itself when no loop has two latches."""
    body = kernel.body
    at = {item.name: i for i, item in enumerate(body) if isinstance(item, Label)}
    back: dict[str, list[int]] = {}
    for i, item in enumerate(body):
        if isinstance(item, Instruction) and item.base == "bra" and isinstance(item.operands[0], Label):
            target = item.operands[0].name
            if target in at and at[target] < i:
                back.setdefault(target, []).append(i)
    many = {target: where for target, where in back.items() if len(where) > 1}
    if not many:
        return kernel
    redirected: dict[int, Instruction] = {}
    inserted: dict[int, list] = {}
    for target, where in many.items():
        latch, after = f"{target}$latch", f"{target}$after"
        for i in where:
            redirected[i] = _branch(body[i], latch)
        last = body[where[-1]]
        jump = [_branch(last, after, guard=False)] if last.guard is not None else []
        inserted[where[-1]] = jump + [Label(latch), _branch(last, target, guard=False)] + (
            [Label(after)] if jump else [])
    out = []
    for i, item in enumerate(body):
        out.append(redirected.get(i, item))
        out.extend(inserted.get(i, []))
    return replace(kernel, body=out)


def _branch(inst: Instruction, target: str, guard: bool = True) -> Instruction:
    """``inst`` (a bra) sent to ``target``; without its guard when ``guard`` is False."""
    keep = guard and inst.guard is not None
    prefix = f"@{'!' if inst.guard_negated else ''}{inst.guard.name} " if keep else ""
    return replace(inst, operands=(Label(target),), guard=inst.guard if keep else None,
                   guard_negated=inst.guard_negated if keep else False, text=f"{prefix}{inst.opcode} {target}")
