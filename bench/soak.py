"""The soak: ``python -m qccl_bench.soak [--calls 10000] [--ranks 4] [--max-count 16] [--seed 0] [--json FILE]``.

Random collectives on ONE communicator in one process: kind (the ten calls), count, op, root, algorithm and dtype
(reductions: int32 / uint32; the copy collectives also int64, int8, bool, float32 as raw bits), each either grouped
(every rank in one group) or ungrouped (each rank's call on its own, held on the board until the last rank calls).
Every result is held against numpy, byte for byte. RSS is sampled as it runs, with the positions the devices' token
logs hold (a communicator's device keeps its latest 65,536 positions or more, trimmed between launches: the one
thing that grew with calls before). Exits non-zero on any wrong result.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

import numpy as np

import qccl
from qccl_bench import reference as R

KINDS = ("allreduce", "reduce", "reduce_scatter", "allgather", "broadcast", "sendrecv", "alltoall", "gather",
         "scatter", "barrier")
REDUCING = ("allreduce", "reduce", "reduce_scatter")
MULTICAST = ("allreduce", "allgather", "broadcast")
COPY_DTYPES = (np.int32, np.uint32, np.int64, np.int8, np.bool_, np.float32)
TOKEN_BYTES = 5         # memory per position of a device's token log (an int32 id and an origin byte)


def rss_mb() -> float:
    """This process's resident set, in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _data(rng, dtype, size: int) -> np.ndarray:
    if dtype is np.bool_:
        return rng.integers(0, 2, size).astype(np.bool_)
    return rng.integers(0, 256, size * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype).copy()


def _bytes(a) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def one_call(comms, rng, max_count: int) -> tuple[dict, list, list]:
    """Issue one random call on every rank; returns (its description, outputs, numpy's expected outputs)."""
    n = len(comms)
    kind = KINDS[rng.integers(len(KINDS))]
    count = int(rng.integers(0, max_count + 1))
    root = int(rng.integers(n))
    op = R.OPS[rng.integers(len(R.OPS))] if kind in REDUCING else None
    dtype = (np.int32, np.uint32)[rng.integers(2)] if kind in REDUCING else COPY_DTYPES[rng.integers(len(COPY_DTYPES))]
    algo = ("ring", "multicast")[rng.integers(2)] if kind in MULTICAST else None
    grouped = bool(rng.integers(2))
    desc = {"kind": kind, "count": count, "root": root, "op": op, "dtype": np.dtype(dtype).name, "algo": algo,
            "grouped": grouped}
    if kind in ("reduce_scatter", "alltoall", "scatter"):
        xs = [_data(rng, dtype, count * n) for _ in range(n)]
    else:
        xs = [_data(rng, dtype, count) for _ in range(n)]
    out_size = {"allgather": count * n, "gather": count * n, "alltoall": count * n}.get(kind, count)
    outs = [np.full(out_size, 0x5E, np.uint8).view(np.uint8).astype(dtype) if out_size else np.zeros(0, dtype)
            for _ in range(n)]
    if kind == "barrier":
        outs = [np.zeros(0, np.int32) for _ in range(n)]
    before = [o.copy() for o in outs]

    def issue(c):
        r, x, y = c.rank, xs[c.rank], outs[c.rank]
        if kind == "allreduce":
            c.allreduce(x, y, op, algo=algo)
        elif kind == "reduce":
            c.reduce(x, y if r == root else None, op, root)
        elif kind == "reduce_scatter":
            c.reduce_scatter(x, y, op)
        elif kind == "allgather":
            c.allgather(x, y, algo=algo)
        elif kind == "broadcast":
            c.broadcast(x if r == root else None, y, root, algo=algo)
        elif kind == "sendrecv":
            with qccl.group():
                c.send(x, (r + 1) % n)
                c.recv(y, (r - 1) % n)
        elif kind == "alltoall":
            c.alltoall(x, y)
        elif kind == "gather":
            c.gather(x, y if r == root else None, root)
        elif kind == "scatter":
            c.scatter(x if r == root else None, y, root)
        else:
            c.barrier()

    if grouped:
        with qccl.group():
            for c in comms:
                issue(c)
    else:
        for c in comms:
            issue(c)
    return desc, outs, expected(kind, xs, before, op, root, count)


def expected(kind: str, xs: list, before: list, op, root: int, count: int) -> list:
    """numpy's outputs for every rank (a rank whose output the call does not touch keeps what it had)."""
    n = len(xs)
    if kind == "allreduce":
        return R.allreduce(xs, op)
    if kind == "reduce":
        return [R.reduce(xs, op, root) if r == root else before[r] for r in range(n)]
    if kind == "reduce_scatter":
        return R.reduce_scatter(xs, op)
    if kind == "allgather":
        return R.allgather(xs)
    if kind == "broadcast":
        return R.broadcast(xs, root)
    if kind == "sendrecv":
        return [xs[(r - 1) % n] for r in range(n)]
    if kind == "alltoall":
        return R.alltoall(xs)
    if kind == "gather":
        return [R.gather(xs) if r == root else before[r] for r in range(n)]
    if kind == "scatter":
        return R.scatter(xs[root], n)
    return before


def soak(calls: int = 10_000, seed: int = 0, ranks: int = 4, max_count: int = 16, progress=None) -> dict:
    """Run the soak; returns its figures (calls, wrong, failures, kinds, RSS samples, token log size, wall)."""
    rng = np.random.default_rng(seed)
    comms = qccl.Communicator.init_all(ranks)
    kinds, failures, samples = Counter(), [], []
    t0 = time.perf_counter()
    rss0 = rss_mb()
    for i in range(calls):
        desc, outs, want = one_call(comms, rng, max_count)
        kinds[desc["kind"]] += 1
        if not all(_bytes(o) == _bytes(w) for o, w in zip(outs, want)):
            failures.append({"call": i, **desc})
        if (i + 1) % max(1, calls // 20) == 0 or i + 1 == calls:
            tokens = sum(len(c.device.tokens) - c.device.tokens.start for c in comms)     # positions held
            samples.append({"calls": i + 1, "rss_mb": round(rss_mb(), 1), "token_log": tokens,
                            "token_log_mb": round(tokens * TOKEN_BYTES / 2**20, 1),
                            "seconds": round(time.perf_counter() - t0, 1)})
            if progress:
                progress(samples[-1], len(failures))
    wall = time.perf_counter() - t0
    first = samples[0] if samples else {"calls": 0, "rss_mb": rss0, "token_log_mb": 0}
    last = samples[-1] if samples else first
    span = max(1, last["calls"] - first["calls"])
    return {"calls": calls, "ranks": ranks, "seed": seed, "wrong": len(failures), "failures": failures,
            "kinds": dict(kinds), "samples": samples, "rss_start_mb": round(rss0, 1), "rss_end_mb": last["rss_mb"],
            "rss_kb_per_call": round((last["rss_mb"] - first["rss_mb"]) * 1024 / span, 2),
            "token_log_kb_per_call": round((last["token_log_mb"] - first["token_log_mb"]) * 1024 / span, 2),
            "tokens_written": [c.stats["tokens_written"] for c in comms], "wall_s": round(wall, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl_bench.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--max-count", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures to this file")
    a = ap.parse_args(argv)

    def progress(s, wrong):
        print(f"{s['calls']:>6} calls  {s['seconds']:>7.1f} s  RSS {s['rss_mb']:>7.1f} MB  token log "
              f"{s['token_log_mb']:>6.1f} MB  wrong {wrong}", flush=True)

    report = soak(a.calls, a.seed, a.ranks, a.max_count, progress)
    print(f"{report['calls']} calls on {report['ranks']} ranks: {report['wrong']} wrong; RSS "
          f"{report['rss_start_mb']} -> {report['rss_end_mb']} MB ({report['rss_kb_per_call']} KB per call; the "
          f"devices' token log grows {report['token_log_kb_per_call']} KB per call); {report['wall_s']} s; "
          f"kinds {report['kinds']}")
    for f in report["failures"][:20]:
        print("WRONG", f, file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if report["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
