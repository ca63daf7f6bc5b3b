"""Register allocation: virtual registers onto the machine's 15 (liveness over the block graph), then ROM blocks.

Example::

    >>> from qwengpu.lowering.mop import MOp
    >>> program = allocate("k", [MOp("add", ("tid", 0), (None, 1), store=("tid", 0))], False)
    >>> program.blocks[0].op, len(program.blocks)
    ('add', 1)
"""
from __future__ import annotations

from collections import Counter

from ..isa import EXIT, NONE, REGISTERS, ROM_BLOCKS, TID, Block, MachineError, Operand
from .barriers import live_in as liveness, observed_keeps, successors
from .mop import MOp, Program


def _costliest(mops: list[MOp], shown: int = 3) -> str:
    """Where a program too long for the ROM spends its blocks: the PTX lines that cost the most, for the message."""
    counts = Counter((mop.line, mop.text) for mop in mops if mop.line)
    top = sorted(counts.items(), key=lambda item: (-item[1], item[0][0]))[:shown]
    if not top:
        return ""
    return " (the most: " + ", ".join(f"{n} for line {line} {text!r}" for (line, text), n in top) + ")"


class DoesNotFit(MachineError):
    """A program needs more ROM blocks or registers than the machine has (the lowering then cuts it into
    overlays: qwengpu.lowering.overlays)."""


def allocate(kernel: str, mops: list[MOp], barrier: bool, precise: bool = False) -> Program:
    """Give virtual registers machine registers (liveness over the block graph), then build the ROM blocks.
    ``precise``: a predicated op keeps its destination's old value alive only where a later op may read it on the
    lanes it skipped (``barriers.observed_keeps``), so an if-converted body's temporaries can share registers; the
    lowering asks for it when a program does not fit otherwise (the programs that fit are left as they were)."""
    if not mops or mops[-1].branch != "none" and mops[-1].branch != "always":
        mops.append(MOp("a", branch="always", target="exit", text="exit"))
    elif mops[-1].branch == "none":
        mops[-1].branch, mops[-1].target = "always", "exit"
    if len(mops) > ROM_BLOCKS:
        raise DoesNotFit(f"kernel {kernel} needs {len(mops)} blocks; the ROM holds {ROM_BLOCKS}{_costliest(mops)}")
    succ = successors(mops)
    live_in = liveness(mops, observed_keeps(mops) if precise else None)
    interference: dict[str, set] = {}
    for i, mop in enumerate(mops):
        out = set().union(*(live_in[s] for s in succ[i])) if succ[i] else set()
        for reg in out | set(mop.reads()) | ({mop.dst} if mop.dst else set()):
            interference.setdefault(reg, set())
        if mop.dst:
            for reg in out:
                if reg != mop.dst:
                    interference[mop.dst].add(reg)
                    interference[reg].add(mop.dst)
    live_at_entry = live_in[0] if mops else set()
    for a in live_at_entry:      # registers read before written hold 0 from the warp's start: keep them apart
        for b in live_at_entry:
            if a != b:
                interference[a].add(b)
    color: dict[str, int] = {}
    for reg in sorted(interference, key=lambda r: (-len(interference[r]), r)):
        taken = {color[n] for n in interference[reg] if n in color}
        free = next(c for c in range(len(interference) + 1) if c not in taken)
        color[reg] = free
    needed = max(color.values(), default=-1) + 1
    if needed > REGISTERS:
        raise DoesNotFit(f"kernel {kernel} needs {needed} registers per lane; the machine has {REGISTERS}")

    def operand(source, imm=0) -> Operand:
        if source is None:
            return Operand(NONE, imm)
        if source == "tid":
            return Operand(TID, imm)
        return Operand(color[source], imm)

    blocks, listing = [], []
    for i, mop in enumerate(mops):
        store = operand(*mop.store) if mop.store is not None else None
        target = EXIT if mop.target == "exit" or mop.branch == "none" else mop.target_index
        block = Block(
            op=mop.op, a=operand(*mop.a), b=operand(*mop.b), dst=color[mop.dst] if mop.dst else NONE,
            load=mop.load, store=store.reg if store else NONE, store_imm=store.imm if store else 0,
            store_enable=store is not None, atomic=mop.atomic,
            pred=color[mop.pred[0]] if mop.pred else NONE, pred_negate=bool(mop.pred and mop.pred[1]),
            branch=mop.branch, target=target)
        blocks.append(block)
        listing.append(f"b{i:<2} {block}    ; line {mop.line}: {mop.text}" if mop.line else f"b{i:<2} {block}")
    check_uniform_branches(kernel, mops)
    program = Program(kernel, blocks, needed, barrier, listing)
    program.parks = frozenset(i for i, mop in enumerate(mops) if mop.parks)
    program.waits = frozenset(i for i, mop in enumerate(mops) if mop.parks and mop.waits)
    return program


def check_uniform_branches(kernel: str, mops: list[MOp]) -> None:
    """A real branch must see the same value on every lane: refuse one whose condition depends on the thread."""
    divergent: set[str] = set()
    changed = True
    while changed:
        changed = False
        for mop in mops:
            sources = [s for s, _ in (mop.a, mop.b)]
            if mop.restore:         # a register loaded back after a barrier: as uniform as its other definitions
                continue
            if mop.dst and mop.dst not in divergent and (
                    mop.pred is not None or "tid" in sources or any(s in divergent for s in sources)):
                divergent.add(mop.dst)
                changed = True
    for mop in mops:
        if mop.branch in ("nonzero", "zero") and not mop.restore:   # a barrier's dispatch reads a warp's resume word
            sources = [s for s, _ in (mop.a, mop.b)]
            if "tid" in sources or any(s in divergent for s in sources):
                raise MachineError(f"kernel {kernel}: the branch at line {mop.line} ({mop.text}) depends on the "
                                   "thread index; a loop's condition must be the same on every lane")
