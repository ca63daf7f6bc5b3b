"""Control: where a token stands in the grammar, the warp header, the program ROM and the current block.

- CONTEXT copies the families of the three previous tokens (conv taps 1-3) into ``back[1..3]``, keeps the current
  block (written at every EXEC, read everywhere) and the ROM row being loaded, and starts two distances:
  ``distance`` (tokens since the record's EXEC) and ``rom_distance`` (tokens since a ROM header). A token that cannot
  be inside the span (END, WARP, READ, ROM for a record) makes the distance ``far``.
- DISTANCES extend the distances three tokens per layer: a copy head brings the distance of the token three back,
  and the MLP adds 3 where the distance is still unknown. Records are at most 21 tokens long, ROM rows 11.
- WARP keeps the warp header: its base thread index (a multiple of 4) and its number of live lanes.
- LANES turns the distance into ``lane`` (the lane whose value the next token carries) and ``write_lane`` (the lane
  whose register the current VAL completes).
- ROM is the program ROM: ten heads, one per word of a row, with row = block; a ROM row's i-th VAL writes head i,
  and every position reads the current block's ten words into ``Rom.words``, whose control fields the later stages
  test through ``Rom.field`` and ``Rom.flag``.
- NEXT_BLOCK (``next_block``, called by the records stage): the next EXEC or END at a record's last position.

The layers are qwengpu.circuit.plan's CONTEXT, DISTANCES, WARP, LANES, ROM and NEXT_BLOCK.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..isa import BRANCHES, CONTROL_FIELDS, CONTROL_WORDS, LANES, ROM_BLOCKS, ROW_WORDS
from . import plan
from .basis import CircuitError, Group, Residual
from .layers import Layer, Source
from .vocabulary import FAMILIES, NIBBLES, Tokens

RECORD_SPAN = 20            # the last position of a record: EXEC + 8 VALs + 4 write-backs of 3, minus one
ROM_SPAN = ROW_WORDS        # a ROM header and its ROW_WORDS words


def _field_places() -> tuple[dict, dict]:
    """Where each control field sits, (word, first nibble, bits), and each one-bit flag, (word, nibble, bit)."""
    places, flags, shift = {}, {}, 0
    for name, width in CONTROL_FIELDS:
        word, nibble = shift // 16, (shift % 16) // 4
        if width == 1:
            flags[name] = (word, nibble, 1 << (shift % 4))
        else:
            if shift % 4 or width not in (4, 8):
                raise CircuitError(f"ROM field {name} does not start on a nibble or is not 4 or 8 bits wide")
            places[name] = (word, nibble, width)
        shift += width
    return places, flags


FIELDS, FLAG_BITS = _field_places()     # from qwengpu.isa.CONTROL_FIELDS


@dataclass(frozen=True)
class Rom:
    """The current block's ROM row as read by the ROM layer: ``words[w][i]`` is nibble i of word w."""
    words: tuple[tuple[Group, ...], ...]

    def field(self, name: str, value: int) -> list[tuple]:
        """Conditions that a control field of the current block holds ``value`` (whole nibbles)."""
        word, nibble, width = FIELDS[name]
        conditions = [(self.words[word][nibble], value & 15)]
        if width == 8:
            conditions.append((self.words[word][nibble + 1], value >> 4))
        return conditions

    def high_nibble(self, name: str, value: int) -> tuple:
        """Condition that the high nibble of an 8-bit control field is ``value``."""
        word, nibble, _ = FIELDS[name]
        return (self.words[word][nibble + 1], value)

    def flag(self, name: str, value: bool) -> tuple:
        """Condition that a one-bit flag of the current block is ``value``."""
        word, nibble, bit = FLAG_BITS[name]
        return (self.words[word][nibble], [n for n in range(16) if bool(n & bit) == value])

    def immediate(self, index: int) -> list[Group]:
        """The eight nibbles of immediate ``index`` (0: a, 1: b, 2: store), held as lo / hi words after the control
        words."""
        word = CONTROL_WORDS + 2 * index
        return [self.words[word + i // NIBBLES][i % NIBBLES] for i in range(2 * NIBBLES)]


@dataclass(frozen=True)
class Control:
    """The groups the control stage creates and the later stages read."""
    back: dict[int, Group]          # tap -> the family of the token that many back
    distance: Group                 # tokens since the record's EXEC (None: not in a record; far: too far)
    block: tuple[Group, Group]      # the current block (low nibble, high bit)
    warp_base: tuple[Group, ...]    # the warp's base thread index (three nibbles; a multiple of 4)
    warp_lanes: Group               # the warp's number of live lanes
    lane: Group                     # the lane whose value the next token carries
    write_lane: Group               # the lane whose register the current VAL completes
    rom: Rom                        # the current block's ROM row


def build(layers: list[Layer], residual: Residual, tokens: Tokens) -> Control:
    r = residual
    back = {tap: r.group(f"back{tap}_family", (None, *FAMILIES)) for tap in (1, 2, 3)}
    distance = r.group("distance", (None, *range(RECORD_SPAN + 1), "far"))
    rom_distance = r.group("rom_distance", (None, *range(ROM_SPAN + 1), "far"))
    block = (r.group("block0", range(16)), r.group("block1", range(2)))
    rom_row = [r.group("rom_row0", range(16)), r.group("rom_row1", range(2))]
    family, nibble = tokens.family, tokens.nibble

    # -- CONTEXT ----------------------------------------------------------------------------------------------------
    (context,) = plan.CONTEXT.of(layers)
    for tap, group in back.items():
        context.table(f"back{tap}", writes=None, values=[Source(family, tap)], when=[], reads=None,
                      outputs={0: (group, {f: f for f in FAMILIES})})
    for name, anchor, dst in (("block", "EXEC", block), ("rom row", "ROM", rom_row)):
        context.table(name, writes=None, values=[Source(nibble[0]), Source(nibble[1])], when=[(family, anchor)],
                      reads=None, outputs={i: (dst[i], {v: v for v in dst[i].slots}) for i in range(2)})
    _first_distances(context, family, distance, "EXEC", {"END", "WARP", "READ", "ROM"}, back)
    _first_distances(context, family, rom_distance, "ROM", {"MEM", "READ", "EXEC", "WARP", "END"}, back)
    # A READ's answer is two VALs: at the READ and at the token after it.
    context.unit("read answer lo is a VAL", [(family, "READ")], [(tokens.out_family, "VAL")])
    context.unit("read answer hi is a VAL", [(back[1], "READ")], [(tokens.out_family, "VAL")])

    # -- DISTANCES: three tokens further back per layer ---------------------------------------------------------------
    copies = {g.name: r.group(f"{g.name}_back3", g.slots) for g in (distance, rom_distance)}
    for step, layer in enumerate(plan.DISTANCES.of(layers)):
        # the ROM distance is known after three layers (3 + 3 * 3 > ROM_SPAN), the record's after six
        chains = [(distance, RECORD_SPAN)] + ([(rom_distance, ROM_SPAN)] if step < 3 else [])
        layer.table("distances three back", writes=None, values=[Source(g, 3) for g, _ in chains], when=[],
                    reads=None, outputs={i: (copies[g.name], {s: s for s in g.slots}) for i, (g, _) in
                                         enumerate(chains)})
        for group, span in chains:
            copy = copies[group.name]
            for slot in group.slots[1:]:
                further = "far" if slot == "far" or slot + 3 > span else slot + 3
                layer.unit(f"{group.name} = {slot} + 3", [(group, None), (copy, slot)], [(group, further)])
                layer.unit(f"clear {copy.name}", [(copy, slot)], [(copy, None, slot)])

    # -- WARP: the warp header --------------------------------------------------------------------------------------
    (warp,) = plan.WARP.of(layers)
    base = tuple(r.group(f"warp_base{i}", range(16)) for i in range(3))
    lanes = r.group("warp_lanes", range(16))
    warp.table("warp base", writes=None, values=[Source(nibble[i]) for i in range(3)],
               when=[(back[1], "WARP")], reads=None,
               outputs={i: (base[i], {v: v for v in range(16)}) for i in range(3)})
    warp.table("warp lanes", writes=None, values=[Source(nibble[0])], when=[(back[2], "WARP")], reads=None,
               outputs={0: (lanes, {v: v for v in range(16)})})
    warp.unit("a warp starts at EXEC 0", [(back[2], "WARP")], [(tokens.out_family, "EXEC")])

    # -- LANES ------------------------------------------------------------------------------------------------------
    (lane_layer,) = plan.LANES.of(layers)
    lane = r.group("lane", (None, *range(LANES)))
    write_lane = r.group("write_lane", (None, *range(LANES)))
    for n in range(LANES):
        lane_layer.unit(f"lane {n}", [(distance, [2 * n, 2 * n + 1])], [(lane, n)])
        lane_layer.unit(f"write lane {n}", [(distance, 2 * n + 2)], [(write_lane, n)])

    # -- ROM: the program ROM -------------------------------------------------------------------------------------
    (rom_layer,) = plan.ROM.of(layers)
    writes = [(b, [(rom_row[0], b & 15), (rom_row[1], b >> 4)]) for b in range(ROM_BLOCKS)]
    reads = [(b, [(block[0], b & 15), (block[1], b >> 4)], 0) for b in range(ROM_BLOCKS)]
    words = []
    for word in range(ROW_WORDS):
        dst = tuple(r.group(f"rom{word}_{i}", range(16)) for i in range(NIBBLES))
        rom_layer.table(f"ROM word {word}", writes=writes, values=[Source(nibble[i]) for i in range(NIBBLES)],
                        when=[(rom_distance, word + 1), (family, "VAL")], reads=reads,
                        outputs={i: (dst[i], {v: v for v in range(16)}) for i in range(NIBBLES)})
        words.append(dst)
    return Control(back, distance, block, base, lanes, lane, write_lane, Rom(tuple(words)))


def _first_distances(layer: Layer, family: Group, group: Group, anchor: str, breakers: set, back: dict) -> None:
    """Distance 0..3 from the anchor family, or far when a breaker comes first, from the token and taps 1-3."""
    other = [f for f in FAMILIES if f != anchor and f not in breakers]
    looks = [family, back[1], back[2], back[3]]
    for k, look in enumerate(looks):
        before = [(g, other) for g in looks[:k]]
        layer.unit(f"{group.name} {k}", before + [(look, anchor)], [(group, k)])
        layer.unit(f"{group.name} far at {k}", before + [(look, sorted(breakers))], [(group, "far")])


def next_block(layers: list[Layer], tokens: Tokens, control: Control, end: Group, branch_nonzero: Group,
               branch_any: Group) -> None:
    """NEXT_BLOCK: at a record's last position, the next EXEC (branch target or fall-through) or END:
    isa.branch_taken's decision, with the first active lane's X for a uniform branch and any active lane's X for an
    "any" branch (``end``, ``branch_nonzero`` and ``branch_any`` come from the records stage)."""
    (layer,) = plan.NEXT_BLOCK.of(layers)
    block, rom = control.block, control.rom
    kinds = BRANCHES

    def emit(name, conditions, target):
        family = "END" if target is None or target >= ROM_BLOCKS else "EXEC"
        moves = [(tokens.out_family, family)]
        if family == "EXEC":
            moves += [(tokens.out_nibble[0], target & 15), (tokens.out_nibble[1], target >> 4)]
        layer.unit(name, [(end, True)] + conditions, moves)

    for b in range(ROM_BLOCKS):
        here = [(block[0], b & 15), (block[1], b >> 4)]
        emit(f"fall through from {b}", here + rom.field("branch", kinds["none"]), b + 1)
        for kind, taken in (("nonzero", False), ("zero", True)):
            emit(f"{kind} not taken from {b}", here + rom.field("branch", kinds[kind]) +
                 [(branch_nonzero, taken)], b + 1)
        emit(f"any not taken from {b}", here + rom.field("branch", kinds["any"]) + [(branch_any, False)], b + 1)
    for target in [*range(ROM_BLOCKS), 63]:
        where = rom.field("target", target)
        emit(f"always to {target}", rom.field("branch", kinds["always"]) + where, target)
        for kind, taken in (("nonzero", True), ("zero", False)):
            emit(f"{kind} taken to {target}", rom.field("branch", kinds[kind]) + [(branch_nonzero, taken)] +
                 where, target)
        emit(f"any taken to {target}", rom.field("branch", kinds["any"]) + [(branch_any, True)] + where, target)
