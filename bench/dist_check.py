"""One rank of a multi-process check: ``python -m qccl.launch -n 4 -m bench.dist_check [--json OUT]``.

Runs the six collectives over the gloo fabric, compares each with numpy and with torch.distributed's gloo (the same
inputs, the same op), and writes per rank a digest of the tokens its device wrote, so a test can hold them against an
in-process run of the same calls (the same token streams either way)."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np

import qccl
from bench import reference as R

CASES = [("allreduce", "sum", 16), ("allreduce", "max", 37), ("allreduce", "avg", 5), ("reduce_scatter", "prod", 3),
         ("allgather", None, 3), ("broadcast", None, 16), ("reduce", "min", 16), ("sendrecv", None, 16),
         ("allgather_mc", None, 4), ("broadcast_mc", None, 20)]


def call(comm, kind, op, count, sends, root, outs):
    r, n = comm.rank, comm.nranks
    if kind == "allreduce":
        comm.allreduce(sends[r], outs[r], op)
    elif kind == "reduce_scatter":
        comm.reduce_scatter(sends[r], outs[r], op)
    elif kind.startswith("allgather"):
        comm.allgather(sends[r], outs[r], algo="multicast" if kind.endswith("_mc") else "ring")
    elif kind.startswith("broadcast"):
        comm.broadcast(sends[r], outs[r], root, algo="multicast" if kind.endswith("_mc") else "ring")
    elif kind == "reduce":
        comm.reduce(sends[r], outs[r], op, root)
    elif kind == "sendrecv":
        with qccl.group():
            comm.send(sends[r], (r + 1) % n)
            comm.recv(outs[r], (r - 1) % n)


def inputs(kind, count, n, seed):
    sends = R.random_inputs(n, count * (n if kind == "reduce_scatter" else 1), np.int32, seed)
    size = count * n if kind.startswith("allgather") else count
    return sends, [np.zeros(size, np.int32) for _ in range(n)]


def expected(kind, op, sends, root, outs_before):
    n = len(sends)
    if kind == "allreduce":
        return R.allreduce(sends, op)
    if kind == "reduce_scatter":
        return R.reduce_scatter(sends, op)
    if kind.startswith("allgather"):
        return R.allgather(sends)
    if kind.startswith("broadcast"):
        return R.broadcast(sends, root)
    if kind == "reduce":
        return [R.reduce(sends, op, root) if r == root else outs_before[r] for r in range(n)]
    return [sends[(r - 1) % n] for r in range(n)]


def gloo_result(kind, op, sends, root, rank, n):
    """torch.distributed (gloo) on the same inputs, where it has the call: a second reference."""
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():           # one rank: no group to ask
        return None
    ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN}
    t = torch.from_numpy(sends[rank].copy())
    if kind == "allreduce" and op in ops:
        dist.all_reduce(t, ops[op])
        return t.numpy()
    if kind.startswith("broadcast"):
        dist.broadcast(t, root)
        return t.numpy()
    if kind.startswith("allgather"):
        out = [torch.zeros_like(t) for _ in range(n)]
        dist.all_gather(out, t)
        return torch.cat(out).numpy()
    return None


def digest(dev) -> str:
    return hashlib.sha256(np.asarray([t.id for t in dev.tokens], np.int64).tobytes()).hexdigest()


def in_process(n: int, burst: int = 1) -> dict:
    """The same calls with every rank in this process (one group per call): results and token digests per rank."""
    comms = qccl.Communicator.init_all(n, config={"burst": burst})
    ok = True
    for i, (kind, op, count) in enumerate(CASES):
        root = i % n
        sends, outs = inputs(kind, count, n, seed=100 + i)
        before = [o.copy() for o in outs]
        with qccl.group():
            for c in comms:
                call(c, kind, op, count, sends, root, outs)
        exp = expected(kind, op, sends, root, before)
        ok &= all(np.array_equal(outs[r], exp[r]) for r in range(n))
    return {"ok": ok, "tokens": [digest(c.world.devices[c.rank]) for c in comms],
            "stats": [c.stats for c in comms]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--burst", type=int, default=1)
    a = ap.parse_args(argv)
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    comm = qccl.Communicator.init(n, rank, qccl.get_unique_id(), config={"burst": a.burst})
    report = {"rank": rank, "cases": []}
    for i, (kind, op, count) in enumerate(CASES):
        root = i % n
        sends, outs = inputs(kind, count, n, seed=100 + i)
        before = [o.copy() for o in outs]
        call(comm, kind, op, count, sends, root, outs)
        exp = expected(kind, op, sends, root, before)[rank]
        ok = bool(np.array_equal(outs[rank], exp))
        g = gloo_result(kind, op, sends, root, rank, n)
        gloo_ok = None if g is None else bool(np.array_equal(outs[rank], g))
        report["cases"].append({"kind": kind, "op": op, "count": count, "numpy": ok, "gloo": gloo_ok})
    report["tokens"] = digest(comm.world.devices[rank])
    report["stats"] = comm.stats
    comm.destroy()
    if a.json:
        with open(f"{a.json}.{rank}", "w") as f:
            json.dump(report, f)
    bad = [c for c in report["cases"] if not c["numpy"] or c["gloo"] is False]
    print(f"rank {rank}: {len(report['cases']) - len(bad)}/{len(report['cases'])} cases identical to numpy"
          f"{' and gloo' if not bad else ''}; tokens written {report['stats']['tokens_written']}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
