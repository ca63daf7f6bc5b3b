"""Errors in NCCL's classes; a refused call changes nothing; lifecycle (destroy, abort); stats."""
from __future__ import annotations

import numpy as np
import pytest

import qccl
from qccl_bench.harness import run


@pytest.fixture
def comms():
    return qccl.Communicator.init_all(4)


def snapshot(comms):
    return [(c.state.clone().__dict__, c.stats) for c in comms]


def test_init_arguments():
    with pytest.raises(qccl.InvalidArgument, match="number of ranks"):
        qccl.Communicator.init_all(9)
    with pytest.raises(qccl.InvalidArgument, match="number of ranks"):
        qccl.Communicator.init_all(0)
    with pytest.raises(qccl.InvalidArgument, match=r"invalid rank 4 \(rank should be in the 0..3 range\)"):
        qccl.Communicator.init(4, 4, qccl.get_unique_id())


def read_only(a):
    v = a.view()
    v.flags.writeable = False
    return v


BAD_CALLS = [
    ("root out of range", lambda c, x, y: c.broadcast(x, y, root=4), qccl.InvalidArgument,
     r"invalid root 4 \(root should be in the 0..3 range\)"),
    ("negative root", lambda c, x, y: c.reduce(x, y, "sum", root=-1), qccl.InvalidArgument, "invalid root -1"),
    ("peer out of range", lambda c, x, y: c.send(x, 7), qccl.InvalidArgument, "invalid peer 7"),
    ("bad op", lambda c, x, y: c.allreduce(x, y, "xor"), qccl.InvalidArgument, "invalid reduction op"),
    ("size mismatch", lambda c, x, y: c.allreduce(x, y[:5]), qccl.InvalidArgument, "16 elements, recvbuf 5"),
    ("allgather size", lambda c, x, y: c.allgather(x, y), qccl.InvalidArgument, "nranks x sendcount"),
    ("reduce_scatter size", lambda c, x, y: c.reduce_scatter(x, y), qccl.InvalidArgument, "nranks x recvcount"),
    ("dtype mismatch", lambda c, x, y: c.allreduce(x, y.view(np.uint32)), qccl.InvalidArgument, "differ"),
    ("float64", lambda c, x, y: c.allreduce(x.astype(np.float64), y.astype(np.float64)), qccl.InvalidArgument,
     r"dtype float64 is not supported by transport qlink for reductions \(supported: int32, uint32, float32"),
    ("float prod", lambda c, x, y: c.allreduce(x.astype(np.float32), y.astype(np.float32), "prod"),
     qccl.InvalidArgument, "op prod on float32: the QLink transport reduces floats .* with sum, max, min only"),
    ("int64 reduce", lambda c, x, y: c.reduce(x.astype(np.int64), y.astype(np.int64), root=0), qccl.InvalidArgument,
     "reduce: dtype int64 is not supported .*supported: int32, uint32"),
    ("partial overlap", lambda c, x, y: c.allreduce(x[:8], x[4:12]), qccl.InvalidArgument, "overlap"),
    ("not an array", lambda c, x, y: c.allreduce([1, 2], y), qccl.InvalidArgument, "numpy array or a torch tensor"),
    ("unknown algo", lambda c, x, y: c.allgather(x[:4], y, algo="tree"), qccl.InvalidArgument, "unknown algorithm"),
    ("negative peer", lambda c, x, y: c.recv(y, -1), qccl.InvalidArgument, r"invalid peer -1 \(peer should be"),
    ("root not an integer", lambda c, x, y: c.broadcast(x, y, root=1.0), qccl.InvalidArgument, "invalid root 1.0"),
    ("broadcast size", lambda c, x, y: c.broadcast(x, y[:3], root=0), qccl.InvalidArgument, "16 elements, recvbuf 3"),
    ("reduce size at the root", lambda c, x, y: c.reduce(x, y[:3], "sum", root=0), qccl.InvalidArgument,
     "reduce: sendbuf has 16 elements, recvbuf 3"),
    ("reduce_scatter dtype", lambda c, x, y: c.reduce_scatter(x, y[:4].view(np.uint32)), qccl.InvalidArgument,
     "send dtype int32 and recv dtype uint32 differ"),
    ("int16 reduce_scatter", lambda c, x, y: c.reduce_scatter(x.astype(np.int16), y[:4].astype(np.int16)),
     qccl.InvalidArgument, r"reduce_scatter: dtype int16 is not supported by transport qlink for reductions"),
    ("bool allreduce", lambda c, x, y: c.allreduce(x.astype(bool), y.astype(bool)), qccl.InvalidArgument,
     "dtype bool is not supported.*the copy collectives move any dtype"),
    ("alltoall size", lambda c, x, y: c.alltoall(x[:6], y[:6]), qccl.InvalidArgument, "nranks x count"),
    ("gather size at the root", lambda c, x, y: c.gather(x[:4], y[:8], root=0), qccl.InvalidArgument,
     "nranks x sendcount"),
    ("scatter root", lambda c, x, y: c.scatter(x, y[:4], root=np.int64(5)), qccl.InvalidArgument,
     r"invalid root 5 \(root should be in the 0..3 range\)"),
    ("stream", lambda c, x, y: c.allreduce(x, y, stream=object()), qccl.InvalidArgument,
     "is not supported \\(valid: None or 0"),
    ("read-only recvbuf", lambda c, x, y: c.allreduce(x, read_only(y)), qccl.InvalidArgument, "read-only"),
    ("read-only recv", lambda c, x, y: c.recv(read_only(y), 2), qccl.InvalidArgument,
     "recv buf: the buffer is read-only"),
]


@pytest.mark.parametrize("what,call,cls,match", BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_refused_calls_change_nothing(comms, what, call, cls, match):
    x, y = np.arange(16, dtype=np.int32), np.zeros(16, np.int32)
    before = snapshot(comms)
    with pytest.raises(cls, match=match) as e:
        call(comms[0], x, y)
    assert isinstance(e.value, qccl.QcclError) and e.value.result in (4, 5)
    assert snapshot(comms) == before and not y.any()
    assert run(4, "allreduce", 16, comms=comms, seed=1), "the communicator still works after a refused call"


@pytest.mark.parametrize("kind", ["allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "send", "recv",
                                  "synchronize", "stats"])
def test_every_call_on_a_destroyed_communicator_is_a_usage_error(kind):
    comms = qccl.Communicator.init_all(2)
    comms[1].destroy()
    x, y = np.zeros(2, np.int32), np.zeros(4, np.int32)
    call = {"allreduce": lambda c: c.allreduce(x, x), "reduce": lambda c: c.reduce(x, x, root=0),
            "broadcast": lambda c: c.broadcast(x, x, root=1), "allgather": lambda c: c.allgather(x, y),
            "reduce_scatter": lambda c: c.reduce_scatter(y, x), "send": lambda c: c.send(x, 0),
            "recv": lambda c: c.recv(x, 0), "synchronize": lambda c: c.synchronize(), "stats": lambda c: c.stats}[kind]
    with pytest.raises(qccl.InvalidUsage, match=f"{kind} on a destroyed communicator \\(rank 1\\)"):
        call(comms[1])


def test_numpy_integers_name_roots_and_peers(comms):
    x = [np.full(3, r + 1, np.int32) for r in range(4)]
    with qccl.group():
        for c in comms:
            c.bcast(x[c.rank], root=np.int64(2))
    assert all(v.tolist() == [3] * 3 for v in x)


def test_float64_tensor_is_refused_naming_supported(comms):
    torch = pytest.importorskip("torch")
    t = torch.zeros(8, dtype=torch.float64)         # QLink reduces int32, uint32, float32, bfloat16, float16
    with pytest.raises(qccl.InvalidArgument, match="float64 is not supported.*int32, uint32, float32, bfloat16"):
        comms[0].allreduce(t, t)


def test_refused_call_inside_a_group_is_not_recorded(comms):
    x = [np.full(4, r + 1, np.int32) for r in range(4)]
    y = [np.zeros(4, np.int32) for _ in range(4)]
    with qccl.group():
        for c in comms:
            with pytest.raises(qccl.InvalidArgument):
                c.broadcast(x[c.rank], y[c.rank], root=9)
            c.allreduce(x[c.rank], y[c.rank])
    assert all(v.tolist() == [10] * 4 for v in y)


def test_mismatched_group_calls_are_usage_errors(comms):
    x, y = np.arange(4, dtype=np.int32), np.zeros(4, np.int32)
    before = snapshot(comms)
    with pytest.raises(qccl.InvalidUsage, match=r"mismatched calls: collective call 0 on this communicator is "
                       r"allreduce\(count=4, dtype=int32, op=sum, algo=multicast\) on rank 0 but "
                       r"allgather\(count=1, dtype=int32, algo=multicast\) on rank 2"):
        with qccl.group():
            for c in comms:
                if c.rank == 2:
                    c.allgather(x[:1], y)
                else:
                    c.allreduce(x, y)
    with pytest.raises(qccl.InvalidUsage,
                       match=r"rank 0 sends 4 x int32 to rank 1 .*, but rank 1 receives 3 x int32 from rank 0"):
        with qccl.group():
            comms[0].send(x, 1)
            comms[1].recv(y[:3], 0)
    with pytest.raises(qccl.InvalidUsage,
                       match=r"rank 3 sends 4 x int32 to itself and receives nothing from itself .*needs its recv in the same"):
        comms[3].send(x, 3)
    assert snapshot(comms) == before


def test_send_to_self_in_a_group_is_a_device_copy(comms):
    x, y = np.arange(9, dtype=np.int32), np.zeros(9, np.int32)
    with qccl.group():
        comms[1].send(x, 1)
        comms[1].recv(y, 1)
    assert np.array_equal(x, y) and comms[1].stats["launches"] > 0
    with pytest.raises(qccl.InvalidUsage, match="rank 1 sends 9 x int32 to itself and receives nothing from itself"):
        with qccl.group():                           # a collective between them: the device copy could not pair them
            comms[1].send(x, 1)
            for c in comms:
                c.allreduce(x, np.zeros(9, np.int32))
            comms[1].recv(y, 1)


def test_count_zero_is_a_no_op(comms):
    e = np.zeros(0, np.int32)
    before = [c.stats["tokens_written"] for c in comms]
    with qccl.group():
        for c in comms:
            c.allreduce(e, e)
            c.broadcast(e, e, root=3)
    assert [c.stats["tokens_written"] for c in comms] == before


def test_one_rank_copies_on_the_device():
    (c,) = qccl.Communicator.init_all(1)
    x, y = np.arange(10, dtype=np.int32), np.zeros(10, np.int32)
    c.allreduce(x, y, "avg")
    assert np.array_equal(x, y)
    assert c.stats["launches"] >= 1 and c.stats["tokens_written"] > 0, "the copy is a kernel, not numpy"


def test_destroy_and_abort():
    comms = qccl.Communicator.init_all(2)
    comms[0].destroy()
    comms[0].destroy()                                  # idempotent
    with pytest.raises(qccl.InvalidUsage, match="destroyed communicator"):
        comms[0].allreduce(np.zeros(2, np.int32), np.zeros(2, np.int32))
    with pytest.raises(qccl.InvalidUsage):
        comms[0].stats
    comms = qccl.Communicator.init_all(2)
    x, y = np.arange(20, dtype=np.int32), np.zeros(20, np.int32)
    comms[0].send(x, 1)                                 # ungrouped: held until rank 1's recv, which never comes
    assert not comms[0].world.pending(0), "nothing moves before the matching recv is posted"
    with pytest.raises(qccl.InvalidUsage, match=r"send\(count=20, dtype=int32, peer=1\) waits for other ranks' "
                                                r"calls.*rank 1 posted 0 calls"):
        comms[0].synchronize()
    comms[0].abort()
    with pytest.raises(qccl.InvalidUsage, match="aborted communicator"):
        comms[0].send(x, 1)
    assert not comms[0].world.pending(0)
    with pytest.raises(qccl.RemoteError, match="rank 0 of this communicator was aborted"):
        comms[1].recv(y, 0)


def test_ungrouped_calls_complete_when_the_last_rank_calls():
    comms = qccl.Communicator.init_all(3)
    x = [np.full(5, r, np.int32) for r in range(3)]
    y = [np.zeros(5, np.int32) for _ in range(3)]
    for c in comms:
        c.allreduce(x[c.rank], y[c.rank])
    assert all(v.tolist() == [3] * 5 for v in y)


def test_threads_one_rank_each():
    import threading
    uid = qccl.get_unique_id()
    out = [None] * 3

    def worker(r):
        comm = qccl.Communicator.init(3, r, uid)
        y = np.zeros(4, np.int32)
        comm.allreduce(np.full(4, r + 1, np.int32), y, "prod")
        out[r] = y.tolist()

    ts = [threading.Thread(target=worker, args=(r,)) for r in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert out == [[6] * 4] * 3


def test_stats_per_rank():
    o = run(4, "allreduce", 16, seed=2)
    for c in o.comms:
        s = c.stats
        assert set(s) >= {"tokens_written", "launches", "records", "packets_sent", "packets_received"}
        assert s["packets_sent"] == s["packets_received"] > 0
    assert len(set(o.tokens)) == 1, "the ring AllReduce is symmetric: every rank writes the same number of tokens"


def test_calls_after_a_peer_aborted_raise_instead_of_hanging():
    comms = qccl.Communicator.init_all(3)
    comms[1].abort()
    x = [np.arange(4, dtype=np.int32) for _ in range(3)]
    with pytest.raises(qccl.RemoteError, match="rank 1 of this communicator was aborted"):
        with qccl.group():
            comms[0].allreduce(x[0], x[0].copy())
            comms[2].allreduce(x[2], x[2].copy())


def test_arguments_that_do_not_fit_a_call_are_invalid_argument_not_type_error():
    """Python's TypeError for an unknown keyword or a missing buffer would be the one foreign error class of the API:
    each is InvalidArgument naming the call's parameters, recorded as the last error, and the next call runs."""
    comms = qccl.Communicator.init_all(2)
    x, y = np.arange(4, dtype=np.int32), np.zeros(4, np.int32)
    with pytest.raises(qccl.InvalidArgument, match=r"allreduce: got an unexpected keyword argument 'root' \(its "
                                                   r"parameters: sendbuf, recvbuf, op, stream, algo\)"):
        comms[0].allreduce(x, y, root=1)
    assert "unexpected keyword argument 'root'" in comms[0].get_last_error()
    with pytest.raises(qccl.InvalidArgument, match="broadcast: missing a required argument: 'recvbuf'"):
        comms[0].broadcast(x)
    with pytest.raises(qccl.InvalidArgument, match="init_all: missing a required argument: 'n'"):
        qccl.Communicator.init_all(nrank=2)
    assert not y.any()
    with qccl.group():
        for c in comms:
            c.allreduce(x, y if c.rank == 0 else np.zeros(4, np.int32))
    assert np.array_equal(y, 2 * x)
