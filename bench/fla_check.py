"""flash-linear-attention's Gated DeltaNet kernel against transformers' torch rule, on the compiled model's own inputs,
without a GPU: Triton's CPU interpreter runs fla's fused recurrent kernel (the decode rule transformers takes from
fla when it imports) on the inputs every layer's rule received while the bf16 model read a kernel-suite stream, and
its outputs and final states are compared with what transformers' torch rule wrote, bit for bit.

    pip install triton==3.9.0 fla-core==0.6.0 flash-linear-attention==0.6.0 einops   # not in the project's pins
    python -m qccl_bench.fla_check --layers 0,12,24

The interpreter truncates its float32 -> bfloat16 stores (round toward zero), which a GPU's Triton does not
(cvt.rn.bf16.f32, round to nearest even); the compiled circuit's rule writes values a hair below a bf16 number
(63.999996 for 64), so truncation would be a false alarm: the script rounds the interpreter's bf16 stores to nearest
even, as the GPU does (``--truncate`` keeps the interpreter's own). The interpreter computes in IEEE float32 with
correctly rounded square roots and divisions, where a GPU's Triton may use approximate ones; how far those may err
is what ``python -m qwengpu.circuit.report --margin`` bounds. Slow: minutes per layer on a CPU. The capture hides fla
from transformers (it must run the torch rule), so transformers warns that flash-linear-attention is not installed.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time


def missing() -> str:
    """'' when Triton and flash-linear-attention are importable here, else what is missing."""
    absent = [name for name in ("triton", "fla", "einops") if importlib.util.find_spec(name) is None]
    return f"not installed: {', '.join(absent)}" if absent else ""


def record_rule_inputs(stream):
    """The inputs and outputs of every layer's Gated DeltaNet rule while the bf16 model reads ``stream`` in one
    forward, on transformers' torch rule (fla is hidden while transformers binds its rules)."""
    blocked = "fla" not in sys.modules
    if blocked:
        sys.modules["fla"] = None       # transformers' qwen3_5 modeling binds its rules when imported
    try:
        from transformers.models.qwen3_5 import modeling_qwen3_5  # noqa: F401
    finally:
        if blocked:
            del sys.modules["fla"]
    from qwengpu.circuit.model import ModelBackend
    from qwengpu.circuit.report import rule_calls
    return rule_calls(ModelBackend(dtype="bfloat16"), stream, len(stream))


def round_bf16_stores_to_nearest_even() -> None:
    """Make Triton's interpreter round float32 -> bfloat16 to nearest even, as NVIDIA GPUs' cvt.rn.bf16.f32 does
    (triton 3.9's interpreter truncates: its _convert_float drops the low bits)."""
    import numpy as np
    import torch
    import triton.language as tl
    import triton.runtime.interpreter as interpreter
    convert = interpreter._convert_float

    def nearest_even(data, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.float32 and output_dtype == tl.bfloat16:
            values = torch.from_numpy(np.ascontiguousarray(data).view(np.float32).copy())
            return values.bfloat16().view(torch.int16).numpy().view(np.uint16)
        return convert(data, input_dtype, output_dtype, rounding_mode)
    interpreter._convert_float = nearest_even


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qccl_bench.fla_check", description=__doc__.splitlines()[0])
    parser.add_argument("--stream", default="vadd", help="which kernel-suite stream the model reads (default vadd)")
    parser.add_argument("--layers", default="0,12,24", help="the compiled layers to check, comma-separated")
    parser.add_argument("--truncate", action="store_true",
                        help="keep the interpreter's truncating bf16 stores (differs from a GPU)")
    args = parser.parse_args(argv)
    why = missing()
    if why:
        print(f"fla_check: skipped, {why} (pip install triton fla-core flash-linear-attention einops)")
        return 0
    os.environ["TRITON_INTERPRET"] = "1"        # read when fla's kernels are defined: before fla is imported
    import torch

    from qwengpu.circuit.suite import kernel_streams
    streams = dict(kernel_streams(idioms=False))
    if args.stream not in streams:
        parser.error(f"--stream {args.stream}: not among {', '.join(streams)}")
    calls = record_rule_inputs(streams[args.stream])
    layers = [int(layer) for layer in args.layers.split(",")]
    bad = [layer for layer in layers if not 0 <= layer < len(calls)]
    if bad:
        parser.error(f"--layers {bad[0]}: the model has layers 0..{len(calls) - 1}")
    if not args.truncate:
        round_bf16_stores_to_nearest_even()
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
    torch_rule = getattr(qwen.torch_recurrent_gated_delta_rule, "__wrapped__", qwen.torch_recurrent_gated_delta_rule)
    print(f"{args.stream}: {calls[0]['query'].shape[1]} positions; fla's fused recurrent kernel in Triton's "
          f"interpreter ({'truncating' if args.truncate else 'nearest-even'} bf16 stores) against transformers' "
          "torch rule", flush=True)
    failures = 0
    for layer in layers:
        call = calls[layer]
        inputs = (call["query"], call["key"], call["value"])
        options = dict(g=call["g"], beta=call["beta"], initial_state=call["initial_state"], output_final_state=True,
                       use_qk_l2norm_in_kernel=True)
        want, want_state = torch_rule(*inputs, **options)
        started = time.perf_counter()
        got, state = fused_recurrent_gated_delta_rule(*inputs, **options)
        differing = int((got != want).sum())
        failures += differing > 0 or not torch.equal(state, want_state)
        print(f"  layer {layer:2d}: outputs {'equal bit for bit' if not differing else f'{differing} differ'} "
              f"(of {got.numel()}), final state largest difference {float((state - want_state).abs().max()):g} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
