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


def _predicted(kind, n, count):
    from qccl.hookspecs import TuneRequest
    from qccl_plugins import tuner
    return tuner.choose(TuneRequest(kind, n, count, "int32", "sum" if kind == "allreduce" else None, 0,
                                    ("ring", "multicast"), {}))


@pytest.mark.parametrize("kind,n,count", CASES)
def test_auto_never_costlier(kind, n, count):
    """Auto writes no more than the cheaper algorithm at the heap's chunking (fewer where its chunking is better),
    and exactly what the tuner predicted."""
    ring, mc, auto = (_cost(kind, n, count, a) for a in ("ring", "multicast", "auto"))
    assert auto <= min(ring, mc), f"auto wrote {auto} tokens; ring {ring}, multicast {mc}"
    assert auto == _predicted(kind, n, count).tokens


def test_the_built_in_tuner_chooses_the_chunking():
    """3 ranks, 16 words: the multicast AllGather's 5-word blocks take rounds of 5, 5, 5, 1; four rounds of 4 write
    fewer tokens, and the tuner picks them (below both algorithms at the heap's chunking)."""
    t = _predicted("allgather", 3, 16)
    assert (t.algo, t.chunk) == ("multicast", 4)
    auto, ring, mc = (_cost("allgather", 3, 16, a) for a in (None, "ring", "multicast"))
    assert auto == t.tokens < min(ring, mc)
    assert _predicted("allreduce", 4, 16).chunk == 4          # 16 words fill one round of 4 x 4: the most


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


def test_the_model_is_exact_on_the_interpreter():
    """Every rank's predicted tokens equal the interpreter's, both algorithms, ring or multicast winning, other heaps
    too (qccl_bench.tuner_check holds it over 325 shapes)."""
    for kind, n, count, cfg in (("allreduce", 4, 16, {}), ("allreduce", 8, 100, {}), ("broadcast", 8, 1, {}),
                                ("allgather", 3, 4, {"slot_words": 4, "window_words": 8}),
                                ("allreduce", 5, 37, {"window_words": 32})):
        for algo in ("ring", "multicast"):
            o = run(n, kind, count, algo=algo, seed=n, config=cfg)
            assert o.ok and list(cost.estimate(kind, n, count, algo, 0, cfg).tokens) == o.tokens, (kind, n, algo)


def test_auto_is_the_default():
    assert qccl.Config().algo == "auto"
    for kind, n, count in (("allreduce", 4, 16), ("allgather", 8, 37), ("allreduce", 3, 16)):
        default = _cost(kind, n, count, None)
        assert default <= min(_cost(kind, n, count, a) for a in ("ring", "multicast"))
        assert default == _predicted(kind, n, count).tokens
    assert _cost("allreduce", 4, 16, None) == 308 < _cost("allreduce", 4, 16, "ring") == 463


def test_the_tuner_prices_words_not_elements():
    """Copy collectives move any dtype as padded words: 9 int64 are 18 words per block, 7 int8 two."""
    from qccl.hookspecs import TuneRequest
    seen = []

    class Spy:
        @qccl.hookimpl
        def qccl_tune(self, request):
            seen.append(request)

    pm = qccl.plugin_manager()
    pm.register(Spy(), name="spy")
    try:
        comms = qccl.Communicator.init_all(4)
        for dtype, count in ((np.int64, 9), (np.int8, 7)):
            x = [np.arange(count, dtype=dtype) + r for r in range(4)]
            y = [np.zeros(4 * count, dtype) for _ in range(4)]
            with qccl.group():
                for c in comms:
                    c.allgather(x[c.rank], y[c.rank])
            for r in range(4):
                np.testing.assert_array_equal(y[r], np.concatenate(x))
    finally:
        pm.unregister(name="spy")
    assert [(q.count, q.block_words, q.dtype) for q in seen[::4]] == [(9, 18, "int64"), (7, 2, "int8")]
    assert seen[0].chunks == {"ring": 8, "multicast": 4}
    assert isinstance(seen[0], TuneRequest)


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


class Chunker:
    """A user's tuner that picks the algorithm and cuts every call into ``words``-word chunks."""

    def __init__(self, algo, words):
        self.algo, self.chunk_words, self.asked = algo, words, []

    @qccl.hookimpl
    def qccl_tune(self, request):
        self.asked.append(request)
        algo = self.algo if self.algo in request.algos else request.algos[0]
        return qccl.Tuning(algo, self.chunk_words, source="chunker")


@pytest.mark.parametrize("kind,algo,words", [("allreduce", "ring", 3), ("allreduce", "multicast", 1),
                                             ("allgather", "ring", 2), ("allgather", "multicast", 1),
                                             ("broadcast", "ring", 5), ("broadcast", "multicast", 3),
                                             ("reduce_scatter", "ring", 2), ("reduce", "ring", 1)])
def test_a_tuner_from_outside_chooses_the_chunking(kind, algo, words):
    """Smaller chunks than the heap's: the same result as numpy, more launches; the call's signature says so."""
    n, count = 4, 13
    plain = run(n, kind, count, "max", root=2, algo=algo, seed=5)
    pm = qccl.plugin_manager()
    mine = Chunker(algo, words)
    pm.register(mine, name="chunker")
    try:
        tuned = run(n, kind, count, "max", root=2, algo="auto", seed=5)
    finally:
        pm.unregister(mine)
    assert plain.ok and tuned.ok, "wrong result"
    for r in range(n):
        np.testing.assert_array_equal(tuned.outs[r], tuned.expected[r])
    assert sum(tuned.launches) > sum(plain.launches), "smaller chunks are more steps"
    assert len(mine.asked) == n and mine.asked[0].chunks[algo] >= words


def test_a_chunk_outside_the_heap_is_refused_before_anything_moves():
    pm = qccl.plugin_manager()
    mine = Chunker("ring", 9)           # the default heap's ring slot holds 8 words
    pm.register(mine, name="chunker")
    try:
        comms = qccl.Communicator.init_all(2)
        x, y = np.arange(20, dtype=np.int32), np.zeros(20, np.int32)
        with pytest.raises(qccl.InvalidArgument, match=r"chunker chose chunk=9 words for ring; .* 1\.\.8 words"):
            comms[0].allreduce(x, y)
        mine.chunk_words = 0
        with pytest.raises(qccl.InvalidArgument, match=r"chunk=0 words"):
            comms[0].allreduce(x, y)
        assert comms[0].stats["tokens_written"] == 0 and not y.any()
    finally:
        pm.unregister(mine)


def test_chunks_differing_between_ranks_are_a_mismatch():
    """The chunking is part of the call's signature: ranks cut differently are refused by the cross-rank check."""
    comms = qccl.Communicator.init_all(2)
    pm = qccl.plugin_manager()
    x = [np.arange(12, dtype=np.int32) for _ in range(2)]
    y = [np.zeros(12, np.int32) for _ in range(2)]
    with pytest.raises(qccl.QcclError, match="ring:3"):
        with qccl.group():
            for c in comms:
                mine = Chunker("ring", 3 + c.rank)
                pm.register(mine, name="chunker")
                try:
                    c.allreduce(x[c.rank], y[c.rank])
                finally:
                    pm.unregister(mine)
    assert not y[0].any() and not y[1].any()
