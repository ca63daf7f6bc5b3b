"""qccl pieces that need no device: step orders, the heap, errors, ops, buffers, groups, plugin lookup, routing."""
from __future__ import annotations

import numpy as np
import pytest

import qccl
from qccl import steps as S
from qccl.buffers import as_buffer
from qccl.heap import MEMORY_WORDS, Heap
from qccl.schedule import RankState, Scheduler
from qccl.transport import Launch, Read, Write
from qwengpu import tokens as T
from qccl_transports.qlink import Aperture, Router


# -- step orders (NCCL's runRing) -----------------------------------------------------------------------------------
def names(steps):
    return [str(s) for s in steps]


def test_allreduce_order_matches_runring():
    assert names(S.all_reduce(0, 4)) == ["send(3)", "recvReduceSend(2)", "recvReduceSend(1)",
                                         "recvReduceCopySend(0)", "recvCopySend(3)", "recvCopySend(2)", "recv(1)"]
    assert names(S.all_reduce(1, 2)) == ["send(0)", "recvReduceCopySend(1)", "recv(0)"]


@pytest.mark.parametrize("n", range(2, 9))
def test_ring_orders_are_consistent(n):
    """Every chunk rank r sends is the chunk rank r+1 receives at the same position, and each rank ends with every
    block final exactly once (AllReduce, AllGather) or its own block (ReduceScatter)."""
    for order, finals in ((S.all_reduce, n), (S.all_gather, n), (S.reduce_scatter, 1)):
        seqs = [order(r, n) for r in range(n)]
        for r in range(n):
            sent = [s.block for s in seqs[r] if s.prim.send]
            got = [s.block for s in seqs[(r + 1) % n] if s.prim.recv]
            assert sent == got, (order.__name__, r)
            done = [s.block for s in seqs[r] if s.prim.copy]
            assert sorted(done) == (sorted(range(n)) if finals == n else [r])
    assert sum(s.prim.send for s in S.all_reduce(0, n)) == 2 * (n - 1)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_broadcast_and_reduce_prims(n):
    for root in range(n):
        b = [S.broadcast(r, n, root) for r in range(n)]
        assert b[root] is S.COPY_SEND and b[(root - 1) % n] is S.RECV
        rd = [S.reduce(r, n, root) for r in range(n)]
        assert rd[root] is S.RECV_REDUCE_COPY and rd[(root + 1) % n] is S.SEND
    assert S.broadcast(0, 1, 0) is S.LOCAL_COPY


def test_sendrecv_pipeline():
    steps = S.send_recv_pipeline(3, 3)
    assert [(s.recv, s.send) for s in steps] == [(None, 0), (0, 1), (1, 2), (2, None)]
    assert [(s.recv, s.send) for s in S.send_recv_pipeline(3, 3, pipelined=False)] == \
        [(None, 0), (None, 1), (None, 2), (0, None), (1, None), (2, None)]
    assert [(s.recv, s.send) for s in S.send_recv_pipeline(0, 2)] == [(0, None), (1, None)]
    assert [(s.recv, s.send) for s in S.send_recv_pipeline(2, 0)] == [(None, 0), (None, 1)]


# -- the symmetric heap ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", range(1, 9))
def test_heap_fits_and_is_symmetric(n):
    heaps = [Heap(n, r) for r in range(n)]
    for h in heaps:
        assert h.used <= MEMORY_WORDS
        spans = []
        for route in h.routes():
            assert 0 <= route.start < route.stop <= MEMORY_WORDS and h.rank not in route.peers
            spans.append((route.start, route.stop))
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "routes overlap"
        assert not any(a <= h.staging < b for a, b in spans), "the staging words are local"
    if n > 1:
        assert len({(h.ring.fifo, h.ring.tail, h.ring.head) for h in heaps}) == 1
        assert heaps[0].ring.send_peer == 1 and heaps[0].ring.recv_peer == n - 1
        for d, ch in heaps[0].p2p.items():
            assert ch.send_peer == d % n and ch.recv_peer == (-d) % n


def test_one_slot_heap_and_limits():
    h = Heap(4, 0, fifo_slots=1)
    assert h.ring.slots == 1 and h.ring.slot(0) == h.ring.slot(5)
    with pytest.raises(qccl.InvalidArgument):
        Heap(4, 0, fifo_slots=0)
    with pytest.raises(qccl.InvalidArgument):
        Heap(8, 0, slot_words=32, window_words=64)


# -- schedules: the host only copies words and launches ----------------------------------------------------------------
def test_schedule_is_writes_reads_and_launches():
    h = Heap(4, 1)
    st = RankState()
    x, y = as_buffer(np.arange(16, dtype=np.int32), "x"), as_buffer(np.zeros(16, np.int32), "y")
    sch = Scheduler(h, st)
    sch.allreduce(x, y, 16)
    kinds = {type(op) for op in sch.ops}
    assert kinds <= {Write, Read, Launch}
    assert st.sent["ring"] == 6 and st.received["ring"] == 6
    launches = [op for op in sch.ops if isinstance(op, Launch)]
    assert all(op.threads <= 4 for op in launches)
    # every received chunk is waited for with the counter one past the last one
    waits = [op.args[3] for op in launches if op.args[0] & 1 and not op.args[0] & 2048]
    assert waits == list(range(1, 7))


# -- errors, ops, dtypes, buffers --------------------------------------------------------------------------------------
def test_error_classes_and_codes():
    assert issubclass(qccl.InvalidArgument, qccl.QcclError) and issubclass(qccl.InvalidUsage, qccl.QcclError)
    assert qccl.InvalidArgument("x").result == 4 and qccl.InvalidUsage("x").result == 5
    assert "invalid argument" in str(qccl.InvalidArgument("bad root"))
    assert qccl.get_error_string(5) == "invalid usage"


def test_ops():
    assert (qccl.SUM, qccl.PROD, qccl.MAX, qccl.MIN, qccl.AVG) == (0, 1, 2, 3, 4)
    from qccl.types import red_op
    assert red_op("avg") is qccl.AVG and red_op(2) is qccl.MAX and red_op(qccl.MIN) is qccl.MIN
    for bad in ("mean!", 7, None, 1.5):
        with pytest.raises(qccl.InvalidArgument):
            red_op(bad)


def test_buffers_numpy_and_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(6, dtype=np.uint32).reshape(2, 3)
    b = as_buffer(a, "a")
    assert b.count == 6 and str(b.dtype) == "uint32" and b.words.dtype == np.int32
    t = torch.arange(5, dtype=torch.int32)
    bt = as_buffer(t, "t")
    bt.words[:] = 7
    assert t.tolist() == [7] * 5, "a tensor's buffer is its memory, not a copy"
    assert str(as_buffer(torch.zeros(3, dtype=torch.bfloat16), "h").dtype) == "bfloat16"
    with pytest.raises(qccl.InvalidArgument, match="contiguous"):
        as_buffer(np.arange(10, dtype=np.int32)[::2], "strided")
    with pytest.raises(qccl.InvalidArgument):
        as_buffer([1, 2, 3], "list")


def test_group_end_without_start():
    with pytest.raises(qccl.InvalidUsage, match="group_end without group_start"):
        qccl.group_end()
    qccl.group_start()
    qccl.group_start()
    qccl.group_end()
    qccl.group_end()          # nested groups: only the outermost runs


def test_unknown_transport_names_the_registered_ones():
    with pytest.raises(qccl.InvalidArgument, match="qlink"):
        qccl.Communicator.init_all(2, transport="nvlink9")
    assert "qlink" in qccl.transports()


def test_unique_id():
    a, b = qccl.get_unique_id(), qccl.get_unique_id()
    assert a != b and qccl.UniqueId.parse(str(a)) == a
    assert qccl.UniqueId.parse("abc@127.0.0.1:99").address == "127.0.0.1:99"


# -- apertures and the router: header tokens only ---------------------------------------------------------------------
def test_router_routes_by_header_token():
    r = Router([Aperture(0, 16, (1,), name="ring.fifo"), Aperture(17, 18, (3,), name="ring.head"),
                Aperture(40, 60, (1, 2, 3), multicast=True, name="multicast")])
    assert r.route_header(T.MEM(5)).peers == (1,)
    assert r.route_header(T.MEM(17)).name == "ring.head"
    assert r.route_header(T.MEM(16)) is None and r.route(126) is None and r.route(127) is None
    assert r.route_header(T.MEM(45)).multicast
    with pytest.raises(ValueError):
        r.route_header(T.VAL(5))             # a payload token is never routed
    with pytest.raises(ValueError, match="overlaps"):
        r.add(Aperture(10, 20, (2,)))
    with pytest.raises(ValueError):
        Aperture(120, 128, (1,))              # the sink is never in an aperture
    with pytest.raises(ValueError):
        Aperture(0, 4, (1, 2))                # unicast has one peer
    assert "multicast aperture multicast [40, 60) -> ranks 1,2,3" in str(r)


# -- multicast steps and the board ---------------------------------------------------------------------------------
def test_multicast_algorithms_read_as_steps():
    assert names(S.all_gather_multicast(2, 4)) == ["mcStore(2)", "mcPostWait", "mcRead"]
    assert names(S.broadcast_multicast(1, 3, 1)) == ["mcStore(1)", "mcPost", "mcRead"]
    assert names(S.broadcast_multicast(0, 3, 1)) == ["mcPostWaitRoot", "mcRead"]
    assert names(S.all_reduce_multicast(0, 3)) == names(S.reduce_scatter(0, 3)) + ["mcPostWait", "mcRead"]


def test_board_matches_kth_calls_and_pairs():
    from qccl.board import Board
    from qccl.calls import Call, Sig
    b = Board(2)
    ar = Sig("allreduce", 4, "int32", "sum", algo="ring")
    released, err = b.submit({0: [Call(ar, 0)]}, {0})
    assert released == {} and err is None and len(b.held(0)) == 1
    released, err = b.submit({1: [Call(Sig("send", 3, "int32", root=0), 1), Call(ar, 1)]}, {1})
    assert err is None and 0 in released and 1 not in released, "rank 1's allreduce waits behind its send"
    released, err = b.submit({0: [Call(Sig("recv", 2, "int32", root=1), 0)]}, {0})
    assert isinstance(err, qccl.InvalidUsage) and "rank 1 sends 3 x int32 to rank 0" in str(err)
    assert not b.held(1), "the send the recv conflicted with is withdrawn"
    assert [c.sig for seg in released[1] for c in seg] == [ar], "rank 1's allreduce, no longer behind, is released"
