"""The exhaustive check, nccl-tests style: every collective x ranks x op x dtype x count x root x in/out of place x
algorithm, bit for bit against numpy. ``python -m bench.sweep [--ranks 1-8] [--counts 0,1,3,16,37,100,1000]``.

Prints one line per failure and a summary; exits non-zero on any difference. The full default sweep takes a while
(counts of 1000 on 8 ranks are the long ones); the test suite runs a chosen slice of it.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from bench.harness import run

OPS = ("sum", "prod", "max", "min", "avg")
REDUCING = ("allreduce", "reduce_scatter", "reduce")
ALGOS = {"allreduce": (None, "multicast"), "allgather": (None, "multicast"), "broadcast": (None, "multicast")}
IN_PLACE = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce")


def ranks_arg(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def cases(ranks, counts, kinds):
    for n, kind, count in itertools.product(ranks, kinds, counts):
        ops = OPS if kind in REDUCING else ("sum",)
        roots = range(n) if kind in ("broadcast", "reduce") else (0,)
        places = (False, True) if kind in IN_PLACE else (False,)
        for op, dtype, root, in_place, algo in itertools.product(ops, (np.int32, np.uint32), roots, places,
                                                                 ALGOS.get(kind, (None,))):
            yield n, kind, count, op, dtype, root, in_place, algo


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1-8", type=ranks_arg)
    ap.add_argument("--counts", default="0,1,3,16,37,100,1000", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--kinds", default="allreduce,reduce_scatter,allgather,broadcast,reduce,sendrecv",
                    type=lambda s: s.split(","))
    a = ap.parse_args(argv)
    done = bad = 0
    t0 = time.time()
    for n, kind, count, op, dtype, root, in_place, algo in cases(a.ranks, a.counts, a.kinds):
        o = run(n, kind, count, op, root=root, dtype=dtype, in_place=in_place, algo=algo, seed=done)
        done += 1
        if not o.ok:
            bad += 1
            print(f"DIFFERS: {kind} n={n} count={count} op={op} {np.dtype(dtype).name} root={root} "
                  f"{'in' if in_place else 'out of'} place algo={algo or 'ring'}", flush=True)
        if done % 200 == 0:
            print(f"... {done} cases, {bad} differ, {time.time() - t0:.0f} s", flush=True)
    print(f"{done} cases, {done - bad} identical to numpy, {bad} differ ({time.time() - t0:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
