"""Init with one thread per rank: it returns once every rank joined (ncclCommInitRank), a world that never assembles
is a qccl error within thread_timeout naming the missing ranks, and the shared-world registry forgets a world once
its ranks are destroyed or gave up."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import qccl
from qccl_transports.qlink import plugin as qlink_plugin
from qccl_transports.threads import plugin as threads_plugin

REGISTRIES = {"qlink": qlink_plugin._worlds, "threads": threads_plugin._worlds}


@pytest.mark.parametrize("transport", ["qlink", "threads"])
def test_a_lone_thread_init_is_an_error_naming_the_missing_ranks(transport):
    uid = qccl.get_unique_id()
    before = dict(REGISTRIES[transport])
    t0 = time.monotonic()
    with pytest.raises(qccl.SystemError, match=r"rank 1 waited 0.5 s \(thread_timeout\) at init of a 3-rank "
                                               r"communicator for rank\(s\) 0, 2, which never called init"):
        qccl.Communicator.init(3, 1, uid, transport, config={"thread_timeout": 0.5})
    assert time.monotonic() - t0 < 30
    assert REGISTRIES[transport] == before, "the world that never assembled is forgotten"


@pytest.mark.parametrize("transport", ["qlink", "threads"])
def test_thread_init_waits_for_every_rank_then_runs_and_is_forgotten_at_destroy(transport):
    uid = qccl.get_unique_id()
    before = dict(REGISTRIES[transport])
    out, errors, joined_at = {}, [], {}

    def worker(r):
        try:
            if r == 1:
                time.sleep(0.5)         # the late rank: the others' init waits for it
            comm = qccl.Communicator.init(2, r, uid, transport, config={"thread_timeout": 30})
            joined_at[r] = time.monotonic()
            y = np.zeros(4, np.int32)
            comm.allreduce(np.arange(4, dtype=np.int32) * (r + 1), y)
            out[r] = y
            comm.destroy()
        except Exception as e:      # noqa: BLE001
            errors.append(e)

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    assert joined_at[0] - t0 >= 0.5, "rank 0's init returned before rank 1 joined"
    for r in range(2):
        assert np.array_equal(out[r], np.arange(4) * 3)
    assert REGISTRIES[transport] == before
