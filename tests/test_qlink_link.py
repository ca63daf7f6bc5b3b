"""QLink on devices: apertures and the sink, multicast, loads stay local, atomics refused, packets at record
boundaries, lockstep and burst determinism, and the deadlock detector (one-slot FIFO, naive send-before-recv)."""
from __future__ import annotations

import numpy as np
import pytest

import qccl
from qccl_bench.harness import run
from qwengpu import Device, MachineError
from qwengpu import tokens as T
from qccl_transports.qlink import Aperture, InMemoryFabric, Lockstep, Router

STORE = r'''extern "C" __global__ void put(const int *x, int *y) { y[threadIdx.x] = x[threadIdx.x] + 1; }'''
COPY = r'''extern "C" __global__ void get(const int *y, int *z) { z[threadIdx.x] = y[threadIdx.x]; }'''
ATOMIC = r'''extern "C" __global__ void bump(int *y) { atomicAdd(y, 1); }'''


def device(apertures=()):
    d = Device(backend="interpreter")
    d.router = Router(apertures)
    return d


def run_all(dev):
    records = []
    while dev.busy:
        records.append(dev.step())
    return records


def test_a_store_into_an_aperture_leaves_and_the_sink_is_fed():
    dev = device([Aperture(40, 44, (1,), name="peer")])
    dev.write(0, np.array([10, 20, 30, 40], np.int32))
    dev.write(40, np.array([7, 7, 7, 7], np.int32))
    dev.start(dev.load_kernel(STORE, "put"), 4, [0, 40])
    run_all(dev)
    packets = dev.take_packets()
    assert [T.argument(p.tokens[0]) for p in packets] == [40, 41, 42, 43]
    assert [T.argument(p.tokens[1]) for p in packets] == [11, 21, 31, 41]
    assert all(str(p.aperture) == "aperture peer [40, 44) -> rank 1" for p in packets)
    routed = [t for t in dev.tokens if t.written is not None]
    assert [t.id for t in routed] == [T.MEM(127)] * 4
    assert [t.written for t in routed] == [T.MEM(a) for a in range(40, 44)]
    assert dev.read(40, 4).tolist() == [7, 7, 7, 7], "local memory is untouched"


def test_multicast_keeps_the_local_write():
    dev = device([Aperture(40, 44, (1, 2, 3), multicast=True)])
    dev.write(0, np.array([1, 2, 3, 4], np.int32))
    dev.start(dev.load_kernel(STORE, "put"), 4, [0, 40])
    run_all(dev)
    assert len(dev.take_packets()) == 4
    assert dev.read(40, 4).tolist() == [2, 3, 4, 5]


def test_loads_are_never_routed():
    dev = device([Aperture(40, 44, (1,))])
    dev.write(40, np.array([5, 6, 7, 8], np.int32))
    dev.start(dev.load_kernel(COPY, "get"), 4, [40, 60])
    run_all(dev)
    assert dev.take_packets() == [] and dev.read(60, 4).tolist() == [5, 6, 7, 8]


def test_atomics_into_an_aperture_are_refused():
    dev = device([Aperture(40, 44, (1,), name="ring.fifo")])
    dev.start(dev.load_kernel(ATOMIC, "bump"), 1, [41])
    with pytest.raises(MachineError, match=r"bump.*41.*ring\.fifo"):
        run_all(dev)


def test_packets_enter_at_record_boundaries_over_a_fabric(tmp_path):
    """Two devices: a store into rank 1's aperture on rank 0 is written into rank 1's memory by the packet."""
    devs = {0: device([Aperture(40, 44, (1,))]), 1: device()}
    eng = Lockstep(InMemoryFabric(2), devs)
    devs[0].write(0, np.array([1, 2, 3, 4], np.int32))
    from qccl.transport import Kernel, Launch
    src = tmp_path / "put.cu"
    src.write_text(STORE)
    eng.submit(0, [Launch(Kernel(src, "put"), 4, (0, 40))])
    eng.run()
    assert devs[1].read(40, 4).tolist() == [2, 3, 4, 5]
    fed = [t for t in devs[1].tokens if t.origin == "peer"]
    assert [T.kind(t.id) for t in fed] == ["MEM", "VAL", "VAL"] * 4
    assert eng.packets_sent[0] == eng.packets_received[1] == 4


def tokens_of(comms):
    return [[t.id for t in c.world.devices[c.rank].tokens] for c in comms]


def test_lockstep_is_deterministic_and_burst_gives_the_same_results():
    a = run(4, "allreduce", 37, "max", seed=5)
    b = run(4, "allreduce", 37, "max", seed=5)
    assert a and b and tokens_of(a.comms) == tokens_of(b.comms)
    burst = run(4, "allreduce", 37, "max", seed=5, config={"burst": 8})
    assert burst, "burst mode gives numpy's result"
    assert [np.array_equal(x, y) for x, y in zip(a.outs, burst.outs)] == [True] * 4
    ex_a = a.comms[0].stats["exchanges"]
    ex_b = burst.comms[0].stats["exchanges"]
    assert ex_b < ex_a / 3, (ex_a, ex_b)
    burst2 = run(4, "allreduce", 37, "max", seed=5, config={"burst": 8})
    assert tokens_of(burst.comms) == tokens_of(burst2.comms)


# -- the deadlock detector --------------------------------------------------------------------------------------------
def test_one_slot_fifo_deadlocks_the_ring():
    comms = qccl.Communicator.init_all(4, config={"fifo_slots": 1})
    x = [np.arange(16, dtype=np.int32) for _ in range(4)]
    y = [np.zeros(16, np.int32) for _ in range(4)]
    with pytest.raises(qccl.DeadlockError) as e:
        with qccl.group():
            for c in comms:
                c.allreduce(x[c.rank], y[c.rank])
    text = str(e.value)
    for r in range(4):
        assert f"rank {r}: kernel prim spins on address" in text
    waits = e.value.waits
    assert set(waits) == {0, 1, 2, 3}
    head = comms[0].heap.ring.head
    assert all(w.kernel == "prim" and w.address == head and w.flag == "ring.head" and w.value < w.expected
               for w in waits.values()), waits


def test_the_shipped_two_slot_fifo_does_not_deadlock():
    assert run(4, "allreduce", 100, seed=1)


def test_naive_send_before_recv_deadlocks_two_slots():
    n, count = 4, 24               # three chunks each way: the third send needs a slot nobody frees
    comms = qccl.Communicator.init_all(n, config={"p2p_pipeline": False})
    x = [np.arange(count, dtype=np.int32) + r for r in range(n)]
    y = [np.zeros(count, np.int32) for _ in range(n)]
    with pytest.raises(qccl.DeadlockError, match=r"p2p1\.head.*waits for >= 1") as e:
        with qccl.group():
            for c in comms:
                c.send(x[c.rank], (c.rank + 1) % n)
                c.recv(y[c.rank], (c.rank - 1) % n)
    assert len(e.value.waits) == n
    # the shipped, software-pipelined order moves the same messages
    assert run(n, "sendrecv", count, seed=3)


def test_naive_order_with_two_chunks_fits_the_fifo():
    comms = qccl.Communicator.init_all(2, config={"p2p_pipeline": False})
    x = [np.arange(16, dtype=np.int32) + r for r in range(2)]
    y = [np.zeros(16, np.int32) for _ in range(2)]
    with qccl.group():
        for c in comms:
            c.send(x[c.rank], 1 - c.rank)
            c.recv(y[c.rank], 1 - c.rank)
    assert np.array_equal(y[0], x[1]) and np.array_equal(y[1], x[0])
