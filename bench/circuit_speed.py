"""Seconds per decoded token of the compiled QwenGPU: the exact circuit (numpy) and the transformers model (bf16, fp32).

    python -m bench.circuit_speed                   # replays the vadd kernel's stream on each backend
    python -m bench.circuit_speed --dtypes bfloat16

Each backend is fed the same recorded stream one token at a time (every token is a forward pass with the recurrent
cache); the table gives the median and the 90th percentile of the per-token times, the build time, and whether every
model-written token was predicted (it must be).
"""
from __future__ import annotations

import argparse
import statistics
import time

from qwengpu import tokens as T
from qwengpu.circuit.exact import CircuitBackend
from qwengpu.circuit.suite import vadd_stream
from qwengpu.circuit.verify import _predicted_at


def measure(label: str, make, stream) -> str:
    started = time.perf_counter()
    backend = make()
    build = time.perf_counter() - started
    times, predictions, wrong = [], [], 0
    for position, token in enumerate(stream):
        if token.origin == T.MODEL and position > 0:
            expected = token.written if token.written is not None else token.id
            wrong += predictions[_predicted_at(stream, position)] != expected
        started = time.perf_counter()
        backend.feed(token.id)
        times.append(time.perf_counter() - started)
        predictions.append(backend.predict())
    times.sort()
    p90 = times[int(0.9 * (len(times) - 1))]
    return (f"| {label:<16} | {build:>8.1f} s | {statistics.median(times):>10.4f} s | {p90:>10.4f} s | "
            f"{len(stream):>6} | {wrong:>10} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.circuit_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float32", help="model dtypes to time (comma separated)")
    args = parser.parse_args(argv)
    stream = vadd_stream()
    print("| backend          |      build | median/token |    p90/token | tokens | mismatches |")
    print("|------------------|------------|--------------|--------------|--------|------------|")
    print(measure("circuit (numpy)", CircuitBackend, stream), flush=True)
    for dtype in filter(None, args.dtypes.split(",")):
        from qwengpu.circuit.model import ModelBackend
        print(measure(f"model {dtype}", lambda: ModelBackend(dtype=dtype), stream), flush=True)


if __name__ == "__main__":
    main()
