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
    """The cheapest (algorithm, chunk) of ``request.algos`` by the cost model (ties: the earlier in ORDER, then the
    larger chunk). Chunks priced per algorithm: the most its schedule allows on this heap, and the even split (the
    same number of rounds with equal chunks, e.g. 16 words on a 5-word window block: 4 x 4 rather than 5 + 5 + 5 + 1).
    A collective with one algorithm, or one the model does not price (reduce, reduce_scatter), runs at the most; when
    the model finds every algorithm deadlocks, the ring (the deadlock detector then names each rank's flag, as for a
    call that names the ring)."""
    if len(request.algos) == 1 or request.kind not in cost.PRICED:
        return Tuning(request.algos[0], chunk(request, request.algos[0]), None, "qccl_plugins.tuner")
    best = None
    for algo in sorted(request.algos, key=lambda a: ORDER.index(a) if a in ORDER else len(ORDER)):
        for c in candidates(request, algo):
            est = cost.estimate(request.kind, request.nranks, request.size, algo, request.root, request.config,
                                request.op or "sum", request.dtype, c)
            if est.deadlock:
                continue
            if best is None or est.max < best.tokens:
                best = Tuning(algo, c, est.max, "qccl_plugins.tuner")
    if best is None:        # the flags never allow progress (e.g. a one-slot FIFO): the ring, whose deadlock
        first = min(request.algos, key=lambda a: ORDER.index(a) if a in ORDER else len(ORDER))     # is reported
        best = Tuning(first, chunk(request, first), None, "qccl_plugins.tuner")
    return best


def candidates(request, algo: str) -> list[int]:
    """The chunks the built-in tuner prices for ``algo``: the most, then the even split of the same rounds."""
    most, size, n = chunk(request, algo), request.size, request.nranks
    per_round = n * most if request.kind == "allreduce" else most       # allreduce: a round is n blocks
    rounds = max(1, -(-size // per_round))
    even = -(-size // rounds)
    if request.kind == "allreduce":
        even = -(-even // n)
    return [most] + ([even] if 1 <= even < most else [])


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
