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


EXCHANGE = re.compile(r"\[(\d+)\] QCCL INFO Exchange: opCount (\w+) calls ([\w+-]+) comm (0x[0-9a-f]+) nranks (\d+) "
                      r"fabric (\w+) \(([\w-]+)\) exchanges (\d+) packets sent (\d+) received (\d+) wall")


def test_exchange_events_in_debug_lines_and_trace(monkeypatch, capsys, tmp_path):
    """One exchange event per rank and epoch: an INFO line and a slice on the rank's fabric track, with the windows
    exchanged and the packets sent and received that the rank's own counters show."""
    path = tmp_path / "trace.json"
    monkeypatch.setenv("QCCL_DEBUG", "INFO")
    monkeypatch.setenv("QCCL_TRACE", str(path))
    trace.reset()
    comms = qccl.Communicator.init_all(3)
    before = [c.stats for c in comms]
    _allreduce(comms, count=5)
    after = [c.stats for c in comms]
    _broadcast(comms, root=2)
    assert trace.flush() == str(path)
    lines = [EXCHANGE.search(x) for x in capsys.readouterr().err.splitlines()]
    lines = [m.groups() for m in lines if m]
    assert len(lines) == 6
    first = {int(m[0]): m for m in lines[:3]}
    assert sorted(first) == [0, 1, 2]
    for r, m in first.items():
        d = {k: after[r][k] - before[r][k] for k in ("exchanges", "packets_sent", "packets_received")}
        assert m[1:3] == ("0", "allreduce") and m[4:7] == ("3", "InMemoryFabric", "in-process")
        assert (int(m[7]), int(m[8]), int(m[9])) == (d["exchanges"], d["packets_sent"], d["packets_received"])
        assert d["packets_sent"] > 0 and d["exchanges"] > 0
    assert [m[1:3] for m in lines[3:]] == [("1", "broadcast")] * 3
    events = json.loads(path.read_text())["traceEvents"]
    names = {(e["tid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(trace.FABRIC_TRACK + r, f"rank {r} fabric") for r in range(3)} <= names
    for r in range(3):
        ex = [e for e in events if e["ph"] == "X" and e["cat"] == "exchange" and e["tid"] == trace.FABRIC_TRACK + r]
        assert [e["name"] for e in ex] == ["exchange allreduce", "exchange broadcast"]
        assert ex[0]["args"]["packets_sent"] == after[r]["packets_sent"] - before[r]["packets_sent"]
        assert ex[0]["args"]["exchanges"] == after[r]["exchanges"] - before[r]["exchanges"]
        packets = [e for e in events if e["ph"] == "C" and e["name"] == f"packets rank {r}"]
        assert packets[-1]["args"]["packets_sent"] == sum(e["args"]["packets_sent"] for e in ex)


PROGRAM = """
import json, os, sys
import numpy as np
import qccl
comm = qccl.Communicator.init(int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"]), qccl.get_unique_id())
r = comm.rank
before = comm.stats
x = np.arange(6, dtype=np.int32) * (r + 1)
y = np.zeros(6, np.int32)
comm.allreduce(x, y, algo="ring")
after = comm.stats
from qccl_plugins import trace
trace.flush()
json.dump({"y": y.tolist(), "before": before, "after": after}, open(sys.argv[1] + f".{r}", "w"))
"""


def test_exchange_events_across_processes(tmp_path):
    """Under python -m qccl.launch each process reports its rank's exchanges over the gloo fabric: the INFO line and
    its own trace file (the rank in the name) carry what crossed the link, equal to the rank's counters."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pytest
    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[1]
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, QCCL_DEBUG="INFO", QCCL_TRACE=str(tmp_path / "trace.json"))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "qccl.launch", "-n", "2", "--timeout", "120", str(script), str(out)],
                       cwd=root, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [m.groups() for m in (EXCHANGE.search(x) for x in (p.stdout + p.stderr).splitlines()) if m]
    assert sorted(int(m[0]) for m in lines) == [0, 1]
    for r in range(2):
        rep = json.loads(Path(f"{out}.{r}").read_text())
        assert rep["y"] == (np.arange(6) * 3).tolist()
        d = {k: rep["after"][k] - rep["before"][k] for k in ("exchanges", "packets_sent", "packets_received")}
        assert d["packets_sent"] > 0 and d["packets_received"] > 0 and d["exchanges"] > 0
        m = next(m for m in lines if int(m[0]) == r)
        assert m[1:3] == ("0", "allreduce") and m[4:7] == ("2", "GlooFabric", "processes")
        assert (int(m[7]), int(m[8]), int(m[9])) == (d["exchanges"], d["packets_sent"], d["packets_received"])
        events = json.loads((tmp_path / f"trace.{r}.json").read_text())["traceEvents"]
        ex = [e for e in events if e["ph"] == "X" and e["cat"] == "exchange"]
        assert len(ex) == 1 and ex[0]["tid"] == trace.FABRIC_TRACK + r
        assert ex[0]["args"]["fabric"] == "GlooFabric (processes)"
        assert (ex[0]["args"]["exchanges"], ex[0]["args"]["packets_sent"]) == (d["exchanges"], d["packets_sent"])
        launches = [e for e in events if e["ph"] == "X" and e["cat"] == "launch"]
        assert len(launches) == rep["after"]["launches"] - rep["before"]["launches"]
        assert all(e["tid"] == r for e in launches)
    assert not (tmp_path / "trace.json").exists(), "one file per process, none shared"
