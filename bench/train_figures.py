"""The training runs' figures beside the seed's: tokens per step, communication tokens, launches, words used, accuracy.

    python -m qccl_bench.train_figures                       # xor_ddp, xor_zero, mnist_tp pool and pca, default sizes
    python -m qccl_bench.train_figures --xor-steps 50 --mnist-steps 500 --out train/figures.md
    python -m qccl_bench.train_figures --circuit             # the whole first xor_ddp step, greedy on the circuit

Run from the repository root (the runs live in examples/, which is not installed). Every run checks every step
against its numpy replay as it goes, so a figure here is a figure of a correct run. ``--circuit`` runs broadcast and
step 0 of xor_ddp on four circuit-backed QwenGPUs and on four interpreter-backed ones and compares every rank's token
stream (minutes: the circuit evaluates every token with its 25 layers).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SEED_FIGURES = {
    "xor_ddp": "about 10,000 tokens per step per rank; learns XOR",
    "xor_zero": "communication tokens halved vs xor_ddp; 119 of 127 words",
    "mnist_tp pool": "80.6% test accuracy (least squares' bound 80.9%)",
    "mnist_tp pca": "better than pool (not given)",
}


RUNS = ("xor_ddp", "xor_zero", "mnist_tp pool", "mnist_tp pca")


def run_all(xor_steps: int, mnist_steps: int, quiet: bool, only=RUNS) -> dict:
    from examples.mnist_tp.run import MnistRun
    from examples.xor_ddp.run import XorRun
    from examples.xor_zero.run import ZeroRun
    results = {}
    for name, make in (("xor_ddp", XorRun), ("xor_zero", ZeroRun)):
        if name in only:
            results[name] = make(seed=0).train(xor_steps, quiet=quiet)
    for variant in ("pool", "pca"):
        if f"mnist_tp {variant}" in only:
            results[f"mnist_tp {variant}"] = MnistRun(variant, seed=0).train(mnist_steps, quiet=quiet, bound=True)
    return results


def table(results: dict) -> str:
    lines = ["| run | steps | tokens / step / rank (median; min-max) | qccl-call tokens / step | launches / step | "
             "words used | wall | result | seed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        tok = r["tokens_per_step"]
        comm = r.get("collective_tokens_per_step", {}).get("median")
        if "correct_of_4" in r:
            outcome = f"{r['correct_of_4'][0]}/4 XOR points right"
        else:
            outcome = f"{r['test_accuracy']:.1%} test ({r['loss']}; float64 bound {r['float64_bound']:.1%})"
        lines.append(f"| {name} | {r['steps']} | {tok['median']:,.0f}; {tok['min_over_ranks']['min']:,}-{tok['max']:,} | "
                     f"{'' if comm is None else f'{comm:,.0f}'} | {r['launches_per_step']['max']} | "
                     f"{r['memory_map'][-1]['words']} of 127 | {r['wall_s']:.0f} s | {outcome} | "
                     f"{SEED_FIGURES[name]} |")
    return "\n".join(lines)


def replay_accuracy(variant: str, steps: int) -> float:
    """mnist_tp's test accuracy after ``steps`` steps as the numpy replay predicts it (the machines equal the replay
    bit for bit at every step they run, so this is what a run of that length on them gives)."""
    import numpy as np

    from examples import data
    from examples.mnist_tp import features as FE
    from examples.mnist_tp import replay as R
    d = data.load()
    train_x, test_x = FE.encode_q8(variant, d.train_images, d.train_images, d.test_images)
    order = np.random.default_rng(0).permutation(len(train_x))       # MnistRun's order for seed 0
    W = np.zeros((R.RANKS, R.PER_RANK, R.CLASSES), np.int64)
    for step in range(steps):
        j = order[step % len(order)]
        W = R.step(W, train_x[j], int(d.train_labels[j]), variant)[0]
    return float((R.predict(W, test_x).argmax(axis=1) == d.test_labels).mean())


def circuit_first_step() -> dict:
    """Broadcast + step 0 of xor_ddp on the circuit and on the interpreter; the streams must be equal."""
    from examples.xor_ddp.run import XorRun
    streams, seconds = {}, {}
    for backend in ("interpreter", "circuit"):
        started = time.perf_counter()
        run = XorRun(seed=0, backend=backend)
        run.train(1)
        seconds[backend] = round(time.perf_counter() - started, 1)
        streams[backend] = run.m.streams()
    equal = all(streams["circuit"][r] == streams["interpreter"][r] for r in streams["interpreter"])
    return {"equal": equal, "tokens_per_rank": {r: len(s) for r, s in streams["interpreter"].items()},
            "seconds": seconds}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xor-steps", type=int, default=200)
    ap.add_argument("--mnist-steps", type=int, default=5000)
    ap.add_argument("--only", default=",".join(RUNS), help=f"comma-separated runs of {', '.join(RUNS)}")
    ap.add_argument("--replay", action="store_true", help="only mnist_tp's replay-predicted accuracies at --mnist-steps")
    ap.add_argument("--circuit", action="store_true", help="only the first xor_ddp step on the circuit")
    ap.add_argument("--json", help="write every run's report here")
    ap.add_argument("--out", help="write the markdown table here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.replay:
        result = {v: replay_accuracy(v, args.mnist_steps) for v in ("pool", "pca")}
        print(f"mnist_tp after {args.mnist_steps} steps, as the replay predicts: " +
              ", ".join(f"{v} {a:.2%}" for v, a in result.items()))
    elif args.circuit:
        result = circuit_first_step()
        print(f"xor_ddp broadcast + step 0 on 4 circuit-backed QwenGPUs: streams equal to the interpreter's: "
              f"{result['equal']} ({result['tokens_per_rank']} tokens per rank; {result['seconds']})")
    else:
        only = tuple(n.strip() for n in args.only.split(","))
        unknown = [n for n in only if n not in RUNS]
        if unknown:
            raise SystemExit(f"--only: unknown run {unknown[0]!r}; the runs are {', '.join(RUNS)}")
        result = run_all(args.xor_steps, args.mnist_steps, args.quiet, only)
        text = table(result)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
