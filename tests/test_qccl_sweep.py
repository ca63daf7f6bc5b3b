"""A covering slice of bench/sweep.py's cross product, in one process, bit for bit against numpy.

Issue 3 asks for every collective x ranks 1..8 x op x int32/uint32 x counts 0, 1, 3, 16, 37, 100, 1000 x every root x
in place and out of place. The whole product (about 11,000 cases) is ``python -m qccl_bench.sweep``; here each op x dtype x
place x algorithm of each collective runs at three (ranks, count) points, and every root (SendRecv: every peer) of
every rank count runs once per algorithm. test_the_slice_covers_every_point checks that claim; count 1000 runs once
per collective in tests/test_qccl_collectives.py (test_count_1000, test_allreduce_counts, test_broadcast_sizes).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from qccl_bench.harness import KINDS
from qccl_bench.sweep import ALGOS, DTYPES, IN_PLACE, OPS, REDUCING, ROOTED, SMALL_COUNTS, slice_cases

CASES = slice_cases()


def case_id(c) -> str:
    return (f"{c.kind}-n{c.n}-c{c.count}-{c.op}-{np.dtype(c.dtype).name}-r{c.root}"
            f"-{'in' if c.in_place else 'out'}-{c.algo or 'ring'}")


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_case(index):
    c = CASES[index]
    o = c.run(seed=1000 + index)
    assert o.ok, f"{c}: got {[x.tolist()[:8] for x in o.outs]}, numpy {[e.tolist()[:8] for e in o.expected]}"


def test_the_slice_covers_every_point():
    for kind in KINDS:
        mine = [c for c in CASES if c.kind == kind]
        assert {c.n for c in mine} == set(range(1, 9)), kind
        assert {c.count for c in mine} == set(SMALL_COUNTS), kind
        ops = OPS if kind in REDUCING else ("sum",)
        places = (False, True) if kind in IN_PLACE else (False,)
        for op, dtype, in_place, algo in itertools.product(ops, DTYPES, places, ALGOS.get(kind, (None,))):
            points = {(c.n, c.count) for c in mine
                      if (c.op, c.dtype, c.in_place, c.algo) == (op, dtype, in_place, algo)}
            assert len(points) >= 3 if kind not in ROOTED else len(points) >= 2, (kind, op, dtype, in_place, algo)
        if kind in ROOTED:
            for algo in ALGOS.get(kind, (None,)):
                roots = {(c.n, c.root) for c in mine if c.algo == algo}
                assert roots == {(n, r) for n in range(1, 9) for r in range(n)}, (kind, algo)
