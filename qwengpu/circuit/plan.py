"""The layer plan: which compiled layer holds which part of the machine. This is the one place it is written.

Each ``Part`` names the stage module that builds it, the layers it occupies and what each of those layers holds.
A stage takes its layers from here (``digits, carries = plan.OPERANDS.of(layers)``), the compiler labels every
layer with the parts it holds (``purposes``: the model's layer descriptions and the deviation report's names), and
``python -m qwengpu.circuit.plan`` prints the table. The parts are listed in the order the compiler builds them,
which is also the order of the heads and units inside a layer that two parts share.
"""
from __future__ import annotations

from dataclasses import dataclass

# B's nibbles whose partial products each multiply step adds: each step takes two layers (products, accumulate)
MULTIPLY_STEPS = ((0, 1), (2, 3, 4), (5, 6, 7))


@dataclass(frozen=True)
class Part:
    """A part of the machine: the stage module that builds it, its layers, and what each of them holds."""
    stage: str
    layers: tuple[int, ...]
    holds: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "layers", tuple(self.layers))
        if len(self.holds) != len(self.layers):
            raise ValueError(f"{self.stage}: {len(self.layers)} layers but {len(self.holds)} descriptions")

    def of(self, layers: list) -> list:
        """This part's layers, picked out of the whole stack."""
        return [layers[i] for i in self.layers]

    def __getitem__(self, i: int) -> int:
        return self.layers[i]


CONTEXT = Part("control", (0,), (
    "context: previous families, current block, ROM row, first distances; a READ's answer is a VAL",))
DISTANCES = Part("control", range(1, 7), ("distance chain",) * 6)   # three tokens further back per layer
WARP = Part("control", (1,), ("warp header",))
LANES = Part("control", (3,), ("lanes",))
ROM = Part("control", (4,), ("program ROM",))
REGISTERS = Part("registers", (5,), ("register file; operands; thread index; op class",))
ACTIVITY = Part("arithmetic", (6,), ("lane activity",))
OPERANDS = Part("arithmetic", (6, 7, 8), (
    "operand adders: digits", "operand adders: carries", "operand adders: digits cleared"))
MEMORY = Part("memory", (8,), ("memory: writes, host reads, loads, pending atomic stores",))
ALU = Part("arithmetic", (9, 10, 11, 12), (
    "ALU: digits; shift range", "ALU: carries, compare, and; shift by nibbles", "ALU: select, or; shift bits",
    "ALU: shift combine, xor"))
MULTIPLY = Part("multiply", range(13, 13 + 2 * len(MULTIPLY_STEPS) + 2), (
    *(f"multiply: {step} of B's nibbles {rows[0]}-{rows[-1]}" for rows in MULTIPLY_STEPS
      for step in ("partial products", "accumulate")),
    "multiply: carry-save digits", "multiply: carries"))
DIVIDE = Part("divide", (19, 20, 21), (
    "divide: the dividend", "divide: remainders", "divide: quotient and remainder words"))
EMIT = Part("records", (22,), ("lane values; store and branch flags",))
RECORD = Part("records", (23,), ("record lanes table; write-back order",))
WRITE_BACK = Part("records", (24,), ("write-back records",))
NEXT_BLOCK = Part("control", (24,), ("next EXEC or END",))

PARTS = (CONTEXT, DISTANCES, WARP, LANES, ROM, REGISTERS, ACTIVITY, OPERANDS, MEMORY, ALU, MULTIPLY, DIVIDE,
         EMIT, RECORD, WRITE_BACK, NEXT_BLOCK)
LAYERS = 1 + max(max(part.layers) for part in PARTS)


def purposes() -> list[str]:
    """What each layer holds, joined over the parts that share it."""
    held = [[] for _ in range(LAYERS)]
    for part in PARTS:
        for layer, what in zip(part.layers, part.holds):
            held[layer].append(what)
    empty = [i for i, what in enumerate(held) if not what]
    if empty:
        raise ValueError(f"layers {empty} hold no part")
    return ["; ".join(what) for what in held]


def table() -> str:
    """The plan as text: one line per layer, the stages and what they place there."""
    lines = []
    for index, purpose in enumerate(purposes()):
        stages = list(dict.fromkeys(part.stage for part in PARTS if index in part.layers))
        lines.append(f"{index:3d}  {', '.join(stages):<22} {purpose}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
