"""Finding plugins and calling their hooks: one pluggy PluginManager that loads qccl's entry point groups once.

    import qccl
    qccl.transports()                      # {'qlink': ..., 'threads': ..., 'cupy': ...}
    qccl.plugin_manager().register(obj)    # a tuner, a profiler or a transport of your own

The hooks are documented in :mod:`qccl.hookspecs`. This module is also where qccl calls them: :func:`tune` (the
algorithm and chunking of a call made with ``algo="auto"``), :func:`run_epoch` (group, collective and exchange events around a
world's epoch) and :class:`LaunchTracer` (launch events, from a transport's launch loop).
"""
from __future__ import annotations

import threading
import time
import weakref

import pluggy

from . import hookspecs as H
from .errors import InvalidArgument

ENTRY_POINT_GROUP = "qccl_transports"
PLUGIN_ENTRY_POINT_GROUP = "qccl_plugins"
_pm: pluggy.PluginManager | None = None
_lock = threading.Lock()


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager (entry points loaded on first use). Register more plugins on it at will.

    >>> qccl.plugin_manager().hook.qccl_transports()    # doctest: +SKIP
    """
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager("qccl")
            pm.add_hookspecs(H)
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
            pm.load_setuptools_entrypoints(PLUGIN_ENTRY_POINT_GROUP)
            _pm = pm
        return _pm


def transports() -> dict:
    """Every registered transport, by name: ``qccl.transports()["qlink"].dtypes``."""
    found = {}
    for result in plugin_manager().hook.qccl_transports():
        for t in result or ():
            found.setdefault(t.name, t)
    return found


def get_transport(name: str):
    """The transport called ``name``; InvalidArgument naming the registered ones otherwise.

    >>> qccl.get_transport("qlink").name       # doctest: +SKIP
    'qlink'
    """
    available = transports()
    if name not in available:
        raise InvalidArgument(f"unknown transport {name!r} (registered: {', '.join(sorted(available)) or 'none'})")
    return available[name]


# -- tuner ----------------------------------------------------------------------------------------------------------
def tune(kind: str, algo: str, algos: tuple[str, ...], nranks: int, count: int, dtype, op=None, root=None,
         config: dict | None = None, words: int | None = None, chunks: dict | None = None) -> H.Tuning:
    """The algorithm and chunking a call runs: ``algo`` itself (the schedule's most words per chunk) unless it is
    "auto", then the tuners' choice (the first that answers; the built-in one in qccl_plugins.tuner answers last).
    ``chunks``: the most words per chunk of each algorithm on the communicator's heap. A choice outside ``algos`` or
    a chunk outside 1..most is InvalidArgument naming the tuner, the value and the limit.

    >>> tune("allreduce", "auto", ("ring", "multicast"), 4, 16, "int32").algo     # doctest: +SKIP
    'multicast'
    """
    chunks = dict(chunks or {})
    if algo != "auto":
        return H.Tuning(algo, None, None, "named")
    request = H.TuneRequest(kind, nranks, int(count), str(dtype), None if op is None else str(op), root,
                            tuple(algos), dict(config or {}), None if words is None else int(words), chunks)
    choice = plugin_manager().hook.qccl_tune(request=request)
    if choice is None:
        raise InvalidArgument(f"{kind}: algo='auto' but no tuner is registered (qccl_plugins provides one); "
                              f"name an algorithm ({', '.join(algos)})")
    who = choice.source or type(choice).__name__
    if choice.algo not in algos:
        raise InvalidArgument(f"{kind}: the tuner {who} chose algorithm {choice.algo!r}; {kind} has {', '.join(algos)}")
    if choice.chunk is not None:
        most = chunks.get(choice.algo)
        c = choice.chunk
        if isinstance(c, bool) or not isinstance(c, int) or c < 1 or (most is not None and c > most):
            raise InvalidArgument(f"{kind}: the tuner {who} chose chunk={c!r} words for {choice.algo}; the "
                                  f"communicator's heap allows 1..{most} words per chunk")
    return choice


# -- profiler -------------------------------------------------------------------------------------------------------
_mask = 0                                   # the kinds asked for in the current epoch (read by LaunchTracer)
_op_counts: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def profiler_mask() -> int:
    """The OR of every profiler's mask (0 when no profiler wants anything: then nothing is emitted)."""
    mask = 0
    for m in plugin_manager().hook.qccl_profiler_mask():
        mask |= int(m or 0)
    return mask


def comm_id(world) -> str:
    """A communicator's id in events and logs (NCCL prints its comm pointer)."""
    return f"{id(world) & 0xFFFFFFFFFFFF:#x}"


def _counters(before: dict, after: dict) -> dict:
    keys = ("tokens_written", "tokens_fed", "records", "launches", "packets_sent", "packets_received", "exchanges")
    return {k: after[k] - before[k] for k in keys if k in before and k in after}


def run_epoch(world, work) -> None:
    """``world.run(work)`` with group, collective and exchange events around it when a profiler asks for them.

    ``work`` is the epoch's list of :class:`qccl.transport.Work`; their ``calls`` are call signatures
    (kind, count, dtype, op, root, algo)."""
    global _mask
    _mask = mask = profiler_mask()
    if not mask:
        world.run(work)
        return
    hook = plugin_manager().hook
    comm = comm_id(world)
    counts = _op_counts.setdefault(world, {})
    ranks = tuple(w.rank for w in work)
    before = {r: dict(world.stats(r)) for r in ranks}
    group = H.ProfilerEvent("group", comm, None, world.nranks, ranks, start=time.perf_counter())
    colls = []
    for w in work:
        for sig in w.calls:
            kind, count, dtype, op, root, algo = (tuple(sig) + (None,) * 6)[:6]
            colls.append(H.ProfilerEvent("collective", comm, w.rank, world.nranks, (w.rank,),
                                         counts.get(w.rank, 0), str(kind), int(count or 0), str(dtype or ""),
                                         _op_name(op), root, str(algo or ""), start=time.perf_counter()))
            counts[w.rank] = counts.get(w.rank, 0) + 1
    if mask & H.GROUP:
        hook.qccl_profiler_start(event=group)
    if mask & H.COLLECTIVE:
        for ev in colls:
            hook.qccl_profiler_start(event=ev)
    first = {r: min((ev.op_count for ev in colls if ev.rank == r), default=counts.get(r, 0)) for r in ranks}
    fabric = getattr(world, "fabric", None)
    where = "processes" if getattr(fabric, "distributed", False) else "in-process"
    exchanges = [H.ProfilerEvent("exchange", comm, r, world.nranks, (r,), first[r],
                                 "+".join(ev.call for ev in colls if ev.rank == r),
                                 note=f"{type(fabric).__name__ if fabric is not None else 'fabric'} ({where})",
                                 start=time.perf_counter()) for r in ranks]
    if mask & H.EXCHANGE:
        for ev in exchanges:
            hook.qccl_profiler_start(event=ev)
    try:
        world.run(work)
    finally:
        end = time.perf_counter()
        after = {r: dict(world.stats(r)) for r in ranks}
        delta = {r: _counters(before[r], after[r]) for r in ranks}
        per_rank_calls = {r: sum(1 for ev in colls if ev.rank == r) for r in ranks}
        if mask & H.EXCHANGE:
            for ev in exchanges:
                _fill(ev, delta[ev.rank], end)
                hook.qccl_profiler_stop(event=ev)
        if mask & H.COLLECTIVE:
            for ev in colls:
                _fill(ev, delta[ev.rank] if per_rank_calls[ev.rank] == 1 else {}, end)
                hook.qccl_profiler_stop(event=ev)
        if mask & H.GROUP:
            total = {}
            for d in delta.values():
                for k, v in d.items():
                    total[k] = total.get(k, 0) + v       # counters of several ranks: a count, not a payload
            _fill(group, total, end)
            hook.qccl_profiler_stop(event=group)


def _fill(ev: H.ProfilerEvent, counters: dict, end: float) -> None:
    ev.end = end
    for k, v in counters.items():
        setattr(ev, k, v)


def _op_name(op) -> str:
    if op is None:
        return ""
    from .types import RedOp
    try:
        return str(RedOp(int(op)))
    except (ValueError, TypeError):
        return str(op)


class LaunchTracer:
    """Launch events from a transport's launch loop: ``begin(rank, launch)`` when a kernel starts on a rank, ``end(rank)``
    when it finished. ``stats(rank)`` gives the rank's device counters (tokens_written, tokens_fed, records,
    launches). Costs one integer test per launch when no profiler asks for launches.

    >>> tracer = LaunchTracer(comm_id(world), world.nranks, lambda r: devices[r].stats)   # doctest: +SKIP
    """

    def __init__(self, comm: str, nranks: int, stats):
        self.comm, self.nranks, self.stats = comm, nranks, stats
        self.open: dict = {}

    def begin(self, rank: int, launch) -> None:
        if not _mask & H.LAUNCH:
            return
        ev = H.ProfilerEvent("launch", self.comm, rank, self.nranks, (rank,), call=str(launch.kernel),
                             note=launch.note, threads=launch.threads, start=time.perf_counter())
        self.open[rank] = (ev, dict(self.stats(rank)))
        plugin_manager().hook.qccl_profiler_start(event=ev)

    def end(self, rank: int) -> None:
        opened = self.open.pop(rank, None)
        if opened is None:
            return
        ev, before = opened
        _fill(ev, _counters(before, dict(self.stats(rank))), time.perf_counter())
        plugin_manager().hook.qccl_profiler_stop(event=ev)
