"""NCCL against qccl: the same seeded inputs through NCCL (nccl4py 0.6, ``nccl.core``, with an nvidia-nccl-cu12 /
-cu13 wheel 2.30 or later: ``python -m qccl_bench.nccl_wheel`` makes one small enough to carry to a lent GPU), qccl's
CuPy transport and QLink, per collective: identical / differs (bit for bit, against each other and numpy), time,
algbw / busbw (nccl-tests' factors) and, for QLink, the tokens each rank's model wrote.

    python -m qccl_bench.nccl_compare --ranks 2 --count 1024 --dtypes int32,float32 --json out.json

Several ranks share one GPU in NCCL only with NCCL_MULTI_RANK_GPU_ENABLE=1 (experimental, 2 ranks per GPU, no NVLS):
the script sets it when there are more ranks than GPUs. Without CuPy or a GPU, NCCL and the CuPy transport are
reported as skipped with the reason and QLink still runs (exit 0); a result that differs exits 1. QLink reduces
int32 / uint32 and, in software floating point, float32 / bfloat16 / float16 (qccl/kernels/fprim.cu); its other
dtypes' reductions are skipped. numpy has no bfloat16: tests/test_cupy_transport.py checks it through torch tensors.

Inputs: with 2 ranks, random floats (every element is one add, the same bits in any order, so NCCL, the CuPy
transport, QLink and numpy must agree bit for bit); with more ranks, small integers, exact in every order.
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

KINDS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "sendrecv")
REDUCING = ("allreduce", "reduce_scatter", "reduce")


def inputs(kind: str, n: int, count: int, dtype: str, seed: int) -> list:
    """Random floats on 2 ranks (one add per element: the same bits in any order); otherwise small integers, exact
    in every dtype, so every reduction order gives the same bits."""
    rng = np.random.default_rng(seed)
    per = count * n if kind == "reduce_scatter" else count
    if n == 2 and _np(dtype).kind == "f":
        return [(rng.standard_normal(per) * 100).astype(_np(dtype)) for _ in range(n)]
    return [rng.integers(-3, 4, per).astype(np.float32).astype(_np(dtype)) for _ in range(n)]


def _np(dtype: str):
    if dtype == "bfloat16":
        raise ValueError("bfloat16 has no numpy dtype; run it through torch tensors")
    return np.dtype(dtype)


def out_size(kind: str, n: int, count: int) -> int:
    return count * n if kind == "allgather" else count


def numpy_result(kind, x, count, root=0):
    n = len(x)
    red = np.sum(np.stack(x), axis=0).astype(x[0].dtype)
    return {"allreduce": [red] * n, "reduce_scatter": [red[r * count:(r + 1) * count] for r in range(n)],
            "allgather": [np.concatenate(x)] * n, "broadcast": [x[root]] * n,
            "reduce": [red if r == root else None for r in range(n)],
            "sendrecv": [x[(r - 1) % n] for r in range(n)]}[kind]


def run_qccl(comms, kind, x, count, root=0):
    n = len(comms)
    y = [np.zeros(out_size(kind, n, count), x[0].dtype) for _ in range(n)]
    before = [c.stats for c in comms]
    t0 = time.perf_counter()
    with qccl.group():
        for c in comms:
            r = c.rank
            if kind == "allreduce":
                c.allreduce(x[r], y[r], "sum")
            elif kind == "reduce_scatter":
                c.reduce_scatter(x[r], y[r], "sum")
            elif kind == "allgather":
                c.allgather(x[r], y[r])
            elif kind == "broadcast":
                c.broadcast(x[r], y[r], root)
            elif kind == "reduce":
                c.reduce(x[r], y[r], "sum", root)
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


def run_nccl(kind, x, count, root=0):
    """NCCL through nccl4py: every rank in this process (init_all), on the GPUs round-robin."""
    import cupy
    import nccl.core as nc
    n = len(x)
    if n not in _NCCL:
        ndev = cupy.cuda.runtime.getDeviceCount()
        devices = [r % ndev for r in range(n)]
        _NCCL[n] = (nc.Communicator.init_all(devices=devices), devices)
    comms, devices = _NCCL[n]
    xs, ys, streams = [], [], []
    for r in range(n):
        with cupy.cuda.Device(devices[r]):
            xs.append(cupy.asarray(x[r]))
            ys.append(cupy.zeros(out_size(kind, n, count), x[r].dtype))
            streams.append(cupy.cuda.Stream(non_blocking=True))
    op = _nccl_op(nc)
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
    return [cupy.asnumpy(y) for y in ys], wall


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
    if b is None:
        return True
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl_bench.nccl_compare", description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--count", type=int, default=1024)
    ap.add_argument("--qlink-count", type=int, default=64, help="QwenGPUs are slow: their calls use this count")
    ap.add_argument("--dtypes", default="int32,float32")
    ap.add_argument("--backends", default="nccl,cupy,qlink", help="which of nccl, cupy, qlink to run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    backends = a.backends.split(",")
    if not backends or set(backends) - {"nccl", "cupy", "qlink"}:
        ap.error(f"--backends {a.backends}: a comma-separated list of nccl, cupy, qlink")
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
    print(f"# {'collective':15s} {'dtype':8s} {'backend':6s} {'count':>6s} {'result':10s} {'time(us)':>10s} "
          f"{'algbw':>9s} {'busbw':>9s} {'tokens/rank':>11s}")
    cupy_comms = None
    for dtype in a.dtypes.split(","):
        for i, kind in enumerate(KINDS):
            root = i % a.ranks
            results = {}
            for backend in backends:
                count = a.qlink_count if backend == "qlink" else a.count
                row = {"collective": kind, "dtype": dtype, "backend": backend, "count": count}
                x = inputs(kind, a.ranks, count, dtype, a.seed + i)
                want = numpy_result(kind, x, count, root)
                try:
                    if why_not.get(backend):
                        raise RuntimeError(f"skipped: {why_not[backend]}")
                    if backend == "nccl":
                        y, wall = run_nccl(kind, x, count, root)
                        tokens = None
                    elif backend == "cupy":
                        cupy_comms = cupy_comms or qccl.Communicator.init_all(a.ranks, transport="cupy")
                        y, wall, _ = run_qccl(cupy_comms, kind, x, count, root)
                        tokens = None
                    else:
                        qlink = qccl.get_transport("qlink")
                        if kind in REDUCING and dtype not in qlink.dtypes:
                            raise RuntimeError(f"skipped: QLink reduces {', '.join(qlink.dtypes)}")
                        y, wall, tokens = run_qccl(qccl.Communicator.init_all(a.ranks), kind, x, count, root)
                    ok = all(same(y[r], want[r]) for r in range(a.ranks))
                    results[backend] = (count, y)
                    size = out_size(kind, a.ranks, count) * x[0].itemsize if kind != "reduce_scatter" else \
                        count * a.ranks * x[0].itemsize
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
                print(f"  {kind:15s} {dtype:8s} {backend:6s} {count:6d} {row['result'][:60]:10s} "
                      + (f"{t:10.1f} {row['algbw']:9.3g} {row['busbw']:9.3g} "
                         f"{'' if row['tokens_per_rank'] is None else max(row['tokens_per_rank']):>11}" if t else ""))
            if "nccl" in results and "cupy" in results:
                same_bits = all(same(p, q) for p, q in zip(results["nccl"][1], results["cupy"][1]))
                rows.append({"collective": kind, "dtype": dtype, "backend": "nccl-vs-cupy",
                             "result": "identical" if same_bits else "differs"})
                bad += not same_bits
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": a.ranks, "gpu": reason or "yes", "rows": rows}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
