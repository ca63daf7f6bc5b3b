"""Machine ops over virtual registers (before fusion and register allocation) and the program they become.

Example::

    >>> MOp("add", ("%r1", 0), (None, 4), "%r2").reads()
    ['%r1']
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..isa import Block

# Ops whose operands may swap, and the compare each compare becomes when they do.
COMMUTATIVE = {"add", "mul", "and", "or", "xor", "min_s", "max_s", "min_u", "max_u", "eq", "ne"}
MIRROR = {"lt_s": "gt_s", "le_s": "ge_s", "gt_s": "lt_s", "ge_s": "le_s", "lt_u": "gt_u", "le_u": "ge_u",
          "gt_u": "lt_u", "ge_u": "le_u", "eq": "eq", "ne": "ne"}


@dataclass
class Program:
    """Machine blocks for one launch configuration, with a listing for people."""
    kernel: str
    blocks: list[Block]
    registers: int
    barrier: bool
    listing: list[str]
    # Blocks of more than one warp with __shared__ arrays or __syncthreads (qwengpu.lowering.barriers), and
    # programs longer than the ROM: the words the block keeps its shared arrays and barrier or overlay state in
    # (first, count), the resume words the launch zeroes before a block's first warp (first, count), and the blocks
    # (indices into ``blocks``) where a warp parks: it ends there and runs again from its resume point.
    reserved: tuple = (0, 0)
    cleared: tuple = (0, 0)
    parks: frozenset = frozenset()
    # A program longer than the ROM (qwengpu.lowering.overlays): the (first block, count) of each overlay in
    # ``blocks``, whose branch targets are rows of its own; a warp that parks leaves for the next overlay. Empty when
    # the program is one ROM's worth.
    overlays: tuple = ()
    # The parking blocks of barriers: a warp that ends at one waits until every warp of the block has ended (reached
    # the barrier, or finished), then runs again on the barrier's overlay; a warp that ends at another parking block
    # (it left its overlay) runs on the next overlay in the next round.
    waits: frozenset = frozenset()
    # A kernel that calls printf (qwengpu.lowering.console): (the console word, the calls' Formats by number).
    console: tuple = ()

    def rom(self, overlay: int = 0) -> list[Block]:
        """The blocks one overlay puts in the ROM (rows 0..)."""
        if not self.overlays:
            return self.blocks
        first, count = self.overlays[overlay]
        return self.blocks[first:first + count]

    def block(self, overlay: int, row: int) -> Block:
        """The block at ROM row ``row`` while overlay ``overlay`` is loaded."""
        return self.rom(overlay)[row]

    def parking(self, overlay: int, row: int) -> str | None:
        """How a warp that ends at this row goes on: "waits" (at a barrier), "parks" (for the next overlay), or None
        (it exits)."""
        index = (self.overlays[overlay][0] if self.overlays else 0) + row
        return "waits" if index in self.waits else "parks" if index in self.parks else None


@dataclass
class MOp:
    op: str = "a"
    a: tuple = (None, 0)            # (source, imm): source None, "tid" or a virtual register name
    b: tuple = (None, 0)
    dst: str | None = None
    load: bool = False
    store: tuple | None = None      # address (source, imm)
    atomic: bool = False
    pred: tuple | None = None       # (virtual register, negated)
    branch: str = "none"
    target: object = None           # basic block index, or "exit"
    line: int = 0
    text: str = ""
    labels: set = field(default_factory=set)   # basic blocks that start here
    target_index: int | None = None            # the machine op a branch goes to
    barrier: bool = False           # a __syncthreads of a block of several warps (expanded by lowering.barriers)
    restore: bool = False           # reads a lane's barrier state (warp-uniform where the register it restores is)
    parks: bool = False             # the block where a warp stops at a barrier (or leaves its overlay)
    waits: bool = False             # a parking block of a barrier: the warp waits there for every warp of the block
    lane_predicate: bool = False    # computes one of the emitter's lane predicates (lowering.barriers reads it)
    whole: int = 0                  # the span (numbered from 1) this op is of, whose ops stay in one overlay: a
    #                                 warp instruction (values passed through the exchange words), a lane's turn
    #                                 at an atomic (its load of the word, then its store) (lowering.overlays)

    @property
    def jumps(self) -> bool:
        """Whether this op may branch to another op (``target_index``), not just fall through or exit."""
        return self.branch != "none" and self.target != "exit"

    def copy(self) -> "MOp":
        """A copy the later stages may change (fusion and the overlays rewrite ops in place)."""
        return dataclasses.replace(self, labels=set(self.labels))

    def reads(self, keep: bool = True) -> list[str]:
        regs = [s for s, _ in (self.a, self.b) if s not in (None, "tid")]
        if self.store is not None and self.store[0] not in (None, "tid"):
            regs.append(self.store[0])
        if self.pred is not None:
            regs.append(self.pred[0])
        if keep and self.pred is not None and self.dst is not None:
            regs.append(self.dst)          # inactive lanes keep the old value
        return regs
