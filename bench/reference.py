"""numpy references for the collectives: what NCCL computes, bit for bit (int32 wrap-around, C truncating avg).

This is the yardstick the tests and benchmarks hold the devices' results against; it is never on a payload path.
"""
from __future__ import annotations

import numpy as np

OPS = ("sum", "prod", "max", "min", "avg")


def reduce_arrays(arrays, op: str) -> np.ndarray:
    """op over ranks, elementwise, in the arrays' dtype (int32 or uint32), wrapping like a GPU."""
    stack = np.stack([np.asarray(a) for a in arrays])
    dtype = stack.dtype
    if op in ("sum", "avg"):
        out = np.sum(stack.astype(np.int64), axis=0) & 0xFFFFFFFF
        out = out.astype(np.uint32).view(dtype) if dtype == np.int32 else out.astype(np.uint32)
        if op == "avg":
            n = len(arrays)
            if dtype == np.uint32:
                out = (out.astype(np.uint64) // n).astype(np.uint32)
            else:
                s = out.astype(np.int64)
                out = (np.sign(s) * (np.abs(s) // n)).astype(np.int32)
        return out.astype(dtype)
    if op == "prod":
        acc = np.ones(stack.shape[1:], dtype=np.uint64)
        for a in stack:
            acc = (acc * (a.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF))) & np.uint64(0xFFFFFFFF)
        return acc.astype(np.uint32).view(dtype) if dtype == np.int32 else acc.astype(np.uint32)
    if op == "max":
        return np.max(stack, axis=0)
    if op == "min":
        return np.min(stack, axis=0)
    raise ValueError(op)


def allreduce(sends, op):
    r = reduce_arrays(sends, op)
    return [r.copy() for _ in sends]


def reduce_scatter(sends, op):
    n = len(sends)
    r = reduce_arrays(sends, op)
    k = len(r) // n
    return [r[i * k:(i + 1) * k].copy() for i in range(n)]


def allgather(sends):
    g = np.concatenate(sends)
    return [g.copy() for _ in sends]


def broadcast(sends, root):
    return [np.asarray(sends[root]).copy() for _ in sends]


def reduce(sends, op, root):
    return reduce_arrays(sends, op)


def random_inputs(n: int, count: int, dtype, seed: int, small: bool = False):
    """Inputs with full-range words, and some small ones so products and averages vary."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        w = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32)
        if small or count:
            m = rng.random(count) < (1.0 if small else 0.5)
            w[m] = rng.integers(-9, 10, int(m.sum())).astype(np.int32).view(np.uint32)
        out.append(w.view(np.int32).astype(dtype) if dtype == np.int32 else w.astype(np.uint32))
    return out


def alltoall(sends):
    """Rank r's output: block r of every rank's input, in rank order."""
    n = len(sends)
    k = len(sends[0]) // n if n else 0
    return [np.concatenate([s[r * k:(r + 1) * k] for s in sends]) for r in range(n)]


def gather(sends):
    """The root's output: every rank's input, in rank order."""
    return np.concatenate(sends)


def scatter(send, n: int):
    """Rank r's output: block r of the root's input."""
    k = len(send) // n
    return [send[r * k:(r + 1) * k].copy() for r in range(n)]
