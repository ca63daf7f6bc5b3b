"""Issue 12's silent wrong results, each now an InvalidUsage on every rank before any data moves, naming both calls in
full, with every rank usable afterwards (the next correct call matches numpy). One check serves every mode: ranks
driven by one thread (grouped, ungrouped, split over groups), one thread per rank, and one process per rank."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import qccl
from qccl_bench import reference as R

ROOT = Path(__file__).resolve().parents[1]


def inputs(n, count, seed):
    return R.random_inputs(n, count, np.int32, seed)


def allreduce_all(comms, x, op="sum"):
    y = [np.full(len(x[0]), -5, np.int32) for _ in comms]
    with qccl.group():
        for c in comms:
            c.allreduce(x[c.rank], y[c.rank], op)
    return y


def test_ungrouped_count_mismatch_is_refused_and_the_next_call_is_right():
    comms = qccl.Communicator.init_all(4)
    x = inputs(4, 16, 1)
    y = [np.full(16, -5, np.int32) for _ in range(4)]
    # algo: the default (auto) chose multicast for both counts on 4 ranks
    with pytest.raises(qccl.InvalidUsage, match=r"allreduce\(count=16, dtype=int32, op=sum, algo=multicast\) on "
                                                r"rank 0 but allreduce\(count=8, dtype=int32, op=sum, "
                                                r"algo=multicast\) on rank 1"):
        for c in comms:
            k = 8 if c.rank == 1 else 16
            c.allreduce(x[c.rank][:k], y[c.rank][:k])
    assert all((v == -5).all() for v in y), "no data moved"
    assert comms[0].get_async_error() == qccl.Result.INVALID_USAGE, "rank 0's withdrawn call reports the error"
    assert "rank 1" in comms[0].get_last_error()
    assert comms[2].get_async_error() == qccl.Result.SUCCESS, "rank 2 had posted nothing"
    for c in comms:                                     # ungrouped again, now matching
        c.allreduce(x[c.rank], y[c.rank])
    want = R.reduce_arrays(x, "sum")
    assert all(np.array_equal(v, want) for v in y)


def test_op_mismatch_names_both_ops_and_changes_nothing():
    comms = qccl.Communicator.init_all(2)
    x = inputs(2, 5, 2)
    y = [np.zeros(5, np.int32) for _ in range(2)]
    with pytest.raises(qccl.InvalidUsage, match=r"op=sum.* on rank 0 but allreduce\(count=5, dtype=int32, op=max"):
        with qccl.group():
            comms[0].allreduce(x[0], y[0], "sum")
            comms[1].allreduce(x[1], y[1], qccl.MAX)
    assert not any(v.any() for v in y) and comms[0].stats["launches"] == 0
    assert np.array_equal(allreduce_all(comms, x, "max")[1], R.reduce_arrays(x, "max"))


def test_threads_op_mismatch_raises_on_every_rank_then_works():
    uid = qccl.get_unique_id()
    x = inputs(2, 6, 3)
    got, errors = [None, None], [None, None]

    def worker(r):
        comm = qccl.Communicator.init(2, r, uid, config={"thread_timeout": 20})
        y = np.zeros(6, np.int32)
        try:
            comm.allreduce(x[r], y, "sum" if r == 0 else "max")
        except qccl.QcclError as e:
            errors[r] = e
        comm.allreduce(x[r], y, "min")
        got[r] = y
        comm.destroy()

    ts = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    for e in errors:
        assert isinstance(e, qccl.InvalidUsage) and "op=sum" in str(e) and "op=max" in str(e), e
    assert all(np.array_equal(g, R.reduce_arrays(x, "min")) for g in got)


def test_calls_split_over_groups_match_call_by_call():
    comms = qccl.Communicator.init_all(2)
    x = inputs(2, 7, 4)
    y = [np.zeros(7, np.int32) for _ in range(2)]
    b = [np.zeros(7, np.int32) for _ in range(2)]
    with qccl.group():                                   # rank 0: both calls in one group
        comms[0].allreduce(x[0], y[0])
        comms[0].broadcast(x[0], b[0], root=0)
    comms[1].allreduce(x[1], y[1])                       # rank 1: one group each
    comms[1].broadcast(None, b[1], root=0)
    assert all(np.array_equal(v, R.reduce_arrays(x, "sum")) for v in y)
    assert all(np.array_equal(v, x[0]) for v in b)
    with qccl.group():
        comms[0].allreduce(x[0], y[0])
        comms[0].broadcast(x[0], b[0], root=0)
    comms[1].allreduce(x[1], y[1])
    with pytest.raises(qccl.InvalidUsage, match=r"collective call 3 on this communicator is broadcast\(count=7, "
                                                r"dtype=int32, root=0, algo=multicast\) on rank 0 but allgather"):
        comms[1].allgather(x[1][:1], np.zeros(2, np.int32))


def test_three_ranks_allreduce_and_the_fourth_broadcasts():
    comms = qccl.Communicator.init_all(4)
    x = inputs(4, 16, 5)
    y = [np.full(16, -5, np.int32) for _ in range(4)]
    with qccl.group():
        for c in comms[:3]:
            c.allreduce(x[c.rank], y[c.rank])
    with pytest.raises(qccl.InvalidUsage, match=r"is allreduce\(count=16.* on rank 0 but broadcast\(count=16, "
                                                r"dtype=int32, root=0, algo=multicast\) on rank 3"):
        comms[3].broadcast(x[3], y[3], root=0)
    assert all((v == -5).all() for v in y)
    assert [c.get_async_error() for c in comms] == [qccl.Result.INVALID_USAGE] * 3 + [qccl.Result.SUCCESS]
    out = allreduce_all(comms, x)
    assert all(np.array_equal(v, R.reduce_arrays(x, "sum")) for v in out), "every rank usable"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_send_without_a_matching_recv_is_an_error_at_any_size(n):
    comms = qccl.Communicator.init_all(n)
    x = np.arange(4, dtype=np.int32)
    with pytest.raises(qccl.InvalidUsage, match=r"rank 0 sends 4 x int32 to rank 1 .*rank 1 posts no matching "
                                                r"recv in the same group"):
        with qccl.group():
            comms[0].send(x, 1)
            comms[1].send(x, 0)
    y = np.zeros(4, np.int32)
    with qccl.group():                                   # nothing was recorded: the right pair now works
        comms[0].send(x, 1)
        comms[1].recv(y, 0)
    assert np.array_equal(y, x)


def test_thread_timeout_names_the_rank_behind_and_each_rank_s_call():
    uid = qccl.get_unique_id()
    errors, go = {}, threading.Event()
    x = inputs(3, 2, 6)
    out = [np.zeros(2, np.int32) for _ in range(3)]

    def worker(r):
        comm = qccl.Communicator.init(3, r, uid, config={"thread_timeout": 0.5})
        if r == 2:
            go.wait(30)
        try:
            comm.allreduce(x[r], out[r])
        except qccl.QcclError as e:
            errors[r] = e

    ts = [threading.Thread(target=worker, args=(r,)) for r in range(3)]
    for t in ts[:2]:
        t.start()
    ts[2].start()
    for t in ts[:2]:
        t.join(30)
    go.set()
    ts[2].join(30)
    assert set(errors) == {0, 1}
    for r in (0, 1):
        msg = str(errors[r])
        assert isinstance(errors[r], qccl.DeadlockError) and "rank 2 is behind" in msg, msg
        assert f"rank {r} waited 0.5 s" in msg and "rank 2 posted 0 calls and has posted no call" in msg, msg
    # rank 2's late call completes the held ones: every buffer gets the sum
    assert all(np.array_equal(o, R.reduce_arrays(x, "sum")) for o in out)


SCRIPT = """
import json, sys, numpy as np, qccl
import os
n, rank = int(sys.argv[2]), int(os.environ["RANK"])
comm = qccl.Communicator.init(n, rank, qccl.get_unique_id())
x = np.arange(8, dtype=np.int32) * (rank + 1)
y = np.zeros(8, np.int32)
report = {}
try:
    comm.allreduce(x, y, "max" if rank == 1 else "sum")
except qccl.QcclError as e:
    report["error"] = [type(e).__name__, str(e)]
report["untouched"] = not y.any()
comm.allreduce(x, y, "sum")
report["sum"] = y.tolist()
comm.destroy()
json.dump(report, open(sys.argv[1] + "." + str(rank), "w"))
"""


def test_processes_mismatch_raises_on_every_rank(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "mismatch.py"
    script.write_text(SCRIPT)
    out, n = tmp_path / "rep", 2
    import os
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "qccl.launch", "-n", str(n), "--timeout", "120", str(script), str(out),
                        str(n), "RANK"], cwd=ROOT, capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    want = (np.arange(8) * sum(range(1, n + 1))).tolist()
    for rank in range(n):
        rep = json.loads(Path(f"{out}.{rank}").read_text())
        assert rep["error"][0] == "InvalidUsage" and "op=sum" in rep["error"][1] and "op=max" in rep["error"][1]
        assert rep["untouched"] and rep["sum"] == want
