"""Per-layer deviation report: how far the model's residual stream strays from the exact circuit, layer by layer.

For a token stream, the exact circuit and each model run (bf16, fp32) are fed the same tokens; after every layer the
largest absolute difference between the model's residual and the circuit's is kept, with the smallest argmax margin at
the positions where the model writes, and the mismatches. A broken invariant shows up at the layer that breaks it.

    python -m qwengpu.circuit.report            # the vadd kernel's stream, bf16 and fp32
    python -m qwengpu.circuit.report --dtypes bfloat16 --paths decode,recurrent,chunked    # chunked verify's paths
    python -m qwengpu.circuit.report --margin       # how far the Gated DeltaNet rule's outputs lie from bf16 rounding

The margin (``rule_margin``) says which other implementations of the Gated DeltaNet rule (flash-linear-attention's
Triton kernels, a GPU's approximate square roots) keep the model exact: every output the bf16 model's rule writes is
compared with the rule computed in float64 on the same inputs. If each float64 value lies within d bf16 ulps of the
bf16 value written, an implementation that stays within 0.5 - d ulps of the real value and rounds to nearest even
writes the same nonzero outputs; one that truncates does not (Triton's CPU interpreter truncates its bf16 stores).
Where the model writes 0, the float64 value's size bounds the residue another implementation might write instead.
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


@dataclass
class RuleMargin:
    """The Gated DeltaNet rule's bf16 outputs against the rule in float64, per layer (``rule_margin``)."""
    label: str
    layers: list[float] = field(default_factory=list)    # largest |float64 - bf16| / ulp(bf16) over nonzero outputs
    zeros: list[float] = field(default_factory=list)     # largest |float64| where the bf16 output is 0
    rounded: bool = True        # every nonzero bf16 output is its float64 value rounded to nearest even
    outputs: int = 0

    def table(self) -> str:
        lines = [f"{self.label}: {self.outputs} outputs, each nonzero one the float64 rule rounded to nearest "
                 f"even: {self.rounded}; largest distance {max(self.layers, default=0):.3g} bf16 ulp, largest "
                 f"float64 value written as 0: {max(self.zeros, default=0):.3g}"]
        for index, (ulps, zero) in enumerate(zip(self.layers, self.zeros)):
            lines.append(f"  layer {index:2d}  {ulps:<10.3g} ulp   largest float64 value written as 0: {zero:.3g}")
        return "\n".join(lines)


def rule_calls(model_backend, stream, chunk: int = 256) -> list[dict]:
    """Feed ``stream`` to ``model_backend`` ``chunk`` positions per forward on transformers' chunked rule and return
    every call of the rule, layer after layer and forward after forward: its inputs and its output (dicts: query,
    key, value, g, beta, initial_state, out)."""
    from .model import chunk_rule
    from .verify import Verifier
    calls: list = []

    def recording(rule):
        def record(query, key, value, g, beta, initial_state=None, **kwargs):
            out, state = rule(query, key, value, g=g, beta=beta, initial_state=initial_state, **kwargs)
            calls.append({"query": query.clone(), "key": key.clone(), "value": value.clone(), "g": g.clone(),
                          "beta": beta.clone(), "out": out.clone(),
                          "initial_state": None if initial_state is None else initial_state.clone()})
            return out, state
        return record
    with chunk_rule(recording):
        Verifier(model_backend, chunk, "chunked").check(stream)
    return calls


def float64_rule(query, key, value, g, beta, initial_state=None, eps: float = 1e-6):
    """The Gated DeltaNet rule as transformers defines it (queries and keys L2-normalised with ``eps``, queries
    scaled by 1 / sqrt(head dim), state decayed by exp(g), the delta rule with beta), in float64: outputs
    [batch, positions, value heads, head dim]."""
    import torch
    query, key, value, g, beta = (x.double().transpose(1, 2) for x in (query, key, value, g, beta))
    if key.shape[1] != value.shape[1]:      # grouped value heads, as transformers repeats them
        query = query.repeat_interleave(value.shape[1] // key.shape[1], dim=1)
        key = key.repeat_interleave(value.shape[1] // key.shape[1], dim=1)
    query = query / torch.sqrt((query * query).sum(-1, keepdim=True) + eps) / query.shape[-1] ** 0.5
    key = key / torch.sqrt((key * key).sum(-1, keepdim=True) + eps)
    batch, heads, positions, k_dim = key.shape
    state = (torch.zeros(batch, heads, k_dim, value.shape[-1], dtype=torch.float64, device=key.device)
             if initial_state is None
             else initial_state.double().clone())
    out = torch.zeros_like(value)
    for t in range(positions):
        state = state * g[:, :, t].exp()[..., None, None]
        delta = (value[:, :, t] - (state * key[:, :, t, :, None]).sum(-2)) * beta[:, :, t, None]
        state = state + key[:, :, t, :, None] * delta[:, :, None, :]
        out[:, :, t] = (state * query[:, :, t, :, None]).sum(-2)
    return out.transpose(1, 2)


def rule_margin(model_backend, stream, label: str, chunk: int = 256) -> RuleMargin:
    """Feed ``stream`` to ``model_backend`` (bf16) ``chunk`` positions per forward on transformers' chunked rule and
    hold every output of the rule, at every layer, against ``float64_rule`` on the same inputs."""
    import torch
    calls = rule_calls(model_backend, stream, chunk)
    layers = model_backend.model.config.layer_types.count("linear_attention")
    report = RuleMargin(label, [0.0] * layers, [0.0] * layers)
    for index, call in enumerate(calls):
        real = float64_rule(call["query"], call["key"], call["value"], call["g"], call["beta"],
                            call["initial_state"])
        written = call["out"].double()
        nonzero = written != 0
        report.rounded &= torch.equal(real[nonzero].to(call["out"].dtype), call["out"][nonzero])
        report.outputs += written.numel()
        layer = index % layers
        if nonzero.any():
            ulp = torch.exp2(torch.floor(torch.log2(written[nonzero].abs())) - 7)    # bf16: 8 significant bits
            report.layers[layer] = max(report.layers[layer],
                                       float(((real[nonzero] - written[nonzero]).abs() / ulp).max()))
        if not nonzero.all():
            report.zeros[layer] = max(report.zeros[layer], float(real[~nonzero].abs().max()))
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
    parser.add_argument("--margin", action="store_true",
                        help="instead: the Gated DeltaNet rule's bf16 outputs against the rule in float64")
    args = parser.parse_args(argv)
    stream = dict(kernel_streams())[args.stream]
    if args.margin:
        print(rule_margin(ModelBackend(dtype="bfloat16"), stream, f"{args.stream}, rule margin", args.chunk).table())
        return
    for dtype in args.dtypes.split(","):
        for path in args.paths.split(","):
            backend = ModelBackend(dtype=dtype, trace=True)
            if path == "decode":
                print(deviation(backend, stream, f"{args.stream} in {dtype}").table())
            else:
                print(chunk_deviation(backend, stream, f"{args.stream} in {dtype}", path, args.chunk).table())


if __name__ == "__main__":
    main()
