"""NCCL against qccl: the same seeded inputs through NCCL (nccl4py 0.6, ``nccl.core``, with an nvidia-nccl-cu12 /
-cu13 wheel 2.30 or later: ``python -m qccl_bench.nccl_wheel`` makes one small enough to carry to a lent GPU), qccl's
CuPy transport and QLink, per collective, dtype and op: identical / differs (bit for bit, against each other and
numpy), time, algbw / busbw (nccl-tests' factors) and, for QLink, the tokens each rank's model wrote.

    python -m qccl_bench.nccl_compare --ranks 2 --count 1024 --dtypes int32,bfloat16 --ops sum,max --json out.json

Several ranks share one GPU in NCCL only with NCCL_MULTI_RANK_GPU_ENABLE=1 (experimental, 2 ranks per GPU, no NVLS):
the script sets it when there are more ranks than GPUs. Without CuPy or a GPU, NCCL and the CuPy transport are
reported as skipped with the reason and QLink still runs (exit 0); a result that differs exits 1. QLink reduces
int32 / uint32 with every op and, in software floating point, float32 / bfloat16 / float16 with sum, max and min
(qccl/kernels/fprim.cu); the reductions it refuses are rows skipped with its reason. bfloat16, which numpy lacks,
travels as torch tensors (CPU tensors to qccl, CUDA tensors to NCCL); its reference is numpy's float32 result rounded
to nearest even by torch.

Inputs: with 2 ranks, random floats (every element is one add, the same bits in any order, so NCCL, the CuPy
transport, QLink and numpy must agree bit for bit: a bfloat16 add rounded once equals a float32 add rounded to
bfloat16, float32 having more than twice bfloat16's precision and two bits more); with more ranks, small integers,
exact in every order. prod multiplies small integers on any count of ranks.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import qccl
from qccl_bench.perf import bus_factor

DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16")
FLOATS = ("float16", "float32", "float64", "bfloat16")
OPS = ("sum", "prod", "max", "min")
KINDS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "sendrecv")
REDUCING = ("allreduce", "reduce_scatter", "reduce")


def inputs(kind: str, n: int, count: int, dtype: str, seed: int, op: str = "sum") -> list:
    """Random floats on 2 ranks (one add per element: the same bits in any order); otherwise, and for prod, small
    integers, exact in every dtype, so every reduction order gives the same bits."""
    rng = np.random.default_rng(seed)
    per = count * n if kind == "reduce_scatter" else count
    if n == 2 and dtype in FLOATS and op != "prod":
        return [host(rng.standard_normal(per).astype(np.float32) * 100, dtype) for _ in range(n)]
    return [host(rng.integers(-3, 4, per).astype(np.float32), dtype) for _ in range(n)]



def host(values: np.ndarray, dtype: str):
    """``values`` as a host array of ``dtype``: a numpy array, or for bfloat16 (numpy has none) a CPU torch tensor,
    rounded to nearest even."""
    if dtype == "bfloat16":
        import torch
        return torch.from_numpy(np.ascontiguousarray(values, np.float32)).bfloat16()
    return np.asarray(values).astype(dtype)


def _dtype(a) -> str:
    return str(a.dtype).removeprefix("torch.")


def values(a) -> np.ndarray:
    """A host array's values as numpy (bfloat16 widened to float32, exactly)."""
    return a.float().numpy() if _dtype(a) == "bfloat16" else a


def bits(a) -> np.ndarray:
    """A host array's bytes, for bit-for-bit comparison."""
    if _dtype(a) == "bfloat16":
        import torch
        return a.view(torch.int16).numpy().view(np.uint8)
    return a.view(np.uint8)


def zeros(like, size: int):
    return host(np.zeros(size, np.float32), "bfloat16") if _dtype(like) == "bfloat16" else np.zeros(size, like.dtype)


def itemsize(a) -> int:
    return 2 if _dtype(a) == "bfloat16" else a.itemsize


def out_size(kind: str, n: int, count: int) -> int:
    return count * n if kind == "allgather" else count


def numpy_result(kind, x, count, root=0, op="sum"):
    """numpy's answer (bfloat16: numpy's float32 answer, exact for these inputs or rounded once, then rounded to
    bfloat16 by torch)."""
    n, dtype = len(x), _dtype(x[0])
    wide = [values(a) for a in x]
    red = host({"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op](np.stack(wide), axis=0)
               .astype(wide[0].dtype), dtype)
    return {"allreduce": [red] * n, "reduce_scatter": [red[r * count:(r + 1) * count] for r in range(n)],
            "allgather": [host(np.concatenate(wide), dtype)] * n, "broadcast": [x[root]] * n,
            "reduce": [red if r == root else None for r in range(n)],
            "sendrecv": [x[(r - 1) % n] for r in range(n)]}[kind]


def run_qccl(comms, kind, x, count, root=0, op="sum"):
    n = len(comms)
    y = [zeros(x[0], out_size(kind, n, count)) for _ in range(n)]
    before = [c.stats for c in comms]
    t0 = time.perf_counter()
    with qccl.group():
        for c in comms:
            r = c.rank
            if kind == "allreduce":
                c.allreduce(x[r], y[r], op)
            elif kind == "reduce_scatter":
                c.reduce_scatter(x[r], y[r], op)
            elif kind == "allgather":
                c.allgather(x[r], y[r])
            elif kind == "broadcast":
                c.broadcast(x[r], y[r], root)
            elif kind == "reduce":
                c.reduce(x[r], y[r], op, root)
            else:
                c.send(x[r], (r + 1) % n)
                c.recv(y[r], (r - 1) % n)
    wall = time.perf_counter() - t0
    after = [c.stats for c in comms]
    tokens = [a["tokens_written"] - b["tokens_written"] for a, b in zip(after, before)]
    return y, wall, tokens


def _nccl_op(nc, name="sum"):
    for path in (("RedOp", name.upper()), ("RedOp", name.capitalize()), (name.upper(),)):
        obj = nc
        try:
            for p in path:
                obj = getattr(obj, p)
            return obj
        except AttributeError:
            continue
    return 0        # ncclSum


_NCCL: dict = {}        # ranks -> (communicators, devices), made once per run


def run_nccl(kind, x, count, root=0, op="sum"):
    """NCCL through nccl4py: every rank in this process (init_all), on the GPUs round-robin. CuPy arrays, or CUDA
    torch tensors for bfloat16 (nccl4py resolves both to pointer, count and NCCL dtype)."""
    import cupy
    import nccl.core as nc
    n = len(x)
    if n not in _NCCL:
        ndev = cupy.cuda.runtime.getDeviceCount()
        devices = [r % ndev for r in range(n)]
        _NCCL[n] = (nc.Communicator.init_all(devices=devices), devices)
    comms, devices = _NCCL[n]
    bf16 = _dtype(x[0]) == "bfloat16"
    xs, ys, streams = [], [], []
    for r in range(n):
        with cupy.cuda.Device(devices[r]):
            if bf16:
                xs.append(x[r].to(f"cuda:{devices[r]}"))
                ys.append(zeros(x[r], out_size(kind, n, count)).to(f"cuda:{devices[r]}"))
            else:
                xs.append(cupy.asarray(x[r]))
                ys.append(cupy.zeros(out_size(kind, n, count), x[r].dtype))
            streams.append(cupy.cuda.Stream(non_blocking=True))
    if bf16:                    # torch filled them on its own streams
        import torch
        for d in set(devices):
            torch.cuda.synchronize(d)
    op = _nccl_op(nc, op)
    for s in streams:
        s.synchronize()
    t0 = time.perf_counter()
    with nc.group():
        for r, c in enumerate(comms):
            s = streams[r]
            if kind == "allreduce":
                c.allreduce(xs[r], ys[r], op, stream=s)
            elif kind == "reduce_scatter":
                c.reduce_scatter(xs[r], ys[r], op, stream=s)
            elif kind == "allgather":
                c.allgather(xs[r], ys[r], stream=s)
            elif kind == "broadcast":
                c.broadcast(xs[r], ys[r], root, stream=s)
            elif kind == "reduce":
                c.reduce(xs[r], ys[r], op, root, stream=s)
            else:
                c.send(xs[r], (r + 1) % n, stream=s)
                c.recv(ys[r], (r - 1) % n, stream=s)
    for s in streams:
        s.synchronize()
    wall = time.perf_counter() - t0
    return [y.cpu() if bf16 else cupy.asnumpy(y) for y in ys], wall


def skip_if_qlink_refuses(dtype: str, op: str) -> None:
    """Raise a 'skipped: ...' RuntimeError, with QLink's own reason, for a reduction QLink does not run."""
    qlink = qccl.get_transport("qlink")
    if dtype not in qlink.dtypes:
        raise RuntimeError(f"skipped: QLink reduces {', '.join(qlink.dtypes)}")
    try:
        qlink.check_reduction(dtype, op)
    except qccl.InvalidArgument as e:
        raise RuntimeError(f"skipped: {e}") from None


def nccl_reason(ranks: int) -> str:
    """'' when NCCL can run ``ranks`` ranks here, else why not (nccl4py missing, or several ranks per GPU before
    NCCL 2.30, which refuses them as duplicate GPUs)."""
    try:
        import cupy
        import nccl.core as nc
        lib = nc.get_version().libnccl.version
    except Exception as e:      # noqa: BLE001
        return f"no NCCL: {type(e).__name__}: {e}"
    devices = cupy.cuda.runtime.getDeviceCount()
    if ranks > devices and (lib.major, lib.minor) < (2, 30):
        return (f"NCCL {lib} runs one rank per GPU; {ranks} ranks on {devices} GPU(s) need NCCL 2.30 or later "
                "(NCCL_MULTI_RANK_GPU_ENABLE=1)")
    return ""


def nccl_version() -> str:
    try:
        import nccl.core as nc
        return str(nc.get_version())
    except Exception as e:      # noqa: BLE001
        return f"unavailable: {type(e).__name__}: {e}"


def gpu_reason() -> str:
    """'' when CuPy sees a GPU, else why not."""
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
        return "" if n > 0 else "no CUDA device"
    except Exception as e:      # noqa: BLE001
        return f"no GPU stack: {type(e).__name__}: {e}"


def same(a, b) -> bool:
    """Bit for bit equal (``b`` None: no answer is defined, as on a non-root rank of reduce)."""
    if b is None:
        return True
    return _dtype(a) == _dtype(b) and np.array_equal(bits(a), bits(b))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl_bench.nccl_compare", description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--count", type=int, default=1024)
    ap.add_argument("--qlink-count", type=int, default=64, help="QwenGPUs are slow: their calls use this count")
    ap.add_argument("--dtypes", default="int32,float32", help=f"comma-separated, of {', '.join(DTYPES)}")
    ap.add_argument("--ops", default="sum", help="the reducing collectives' ops, comma-separated, of "
                    f"{', '.join(OPS)} (the others run once)")
    ap.add_argument("--backends", default="nccl,cupy,qlink", help="which of nccl, cupy, qlink to run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    backends = a.backends.split(",")
    if not backends or set(backends) - {"nccl", "cupy", "qlink"}:
        ap.error(f"--backends {a.backends}: a comma-separated list of nccl, cupy, qlink")
    for option, given, known in (("--dtypes", a.dtypes, DTYPES), ("--ops", a.ops, OPS)):
        unknown = sorted(set(given.split(",")) - set(known))
        if unknown:
            ap.error(f"{option} {','.join(unknown)}: not among {', '.join(known)}")
    reason = gpu_reason()
    if not reason:
        try:
            import cupy
            if a.ranks > cupy.cuda.runtime.getDeviceCount():
                os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
        except Exception:       # noqa: BLE001
            pass
    why_not = {"nccl": reason or ("nccl" in backends and nccl_reason(a.ranks)), "cupy": reason}
    rows, bad = [], 0
    print(f"# nccl_compare: {a.ranks} ranks; GPU: {reason or 'yes'}; NCCL (nccl4py): "
          f"{nccl_version() if 'nccl' in backends and not reason else 'not run'}")
    print(f"# {'collective':15s} {'dtype':8s} {'op':4s} {'backend':6s} {'count':>6s} {'result':10s} "
          f"{'time(us)':>10s} {'algbw':>9s} {'busbw':>9s} {'tokens/rank':>11s}")
    cupy_comms = None
    cases = [(dtype, i, kind, op) for dtype in a.dtypes.split(",") for i, kind in enumerate(KINDS)
             for op in (a.ops.split(",") if kind in REDUCING else ("-",))]
    for dtype, i, kind, op in cases:
        root = i % a.ranks
        reduce_op = "sum" if op == "-" else op      # "-": a collective that takes no op
        results = {}
        for backend in backends:
            count = a.qlink_count if backend == "qlink" else a.count
            row = {"collective": kind, "dtype": dtype, "op": op, "backend": backend, "count": count}
            x = inputs(kind, a.ranks, count, dtype, a.seed + i, reduce_op)
            want = numpy_result(kind, x, count, root, reduce_op)
            try:
                if why_not.get(backend):
                    raise RuntimeError(f"skipped: {why_not[backend]}")
                if backend == "nccl":
                    y, wall = run_nccl(kind, x, count, root, reduce_op)
                    tokens = None
                elif backend == "cupy":
                    cupy_comms = cupy_comms or qccl.Communicator.init_all(a.ranks, transport="cupy")
                    y, wall, _ = run_qccl(cupy_comms, kind, x, count, root, reduce_op)
                    tokens = None
                else:
                    if kind in REDUCING:
                        skip_if_qlink_refuses(dtype, op)
                    y, wall, tokens = run_qccl(qccl.Communicator.init_all(a.ranks), kind, x, count, root, reduce_op)
                ok = all(same(y[r], want[r]) for r in range(a.ranks))
                results[backend] = (count, y)
                size = (count * a.ranks if kind in ("allgather", "reduce_scatter") else count) * itemsize(x[0])
                alg = size / wall / 1e9
                row.update(result="identical" if ok else "differs", time_us=wall * 1e6, algbw=alg,
                           busbw=alg * bus_factor(kind, a.ranks), tokens_per_rank=tokens)
                bad += not ok
            except Exception as e:      # noqa: BLE001  (one backend's failure is a row, not the end)
                text = str(e)
                row.update(result=text if text.startswith("skipped") else f"error: {type(e).__name__}: {e}")
                bad += not text.startswith("skipped")
            rows.append(row)
            t = row.get("time_us")
            print(f"  {kind:15s} {dtype:8s} {op:4s} {backend:6s} {count:6d} {row['result'][:60]:10s} "
                  + (f"{t:10.1f} {row['algbw']:9.3g} {row['busbw']:9.3g} "
                     f"{'' if row['tokens_per_rank'] is None else max(row['tokens_per_rank']):>11}" if t else ""))
        if "nccl" in results and "cupy" in results:
            same_bits = all(same(p, q) for p, q in zip(results["nccl"][1], results["cupy"][1]))
            rows.append({"collective": kind, "dtype": dtype, "op": op, "backend": "nccl-vs-cupy",
                         "result": "identical" if same_bits else "differs"})
            bad += not same_bits
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": a.ranks, "gpu": reason or "yes", "rows": rows}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
