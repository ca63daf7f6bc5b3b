"""Per-layer deviation report: how far the model's residual stream strays from the exact circuit, layer by layer.

For a token stream, the exact circuit and each model run (bf16, fp32) are fed the same tokens; after every layer the
largest absolute difference between the model's residual and the circuit's is kept, with the smallest argmax margin at
the positions where the model writes, and the mismatches. A broken invariant shows up at the layer that breaks it.

    python -m qwengpu.circuit.report            # the vadd kernel's stream, bf16 and fp32
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


def deviation(model_backend, stream, label: str, circuit: CircuitBackend | None = None) -> Deviation:
    """Feed ``stream`` to the circuit and to ``model_backend`` (built with trace=True) and compare every layer."""
    circuit = circuit or CircuitBackend(trace=True)
    circuit.trace = True
    report = Deviation(label, [0.0] * len(circuit.layers), [layer.purpose for layer in circuit.layers])

    def compare(token) -> None:
        circuit.feed(token.id)
        for index, (exact, model) in enumerate(zip(circuit.residuals, model_backend.residuals)):
            report.layers[index] = max(report.layers[index], float(np.abs(model - exact).max()))

    result = verify(model_backend, stream, after_feed=compare)
    report.compared, report.mismatches, report.min_margin = result.compared, len(result.mismatches), result.min_margin
    report.seconds_per_token = sum(result.times) / max(result.fed, 1)
    return report


def main(argv=None) -> None:
    from .model import ModelBackend
    from .suite import kernel_streams
    parser = argparse.ArgumentParser(prog="python -m qwengpu.circuit.report", description=__doc__.splitlines()[0])
    parser.add_argument("--stream", default="vadd", help="which kernel-suite stream to replay (default vadd)")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    args = parser.parse_args(argv)
    stream = dict(kernel_streams())[args.stream]
    for dtype in args.dtypes.split(","):
        print(deviation(ModelBackend(dtype=dtype, trace=True), stream, f"{args.stream} in {dtype}").table())


if __name__ == "__main__":
    main()
