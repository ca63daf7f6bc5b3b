"""The built-in tuner: for ``algo="auto"`` (the default), the algorithm whose predicted cost in model-written tokens
is lowest, and its chunking.

The cost of a call is the most tokens any one rank's model writes (qccl_plugins.cost: every rank's schedule priced
launch by launch and replayed on flags in lockstep). Ties go to the ring, NCCL's default. Registered through the
``qccl_plugins`` entry point and marked ``trylast``, so a tuner a user registers answers first::

    import qccl
    comms = qccl.Communicator.init_all(4)
    with qccl.group():
        for c in comms:
            c.allreduce(x[c.rank], y[c.rank])       # algo="auto": ring or multicast, whichever writes fewer tokens

Held against the interpreter by ``python -m qccl_bench.tuner_check`` (both algorithms run on every shape of a grid,
auto must never write more tokens on the busiest rank than the cheaper of them).
"""
from __future__ import annotations

from qccl import schedule as SC
from qccl.hookspecs import Tuning, hookimpl

from . import cost

ORDER = ("ring", "multicast")       # the preference on equal cost


def choose(request) -> Tuning:
    """The cheapest of ``request.algos`` by the cost model (ties: the earlier in ORDER), each at the most words per
    chunk its schedule allows on this heap (fewer never wrote fewer tokens: more steps, more launches). A collective
    with one algorithm is not priced; when the model finds every algorithm deadlocks, the ring (the deadlock
    detector then names each rank's flag, as for a call that names the ring)."""
    if len(request.algos) == 1:
        return Tuning(request.algos[0], chunk(request, request.algos[0]), None, "qccl_plugins.tuner")
    best = None
    for algo in sorted(request.algos, key=lambda a: ORDER.index(a) if a in ORDER else len(ORDER)):
        est = cost.estimate(request.kind, request.nranks, request.size, algo, request.root, request.config,
                            request.op or "sum", request.dtype)
        if est.deadlock:
            continue
        if best is None or est.max < best.tokens:
            best = Tuning(algo, chunk(request, algo), est.max, "qccl_plugins.tuner")
    if best is None:        # the flags never allow progress (e.g. a one-slot FIFO): the ring, whose deadlock
        first = min(request.algos, key=lambda a: ORDER.index(a) if a in ORDER else len(ORDER))     # is reported
        best = Tuning(first, chunk(request, first), None, "qccl_plugins.tuner")
    return best


def chunk(request, algo: str) -> int:
    """The most words per chunk ``algo``'s schedule can use on this communicator's heap (qccl.schedule.max_chunk:
    the ring's slot; multicast: AllReduce min(slot, window / n), AllGather window / n, Broadcast the window), as
    the request gives it (``request.chunks``) or from the config's heap sizes."""
    if algo in request.chunks:
        return request.chunks[algo]
    return SC.max_chunk(cost._heap(request.nranks, 0, request.config), request.kind, algo)


@hookimpl(trylast=True)
def qccl_tune(request):
    return choose(request)
