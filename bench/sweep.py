"""The exhaustive check, nccl-tests style: every collective x ranks x op x dtype x count x root x in/out of place x
algorithm, bit for bit against numpy. ``python -m qccl_bench.sweep [--ranks 1-8] [--counts 0,1,3,16,37,100,1000]
[--kinds ...] [--jobs J] [--shard I/K]``.

Every root of Broadcast and Reduce, and every peer of the grouped SendRecv (a ring shift by 0..n-1; 0 sends to self).
Cases run cheapest first (by count, then ranks), each on fresh communicators with its own seed, so any slice
(``--shard``) or any number of worker processes (``--jobs``) gives the same verdicts. Prints one line per failure,
progress, and a summary; exits non-zero on any difference. The full default sweep (about 11,000 cases) takes hours
on one core: counts of 1000 on 8 ranks are the long ones. The test suite runs chosen slices of it
(tests/test_qccl_sweep.py). ``--processes``: one process per rank (qccl.launch, gloo) for each rank count, with
qccl_bench.dist_check's wide cases.
"""
from __future__ import annotations

import argparse
import itertools
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from qccl_bench.harness import KINDS, run

OPS = ("sum", "prod", "max", "min", "avg")
DTYPES = (np.int32, np.uint32)
REDUCING = ("allreduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce", "sendrecv")         # sendrecv: the root is the peer distance
ALGOS = {"allreduce": ("ring", "multicast"), "allgather": ("ring", "multicast"), "broadcast": ("ring", "multicast")}
IN_PLACE = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce")


@dataclass(frozen=True)
class Case:
    n: int
    kind: str
    count: int
    op: str = "sum"
    dtype: type = np.int32
    root: int = 0
    in_place: bool = False
    algo: str | None = None

    def __str__(self) -> str:
        where = "peer" if self.kind == "sendrecv" else "root"
        return (f"{self.kind} n={self.n} count={self.count} op={self.op} {np.dtype(self.dtype).name} "
                f"{where}={self.root} {'in' if self.in_place else 'out of'} place algo={self.algo or 'ring'}")

    def run(self, seed: int = 0, **kw):
        peer = self.root if self.kind == "sendrecv" else 1
        root = 0 if self.kind == "sendrecv" else self.root
        return run(self.n, self.kind, self.count, self.op, root=root, dtype=self.dtype, in_place=self.in_place,
                   algo=self.algo, seed=seed, peer=peer, **kw)


def cases(ranks, counts, kinds=KINDS) -> list[Case]:
    """The cross product, cheapest first."""
    out = []
    for count, n, kind in itertools.product(sorted(counts), sorted(ranks), kinds):
        ops = OPS if kind in REDUCING else ("sum",)
        roots = range(n) if kind in ROOTED else (0,)
        places = (False, True) if kind in IN_PLACE else (False,)
        for op, dtype, root, in_place, algo in itertools.product(ops, DTYPES, roots, places,
                                                                 ALGOS.get(kind, (None,))):
            out.append(Case(n, kind, count, op, dtype, root, in_place, algo))
    return out


SMALL_COUNTS = (0, 1, 3, 16, 37, 100)


def _cost(kind: str, n: int, count: int) -> int:
    """Words each rank moves, roughly what a case costs to simulate."""
    return count * n * (n if kind in ("reduce_scatter", "allgather") else 1)


def slice_cases(kinds=KINDS, ranks=range(1, 9), counts=SMALL_COUNTS, per_combo: int = 3,
                budget: int = 800) -> list[Case]:
    """A covering slice of the cross product, for the test suite: every op x dtype x in/out of place x algorithm of
    each collective at ``per_combo`` different (ranks, count) points, and every root (SendRecv: every peer) of every
    rank count for each algorithm, with ops, dtypes and counts rotating. A case over ``budget`` (see _cost) takes the
    next smaller count (a count pushed out everywhere runs once more on 2 ranks). Count 1000 is left to the tests that run it once per collective."""
    ranks, counts = list(ranks), sorted(counts)
    out = []

    def fit(kind, n, count):
        while _cost(kind, n, count) > budget:
            count = counts[counts.index(count) - 1]
        return count

    for kind in kinds:
        ops = OPS if kind in REDUCING else ("sum",)
        places = (False, True) if kind in IN_PLACE else (False,)
        if kind in ROOTED:
            for algo in ALGOS.get(kind, (None,)):
                combos = list(itertools.product(ops, DTYPES, places))
                points = [(n, root) for n in ranks for root in range(n)]
                for i in range(max(len(points), per_combo * len(combos))):
                    (op, dtype, in_place), (n, root) = combos[i % len(combos)], points[i % len(points)]
                    count = fit(kind, n, counts[i % len(counts)])
                    out.append(Case(n, kind, count, op, dtype, root, in_place, algo))
        else:
            combos = list(itertools.product(ops, DTYPES, places, ALGOS.get(kind, (None,))))
            for c, (op, dtype, in_place, algo) in enumerate(combos):
                for j in range(per_combo):
                    n = ranks[(c + 3 * j) % len(ranks)]
                    count = fit(kind, n, counts[(c + 2 * j) % len(counts)])
                    out.append(Case(n, kind, count, op, dtype, 0, in_place, algo))
            seen = {c.count for c in out if c.kind == kind}
            for i, count in enumerate(c for c in counts if c not in seen):    # counts the budget pushed out
                op, dtype, in_place, algo = combos[i % len(combos)]
                out.append(Case(2, kind, count, op, dtype, 0, in_place, algo))
    return out


def ranks_arg(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def shard_arg(text: str) -> tuple[int, int]:
    i, k = (int(x) for x in text.split("/"))
    if not 0 <= i < k:
        raise argparse.ArgumentTypeError(f"--shard {text}: I/K with 0 <= I < K")
    return i, k


def _check(item):
    index, case = item
    o = case.run(seed=index)
    return index, case, o.ok, max(o.tokens, default=0)


def processes(ranks) -> int:
    import subprocess
    t0, bad = time.time(), []
    for n in ranks:
        r = subprocess.run([sys.executable, "-m", "qccl.launch", "-n", str(n), "--timeout", "1200", "-m",
                            "qccl_bench.dist_check", "--cases", "wide+big", "--burst", str(min(n, 8))],
                           capture_output=True, text=True)
        found = re.findall(r"rank (\d+): (\d+)/(\d+) cases identical", r.stdout)
        good = sum(a == b for _, a, b in found)
        print(f"{n} processes: exit {r.returncode}; {good} of {n} ranks had all "
              f"{found[0][2] if found else '?'} cases identical to numpy and gloo", flush=True)
        if r.returncode:
            bad.append(n)
            print(r.stdout + r.stderr, flush=True)
    print(f"across processes: {len(ranks) - len(bad)} of {len(ranks)} rank counts identical to numpy (and gloo) "
          f"on every rank ({time.time() - t0:.0f} s)")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl_bench.sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1-8", type=ranks_arg)
    ap.add_argument("--counts", default="0,1,3,16,37,100,1000", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--kinds", default=",".join(KINDS), type=lambda s: s.split(","))
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--shard", type=shard_arg, default=(0, 1), help="run every K-th case from the I-th (I/K)")
    ap.add_argument("--processes", action="store_true",
                    help="instead: one process per rank over gloo (python -m qccl.launch), for each rank count, "
                         "qccl_bench.dist_check's wide cases and a 1000-word AllReduce")
    a = ap.parse_args(argv)
    if a.processes:
        return processes(a.ranks)
    unknown = set(a.kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds {sorted(unknown)} (kinds: {', '.join(KINDS)})")
    i, k = a.shard
    todo = [(index, c) for index, c in enumerate(cases(a.ranks, a.counts, a.kinds)) if index % k == i]
    total, t0 = len(todo), time.time()
    done, bad = 0, Counter()
    per_kind = Counter()
    print(f"{total} cases: ranks {a.ranks}, counts {a.counts}, kinds {', '.join(a.kinds)}", flush=True)
    if a.jobs > 1:
        import multiprocessing
        pool = multiprocessing.get_context("fork").Pool(a.jobs)
        results = pool.imap_unordered(_check, todo)
    else:
        pool, results = None, map(_check, todo)
    stopped = False
    try:
        for index, case, ok, _ in results:
            done += 1
            per_kind[case.kind] += 1
            if not ok:
                bad[case.kind] += 1
                print(f"DIFFERS: case {index}: {case}", flush=True)
            if done % 200 == 0:
                print(f"... {done}/{total} cases (last: count {case.count}), {sum(bad.values())} differ, "
                      f"{time.time() - t0:.0f} s", flush=True)
    except KeyboardInterrupt:
        stopped = True                  # Ctrl-C: the summary of what ran
    finally:
        if pool is not None:
            pool.terminate()
    nbad = sum(bad.values())
    kinds = ", ".join(f"{kind} {per_kind[kind] - bad[kind]}/{per_kind[kind]}" for kind in a.kinds if per_kind[kind])
    print(f"{done} cases{f' of {total} (stopped)' if stopped else ''}, {done - nbad} identical to numpy, {nbad} "
          f"differ ({time.time() - t0:.0f} s): {kinds}")
    return 1 if nbad or stopped else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
