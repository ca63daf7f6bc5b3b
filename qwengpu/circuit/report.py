"""Per-layer deviation report: how far the model's residual stream strays from the exact circuit, layer by layer.

For a token stream, the exact circuit and each model run (bf16, fp32) are fed the same tokens; after every layer the
largest absolute difference between the model's residual and the circuit's is kept, with the smallest argmax margin at
the positions where the model writes, and the mismatches. A broken invariant shows up at the layer that breaks it.

    python -m qwengpu.circuit.report            # the vadd kernel's stream, bf16 and fp32
    python -m qwengpu.circuit.report --dtypes bfloat16 --paths decode,recurrent,chunked    # chunked verify's paths
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np

from .exact import CircuitBackend
from .verify import verify


@dataclass
class Deviation:
    """One model run against the circuit on one stream."""
    label: str
    layers: list[float] = field(default_factory=list)        # max |model - circuit| after each layer
    layer_names: list[str] = field(default_factory=list)
    min_margin: float = float("inf")
    mismatches: int = 0
    compared: int = 0
    seconds_per_token: float = 0.0

    def table(self) -> str:
        lines = [f"{self.label}: {self.compared} model tokens, {self.mismatches} mismatches, "
                 f"min argmax margin {self.min_margin:g}, {self.seconds_per_token:.3f} s per token"]
        for index, (name, value) in enumerate(zip(self.layer_names, self.layers)):
            lines.append(f"  layer {index:2d}  max deviation {value:<12.6g} {name}")
        return "\n".join(lines)


def exact_residuals(stream, circuit: CircuitBackend | None = None) -> list[list[np.ndarray]]:
    """The exact circuit's residual after every layer at every position of ``stream`` ([position][layer])."""
    circuit = circuit or CircuitBackend(trace=True)
    circuit.trace = True
    out = []
    for token in stream:
        circuit.feed(token.id)
        out.append(circuit.residuals)
    return out


def _names() -> list[str]:
    from .exact import compiled
    from .layers import QWEN35_2B
    return [layer.purpose for layer in compiled(QWEN35_2B).layers]


def deviation(model_backend, stream, label: str, circuit: CircuitBackend | None = None,
              exact: list | None = None) -> Deviation:
    """Feed ``stream`` to the circuit and to ``model_backend`` (built with trace=True) and compare every layer.
    ``exact``: the circuit's residuals from exact_residuals, when the caller has them already."""
    exact = exact if exact is not None else exact_residuals(stream, circuit)
    names = _names()
    report = Deviation(label, [0.0] * len(names), names)
    position = iter(range(len(stream)))

    def compare(token) -> None:
        for index, (reference, model) in enumerate(zip(exact[next(position)], model_backend.residuals)):
            report.layers[index] = max(report.layers[index], float(np.abs(model - reference).max()))

    result = verify(model_backend, stream, after_feed=compare)
    report.compared, report.mismatches, report.min_margin = result.compared, len(result.mismatches), result.min_margin
    report.seconds_per_token = sum(result.times) / max(result.fed, 1)
    return report


def chunk_deviation(model_backend, stream, label: str, path: str = "chunked", chunk: int = 64,
                    circuit: CircuitBackend | None = None, exact: list | None = None) -> Deviation:
    """The same comparison for chunked verify: ``model_backend`` (trace=True) is fed ``chunk`` positions per forward
    on GDN path ``path``; after every layer, every position of the chunk is compared with the exact circuit."""
    from .verify import Verifier
    exact = exact if exact is not None else exact_residuals(stream, circuit)
    names = _names()
    report = Deviation(f"{label}, {path} path, {chunk} per forward", [0.0] * len(names), names)
    verifier = Verifier(model_backend, chunk, path)
    for first in range(0, len(stream), chunk):
        part = range(first, min(first + chunk, len(stream)))
        verifier.check(stream[:part.stop])
        for index, model in enumerate(model_backend.chunk_residuals[:len(names)]):
            reference = np.array([exact[position][index] for position in part])
            report.layers[index] = max(report.layers[index], float(np.abs(model - reference).max()))
    result = verifier.result
    report.compared, report.mismatches, report.min_margin = result.compared, len(result.mismatches), result.min_margin
    report.seconds_per_token = result.seconds / max(result.fed, 1)
    return report


def main(argv=None) -> None:
    from .model import ModelBackend
    from .suite import kernel_streams
    parser = argparse.ArgumentParser(prog="python -m qwengpu.circuit.report", description=__doc__.splitlines()[0])
    parser.add_argument("--stream", default="vadd", help="which kernel-suite stream to replay (default vadd)")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--paths", default="decode",
                        help="decode (one token per forward), recurrent and / or chunked (chunked verify's GDN rules)")
    parser.add_argument("--chunk", type=int, default=64, help="positions per forward on the chunked-verify paths")
    args = parser.parse_args(argv)
    stream = dict(kernel_streams())[args.stream]
    for dtype in args.dtypes.split(","):
        for path in args.paths.split(","):
            backend = ModelBackend(dtype=dtype, trace=True)
            if path == "decode":
                print(deviation(backend, stream, f"{args.stream} in {dtype}").table())
            else:
                print(chunk_deviation(backend, stream, f"{args.stream} in {dtype}", path, args.chunk).table())


if __name__ == "__main__":
    main()
