"""The model backend: the compiled circuit as a transformers Qwen3_5ForCausalLM, decoded greedily token by token.

The weights go in through ``load_state_dict(strict=True)`` into a model built from a Qwen3.5 text config whose layers
are all linear attention (Gated DeltaNet + SwiGLU, transformers' own Qwen3_5DecoderLayer). Decoding is a manual
loop with the recurrent cache (``generate()`` refuses all-linear models): one forward per prediction, the tokens fed
since the last one (the model's own token, then a host copy, a ROM row, a peer's packets) going in as one run
(``feed_run``; transformers' chunked rule, exact on the compiled layers). The cache is initialised with zero states
before the first token, so the first token takes the same path as the ones after it (a forward without states would
take transformers' prefill path instead).

Example::

    from qwengpu import Device
    dev = Device(backend="model", dtype="bfloat16", device="cpu")
    dev.write(3, [7]); dev.read(3, 1)        # array([7], dtype=int32): argmax of the model's own logits

    from qwengpu.circuit.model import save_checkpoint
    save_checkpoint("qwengpu-2b")            # config.json + model.safetensors + qwengpu_vocab.json
"""
from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path

import numpy as np

from .. import tokens as T
from ..isa import MachineError
from .compiler import Circuit
from .exact import compiled
from .layers import QWEN35_2B, Width, dense
from .vocabulary import LOGIT

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


@functools.lru_cache(maxsize=2)
def _shared_checkpoint(checkpoint: str, dtype: str, device: str):
    return load_checkpoint(checkpoint, dtype, device)


def load_checkpoint(checkpoint: str | Path, dtype: str = "bfloat16", device: str = "cpu"):
    """(model, description): a compiled-only or merged checkpoint through ``AutoModelForCausalLM.from_pretrained``
    and its vocabulary description (qwengpu_vocab.json; ``offset`` is the id of the GPU's token 0, 0 when the
    vocabulary is the GPU's alone)."""
    import torch
    from transformers import AutoModelForCausalLM
    directory = Path(checkpoint)
    if not (directory / VOCAB_FILE).exists():
        raise MachineError(f"checkpoint {directory}: no {VOCAB_FILE} beside the weights (save it with "
                           "qwengpu.circuit.model.save_checkpoint or python -m qwengpu.merge)")
    description = json.loads((directory / VOCAB_FILE).read_text())
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, dtype)).to(device)
    return model.eval(), description


GDN_PATHS = ("chunked", "recurrent")


@contextlib.contextmanager
def chunk_rule(wrap):
    """For the duration, transformers runs ``wrap(rule)`` where it would run ``rule``, its Gated DeltaNet rule for a
    forward of more than one token (torch_chunk_gated_delta_rule, or flash-linear-attention's where that imports).
    Not thread-safe: it swaps a module attribute of transformers' qwen3_5 modeling file."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
    rule = qwen.torch_chunk_gated_delta_rule
    qwen.torch_chunk_gated_delta_rule = wrap(rule)
    try:
        yield
    finally:
        qwen.torch_chunk_gated_delta_rule = rule


@contextlib.contextmanager
def gdn_path(path: str):
    """Which Gated DeltaNet rule transformers runs on a forward of more than one token, for the duration.

    "chunked" is transformers' own (torch_chunk_gated_delta_rule: the WY / UT-transform form, 64-token chunks);
    "recurrent" swaps in torch_recurrent_gated_delta_rule, the decode rule, applied token after token inside one call
    (the projections, conv and MLP still run on the whole chunk at once). A one-token forward always takes the
    recurrent rule. Not thread-safe (chunk_rule).

        with gdn_path("recurrent"):
            backend.feed_many(tokens)
    """
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
    if path not in GDN_PATHS:
        raise MachineError(f"GDN path {path!r}: the paths are {GDN_PATHS}")
    recurrent = qwen.torch_recurrent_gated_delta_rule

    def whole_chunk(query, key, value, g, beta, chunk_size=64, **kwargs):
        return recurrent(query, key, value, g=g, beta=beta, **kwargs)
    with chunk_rule((lambda rule: whole_chunk) if path == "recurrent" else (lambda rule: rule)):
        yield


class ModelBackend:
    """Backend ``model``: a transformers Qwen3.5 model holding the compiled circuit, decoded greedily.

    ``checkpoint``: a directory saved by ``save_checkpoint`` (the GPU's vocabulary alone) or by ``python -m
    qwengpu.merge`` (the compiled layers in front of a Qwen3.5 checkpoint, the GPU's tokens after the base's). The
    argmax runs over the whole vocabulary: a base token where the machine needs one of its own is a MachineError.

        dev = Device(backend="model", checkpoint="merged-2b", dtype="bfloat16", device="cpu")
    """

    name = "model"

    def __init__(self, circuit: Circuit | None = None, dtype: str = "bfloat16", device: str = "cpu",
                 checkpoint: str | Path | None = None, width: Width | None = None, trace: bool = False):
        import torch
        if dtype not in ("bfloat16", "float32"):
            raise MachineError(f"dtype {dtype!r}: the model backend runs bfloat16 (deployment) or float32")
        self.offset = 0
        if checkpoint is not None:
            # Loaded models are shared like compiled ones (read-only weights, a cache per backend); a traced
            # backend hooks its layers, so it loads its own copy.
            load = load_checkpoint if trace else _shared_checkpoint
            self.model, description = load(str(checkpoint), dtype, device)
            self.supported_ops = tuple(description["supported_ops"])
            self.atomics = description["atomics"]
            self.divisors = tuple(description["divisors"])
            self.offset = int(description.get("offset", 0))
            self.compiled_layers = int(description.get("compiled_layers", len(description.get("layers", []))))
        else:
            circuit = circuit if circuit is not None else compiled(width or QWEN35_2B)
            # The weights are read-only and each backend has its own cache, so devices share one model (QLink's
            # ranks in one process); a traced backend hooks its layers and keeps a model of its own.
            self.model = build_model(circuit, dtype, device) if trace else _shared_model(circuit, dtype, device)
            self.supported_ops = circuit.supported_ops
            self.atomics = circuit.atomics
            self.divisors = circuit.divisors
            self.compiled_layers = len(circuit.layers)
        self.torch, self.device, self.trace = torch, device, trace
        self.layer_types = list(self.model.config.layer_types)
        self.residuals: list[np.ndarray] = []
        self.chunk_residuals: list[np.ndarray] = []    # with trace, after feed_many: (positions, hidden) per layer
        if trace:
            for layer in self.model.model.layers:
                layer.register_forward_hook(self._capture)
        self._reset()

    def _capture(self, module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        self.residuals.append(hidden[0, -1].float().cpu().numpy().astype(np.float64))
        self.chunk_residuals.append(hidden[0].float().cpu().numpy().astype(np.float64))

    def _reset(self) -> None:
        self.cache = new_cache(self.model, batch=1, device=self.device)
        self.bank: tuple[StateBank, int] | None = None      # (bank, row) once a batched forward banked it
        self._logits = None
        self.position = 0

    # -- backend interface -------------------------------------------------------------------------------------
    def snapshot(self):
        return _cache_state(self.cache), self._logits, self.position

    def restore(self, state) -> None:
        states, self._logits, self.position = state
        _set_cache_state(self.cache, states)

    def predict(self) -> int:
        if self._logits is None:
            raise MachineError("the model has been fed nothing yet: there is no prediction")
        return self._gpu_token(int(self._logits.argmax()))

    def _gpu_token(self, index: int) -> int:
        """The GPU token of a vocabulary index; an index outside the GPU's tokens is the model's error."""
        token = index - self.offset
        if not 0 <= token < T.VOCAB_SIZE:
            raise MachineError(f"the model's argmax is vocabulary id {index}, not one of the GPU's tokens "
                               f"({self.offset}..{self.offset + T.VOCAB_SIZE - 1}): the base model's layers moved it")
        return token

    def margin(self) -> float:
        top2 = self._logits.topk(2).values
        return float(top2[0] - top2[1])

    def _ids(self, tokens) -> list[int]:
        for token in tokens:
            if not 0 <= token < T.VOCAB_SIZE:
                raise MachineError(f"token {token} is outside the vocabulary of {T.VOCAB_SIZE}")
        return [self.offset + int(token) for token in tokens]

    def feed(self, token: int) -> None:
        self.feed_run([token])

    def feed_run(self, tokens) -> None:
        """Feed tokens of which only the last one's prediction is read (``predict()``) in ONE forward: the device
        gives a host copy, a ROM row, a peer's packets, with the model's own token before them, as one run.

        The states after it are those of feeding the tokens one by one: transformers' chunked Gated DeltaNet rule
        is exact on the compiled layers (qwengpu.circuit.report, per path; tests/test_circuit_model.py compares
        runs with one-by-one feeds bit for bit), and a merged base's layers cannot move a GPU token's argmax."""
        ids = self._ids(tokens)
        if not ids:
            raise MachineError("feed_run: an empty run")
        self.residuals = []
        self.chunk_residuals = []
        self._logits = self._forward(ids, keep=1)[-1]

    def feed_many(self, tokens) -> tuple[list[int], list[float]]:
        """Feed several tokens in one forward (teacher forcing). Returns the argmax (a vocabulary index minus the
        GPU offset, so a GPU token, or a negative number for a base token) and the top-2 margin at each position.
        The Gated DeltaNet rule is transformers' chunked one unless ``gdn_path`` says otherwise."""
        ids = self._ids(tokens)
        if not ids:
            return [], []
        self.residuals = []
        self.chunk_residuals = []
        logits = self._forward(ids)
        self._logits = logits[-1]
        top2 = logits.topk(2, dim=-1)
        argmax = (top2.indices[:, 0] - self.offset).tolist()
        margins = (top2.values[:, 0] - top2.values[:, 1]).tolist()
        return argmax, margins

    @staticmethod
    def forward_batch(backends: list, runs: list[list[int]]) -> None:
        """Feed ``runs[i]`` (tokens as ``feed_run`` takes them; every run of one length) to ``backends[i]`` in ONE
        forward of their shared model: the batch dimension is the rank (qwengpu.circuit.batched).

        The ranks' linear-attention states are rows of a ``StateBank``: each backend's own cache holds views of its
        row, and transformers updates states in place, so a forward over the bank's consecutive rows updates every
        rank's states with no copy in or out. A merged model's full-attention layers hold keys as long as each
        rank's own position: they are stacked per forward, shorter rows padded on the left and the padding masked
        out (an additive mask of the dtype's minimum: exact zero weights; causal within a run), and each row's new
        keys are appended to its rank's cache; the rows' positions are their own. Only the base's layers see the
        padding, and the base's layers cannot move a GPU token's argmax (the margin argument in the circuit
        README), so every rank writes the tokens it writes alone."""
        first = backends[0]
        torch = first.torch
        if any(b.model is not first.model for b in backends):
            raise MachineError("forward_batch: the backends must share one model")
        n = len(runs[0])
        if n == 0 or any(len(run) != n for run in runs):
            raise MachineError(f"forward_batch: runs of one length, 1 or more, got {[len(run) for run in runs]}")
        ids = [b._ids(run) for b, run in zip(backends, runs)]
        bank = StateBank.holding(backends)
        cache, rows = bank.batch(backends)
        lengths = [b.position for b in backends]            # every position fed holds one key per full layer
        longest = max(lengths)
        for index, (kind, layer) in enumerate(zip(first.layer_types, cache.layers)):
            if kind == "full_attention" and longest:
                keys, values = _left_padded([b.cache.layers[index] for b in backends], lengths)
                layer.lazy_initialization(keys, values)
                layer.keys, layer.values = keys, values
        masks = {"full_attention": None, "linear_attention": None}
        if (n > 1 or longest != min(lengths)) and "full_attention" in first.layer_types:
            dtype = next(first.model.parameters()).dtype
            lowest = torch.finfo(dtype).min
            mask = torch.zeros(len(backends), 1, n, longest + n, dtype=dtype, device=first.device)
            for i, length in enumerate(lengths):
                mask[i, :, :, :longest - length] = lowest
            mask[:, :, :, longest:] += torch.full((n, n), lowest, dtype=dtype, device=first.device).triu(1)
            masks["full_attention"] = mask
        positions = torch.arange(n, device=first.device)[None] + torch.tensor(lengths, device=first.device)[:, None]
        with torch.no_grad():
            out = first.model(input_ids=torch.tensor(ids, device=first.device), past_key_values=cache,
                              position_ids=positions, use_cache=True, attention_mask=masks, logits_to_keep=1)
        if rows is not None:
            bank.scatter(cache, rows)
        for index, (kind, layer) in enumerate(zip(first.layer_types, cache.layers)):
            if kind == "full_attention":                    # the run's keys are every row's last n
                for i, b in enumerate(backends):
                    b.cache.layers[index].update(layer.keys[i:i + 1, :, -n:], layer.values[i:i + 1, :, -n:])
                layer.keys = layer.values = None            # fresh again: the next forward stacks anew
                layer.is_initialized = False
        logits = out.logits[:, -1].float()
        for i, backend in enumerate(backends):
            backend._logits = logits[i]
            backend.position += n
            backend.residuals = []

    def _forward(self, ids: list[int], keep: int = 0):
        """The logits of the last ``keep`` positions (0: every position's)."""
        torch = self.torch
        n = len(ids)
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([ids], device=self.device), past_key_values=self.cache,
                             position_ids=torch.arange(self.position, self.position + n,
                                                       device=self.device)[None],
                             use_cache=True, attention_mask=_masks(self.layer_types, n), logits_to_keep=keep)
        self.position += n
        return out.logits[0].float()


def _left_padded(layers, lengths: list[int]):
    """One full-attention layer's keys and values of every rank, stacked into a batch: rank i's ``lengths[i]``
    keys at the right end of its row, zeros before them (the padding forward_batch's mask hides)."""
    longest = max(lengths)
    filled = next(layer for layer, length in zip(layers, lengths) if length == longest)
    keys = filled.keys.new_zeros((len(layers),) + filled.keys.shape[1:])
    values = filled.values.new_zeros((len(layers),) + filled.values.shape[1:])
    for i, (layer, length) in enumerate(zip(layers, lengths)):
        if length:
            keys[i, :, longest - length:] = layer.keys[0]
            values[i, :, longest - length:] = layer.values[0]
    return keys, values


def _masks(layer_types, n: int):
    """Attention masks for a forward of ``n`` tokens. One token attends to every cached key, so no mask is built
    (transformers refuses to build one for an all-linear model); several tokens with full-attention layers need the
    causal mask transformers builds when given None."""
    if n == 1 or "full_attention" not in layer_types:
        return {"full_attention": None, "linear_attention": None}
    return None


def new_cache(model, batch: int = 1, device: str = "cpu", max_len: int | None = None):
    """A DynamicCache whose linear-attention layers start from zero states, so that every token, the first one
    included, takes the same path as the ones after it (a first forward without states would take the prefill
    path). Full-attention layers start empty.

    With ``max_len``, a StaticCache: its full-attention layers hold ``max_len`` zero keys from the start, each
    forward writing its keys in place at the layer's own counter (transformers' StaticLayer), so a decode step keeps
    its shapes and addresses (a CUDA graph, torch.compile). Every key is attended: the caller masks the unwritten
    ones out."""
    import torch
    from transformers import DynamicCache, StaticCache
    config = model.config
    cache = DynamicCache(config=config) if max_len is None else StaticCache(config=config, max_cache_len=max_len)
    dtype = next(model.parameters()).dtype
    if max_len is not None:
        for kind, layer in zip(config.layer_types, cache.layers):
            if kind == "full_attention":
                shape = (batch, config.num_key_value_heads, 1, config.head_dim)
                layer.lazy_initialization(torch.zeros(shape, dtype=dtype, device=device),
                                          torch.zeros(shape, dtype=dtype, device=device))
    conv_dim = 2 * config.linear_num_key_heads * config.linear_key_head_dim + \
        config.linear_num_value_heads * config.linear_value_head_dim
    for kind, layer in zip(config.layer_types, cache.layers):
        if kind != "linear_attention":
            continue
        layer.lazy_initialization(
            conv_states=torch.zeros(batch, conv_dim, config.linear_conv_kernel_dim, dtype=dtype, device=device),
            recurrent_states=torch.zeros(batch, config.linear_num_value_heads, config.linear_key_head_dim,
                                         config.linear_value_head_dim, dtype=torch.float32, device=device))
        layer.has_previous_state[0] = True
    return cache


class StateBank:
    """The linear-attention states of ranks that batch on one shared model, as rows of one tensor per state.

    A bank is made for a batch of backends: their states are copied into rows 0..n-1 once, and each backend's own
    cache is pointed at views of its row (``backend.bank`` = (bank, row)). Transformers updates conv and recurrent
    states in place (``copy_``, to keep CUDA graphs' static addresses), so a lone feed writes the backend's row and
    a forward over a slice of consecutive rows writes every member's states at once: a batched tick copies no
    state. A batch whose members are rows of one bank but not consecutive ones (a rank left the window early) is
    gathered and scattered back, one operation per state; any other batch gets a bank of its own.

        bank = StateBank.holding(backends)
        cache, rows = bank.batch(backends)      # rows is None when the cache views the bank
    """

    def __init__(self, backends: list):
        first = backends[0]
        self.cache = new_cache(first.model, batch=len(backends), device=first.device)
        self.linear = [i for i, kind in enumerate(first.layer_types) if kind == "linear_attention"]
        self.views: dict[tuple[int, int], object] = {}
        for row, backend in enumerate(backends):
            for index in self.linear:
                banked, mine = self.cache.layers[index], backend.cache.layers[index]
                banked.conv_states[0][row:row + 1].copy_(mine.conv_states[0])
                banked.recurrent_states[0][row:row + 1].copy_(mine.recurrent_states[0])
                mine.conv_states[0] = banked.conv_states[0][row:row + 1]
                mine.recurrent_states[0] = banked.recurrent_states[0][row:row + 1]
            backend.bank = (self, row)

    @classmethod
    def holding(cls, backends: list) -> "StateBank":
        """The bank every backend's states are rows of, or a new bank of these backends."""
        bank = backends[0].bank[0] if backends[0].bank else None
        if bank is None or any(b.bank is None or b.bank[0] is not bank for b in backends):
            bank = cls(backends)
        return bank

    def batch(self, backends: list):
        """(cache, rows): a batched cache for a forward of these members, in their order. Consecutive rows: a cache
        viewing the bank (rows None: the forward updates the members in place); otherwise a gathered copy, to be
        scattered back to ``rows`` after the forward."""
        rows = [b.bank[1] for b in backends]
        start, n = rows[0], len(rows)
        if rows == list(range(start, start + n)):
            if (start, n) not in self.views:
                view = new_cache(backends[0].model, batch=n, device=backends[0].device)
                for index in self.linear:
                    banked, layer = self.cache.layers[index], view.layers[index]
                    layer.conv_states[0] = banked.conv_states[0][start:start + n]
                    layer.recurrent_states[0] = banked.recurrent_states[0][start:start + n]
                self.views[start, n] = view
            return self.views[start, n], None
        torch = backends[0].torch
        where = torch.tensor(rows, device=backends[0].device)
        gathered = new_cache(backends[0].model, batch=n, device=backends[0].device)
        for index in self.linear:
            banked, layer = self.cache.layers[index], gathered.layers[index]
            layer.conv_states[0] = banked.conv_states[0].index_select(0, where)
            layer.recurrent_states[0] = banked.recurrent_states[0].index_select(0, where)
        return gathered, where

    def scatter(self, cache, rows) -> None:
        """Write a gathered cache's states back to the bank's ``rows``."""
        for index in self.linear:
            banked, layer = self.cache.layers[index], cache.layers[index]
            banked.conv_states[0].index_copy_(0, rows, layer.conv_states[0])
            banked.recurrent_states[0].index_copy_(0, rows, layer.recurrent_states[0])


def _cache_state(cache) -> list:
    """A copy of every layer's cached tensors: (conv, recurrent) for linear attention, (keys, values) for full."""
    states = []
    for kind, layer in zip(_types(cache), cache.layers):
        if kind == "linear_attention":
            states.append(("linear", layer.conv_states[0].clone(), layer.recurrent_states[0].clone()))
        elif getattr(layer, "is_initialized", False):
            states.append(("full", layer.keys.clone(), layer.values.clone()))
        else:
            states.append(("empty",))
    return states


def _types(cache) -> list[str]:
    """Each cache layer's kind: a linear-attention layer holds recurrent states (new_cache initialised them)."""
    return ["linear_attention" if getattr(layer, "is_recurrent_states_initialized", {}).get(0) else "full_attention"
            for layer in cache.layers]


def _set_cache_state(cache, states) -> None:
    for layer, state in zip(cache.layers, states):    # states record each layer's kind
        if state[0] == "linear":
            layer.conv_states[0].copy_(state[1])
            layer.recurrent_states[0].copy_(state[2])
        elif state[0] == "full":
            layer.keys, layer.values = state[1].clone(), state[2].clone()
        elif getattr(layer, "is_initialized", False):
            layer.keys, layer.values = layer.keys[..., :0, :], layer.values[..., :0, :]


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
