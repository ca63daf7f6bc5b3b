"""The circuit compiler: the QwenGPU machine as the weights of a stack of Qwen3.5 linear-attention decoder layers.

``compile_circuit`` runs the stages in order; each stage module places its heads and units in the layers named in
LAYERS and documents where its machine part lives:

==== ========================= ============================================================================
L0   qwengpu.circuit.control   previous tokens' families, current block, current ROM row; distances to the last
                               EXEC / ROM header (first three tokens); a READ's answer is a VAL
L1-6 qwengpu.circuit.control   distance chains (three tokens further back per layer); warp base and lane count
L3                             which lane a record position computes, which lane's register a VAL writes
L4   qwengpu.circuit.control   the program ROM: ten heads, row = block, each holding one 16-bit word
L5   qwengpu.circuit.registers the register file (row = lane * 16 + register) and its nonzero flags; operand
                               and predicate reads; thread index; the op's class
L6-7 qwengpu.circuit.arithmetic operand adders (register + immediate) for A, B and the store address; the
                               lane's activity
L8   qwengpu.circuit.memory    global memory (row = address), the host's reads, loads; an atomic record's
                               pending stores
L9-12 qwengpu.circuit.arithmetic the ALU: add / subtract / compare chain, selection, bitwise ops, shifts (by
                               nibbles, then bits)
L13-20 qwengpu.circuit.multiply mul: partial products and carry-save accumulation in three steps, then the adder
L19-21 qwengpu.circuit.divide  div / rem by an immediate 1..8: the dividend, its remainders, quotient digits
L22  qwengpu.circuit.records   the lane values the model writes; store and nonzero flags
L23-24 qwengpu.circuit.records the record's lanes table, write-back records, the next EXEC or END
==== ========================= ============================================================================

The result is a ``Circuit``: named groups, sparse layers and the vocabulary maps, which ``qwengpu.circuit.exact``
evaluates exactly and ``qwengpu.circuit.model`` turns into a transformers state dict.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import tokens as T
from ..isa import DIVISIONS, IMMEDIATE_DIVISORS, OPS
from .basis import HOT, CircuitError, Residual
from .layers import QWEN35_2B, Layer, Width

FAMILIES = tuple(name for name, _, _ in T.FAMILIES)     # the token families, from the one grammar
NIBBLES = 4             # nibbles of a token's argument
MULTIPLY_STEPS = ((0, 1), (2, 3, 4), (5, 6, 7))  # B's nibbles whose partial products each multiply step adds
LOGIT = 8.0             # output-head weight per matching slot: the right token beats every other by >= LOGIT
PURPOSES = (
    "context: previous families, current block, ROM row, distances",
    "warp header; distance chain", "distance chain", "distance chain; lanes", "program ROM; distance chain",
    "register file; operands; thread index; op class", "operand adders: digits; lane activity; distance chain",
    "operand adders: carries", "memory: writes, host reads, loads, pending atomic stores", "ALU: digits; shift range",
    "ALU: carries, compare, and; shift by nibbles", "ALU: select, or; shift bits",
    "ALU: shift combine, xor",
    *(f"multiply: {part} of B's nibbles {rows[0]}-{rows[-1]}" for rows in MULTIPLY_STEPS
      for part in ("partial products", "accumulate")),
    "multiply: carry-save digits; divide: the dividend", "multiply: carries; divide: remainders",
    "divide: quotient and remainder words", "lane values; store and branch flags",
    "record lanes table; write-back order", "write-back records; next EXEC or END",
)
LAYERS = len(PURPOSES)
EMIT, RECORD, WRITE_BACK = LAYERS - 3, LAYERS - 2, LAYERS - 1     # the records stage's layers
MULTIPLY = range(13, 21)                                            # the multiplier's layers
DIVIDE = (19, 20, 21)                                               # the divider's layers
DIVISORS = IMMEDIATE_DIVISORS      # div / rem divide by an immediate 1..DIVISORS (defined in qwengpu.isa)
# The ALU ops this circuit computes; a launch whose program uses another op is refused before it starts.
COMPARES = ("eq", "ne", "lt_s", "le_s", "gt_s", "ge_s", "lt_u", "le_u", "gt_u", "ge_u")
MINMAX = ("min_s", "max_s", "min_u", "max_u")
SHIFTS = ("shl", "shr_u", "shr_s")
BITWISE = ("and", "or", "xor")
SUPPORTED_OPS = ("a", "b", "add", "sub", "mul") + COMPARES + MINMAX + SHIFTS + BITWISE + DIVISIONS
OP_CLASSES = {"a": "a", "b": "b", "add": "add", "sub": "sub", "mul": "mul",
              **{op: op for op in SHIFTS + BITWISE + DIVISIONS},
              **{op: ("compare_signed" if op.endswith("_s") else "compare") for op in COMPARES + MINMAX}}


@dataclass(eq=False)
class Circuit:
    """A compiled QwenGPU: the residual's groups, the layers, and how tokens enter and leave the stream."""
    width: Width
    residual: Residual
    layers: list[Layer] = field(default_factory=list)
    supported_ops: tuple[str, ...] = SUPPORTED_OPS
    atomics: bool = True
    divisors: tuple[int, ...] = tuple(range(1, DIVISORS + 1))     # the immediates a div / rem may divide by

    # -- vocabulary ------------------------------------------------------------------------------------------------
    @staticmethod
    def token_slots(token: int) -> dict:
        """The embedding's hot slots for a token (the groups not named stay at their defaults)."""
        family, arg = T.kind(token), T.argument(token) or 0
        return {"family": family, "nonzero": family == "VAL" and arg != 0, **_nibbles("nibble", arg)}

    @staticmethod
    def output_slots(token: int) -> dict:
        family, arg = T.kind(token), T.argument(token) or 0
        return {"out_family": family, **_nibbles("out_nibble", arg)}

    def embedding(self) -> np.ndarray:
        """(vocab, hidden) embedding: every row a residual vector with mean(x^2) = 64."""
        r = self.residual
        table = np.tile(np.array(r.vector({}), dtype=np.float32), (T.VOCAB_SIZE, 1))
        rows = np.arange(T.VOCAB_SIZE)
        columns = {name: [] for name in ("family", "nonzero", *(f"nibble{i}" for i in range(NIBBLES)))}
        for token in rows:
            for name, slot in self.token_slots(int(token)).items():
                columns[name].append(r[name].dim(slot))
        for name, dims in columns.items():
            group = r[name]
            table[rows, group.dim(group.default)] = 0.0
            table[rows, np.array(dims)] = HOT
        return table

    def output_head(self) -> dict:
        """The lm_head as {(token, dim): weight}: LOGIT on each output slot the token is spelled with."""
        head = {}
        for token in range(T.VOCAB_SIZE):
            for name, slot in self.output_slots(token).items():
                head[token, self.residual[name].dim(slot)] = LOGIT
        return head

    def field(self, name: str, value: int) -> list[tuple]:
        """Conditions that a ROM control field of the current block holds ``value`` (whole nibbles)."""
        word, nibble, width = FIELDS[name]
        conditions = [(self.residual[f"rom{word}_{nibble}"], value & 15)]
        if width == 8:
            conditions.append((self.residual[f"rom{word}_{nibble + 1}"], value >> 4))
        return conditions

    def flag(self, name: str, value: bool) -> tuple:
        """Condition that a one-bit ROM flag of the current block is ``value``."""
        bit = FLAG_BITS[name]
        return (self.residual["rom3_2"], [n for n in range(16) if bool(n & bit) == value])


def _nibbles(prefix: str, arg: int) -> dict:
    return {f"{prefix}{i}": (arg >> (4 * i)) & 15 for i in range(NIBBLES)}


# Where each control field sits: (word, first nibble, bits), from qwengpu.isa.CONTROL_FIELDS.
def _field_places() -> tuple[dict, dict]:
    from ..isa import CONTROL_FIELDS
    places, flags, shift = {}, {}, 0
    for name, width in CONTROL_FIELDS:
        if width == 1:
            flags[name] = 1 << (shift % 4)
        else:
            if shift % 4 or width not in (4, 8):
                raise CircuitError(f"ROM field {name} does not start on a nibble or is not 4 or 8 bits wide")
            places[name] = (shift // 16, (shift % 16) // 4, width)
        shift += width
    return places, flags


FIELDS, FLAG_BITS = _field_places()


def op_code(name: str) -> int:
    return OPS[name][0]


def compile_circuit(width: Width = QWEN35_2B) -> Circuit:
    """Compile the machine into a Circuit of the given width (Qwen3.5-2B's by default)."""
    from . import arithmetic, control, divide, memory, multiply, records, registers
    if width.head_dim != 128:
        raise CircuitError(f"head_dim {width.head_dim}: the layout needs 128 (one state row per memory word)")
    residual = Residual(width.hidden)
    circuit = Circuit(width, residual)
    circuit.layers = [Layer(i, width, residual) for i in range(LAYERS)]
    residual.group("family", FAMILIES)
    residual.group("nonzero", (False, True))
    for i in range(NIBBLES):
        residual.group(f"nibble{i}", range(16))
    residual.group("out_family", (None, *FAMILIES))
    for i in range(NIBBLES):
        residual.group(f"out_nibble{i}", range(16))
    control.build(circuit)
    registers.build(circuit)
    digits = arithmetic.operands(circuit)
    memory.build(circuit)
    for group in digits:                # cleared in layer 8, after the memory layer's groups were placed
        residual.free(group)
    arithmetic.alu(circuit)
    products = multiply.build(circuit)
    quotients = divide.build(circuit)
    for group in products + quotients:  # cleared in layers 19-21, after the divider's groups were placed
        residual.free(group)
    records.build(circuit)
    residual.seal()
    for layer, purpose in zip(circuit.layers, PURPOSES):
        layer.purpose = purpose
    return circuit
