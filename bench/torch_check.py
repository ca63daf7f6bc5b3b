"""One torch.distributed program, run on "qccl" and on "gloo" and held against numpy:
``torchrun --standalone --nproc-per-node 4 -m qccl_bench.torch_check --backend qccl --json OUT``.

Every call of the torch backend's surface: all_reduce (each op), broadcast, reduce, all_gather,
all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, all_to_all_single (equal and uneven splits), all_to_all,
gather, scatter,
send / recv, isend / irecv, a ring of batch_isend_irecv, barrier, new_group, async_op=True, any dtype through the copy
collectives (int64, float32, bfloat16, bool), and a refused reduction dtype (float64) followed by a working call.
Each rank writes, per call, whether its result equals numpy's and a digest of the result bytes, so a test can also
hold the qccl run against the gloo run (a call the backend does not have is recorded as "unsupported").
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

R = dist.ReduceOp


def end_reference_run(code: int) -> None:
    """End a gloo reference run without the interpreter's and C++'s teardown. torch's DDP keeps the gloo group alive
    past destroy_process_group (ten references stay behind; its socket loop and two worker threads run on), and a
    process that exits under live gloo threads can end in std::terminate after its results were written (the likely
    cause of a finished gloo rank's SIGABRT in CI). Results are written and flushed before this. qccl's runs exit
    normally: qccl destroys its own idle gloo groups at exit (qccl.liveness.Liveness.close)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def inputs(n: int, count: int, dtype=torch.int32, seed: int = 0) -> list[torch.Tensor]:
    """Every rank's input (every rank builds all of them, to know numpy's answer); small values, so products fit."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return [torch.randint(0, 2, (count,), generator=g).bool() for _ in range(n)]
    if dtype.is_floating_point:
        return [torch.randn(count, generator=g).to(dtype) for _ in range(n)]
    return [torch.randint(-4, 5, (count,), generator=g, dtype=torch.int64).to(dtype) for _ in range(n)]


def np_reduce(xs: list[np.ndarray], op: str) -> np.ndarray:
    a = np.stack([x.astype(np.int64) for x in xs])
    out = {"sum": a.sum(0), "prod": a.prod(0), "min": a.min(0), "max": a.max(0),
           "avg": np.trunc(a.sum(0) / len(xs)).astype(np.int64),
           "band": np.bitwise_and.reduce(a, 0), "bor": np.bitwise_or.reduce(a, 0),
           "bxor": np.bitwise_xor.reduce(a, 0)}[op]
    return ((out + 2**31) % 2**32 - 2**31).astype(xs[0].dtype)


def program(rank: int, n: int, backend: str):
    """Yields (name, run) where run() -> (result tensor or None, numpy's expected array or None)."""
    ops = {"sum": R.SUM, "prod": R.PRODUCT, "min": R.MIN, "max": R.MAX, "avg": R.AVG, "band": R.BAND,
           "bor": R.BOR, "bxor": R.BXOR}
    for i, (name, op) in enumerate(ops.items()):
        def run(name=name, op=op, i=i):
            xs = inputs(n, 5, seed=i)
            t = xs[rank].clone()
            dist.all_reduce(t, op)
            return t, np_reduce([x.numpy() for x in xs], name)
        yield f"all_reduce {name}", run

    def refused_then_works():
        t = torch.ones(3, dtype=torch.float64)
        if backend == "qccl":       # gloo reduces float64: there only the working call runs
            try:
                dist.all_reduce(t)
                return None, "float64 all_reduce was not refused"
            except Exception as e:      # noqa: BLE001  (its message must name the dtype)
                if "float64" not in str(e):
                    return None, f"the refusal does not name float64: {e}"
        xs = inputs(n, 3, seed=50)
        t = xs[rank].clone()
        dist.all_reduce(t)
        return t, np_reduce([x.numpy() for x in xs], "sum")
    yield "refused float64 all_reduce, then a working one", refused_then_works

    for dtype in (torch.int32, torch.int64, torch.float32, torch.bfloat16, torch.bool):
        def bcast(dtype=dtype):
            xs = inputs(n, 7, dtype, seed=60)
            t = xs[rank].clone() if rank == n - 1 else torch.zeros(7, dtype=dtype)
            dist.broadcast(t, n - 1)
            return t, _np(xs[n - 1])
        yield f"broadcast {dtype}", bcast

        def gather_list(dtype=dtype):
            xs = inputs(n, 3, dtype, seed=70)
            outs = [torch.zeros(3, dtype=dtype) for _ in range(n)]
            dist.all_gather(outs, xs[rank])
            return torch.cat(outs), np.concatenate([_np(x) for x in xs])
        yield f"all_gather {dtype}", gather_list

    def gather_tensor():
        xs = inputs(n, 4, torch.int64, seed=80)
        out = torch.zeros(4 * n, dtype=torch.int64)
        dist.all_gather_into_tensor(out, xs[rank])
        return out, np.concatenate([x.numpy() for x in xs])
    yield "all_gather_into_tensor int64", gather_tensor

    def gather_scatter():
        xs = inputs(n, 3, torch.int64, seed=85)
        outs = [torch.zeros(3, dtype=torch.int64) for _ in range(n)] if rank == 1 % n else None
        dist.gather(xs[rank], outs, dst=1 % n)
        got = torch.zeros(3, dtype=torch.int64)
        dist.scatter(got, [xs[p] for p in range(n)] if rank == 0 else None, src=0)
        mine = torch.cat(outs + [got]) if outs is not None else got
        exp = [x.numpy() for x in xs] + [xs[rank].numpy()] if outs is not None else [xs[rank].numpy()]
        return mine, np.concatenate(exp)
    yield "gather to rank 1, scatter from rank 0, int64", gather_scatter

    def all_to_all_list():
        xs = inputs(n, n, torch.bool, seed=87)
        outs = [torch.zeros(1, dtype=torch.bool) for _ in range(n)]
        dist.all_to_all(outs, list(xs[rank].split(1)))
        return torch.cat(outs), np.array([xs[p][rank].item() for p in range(n)])
    yield "all_to_all (lists) bool", all_to_all_list

    def reduce_():
        xs = inputs(n, 6, seed=90)
        t = xs[rank].clone()
        dist.reduce(t, 0, R.MAX)
        return (t, np_reduce([x.numpy() for x in xs], "max")) if rank == 0 else (None, None)
    yield "reduce max root 0", reduce_

    def reduce_scatter():
        xs = inputs(n, 2 * n, seed=100)
        out = torch.zeros(2, dtype=torch.int32)
        dist.reduce_scatter(out, list(xs[rank].split(2)), R.SUM)
        return out, np_reduce([x.numpy() for x in xs], "sum")[2 * rank:2 * rank + 2]
    yield "reduce_scatter sum", reduce_scatter

    def reduce_scatter_tensor():
        xs = inputs(n, 3 * n, seed=110)
        out = torch.zeros(3, dtype=torch.int32)
        dist.reduce_scatter_tensor(out, xs[rank], R.MIN)
        return out, np_reduce([x.numpy() for x in xs], "min")[3 * rank:3 * rank + 3]
    yield "reduce_scatter_tensor min", reduce_scatter_tensor

    def a2a_equal():
        xs = inputs(n, 2 * n, torch.float32, seed=120)
        out = torch.zeros(2 * n, dtype=torch.float32)
        dist.all_to_all_single(out, xs[rank])
        return out, np.concatenate([xs[p].numpy()[2 * rank:2 * rank + 2] for p in range(n)])
    yield "all_to_all_single float32", a2a_equal

    def a2a_uneven():
        # rank p sends (p + q) % 3 rows to rank q
        size = lambda p, q: (p + q) % 3     # noqa: E731
        xs = [torch.arange(sum(size(p, q) for q in range(n)), dtype=torch.int64) * 10 + p for p in range(n)]
        ins = [size(rank, q) for q in range(n)]
        outs = [size(p, rank) for p in range(n)]
        out = torch.zeros(sum(outs), dtype=torch.int64)
        dist.all_to_all_single(out, xs[rank], outs, ins)
        exp = [xs[p].numpy()[sum(size(p, q) for q in range(rank)):][:size(p, rank)] for p in range(n)]
        return out, np.concatenate(exp)
    yield "all_to_all_single uneven int64", a2a_uneven

    def ring_batch():
        xs = inputs(n, 5, torch.bfloat16, seed=130)
        got = torch.zeros(5, dtype=torch.bfloat16)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, xs[rank], (rank + 1) % n),
                                       dist.P2POp(dist.irecv, got, (rank - 1) % n)])
        for r in reqs:
            r.wait()
        return got, _np(xs[(rank - 1) % n])
    yield "batch_isend_irecv ring bfloat16", ring_batch

    def isend_irecv():
        xs = inputs(n, 4, seed=140)
        got = torch.zeros(4, dtype=torch.int32)
        a = dist.isend(xs[rank], (rank + 1) % n)
        b = dist.irecv(got, (rank - 1) % n)
        a.wait()
        b.wait()
        return got, xs[(rank - 1) % n].numpy()
    yield "isend / irecv ring", isend_irecv

    def send_recv():
        xs = inputs(n, 3, seed=150)
        got = torch.zeros(3, dtype=torch.int32)
        if n == 1:
            return None, None
        if rank % 2 == 0 and rank + 1 < n:      # pairs (0, 1), (2, 3), ...: every rank of a pair takes part
            dist.send(xs[rank], rank + 1)
            return None, None
        if rank % 2 == 1:
            dist.recv(got, rank - 1)
            return got, xs[rank - 1].numpy()
        return None, None
    yield "send / recv pairs", send_recv if n % 2 == 0 else None

    def async_op():
        xs = inputs(n, 4, seed=160)
        t = xs[rank].clone()
        work = dist.all_reduce(t, R.SUM, async_op=True)
        work.wait()
        return t, np_reduce([x.numpy() for x in xs], "sum")
    yield "all_reduce async_op", async_op

    def barrier():
        dist.barrier()
        return None, None
    yield "barrier", barrier

    def subgroup():
        evens = list(range(0, n, 2))
        g = dist.new_group(evens)
        xs = inputs(n, 4, seed=170)
        if rank not in evens:
            return None, None
        t = xs[rank].clone()
        dist.all_reduce(t, group=g)
        return t, np_reduce([xs[r].numpy() for r in evens], "sum")
    yield "new_group of the even ranks, all_reduce", subgroup


def ddp_program(rank: int, backend: str):
    """DistributedDataParallel as the real client: it broadcasts rank 0's parameters and all_gathers int64 shape
    metadata at construction; then float32 gradients are all-reduced (on qccl by the QwenGPUs' soft float)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def construct():
        torch.manual_seed(100)
        ref = torch.nn.Linear(4, 3)             # rank 0's initial parameters: what every replica must hold
        torch.manual_seed(100 + rank)
        model = DDP(torch.nn.Linear(4, 3))
        got = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])
        x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
        y = model(x)
        same_forward = torch.equal(y.detach(), ref(x).detach())
        try:
            y.sum().backward()
        except Exception as e:      # noqa: BLE001
            return None, f"{backend} refused float32 gradients: {e}"
        ref(x).sum().backward()     # every rank has the same input: the averaged gradient is this one (n is 2, 4, 8)
        got = torch.cat([got] + [p.grad.reshape(-1) for p in model.module.parameters()])
        exp = torch.cat([p.detach().reshape(-1) for p in ref.parameters()] +
                        [p.grad.reshape(-1) for p in ref.parameters()]).numpy()
        return got, exp if same_forward else "the forward differs from rank 0's model"
    yield "DistributedDataParallel: construct, forward, float32 gradients", construct


def _np(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


# one reduction, the refusal and the call after it, any dtype through a copy collective, uneven all-to-all, a ring of
# batch_isend_irecv, a subgroup
SHORT = ("all_reduce sum", "refused float64 all_reduce, then a working one", "all_gather torch.bool",
         "all_to_all_single uneven int64", "batch_isend_irecv ring bfloat16", "new_group of the even ranks, all_reduce")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="qccl", choices=("qccl", "gloo"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--short", action="store_true", help="only the calls in SHORT (CI's share on many ranks)")
    a = ap.parse_args(argv)
    if a.backend == "qccl":
        import qccl.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    report = []
    for name, run in list(program(rank, n, a.backend)) + list(ddp_program(rank, a.backend)):
        if run is None or (a.short and name not in SHORT):
            continue
        try:
            got, exp = run()
        except Exception as e:      # noqa: BLE001  (gloo lacks some calls; qccl must have them all)
            report.append({"call": name, "numpy": None, "digest": None, "error": f"{type(e).__name__}: {e}"[:300]})
            continue
        if isinstance(exp, str):
            report.append({"call": name, "numpy": False, "digest": None, "error": exp})
            continue
        ok = None if got is None else bool(np.array_equal(_np(got), exp))
        digest = None if got is None else hashlib.sha256(_np(got).tobytes()).hexdigest()[:16]
        report.append({"call": name, "numpy": ok, "digest": digest, "error": None})
    dist.destroy_process_group()
    if a.json:
        with open(f"{a.json}.{rank}", "w") as f:
            json.dump(report, f)
    bad = [r for r in report if r["numpy"] is False or (a.backend == "qccl" and r["error"] and not refused(r))]
    for r in bad:
        print(f"rank {rank}: {r['call']}: {r['error'] or 'differs from numpy'}", flush=True)
    print(f"rank {rank} on {a.backend}: {sum(r['numpy'] is True for r in report)} calls equal numpy, "
          f"{len(bad)} bad", flush=True)
    if a.backend == "gloo":
        end_reference_run(1 if bad else 0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
