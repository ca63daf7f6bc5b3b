"""Paths the machine cannot run, refused when a thread takes one (the lowering's first stage).

The machine runs most of double arithmetic (qwengpu.lowering.doubles: add, sub, mul, fma, div, sqrt, compares,
floor and its kin, the conversions to and from float and integers); a *refused* instruction here is a double
instruction it does not build (the GPU's approximate reciprocal ``rcp.approx.ftz.f64`` that CUDA's double ``log``
starts from, a double atomic). A kernel whose every path meets one is refused before its launch touches memory (by
the floats stage, naming the instruction and saying to write ``2.0f``). But a kernel may hold one on a path that
only some values take (a user's ``if (x[i] > 100.0f) y[i] = log((double)x[i]);``), and refusing the kernel would
refuse what its other paths compute exactly. (CUDA's ``sinf`` was the first such kernel: it reduces an argument of
magnitude 105615 or more in 64-bit integers converted to a double, which now run.)

So a path that cannot finish without a double instruction is cut where it becomes certain: the first block from
which every way to the kernel's end passes one (*doomed*; a block entered from a block that is not doomed) becomes a
run-time refusal, as CUDA's device-side assert is built (qwengpu.lowering.console): the thread that gets there stores
its block and thread indices to the console word, and the device stops the launch with a ``MachineError`` naming
the PTX line and the instruction, and puts back everything the launch did. The blocks after it go (no path reaches
them), and with them what only they used (the log's tables). What the other paths compute is exact, as the
float stage builds it. The kernel's entry doomed (every thread meets a double): nothing is cut, and the floats stage
refuses it as before. The error says to write float and names the CUDA line, and memory is as before the launch.

Not refusal points: printf's promotion of a float to a double (``cvt.f64.f32``) and its store into the argument
buffer, which the console stage turns into the float's own word.

Example::

    >>> from qwengpu.ptx import parse
    >>> body = ("setp.gt.u32 %p1, %r1, 5; @%p1 bra BIG; st.global.u32 [%rd1], %r1; ret;"
    ...         " BIG: rcp.approx.ftz.f64 %fd1, %fd1; ret;")
    >>> k = parse(".version 8.0\\n.target sm_90\\n.address_size 64\\n.visible .entry k(.param .u64 p)\\n{\\n"
    ...           ".reg .pred %p<2>; .reg .b32 %r<2>; .reg .b64 %rd<2>; .reg .f64 %fd<2>;\\n"
    ...           + body.replace("; ", ";\\n") + "\\n}").kernels["k"]
    >>> [i.opcode for i in rewrite(k).body if hasattr(i, "opcode")][-2:]
    ['refuse', 'ret']
"""
from __future__ import annotations

import dataclasses

from ..ptx import Instruction, Kernel, Label
from . import doubles
from .cfg import BasicBlock, basic_blocks

__all__ = ["refused", "doomed", "rewrite", "REFUSE"]

REFUSE = "refuse"       # the pseudo-instruction console.rewrite turns into a run-time refusal


def refused(inst: Instruction) -> bool:
    """Whether the machine has no way to run ``inst``: a double instruction the doubles stage does not build
    (qwengpu.lowering.doubles: division, square roots, the math library's ...)."""
    return "f64" in inst.modifiers and not doubles.supported(inst)


def _exits(block: BasicBlock) -> bool:
    """Whether a thread may end the kernel in this block (a ret, guarded or not, or the last block falling off)."""
    term = block.terminator
    return (term is not None and term.base in ("ret", "exit")) or not block.successors


def doomed(blocks: list[BasicBlock]) -> set[int]:
    """The blocks from which a thread cannot reach the kernel's end without a refused instruction, of those from
    which one is reachable at all (a loop that never ends is not doomed: the machine runs it, and its watchdog
    reports it)."""
    stops = {b.index for b in blocks if any(refused(i) for i in b.body)}
    safe = {b.index for b in blocks if b.index not in stops and _exits(b)}
    meets = set(stops)
    changed = True
    while changed:
        changed = False
        for b in blocks:
            if b.index not in safe and b.index not in stops and any(s in safe for s in b.successors):
                safe.add(b.index)
                changed = True
            if b.index not in meets and any(s in meets for s in b.successors):
                meets.add(b.index)
                changed = True
    return meets - safe


def _first_refused(blocks: list[BasicBlock], start: int) -> Instruction:
    """The refused instruction a thread entering ``start`` meets first, breadth first."""
    seen, queue = {start}, [start]
    while queue:
        block = blocks[queue.pop(0)]
        for inst in block.body:
            if refused(inst):
                return inst
        for s in block.successors:
            if s not in seen:
                seen.add(s)
                queue.append(s)
    raise AssertionError("a doomed block reaches a refused instruction")


def rewrite(kernel: Kernel) -> Kernel:
    """The kernel with each doomed block entered from one that is not replaced by a ``refuse`` of the instruction
    the path meets (its line and text) and a ``ret``, and the other doomed blocks dropped. Unchanged when nothing is
    doomed, or when the entry is (every thread meets the instruction: refused when lowered)."""
    if not any(isinstance(item, Instruction) and refused(item) for item in kernel.body):
        return kernel
    blocks = basic_blocks(kernel)
    cut = doomed(blocks)
    if not cut or 0 in cut:
        return kernel
    entered = {s for b in blocks if b.index not in cut for s in b.successors} & cut
    body: list = []
    for b in blocks:
        if b.index in cut and b.index not in entered:
            continue
        body += [Label(name) for name in b.labels]
        if b.index in entered:
            at = _first_refused(blocks, b.index)
            body += [Instruction(REFUSE, (), None, False, at.line, at.text),
                     Instruction("ret", (), None, False, at.line, at.text)]
        else:
            body += b.body + ([b.terminator] if b.terminator is not None else [])
    return dataclasses.replace(kernel, body=body)
