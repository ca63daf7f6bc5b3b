"""Several ranks in one forward (qwengpu.circuit.batched): the ranks' token streams are the unbatched ones.

The reference is the interpreter running the same host operations on each rank; the batched runs go through
run_windows, the function QLink's lockstep calls for every window."""
import sys

import numpy as np
import pytest
import torch

from qwengpu import Device, MachineError
from qwengpu import tokens as T
from qwengpu.circuit.batched import Rendezvous, run_windows
from qwengpu.circuit.model import ModelBackend


def programs():
    """A different sequence of host copies per rank (different lengths, so ranks leave the batch at different
    times)."""
    rng = np.random.default_rng(5)
    out = []
    for rank in range(3):
        words = rng.integers(-2**31, 2**31, 2 + rank).astype(np.int32)

        def run(dev, words=words, rank=rank):
            dev.write(10 * rank, words)
            return dev.read(10 * rank, len(words))
        out.append((words, run))
    return out


def reference_streams():
    streams = []
    for _, run in programs():
        dev = Device()
        run(dev)
        streams.append([t.id for t in dev.tokens])
    return streams


def run_batched(devices, force=False):
    rendezvous = Rendezvous()
    runs = dict(enumerate(run for _, run in programs()))
    outcomes = run_windows(devices, list(devices), lambda r: runs[r](devices[r]), force=force, rendezvous=rendezvous)
    for rank, (words, _) in enumerate(programs()):
        assert not isinstance(outcomes[rank], Exception), outcomes[rank]
        np.testing.assert_array_equal(outcomes[rank], words)
    return rendezvous


def test_circuit_ranks_in_a_rendezvous_write_the_unbatched_streams():
    devices = {r: Device(backend="circuit") for r in range(3)}
    rendezvous = run_batched(devices, force=True)
    assert [[t.id for t in devices[r].tokens] for r in range(3)] == reference_streams()
    assert max(rendezvous.batch_sizes) == 3


@pytest.mark.slow  # make verify: bf16 model on three ranks
def test_bf16_model_ranks_share_one_forward_and_write_the_unbatched_streams():
    devices = {r: Device(backend="model", dtype="bfloat16") for r in range(3)}
    assert len({id(d.backend.model) for d in devices.values()}) == 1          # one model for the ranks
    rendezvous = run_batched(devices)
    streams = reference_streams()
    assert [[t.id for t in devices[r].tokens] for r in range(3)] == streams
    # A run ends at each prediction: batched, the three ranks' runs took fewer forwards than the runs alone, and
    # far fewer than one forward per token.
    runs = sum(sum(t.origin == T.MODEL for t in devices[r].tokens) for r in range(3))
    assert max(rendezvous.batch_sizes) == 3
    assert rendezvous.forwards < runs < max(len(s) for s in streams) * 3


def test_forward_batch_rows_equal_single_forwards():
    """Row i of a batched forward gives the logits a forward of backend i alone gives (bit for bit)."""
    tokens = [[65536 + 127 + 1 + 5, 7], [65536 + 3, 9]]         # READ 5 / MEM 3 then a VAL
    alone = []
    for sequence in tokens:
        backend = ModelBackend()
        for token in sequence:
            backend.feed(token)
        alone.append(backend._logits.clone())
    backends = [ModelBackend(), ModelBackend()]
    for step in range(2):
        ModelBackend.forward_batch(backends, [[sequence[step]] for sequence in tokens])
    for backend, logits in zip(backends, alone):
        assert torch.equal(backend._logits, logits)


def fed_one_by_one(feeds):
    """A model backend per token list, fed its tokens one forward each (the reference for batched runs)."""
    backends = [ModelBackend() for _ in feeds]
    for backend, sequence in zip(backends, feeds):
        for token in sequence:
            backend.feed(token)
    return backends


def test_batched_runs_equal_tokens_fed_one_by_one():
    """Runs of several tokens, one per rank, in one forward: every rank's logits and states are those of its
    tokens fed one by one, bit for bit (the chunked rule is exact on the compiled layers)."""
    rng = np.random.default_rng(11)
    feeds = [[int(t) for t in rng.integers(0, T.VOCAB_SIZE, 7)] for _ in range(2)]
    alone = fed_one_by_one(feeds)
    backends = [ModelBackend() for _ in range(2)]
    ModelBackend.forward_batch(backends, [sequence[:1] for sequence in feeds])
    ModelBackend.forward_batch(backends, [sequence[1:7] for sequence in feeds])
    for mine, theirs in zip(backends, alone):
        assert mine.position == theirs.position == 7
        assert torch.equal(mine._logits, theirs._logits)
        for layer, reference in zip(mine.cache.layers, theirs.cache.layers):
            assert torch.equal(layer.recurrent_states[0], reference.recurrent_states[0])
            assert torch.equal(layer.conv_states[0], reference.conv_states[0])
    with pytest.raises(MachineError, match="runs of one length"):
        ModelBackend.forward_batch(backends, [[1, 2], [3]])


def test_banked_ranks_keep_their_own_states_whatever_batches_they_form():
    """Ranks batch as a state bank (ModelBackend.forward_batch): once banked, each rank's cache views its row, so a
    batch of consecutive rows updates them in place; a batch of rows out of order or with a gap is gathered and
    scattered back; a lone feed writes the rank's row. Every rank's logits and states stay those of the same
    tokens fed alone, bit for bit."""
    from qwengpu.circuit.model import StateBank
    rng = np.random.default_rng(3)
    feeds = [[int(t) for t in rng.integers(0, T.VOCAB_SIZE, 5)] for _ in range(3)]
    alone = fed_one_by_one(feeds)
    a, b, c = banked = [ModelBackend() for _ in range(3)]
    fed = [0, 0, 0]

    def batch(*members):
        indices = [banked.index(m) for m in members]
        ModelBackend.forward_batch(list(members), [[feeds[i][fed[i]]] for i in indices])
        for i in indices:
            fed[i] += 1

    batch(a, b, c)                                     # banked: rows 0, 1, 2
    bank = a.bank[0]
    batch(a, c)                                        # rows 0 and 2: gathered and scattered back
    b.feed(feeds[1][fed[1]]); fed[1] += 1              # alone: into its own row
    batch(b, c)                                        # rows 1..2: a view of the bank
    batch(c, a)                                        # out of order: gathered
    a.feed(feeds[0][fed[0]]); fed[0] += 1
    batch(a, b)                                        # rows 0..1
    batch(b, c)
    assert fed == [5, 5, 5] and all(m.bank[0] is bank for m in banked)
    for row, (mine, theirs) in enumerate(zip(banked, alone)):
        assert torch.equal(mine._logits, theirs._logits), row
        for kind, layer, reference, rows in zip(mine.layer_types, mine.cache.layers, theirs.cache.layers,
                                                bank.cache.layers):
            assert kind == "linear_attention"
            assert torch.equal(layer.recurrent_states[0], reference.recurrent_states[0])
            assert torch.equal(layer.conv_states[0], reference.conv_states[0])
            # the rank's state is its row of the bank, not a copy of it
            assert layer.recurrent_states[0].data_ptr() == rows.recurrent_states[0][row].data_ptr()
            assert layer.conv_states[0].data_ptr() == rows.conv_states[0][row].data_ptr()
    assert isinstance(bank, StateBank)


def test_a_rank_that_fails_does_not_hold_the_others():
    devices = {r: Device(backend="circuit") for r in range(2)}

    def window(rank):
        if rank == 0:
            raise ValueError("rank 0 fails before feeding")
        devices[rank].write(0, [5])
        return devices[rank].read(0, 1)
    outcomes = run_windows(devices, [0, 1], window, force=True)
    assert isinstance(outcomes[0], ValueError)
    np.testing.assert_array_equal(outcomes[1], [5])


@pytest.mark.parametrize("force", [False])
def test_the_interpreter_runs_windows_in_order(force):
    devices = {r: Device() for r in range(2)}
    order = []
    run_windows(devices, [1, 0], lambda r: order.append(r), force=force)
    assert order == [1, 0]


def test_gpu_benchmark_skips_cleanly_without_a_gpu():
    import subprocess
    import sys
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: qccl_bench.model_gpu runs for real (a benchmark, not CI)")
    result = subprocess.run([sys.executable, "-m", "qccl_bench.model_gpu"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "skipped, no CUDA device" in result.stdout


def test_gpu_benchmark_refuses_fla_where_its_kernels_do_not_import(monkeypatch, capsys):
    from qccl_bench import model_gpu
    monkeypatch.setitem(sys.modules, "fla", None)     # fla's kernels unimportable, installed or not
    with pytest.raises(SystemExit) as refused:
        model_gpu.main(["--fla", "--device", "cpu"])
    assert refused.value.code == 2
    assert "--fla: flash-linear-attention's kernels do not import here (ModuleNotFoundError" in capsys.readouterr().err


def test_gpu_benchmark_refuses_an_unknown_collective():
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-m", "qccl_bench.model_gpu", "--collectives", "allreduce,allreduse"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "--collectives allreduse: not among allreduce, broadcast" in result.stderr
