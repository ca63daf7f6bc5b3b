"""The seed's table, measured: ``python -m qccl_bench.demo [--json FILE]`` (``make demo``).

Four QwenGPUs in lockstep over QLink (reference interpreter backend), 16 words per rank, each of the six collectives
once (ring, as NCCL's runRing), then the multicast algorithms, then the default (algo="auto": the tuner's choice of
the two, never the costlier), then the same on eight ranks. For each: the tokens each
model wrote (min-max over ranks), the launches per rank, the wall time of the simulation, and the result held against
numpy. The seed's figures (its post, 4 merged Qwen3.5-2B on GB200s) are printed beside ours for comparison.
"""
from __future__ import annotations

import argparse
import json
import zlib
import sys

import numpy as np

from qccl_bench.harness import run

# The seed post's figures (4 ranks x 16 words; 8-rank AllReduce), quoted for comparison only.
SEED = {"allreduce": "664", "reduce_scatter": "342", "allgather": "378", "broadcast": "163-235",
        "reduce": "163-211", "sendrecv": "250"}
SEED_8 = {"allreduce": "1480 (15 launches)"}

ROWS = [("AllReduce", "allreduce", "sum", "ring"), ("ReduceScatter", "reduce_scatter", "sum", "ring"),
        ("AllGather", "allgather", None, "ring"), ("Broadcast", "broadcast", None, "ring"),
        ("Reduce", "reduce", "sum", "ring"), ("SendRecv (ring shift)", "sendrecv", None, "ring"),
        ("AllReduce", "allreduce", "sum", "multicast"), ("AllGather", "allgather", None, "multicast"),
        ("Broadcast", "broadcast", None, "multicast"),
        ("AllReduce", "allreduce", "sum", "auto"), ("AllGather", "allgather", None, "auto"),
        ("Broadcast", "broadcast", None, "auto")]


def chosen(comm, kind: str, count: int, op) -> str:
    """The algorithm algo="auto" runs for this call (the tuners' answer, as the communicator asks it)."""
    from qccl.communicator import ALGOS
    from qccl.plugins import tune
    from qccl.schedule import max_chunk
    chunks = {a: max_chunk(comm.heap, kind, a) for a in ALGOS[kind]}
    return tune(kind, "auto", ALGOS[kind], comm.nranks, count, "int32", op, 0, comm.config.as_dict(), count,
                chunks).algo


def measure(n: int, words: int = 16) -> list[dict]:
    rows = []
    for label, kind, op, algo in ROWS:
        # 16 words per rank's buffer: ReduceScatter's recvcount and AllGather's sendcount are words / n
        count = words // n if kind in ("reduce_scatter", "allgather") else words
        o = run(n, kind, count, op or "sum", root=0, algo=algo, seed=zlib.crc32(kind.encode()) % 1000)
        ran = chosen(o.comms[0], kind, count, op) if algo == "auto" else algo
        rows.append({"collective": label, "kind": kind, "algo": algo, "ran": ran, "ranks": n, "words": words,
                     "tokens_min": min(o.tokens), "tokens_max": max(o.tokens), "tokens": o.tokens,
                     "launches_min": min(o.launches), "launches_max": max(o.launches),
                     "records_max": max(o.records), "wall_s": round(o.wall, 3),
                     "vs_numpy": "identical" if o.ok else "differs",
                     "seed": (SEED if n == 4 else SEED_8).get(kind) if algo == "ring" else None})
    return rows


def span(a, b) -> str:
    return f"{a}" if a == b else f"{a}-{b}"


def table(rows: list[dict]) -> str:
    head = (f"| {'Collective':22} | {'algo':16} | {'tokens each model wrote':>23} | {'launches':>8} | "
            f"{'wall time':>9} | {'vs numpy':9} | {'seed':>19} |")
    line = "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"
    out = [head, line]
    for r in rows:
        algo = r["algo"] if r["algo"] == r["ran"] else f"{r['algo']} ({r['ran']})"
        out.append(f"| {r['collective']:22} | {algo:16} | {span(r['tokens_min'], r['tokens_max']):>23} | "
                   f"{span(r['launches_min'], r['launches_max']):>8} | {r['wall_s']:>8.2f}s | {r['vs_numpy']:9} | "
                   f"{r['seed'] or '':>19} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl_bench.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--words", type=int, default=16, help="words per rank's buffer (default 16, the seed's)")
    a = ap.parse_args(argv)
    results = {}
    for n in (4, 8):
        rows = measure(n, a.words)
        results[f"{n}_ranks"] = rows
        print(f"\nqccl on QLink: {n} QwenGPUs (interpreter backend, lockstep), {a.words} words per rank\n")
        print(table(rows))
    bad = [r for rows in results.values() for r in rows if r["vs_numpy"] != "identical"]
    ar = {r["algo"]: r for r in results["4_ranks"] if r["kind"] == "allreduce"}
    print(f"\nAllReduce, 4 ranks x {a.words} words: {ar['ring']['tokens_max']} tokens per rank with the ring, "
          f"{ar['multicast']['tokens_max']} with multicast; the default (auto) ran {ar['auto']['ran']}: "
          f"{ar['auto']['tokens_max']} (seed: 664).")
    print("Tokens: what each model wrote (a forward pass each); host records and peers' packets are fed (prefill).")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"figures written to {a.json}")
    if bad:
        print(f"{len(bad)} results differ from numpy", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
