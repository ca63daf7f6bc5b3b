"""Run one collective on n ranks in this process and hold it against numpy: used by the tests, the demo and sweeps."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import qccl
from qccl_bench import reference as R

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


@dataclass
class Buffers:
    """One call's buffers for every rank (each process of a multi-process run builds all of them from the seed, to
    know the expected results): ``inputs``/``outs`` are what the calls take, ``orig``/``before`` untouched copies."""
    inputs: list
    outs: list
    orig: list
    before: list


def prepare(n: int, kind: str, count: int, dtype=np.int32, in_place: bool = False, seed: int = 0) -> Buffers:
    """``count`` is the per-rank element count NCCL's call takes (allgather: sendcount; reduce_scatter: recvcount).
    In place as NCCL defines it: allgather's input is the rank's block of the output, reduce_scatter's output is the
    rank's block of the input, the others pass one buffer twice."""
    sends = R.random_inputs(n, count * (n if kind == "reduce_scatter" else 1), dtype, seed)
    size = count * n if kind == "allgather" else count
    outs = [np.full(size, 0x5EED, dtype) for _ in range(n)]
    inputs = sends
    if in_place:
        if kind in ("allreduce", "broadcast", "reduce"):
            outs = [s.copy() for s in sends]
            inputs = outs
        elif kind == "allgather":
            for r in range(n):
                outs[r][r * count:(r + 1) * count] = sends[r]
            inputs = [outs[r][r * count:(r + 1) * count] for r in range(n)]
        elif kind == "reduce_scatter":
            inputs = [s.copy() for s in sends]
            outs = [inputs[r][r * count:(r + 1) * count] for r in range(n)]
        else:
            raise ValueError(f"{kind} has no in-place form")
    return Buffers(inputs, outs, [s.copy() for s in sends], [o.copy() for o in outs])


def issue(c, kind: str, send, recv, op: str = "sum", root: int = 0, algo: str | None = None, peer: int = 1) -> None:
    """Rank ``c.rank``'s call (sendrecv: a ring shift by ``peer``, its send and recv grouped)."""
    r, n = c.rank, c.nranks
    if kind == "allreduce":
        c.allreduce(send, recv, op, algo=algo)
    elif kind == "reduce_scatter":
        c.reduce_scatter(send, recv, op)
    elif kind == "allgather":
        c.allgather(send, recv, algo=algo)
    elif kind == "broadcast":
        c.broadcast(send, recv, root, algo=algo)
    elif kind == "reduce":
        c.reduce(send, recv, op, root)
    elif kind == "sendrecv":
        with qccl.group():
            c.send(send, (r + peer) % n)
            c.recv(recv, (r - peer) % n)
    else:
        raise ValueError(f"unknown collective {kind!r} (kinds: {', '.join(KINDS)})")


def expect(kind: str, b: Buffers, op: str = "sum", root: int = 0, peer: int = 1) -> list:
    """numpy's result for every rank's recv buffer (a non-root rank's Reduce output is left as it was)."""
    n = len(b.orig)
    if kind == "allreduce":
        return R.allreduce(b.orig, op)
    if kind == "reduce_scatter":
        return R.reduce_scatter(b.orig, op)
    if kind == "allgather":
        return R.allgather(b.orig)
    if kind == "broadcast":
        return R.broadcast(b.orig, root)
    if kind == "reduce":
        red = R.reduce(b.orig, op, root)
        return [red if r == root else b.before[r] for r in range(n)]
    return [b.orig[(r - peer) % n] for r in range(n)]


def same(out, exp) -> bool:
    """Bit for bit: the same dtype and the same words."""
    return out.dtype == exp.dtype and np.array_equal(out, exp)


def run(n: int, kind: str, count: int, op: str = "sum", root: int = 0, dtype=np.int32, in_place: bool = False,
        algo: str | None = None, seed: int = 0, config: dict | None = None, comms=None, torch_tensors=False,
        peer: int = 1) -> Outcome:
    """Every rank of an n-rank communicator in this process, in one group. See :func:`prepare` for ``count`` and
    ``in_place``; ``sendrecv`` is a ring shift by ``peer``: rank r sends to r + peer, receives from r - peer."""
    comms = comms or qccl.Communicator.init_all(n, config=config)
    n = len(comms)
    b = prepare(n, kind, count, dtype, in_place, seed)
    inputs, touts = b.inputs, b.outs
    if torch_tensors:
        import torch
        inputs = [torch.from_numpy(a) for a in inputs]
        touts = [torch.from_numpy(a) for a in touts]
    start = [c.stats for c in comms]
    t0 = time.perf_counter()
    with qccl.group():
        for c in comms:
            issue(c, kind, inputs[c.rank], touts[c.rank], op, root, algo, peer)
    wall = time.perf_counter() - t0
    end = [c.stats for c in comms]
    exp = expect(kind, b, op, root, peer)
    ok = all(same(b.outs[r], exp[r]) for r in range(n))
    delta = lambda key: [e[key] - s[key] for s, e in zip(start, end)]   # noqa: E731
    return Outcome(ok, b.outs, exp, delta("tokens_written"), delta("launches"), delta("records"), wall, comms)
