"""The diffusion runs (examples/points_ddpm, examples/latent_ddpm): the split denoiser on 4 interpreter-backed
QwenGPUs equals the numpy replay bit for bit on every rank after every training and sampling step; the replay's
arithmetic tracks the float64 denoiser; the schedule, glyph distance and encoder against independent references.
Full-length runs: `python -m qccl_bench.diffusion_figures` (README, "Diffusion").
"""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from examples import common
from examples.points_ddpm import fixed, glyph, loader, split
from examples.points_ddpm.machine import SplitDenoiser, check, check_step
from examples.points_ddpm.reference import FloatDenoiser

ROOT = Path(__file__).resolve().parents[1]
SCH = fixed.schedule(20)


def test_schedule_integers_follow_the_float_schedule():
    a, s = SCH.A.astype(float) / 256, SCH.S.astype(float) / 256
    assert np.all(np.abs(a * a + s * s - 1) < 4 / 256)                 # variance preserving, up to Q8 rounding
    assert np.all(np.diff(SCH.A) <= 0) and np.all(np.diff(SCH.S) >= 0) and np.all(np.diff(SCH.F) > 0)
    for t in range(1, 21):
        c1, c2 = SCH.ddim_float(t)
        assert abs(SCH.C1[t] - 256 * c1) <= 0.5 and abs(SCH.C2[t] - 256 * c2) <= 0.5
    with pytest.raises(ValueError, match="T=0"):
        fixed.schedule(0)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no host C compiler")
def test_rshift_is_c_arithmetic(tmp_path):
    values = [-1000001, -385, -384, -383, -129, -128, -127, -1, 0, 1, 127, 128, 129, 383, 384, 1000001]
    src = tmp_path / "r.c"
    src.write_text("#include <stdio.h>\nint main(void){int v[]={%s};for(int m=1;m<14;m++)for(int i=0;i<%d;i++)"
                   "printf(\"%%d\\n\",(v[i]+(1<<(m-1)))>>m);return 0;}\n" % (",".join(map(str, values)), len(values)))
    subprocess.run(["cc", "-O1", "-o", str(tmp_path / "r"), str(src)], check=True)
    c = [int(x) for x in subprocess.run([str(tmp_path / "r")], capture_output=True, text=True).stdout.split()]
    ours = [int(fixed.rshift(np.int64(v), m)) for m in range(1, 14) for v in values]
    assert ours == c
    with pytest.raises(ValueError, match="m=0"):
        fixed.rshift(5, 0)


def test_replay_tracks_the_float64_denoiser():
    """The integer replay is the float64 model up to Q8 rounding: same draws, same init, close predictions."""
    rng = np.random.default_rng(3)
    w1, w2 = split.init_params(rng, 2, 32)
    fd = FloatDenoiser.from_q8(w1, w2)
    draws = loader.Draws.make(rng, rng.uniform(-1, 1, (100, 2)), 150, 20)
    for i in range(150):
        w1, w2, e, _ = split.train_step(w1, w2, draws.x0_q[i], int(draws.t[i]), draws.eps_q[i], SCH, 5)
        fd.train_step(draws.x0[i], int(draws.t[i]), draws.eps[i], SCH, 5)
    x = rng.standard_normal((64, 2))
    for t in (1, 10, 20):
        got = split.predict(w1, w2, fixed.q8(x), t, SCH) / 256
        want = fd.predict(x, t, SCH)
        assert np.abs(got - want).mean() < 0.08, t
    assert np.abs(split.sample(w1, w2, SCH, fixed.q8(x)) / 256 - fd.sample(SCH, x)).mean() < 0.3


def test_replay_refuses_int32_overflow():
    w1, w2 = split.init_params(np.random.default_rng(0), 2, 32)
    w1[:] = 1 << 20
    with pytest.raises(OverflowError, match="int32"):
        split.predict(w1, w2, np.full((1, 2), 1 << 12), 5, SCH)


def test_glyph_distance():
    g = glyph.Glyph()
    rng = np.random.default_rng(0)
    pts, dense = g.sample(rng, 300), g.sample(rng, 3000)
    assert g.inside(pts).all() and not g.inside(np.array([[1.5, 1.5]])).any()
    near = glyph.two_sided(pts, dense)
    assert near < 0.05
    assert glyph.two_sided(pts + [0.6, 0.0], dense) > near + 0.2
    assert glyph.two_sided(rng.uniform(-1, 1, (300, 2)), dense) > near + 0.1      # uniform noise is far


def test_encoder_signs_agree_across_linear_algebra_libraries():
    import scipy.linalg
    import torch
    from examples.latent_ddpm.encoder import Encoder, fix_signs
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 12)) @ rng.normal(size=(12, 12))
    enc = Encoder.fit(x, 8)
    xc = x - x.mean(0)
    _, _, vt = np.linalg.svd(xc, full_matrices=False)                  # numpy SVD
    vals, vecs = scipy.linalg.eigh(xc.T @ xc / len(x))                  # scipy eigh
    tvals, tvecs = torch.linalg.eigh(torch.tensor(xc.T @ xc / len(x)))  # torch
    for other in (vt[:8].T, vecs[:, ::-1][:, :8], tvecs.numpy()[:, ::-1][:, :8]):
        np.testing.assert_allclose(fix_signs(other), enc.components, atol=1e-8)
        np.testing.assert_allclose(fix_signs(-other), enc.components, atol=1e-8)
    z = enc.encode(x)
    np.testing.assert_allclose(z.std(0), 1, atol=1e-9)
    np.testing.assert_allclose(np.cov(z.T, bias=True), np.eye(8), atol=1e-9)


def test_denoiser_ptx_is_checked_in():
    # the fallback where NVRTC is missing must be what NVRTC makes of the .cu (regen: python -m qwengpu.toolchain regen)
    from qwengpu.toolchain import NVRTCUnavailable, compile_cuda
    cu = ROOT / "examples/points_ddpm/denoiser.cu"
    try:
        fresh = compile_cuda(cu.read_text(), name=cu.name)
    except NVRTCUnavailable as e:
        pytest.skip(f"NVRTC unavailable: {e}")
    assert fresh == cu.with_suffix(".ptx").read_text()


def _train_and_check(sd, w1, w2, steps, seed):
    rng = np.random.default_rng(seed)
    draws = loader.Draws.make(rng, rng.standard_normal((20, sd.D)), steps, 20)
    for i in range(steps):
        t = int(draws.t[i])
        err = sd.train_step(draws.x0_q[i], t, draws.eps_q[i], SCH, 5)
        w1, w2, e, _ = split.train_step(w1, w2, draws.x0_q[i], t, draws.eps_q[i], SCH, 5)
        check_step(sd, i, w1, w2, err, e)
    return w1, w2


def _sample_and_check(sd, w1, w2, n):
    xT = fixed.q8(np.random.default_rng(7).standard_normal((n, sd.D)))
    trace = []
    want = split.sample(w1, w2, SCH, xT, trace)
    seen = []
    got = sd.sample(xT, SCH, on_step=lambda t, e: seen.append((t, e)))
    assert [t for t, _ in seen] == list(range(20, 0, -1))
    for (t, e), (_, er, _) in zip(seen, trace):
        check("predicted noise", t, e, np.broadcast_to(er, e.shape))
    check("samples", 0, got, np.broadcast_to(want, got.shape))
    return got


@pytest.mark.parametrize("D,H,samples", [(2, 32, 8), (8, 16, 1)], ids=["points", "latent"])
def test_split_denoiser_equals_the_replay_on_every_rank(D, H, samples):
    sd = SplitDenoiser(D=D, H=H, samples=samples)
    assert sd.m.memory_map()[-1]["words"] <= 127
    assert sd.spill == (D == 8)           # latent_ddpm lends the bias row to the backward; points_ddpm has room
    w1, w2 = split.init_params(np.random.default_rng(0), D, H)
    sd.load(w1, w2)
    before = sd.m.tokens_written()
    w1, w2 = _train_and_check(sd, w1, w2, 2, seed=1)
    assert min(b - a for a, b in zip(before, sd.m.tokens_written())) > 1000      # the machines did the work
    _sample_and_check(sd, w1, w2, 1)


def test_a_wrong_word_is_caught():
    sd = SplitDenoiser(D=8, H=16, samples=1)
    w1, w2 = split.init_params(np.random.default_rng(0), 8, 16)
    sd.load(w1, w2)
    w1, w2 = _train_and_check(sd, w1, w2, 1, seed=2)
    wrong = w2[2].reshape(-1).copy()
    wrong[5] += 1
    sd.m.run({2: [sd.m.write(sd.w2, wrong)]})
    with pytest.raises(common.ReplayMismatch, match="rank 2: w2: .*index 5"):
        check_step(sd, 1, w1, w2, np.zeros((4, 8), np.int64), np.zeros(8, np.int64))


def test_sampling_refuses_more_rows_than_the_layout_holds():
    import qccl
    sd = SplitDenoiser(D=8, H=16, samples=1)
    with pytest.raises(qccl.InvalidArgument, match="2 samples at a time: this layout holds 1..1"):
        sd.sample(np.zeros((2, 8), np.int64), SCH)
    with pytest.raises(qccl.InvalidArgument, match="H=10 hidden units do not split over 4 ranks"):
        SplitDenoiser(D=8, H=10)


def test_points_run_command(tmp_path):
    import json
    from examples.points_ddpm.run import main
    out = tmp_path / "p.json"
    report = main(["--steps", "3", "--samples", "1", "--quiet", "--json", str(out), "--png", str(tmp_path / "p.png"),
                   "--save", str(tmp_path / "p.npz"), "--rebase-every", "2"])
    assert json.loads(out.read_text())["replay_checked_steps"] == 3 == report["steps"]
    assert report["rebases"] == [1, 1, 1, 1]        # a fresh context after step 2; steps 3 and sampling still exact
    assert report["tokens_per_step"]["min"] > 1000
    assert (tmp_path / "p.png").stat().st_size > 1000
    saved = np.load(tmp_path / "p.npz")
    assert saved["W1_rank0"].shape == (4, 8) and saved["samples"].shape == (1, 2)


def test_first_latent_kernels_on_the_circuit():
    """CI's share of the circuit check: rank 0's first latent_ddpm launches (dn_noise, then the output-bias row's
    dn_update), recorded by the interpreter at the run's addresses and fed to the compiled circuit
    (qwengpu.circuit.verify): the circuit must predict every token the interpreter wrote. Whole training steps of
    both runs on four circuit-backed QwenGPUs: `python -m qccl_bench.diffusion_figures --circuit 1`."""
    from qwengpu import Device
    from qwengpu.circuit.exact import CircuitBackend
    from qwengpu.circuit.verify import verify
    from examples.points_ddpm import machine as M
    sd = SplitDenoiser(D=8, H=16, samples=1)        # only for its word map (the heap's apertures stay clear)
    w1, w2 = split.init_params(np.random.default_rng(0), 8, 16)
    rng = np.random.default_rng(1)
    x0, eps = fixed.q8(rng.standard_normal(8)), fixed.q8(rng.standard_normal(8))
    dev = Device()
    dev.alloc(127 - sd.w1, at=sd.w1)
    dev.write(sd.w1, w1[0].reshape(-1).astype(np.int32))
    dev.write(sd.w2, w2[0].reshape(-1).astype(np.int32))
    dev.write(sd.u, np.concatenate([x0, [SCH.F[7], 256]]).astype(np.int32))
    dev.write(sd.out, eps.astype(np.int32))
    for k, threads, args in ((M.NOISE, 8, (sd.u, sd.out, sd.bias, SCH.A[7], SCH.S[7], 1)),
                             (M.UPDATE, 8, (sd.bias, sd.one, sd.out, 1, 8, 4))):
        dev.launch(dev.load_kernel(k.source, k.name), threads, [int(a) for a in args])
    want_x = split.noised(x0[None], eps[None], 7, SCH)[0]
    np.testing.assert_array_equal(dev.read(sd.u, 8), want_x)                          # the interpreter is right...
    np.testing.assert_array_equal(dev.read(sd.bias, 8), w2[0, 4] - fixed.rshift(w2[0, 4] - eps, 4))
    result = verify(CircuitBackend(), dev.tokens, stop_after=1)                       # ...and the circuit agrees
    assert result.compared > 100
    assert result.mismatches == [], str(result)


def test_latent_run_command(tmp_path):
    """A tiny latent_ddpm run end to end (500 images, 1 epoch, 2 candidate seeds, 2 steps, 1 digit): the seed is
    picked by the replay, every step checked, and the page's files written from the machines' words."""
    import json
    from examples.latent_ddpm.run import main
    report = main(["--steps", "2", "--samples", "1", "--candidates", "2", "--limit", "500", "--epochs", "1",
                   "--checkpoints", "2", "--quiet", "--png", str(tmp_path / "l.png"), "--web", str(tmp_path)])
    assert report["training_seed"] in (0, 1) and report["replay_checked_steps"] == 2
    assert report["tokens_per_step"]["min"] > 1000
    model = json.loads((tmp_path / "model.json").read_text())
    assert [c["step"] for c in model["checkpoints"]] == [0, 1, 2]
    final = model["checkpoints"][-1]
    want = split.sample(np.array(final["w1"]), np.array(final["w2"]), SCH, np.array(model["replay"]["xT"]))
    np.testing.assert_array_equal(np.array(model["replay"]["x0"]), want)
    assert (tmp_path / "decoder.bin").stat().st_size == 4 * (8 * 128 + 128 + 128 * 784 + 784)
