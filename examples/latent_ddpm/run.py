"""latent_ddpm: diffusion on the 8 whitened principal components of digits, the 9 -> 16 -> 8 denoiser split over 4
QwenGPUs (4 hidden units and 80 words of weights each), the decoder and the judge on the CPU.

The training seed is picked before the real run by training the exact replay of a few candidate seeds and scoring
their samples; the replay predicts the QwenGPU run, so the run is then made with the best seed and checked against
the replay at every step on every rank.

    python -m examples.latent_ddpm --steps 2000 --samples 32 --json latent.json --png latent.png --web
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from examples import common, data
from examples.points_ddpm import fixed, loader, split
from examples.points_ddpm.machine import SplitDenoiser
from examples.points_ddpm.reference import FloatDenoiser
from examples.points_ddpm.run import sample_machines, train

from . import classifier, decoder, encoder

D, H, T, L0 = 8, 16, 20, 4
WEB = Path(__file__).resolve().parent / "web"


def shift_schedule(steps: int):
    """Learning rate 2^-4, 2^-5, 2^-6 over the three thirds of the run (a launch argument of the kernels)."""
    return lambda i: L0 + (3 * i) // steps


class Setup:
    """Data, encoder, decoder and judge: everything the QwenGPUs do not compute."""

    def __init__(self, data_dir=None, seed: int = 0, epochs: int = 3, limit: int | None = None):
        import torch
        torch.set_num_threads(1)
        ds = data.load(data_dir)
        train_images = ds.train_images[:limit] if limit else ds.train_images
        self.source = ds.source
        self.encoder = encoder.Encoder.fit(train_images, D)
        self.latents = self.encoder.encode(train_images)
        self.decoder = decoder.train_decoder(self.latents, train_images, epochs=epochs, seed=seed)
        self.judge = classifier.train_classifier(train_images, ds.train_labels[:len(train_images)], epochs=epochs,
                                                 seed=seed)
        test = ds.test_images[:2000]
        self.judge_accuracy = classifier.accuracy(self.judge, test, ds.test_labels[:2000])
        self.recognised_real = classifier.recognised(self.judge, test)
        self.recognised_decoded = classifier.recognised(self.judge,
                                                        decoder.decode(self.decoder, self.encoder.encode(test)))

    def score(self, latents_q: np.ndarray) -> float:
        """Share of decoded Q8 latents the judge recognises."""
        return classifier.recognised(self.judge, decoder.decode(self.decoder, latents_q / fixed.ONE))


def replay_run(setup: Setup, seed: int, steps: int, sch, n_samples: int = 200):
    """The replay alone for one seed: its final parameters, draws and a score from n_samples samples."""
    rng = np.random.default_rng(seed)
    w1, w2 = split.init_params(rng, D, H)
    init = (w1.copy(), w2.copy())
    draws = loader.Draws.make(rng, setup.latents, steps, T)
    shift = shift_schedule(steps)
    x0q, eq = draws.x0_q, draws.eps_q
    for i in range(steps):
        w1, w2, _, _ = split.train_step(w1, w2, x0q[i], int(draws.t[i]), eq[i], sch, shift(i))
    xT = fixed.q8(np.random.default_rng(50_000 + seed).standard_normal((n_samples, D)))
    return init, draws, (w1, w2), setup.score(split.sample(w1, w2, sch, xT))


def main(argv=None) -> dict:
    ap = common.parser("latent diffusion for digits on 4 QwenGPUs", steps=2000)
    ap.add_argument("--samples", type=int, default=32, help="digits sampled on the machines (one at a time)")
    ap.add_argument("--candidates", type=int, default=4, help="training seeds scored by the replay first")
    ap.add_argument("--data", help="a folder of MNIST IDX files (default: the installed MNIST, else sklearn digits)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs of the CPU decoder and judge")
    ap.add_argument("--limit", type=int, help="use only the first N training images (quick runs)")
    ap.add_argument("--checkpoints", type=int, default=10, help="checkpoints kept for the page")
    ap.add_argument("--web", nargs="?", const=str(WEB), metavar="DIR",
                    help="write the page's model files (model.json, decoder.bin) into DIR (default: web/)")
    args = ap.parse_args(argv)
    common.check_steps(args.steps)
    if args.samples < 1 or args.candidates < 1:
        raise SystemExit("--samples and --candidates must be at least 1")
    sch = fixed.schedule(T)
    say = (lambda *a: None) if args.quiet else print
    setup = Setup(args.data, args.seed, args.epochs, args.limit)
    say(f"data: {setup.source}; judge accuracy {setup.judge_accuracy:.3f}; recognised: real "
        f"{setup.recognised_real:.3f}, encoded-decoded {setup.recognised_decoded:.3f}")

    scores = {}
    for c in range(args.candidates):
        seed = args.seed + c
        try:
            scores[seed] = replay_run(setup, seed, args.steps, sch)[3]
        except OverflowError as e:          # the replay left int32: this seed's training diverges, skip it
            scores[seed] = -1.0
            say(f"candidate seed {seed}: diverges ({e})")
            continue
        say(f"candidate seed {seed}: the replay's samples are recognised {scores[seed]:.3f}")
    best = max(scores, key=lambda s: (scores[s], -s))
    if scores[best] < 0:
        raise SystemExit(f"every candidate seed diverges: {sorted(scores)}")
    (w1, w2), draws, _, _ = replay_run(setup, best, args.steps, sch, 1)
    say(f"training seed {best}")

    sd = SplitDenoiser(D=D, H=H, samples=1, backend=args.backend)
    sd.load(w1, w2)
    if not args.quiet:
        common.print_memory_map(sd.m.memory_map())
    fd = FloatDenoiser.from_q8(w1, w2)
    keep = set(np.linspace(0, args.steps, args.checkpoints + 1).astype(int).tolist())
    checkpoints = [{"step": 0, "w1": w1.tolist(), "w2": w2.tolist()}] if 0 in keep else []

    def on_params(i, m1, m2):
        if i + 1 in keep:
            checkpoints.append({"step": i + 1, "w1": m1.tolist(), "w2": m2.tolist()})

    log = common.StepLog()
    bar = common.Progress(args.steps, "latent_ddpm", args.quiet)
    w1, w2 = train(sd, draws, sch, w1, w2, bar, log, fd, shift_schedule(args.steps), on_params,
                   common.rebase_every(args.rebase_every, args.backend))
    bar.close()
    train_s = bar.seconds

    xT_f = np.random.default_rng(90_000 + best).standard_normal((args.samples, D))
    xT = fixed.q8(xT_f)
    before = sd.m.tokens_written()
    got = sample_machines(sd, xT, sch, w1, w2)
    sample_tokens = [a - b for a, b in zip(sd.m.tokens_written(), before)]
    floats = fd.sample(sch, xT_f)
    images = decoder.decode(setup.decoder, got / fixed.ONE)
    report = {
        "run": "latent_ddpm", "backend": args.backend, "steps": args.steps, "data": setup.source,
        "candidates": {str(k): round(v, 4) for k, v in scores.items()}, "training_seed": best,
        "T": T, "hidden": H, "ranks": 4, "lr_shifts": [L0, L0 + 1, L0 + 2],
        "tokens_per_step": common.tokens_per_step(log.rows),
        "launches_per_step": log.rows[-1]["launches"],
        "memory": sd.m.memory_map(),
        "train_seconds": round(train_s, 1),
        "samples": args.samples, "sampling_tokens_per_rank": sample_tokens,
        "threshold": classifier.THRESHOLD,
        "recognised_qwengpu": round(setup.score(got), 4),
        "recognised_float64": round(classifier.recognised(setup.judge, decoder.decode(setup.decoder, floats)), 4),
        "recognised_replay_candidates": round(scores[best], 4),
        "recognised_at_0.5": {"qwengpu": round(classifier.recognised(setup.judge, images, 0.5), 4),
                              "float64": round(classifier.recognised(
                                  setup.judge, decoder.decode(setup.decoder, floats), 0.5), 4)},
        "judge_accuracy": round(setup.judge_accuracy, 4),
        "recognised_real_test": round(setup.recognised_real, 4),
        "recognised_encoded_decoded_test": round(setup.recognised_decoded, 4),
        "replay_checked_steps": args.steps,
        "rebases": sd.m.rebases(),
    }
    if args.verify:
        report["verify"] = common.verify_contexts(sd.m, args.verify)
    say(f"recognised by the judge (p >= {classifier.THRESHOLD}): QwenGPUs {report['recognised_qwengpu']} of "
        f"{args.samples}, float64 {report['recognised_float64']} (seed: 76%); tokens per rank per step "
        f"{report['tokens_per_step']}")
    common.write_json(args.json, report)
    common.save_npz(args.save, {f"W1_rank{r}": w1[r] for r in range(4)} | {f"W2_rank{r}": w2[r] for r in range(4)})
    if args.png:
        grid(args.png, images, report)
    if args.web:
        export_web(Path(args.web), setup, sch, checkpoints, xT, got, report)
    return report


def grid(path: str, images: np.ndarray, report: dict, cols: int = 8) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = (len(images) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.0, rows * 1.0 + 0.5))
    for ax, i in zip(np.ravel(axes), range(rows * cols)):
        ax.axis("off")
        if i < len(images):
            ax.imshow(images[i].reshape(28, 28), cmap="gray_r", vmin=0, vmax=1)
    fig.suptitle(f"latent_ddpm on 4 QwenGPUs: {report['samples']} samples, recognised "
                 f"{report['recognised_qwengpu']:.0%}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def export_web(folder: Path, setup: Setup, sch, checkpoints: list, xT: np.ndarray, got: np.ndarray,
               report: dict) -> None:
    """The page's files: model.json (schedule integers, checkpoints, the machines' noise and results) and
    decoder.bin (the decoder's float32 weights, little-endian: W1, b1, W2, b2)."""
    folder.mkdir(parents=True, exist_ok=True)
    w = decoder.weights(setup.decoder)
    blob = b"".join(np.ascontiguousarray(w[k], dtype="<f4").tobytes() for k in ("W1", "b1", "W2", "b2"))
    (folder / "decoder.bin").write_bytes(blob)
    model = {
        "T": sch.T, "D": D, "H": H, "ranks": 4, "hr": H // 4,
        "F": sch.F.tolist(), "C1": sch.C1.tolist(), "C2": sch.C2.tolist(),
        "decoder": {"shapes": {k: list(w[k].shape) for k in ("W1", "b1", "W2", "b2")}, "file": "decoder.bin"},
        "checkpoints": checkpoints,
        "replay": {"xT": xT.tolist(), "x0": got.tolist(),
                   "note": "x_T the QwenGPUs started from, x_0 the integers they wrote (final checkpoint)"},
        "figures": {k: report[k] for k in ("recognised_qwengpu", "recognised_float64", "steps", "samples")},
    }
    (folder / "model.json").write_text(json.dumps(model, separators=(",", ":")))
