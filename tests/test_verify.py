"""Chunked verify mode on the bf16 model: a recorded multi-rank AllReduce checked many positions per forward, at
checkpoints along the stream; a wrong recording is caught. The full 4-rank x 16-word figure against greedy
decoding is qccl_bench.verify_speed."""
import pytest

from qwengpu import Device, MachineError
from qwengpu import tokens as T
from qwengpu.circuit.exact import CircuitBackend
from qwengpu.circuit.model import ModelBackend
from qwengpu.circuit.verify import Verifier, verify_chunked, verify_ranks

from qccl_bench.verify_speed import record_allreduce


@pytest.fixture(scope="module")
def streams():
    return record_allreduce(nranks=4, count=4)


def test_recorded_allreduce_rank_verifies_in_chunks_at_checkpoints(streams):
    stream = streams[1]
    verifier = Verifier(ModelBackend(dtype="bfloat16"), chunk=192)
    middle = len(stream) // 2
    first = verifier.check(stream[:middle])
    assert first.fed == middle and first.mismatches == []
    result = verifier.check(stream)                      # only the new positions are fed
    assert result.fed == len(stream)
    assert result.compared == sum(t.origin == T.MODEL for t in stream[1:]) > 100
    assert result.mismatches == [], str(result)
    assert result.positions_per_second > 0 and result.min_margin >= 8


def test_a_wrong_recorded_token_is_a_mismatch_at_its_position():
    dev = Device()
    dev.write(9, [0x12345678])
    dev.read(9, 1)
    stream = list(dev.tokens)
    last = len(stream) - 1                               # the hi VAL the model wrote: 0x1234
    assert stream[last].origin == T.MODEL
    stream[last] = T.Token(T.VAL(0x1235), T.MODEL)
    results = verify_ranks({0: dev.tokens, 1: stream}, lambda rank: ModelBackend(dtype="bfloat16"), chunk=8)
    assert results[0].mismatches == []
    assert results[1].mismatches == [(last, T.VAL(0x1235), T.VAL(0x1234))]


def test_verifier_refuses_what_it_cannot_check():
    with pytest.raises(MachineError, match="has no feed_many"):
        Verifier(CircuitBackend())
    backend = ModelBackend(dtype="bfloat16")
    with pytest.raises(MachineError, match="path one of"):
        Verifier(backend, path="fast")
    verifier = Verifier(backend, chunk=4)
    dev = Device()
    dev.write(1, [5])
    verifier.check(dev.tokens)
    with pytest.raises(MachineError, match="whole stream recorded so far"):
        verifier.check(dev.tokens[:2])


@pytest.mark.slow  # make verify: per-token bf16 decode for comparison
def test_verify_chunked_equals_per_token_verify_on_a_short_stream():
    """The chunked pass agrees with the decode path on what it compares (the induction's two forms)."""
    from qwengpu.circuit.verify import verify
    dev = Device()
    dev.write(3, [-7, 1 << 20])
    dev.read(3, 2)
    chunked = verify_chunked(ModelBackend(dtype="bfloat16"), dev.tokens, chunk=5)
    single = verify(ModelBackend(dtype="bfloat16"), dev.tokens)
    assert (chunked.compared, chunked.mismatches) == (single.compared, single.mismatches) == (4, [])
