"""The circuit compiler: the QwenGPU machine as the weights of a stack of Qwen3.5 linear-attention decoder layers.

Stages (each a function below, in order): ``token_features`` (the embedding's one-hot groups), ``context_layer`` (what
the previous tokens were), ``memory_layer`` (global memory and the host's reads), ``output_groups`` (the prediction),
then ``seal`` (ballast) and the embedding / output head. The result is a ``Circuit``: named groups, sparse layers and
the vocabulary maps, which ``qwengpu.circuit.exact`` evaluates exactly and ``qwengpu.circuit.model`` turns into a
transformers state dict.

Where each machine part lives:
- the token's identity (family, argument nibbles, addresses): embedding groups ``family``, ``nibble0..3``,
  ``mem_address``, ``read_address``;
- the previous tokens' families: layer 0, heads ``back1`` / ``back2`` (copies through conv taps 1 and 2);
- global memory: layer 1, heads ``memory lo`` / ``memory hi``: one GDN head state each, row a = word a as eight
  one-hot nibbles (lo then hi), written at the hi VAL of every write record (key = the header two tokens back),
  read by READ a (q = one-hot a from the READ token, at its position for lo and one token later for hi);
- the prediction: groups ``out_family`` and ``out_nibble0..3``; the output head scores each token by the slots it
  matches, so the right token wins by one whole slot (LOGIT per slot).

Not compiled yet (the interpreter remains the only backend that runs kernels): ROM, WARP, registers, records and
the ALU. ``Circuit.supports`` names what this circuit runs, and the circuit and model backends refuse the rest.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import tokens as T
from ..isa import MEMORY_WORDS, SINK
from .basis import HOT, CircuitError, Residual
from .layers import QWEN35_2B, Layer, Source, Width

FAMILIES = ("VAL", "MEM", "READ", "EXEC", "ROM", "WARP", "END")
NIBBLES = 4
LOGIT = 8.0             # output-head weight per matching slot: the right token beats every other by >= LOGIT


@dataclass
class Circuit:
    """A compiled QwenGPU: the residual's groups, the layers, and how tokens enter and leave the stream."""
    width: Width
    residual: Residual
    layers: list[Layer] = field(default_factory=list)
    supports: tuple[str, ...] = ("write", "read")

    def layer(self, purpose: str) -> Layer:
        layer = Layer(len(self.layers), self.width, self.residual, purpose)
        self.layers.append(layer)
        return layer

    # -- vocabulary ------------------------------------------------------------------------------------------------
    @staticmethod
    def token_slots(token: int) -> dict:
        """The embedding's hot slots for a token (the groups not named stay at their defaults)."""
        family, arg = T.kind(token), T.argument(token)
        arg = 0 if arg is None else arg
        slots = {"family": family}
        for i in range(NIBBLES):
            slots[f"nibble{i}"] = (arg >> (4 * i)) & 15
        if family == "MEM":
            slots["mem_address"] = arg
        if family == "READ":
            slots["read_address"] = arg
        return slots

    @staticmethod
    def output_slots(token: int) -> dict:
        family, arg = T.kind(token), T.argument(token)
        arg = 0 if arg is None else arg
        slots = {"out_family": family}
        for i in range(NIBBLES):
            slots[f"out_nibble{i}"] = (arg >> (4 * i)) & 15
        return slots

    def embedding(self) -> np.ndarray:
        """(vocab, hidden) embedding: every row a residual vector with mean(x^2) = 64."""
        base = np.array(self.residual.vector({}), dtype=np.float32)
        table = np.tile(base, (T.VOCAB_SIZE, 1))
        for token in range(T.VOCAB_SIZE):
            for name, slot in self.token_slots(token).items():
                group = self.residual[name]
                if slot != group.default:
                    table[token, group.dim(group.default)] = 0.0
                    table[token, group.dim(slot)] = HOT
        return table

    def output_head(self) -> dict:
        """The lm_head as {(token, dim): weight}: LOGIT on each output slot the token is spelled with."""
        head = {}
        for token in range(T.VOCAB_SIZE):
            for name, slot in self.output_slots(token).items():
                head[token, self.residual[name].dim(slot)] = LOGIT
        return head


def token_features(residual: Residual) -> None:
    residual.group("family", FAMILIES)
    for i in range(NIBBLES):
        residual.group(f"nibble{i}", range(16))
    residual.group("mem_address", (None, *range(MEMORY_WORDS)))
    residual.group("read_address", (None, *range(MEMORY_WORDS)))


def output_groups(residual: Residual) -> None:
    residual.group("out_family", (None, *FAMILIES))
    for i in range(NIBBLES):
        residual.group(f"out_nibble{i}", range(16))


def context_layer(circuit: Circuit) -> None:
    r = circuit.residual
    back = {tap: r.group(f"back{tap}_family", (None, *FAMILIES)) for tap in (1, 2)}
    layer = circuit.layer("context: the previous tokens' families")
    for tap, group in back.items():
        layer.table(f"back{tap}", key=None, rows={}, values=[Source(r["family"], tap)], when=[], query=None,
                    outputs={0: (group, {f: f for f in FAMILIES})})
    # A READ's answer is two VALs: the model writes VAL at the READ and at the token after it.
    layer.unit("read answer lo is a VAL", [(r["family"], "READ")], [(r["out_family"], "VAL")])
    layer.unit("read answer hi is a VAL", [(back[1], "READ")], [(r["out_family"], "VAL")])


def memory_layer(circuit: Circuit) -> None:
    r = circuit.residual
    layer = circuit.layer("memory: write records and the host's reads")
    rows = {a: a for a in range(MEMORY_WORDS) if a != SINK}       # the sink's key is zero: it stores nothing
    word = [Source(r[f"nibble{i}"], 1) for i in range(NIBBLES)] + [Source(r[f"nibble{i}"], 0) for i in range(NIBBLES)]
    write = [(r["back2_family"], "MEM")]                            # the hi VAL of a write record
    for half, tap in (("lo", 0), ("hi", 1)):
        offset = 0 if half == "lo" else NIBBLES
        layer.table(f"memory {half}", key=Source(r["mem_address"], 2), rows=rows, values=word, when=write,
                    query=[Source(r["read_address"], tap)],
                    outputs={offset + i: (r[f"out_nibble{i}"], {v: v for v in range(16)}) for i in range(NIBBLES)})


def compile_circuit(width: Width = QWEN35_2B) -> Circuit:
    """Compile the machine into a Circuit of the given width (Qwen3.5-2B's by default)."""
    if width.head_dim < MEMORY_WORDS:
        raise CircuitError(f"head_dim {width.head_dim}: memory needs one state row per word ({MEMORY_WORDS})")
    residual = Residual(width.hidden)
    token_features(residual)
    output_groups(residual)
    circuit = Circuit(width, residual)
    context_layer(circuit)
    memory_layer(circuit)
    residual.seal()
    return circuit
