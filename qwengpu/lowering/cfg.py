"""Basic blocks: a kernel body split at labels and branches, with each block's successors.

Example::

    >>> from qwengpu.ptx import parse
    >>> blocks = basic_blocks(parse(PTX).kernels["k"])      # doctest: +SKIP
    >>> [b.successors for b in blocks]                       # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field

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
