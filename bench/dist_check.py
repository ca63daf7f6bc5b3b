"""One rank of a multi-process check: ``python -m qccl.launch -n 4 -m qccl_bench.dist_check [--json OUT] [--cases C]``.

Runs the six collectives over the gloo fabric, compares each with numpy and, for int32 where torch.distributed has the
call, with gloo (the same inputs, the same op), and writes per rank a digest of the tokens its device wrote, so a test can hold them against an
in-process run of the same calls (the same token streams either way). ``--cases basic``: ten calls; ``wide``: every
collective, op, dtype, place, algorithm and root / peer for this many ranks (qccl_bench.sweep's Case); ``wide+big`` adds
an AllReduce of 1000 words."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np

import qccl
from qccl_bench import harness as H
from qccl_bench.sweep import DTYPES, IN_PLACE, OPS, SMALL_COUNTS, Case, _cost

# the original ten: (kind, op, count); "_mc" is the multicast algorithm; the root of call i is i % n
BASIC = [("allreduce", "sum", 16), ("allreduce", "max", 37), ("allreduce", "avg", 5), ("reduce_scatter", "prod", 3),
         ("allgather", None, 3), ("broadcast", None, 16), ("reduce", "min", 16), ("sendrecv", None, 16),
         ("allgather_mc", None, 4), ("broadcast_mc", None, 20)]


def basic(n: int) -> list[Case]:
    out = []
    for i, (kind, op, count) in enumerate(BASIC):
        algo = "multicast" if kind.endswith("_mc") else "ring"
        kind = kind.removesuffix("_mc")
        root = 1 % n if kind == "sendrecv" else i % n
        out.append(Case(n, kind, count, op or "sum", np.int32, root, False, algo))
    return out


def wide(n: int, big: bool = False) -> list[Case]:
    """Every collective, every op, both dtypes, in and out of place, both algorithms, counts 0..100 rotating, every
    root of Broadcast and Reduce and every peer of SendRecv; ``big`` adds one AllReduce of 1000 words."""
    calls = [("allreduce", op, 0, ("ring", "multicast")[i % 2]) for i, op in enumerate(OPS)]
    calls += [("reduce_scatter", op, 0, None) for op in OPS]
    calls += [("allgather", "sum", 0, algo) for algo in ("ring", "multicast")]
    calls += [("broadcast", "sum", root, ("ring", "multicast")[root % 2]) for root in range(n)]
    calls += [("reduce", OPS[root % len(OPS)], root, None) for root in range(n)]
    calls += [("sendrecv", "sum", peer, None) for peer in range(n)]
    out = []
    for i, (kind, op, root, algo) in enumerate(calls):
        count = SMALL_COUNTS[i % len(SMALL_COUNTS)]
        while _cost(kind, n, count) > 800:
            count = SMALL_COUNTS[SMALL_COUNTS.index(count) - 1]
        in_place = kind in IN_PLACE and (i // 2) % 2 == 1
        out.append(Case(n, kind, count, op, DTYPES[i % 2], root, in_place, algo))
    if big:
        out.append(Case(n, "allreduce", 1000, "sum", np.uint32, 0, True, None))
    return out


def case_list(n: int, which: str) -> list[Case]:
    return {"basic": basic, "wide": wide, "wide+big": lambda n: wide(n, big=True)}[which](n)


def call(comm, case: Case, b: H.Buffers) -> None:
    r = comm.rank
    peer = case.root if case.kind == "sendrecv" else 1
    H.issue(comm, case.kind, b.inputs[r], b.outs[r], case.op, case.root, case.algo, peer)


def expected(case: Case, b: H.Buffers) -> list:
    peer = case.root if case.kind == "sendrecv" else 1
    return H.expect(case.kind, b, case.op, case.root, peer)


def gloo_result(kind, op, sends, root, rank, n):
    """torch.distributed (gloo) on the same inputs, where it has the call (int32 only): a second reference."""
    import torch
    import torch.distributed as dist
    if not dist.is_initialized() or sends[rank].dtype != np.int32:     # one rank: no group to ask
        return None
    ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN}
    t = torch.from_numpy(sends[rank].copy())
    if kind == "allreduce" and op in ops:
        dist.all_reduce(t, ops[op])
        return t.numpy()
    if kind == "broadcast":
        dist.broadcast(t, root)
        return t.numpy()
    if kind == "allgather":
        out = [torch.zeros_like(t) for _ in range(n)]
        dist.all_gather(out, t)
        return torch.cat(out).numpy()
    return None


# every rank's whole token stream is kept and digested (a communicator keeps only its latest positions by default)
WHOLE_STREAM = {"backend_options": {"token_log": None}}


def digest(dev) -> str:
    return hashlib.sha256(dev.tokens.ids().tobytes()).hexdigest()


def in_process(n: int, burst: int = 1, which: str = "basic") -> dict:
    """The same calls with every rank in this process (one group per call): results and token digests per rank."""
    comms = qccl.Communicator.init_all(n, config={"burst": burst, **WHOLE_STREAM})
    ok = True
    for i, case in enumerate(case_list(n, which)):
        b = H.prepare(n, case.kind, case.count, case.dtype, case.in_place, seed=100 + i)
        with qccl.group():
            for c in comms:
                call(c, case, b)
        exp = expected(case, b)
        ok &= all(H.same(b.outs[r], exp[r]) for r in range(n))
    return {"ok": ok, "tokens": [digest(c.world.devices[c.rank]) for c in comms],
            "stats": [c.stats for c in comms]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--burst", type=int, default=1)
    ap.add_argument("--cases", default="basic", choices=("basic", "wide", "wide+big"))
    a = ap.parse_args(argv)
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    comm = qccl.Communicator.init(n, rank, qccl.get_unique_id(), config={"burst": a.burst, **WHOLE_STREAM})
    if n > 1:       # torch.distributed's own gloo group, for the second reference (qccl's world has its own group)
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://", world_size=n, rank=rank)
    report = {"rank": rank, "cases": []}
    for i, case in enumerate(case_list(n, a.cases)):
        b = H.prepare(n, case.kind, case.count, case.dtype, case.in_place, seed=100 + i)
        call(comm, case, b)
        ok = H.same(b.outs[rank], expected(case, b)[rank])
        g = gloo_result(case.kind, case.op, b.orig, case.root, rank, n)
        gloo_ok = None if g is None else bool(np.array_equal(b.outs[rank], g))
        report["cases"].append({"case": str(case), "numpy": ok, "gloo": gloo_ok})
    report["tokens"] = digest(comm.world.devices[rank])
    report["stats"] = comm.stats
    comm.destroy()
    if n > 1:
        dist.destroy_process_group()
    if a.json:
        with open(f"{a.json}.{rank}", "w") as f:
            json.dump(report, f)
    bad = [c for c in report["cases"] if not c["numpy"] or c["gloo"] is False]
    print(f"rank {rank}: {len(report['cases']) - len(bad)}/{len(report['cases'])} cases identical to numpy"
          f"{' and gloo' if not bad else ''}; tokens written {report['stats']['tokens_written']}", flush=True)
    for c in bad:
        print(f"rank {rank}: DIFFERS: {c['case']}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
