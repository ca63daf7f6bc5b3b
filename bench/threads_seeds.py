"""The threads transport against the lockstep one over many seeded timings:
``python -m qccl_bench.threads_seeds [--seeds 200] [--kinds allreduce,...] [--collective-tests]``.

Each seed draws a shape (2..5 ranks, 1..24 elements, op, dtype, root or peer, algorithm, in or out of place) and a
timing (the threads world's seed: packet delays and rank speeds); the collective runs on the asynchronous threads
transport and on lockstep QLink, and the outputs must be identical (and equal numpy's). Exit status 1 on any
difference. ``--collective-tests`` also runs tests/test_qccl_collectives.py with "threads" as the default transport
(all but the test that bounds lockstep token counts).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import qccl
from qccl_bench import harness as H
from qccl_bench import reference as R


def shape(kind: str, seed: int) -> dict:
    rng = np.random.default_rng(10_000 + seed)
    n = int(rng.integers(2, 6))
    s = dict(n=n, count=int(rng.integers(1, 25)), op=str(rng.choice(R.OPS)),
             dtype=np.uint32 if rng.random() < 0.3 else np.int32, root=int(rng.integers(0, n)),
             peer=int(rng.integers(1, n)), algo="ring", in_place=False)
    if kind in ("allreduce", "allgather", "broadcast") and rng.random() < 0.4:
        s["algo"] = "multicast"
    if kind != "sendrecv":
        s["in_place"] = bool(rng.random() < 0.3)
    return s


def one(kind: str, seed: int) -> tuple[bool, str]:
    s = shape(kind, seed)
    args = dict(op=s["op"], root=s["root"], dtype=s["dtype"], in_place=s["in_place"], algo=s["algo"], seed=seed,
                peer=s["peer"])
    comms = qccl.Communicator.init_all(s["n"], transport="threads", config={"transport_options": {"seed": seed}})
    try:
        got = H.run(s["n"], kind, s["count"], comms=comms, **args)
    finally:
        for c in comms:
            c.destroy()
    ref = H.run(s["n"], kind, s["count"], **args)
    same = all(np.array_equal(a, b) for a, b in zip(got.outs, ref.outs))
    what = (f"{kind} seed {seed}: n={s['n']} count={s['count']} op={s['op']} dtype={np.dtype(s['dtype'])} "
            f"root={s['root']} peer={s['peer']} algo={s['algo'] or 'ring'} in_place={s['in_place']} tokens "
            f"{got.tokens} (lockstep {ref.tokens})")
    return same and got.ok and ref.ok, what


class _DefaultThreads:
    """A pytest plugin: Communicator.init_all defaults to the threads transport."""

    def pytest_configure(self, config):
        orig = qccl.Communicator.init_all.__func__

        def init_all(cls, n, transport="threads", config=None):
            return orig(cls, n, transport, config)
        qccl.Communicator.init_all = classmethod(init_all)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl_bench.threads_seeds", description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(H.KINDS))
    ap.add_argument("--collective-tests", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    bad = 0
    t0 = time.monotonic()
    for kind in a.kinds.split(","):
        fails = 0
        for seed in range(a.first, a.first + a.seeds):
            ok, what = one(kind, seed)
            if not ok:
                fails += 1
                print("DIFFERS " + what, flush=True)
            elif a.verbose:
                print("same    " + what, flush=True)
        bad += fails
        print(f"{kind:15s} {a.seeds} seeds: {a.seeds - fails} identical to lockstep, {fails} differ "
              f"({time.monotonic() - t0:.0f} s)", flush=True)
    status = 1 if bad else 0
    if a.collective_tests:
        import pytest
        # test_demo_table_beats_the_seeds bounds the tokens a rank writes in lockstep; asynchronous ranks write more
        # spin records while they wait (715 against the seed's 664 on a 4-rank AllReduce), which is timing, not a
        # result, so it is left out here
        rc = pytest.main(["-q", "-p", "no:cacheprovider", "tests/test_qccl_collectives.py", "-k",
                          "not demo_table_beats_the_seeds"], plugins=[_DefaultThreads()])
        print(f"tests/test_qccl_collectives.py on the threads transport: exit {int(rc)}")
        status = status or int(rc)
    return status


if __name__ == "__main__":
    sys.exit(main())
