"""Profiler plugins: the built-in QCCL_DEBUG=INFO lines and QCCL_TRACE Chrome trace, and a profiler registered from
outside; their counters are held against the communicators' own stats (what the devices counted)."""
from __future__ import annotations

import json
import re

import numpy as np

import qccl
from qccl_plugins import trace


def _allreduce(comms, count=6, algo="ring"):
    x = [np.arange(count, dtype=np.int32) + r for r in range(len(comms))]
    y = [np.zeros(count, np.int32) for _ in comms]
    with qccl.group():
        for c in comms:
            c.allreduce(x[c.rank], y[c.rank], algo=algo)
    assert all(np.array_equal(v, np.sum(x, axis=0, dtype=np.int32)) for v in y)


def _broadcast(comms, root, count=5):
    buf = [np.full(count, 7 * (r + 1), np.int32) for r in range(len(comms))]
    with qccl.group():
        for c in comms:
            c.broadcast(buf[c.rank], buf[c.rank], root=root)
    assert all(np.array_equal(b, np.full(count, 7 * (root + 1), np.int32)) for b in buf)


LINE = re.compile(r"\[(\d+)\] QCCL INFO (\w+): opCount (\w+) count (\d+) datatype (\w+) op (\w+) root (\d+) comm "
                  r"(0x[0-9a-f]+) nranks (\d+) algo (\w+) tokens (\d+) fed (\d+) launches (\d+)")


def test_debug_info_lines(monkeypatch, capsys):
    monkeypatch.setenv("QCCL_DEBUG", "INFO")
    comms = qccl.Communicator.init_all(3)
    before = [c.stats for c in comms]
    _allreduce(comms)
    mid = [c.stats for c in comms]
    _broadcast(comms, root=1)
    after = [c.stats for c in comms]
    found = [LINE.search(line) for line in capsys.readouterr().err.splitlines()]
    found = [m.groups() for m in found if m]
    assert len(found) == 6
    for m in found[:3]:
        rank = int(m[0])
        assert m[1:7] == ("AllReduce", "0", "6", "int32", "sum", "0")
        assert int(m[10]) == mid[rank]["tokens_written"] - before[rank]["tokens_written"]
        assert int(m[12]) == mid[rank]["launches"] - before[rank]["launches"]
    for m in found[3:]:
        rank = int(m[0])
        assert m[1:7] == ("Broadcast", "1", "5", "int32", "none", "1")
        assert int(m[10]) == after[rank]["tokens_written"] - mid[rank]["tokens_written"]
    assert sorted(int(m[0]) for m in found[3:]) == [0, 1, 2] and len({m[7] for m in found}) == 1


def test_debug_is_silent_by_default(monkeypatch, capsys):
    monkeypatch.delenv("QCCL_DEBUG", raising=False)
    _allreduce(qccl.Communicator.init_all(2))
    assert "QCCL INFO" not in capsys.readouterr().err


def test_chrome_trace(monkeypatch, tmp_path):
    path = tmp_path / "trace.json"
    monkeypatch.setenv("QCCL_TRACE", str(path))
    trace.reset()
    comms = qccl.Communicator.init_all(4)
    before = [c.stats for c in comms]
    _allreduce(comms, count=9, algo="multicast")
    after = [c.stats for c in comms]
    assert trace.flush() == str(path)
    events = json.loads(path.read_text())["traceEvents"]
    names = {(e["tid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(r, f"rank {r}") for r in range(4)} <= names
    for r in range(4):
        launches = [e for e in events if e["ph"] == "X" and e["cat"] == "launch" and e["tid"] == r]
        assert len(launches) == after[r]["launches"] - before[r]["launches"]
        written = after[r]["tokens_written"] - before[r]["tokens_written"]
        # a host read of a result is written by the model outside any launch: the launches hold the rest
        assert 0 < sum(e["args"]["tokens_written"] for e in launches) <= written
        coll = [e for e in events if e["ph"] == "X" and e["cat"] == "collective" and e["tid"] == r]
        assert len(coll) == 1 and coll[0]["name"] == "allreduce" and coll[0]["args"]["algo"] == "multicast"
        assert coll[0]["args"]["tokens_written"] == written
        t0, t1 = coll[0]["ts"], coll[0]["ts"] + coll[0]["dur"]
        assert all(t0 <= e["ts"] and e["ts"] + e["dur"] <= t1 + 1 for e in launches)
        counters = [e for e in events if e["ph"] == "C" and e["name"] == f"tokens rank {r}"]
        assert counters[-1]["args"]["tokens_written"] == sum(e["args"]["tokens_written"] for e in launches)
        assert all(a["ts"] <= b["ts"] for a, b in zip(counters, counters[1:]))
    groups = [e for e in events if e["ph"] == "X" and e["cat"] == "group"]
    assert len(groups) == 1 and groups[0]["args"]["ranks"] == [0, 1, 2, 3]


class Recorder:
    def __init__(self):
        self.started, self.stopped = [], []

    @qccl.hookimpl
    def qccl_profiler_mask(self):
        from qccl.hookspecs import COLLECTIVE, EXCHANGE, GROUP, LAUNCH
        return GROUP | COLLECTIVE | LAUNCH | EXCHANGE

    @qccl.hookimpl
    def qccl_profiler_start(self, event):
        self.started.append(event.kind)

    @qccl.hookimpl
    def qccl_profiler_stop(self, event):
        self.stopped.append(event)


def test_a_profiler_registered_from_outside():
    rec = Recorder()
    qccl.plugin_manager().register(rec, name="recorder")
    try:
        comms = qccl.Communicator.init_all(2)
        before = [c.stats for c in comms]
        x = [np.arange(3, dtype=np.int32) * (r + 1) for r in range(2)]
        y = [np.zeros(3, np.int32) for _ in range(2)]
        with qccl.group():
            comms[0].send(x[0], 1)
            comms[1].recv(y[1], 0)
            comms[1].send(x[1], 0)
            comms[0].recv(y[0], 1)
        after = [c.stats for c in comms]
    finally:
        qccl.plugin_manager().unregister(rec)
    assert np.array_equal(y[1], x[0]) and np.array_equal(y[0], x[1])
    assert sorted(rec.started) == sorted(e.kind for e in rec.stopped)
    kinds = [e.kind for e in rec.stopped]
    assert kinds.count("group") == 1 and kinds.count("collective") == 4 and kinds.count("exchange") == 2
    for r in range(2):
        calls = [e for e in rec.stopped if e.kind == "collective" and e.rank == r]
        order = ["send", "recv"] if r == 0 else ["recv", "send"]        # each rank's calls in its own order
        assert [(e.call, e.root, e.count, e.op_count) for e in calls] == [(order[0], 1 - r, 3, 0),
                                                                          (order[1], 1 - r, 3, 1)]
        assert all(e.tokens_written is None for e in calls), "two calls of a rank share the epoch's tokens"
        launches = [e for e in rec.stopped if e.kind == "launch" and e.rank == r]
        assert len(launches) == after[r]["launches"] - before[r]["launches"]
        assert sum(e.records for e in launches) == after[r]["records"] - before[r]["records"]
        ex = next(e for e in rec.stopped if e.kind == "exchange" and e.rank == r)
        assert ex.packets_sent == after[r]["packets_sent"] - before[r]["packets_sent"] > 0
        assert ex.exchanges > 0 and ex.wall > 0
    group = next(e for e in rec.stopped if e.kind == "group")
    assert group.ranks == (0, 1)
    assert group.tokens_written == sum(after[r]["tokens_written"] - before[r]["tokens_written"] for r in range(2))
