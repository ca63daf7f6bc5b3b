"""The diffusion runs' figures beside the seed's (README, "Diffusion on QwenGPUs"), run from the repository root:

    python -m qccl_bench.diffusion_figures --points-json points.json --latent-json latent.json
    python -m qccl_bench.diffusion_figures --replay-steps 2000 --replay-samples 512     # + the full-length replay
    python -m qccl_bench.diffusion_figures --circuit 1        # N steps of each run on circuit-backed QwenGPUs
    python -m qccl_bench.diffusion_figures --verify-circuit latent    # rank 0's first step, circuit verify mode

The JSON files come from the runs (``python -m examples.points_ddpm --json ...``, ``python -m examples.latent_ddpm
--json ...``): measured on four interpreter-backed QwenGPUs, every step checked against the numpy replay. The replay
figures run the same integer arithmetic without the machines, which the runs show equal bit for bit at every step:
they say what a longer QwenGPU run gives. ``--circuit`` runs training steps on the exact circuit backend and
compares every rank's token stream with the interpreter's.
"""
from __future__ import annotations

import argparse
import json
import time

SEED = {"distance_qwengpu": 0.101, "distance_float64": 0.090, "recognised": 0.76, "latent_tokens": 4000}


def circuit_steps(run: str, steps: int) -> dict:
    """``steps`` training steps of points_ddpm or latent_ddpm on 4 circuit-backed QwenGPUs and on the interpreter:
    every rank's token stream must be the same."""
    import numpy as np
    from examples.points_ddpm import fixed, loader, split
    from examples.points_ddpm.machine import SplitDenoiser
    D, H, samples = (2, 32, 8) if run == "points" else (8, 16, 1)
    sch = fixed.schedule(20)
    streams, seconds = {}, {}
    for backend in ("interpreter", "circuit"):
        rng = np.random.default_rng(0)
        w1, w2 = split.init_params(rng, D, H)
        draws = loader.Draws.make(rng, rng.standard_normal((50, D)), steps, 20)
        sd = SplitDenoiser(D=D, H=H, samples=samples, backend=backend)
        start = time.perf_counter()
        sd.load(w1, w2)
        for i in range(steps):
            sd.train_step(draws.x0_q[i], int(draws.t[i]), draws.eps_q[i], sch, 5)
        seconds[backend] = round(time.perf_counter() - start, 1)
        streams[backend] = sd.m.streams()
    equal = all(streams["circuit"][r] == streams["interpreter"][r] for r in streams["interpreter"])
    return {"run": run, "steps": steps, "equal": equal, "seconds": seconds,
            "tokens_per_rank": {r: len(s) for r, s in streams["interpreter"].items()}}


def verify_step(run: str) -> dict:
    """Rank 0's first training step of a run, recorded by the interpreter on 4 QwenGPUs and fed to the compiled
    circuit in verify mode: the circuit must predict every token rank 0 wrote (packets and host copies included)."""
    import numpy as np
    from examples.points_ddpm import fixed, loader, split
    from examples.points_ddpm.machine import SplitDenoiser
    from qwengpu.circuit.exact import CircuitBackend
    from qwengpu.circuit.verify import verify
    D, H, samples = (2, 32, 8) if run == "points" else (8, 16, 1)
    rng = np.random.default_rng(0)
    w1, w2 = split.init_params(rng, D, H)
    draws = loader.Draws.make(rng, rng.standard_normal((50, D)), 1, 20)
    sd = SplitDenoiser(D=D, H=H, samples=samples)
    sd.load(w1, w2)
    sd.train_step(draws.x0_q[0], int(draws.t[0]), draws.eps_q[0], fixed.schedule(20), 5)
    tokens = sd.m.world.devices[0].tokens
    start = time.perf_counter()
    result = verify(CircuitBackend(), tokens, stop_after=1)
    return {"run": run, "tokens": len(tokens), "compared": result.compared, "mismatches": len(result.mismatches),
            "seconds": round(time.perf_counter() - start, 1)}


def table(points: dict | None, latent: dict | None, replay: dict | None) -> str:
    rows = ["| figure | QwenGPUs (measured) | float64, same draws | seed |", "|---|---|---|---|"]
    if points:
        rows.append(f"| points_ddpm: two-sided distance to the glyph ({points['steps']} steps, {points['samples']} "
                    f"samples) | {points['distance_qwengpu']} | {points['distance_float64']} | "
                    f"{SEED['distance_qwengpu']} / {SEED['distance_float64']} |")
        t = points["tokens_per_step"]
        rows.append(f"| points_ddpm: tokens per rank per training step (min / median / max) | {t['min']} / "
                    f"{t['median']:.0f} / {t['max']} | | |")
    if replay:
        rows.append(f"| points_ddpm replay, {replay['steps']} steps, {replay['samples']} samples (what the QwenGPUs "
                    f"give: equal bit for bit) | {replay['distance_replay']} | {replay['distance_float64']} | "
                    f"{SEED['distance_qwengpu']} / {SEED['distance_float64']} |")
    if latent:
        rows.append(f"| latent_ddpm: share recognised by the judge, p >= {latent['threshold']} ({latent['steps']} "
                    f"steps, {latent['samples']} samples) | {latent['recognised_qwengpu']:.0%} | "
                    f"{latent['recognised_float64']:.0%} | {SEED['recognised']:.0%} |")
        t = latent["tokens_per_step"]
        rows.append(f"| latent_ddpm: tokens per rank per training step (min / median / max) | {t['min']} / "
                    f"{t['median']:.0f} / {t['max']} | | about {SEED['latent_tokens']:,} |")
    return "\n".join(rows)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points-json")
    ap.add_argument("--latent-json")
    ap.add_argument("--replay-steps", type=int, default=0, help="points_ddpm replay length (0: none)")
    ap.add_argument("--replay-samples", type=int, default=512)
    ap.add_argument("--latent-replay-steps", type=int, default=0, help="latent_ddpm replay length (0: none)")
    ap.add_argument("--latent-limit", type=int, help="training images for the latent replay's encoder and judge")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--circuit", type=int, default=0, help="training steps of each run on the circuit backend")
    ap.add_argument("--verify-circuit", choices=("points", "latent"),
                    help="rank 0's first step of that run verified on the circuit (slow: about 20 min)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    load = (lambda p: json.loads(open(p).read()) if p else None)
    out = {"points": load(args.points_json), "latent": load(args.latent_json), "replay": None, "circuit": []}
    if args.replay_steps:
        from examples.points_ddpm.run import replay_only
        out["replay"] = replay_only(args.seed, args.replay_steps, args.replay_samples)
    if args.latent_replay_steps:
        from examples.latent_ddpm.run import Setup, replay_run
        from examples.points_ddpm.fixed import schedule
        setup = Setup(None, args.seed, 3, args.latent_limit)
        share = replay_run(setup, args.seed, args.latent_replay_steps, schedule(20), args.replay_samples)[3]
        out["latent_replay"] = {"steps": args.latent_replay_steps, "samples": args.replay_samples,
                                "recognised_replay": round(share, 4), "data": setup.source}
        print(f"latent_ddpm replay, seed {args.seed}, {args.latent_replay_steps} steps: {share:.0%} of "
              f"{args.replay_samples} samples recognised (what the QwenGPUs give: equal bit for bit)")
    print(table(out["points"], out["latent"], out["replay"]))
    for run in ("points", "latent") if args.circuit else ():
        r = circuit_steps(run, args.circuit)
        out["circuit"].append(r)
        print(f"{run}_ddpm: {r['steps']} training step(s) on 4 circuit-backed QwenGPUs, streams equal to the "
              f"interpreter's: {r['equal']} ({r['tokens_per_rank'][0]} tokens on rank 0; {r['seconds']} s)")
    if args.verify_circuit:
        out["verify"] = v = verify_step(args.verify_circuit)
        print(f"{v['run']}_ddpm, rank 0's first step on the circuit (verify mode): {v['compared']} model tokens of "
              f"{v['tokens']} compared, {v['mismatches']} mismatches, {v['seconds']} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
