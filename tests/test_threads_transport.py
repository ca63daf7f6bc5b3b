"""The asynchronous threads transport: every rank a thread, packets late by seeded random delays, ranks at random
speeds. Its results must equal the lockstep transport's and numpy's (a few seeds here; qccl_bench.threads_seeds runs
200 per collective), and a hang is reported naming each rank's flag."""
from __future__ import annotations

import numpy as np
import pytest

import qccl
from qccl_bench.harness import run

KINDS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "sendrecv")


def _threads(n, seed, fifo_slots=2, **options):
    """n ranks on the threads transport; ``options`` are its own keys (delay_us, timeout), seed the timing."""
    return qccl.Communicator.init_all(n, transport="threads", config={
        "fifo_slots": fifo_slots, "transport_options": {"seed": seed, **options}})


def test_found_through_its_entry_point():
    # pluggy registers an entry point's plugin under the entry point's name
    assert dict(qccl.plugin_manager().list_name_plugin())["threads"].__name__ == "qccl_transports.threads.plugin"
    assert qccl.get_transport("threads").dtypes == ("int32", "uint32", "float32", "bfloat16", "float16")


@pytest.mark.parametrize("kind", KINDS)
def test_results_equal_lockstep(kind):
    for seed, (n, count, op, algo, in_place) in enumerate([(2, 5, "sum", None, False), (3, 17, "max", "multicast", True),
                                                           (4, 9, "avg", None, False)]):
        if kind == "sendrecv":
            in_place = False
        if kind not in ("allreduce", "allgather", "broadcast"):
            algo = None
        comms = _threads(n, seed)
        got = run(n, kind, count, op, root=seed % n, seed=seed, algo=algo, in_place=in_place, comms=comms,
                  dtype=np.uint32 if seed == 1 else np.int32, peer=1 + seed % (n - 1))
        ref = run(n, kind, count, op, root=seed % n, seed=seed, algo=algo, in_place=in_place,
                  dtype=np.uint32 if seed == 1 else np.int32, peer=1 + seed % (n - 1))
        assert got.ok and ref.ok, (kind, seed)
        assert all(np.array_equal(a, b) for a, b in zip(got.outs, ref.outs))
        assert all(t > 0 for t in got.tokens), "the numbers came out of the devices"
        for c in comms:
            c.destroy()


@pytest.mark.parametrize("dtype, op", [(np.float32, "sum"), (np.float16, "max")])
def test_float_reductions_equal_lockstep(dtype, op):
    """Floats reduce by qccl's soft-float kernel on this transport too (its devices are the same machines): the bits
    equal the lockstep transport's whatever the timing."""
    rng = np.random.default_rng(5)
    x = [rng.standard_normal(7).astype(dtype) for _ in range(3)]
    results = []
    for comms in (_threads(3, 7), qccl.Communicator.init_all(3)):
        y = [np.zeros(7, dtype) for _ in range(3)]
        with qccl.group():
            for c in comms:
                c.allreduce(x[c.rank], y[c.rank], op)
        results.append(y)
        for c in comms:
            c.destroy()
    threads, lockstep = results
    for a, b in zip(threads, lockstep):
        assert a.tobytes() == b.tobytes()
    if op == "max":                     # order-free: numpy's answer too
        assert np.array_equal(lockstep[0], np.maximum.reduce(x))
    with pytest.raises(qccl.InvalidArgument, match="op prod on float32: the threads transport reduces floats"):
        comms = _threads(2, 1)
        try:
            comms[0].allreduce(x[0][:2].astype(np.float32), np.zeros(2, np.float32), "prod")
        finally:
            for c in comms:
                c.destroy()


def test_sequences_of_calls_and_separate_calls():
    comms = _threads(3, 11, delay_us=50)
    for i in range(3):
        o = run(3, ("allreduce", "allgather", "reduce")[i], 6 + i, "prod", root=i, seed=i, comms=comms)
        assert o.ok
    # ungrouped: each call returns when its rank waits for the others' calls; the last one completes the work
    x = [np.arange(4, dtype=np.int32) * (r + 2) for r in range(3)]
    y = [np.zeros(4, np.int32) for _ in range(3)]
    for c in comms:
        c.allreduce(x[c.rank], y[c.rank], "sum")
    for c in comms:
        c.synchronize()
    assert all(np.array_equal(v, x[0] + x[1] + x[2]) for v in y)


def test_a_deadlock_names_each_ranks_flag():
    comms = _threads(4, 2, fifo_slots=1)
    x = [np.arange(16, dtype=np.int32) for _ in range(4)]
    y = [np.zeros(16, np.int32) for _ in range(4)]
    with pytest.raises(qccl.DeadlockError) as e:
        with qccl.group():
            for c in comms:
                c.allreduce(x[c.rank], y[c.rank])
    text = str(e.value)
    assert "every rank spins on a flag" in text
    for r in range(4):
        assert f"rank {r}: kernel prim spins on address" in text
    assert set(e.value.waits) == {0, 1, 2, 3}
    assert all(w.flag in ("ring.head", "ring.tail") for w in e.value.waits.values())


def test_the_watchdog_reports_a_run_that_does_not_end():
    # packets 30 s late on average: past the watchdog. Its 3 s leave the ranks time to lower and launch their first
    # kernel on a loaded 2-core machine (at 0.5 s one CI run found both still idle, their kernels not yet launched)
    comms = _threads(2, 0, delay_us=30e6, timeout=3.0)
    x = [np.arange(4, dtype=np.int32) for _ in range(2)]
    y = [np.zeros(4, np.int32) for _ in range(2)]
    with pytest.raises(qccl.DeadlockError, match=r"timeout: the epoch did not end within 3(\.0)? s") as e:
        with qccl.group():
            for c in comms:
                c.allreduce(x[c.rank], y[c.rank])
    assert set(e.value.waits) == {0, 1} and "spins on address" in str(e.value)


def test_unknown_transport_option_is_refused():
    with pytest.raises(qccl.InvalidArgument, match="'speed' is not a key of the threads transport"):
        _threads(2, 0, speed=3)


def test_one_process_only():
    uid = qccl.UniqueId("abc", "127.0.0.1:1")
    with pytest.raises(qccl.InvalidUsage, match="runs every rank of a communicator in one process"):
        qccl.Communicator.init(2, 0, uid, transport="threads")


def test_idle_rank_threads_sleep():
    """Between calls the rank threads wait on the world's condition without waking each other: an idle thread that
    notified on every wake-up woke the others, who notified back (a storm: dozens of idle worlds slowed a whole
    test run several times over). Counted: the notifications of an idle 4-rank world over 0.3 s."""
    import time
    comms = qccl.Communicator.init_all(4, transport="threads")
    x = [np.arange(8, dtype=np.int32) for _ in range(4)]
    y = [np.zeros(8, np.int32) for _ in range(4)]
    with qccl.group():
        for c in comms:
            c.allreduce(x[c.rank], y[c.rank])
    world = comms[0].world
    time.sleep(0.1)                         # the threads reach their wait
    calls = []
    real = world.changed.notify_all
    world.changed.notify_all = lambda: (calls.append(1), real())[1]
    try:
        time.sleep(0.3)
    finally:
        world.changed.notify_all = real
    assert len(calls) < 20, f"{len(calls)} notifications in 0.3 s of an idle world"
    for c in comms:
        c.destroy()
