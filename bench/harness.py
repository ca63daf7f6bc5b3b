"""Run one collective on n ranks in this process and hold it against numpy: used by the tests, the demo and sweeps."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import qccl
from bench import reference as R

KINDS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "sendrecv")


@dataclass
class Outcome:
    ok: bool
    outs: list
    expected: list
    tokens: list          # tokens each rank's model wrote during the call
    launches: list
    records: list
    wall: float
    comms: list

    def __bool__(self):
        return self.ok


def run(n: int, kind: str, count: int, op: str = "sum", root: int = 0, dtype=np.int32, in_place: bool = False,
        algo: str | None = None, seed: int = 0, config: dict | None = None, comms=None, torch_tensors=False,
        peer: int = 1) -> Outcome:
    """``count`` is the per-rank element count NCCL's call takes (allgather: sendcount; reduce_scatter: recvcount).
    ``sendrecv`` is a ring shift by ``peer``: rank r sends to r + peer and receives from r - peer (0: to itself)."""
    comms = comms or qccl.Communicator.init_all(n, config=config)
    n = len(comms)
    sends = R.random_inputs(n, count * (n if kind == "reduce_scatter" else 1), dtype, seed)
    size = count * n if kind == "allgather" else count
    outs = [np.full(size, 0x5EED, dtype) for _ in range(n)]
    if in_place:
        if kind in ("allreduce", "broadcast", "reduce"):
            outs = [s.copy() for s in sends]
            inputs = outs
        elif kind == "allgather":
            for r in range(n):
                outs[r][r * count:(r + 1) * count] = sends[r]
            inputs = [outs[r][r * count:(r + 1) * count] for r in range(n)]
        elif kind == "reduce_scatter":
            full = [s.copy() for s in sends]
            outs = [full[r][r * count:(r + 1) * count] for r in range(n)]
            inputs = full
        else:
            raise ValueError(f"{kind} has no in-place form")
    else:
        inputs = sends
    before = [o.copy() for o in outs]
    orig = [s.copy() for s in sends]
    if torch_tensors:
        import torch
        inputs = [torch.from_numpy(a) for a in inputs]
        touts = [torch.from_numpy(a) for a in outs]
    else:
        touts = outs
    start = [c.stats for c in comms]
    t0 = time.perf_counter()
    with qccl.group():
        for c in comms:
            r = c.rank
            if kind == "allreduce":
                c.allreduce(inputs[r], touts[r], op, algo=algo)
            elif kind == "reduce_scatter":
                c.reduce_scatter(inputs[r], touts[r], op)
            elif kind == "allgather":
                c.allgather(inputs[r], touts[r], algo=algo)
            elif kind == "broadcast":
                c.broadcast(inputs[r], touts[r], root, algo=algo)
            elif kind == "reduce":
                c.reduce(inputs[r], touts[r], op, root)
            elif kind == "sendrecv":
                c.send(inputs[r], (r + peer) % n)
                c.recv(touts[r], (r - peer) % n)
    wall = time.perf_counter() - t0
    end = [c.stats for c in comms]
    if kind == "allreduce":
        exp = R.allreduce(orig, op)
    elif kind == "reduce_scatter":
        exp = R.reduce_scatter(orig, op)
    elif kind == "allgather":
        exp = R.allgather(orig)
    elif kind == "broadcast":
        exp = R.broadcast(orig, root)
    elif kind == "reduce":
        red = R.reduce(orig, op, root)
        exp = [red if r == root else before[r] for r in range(n)]     # non-root recv buffers are untouched
    else:
        exp = [orig[(r - peer) % n] for r in range(n)]
    ok = all(np.array_equal(outs[r], exp[r]) and outs[r].dtype == exp[r].dtype for r in range(n))
    delta = lambda key: [e[key] - s[key] for s, e in zip(start, end)]   # noqa: E731
    return Outcome(ok, outs, exp, delta("tokens_written"), delta("launches"), delta("records"), wall, comms)
