"""Bounded memory (issue 12): qccl keeps nothing per call, registries are freed at destroy. The device's own token log
(qwengpu.Device.tokens, the model's whole stream) is the one thing that grows with calls; RSS growth is held against
it. The 10,000-call soak with RSS figures is ``python -m qccl_bench.soak``; a short share runs here."""
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


def test_qccl_keeps_nothing_per_call_and_rss_grows_only_with_the_token_log():
    """Over 100 calls on one communicator (after a warm-up): the objects of qccl's own types (calls, signatures,
    buffers, schedules, host ops) are as many as before, and RSS grows no more than the devices' token log."""
    comms = qccl.Communicator.init_all(2)
    _calls(comms, 20)
    before = _qccl_objects()
    rss0, tokens0 = soak.rss_mb(), sum(len(c.device.tokens) for c in comms)
    _calls(comms, 100)
    after = _qccl_objects()
    rss1, tokens1 = soak.rss_mb(), sum(len(c.device.tokens) for c in comms)
    grown = {k: after[k] - before[k] for k in after if after[k] > before[k]}
    assert not grown, f"qccl objects that grew over 100 calls: {grown}"
    assert not comms[0]._board.ledger.open and not any(comms[0]._board.queue.values())
    log_mb = (tokens1 - tokens0) * soak.TOKEN_BYTES / 2**20
    assert rss1 - rss0 <= log_mb + 3, f"RSS grew {rss1 - rss0:.1f} MB over 100 calls; the token log {log_mb:.1f} MB"


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
