"""Does ``algo="auto"`` ever cost more than the cheaper algorithm? ``python -m qccl_bench.tuner_check``

For every shape of a grid (allreduce, allgather, broadcast x 2..8 ranks x counts x dtypes, ops and roots), the call
(and a few heaps other than the default) runs three times on QLink's interpreter: algo="ring", algo="multicast" and the default (algo="auto", the built-in
tuner's choice from its cost model). Each run's result is held against numpy, and its cost is the most tokens any
rank's model wrote (DESIGN.md's performance model: written tokens are forward passes; the busiest rank sets the
pace of the lockstep). The check fails (exit 1) when auto wrote more than min(ring, multicast) on any shape (each
at the heap's most words per chunk; auto may write fewer by choosing the chunking), when auto's tokens differ from
what the tuner predicted, or when any result differs from numpy. It prints a line per shape where the two
algorithms differ by under 5 % (the hard cases), and a summary: shapes, how often each algorithm was the cheaper,
the ties, and the model's worst error.

``--json FILE`` writes every shape's figures. The full grid takes a few minutes on one core; ``--quick`` a subset.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import qccl
from qccl_bench import reference as R
from qccl_plugins import cost

ALGOS = ("ring", "multicast")


def grid(quick: bool = False) -> list[dict]:
    """The shapes: (kind, ranks, count in elements, dtype, op, root[, config])."""
    ranks = (2, 3, 4, 8) if quick else (2, 3, 4, 5, 6, 7, 8)
    counts = (1, 16, 37) if quick else (1, 4, 16, 37, 100)
    shapes = []
    for n in ranks:
        for count in counts:
            shapes.append(dict(kind="allreduce", n=n, count=count, dtype="int32", op="sum", root=0))
            if not quick or count == 16:
                shapes.append(dict(kind="allreduce", n=n, count=count, dtype="uint32", op="max", root=0))
            shapes.append(dict(kind="allgather", n=n, count=count, dtype="int32", op=None, root=0))
            for root in ((0, n - 1) if not quick else (n - 1,)):
                shapes.append(dict(kind="broadcast", n=n, count=count, dtype="int32", op=None, root=root))
        # the copy collectives move any dtype as padded 32-bit words: the tuner must price words, not elements
        for dtype, count in (() if quick else (("int8", 7), ("int64", 9), ("float32", 16))):
            shapes.append(dict(kind="allgather", n=n, count=count, dtype=dtype, op=None, root=0))
            shapes.append(dict(kind="broadcast", n=n, count=count, dtype=dtype, op=None, root=n // 2))
        if quick:
            shapes.append(dict(kind="allgather", n=n, count=9, dtype="int64", op=None, root=0))
    # other heaps: the tuner prices the communicator's own slot and window sizes
    for config in ({"slot_words": 4, "window_words": 8}, {"fifo_slots": 3, "slot_words": 2}, {"window_words": 32}):
        for n in ((3, 8) if quick else (2, 3, 5, 8)):
            for kind in ("allreduce", "allgather", "broadcast"):
                for count in ((16,) if quick else (4, 16, 37)):
                    shapes.append(dict(kind=kind, n=n, count=count, dtype="int32", op="sum" if kind == "allreduce"
                                       else None, root=0, config=config))
    return shapes


def _inputs(n: int, count: int, dtype: str, seed: int) -> list[np.ndarray]:
    if dtype in ("int32", "uint32"):
        return [a.astype(dtype) for a in R.random_inputs(n, count, np.int32, seed)]
    rng = np.random.default_rng(seed)
    size = np.dtype(dtype).itemsize * count
    return [rng.integers(0, 256, size, dtype=np.uint8).view(dtype).copy() for _ in range(n)]


def measure(shape: dict, algo: str | None, seed: int) -> tuple[int, bool]:
    """(most tokens a rank wrote, result == numpy) of one call on a fresh communicator; algo None: the default."""
    kind, n, count, dtype, op, root = (shape[k] for k in ("kind", "n", "count", "dtype", "op", "root"))
    comms = qccl.Communicator.init_all(n, config=shape.get("config"))
    ins = _inputs(n, count, dtype, seed)
    size = count * n if kind == "allgather" else count
    outs = [np.zeros(size, dtype) for _ in range(n)]
    before = [c.stats["tokens_written"] for c in comms]
    with qccl.group():
        for c in comms:
            if kind == "allreduce":
                c.allreduce(ins[c.rank], outs[c.rank], op, algo=algo)
            elif kind == "allgather":
                c.allgather(ins[c.rank], outs[c.rank], algo=algo)
            else:
                c.broadcast(ins[c.rank], outs[c.rank], root, algo=algo)
    tokens = max(c.stats["tokens_written"] - b for c, b in zip(comms, before))
    if kind == "allreduce":
        want = R.allreduce(ins, op)
    elif kind == "allgather":
        want = R.allgather(ins)
    else:
        want = R.broadcast(ins, root)
    ok = all(o.tobytes() == w.tobytes() for o, w in zip(outs, want))
    return tokens, ok


def check(shape: dict, seed: int) -> dict:
    row = dict(shape)
    for algo in ALGOS:
        row[algo], ok_a = measure(shape, algo, seed)
        row[f"{algo}_ok"] = ok_a
    row["auto"], row["auto_ok"] = measure(shape, None, seed)
    words = -(-count_bytes(shape) // 4)
    row["words"] = words
    config = qccl.Config.of(shape.get("config")).as_dict()
    row["predicted"] = {a: cost.estimate(shape["kind"], shape["n"], words, a, shape["root"], config,
                                         shape["op"] or "sum", shape["dtype"]).max for a in ALGOS}
    row["cheaper"] = min(row[a] for a in ALGOS)
    row["ok"] = row["ring_ok"] and row["multicast_ok"] and row["auto_ok"]
    row["auto_costlier"] = row["auto"] > row["cheaper"]
    t = choice(shape, words)
    row["auto_algo"], row["auto_chunk"], row["auto_predicted"] = t.algo, t.chunk, t.tokens
    return row


def choice(shape: dict, words: int):
    """The tuners' answer for the shape's call, asked as the communicator asks it."""
    from qccl.communicator import ALGOS as KIND_ALGOS
    from qccl.heap import Heap
    from qccl.plugins import tune
    from qccl.schedule import max_chunk
    cfg = qccl.Config.of(shape.get("config"))
    heap = Heap(shape["n"], 0, cfg.fifo_slots, cfg.slot_words, cfg.window_words, cfg.p2p_slot_words)
    algos = KIND_ALGOS[shape["kind"]]
    return tune(shape["kind"], "auto", algos, shape["n"], shape["count"], shape["dtype"], shape["op"], shape["root"],
                cfg.as_dict(), words, {a: max_chunk(heap, shape["kind"], a) for a in algos})


def count_bytes(shape: dict) -> int:
    return shape["count"] * np.dtype(shape["dtype"]).itemsize


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl_bench.tuner_check", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset of the grid (ranks 2, 3, 4, 8; counts 1, 16, 37)")
    ap.add_argument("--json", help="write every shape's figures to this file")
    a = ap.parse_args(argv)
    shapes = grid(a.quick)
    t0 = time.perf_counter()
    rows = []
    for i, shape in enumerate(shapes):
        row = check(shape, seed=i)
        rows.append(row)
        r, m = row["ring"], row["multicast"]
        close = abs(r - m) < 0.05 * max(r, m)
        if close or row["auto_costlier"] or not row["ok"]:
            flag = ("AUTO COSTLIER " if row["auto_costlier"] else "") + ("" if row["ok"] else "WRONG RESULT ")
            print(f"{flag}{shape['kind']} n={shape['n']} count={shape['count']} {shape['dtype']} op={shape['op']} "
                  f"root={shape['root']} config={shape.get('config') or {}}: ring {r}, multicast {m}, auto {row['auto']} "
                  f"(model: ring {row['predicted']['ring']}, multicast {row['predicted']['multicast']})", flush=True)
        if (i + 1) % 25 == 0:
            print(f"  {i + 1}/{len(shapes)} shapes, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    costlier = [r for r in rows if r["auto_costlier"]]
    wrong = [r for r in rows if not r["ok"]]
    below = sum(r["auto"] < r["cheaper"] for r in rows)
    exact = sum(r["auto"] == r["auto_predicted"] for r in rows)
    ring_wins = sum(r["ring"] < r["multicast"] for r in rows)
    mc_wins = sum(r["multicast"] < r["ring"] for r in rows)
    ties = len(rows) - ring_wins - mc_wins
    err = max(abs(r["predicted"][x] - r[x]) / r[x] for r in rows for x in ALGOS)
    saved = sum(r["ring"] - r["auto"] for r in rows)
    summary = {"shapes": len(rows), "auto_costlier": len(costlier), "wrong_results": len(wrong),
               "ring_cheaper": ring_wins, "multicast_cheaper": mc_wins, "equal": ties,
               "auto_not_costlier": len(rows) - len(costlier), "auto_below_both": below,
               "auto_as_predicted": exact, "model_worst_relative_error": round(err, 3),
               "tokens_saved_vs_ring": saved, "tokens_ring_total": sum(r["ring"] for r in rows),
               "seconds": round(time.perf_counter() - t0, 1)}
    print(f"\n{len(rows)} shapes: auto wrote no more than the cheaper algorithm on {summary['auto_not_costlier']} "
          f"(fewer than both, by its chunking, on {below}), more on {len(costlier)}; as the tuner predicted on "
          f"{exact}; ring cheaper on {ring_wins}, multicast on {mc_wins}, equal on {ties}; results "
          f"identical to numpy on {len(rows) - len(wrong)}. Cost model's worst error {100 * err:.0f} %. Auto wrote "
          f"{saved} fewer tokens than the ring over the grid ({summary['tokens_ring_total']} with the ring). "
          f"{summary['seconds']} s.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "rows": rows}, f, indent=1)
    return 1 if costlier or wrong or exact < len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
