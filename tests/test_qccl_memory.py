"""Bounded memory (issue 12): qccl keeps nothing per call, registries are freed at destroy, and a communicator's
devices keep a bounded token log (the latest 65,536 positions by default), so RSS stays flat. The 10,000-call soak
with RSS figures is ``python -m qccl_bench.soak``; a short share runs here."""
from __future__ import annotations

import gc
import threading
import weakref
from collections import Counter

import numpy as np

import qccl
from qccl_bench import soak


def _calls(comms, k):
    x = [np.arange(3, dtype=np.int32) + r for r in range(len(comms))]
    y = [np.zeros(3, np.int32) for _ in comms]
    for i in range(k):
        if i % 2:
            with qccl.group():
                for c in comms:
                    c.allreduce(x[c.rank], y[c.rank])
        else:
            for c in comms:                             # ungrouped: held on the board, then released
                c.broadcast(x[c.rank], y[c.rank], root=i % len(comms))


def _qccl_objects() -> Counter:
    gc.collect()
    found = Counter()
    for o in gc.get_objects():
        module = type(o).__dict__.get("__module__")       # a str on classes; some types carry a descriptor there
        if isinstance(module, str) and module.startswith("qccl."):
            found[type(o).__qualname__] += 1
    return found


def test_qccl_keeps_nothing_per_call_and_rss_stays_flat():
    """Over 200 calls on one communicator (after a warm-up) whose devices keep 2,048 log positions: the objects of
    qccl's own types (calls, signatures, buffers, schedules, host ops) are as many as before, each device holds at
    most twice its bound (plus one launch), and RSS does not grow with the calls."""
    keep = 2048
    comms = qccl.Communicator.init_all(2, config={"backend_options": {"token_log": keep}})
    _calls(comms, 40)
    before = _qccl_objects()
    rss0, fed0 = soak.rss_mb(), sum(len(c.device.tokens) for c in comms)
    _calls(comms, 200)
    after = _qccl_objects()
    rss1, fed1 = soak.rss_mb(), sum(len(c.device.tokens) for c in comms)
    grown = {k: after[k] - before[k] for k in after if after[k] > before[k]}
    assert not grown, f"qccl objects that grew over 200 calls: {grown}"
    assert not comms[0]._board.ledger.open and not any(comms[0]._board.queue.values())
    assert fed1 - fed0 > 4 * keep, "the calls fed enough positions for the bound to matter"
    for c in comms:
        held = len(c.device.tokens) - c.device.tokens.start
        assert held < 2 * keep + 1000, f"rank {c.rank}'s log holds {held} positions, bound {keep}"
    assert rss1 - rss0 <= 2, f"RSS grew {rss1 - rss0:.1f} MB over 200 calls"


def test_registries_are_freed_at_destroy():
    comms = qccl.Communicator.init_all(3)
    refs = [weakref.ref(comms[0].world), weakref.ref(comms[0]._board)]
    for c in comms:
        c.destroy()
    del comms, c
    uid = qccl.get_unique_id()
    made = []

    def worker(r):
        comm = qccl.Communicator.init(2, r, uid)
        comm.allreduce(np.ones(2, np.int32), np.zeros(2, np.int32))
        made.append(weakref.ref(comm.world))
        comm.destroy()

    ts = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    gc.collect()
    assert all(ref() is None for ref in refs + made), "worlds and boards outlive their communicators"


def test_soak_short_share():
    """A short run of the soak: random collectives, kinds, sizes, ops, roots, dtypes, grouped or not, vs numpy."""
    report = soak.soak(calls=40, seed=5, ranks=3, max_count=9)
    assert report["wrong"] == 0 and report["calls"] == 40, report["failures"][:3]
    assert len(report["kinds"]) >= 7, report["kinds"]
