"""The order in which one host thread submits several ranks' launches to one GPU, so that progress is guaranteed.

CUDA does not promise that kernels on different streams run at the same time: a kernel spinning on a flag that a
kernel of another stream will post may wait forever if that kernel never gets to run (it may sit behind the spinner
in a shared hardware queue, or the device may not schedule it). qccl avoids the question by submitting every rank's
launches in one global order in which a launch is submitted only after every launch that posts the flags it waits
for. Then, by induction over that order, the earliest unfinished launch waits for nothing unfinished (its flags were
posted by earlier, finished launches; its stream predecessors are earlier too), so it runs to the end whatever the
scheduler does, and so does the next. The kernels still synchronise only through their flags (they spin on them for
real); the host decides the order of submission, never a value. The order comes from the flag counters qccl's
schedule already computes (qccl.transport.flag_traffic), replayed without running anything.

A schedule whose flags can never all be posted (a one-slot FIFO, sends before receives on two slots) is found here,
before anything is launched: :func:`submission_order` raises DeadlockError naming each rank's flag.
"""
from __future__ import annotations

from qccl.errors import DeadlockError
from qccl.transport import PARAMS, Launch, Stall, flag_traffic

from .memory import GpuLaunch, Ptr


def _waits(g: GpuLaunch) -> tuple:
    """(rank, address, value) each flag wait of a resolved launch; after resolve() every wait is at its start."""
    t = flag_traffic(Launch(g.origin.kernel, g.threads, tuple(a.address if isinstance(a, Ptr) else a
                                                               for a in g.args), g.origin.note))
    return t.pre + t.post


def _stores(g: GpuLaunch) -> list:
    """(rank, address, value) of each flag store: the store parameter's owner rank, the value from the arguments."""
    t = flag_traffic(Launch(g.origin.kernel, g.threads, tuple(a.address if isinstance(a, Ptr) else a
                                                               for a in g.args), g.origin.note))
    owners = {a.address: a.rank for a, role in zip(g.args, PARAMS[g.kernel]) if role == "flag_store"}
    return [(owners[addr], addr, v) for addr, v in t.stores]


class Orderer:
    """Keeps, across epochs, the flag values the submitted launches will have posted, and each rank's ops not yet
    submitted (a rank may wait for a call another group brings)."""

    def __init__(self, ranks):
        self.flags = {r: {} for r in ranks}
        self.pending = {r: [] for r in ranks}

    def add(self, rank: int, ops: list) -> None:
        self.pending[rank].extend(ops)

    def take(self, may_wait: bool = True) -> list:
        """The ops that can be submitted now, as [(rank, op), ...] in a safe order. Ops whose flags no submitted or
        pending launch will post stay pending when ``may_wait`` and some rank has nothing pending (a later call may
        bring its part); otherwise DeadlockError names each rank's flag."""
        order = []
        while True:
            moved = False
            for r, ops in self.pending.items():
                i = 0
                while i < len(ops):
                    op = ops[i]
                    if isinstance(op, GpuLaunch):
                        if any(self.flags[r].get(a, 0) < v for a, v in _waits(op)):
                            break
                        for owner, a, v in _stores(op):
                            self.flags[owner][a] = max(self.flags[owner].get(a, 0), v)
                    order.append((r, op))
                    i += 1
                    moved = True
                del ops[:i]
            if not moved:
                break
        stuck = {r: ops for r, ops in self.pending.items() if ops}
        if stuck and not (may_wait and len(stuck) < len(self.pending)):
            stalls = {}
            for r in self.pending:
                if r not in stuck:
                    stalls[r] = Stall(r, note="no work queued")
                    continue
                op = stuck[r][0]
                a, v = next((a, v) for a, v in _waits(op) if self.flags[r].get(a, 0) < v)
                stalls[r] = Stall(r, op.kernel, a, self.flags[r].get(a, 0), v, "lt_s", op.origin.note)
            for ops in self.pending.values():
                ops.clear()
            lines = "\n  ".join(str(stalls[r]) for r in sorted(stalls))
            raise DeadlockError("deadlock: these launches wait for flags that no launch posts (found before "
                                f"launching):\n  {lines}", stalls)
        return order


def submission_order(ops: dict) -> list:
    """``ops``: rank -> host ops and GpuLaunches in program order; every one of them, in a safe submission order."""
    o = Orderer(ops)
    for r, rops in ops.items():
        o.add(r, list(rops))
    return o.take(may_wait=False)
