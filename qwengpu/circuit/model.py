"""The model backend: the compiled circuit as a transformers Qwen3_5ForCausalLM, decoded greedily token by token.

The weights go in through ``load_state_dict(strict=True)`` into a model built from a Qwen3.5 text config whose layers
are all linear attention (Gated DeltaNet + SwiGLU, transformers' own Qwen3_5DecoderLayer). Decoding is a manual
loop, one token per forward with the recurrent cache (``generate()`` refuses all-linear models). The cache is
initialised with zero states before the first token, so every token, the first included, takes the recurrent
decode path (a one-token prefill would take the chunked kernel, which is not bit-identical).

Example::

    from qwengpu import Device
    dev = Device(backend="model", dtype="bfloat16", device="cpu")
    dev.write(3, [7]); dev.read(3, 1)        # array([7], dtype=int32): argmax of the model's own logits

    from qwengpu.circuit.model import save_checkpoint
    save_checkpoint("qwengpu-2b")            # config.json + model.safetensors + qwengpu_vocab.json
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from .. import tokens as T
from ..isa import MachineError
from .compiler import LOGIT, Circuit
from .exact import compiled
from .layers import QWEN35_2B, Width, dense

VOCAB_FILE = "qwengpu_vocab.json"


def config_for(circuit: Circuit):
    """A Qwen3_5TextConfig with the circuit's widths, every layer a linear-attention (GDN) layer."""
    from transformers import Qwen3_5TextConfig
    w = circuit.width
    n = len(circuit.layers)
    return Qwen3_5TextConfig(
        vocab_size=T.VOCAB_SIZE, hidden_size=w.hidden, intermediate_size=w.intermediate, num_hidden_layers=n,
        layer_types=["linear_attention"] * n, linear_num_key_heads=w.heads, linear_num_value_heads=w.heads,
        linear_key_head_dim=w.head_dim, linear_value_head_dim=w.head_dim, linear_conv_kernel_dim=w.conv,
        hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=False, architectures=["Qwen3_5ForCausalLM"])


def state_dict(circuit: Circuit, dtype: str = "float32") -> dict:
    """The circuit's weights under transformers' parameter names, as tensors of ``dtype``.

    Each weight is checked to be exactly representable in ``dtype``: a rounded weight is a design error."""
    import torch
    target = getattr(torch, dtype)
    w = circuit.width
    h, vd, heads = w.hidden, w.key_dim, w.heads
    out = {"model.embed_tokens.weight": circuit.embedding(), "model.norm.weight": np.zeros(h, np.float32),
           "lm_head.weight": dense(circuit.output_head(), (T.VOCAB_SIZE, h))}
    for layer in circuit.layers:
        p = f"model.layers.{layer.index}."
        conv = np.zeros((w.conv_dim, 1, w.conv), np.float32)
        for channel, taps in layer.conv.items():
            conv[channel, 0] = taps
        a_log = np.full(heads, -np.inf, np.float32)
        for head, value in layer.a_log.items():
            a_log[head] = value
        out.update({
            p + "linear_attn.in_proj_qkv.weight": dense(layer.qkv, (w.conv_dim, h)),
            p + "linear_attn.conv1d.weight": conv,
            p + "linear_attn.in_proj_z.weight": dense(layer.z, (vd, h)),
            p + "linear_attn.in_proj_b.weight": dense(layer.b, (heads, h)),
            p + "linear_attn.in_proj_a.weight": dense(layer.a, (heads, h)),
            p + "linear_attn.A_log": a_log,
            p + "linear_attn.dt_bias": np.zeros(heads, np.float32),
            p + "linear_attn.norm.weight": np.ones(w.head_dim, np.float32),
            p + "linear_attn.out_proj.weight": dense(layer.out, (h, vd)),
            p + "mlp.gate_proj.weight": dense(layer.gate, (w.intermediate, h)),
            p + "mlp.up_proj.weight": dense(layer.up, (w.intermediate, h)),
            p + "mlp.down_proj.weight": dense(layer.down, (h, w.intermediate)),
            p + "input_layernorm.weight": np.zeros(h, np.float32),
            p + "post_attention_layernorm.weight": np.zeros(h, np.float32),
        })
    _check_representable(circuit, target)
    return {name: torch.from_numpy(out.pop(name)).to(target) for name in list(out)}


def _check_representable(circuit: Circuit, dtype) -> None:
    """Every distinct weight value must survive the cast (the dense tensors hold only these values and zeros)."""
    import torch
    values = {LOGIT, 1.0, 0.0}
    values.update(circuit.residual.vector({}))         # every embedding row holds HOT, 0 and the ballast
    for layer in circuit.layers:
        for part in (layer.qkv, layer.z, layer.b, layer.a, layer.out, layer.gate, layer.up, layer.down):
            values.update(part.values())
    values = torch.tensor(sorted(values), dtype=torch.float64)
    bad = values[values.to(dtype).to(torch.float64) != values]
    if len(bad):
        raise MachineError(f"weights {bad.tolist()[:5]} are not exactly representable in {dtype}")


def build_model(circuit: Circuit, dtype: str = "bfloat16", device: str = "cpu"):
    """Qwen3_5ForCausalLM with the circuit's weights loaded through load_state_dict(strict=True)."""
    import torch
    from transformers import Qwen3_5ForCausalLM
    config = config_for(circuit)
    config.dtype = dtype
    from transformers.initialization import no_init_weights
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))      # build in the target dtype: half the memory, no cast after
    try:
        with no_init_weights():                         # every weight comes from the state dict
            model = Qwen3_5ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.load_state_dict(state_dict(circuit, dtype), strict=True)
    return model.to(device=device).eval()


def save_checkpoint(directory: str | Path, width: Width | None = None, dtype: str = "bfloat16", model=None) -> Path:
    """Save the compiled circuit as a Hugging Face checkpoint directory (config.json, model.safetensors) with its
    vocabulary description (qwengpu_vocab.json); ``AutoModelForCausalLM.from_pretrained(directory)`` loads it."""
    circuit = compiled(width or QWEN35_2B)
    model = model if model is not None else build_model(circuit, dtype)
    directory = Path(directory)
    model.save_pretrained(directory)
    (directory / VOCAB_FILE).write_text(json.dumps(vocabulary(circuit), indent=1))
    return directory


def vocabulary(circuit: Circuit) -> dict:
    """What each token id means (qwengpu.tokens) and where the circuit keeps each group in the residual."""
    families = {name: {"first": base, "count": count} for name, base, count in T.FAMILIES}
    return {"vocab_size": T.VOCAB_SIZE, "families": families, "grammar": T.__doc__,
            "supported_ops": list(circuit.supported_ops),
            "atomics": circuit.atomics, "divisors": list(circuit.divisors), "residual": circuit.residual.describe(),
            "layers": [layer.purpose for layer in circuit.layers]}


@functools.lru_cache(maxsize=2)
def _shared_model(circuit: Circuit, dtype: str, device: str):
    return build_model(circuit, dtype, device)


class ModelBackend:
    """Backend ``model``: a transformers Qwen3.5 model holding the compiled circuit, decoded greedily."""

    name = "model"

    def __init__(self, circuit: Circuit | None = None, dtype: str = "bfloat16", device: str = "cpu",
                 checkpoint: str | Path | None = None, width: Width | None = None, trace: bool = False):
        import torch
        if dtype not in ("bfloat16", "float32"):
            raise MachineError(f"dtype {dtype!r}: the model backend runs bfloat16 (deployment) or float32")
        if checkpoint is not None:
            from transformers import AutoModelForCausalLM
            self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype)).to(device)
            self.model.eval()
            description = json.loads((Path(checkpoint) / VOCAB_FILE).read_text())
            self.supported_ops = tuple(description["supported_ops"])
            self.atomics = description["atomics"]
            self.divisors = tuple(description["divisors"])
        else:
            circuit = circuit if circuit is not None else compiled(width or QWEN35_2B)
            # The weights are read-only and each backend has its own cache, so devices share one model (QLink's
            # ranks in one process); a traced backend hooks its layers and keeps a model of its own.
            self.model = build_model(circuit, dtype, device) if trace else _shared_model(circuit, dtype, device)
            self.supported_ops = circuit.supported_ops
            self.atomics = circuit.atomics
            self.divisors = circuit.divisors
        self.torch, self.device, self.trace = torch, device, trace
        self.residuals: list[np.ndarray] = []
        if trace:
            for layer in self.model.model.layers:
                layer.register_forward_hook(self._capture)
        self._reset()

    def _capture(self, module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        self.residuals.append(hidden[0, -1].float().cpu().numpy().astype(np.float64))

    def _reset(self) -> None:
        from transformers import DynamicCache
        torch = self.torch
        config = self.model.config
        self.cache = DynamicCache(config=config)
        dtype = next(self.model.parameters()).dtype
        conv_dim = 2 * config.linear_num_key_heads * config.linear_key_head_dim + \
            config.linear_num_value_heads * config.linear_value_head_dim
        for layer in self.cache.layers:
            layer.lazy_initialization(
                conv_states=torch.zeros(1, conv_dim, config.linear_conv_kernel_dim, dtype=dtype, device=self.device),
                recurrent_states=torch.zeros(1, config.linear_num_value_heads, config.linear_key_head_dim,
                                             config.linear_value_head_dim, dtype=torch.float32, device=self.device))
            layer.has_previous_state[0] = True
        self._logits = None
        self.position = 0

    # -- backend interface -------------------------------------------------------------------------------------
    def snapshot(self):
        states = [(layer.conv_states[0].clone(), layer.recurrent_states[0].clone()) for layer in self.cache.layers]
        return states, self._logits, self.position

    def restore(self, state) -> None:
        states, self._logits, self.position = state
        for layer, (conv, recurrent) in zip(self.cache.layers, states):
            layer.conv_states[0].copy_(conv)
            layer.recurrent_states[0].copy_(recurrent)

    def predict(self) -> int:
        if self._logits is None:
            raise MachineError("the model has been fed nothing yet: there is no prediction")
        return int(self._logits.argmax())

    def margin(self) -> float:
        top2 = self._logits.topk(2).values
        return float(top2[0] - top2[1])

    def feed(self, token: int) -> None:
        torch = self.torch
        if not 0 <= token < T.VOCAB_SIZE:
            raise MachineError(f"token {token} is outside the vocabulary of {T.VOCAB_SIZE}")
        self.residuals = []
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([[token]], device=self.device), past_key_values=self.cache,
                             position_ids=torch.tensor([[self.position]], device=self.device), use_cache=True,
                             attention_mask={"full_attention": None, "linear_attention": None})
        self._logits = out.logits[0, -1].float()
        self.position += 1


def main(argv=None) -> None:
    """``python -m qwengpu.circuit.model DIR``: compile the circuit and save it as a Hugging Face checkpoint."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m qwengpu.circuit.model", description=main.__doc__)
    parser.add_argument("directory")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args(argv)
    path = save_checkpoint(args.directory, dtype=args.dtype)
    print(f"saved {path} (load it with AutoModelForCausalLM.from_pretrained({str(path)!r}))")


if __name__ == "__main__":
    main()
