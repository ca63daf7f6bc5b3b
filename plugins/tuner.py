"""The built-in tuner: for ``algo="auto"``, the algorithm whose predicted cost in model-written tokens is lowest.

The cost of a call is the most tokens any one rank's model writes (qccl_plugins.cost: every rank's schedule priced
launch by launch and replayed on flags in lockstep). Ties go to the ring, NCCL's default. Registered through the
``qccl_plugins`` entry point and marked ``trylast``, so a tuner a user registers answers first::

    import qccl
    comms = qccl.Communicator.init_all(4)
    with qccl.group():
        for c in comms:
            c.allreduce(x[c.rank], y[c.rank], algo="auto")      # ring or multicast, whichever writes fewer tokens
"""
from __future__ import annotations

from qccl.hookspecs import Tuning, hookimpl

from . import cost

ORDER = ("ring", "multicast")       # the preference on equal cost


def choose(request) -> Tuning:
    """The cheapest of ``request.algos`` by the cost model (ties: the earlier in ORDER)."""
    if len(request.algos) == 1:         # nothing to choose (qccl.plugins.tune does not even ask)
        return Tuning(request.algos[0], chunk(request, request.algos[0]), None, "qccl_plugins.tuner")
    best = None
    for algo in sorted(request.algos, key=lambda a: ORDER.index(a) if a in ORDER else len(ORDER)):
        est = cost.estimate(request.kind, request.nranks, request.count, algo, request.root, request.config,
                            request.op or "sum", request.dtype)
        if est.deadlock:
            continue
        if best is None or est.max < best.tokens:
            best = Tuning(algo, chunk(request, algo), est.max, "qccl_plugins.tuner")
    return best


def chunk(request, algo: str) -> int:
    """The words per chunk the algorithm's schedule uses on this communicator's heap (qccl.schedule): the ring's slot;
    multicast: AllReduce min(slot, window / n), AllGather window / n, Broadcast the window. Reported with the choice;
    the heap's sizes (config slot_words, window_words) are what sets them."""
    heap = cost._heap(request.nranks, 0, request.config)
    if algo == "ring" or heap.multicast is None:
        return heap.slot_words
    window, n = heap.multicast.window_words, request.nranks
    return {"allreduce": min(heap.slot_words, window // n), "allgather": window // n}.get(request.kind, window)


@hookimpl(trylast=True)
def qccl_tune(request):
    return choose(request)
