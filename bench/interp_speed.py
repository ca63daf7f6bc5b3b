"""Model tokens per second of the reference interpreter driving a 4-rank QLink world, and where the time goes.

    python -m qccl_bench.interp_speed                    # a 4-rank AllReduce of 1,000 words, then a cProfile breakdown
    python -m qccl_bench.interp_speed --count 200 --ranks 8 --algo multicast --json FILE

"Model tokens" are the tokens the devices write (what a Qwen3.5 would decode); host records and peers' packets are
fed (prefill) and not counted. The AllReduce runs twice on fresh worlds: "cold" lowers each kernel once per
argument shape (qwengpu/specialize.py: the lowering's decisions on the arguments are recorded, and a launch whose
arguments take the same decisions reuses the program with its immediates refilled), "warm" finds those programs in
the loaded kernels' caches. Each is then repeated under cProfile, whose time is
split by the part of the code it is spent in (lowering PTX, the interpreter, the driver, the lockstep engine, qccl's
scheduling): the profiler slows everything by about the same factor, so the shares are what matter.
The result is checked against numpy so a fast wrong run cannot pass for a fast one.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time

import numpy as np

import qccl

# Where a profiled function's time is booked: the first part whose path fragment is in the function's file name.
PARTS = (
    ("lowering (per argument shape) + program fetch",
     ("qwengpu/lower.py", "qwengpu/lowering/", "qwengpu/ptx.py", "qwengpu/specialize.py")),
    ("interpreter (parse + execute)", ("qwengpu/interpreter.py", "qwengpu/isa.py")),
    ("driver (qwengpu/device.py)", ("qwengpu/device.py", "qwengpu/tokens.py")),
    ("lockstep + fabric + router", ("qlink/",)),
    ("qccl (schedule, checks, buffers)", ("qccl/",)),
)


def run_allreduce(nranks: int, count: int, algo: str | None) -> tuple[float, int, list]:
    """One AllReduce on a fresh in-memory world: (seconds, tokens written by all ranks, per-rank stats)."""
    comms = qccl.Communicator.init_all(nranks)
    rng = np.random.default_rng(0)
    send = [rng.integers(-2**31, 2**31, count).astype(np.int32) for _ in range(nranks)]
    recv = [np.zeros(count, np.int32) for _ in range(nranks)]
    started = time.perf_counter()
    with qccl.group():
        for c in comms:
            c.allreduce(send[c.rank], recv[c.rank], algo=algo)
    seconds = time.perf_counter() - started
    expected = np.sum(np.array(send, dtype=np.int64), axis=0).astype(np.int64)
    for r in range(nranks):
        if not np.array_equal(recv[r].astype(np.int64) & 0xFFFFFFFF, expected & 0xFFFFFFFF):
            raise SystemExit(f"rank {r}: the AllReduce result differs from numpy")
    stats = [c.stats for c in comms]
    return seconds, sum(s["tokens_written"] for s in stats), stats


def breakdown(nranks: int, count: int, algo: str | None) -> dict[str, float]:
    """Share of the profiled time (tottime) spent in each part of PARTS (the rest: 'other')."""
    profile = cProfile.Profile()
    profile.runcall(run_allreduce, nranks, count, algo)
    stats = pstats.Stats(profile)
    shares = {name: 0.0 for name, _ in PARTS} | {"other (numpy, builtins, stdlib)": 0.0}
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():
        path = filename.replace("\\", "/")
        part = next((name for name, frags in PARTS if any(f in path for f in frags)), "other (numpy, builtins, stdlib)")
        shares[part] += tottime
    total = sum(shares.values()) or 1.0
    return {name: t / total for name, t in shares.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--count", type=int, default=1000, help="words per rank (default 1000)")
    ap.add_argument("--algo", default="ring", help="qccl algorithm (ring, the default here, multicast or auto)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    result = {"ranks": args.ranks, "count": args.count, "algo": args.algo or "ring"}
    for phase in ("cold", "warm"):
        seconds, tokens, stats = run_allreduce(args.ranks, args.count, args.algo)
        result[phase] = {"seconds": round(seconds, 3), "tokens_written": tokens, "tokens_per_s": round(tokens / seconds),
                         "tokens_per_rank": [s["tokens_written"] for s in stats],
                         "launches_per_rank": stats[0]["launches"]}
        print(f"{phase}: {args.ranks}-rank AllReduce of {args.count} words ({result['algo']}): {tokens:,} model "
              f"tokens in {seconds:.2f} s = {round(tokens / seconds):,} tokens/s on one core "
              f"({stats[0]['launches']} launches per rank)")
    if not args.no_profile:
        from qccl_transports.qlink import lockstep
        for phase in ("cold", "warm"):
            if phase == "cold":
                lockstep._LOADED.clear()        # forget the loaded kernels and their lowered programs
            shares = breakdown(args.ranks, args.count, args.algo)
            result[phase]["time_shares"] = {k: round(v, 3) for k, v in shares.items()}
            print(f"where the time goes, {phase} (cProfile, own time):")
            for name, share in sorted(shares.items(), key=lambda kv: -kv[1]):
                print(f"  {share:6.1%}  {name}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
