"""Seconds per decoded token of the compiled QwenGPU: the exact circuit (numpy) and the transformers model (bf16, fp32).

    python -m qccl_bench.circuit_speed                   # replays the vadd kernel's stream on each backend
    python -m qccl_bench.circuit_speed --dtypes bfloat16
    python -m qccl_bench.circuit_speed --allreduce       # also a 4-rank, 16-word AllReduce over QLink on the circuit
    python -m qccl_bench.circuit_speed --dtypes "" --batched 4 [--checkpoint DIR]   # a batched tick of 4 ranks

Each backend is fed the same recorded stream one token at a time (every token is a forward pass with the recurrent
cache); the table gives the median and the 90th percentile of the per-token times, the build time, and whether every
model-written token was predicted (it must be). ``--batched N`` times ``ModelBackend.forward_batch``: N bf16 ranks
sharing one model (the compiled one, or a merged / compiled checkpoint), at different positions, one token each per
tick; the median of the ticks' wall times.
"""
from __future__ import annotations

import argparse
import statistics
import time

from qwengpu.circuit.exact import CircuitBackend
from qwengpu.circuit.suite import vadd_stream
from qwengpu.circuit.verify import verify


def measure(label: str, make, stream) -> str:
    started = time.perf_counter()
    backend = make()
    build = time.perf_counter() - started
    result = verify(backend, stream)
    times = sorted(result.times)
    p90 = times[int(0.9 * (len(times) - 1))]
    return (f"| {label:<16} | {build:>8.1f} s | {statistics.median(times):>10.4f} s | {p90:>10.4f} s | "
            f"{len(stream):>6} | {len(result.mismatches):>10} |")


def allreduce(nranks: int = 4, count: int = 16) -> str:
    """Wall time of one AllReduce over QLink with every rank on the circuit backend, checked against numpy."""
    import numpy as np

    import qccl
    comms = qccl.Communicator.init_all(nranks, transport="qlink", config={"backend": "circuit"})
    send = [np.random.default_rng(r).integers(-2**31, 2**31, count).astype(np.int32) for r in range(nranks)]
    recv = [np.zeros(count, np.int32) for _ in range(nranks)]
    started = time.perf_counter()
    with qccl.group():
        for c in comms:
            c.allreduce(send[c.rank], recv[c.rank], op="sum")
    seconds = time.perf_counter() - started
    expect = np.sum(np.array(send, dtype=np.int64), axis=0).astype(np.int32)     # int32 wrap-around
    same = all(np.array_equal(r, expect) for r in recv)
    written = [c.stats["tokens_written"] for c in comms]
    return (f"AllReduce {nranks} ranks x {count} words on the circuit over QLink: {seconds:.1f} s, "
            f"{min(written)}-{max(written)} tokens written per rank, "
            f"{'identical to' if same else 'DIFFERS from'} numpy")


def batched(ranks: int, ticks: int = 10, checkpoint: str | None = None) -> str:
    """Median wall time of a batched tick: ``ranks`` bf16 model backends on one shared model, rank r first fed
    r + 1 tokens alone (so a merged model's full-attention rows differ in length), then ``ticks`` forwards of
    one token per rank (two untimed first: the bank is made at the first)."""
    from qwengpu import tokens as T
    from qwengpu.circuit.model import ModelBackend
    backends = [ModelBackend(checkpoint=checkpoint) for _ in range(ranks)]
    for rank, backend in enumerate(backends):
        for _ in range(rank + 1):
            backend.feed(T.MEM(7))
    times = []
    for tick in range(ticks + 2):
        started = time.perf_counter()
        ModelBackend.forward_batch(backends, [[T.MEM(7)]] * ranks)
        times.append(time.perf_counter() - started)
    median = statistics.median(times[2:])
    return (f"batched tick, {ranks} ranks on {checkpoint or 'the compiled model'} (bf16): {median * 1e3:.1f} ms "
            f"median of {ticks}, {1 / median:.2f} tokens/s per rank")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m qccl_bench.circuit_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float32", help="model dtypes to time (comma separated)")
    parser.add_argument("--allreduce", action="store_true", help="also time a 4-rank AllReduce on the circuit")
    parser.add_argument("--batched", type=int, default=0, metavar="N", help="also time a batched tick of N ranks")
    parser.add_argument("--checkpoint", help="with --batched: a merged or compiled checkpoint directory")
    args = parser.parse_args(argv)
    if args.batched < 0:
        parser.error(f"--batched {args.batched}: a number of ranks, 1 or more (0: no batched tick)")
    stream = vadd_stream()
    print("| backend          |      build | median/token |    p90/token | tokens | mismatches |")
    print("|------------------|------------|--------------|--------------|--------|------------|")
    print(measure("circuit (numpy)", CircuitBackend, stream), flush=True)
    for dtype in filter(None, args.dtypes.split(",")):
        from qwengpu.circuit.model import ModelBackend
        print(measure(f"model {dtype}", lambda: ModelBackend(dtype=dtype), stream), flush=True)
    if args.allreduce:
        print(allreduce(), flush=True)
    if args.batched:
        print(batched(args.batched, checkpoint=args.checkpoint), flush=True)


if __name__ == "__main__":
    main()
