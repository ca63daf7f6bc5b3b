"""points_ddpm: a DDPM (20 noise levels) on points of the glyph "7", its 32-unit denoiser split over 4 QwenGPUs.

Every training step and every sampling step on the machines is checked against the numpy replay on every rank; the
same denoiser trained in float64 on the same draws is the bound the fixed-point samples are compared with.

    python -m examples.points_ddpm --steps 2000 --samples 64 --json points.json --png points.png --save points.npz
"""
from __future__ import annotations

import numpy as np

from examples import common

from . import fixed, glyph, loader, split
from .machine import SplitDenoiser, check, check_step
from .reference import FloatDenoiser

D, H, T, L = 2, 32, 20, 5
BATCH = 8               # points sampled at a time on the machines


def train(sd: SplitDenoiser, draws: loader.Draws, sch, w1, w2, progress=None, log=None, fd=None, shift=lambda i: L,
          on_params=None, rebase: int = 0):
    """Train on the machines, checking each step against the replay on every rank; returns the final (w1, w2)
    (the replay's, equal to the machines'). ``shift(i)``: step i's learning-rate shift; ``on_params(i, w1, w2)``
    sees the parameters read back from the machines after each step; ``rebase``: a context rebase on every rank
    after every that many steps (0: never)."""
    x0q, eq = draws.x0_q, draws.eps_q
    for i in range(len(draws.t)):
        t, Li = int(draws.t[i]), int(shift(i))
        before, lb = sd.m.tokens_written(), sd.m.launches()
        err = sd.train_step(x0q[i], t, eq[i], sch, Li)
        after, la = sd.m.tokens_written(), sd.m.launches()
        w1, w2, e, _ = split.train_step(w1, w2, x0q[i], t, eq[i], sch, Li)
        m1, m2 = check_step(sd, i, w1, w2, err, e)
        if on_params is not None:
            on_params(i, m1, m2)
        if rebase and (i + 1) % rebase == 0:
            sd.m.rebase()
        if fd is not None:
            fd.train_step(draws.x0[i], t, draws.eps[i], sch, Li)      # the float64 bound, on the same draw
        if log is not None:
            log.add(i, before, after, lb, la, t=t)
        if progress is not None:
            progress.update(None, sum(sd.m.tokens_written()))
    return w1, w2


def sample_machines(sd: SplitDenoiser, xT: np.ndarray, sch, w1, w2) -> np.ndarray:
    """x_0 for every row of x_T, BATCH at a time on the machines, each DDIM step checked against the replay."""
    out = []
    for b in range(0, len(xT), sd.samples):
        xb = xT[b:b + sd.samples]
        trace = []
        want = split.sample(w1, w2, sch, xb, trace)
        steps = iter(trace)

        def on_step(t, e, steps=steps):
            tt, er, _ = next(steps)
            check(f"predicted noise (t={t})", b, e, np.broadcast_to(er, e.shape))

        got = sd.sample(xb, sch, on_step)
        check("samples", b, got, np.broadcast_to(want, got.shape))
        out.append(got[0])
    return np.concatenate(out)


def prepare(seed: int, steps: int, samples: int):
    """Everything a run draws from its seed: the glyph, its dense sample (the distance is taken to it), the initial
    Q8 parameters, the training draws and the float starting noise of the samples."""
    g = glyph.Glyph()
    rng = np.random.default_rng(seed)
    pool = g.sample(rng, 20000)
    dense = g.sample(np.random.default_rng(10_000 + seed), 4000)
    w1, w2 = split.init_params(rng, D, H)
    draws = loader.Draws.make(rng, pool, steps, T)
    return g, dense, w1, w2, draws, rng.standard_normal((samples, D))


def replay_only(seed: int, steps: int, samples: int) -> dict:
    """The replay and the float64 bound alone (no machines): the distance the QwenGPU run of the same seed, steps
    and samples gives, since the machines equal the replay bit for bit at every step."""
    sch = fixed.schedule(T)
    g, dense, w1, w2, draws, xT_f = prepare(seed, steps, samples)
    fd = FloatDenoiser.from_q8(w1, w2)
    for i in range(steps):
        t = int(draws.t[i])
        w1, w2, _, _ = split.train_step(w1, w2, draws.x0_q[i], t, draws.eps_q[i], sch, L)
        fd.train_step(draws.x0[i], t, draws.eps[i], sch, L)
    xs = split.sample(w1, w2, sch, fixed.q8(xT_f)) / fixed.ONE
    return {"steps": steps, "samples": samples, "distance_replay": round(glyph.two_sided(xs, dense), 4),
            "distance_float64": round(glyph.two_sided(fd.sample(sch, xT_f), dense), 4)}


def main(argv=None) -> dict:
    ap = common.parser("point-cloud DDPM on 4 QwenGPUs", steps=2000)
    ap.add_argument("--samples", type=int, default=64, help="points sampled on the machines (8 at a time)")
    args = ap.parse_args(argv)
    common.check_steps(args.steps)
    if args.samples < 1:
        raise SystemExit(f"--samples {args.samples}: at least 1")
    sch = fixed.schedule(T)
    g, dense, w1, w2, draws, xT_f = prepare(args.seed, args.steps, args.samples)
    fd = FloatDenoiser.from_q8(w1, w2)
    xT = fixed.q8(xT_f)

    sd = SplitDenoiser(D=D, H=H, samples=BATCH, backend=args.backend)
    sd.load(w1, w2)
    if not args.quiet:
        print("memory per rank:")
        common.print_memory_map(sd.m.memory_map())
    log = common.StepLog()
    bar = common.Progress(args.steps, "points_ddpm", args.quiet)
    w1, w2 = train(sd, draws, sch, w1, w2, bar, log, fd, rebase=common.rebase_every(args.rebase_every, args.backend))
    bar.close()
    train_s = bar.seconds
    tokens_before = sd.m.tokens_written()
    samples_q = sample_machines(sd, xT, sch, w1, w2)
    sample_tokens = [a - b for a, b in zip(sd.m.tokens_written(), tokens_before)]
    samples = samples_q / fixed.ONE
    floats = fd.sample(sch, xT_f)
    report = {
        "run": "points_ddpm", "backend": args.backend, "steps": args.steps, "seed": args.seed,
        "T": T, "hidden": H, "ranks": 4, "lr_shift": L,
        "tokens_per_step": common.tokens_per_step(log.rows),
        "launches_per_step": log.rows[-1]["launches"],
        "memory": sd.m.memory_map(),
        "train_seconds": round(train_s, 1),
        "samples": args.samples,
        "sampling_tokens_per_rank": sample_tokens,
        "distance_qwengpu": round(glyph.two_sided(samples, dense), 4),
        "distance_float64": round(glyph.two_sided(floats, dense), 4),
        "replay_checked_steps": args.steps,
        "rebases": sd.m.rebases(),
    }
    if args.verify:
        report["verify"] = common.verify_contexts(sd.m, args.verify)
    if not args.quiet:
        print(f"two-sided distance to the glyph, {args.samples} samples: QwenGPUs {report['distance_qwengpu']}, "
              f"float64 {report['distance_float64']} (seed: 0.101 and 0.090)")
        print(f"tokens per rank per training step: {report['tokens_per_step']}")
    common.write_json(args.json, report)
    common.save_npz(args.save, {f"W1_rank{r}": w1[r] for r in range(4)} | {f"W2_rank{r}": w2[r] for r in range(4)}
                    | {"samples": samples_q})
    if args.png:
        plot(args.png, g, samples, floats, report)
    return report


def plot(path: str, g: glyph.Glyph, samples: np.ndarray, floats: np.ndarray, report: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import PathPatch
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.2))
    for ax, pts, title in ((axes[0], samples, f"QwenGPUs, Q8: {report['distance_qwengpu']}"),
                           (axes[1], floats, f"float64: {report['distance_float64']}")):
        for p in g.paths:
            ax.add_patch(PathPatch(p, facecolor="#dde4ee", edgecolor="#8899aa", lw=0.8))
        ax.scatter(pts[:, 0], pts[:, 1], s=9, c="#c0392b")
        ax.set_xlim(-1.6, 1.6)
        ax.set_ylim(-1.6, 1.6)
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=10)
    fig.suptitle(f"points_ddpm: {report['samples']} samples after {report['steps']} steps (two-sided distance)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
