"""The six collectives on QLink in one process, bit for bit against numpy.

Chosen so that together they cover ranks 1..8, every op, int32 and uint32, counts 0, 1, 3, 16, 37, 100 and 1000,
every root, in place and out of place, ring and multicast, while the suite stays short. The exhaustive cross product
is bench/sweep.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from qccl_bench.harness import run

OPS = ["sum", "prod", "max", "min", "avg"]
DTYPES = [np.int32, np.uint32]


def check(outcome, what):
    assert outcome.ok, f"{what}: got {[o.tolist()[:8] for o in outcome.outs]}, " \
                       f"numpy {[e.tolist()[:8] for e in outcome.expected]}"


@pytest.mark.parametrize("n", range(1, 9))
def test_allreduce_every_size(n):
    check(run(n, "allreduce", 37, "sum", seed=n, in_place=n % 2 == 0), f"allreduce n={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["int32", "uint32"])
@pytest.mark.parametrize("op", OPS)
def test_allreduce_ops(op, dtype):
    check(run(3, "allreduce", 16, op, dtype=dtype, seed=OPS.index(op)), f"allreduce {op} {dtype.__name__}")


@pytest.mark.parametrize("count", [0, 1, 3, 16, 37, 100, 1000])
def test_allreduce_counts(count):
    n = 2 if count == 1000 else 4
    check(run(n, "allreduce", count, "sum", seed=count, in_place=count == 100), f"allreduce count={count}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["int32", "uint32"])
@pytest.mark.parametrize("op", OPS)
def test_reduce_scatter_ops(op, dtype):
    check(run(4, "reduce_scatter", 3, op, dtype=dtype, seed=7, in_place=op == "max"), f"reduce_scatter {op}")


@pytest.mark.parametrize("n,count,in_place", [(2, 100, False), (5, 16, True), (8, 1, False)])
def test_reduce_scatter_sizes(n, count, in_place):
    check(run(n, "reduce_scatter", count, "sum", seed=n, in_place=in_place), f"reduce_scatter n={n}")


@pytest.mark.parametrize("algo", ["ring", "multicast"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_allgather(n, algo):
    check(run(n, "allgather", 3, seed=n, algo=algo, in_place=n == 3), f"allgather {algo} n={n}")


@pytest.mark.parametrize("algo", ["ring", "multicast"])
def test_allgather_large(algo):
    check(run(3, "allgather", 37, seed=3, algo=algo, dtype=np.uint32), f"allgather {algo} 3x37")


@pytest.mark.parametrize("algo", ["ring", "multicast"])
@pytest.mark.parametrize("root", range(4))
def test_broadcast_every_root(root, algo):
    check(run(4, "broadcast", 16, root=root, seed=root, algo=algo, in_place=root == 2), f"broadcast {algo} {root}")


@pytest.mark.parametrize("algo", ["ring", "multicast"])
@pytest.mark.parametrize("n,count,root", [(8, 37, 5), (3, 100, 1), (2, 1000, 0), (5, 0, 4)])
def test_broadcast_sizes(n, count, root, algo):
    check(run(n, "broadcast", count, root=root, seed=count, algo=algo), f"broadcast {algo} n={n} count={count}")


@pytest.mark.parametrize("root", range(4))
def test_reduce_every_root(root):
    op = OPS[root]
    check(run(4, "reduce", 16, op, root=root, seed=root, in_place=root == 1, dtype=DTYPES[root % 2]),
          f"reduce root={root} {op}")


@pytest.mark.parametrize("n,root,op", [(8, 7, "avg"), (3, 0, "prod"), (1, 0, "sum")])
def test_reduce_sizes(n, root, op):
    check(run(n, "reduce", 37, op, root=root, seed=n), f"reduce n={n}")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_sendrecv_ring_shift(n):
    check(run(n, "sendrecv", 37 if n < 8 else 16, seed=n, dtype=DTYPES[n % 2]), f"sendrecv n={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["int32", "uint32"])
def test_allreduce_multicast(dtype):
    for n, count in ((4, 16), (3, 37), (8, 100)):
        check(run(n, "allreduce", count, "avg" if n == 3 else "max", dtype=dtype, algo="multicast", seed=n),
              f"allreduce multicast n={n}")


def test_torch_tensors():
    pytest.importorskip("torch")
    check(run(4, "allreduce", 16, "sum", seed=1, torch_tensors=True), "allreduce on torch tensors")
    check(run(3, "allgather", 5, seed=2, torch_tensors=True), "allgather on torch tensors")


def test_integer_sum_wraps_like_a_gpu():
    import qccl
    comms = qccl.Communicator.init_all(2)
    big = [np.array([2**31 - 1, -2**31, 7], np.int32), np.array([1, -1, 2**31 - 1], np.int32)]
    out = [np.zeros(3, np.int32) for _ in range(2)]
    with qccl.group():
        for c in comms:
            c.allreduce(big[c.rank], out[c.rank], qccl.SUM)
    assert out[0].tolist() == [-2**31, 2**31 - 1, -2**31 + 6] and out[1].tolist() == out[0].tolist()


def test_sequence_of_collectives_reuses_channels():
    """Counters persist across calls: many calls of mixed kinds on the same communicators stay correct."""
    import qccl
    comms = qccl.Communicator.init_all(3)
    for i, kind in enumerate(["allreduce", "broadcast", "allgather", "reduce_scatter", "reduce", "sendrecv",
                              "allgather", "broadcast", "allreduce"]):
        algo = "multicast" if kind in ("allgather", "broadcast") and i > 5 else None
        check(run(3, kind, 5, "sum", root=i % 3, seed=i, comms=comms, algo=algo), f"call {i} {kind}")


def test_grouped_point_to_point_any_pairs():
    """All-to-all in one group: every distance, a send to self, several messages to one peer."""
    import qccl
    n = 4
    comms = qccl.Communicator.init_all(n)
    rng = np.random.default_rng(3)
    data = {(s, d): rng.integers(-99, 99, 3 + s + d).astype(np.int32) for s in range(n) for d in range(n)}
    got = {(s, d): np.zeros_like(v) for (s, d), v in data.items()}
    extra = {r: rng.integers(0, 9, 11).astype(np.int32) for r in range(n)}
    extra_got = {r: np.zeros(11, np.int32) for r in range(n)}
    with qccl.group():
        for c in comms:
            r = c.rank
            for d in range(n):
                c.send(data[(r, d)], d)
                c.recv(got[(d, r)], d)
            c.send(extra[r], (r + 2) % n)
            c.recv(extra_got[r], (r - 2) % n)
    for k in data:
        assert np.array_equal(got[k], data[k]), k
    for r in range(n):
        assert np.array_equal(extra_got[r], extra[(r - 2) % n])


@pytest.mark.parametrize("kind,algo,op", [("reduce_scatter", None, "min"), ("allgather", "multicast", None),
                                          ("reduce", None, "prod"), ("sendrecv", None, None),
                                          ("allreduce", "multicast", "avg")])
def test_count_1000(kind, algo, op):
    """A thousand words per rank goes through 127-word devices as a loop of chunks."""
    check(run(2, kind, 1000, op or "sum", root=1, algo=algo, seed=11, dtype=np.uint32 if op == "min" else np.int32),
          f"{kind} 1000")


def test_demo_table_beats_the_seeds_allreduce(tmp_path):
    """make demo's table (--json): every row identical to numpy; AllReduce of 16 words writes at most the seed's 664
    tokens per rank on 4 ranks and 1,480 on 8."""
    import json
    from qccl_bench import demo
    path = tmp_path / "demo.json"
    assert demo.main(["--json", str(path)]) == 0
    rows = json.loads(path.read_text())
    assert all(r["vs_numpy"] == "identical" for n in rows.values() for r in n)
    ring = {n: {r["kind"]: r for r in rows[n] if r["algo"] == "ring"} for n in rows}
    assert set(ring["4_ranks"]) == {"allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "sendrecv"}
    assert all(r["seed"] for r in ring["4_ranks"].values()), "the seed's figure beside each of the six"
    assert ring["4_ranks"]["allreduce"]["tokens_max"] <= 664
    assert ring["8_ranks"]["allreduce"]["tokens_max"] <= 1480
    for n in rows:          # the default (auto) rows write what the cheaper of the two algorithms writes
        by = {(r["kind"], r["algo"]): r for r in rows[n]}
        for kind in ("allreduce", "allgather", "broadcast"):
            auto = by[(kind, "auto")]
            assert auto["tokens_max"] == min(by[(kind, a)]["tokens_max"] for a in ("ring", "multicast"))
            assert auto["tokens"] == by[(kind, auto["ran"])]["tokens"]
