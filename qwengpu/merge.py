"""Merge the compiled QwenGPU in front of a Qwen3.5 text checkpoint: ``python -m qwengpu.merge BASE_DIR OUT_DIR``.

The merged model is an ordinary ``Qwen3_5ForCausalLM`` checkpoint (``AutoModelForCausalLM.from_pretrained`` loads
it), its layers in this order:

- the compiled layers (``qwengpu.circuit``), taken as the compiler builds them, plus a gate that makes them add
  exactly 0 at a base token's position (``gate``);
- one bridge layer (a linear-attention layer whose mixer is zero): an MLP unit per output slot of the circuit adds
  ``amplitude`` to the slots the compiled layers raised (exact: gate 32 -> silu 32, up 1, down amplitude / 32);
- the base's own layers, unchanged (linear and full attention as its ``layer_types`` say);
- the base's final norm.

The vocabulary is the base's, then the GPU's tokens (GPU token t has id ``offset + t``, offset = the base's
vocabulary size): their embedding rows are the circuit's, their output rows score the circuit's output slots with
weight ``head_scale / (1 + w)`` (w: the base's final-norm weight on that dimension). Embedding and output head are
untied (the GPU's input and output rows differ). The base's layers cannot move a GPU token's argmax: the bridge
makes the compiled prediction larger than anything the base's layers can add, by a bound computed from their weights
(qwengpu/circuit/README.md, "Merging"); the merge computes that bound and the amplitude, and refuses when no
amplitude fits the number formats. ``qwengpu_vocab.json`` beside the weights records the offset, the bound and the
margin. Tokenizer files of the base are copied, so the base's tokens keep their ids and their text.

Example::

    python -m qwengpu.merge /models/Qwen3.5-2B merged-2b
    from qwengpu import Device
    dev = Device(backend="model", checkpoint="merged-2b", dtype="bfloat16", device="cuda")
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import tokens as T
from .isa import MachineError

VOCAB_FILE = "qwengpu_vocab.json"       # the same name as qwengpu.circuit.model.VOCAB_FILE (checked by a test)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
SILU_MIN = 0.2785                       # |silu(x)| <= max(|x|, SILU_MIN) for every real x (the minimum is -0.27846)
BRIDGE_GATE = 32.0                      # bf16 silu(32) = 32 exactly
ROUNDING = 2.0 ** -8                    # bf16's unit roundoff: each rounded op is off by at most this, relatively
SLACK = 1.25                            # on the base's bound: the bf16 roundings inside a layer (a few ops of 2^-8)
MARGIN = 1.05                           # the right token's score must beat every other by 5 %, far above rounding
MAX_AMPLITUDE = 2.0 ** 60               # the base's norms square the residual in fp32 (max 2^128)
GATE_TAU = 2.0 ** -10                   # a base row's reading on the gate, relative to its rms, is at least this
ROWS = 16384                            # embedding rows at a time (the 2B's are 248,320 x 2048)
SILU_ZERO = 128.0                       # silu(x) is exactly -0 in fp32 for x <= -89 (exp(-x) overflows to inf)


@dataclass
class Margin:
    """The numbers of the margin argument for one merged checkpoint (README: "Merging")."""
    amplitude: float            # A: what the bridge adds on each raised output slot
    head_scale: float           # L: the GPU output rows score a raised slot with L (after the final norm's weight)
    base_bound: float           # B: max |sum of the base layers' outputs| on any dimension, for any input
    compiled_bound: float       # X: max |value| of the compiled residual
    base_row_hot: float         # max |E_b,d g_d| of a base output row on an output slot
    base_row_l1: float          # max sum_d |E_b,d g_d| of a base output row
    gpu_ratio: float            # lower bound of s_right / s_other for another GPU token
    base_ratio: float           # lower bound of s_right / |s_base| for a base token


@dataclass
class Gate:
    """The gate that makes the compiled layers inert on the base's tokens (README: "Base text")."""
    dims: list              # residual dimensions no GPU token holds and no compiled layer writes: the gate reads them
    scale: float            # G: every compiled MLP unit and GDN output gate reads -G times the gate direction
    bound: float            # max |gate or z pre-activation| the circuit's own weights can produce, any input
    rows_moved: int         # base embedding rows moved (on the gate's dimensions only) to read at least TAU
    rows: int
    largest_move: float     # the largest L2 move of a row, relative to its rms


# -- the base ------------------------------------------------------------------------------------------------------
def needed_fields(width) -> dict:
    """The base config fields the compiled layers share with it, and the values they need."""
    return {"hidden_size": width.hidden, "intermediate_size": width.intermediate,
            "linear_num_key_heads": width.heads, "linear_num_value_heads": width.heads,
            "linear_key_head_dim": width.head_dim, "linear_value_head_dim": width.head_dim,
            "linear_conv_kernel_dim": width.conv, "hidden_act": "silu"}


def text_config(config: dict) -> tuple[dict, str]:
    """The text model's config of a Qwen3.5 checkpoint config and the prefix of its weights."""
    kind = config.get("model_type")
    if kind == "qwen3_5_text":
        return dict(config), "model."
    if kind == "qwen3_5":
        text = dict(config.get("text_config") or {})
        text.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", False))
        return text, "model.language_model."
    raise MachineError(f"base model_type {kind!r}: a Qwen3.5 checkpoint has model_type 'qwen3_5_text' or 'qwen3_5'")


def check_base(text: dict, width) -> None:
    """Refuse a base whose shared widths differ from the circuit's, naming the field, its value and the need."""
    for name, need in needed_fields(width).items():
        value = text.get(name)
        if value != need:
            raise MachineError(f"base config {name} = {value!r}: the compiled layers need {need!r}")
    eps = text.get("rms_norm_eps", 1e-6)
    if eps > 1e-6:
        raise MachineError(f"base config rms_norm_eps = {eps}: the compiled layers' norms need at most 1e-6")
    types = text.get("layer_types")
    layers = text.get("num_hidden_layers")
    if not types or len(types) != layers:
        raise MachineError(f"base config layer_types = {types!r}: one entry per layer ({layers}) is needed")
    unknown = set(types) - {"linear_attention", "full_attention"}
    if unknown:
        raise MachineError(f"base config layer_types has {sorted(unknown)}: linear_attention / full_attention only")


class Weights:
    """The base's tensors by their text-model name (``model.layers.3.mlp.up_proj.weight``), read lazily from its
    safetensors file(s)."""

    def __init__(self, directory: Path, prefix: str):
        from safetensors import safe_open
        index = directory / "model.safetensors.index.json"
        if index.exists():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        elif (directory / "model.safetensors").exists():
            files = ["model.safetensors"]
        else:
            raise MachineError(f"base {directory}: no model.safetensors or model.safetensors.index.json")
        self._where: dict[str, tuple] = {}
        self._handles = [safe_open(str(directory / name), framework="pt") for name in files]
        for handle in self._handles:
            for key in handle.keys():
                if key.startswith(prefix):
                    self._where["model." + key[len(prefix):]] = (handle, key)
                elif key == "lm_head.weight":
                    self._where[key] = (handle, key)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def __getitem__(self, name: str):
        if name not in self._where:
            raise MachineError(f"base checkpoint has no tensor {name}")
        handle, key = self._where[name]
        return handle.get_tensor(key)

    def layer(self, index: int) -> dict:
        prefix = f"model.layers.{index}."
        return {name[len(prefix):]: self[name] for name in self._where if name.startswith(prefix)}


# -- the margin argument -------------------------------------------------------------------------------------------
def layer_bound(weights: dict, kind: str, text: dict):
    """Per residual dimension, a bound on |mixer output| + |MLP output| of one base layer, whatever its input.

    Each sublayer reads an RMS-normalised input, so ||x_n||_2 <= sqrt(d) max|1 + w|; from there every output is a
    sum of products of bounded terms (README, "Merging")."""
    import torch
    f = {name: tensor.double() for name, tensor in weights.items()}
    d = text["hidden_size"]
    n_in = math.sqrt(d) * float((1 + f["input_layernorm.weight"]).abs().max())
    n_post = math.sqrt(d) * float((1 + f["post_attention_layernorm.weight"]).abs().max())
    if kind == "linear_attention":
        dv, nv = text["linear_value_head_dim"], text["linear_num_value_heads"]
        z = torch.clamp(f["linear_attn.in_proj_z.weight"].norm(dim=1) * n_in, min=SILU_MIN)       # |silu(z_k)|
        gain = f["linear_attn.norm.weight"].abs().repeat(nv) * z                                    # (nv * dv,)
        per_head = (f["linear_attn.out_proj.weight"].abs() * gain).reshape(d, nv, dv)
        mixer = (per_head.norm(dim=2) * math.sqrt(dv)).sum(dim=1)   # ||normed head||_2 <= sqrt(dv), Cauchy-Schwarz
    else:
        heads, kv, hd = text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]
        value = f["self_attn.v_proj.weight"].norm(dim=1).reshape(kv, hd) * n_in      # a value row, any position
        value = value.repeat_interleave(heads // kv, dim=0).reshape(heads * hd)      # softmax: a convex mix of them
        mixer = f["self_attn.o_proj.weight"].abs() @ value                           # the sigmoid gate is <= 1
    gate = torch.clamp(f["mlp.gate_proj.weight"].norm(dim=1) * n_post, min=SILU_MIN)
    up = f["mlp.up_proj.weight"].norm(dim=1) * n_post
    mlp = f["mlp.down_proj.weight"].abs() @ (gate * up)
    return (mixer + mlp).numpy()


def base_rows(head, gains, out_dims) -> tuple[float, float]:
    """(max |E_b,d g_d| over base output rows b and output slots d, max sum_d |E_b,d g_d| over rows): what a base
    token's score can take from a raised slot and from the rest. Rows in blocks: the 2B head is 248,320 x 2048."""
    hot = l1 = 0.0
    gains = gains.abs().float()
    for start in range(0, head.shape[0], 8192):
        rows = head[start:start + 8192].float().abs() * gains
        hot = max(hot, float(rows[:, out_dims].max()))
        l1 = max(l1, float(rows.sum(dim=1).max()))
    return hot, l1


def choose_margin(base_bound: float, compiled_bound: float, hot: float, l1: float) -> Margin:
    """Pick the head scale L and the amplitude A (powers of two) so that the right GPU token beats every other
    token by MARGIN whatever the base's layers add; refuse if no amplitude fits."""
    rho = 2 * ROUNDING                     # the final norm's output and the logits are each rounded once
    head = 2.0 ** math.ceil(math.log2(max(8.0, 4 * hot)))
    e_lo, e_hi = head * (1 - ROUNDING), head * (1 + ROUNDING)   # W = bf16(L / g) times g
    b = SLACK * base_bound
    amplitude = 64.0
    while amplitude <= MAX_AMPLITUDE:
        lo = amplitude * (1 - 4 * ROUNDING) - compiled_bound - b     # a raised slot, the base's adds and roundings
        hi = amplitude * (1 + 4 * ROUNDING) + compiled_bound + b
        cold = 1.1 * (compiled_bound + b)                           # any other slot (24 rounded adds: < 10 %)
        right = 5 * e_lo * lo * (1 - rho)
        gpu = (1 + rho) * (4 * e_hi * hi + e_hi * cold)
        base = (1 + rho) * (5 * hot * hi + l1 * cold)
        if lo > 0 and right > MARGIN * gpu and right > MARGIN * base:
            return Margin(amplitude, head, base_bound, compiled_bound, hot, l1, right / gpu,
                          right / base if base else float("inf"))
        amplitude *= 2
    raise MachineError(f"the base's layers can add up to {base_bound:.3g} to a residual dimension: no bridge "
                       f"amplitude up to 2^60 keeps the GPU's argmax (the base's norms square it in fp32)")


# -- the merge -----------------------------------------------------------------------------------------------------
def merge(base_dir: str | Path, out_dir: str | Path, dtype: str = "bfloat16", width=None) -> Margin:
    """Write the merged checkpoint to ``out_dir``; returns the margin numbers (also in qwengpu_vocab.json, beside
    the gate's)."""
    import torch
    from safetensors.torch import save_file

    from .circuit.exact import compiled
    from .circuit.layers import QWEN35_2B
    from .circuit.model import state_dict, vocabulary
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    config_path = base_dir / "config.json"
    if not config_path.exists():
        raise MachineError(f"base {base_dir}: no config.json (a Qwen3.5 checkpoint directory is needed)")
    text, prefix = text_config(json.loads(config_path.read_text()))
    width = width or QWEN35_2B
    check_base(text, width)
    if dtype not in ("bfloat16", "float32"):
        raise MachineError(f"dtype {dtype!r}: a merged checkpoint is bfloat16 or float32")
    target = getattr(torch, dtype)
    weights = Weights(base_dir, prefix)
    circuit = compiled(width)
    compiled_layers = len(circuit.layers)
    bridge = compiled_layers
    base_layers = text["num_hidden_layers"]

    # The margin: the base's bound (every layer, any input), the compiled residual's largest value, the base rows.
    bound = np.zeros(text["hidden_size"])
    for index, kind in enumerate(text["layer_types"]):
        bound += layer_bound(weights.layer(index), kind, text)
    base_embed = weights["model.embed_tokens.weight"]
    tied = text.get("tie_word_embeddings", False) or "lm_head.weight" not in weights
    base_head = base_embed if tied else weights["lm_head.weight"]
    gains = 1.0 + weights["model.norm.weight"].double()
    head_entries = circuit.output_head()                      # {(token, dim): LOGIT}: the output slots
    out_dims = sorted({dim for _, dim in head_entries})
    small = [d for d in out_dims if abs(float(gains[d])) < 2.0 ** -40]
    if small:
        raise MachineError(f"base model.norm.weight[{small[0]}] = {float(gains[small[0]]) - 1}: the final norm "
                           f"erases output slot {small[0]} of the GPU (1 + w must not be 0)")
    compiled_bound = float(np.abs(circuit.residual.vector({})).max())
    margin = choose_margin(float(bound.max()), compiled_bound, *base_rows(base_head, gains, out_dims))
    compiled_state = state_dict(circuit, dtype)
    bridge_state = bridge_layer(bridge, out_dims, margin.amplitude, width)
    gpu_embed = compiled_state.pop("model.embed_tokens.weight")
    embed, gated = gate(base_embed.to(target), gpu_embed, {**compiled_state, **bridge_state}, compiled_layers + 1)

    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("model*.safetensors*"):
        stale.unlink()
    weight_map: dict[str, str] = {}
    total = 0

    def shard(name: str, tensors: dict) -> None:
        nonlocal total
        tensors = {key: value.to(target).contiguous() for key, value in tensors.items()}
        save_file(tensors, str(out_dir / name), metadata={"format": "pt"})
        for key, value in tensors.items():
            weight_map[key] = name
            total += value.numel() * value.element_size()

    # Compiled layers, as the compiler's state dict gives them but for the gate's columns (GPU-only vocabulary rows
    # dropped: rebuilt below).
    for name in ("lm_head.weight", "model.norm.weight"):
        compiled_state.pop(name)
    shard("model-compiled.safetensors", compiled_state)
    del compiled_state
    shard("model-bridge.safetensors", bridge_state)
    for index in range(base_layers):
        tensors = {f"model.layers.{bridge + 1 + index}.{name}": value
                   for name, value in weights.layer(index).items()}
        shard(f"model-base-{index:03d}.safetensors", tensors)
    gpu_head = torch.zeros(T.VOCAB_SIZE, width.hidden)
    tokens, dims = zip(*head_entries)
    gpu_head[list(tokens), list(dims)] = (margin.head_scale / gains[list(dims)]).float()
    if float(gpu_head.abs().max()) > torch.finfo(target).max:
        raise MachineError("a GPU output row overflows the dtype: the base's final norm weight is too close to -1")
    shard("model-vocab.safetensors", {
        "model.embed_tokens.weight": torch.cat([embed, gpu_embed.to(target)]),
        "lm_head.weight": torch.cat([base_head.to(target), gpu_head.to(target)]),
        "model.norm.weight": weights["model.norm.weight"]})
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=1))

    offset = int(base_embed.shape[0])
    merged = merged_config(text, compiled_layers, offset, dtype)
    (out_dir / "config.json").write_text(json.dumps(merged, indent=2))
    description = vocabulary(circuit)
    description.update({"offset": offset, "vocab_size": offset + T.VOCAB_SIZE, "gpu_vocab_size": T.VOCAB_SIZE,
                        "compiled_layers": compiled_layers, "bridge_layer": bridge,
                        "base_layers": list(range(bridge + 1, bridge + 1 + base_layers)),
                        "base": str(base_dir), "margin": asdict(margin), "gate": asdict(gated)})
    (out_dir / VOCAB_FILE).write_text(json.dumps(description, indent=1))
    for item in base_dir.iterdir():        # the tokenizer and generation files: the base's tokens keep their ids
        if item.is_file() and item.name != "config.json" and not item.name.startswith("model") and \
                item.suffix in (".json", ".txt", ".model", ".jinja"):
            shutil.copy2(item, out_dir / item.name)
    # On base text the compiled layers are inert (the gate), but the GPU's output rows still score the base's final
    # residual and can beat the base's tokens there: generate() leaves them out, as the base's tokenizer cannot
    # decode them. The QwenGPU backends take their own argmax over the whole vocabulary and never read this file.
    generation = out_dir / "generation_config.json"
    settings = json.loads(generation.read_text()) if generation.exists() else {}
    settings["suppress_tokens"] = list(range(offset, offset + T.VOCAB_SIZE))
    generation.write_text(json.dumps(settings))
    return margin


def gate(base_embed, gpu_embed, state: dict, layers: int):
    """Make the compiled layers and the bridge add exactly 0 at a base token's position; returns the base's input
    embedding rows (moved where needed) and the Gate. ``state`` (the compiled layers' and the bridge's tensors) is
    edited in place: only the gate's columns of the MLP gates and the GDN output gates change.

    The gate reads the dimensions D that every GPU embedding row leaves 0 and no compiled layer writes, so at a GPU
    token's position they are 0 in every compiled layer's input and the gate's columns add exact zeros: the GPU's
    tokens are untouched. At a base token's position the residual is the base row e (the layers before added 0), and
    every gate row reads g = (circuit's own terms) - G c.x_n over D, with x_n = e / rms(e) and c a unit direction:
    the circuit's terms are at most B = max ||row||_1 sqrt(d) whatever e holds, so G c.e >= (B + SILU_ZERO) rms(e)
    puts every pre-activation at or below -SILU_ZERO, where silu is exactly -0: each unit and each GDN head
    outputs 0 and the residual stays e. c is the mean direction of the base's rows on D (a trained model's
    embeddings share one); a row that reads less than TAU rms(e) on c, plus what bf16's rounding of x_n can take
    (2^-7 ||e_D||), is moved along c on D by the least that makes it read that (its other dimensions are kept)."""
    import torch
    hidden = gpu_embed.shape[1]
    writes = torch.zeros(hidden, dtype=torch.bool)
    writes |= gpu_embed.abs().sum(dim=0) != 0
    readers = []
    for index in range(layers):
        p = f"model.layers.{index}."
        for name in ("linear_attn.out_proj.weight", "mlp.down_proj.weight"):
            writes |= state[p + name].abs().sum(dim=1) != 0
        for name in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            if bool((state[p + name] != 0).any()):
                raise MachineError(f"{p + name}: the gate needs the compiled layers' norms at gain 1")
        readers += [p + "mlp.gate_proj.weight", p + "linear_attn.in_proj_z.weight"]
    dims = [d for d in range(hidden) if not writes[d]]
    if not dims:
        raise MachineError("every residual dimension holds a GPU value: the gate has none to read")
    bound = max(float(state[name].double().abs().sum(dim=1).max()) for name in readers) * math.sqrt(hidden) * (1 + 2.0 ** -7)   # x_n's bf16 rounding
    scale = 2.0 ** math.ceil(math.log2((bound + SILU_ZERO) / GATE_TAU))
    direction = torch.zeros(len(dims), dtype=torch.float64)
    for start in range(0, base_embed.shape[0], ROWS):
        direction += base_embed[start:start + ROWS, dims].double().sum(dim=0)
    if float(direction.norm()) == 0.0:
        direction = torch.ones(len(dims), dtype=torch.float64)
    weights = (scale * direction / direction.norm()).to(base_embed.dtype)          # the gate's columns, as stored
    c = weights.double() / scale

    def reads(rows):
        """(what each row reads on the gate, what it must read: TAU rms plus bf16's rounding of x_n, its rms)"""
        rms = rows.pow(2).mean(dim=1).sqrt()
        return rows[:, dims] @ c, GATE_TAU * rms + 2.0 ** -7 * rows[:, dims].norm(dim=1) * c.norm(), rms

    moved, count, largest = base_embed.clone(), 0, 0.0
    for start in range(0, base_embed.shape[0], ROWS):
        e = base_embed[start:start + ROWS].double()
        got, need, rms = reads(e)
        short = (1.5 * need - got).clamp(min=0)
        block = e.clone()
        block[:, dims] += short[:, None] * c / c.dot(c)
        moved[start:start + ROWS] = block.to(base_embed.dtype)
        got, need, _ = reads(moved[start:start + ROWS].double())
        if bool((got < need).any()):
            row = start + int((got < need).nonzero()[0])
            raise MachineError(f"base embedding row {row} reads too little on the gate after rounding")
        count += int((short > 0).sum())
        largest = max(largest, float(((moved[start:start + ROWS].double() - e).norm(dim=1) / rms).max()))
    for name in readers:
        state[name][:, dims] = -weights.to(state[name].dtype)
    return moved, Gate(dims, scale, bound, count, int(base_embed.shape[0]), largest)


def bridge_layer(index: int, out_dims, amplitude: float, width) -> dict:
    """The bridge: a linear-attention layer whose mixer is zero (an exact identity) and whose MLP adds
    ``amplitude`` to every output slot the compiled layers raised (the post-attention norm makes a raised slot 1)."""
    import torch
    h, vd, heads = width.hidden, width.key_dim, width.heads
    if len(out_dims) > width.intermediate:
        raise MachineError(f"{len(out_dims)} output slots: the bridge has {width.intermediate} MLP units")
    p = f"model.layers.{index}."
    gate = torch.zeros(width.intermediate, h)
    up = torch.zeros(width.intermediate, h)
    down = torch.zeros(h, width.intermediate)
    for unit, dim in enumerate(out_dims):
        gate[unit, dim], up[unit, dim], down[dim, unit] = BRIDGE_GATE, 1.0, amplitude / BRIDGE_GATE
    return {p + "linear_attn.in_proj_qkv.weight": torch.zeros(width.conv_dim, h),
            p + "linear_attn.conv1d.weight": torch.zeros(width.conv_dim, 1, width.conv),
            p + "linear_attn.in_proj_z.weight": torch.zeros(vd, h),
            p + "linear_attn.in_proj_b.weight": torch.zeros(heads, h),
            p + "linear_attn.in_proj_a.weight": torch.zeros(heads, h),
            p + "linear_attn.A_log": torch.full((heads,), -math.inf),
            p + "linear_attn.dt_bias": torch.zeros(heads),
            p + "linear_attn.norm.weight": torch.ones(width.head_dim),
            p + "linear_attn.out_proj.weight": torch.zeros(h, vd),
            p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up, p + "mlp.down_proj.weight": down,
            p + "input_layernorm.weight": torch.zeros(h), p + "post_attention_layernorm.weight": torch.zeros(h)}


def merged_config(text: dict, compiled_layers: int, offset: int, dtype: str) -> dict:
    """The base's text config with the compiled layers and the bridge in front and the GPU's tokens appended."""
    config = {k: v for k, v in text.items() if k not in ("architectures", "full_attention_interval")}
    config.update({"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"],
                   "num_hidden_layers": compiled_layers + 1 + text["num_hidden_layers"],
                   "layer_types": ["linear_attention"] * (compiled_layers + 1) + list(text["layer_types"]),
                   "vocab_size": offset + T.VOCAB_SIZE, "tie_word_embeddings": False, "dtype": dtype})
    return config


def random_base(directory: str | Path, layer_types=("linear_attention", "full_attention"), vocab_size: int = 1024,
                scale: float = 1.0, seed: int = 0, embedding_mean: float = 0.0, **fields) -> Path:
    """A random Qwen3.5 text checkpoint at Qwen3.5-2B's widths (tied embeddings, transformers' own initialisation),
    saved with save_pretrained: the stand-in for a real base in tests and benchmarks (no weights are downloaded).
    ``scale`` multiplies every layer's output projections (out_proj, o_proj, down_proj): a base with large
    activations. ``embedding_mean`` is added to every embedding entry: rows that share a direction, as a trained
    model's do (transformers draws them around 0). ``fields`` override config fields (the 2B's full config: see
    qccl_bench.merge_full).

        random_base("/tmp/base", scale=2.0 ** 12)
    """
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    torch.manual_seed(seed)
    settings = dict(vocab_size=vocab_size, hidden_size=2048, intermediate_size=6144, num_hidden_layers=len(layer_types),
                    layer_types=list(layer_types), num_attention_heads=8, num_key_value_heads=2, head_dim=256,
                    linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128,
                    linear_value_head_dim=128, linear_conv_kernel_dim=4, hidden_act="silu", rms_norm_eps=1e-6,
                    tie_word_embeddings=True, max_position_embeddings=262144)
    settings.update(fields)
    config = Qwen3_5TextConfig(**settings)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)             # half the memory; the 2B ships in bf16
    try:
        model = Qwen3_5ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        for layer in model.model.layers:
            mixer = layer.linear_attn.out_proj if hasattr(layer, "linear_attn") else layer.self_attn.o_proj
            for linear in (mixer, layer.mlp.down_proj):
                linear.weight.mul_(scale)
            # transformers initialises the norm weights to 0 (a gain of 1): give them a spread, as a trained model has
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.normal_(0.0, 0.1)
        model.model.norm.weight.normal_(0.0, 0.1)
        model.model.embed_tokens.weight.add_(embedding_mean)
    model.save_pretrained(directory)
    return Path(directory)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m qwengpu.merge",
                                     description="Merge the compiled QwenGPU in front of a Qwen3.5 checkpoint.")
    parser.add_argument("base", help="a Qwen3.5 text checkpoint directory (config.json + safetensors)")
    parser.add_argument("out", help="where to write the merged checkpoint")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args(argv)
    margin = merge(args.base, args.out, args.dtype)
    print(f"merged {args.base} -> {args.out}: bridge amplitude 2^{int(math.log2(margin.amplitude))}, base bound "
          f"{margin.base_bound:.3g}, right/other >= {margin.gpu_ratio:.3f} (GPU) and {margin.base_ratio:.3f} (base)")


if __name__ == "__main__":
    main()
