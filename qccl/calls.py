"""What a call is: its signature (the one type every cross-rank check compares) and the call record that carries it
through a group, with the rank's buffers.

    >>> str(Sig("allreduce", 16, "int32", "sum", algo="ring"))
    'allreduce(count=16, dtype=int32, op=sum, algo=ring)'
"""
from __future__ import annotations

from dataclasses import dataclass

from .buffers import Buffer

REDUCING = ("allreduce", "reduce", "reduce_scatter")
COPYING = ("broadcast", "allgather", "alltoall", "gather", "scatter", "send", "recv")
COLLECTIVES = ("allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "gather", "scatter",
               "barrier")
P2P = ("send", "recv")


@dataclass(frozen=True)
class Sig:
    """A call as every rank must agree on it: kind, count (elements per rank, as NCCL's call takes it), dtype, op,
    root (the peer of send / recv) and algorithm. Packs to a tuple of plain values to cross a process boundary."""
    kind: str
    count: int = 0
    dtype: str = ""
    op: str | None = None
    root: int | None = None
    algo: str | None = None

    @property
    def p2p(self) -> bool:
        return self.kind in P2P

    def pack(self) -> tuple:
        return (self.kind, self.count, self.dtype, self.op, self.root, self.algo)

    @classmethod
    def unpack(cls, values) -> "Sig":
        kind, count, dtype, op, root, algo = values
        return cls(str(kind), int(count), str(dtype), op, None if root is None else int(root), algo)

    def __str__(self) -> str:
        if self.kind == "barrier":
            return "barrier()"
        parts = [f"count={self.count}", f"dtype={self.dtype}"]
        if self.op is not None:
            parts.append(f"op={self.op}")
        if self.root is not None:
            parts.append(f"{'peer' if self.p2p else 'root'}={self.root}")
        if self.algo is not None:
            parts.append(f"algo={self.algo}")
        return f"{self.kind}({', '.join(parts)})"


@dataclass(eq=False)
class Call:
    """One rank's call in a group. ``comm`` is None for a remote rank's call, known only by its signature (processes).
    The board (qccl.board) sets ``key`` (its place in the cross-rank order), ``matched``, ``done`` and ``error``."""
    sig: Sig
    rank: int
    comm: object = None
    send: Buffer | None = None
    recv: Buffer | None = None
    key: tuple | None = None
    matched: bool = False
    done: bool = False
    error: BaseException | None = None

    def __str__(self) -> str:
        return str(self.sig)
