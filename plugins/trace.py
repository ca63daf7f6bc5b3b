"""QCCL_TRACE=file.json: a Chrome / Perfetto trace of every group, call and launch (open it in ui.perfetto.dev or
chrome://tracing)::

    QCCL_TRACE=/tmp/qccl.json python -m qccl_bench.perf all_reduce -g 4 -b 16 -e 16

One process per communicator, one track (thread) per rank: a slice per call and, inside it, a slice per kernel launch
(its step, tokens written and fed, records); a counter per rank of the tokens its model has written; a "groups" track
with one slice per epoch; a "rank r fabric" track per rank with a slice per epoch's exchanges (windows exchanged,
packets sent and received) and a counter of the packets it has sent. The file is rewritten at exit and at most once a
second while calls run; ``flush()`` writes it now.

One process per rank (``python -m qccl.launch``, torchrun): each process writes its own file, the rank inserted
before the suffix (QCCL_TRACE=/tmp/t.json gives /tmp/t.0.json, /tmp/t.1.json, ...), or where the path has ``{rank}``.
"""
from __future__ import annotations

import atexit
import json
import os
import threading
import time

from qccl.hookspecs import COLLECTIVE, EXCHANGE, GROUP, LAUNCH, hookimpl

GROUP_TRACK = 10_000            # the tid of the groups track (ranks are 0..nranks-1)
FABRIC_TRACK = 20_000           # + rank: the tid of a rank's fabric track

_lock = threading.Lock()
_events: list = []
_pids: dict = {}
_tokens: dict = {}              # (comm, rank) -> tokens written so far (the counter track)
_packets: dict = {}             # (comm, rank) -> packets sent so far
_last_write = 0.0
_origin = time.perf_counter()


def path() -> str | None:
    """QCCL_TRACE's path; with one process per rank (RANK and WORLD_SIZE > 1 set by the launcher) this process's
    own file."""
    target = os.environ.get("QCCL_TRACE") or None
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if target is None:
        return None
    if "{rank}" in target:
        return target.replace("{rank}", rank or "0")
    if rank is not None and world is not None and world.isdigit() and int(world) > 1:
        stem, dot, suffix = target.rpartition(".")
        return f"{stem}.{rank}.{suffix}" if dot and "/" not in suffix else f"{target}.{rank}"
    return target


@hookimpl
def qccl_profiler_mask():
    return GROUP | COLLECTIVE | LAUNCH | EXCHANGE if path() else 0


def _us(t: float) -> float:
    return round((t - _origin) * 1e6, 3)


def _pid(comm: str, nranks: int) -> int:
    if comm not in _pids:
        pid = _pids[comm] = len(_pids) + 1
        _events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": f"qccl comm {comm} ({nranks} ranks)"}})
        for r in range(nranks):
            _events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": r, "args": {"name": f"rank {r}"}})
        _events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": GROUP_TRACK, "args": {"name": "groups"}})
        for r in range(nranks):
            _events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": FABRIC_TRACK + r,
                            "args": {"name": f"rank {r} fabric"}})
    return _pids[comm]


def _counters(ev) -> dict:
    keys = ("tokens_written", "tokens_fed", "records", "launches", "packets_sent", "packets_received", "exchanges")
    return {k: getattr(ev, k) for k in keys if getattr(ev, k) is not None}


@hookimpl
def qccl_profiler_stop(event):
    if not path():
        return
    with _lock:
        pid = _pid(event.comm, event.nranks)
        args = _counters(event)
        if event.kind == "launch":
            name, cat, tid = event.note or event.call, "launch", event.rank
            args.update(kernel=event.call, threads=event.threads)
        elif event.kind == "exchange":
            name = f"exchange {event.call}" if event.call else "exchange"
            cat, tid = "exchange", FABRIC_TRACK + event.rank
            args.update(opCount=event.op_count, calls=event.call, fabric=event.note)
        elif event.kind == "collective":
            name, cat, tid = event.call, "collective", event.rank
            args.update(opCount=event.op_count, count=event.count, datatype=event.dtype, op=event.op,
                        root=event.root, algo=event.algo)
        else:
            name, cat, tid = "group", "group", GROUP_TRACK
            args.update(ranks=list(event.ranks))
        _events.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": _us(event.start),
                        "dur": max(_us(event.end) - _us(event.start), 0.001), "args": args})
        if event.kind == "launch" and event.tokens_written is not None:
            key = (event.comm, event.rank)
            _tokens[key] = _tokens.get(key, 0) + event.tokens_written     # a running count of tokens, not data
            _events.append({"ph": "C", "name": f"tokens rank {event.rank}", "pid": pid, "tid": event.rank,
                            "ts": _us(event.end), "args": {"tokens_written": _tokens[key]}})
        if event.kind == "exchange" and event.packets_sent is not None:
            key = (event.comm, event.rank)
            _packets[key] = _packets.get(key, 0) + event.packets_sent
            _events.append({"ph": "C", "name": f"packets rank {event.rank}", "pid": pid,
                            "tid": FABRIC_TRACK + event.rank, "ts": _us(event.end),
                            "args": {"packets_sent": _packets[key]}})
    if event.kind == "group" and time.monotonic() - _last_write > 1.0:
        flush()


def flush() -> str | None:
    """Write the trace file now (QCCL_TRACE's path); returns the path, or None when tracing is off."""
    global _last_write
    target = path()
    if target is None:
        return None
    with _lock:
        data = {"traceEvents": list(_events), "displayTimeUnit": "ms",
                "otherData": {"producer": "qccl_plugins.trace"}}
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, target)
    _last_write = time.monotonic()
    return target


def reset() -> None:
    """Forget the events recorded so far (a fresh trace)."""
    with _lock:
        _events.clear()
        _pids.clear()
        _tokens.clear()
        _packets.clear()


atexit.register(flush)
