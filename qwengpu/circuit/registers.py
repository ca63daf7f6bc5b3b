"""The register file (plan.REGISTERS): four replicated heads of register words and one of nonzero flags.

Row = lane * 16 + register. A record's lane values are the registers' new contents (the old value for a lane that
does not run), so the register row is written when the lane's hi VAL is fed: the key is (write_lane, the block's dst),
the value the lo VAL one token back and the hi VAL now. A WARP token resets the whole state (decay to exactly zero:
registers start at 0, and an empty row reads as the value 0). Each replica answers one query of the lane being
computed: operand a, operand b, the store address register and the old dst value; the flags head answers whether
the predicate register is nonzero (from the VAL tokens' own nonzero feature, so no word compare is needed).

The MLP puts the thread index (warp base + lane; the base is a multiple of 4, so only the low nibble changes) into
an operand whose register field is TID, and classifies the block's op (``op_class``, qwengpu.circuit.ops).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..isa import LANES, REGISTERS, TID
from . import plan
from .basis import Group, Residual
from .control import Control
from .layers import Layer, Source
from .ops import OP_CLASSES, op_code
from .vocabulary import WORD, Tokens


@dataclass(frozen=True)
class Registers:
    """What the register layer reads and decodes for the lane being computed."""
    a: tuple[Group, ...]            # R[a_reg] (or the thread index), eight nibbles
    b: tuple[Group, ...]            # R[b_reg] (or the thread index), eight nibbles
    store: tuple[Group, ...]        # the store address register's low byte, two nibbles
    old: tuple[Group, ...]          # R[dst] before the block, eight nibbles
    pred_nonzero: tuple[Group, Group]   # the predicate register's lo / hi half is nonzero
    op_class: Group                 # the block's op, by class


def build(layers: list[Layer], residual: Residual, tokens: Tokens, control: Control) -> Registers:
    r = residual
    (layer,) = plan.REGISTERS.of(layers)
    distance, lane, write_lane, rom = control.distance, control.lane, control.write_lane, control.rom
    value = [Source(g, 1) for g in tokens.nibble] + [Source(g, 0) for g in tokens.nibble]
    writes = [(n * 16 + reg, [(write_lane, n)] + rom.field("dst", reg))
              for n in range(LANES) for reg in range(REGISTERS)]
    when = [(distance, [2, 4, 6, 8])]
    reset = [(tokens.family, "WARP")]

    def reads(field: str):
        return [(n * 16 + reg, [(lane, n)] + rom.field(field, reg), 0)
                for n in range(LANES) for reg in range(REGISTERS)]

    operands = {}
    for name, field, width in (("a", "a_reg", WORD), ("b", "b_reg", WORD), ("s", "store", 2), ("old", "dst", WORD)):
        groups = tuple(r.group(f"{name}_base{i}", range(16)) for i in range(width))
        operands[name] = (field, groups)
        layer.table(f"registers for {name}", writes=writes, values=value, when=when, reads=reads(field),
                    reset_when=reset, outputs={i: (groups[i], {v: v for v in range(16)}) for i in range(width)})
    flags = (r.group("pred_lo_nonzero", (False, True)), r.group("pred_hi_nonzero", (False, True)))
    layer.table("register nonzero flags", writes=writes,
                values=[Source(tokens.nonzero, 1), Source(tokens.nonzero, 0)],
                when=when, reads=reads("pred"), reset_when=reset,
                outputs={i: (flags[i], {True: True}) for i in range(2)})

    # thread index operands: tid = base + lane, base a multiple of 4
    base = control.warp_base
    for name in ("a", "b", "s"):
        field, groups = operands[name]
        is_tid = rom.field(field, TID)
        for low in range(0, 16, 4):
            for n in range(LANES):
                layer.unit(f"{name} = tid (low nibble)", is_tid + [(base[0], low), (lane, n)],
                           [(groups[0], low + n)])
        for i in range(1, min(3, len(groups))):
            for v in range(1, 16):
                layer.unit(f"{name} = tid (nibble {i})", is_tid + [(base[i], v), (lane, list(range(LANES)))],
                           [(groups[i], v)])

    op_class = r.group("op_class", (None, *sorted(set(OP_CLASSES.values()))))
    for op, kind in OP_CLASSES.items():
        layer.unit(f"op {op} is {kind}", rom.field("op", op_code(op)), [(op_class, kind)])
    return Registers(operands["a"][1], operands["b"][1], operands["s"][1], operands["old"][1], flags, op_class)
