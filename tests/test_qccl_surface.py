"""The communicator's surface (issue 11 section 2): version, properties, errors, NCCL's numbering, the config object,
any dtype through the copy collectives (held against numpy), alltoall / gather / scatter / barrier, split and
shrink, and the argument errors of issue 12 (each a qccl error naming the value and the valid ones)."""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import qccl
from qccl_bench import reference as R


def test_version_properties_and_error_strings():
    assert qccl.get_version() == 100 and qccl.__version__ == "0.1.0"
    comms = qccl.Communicator.init_all(3)
    assert [(c.rank, c.nranks, c.size) for c in comms] == [(r, 3, 3) for r in range(3)]
    assert comms[1].device is comms[1].world.devices[1] and comms[0].device is not comms[1].device
    strings = {r: qccl.get_error_string(r) for r in qccl.Result}
    assert len(set(strings.values())) == len(strings) and qccl.get_error_string(99) == "unknown result code"
    assert comms[0].get_last_error() == "" and comms[0].get_async_error() == qccl.Result.SUCCESS
    with pytest.raises(qccl.InvalidArgument):
        comms[0].broadcast(np.zeros(2, np.int32), np.zeros(2, np.int32), root=7)
    assert "invalid root 7" in comms[0].get_last_error()


def test_nccl_numbering_for_ops_and_types():
    assert qccl.red_op(1) is qccl.PROD and qccl.red_op(np.int32(3)) is qccl.MIN
    assert qccl.data_type(7) is qccl.DataType.FLOAT32 and qccl.data_type("half") is qccl.DataType.FLOAT16
    assert qccl.data_type(np.int64) is qccl.DataType.INT64 and qccl.data_type(np.dtype(bool)) == "bool"
    with pytest.raises(qccl.InvalidArgument, match="invalid data type number 12"):
        qccl.data_type(12)
    comms = qccl.Communicator.init_all(2)
    x = R.random_inputs(2, 5, np.int32, 7)
    y = [np.zeros(5, np.int32) for _ in range(2)]
    with qccl.group():
        for c in comms:
            c.allreduce(x[c.rank], y[c.rank], 2)           # NCCL's ncclMax
    assert np.array_equal(y[0], R.reduce_arrays(x, "max"))


def test_config_object_and_init_arguments():
    cfg = qccl.Config(burst=2)
    assert qccl.Communicator.init_all(2, config=cfg)[0].config.burst == 2
    with pytest.raises(qccl.InvalidArgument,
                       match=r"unknown config key 'bursts' \(valid keys: algo, .*burst, .*window_words\)"):
        qccl.Communicator.init_all(2, config={"bursts": 2})
    with pytest.raises(qccl.InvalidArgument, match="config burst=0: expected an integer >= 1"):
        qccl.Communicator.init_all(2, config={"burst": 0})
    with pytest.raises(qccl.InvalidArgument, match="unknown backend 'nope'.*'interpreter'"):
        qccl.Communicator.init_all(2, config={"backend": "nope"})
    with pytest.raises(qccl.InvalidArgument, match="invalid rank True"):
        qccl.Communicator.init(4, True, qccl.get_unique_id())
    with pytest.raises(qccl.InvalidArgument, match=r"invalid rank 5 \(rank should be in the 0..1 range\)"):
        qccl.Communicator.init(2, np.int64(5), qccl.get_unique_id())
    (one,) = [qccl.Communicator.init(np.int64(1), np.int64(0), qccl.get_unique_id())]
    assert one.rank == 0 and type(one.rank) is int
    with pytest.raises(qccl.InvalidArgument, match=r"stream=1 is not supported \(valid: None or 0"):
        one.allreduce(np.zeros(1, np.int32), np.zeros(1, np.int32), stream=1)


def words_of(a):
    return np.frombuffer(a.tobytes(), np.uint8)


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.bool_, np.int8, np.float16],
                         ids=["int64", "float32", "bool", "int8", "float16"])
def test_copy_collectives_move_any_dtype(dtype):
    n, count = 3, 5                                      # 5 one- or two-byte elements: padded blocks
    comms = qccl.Communicator.init_all(n)
    rng = np.random.default_rng(11)
    x = [rng.integers(0, 2 if dtype is np.bool_ else 100, count * n).astype(dtype) for _ in range(n)]
    b = [np.zeros(count, dtype) for _ in range(n)]
    g = [np.zeros(count * n, dtype) for _ in range(n)]
    a = [np.zeros(count * n, dtype) for _ in range(n)]
    p = [np.zeros(count, dtype) for _ in range(n)]
    with qccl.group():
        for c in comms:
            c.broadcast(x[c.rank][:count], b[c.rank], root=1)
            c.allgather(x[c.rank][:count], g[c.rank])
            c.alltoall(x[c.rank], a[c.rank])
            c.send(x[c.rank][:count], (c.rank + 1) % n)
            c.recv(p[c.rank], (c.rank - 1) % n)
    for r in range(n):
        assert np.array_equal(words_of(b[r]), words_of(x[1][:count]))
        assert np.array_equal(words_of(g[r]), words_of(np.concatenate([x[q][:count] for q in range(n)])))
        assert np.array_equal(words_of(a[r]), words_of(np.concatenate([x[q][r * count:(r + 1) * count]
                                                                      for q in range(n)])))
        assert np.array_equal(words_of(p[r]), words_of(x[(r - 1) % n][:count]))


def test_bfloat16_tensors_travel_and_refused_reductions_leave_the_communicator_usable():
    torch = pytest.importorskip("torch")
    comms = qccl.Communicator.init_all(2)
    t = [torch.randn(7).to(torch.bfloat16) for _ in range(2)]
    out = [torch.zeros(14, dtype=torch.bfloat16) for _ in range(2)]
    with pytest.raises(qccl.InvalidArgument, match=r"op prod on bfloat16: the QLink transport reduces floats "
                                                   r"\(float32, bfloat16, float16\) with sum, max, min only"):
        comms[0].allreduce(t[0], t[0].clone(), "prod")      # bfloat16 reduces (sum, max, min), prod is refused
    with qccl.group():
        for c in comms:
            c.allgather(t[c.rank], out[c.rank])
    assert all(torch.equal(o, torch.cat(t)) for o in out)


def test_alltoall_gather_scatter_barrier_against_numpy():
    n, k = 3, 4
    comms = qccl.Communicator.init_all(n)
    x = R.random_inputs(n, n * k, np.int32, 12)
    a = [np.zeros(n * k, np.int32) for _ in range(n)]
    g = np.zeros(n * k, np.int32)
    s = [np.zeros(k, np.int32) for _ in range(n)]
    with qccl.group():
        for c in comms:
            c.alltoall(x[c.rank], a[c.rank])
            c.gather(x[c.rank][:k], g if c.rank == 2 else None, root=2)
            c.scatter(x[c.rank] if c.rank == 0 else None, s[c.rank], root=0)
            c.barrier()
    for r in range(n):
        assert np.array_equal(a[r], np.concatenate([x[q][r * k:(r + 1) * k] for q in range(n)]))
        assert np.array_equal(s[r], x[0][r * k:(r + 1) * k])
    assert np.array_equal(g, np.concatenate([x[q][:k] for q in range(n)]))
    before = [c.stats["launches"] for c in comms]
    for c in comms:
        c.barrier()
    assert all(c.stats["launches"] > b for c, b in zip(comms, before)), "a barrier runs on the devices"


def test_split_and_shrink():
    comms = qccl.Communicator.init_all(4)
    subs = [c.split(c.rank % 2, key=-c.rank) for c in comms]
    assert [(s.rank, s.nranks) for s in subs] == [(1, 2), (1, 2), (0, 2), (0, 2)], "ranked by key"
    x = R.random_inputs(4, 3, np.int32, 13)
    y = [np.zeros(3, np.int32) for _ in range(4)]
    with qccl.group():
        for r, s in enumerate(subs):
            s.allreduce(x[r], y[r])
    assert np.array_equal(y[0], R.reduce_arrays([x[0], x[2]], "sum"))
    assert np.array_equal(y[3], R.reduce_arrays([x[1], x[3]], "sum"))
    first = comms[0].split(0)
    with pytest.raises(qccl.InvalidUsage, match="not ready: split waits for ranks 1, 2, 3"):
        first.rank
    assert comms[1].split(qccl.SPLIT_NOCOLOR) is None
    comms[2].split(0), comms[3].split(0)
    assert first.nranks == 3
    with pytest.raises(qccl.InvalidArgument, match="split: invalid color -2"):
        comms[0].split(-2)
    small = [c.shrink([1]) for c in comms if c.rank != 1]
    assert [(s.rank, s.nranks) for s in small] == [(0, 3), (1, 3), (2, 3)]
    y = [np.zeros(3, np.int32) for _ in range(3)]
    with qccl.group():
        for i, s in enumerate(small):
            s.allreduce(x[[0, 2, 3][i]], y[i], "max")
    assert np.array_equal(y[1], R.reduce_arrays([x[0], x[2], x[3]], "max"))


def test_split_in_threads():
    uid = qccl.get_unique_id()
    got = {}

    def worker(r):
        comm = qccl.Communicator.init(4, r, uid)
        sub = comm.split(r // 2, r)
        y = np.zeros(2, np.int32)
        sub.allreduce(np.full(2, r + 1, np.int32), y)
        got[r] = (sub.rank, sub.nranks, y.tolist())

    ts = [threading.Thread(target=worker, args=(r,)) for r in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert got == {0: (0, 2, [3, 3]), 1: (1, 2, [3, 3]), 2: (0, 2, [7, 7]), 3: (1, 2, [7, 7])}


def test_a_destroyed_rank_is_named_not_idle_and_boards_are_freed():
    comms = qccl.Communicator.init_all(3)
    comms[1].destroy()
    with pytest.raises(qccl.InvalidUsage, match=r"rank 1 of this communicator was destroyed: allreduce\(count=2"):
        comms[0].allreduce(np.zeros(2, np.int32), np.zeros(2, np.int32))
    world = weakref.ref(comms[0].world)
    board = weakref.ref(comms[0]._board)
    for c in comms:
        c.destroy()
    del comms, c
    gc.collect()
    assert world() is None and board() is None, "a destroyed communicator's world and board are freed"


def test_readme_api_section_and_docstrings_match_the_code():
    """Every public call of qccl.Communicator is in qccl/README.md's API table, and has a docstring with an example."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "qccl" / "README.md").read_text()
    api = text[text.index("<!-- api:"):text.index("## Checking it")]
    public = [n for n in vars(qccl.Communicator) if not n.startswith("_")]
    assert {"split", "shrink", "alltoall", "gather", "scatter", "barrier", "get_last_error"} <= set(public)
    for name in public:
        assert re.search(rf"`(Communicator\.)?{name}\b", api), f"{name} is missing from qccl/README.md's API table"
        doc = getattr(qccl.Communicator, name).__doc__ or ""
        assert ">>>" in doc or "``" in doc, f"Communicator.{name}: no example in its docstring"
    for name in ("get_version", "get_error_string", "red_op", "data_type", "group"):
        assert name in api and ">>>" in (getattr(qccl, name).__doc__ or ""), name
