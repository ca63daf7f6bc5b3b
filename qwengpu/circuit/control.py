"""Control: where a token stands in the grammar, the warp header, the program ROM and the current block.

- Layer 0 copies the families of the three previous tokens (conv taps 1-3) into ``back1..3_family``, keeps the
  current block (written at every EXEC, read everywhere) and the ROM row being loaded, and starts two distances:
  ``distance`` (tokens since the record's EXEC) and ``rom_distance`` (tokens since a ROM header). A token that cannot
  be inside the span (END, WARP, READ, ROM for a record) makes the distance ``far``.
- Layers 1-6 extend the distances three tokens per layer: a copy head brings the distance of the token three back,
  and the MLP adds 3 where the distance is still unknown. Records are at most 21 tokens long, ROM rows 11.
- Layer 1 keeps the warp header: its base thread index (a multiple of 4) and its number of live lanes.
- Layer 3 turns the distance into ``lane`` (the lane whose value the next token carries) and ``write_lane`` (the lane
  whose register the current VAL completes).
- Layer 4 is the program ROM: ten heads, one per word of a row, with row = block; a ROM row's i-th VAL writes head i,
  and every position reads the current block's ten words into ``rom{word}_{nibble}``.
"""
from __future__ import annotations

from ..isa import BRANCHES, LANES, ROM_BLOCKS, ROW_WORDS
from .compiler import FAMILIES, NIBBLES, Circuit
from .layers import Source

RECORD_SPAN = 20            # the last position of a record: EXEC + 8 VALs + 4 write-backs of 3, minus one
ROM_SPAN = ROW_WORDS        # a ROM header and its ROW_WORDS words
CHAIN_LAYERS = range(1, 7)  # the distance reaches 3 + 3 * 6 = 21 > RECORD_SPAN


def build(circuit: Circuit) -> None:
    r = circuit.residual
    L = circuit.layers
    back = {tap: r.group(f"back{tap}_family", (None, *FAMILIES)) for tap in (1, 2, 3)}
    distance = r.group("distance", (None, *range(RECORD_SPAN + 1), "far"))
    rom_distance = r.group("rom_distance", (None, *range(ROM_SPAN + 1), "far"))
    block = [r.group("block0", range(16)), r.group("block1", range(2))]
    rom_row = [r.group("rom_row0", range(16)), r.group("rom_row1", range(2))]
    nibble = [r[f"nibble{i}"] for i in range(NIBBLES)]

    # -- layer 0: context ------------------------------------------------------------------------------------------
    for tap, group in back.items():
        L[0].table(f"back{tap}", writes=None, values=[Source(r["family"], tap)], when=[], reads=None,
                   outputs={0: (group, {f: f for f in FAMILIES})})
    for name, anchor, dst in (("block", "EXEC", block), ("rom row", "ROM", rom_row)):
        L[0].table(name, writes=None, values=[Source(nibble[0]), Source(nibble[1])], when=[(r["family"], anchor)],
                   reads=None, outputs={i: (dst[i], {v: v for v in dst[i].slots}) for i in range(2)})
    _first_distances(circuit, distance, "EXEC", {"END", "WARP", "READ", "ROM"}, back)
    _first_distances(circuit, rom_distance, "ROM", {"MEM", "READ", "EXEC", "WARP", "END"}, back)
    # A READ's answer is two VALs: at the READ and at the token after it.
    L[0].unit("read answer lo is a VAL", [(r["family"], "READ")], [(r["out_family"], "VAL")])
    L[0].unit("read answer hi is a VAL", [(back[1], "READ")], [(r["out_family"], "VAL")])

    # -- layers 1-6: distance chains ----------------------------------------------------------------------------
    copies = {g.name: r.group(f"{g.name}_back3", g.slots) for g in (distance, rom_distance)}
    for index in CHAIN_LAYERS:
        layer = L[index]
        chains = [(distance, RECORD_SPAN)] + ([(rom_distance, ROM_SPAN)] if index <= 3 else [])
        layer.table("distances three back", writes=None, values=[Source(g, 3) for g, _ in chains], when=[],
                    reads=None, outputs={i: (copies[g.name], {s: s for s in g.slots}) for i, (g, _) in
                                         enumerate(chains)})
        for group, span in chains:
            copy = copies[group.name]
            for slot in group.slots[1:]:
                step = "far" if slot == "far" or slot + 3 > span else slot + 3
                layer.unit(f"{group.name} = {slot} + 3", [(group, None), (copy, slot)], [(group, step)])
                layer.unit(f"clear {copy.name}", [(copy, slot)], [(copy, None, slot)])

    # -- layer 1: warp header ---------------------------------------------------------------------------------------
    base = [r.group(f"warp_base{i}", range(16)) for i in range(3)]
    lanes = r.group("warp_lanes", range(16))
    L[1].table("warp base", writes=None, values=[Source(nibble[i]) for i in range(3)],
               when=[(back[1], "WARP")], reads=None,
               outputs={i: (base[i], {v: v for v in range(16)}) for i in range(3)})
    L[1].table("warp lanes", writes=None, values=[Source(nibble[0])], when=[(back[2], "WARP")], reads=None,
               outputs={0: (lanes, {v: v for v in range(16)})})
    L[1].unit("a warp starts at EXEC 0", [(back[2], "WARP")], [(r["out_family"], "EXEC")])

    # -- layer 3: lanes -------------------------------------------------------------------------------------------
    lane = r.group("lane", (None, *range(LANES)))
    write_lane = r.group("write_lane", (None, *range(LANES)))
    for n in range(LANES):
        L[3].unit(f"lane {n}", [(distance, [2 * n, 2 * n + 1])], [(lane, n)])
        L[3].unit(f"write lane {n}", [(distance, 2 * n + 2)], [(write_lane, n)])

    # -- layer 4: the program ROM ---------------------------------------------------------------------------------
    writes = [(b, [(rom_row[0], b & 15), (rom_row[1], b >> 4)]) for b in range(ROM_BLOCKS)]
    reads = [(b, [(block[0], b & 15), (block[1], b >> 4)], 0) for b in range(ROM_BLOCKS)]
    for word in range(ROW_WORDS):
        dst = [r.group(f"rom{word}_{i}", range(16)) for i in range(NIBBLES)]
        L[4].table(f"ROM word {word}", writes=writes, values=[Source(nibble[i]) for i in range(NIBBLES)],
                   when=[(rom_distance, word + 1), (r["family"], "VAL")], reads=reads,
                   outputs={i: (dst[i], {v: v for v in range(16)}) for i in range(NIBBLES)})


def _first_distances(circuit: Circuit, group, anchor: str, breakers: set, back: dict) -> None:
    """Distance 0..3 from the anchor family, or far when a breaker comes first, from the token and taps 1-3."""
    r = circuit.residual
    other = [f for f in FAMILIES if f != anchor and f not in breakers]
    looks = [r["family"], back[1], back[2], back[3]]
    for k, look in enumerate(looks):
        before = [(g, other) for g in looks[:k]]
        circuit.layers[0].unit(f"{group.name} {k}", before + [(look, anchor)], [(group, k)])
        circuit.layers[0].unit(f"{group.name} far at {k}", before + [(look, sorted(breakers))], [(group, "far")])


def next_block_units(circuit: Circuit, end, branch_nonzero, branch_any) -> None:
    """At a record's last position, the next EXEC (branch target or fall-through) or END: isa.branch_taken's
    decision, with the first active lane's X for a uniform branch and any active lane's X for an "any" branch."""
    from .compiler import WRITE_BACK
    r = circuit.residual
    layer = circuit.layers[WRITE_BACK]
    block = [r["block0"], r["block1"]]
    kinds = BRANCHES

    def emit(name, conditions, target):
        family = "END" if target is None or target >= ROM_BLOCKS else "EXEC"
        moves = [(r["out_family"], family)]
        if family == "EXEC":
            moves += [(r["out_nibble0"], target & 15), (r["out_nibble1"], target >> 4)]
        layer.unit(name, [(end, True)] + conditions, moves)

    for b in range(ROM_BLOCKS):
        here = [(block[0], b & 15), (block[1], b >> 4)]
        emit(f"fall through from {b}", here + circuit.field("branch", kinds["none"]), b + 1)
        for kind, taken in (("nonzero", False), ("zero", True)):
            emit(f"{kind} not taken from {b}", here + circuit.field("branch", kinds[kind]) +
                 [(branch_nonzero, taken)], b + 1)
        emit(f"any not taken from {b}", here + circuit.field("branch", kinds["any"]) + [(branch_any, False)], b + 1)
    for target in [*range(ROM_BLOCKS), 63]:
        where = circuit.field("target", target)
        emit(f"always to {target}", circuit.field("branch", kinds["always"]) + where, target)
        for kind, taken in (("nonzero", True), ("zero", False)):
            emit(f"{kind} taken to {target}", circuit.field("branch", kinds[kind]) + [(branch_nonzero, taken)] +
                 where, target)
        emit(f"any taken to {target}", circuit.field("branch", kinds["any"]) + [(branch_any, True)] + where, target)
