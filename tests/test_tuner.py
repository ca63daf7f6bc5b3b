"""The tuner: algo="auto" runs the algorithm that writes fewer tokens, held against token counts measured on the
interpreter (both algorithms run, the cheaper one must be the one auto ran); a tuner registered from outside wins."""
from __future__ import annotations

import numpy as np
import pytest

import qccl
from qccl_bench.harness import run
from qccl_plugins import cost

# Shapes where either algorithm wins, including the ones where the ring beats multicast (the window's small blocks
# on 8 ranks, and 3 ranks x 16 words) and those where they are close.
CASES = [("allreduce", 2, 1), ("allreduce", 3, 16), ("allreduce", 4, 16), ("allreduce", 8, 37),
         ("allgather", 3, 4), ("allgather", 8, 16), ("broadcast", 2, 4), ("broadcast", 4, 37)]


def _cost(kind, n, count, algo):
    o = run(n, kind, count, algo=algo, seed=count)
    assert o.ok, f"{kind} {algo} n={n} count={count}: wrong result"
    return max(o.tokens)


@pytest.mark.parametrize("kind,n,count", CASES)
def test_auto_never_costlier(kind, n, count):
    ring, mc, auto = (_cost(kind, n, count, a) for a in ("ring", "multicast", "auto"))
    assert auto == min(ring, mc), f"auto wrote {auto} tokens; ring {ring}, multicast {mc}"


def test_the_model_predicts_the_winner_and_exact_two_rank_ring_costs():
    """On 2 ranks nobody waits longer than the model says: its ring figures equal the interpreter's."""
    for kind, count in (("allreduce", 4), ("allreduce", 16), ("allgather", 16), ("broadcast", 37)):
        assert cost.estimate(kind, 2, count, "ring").max == _cost(kind, 2, count, "ring")


def test_the_choice_reports_its_chunk_and_predicted_cost():
    from qccl.hookspecs import TuneRequest
    from qccl_plugins import tuner
    # 4 ranks x 16 words: multicast is the cheaper (measured in test_auto_never_costlier); its AllReduce blocks are
    # a 16-word window shared by 4 ranks: 4 words
    t = tuner.choose(TuneRequest("allreduce", 4, 16, "int32", "sum", None, ("ring", "multicast"), {}))
    assert (t.algo, t.chunk) == ("multicast", 4) and t.tokens == cost.estimate("allreduce", 4, 16, "multicast").max
    t = tuner.choose(TuneRequest("reduce", 4, 16, "int32", "sum", 0, ("ring",), {"slot_words": 6}))
    assert (t.algo, t.chunk) == ("ring", 6)


def test_single_algorithm_collectives_and_the_config_default():
    assert run(3, "reduce", 5, algo=None, seed=1).ok
    comms = qccl.Communicator.init_all(3, config={"algo": "auto"})
    o = run(3, "reduce_scatter", 5, seed=2, comms=comms)
    assert o.ok
    o = run(3, "allgather", 4, seed=3, comms=comms)
    assert o.ok and max(o.tokens) == _cost("allgather", 3, 4, "multicast")


class AlwaysRing:
    def __init__(self):
        self.asked = []

    @qccl.hookimpl
    def qccl_tune(self, request):
        self.asked.append(request)
        return qccl.Tuning("ring", source="test")


class Bogus:
    @qccl.hookimpl
    def qccl_tune(self, request):
        return qccl.Tuning("tree", source="bogus-tuner")


def test_a_tuner_registered_from_outside_overrides():
    pm = qccl.plugin_manager()
    mine = AlwaysRing()
    pm.register(mine, name="always-ring")
    try:
        auto = _cost("allgather", 4, 4, "auto")
    finally:
        pm.unregister(mine)
    assert auto == _cost("allgather", 4, 4, "ring") > _cost("allgather", 4, 4, "multicast")
    req = mine.asked[0]
    assert (req.kind, req.nranks, req.count, req.dtype, req.algos) == ("allgather", 4, 4, "int32",
                                                                        ("ring", "multicast"))


def test_a_tuner_choosing_an_unknown_algorithm_is_refused_before_anything_moves():
    pm = qccl.plugin_manager()
    pm.register(Bogus(), name="bogus")
    try:
        comms = qccl.Communicator.init_all(2)
        x = np.arange(4, dtype=np.int32)
        y = np.zeros(4, np.int32)
        with pytest.raises(qccl.InvalidArgument, match="bogus-tuner chose algorithm 'tree'"):
            comms[0].allreduce(x, y, algo="auto")
        assert comms[0].stats["tokens_written"] == 0 and not y.any()
    finally:
        pm.unregister(name="bogus")
