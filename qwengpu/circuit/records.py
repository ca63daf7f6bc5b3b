"""Records: the lane values, the write-back records and the next EXEC or END (plan.EMIT, RECORD, WRITE_BACK).

- EMIT writes the lane value prediction: at record position d (0..7) the model writes half d % 2 of lane d // 2's
  value, which is X for an active lane and the old dst register for an inactive one. It also marks whether the lane
  stores (active and the block stores) and whether its X is nonzero (the branch condition).
- RECORD keeps the record's lanes table (row = lane, reset at every EXEC), written at the position that computes
  the lane's hi half: active, stores, the store address's low byte, X nonzero; four replicas each read one lane's
  flags, and the MLP finds which lane the s-th write-back belongs to, where the record ends, the first active lane
  (whose X decides a uniform branch) and whether any active lane's X is nonzero (the "any" branch).
- WRITE_BACK replicates the table, with the lane's X as a second table, and writes the write-back records
  (MEM address, VAL lo, VAL hi); at the end, control.next_block writes the next EXEC (branch target or
  fall-through) or END in the same layer (plan.NEXT_BLOCK).
"""
from __future__ import annotations

from ..isa import LANES
from . import plan
from .arithmetic import Operands
from .basis import Group, Residual
from .control import Control, next_block
from .layers import Layer, Source
from .registers import Registers
from .vocabulary import NIBBLES, WORD, Tokens

FIRST_WRITE_BACK = 2 * LANES            # record position of the first write-back header


def build(layers: list[Layer], residual: Residual, tokens: Tokens, control: Control, registers: Registers,
          operands: Operands, x: tuple[Group, ...]) -> None:
    """The tokens the model writes in a record: lane values, write-back records, the next EXEC or END."""
    r = residual
    (emit,) = plan.EMIT.of(layers)
    (record,) = plan.RECORD.of(layers)
    (write_back,) = plan.WRITE_BACK.of(layers)
    distance, lane, active, rom = control.distance, control.lane, operands.active, control.rom
    old, out, out_family = registers.old, tokens.out_nibble, tokens.out_family

    # -- EMIT: lane values -----------------------------------------------------------------------------------------
    emit.unit("a lane value is a VAL", [(distance, list(range(2 * LANES)))], [(out_family, "VAL")])
    for half in (0, 1):
        positions = (distance, [2 * n + half for n in range(LANES)])
        for i in range(NIBBLES):
            for v in range(1, 16):
                emit.unit("lane value", [positions, (active, True), (x[4 * half + i], v)], [(out[i], v)])
                emit.unit("inactive lane value", [positions, (active, False), (lane, list(range(LANES))),
                                                  (old[4 * half + i], v)], [(out[i], v)])
    stores = r.group("stores", (False, True))
    emit.unit("lane stores", [(active, True), rom.flag("store_enable", True)], [(stores, True)])
    nonzero = r.group("x_nonzero", (False, True))
    for i in range(WORD):
        emit.unit(f"x nonzero at nibble {i}", [(x[j], 0) for j in range(i)] + [(x[i], list(range(1, 16)))],
                  [(nonzero, True)])

    # -- RECORD, WRITE_BACK: the record's lanes table -------------------------------------------------------------
    address = operands.address
    flags = [Source(active), Source(stores), Source(address[0]), Source(address[1]), Source(nonzero)]
    writes = [(n, [(lane, n), (distance, 2 * n + 1)]) for n in range(LANES)]
    when = [(distance, [2 * n + 1 for n in range(LANES)])]
    reset = [(tokens.family, "EXEC")]
    active_mask = [r.group(f"active_lane{n}", (False, True)) for n in range(LANES)]
    store_mask = [r.group(f"storing_lane{n}", (False, True)) for n in range(LANES)]
    nonzero_mask = [r.group(f"nonzero_lane{n}", (False, True)) for n in range(LANES)]
    for n in range(LANES):
        record.table(f"record lanes (lane {n})", writes=writes, values=flags, when=when, reset_when=reset,
                     reads=[(n, [], 0)], outputs={0: (active_mask[n], {True: True}), 1: (store_mask[n], {True: True}),
                                                  4: (nonzero_mask[n], {True: True})})
    write_back_lane = r.group("write_back_lane", (None, *range(LANES)))
    first_active = r.group("first_active_lane", (None, *range(LANES)))
    end = r.group("record_end", (False, True))
    last = FIRST_WRITE_BACK + 3 * LANES
    for mask in range(1 << LANES):
        pattern = [(store_mask[n], bool(mask >> n & 1)) for n in range(LANES)]
        lanes = [n for n in range(LANES) if mask >> n & 1]
        for s, n in enumerate(lanes):
            here = (distance, [FIRST_WRITE_BACK + 3 * s + phase for phase in range(3)])
            record.unit(f"write-back {s} is lane {n}", pattern + [here], [(write_back_lane, n)])
        record.unit("record ends", pattern + [(distance, FIRST_WRITE_BACK + 3 * len(lanes))], [(end, True)])
        if mask:
            act = [(active_mask[n], bool(mask >> n & 1)) for n in range(LANES)]
            record.unit(f"first active lane {lanes[0]}",
                        act + [(distance, list(range(FIRST_WRITE_BACK, last + 1)))], [(first_active, lanes[0])])
    # The "any" branch: X nonzero on some active lane. One unit per (active lanes, nonzero among them) pattern with
    # at least one, so the patterns exclude each other and exactly one unit moves the group.
    branch_any = r.group("branch_any", (False, True))
    for mask in range(1, 1 << LANES):
        lanes = [n for n in range(LANES) if mask >> n & 1]
        act = [(active_mask[n], bool(mask >> n & 1)) for n in range(LANES)]
        for nonzero_bits in range(1, 1 << len(lanes)):
            nz = [(nonzero_mask[n], bool(nonzero_bits >> k & 1)) for k, n in enumerate(lanes)]
            record.unit("some active lane's X is nonzero",
                        act + nz + [(distance, list(range(FIRST_WRITE_BACK, last + 1)))], [(branch_any, True)])

    wb_address = [r.group(f"write_back_address{i}", range(16)) for i in range(2)]
    wb_value = [r.group(f"write_back_value{i}", range(16)) for i in range(WORD)]
    branch_nonzero = r.group("branch_nonzero", (False, True))
    write_back.table("record lanes by write-back", writes=writes, values=flags, when=when, reset_when=reset,
                     reads=[(n, [(write_back_lane, n)], 0) for n in range(LANES)],
                     outputs={2 + i: (wb_address[i], {v: v for v in range(16)}) for i in range(2)})
    write_back.table("record lanes by first active", writes=writes, values=flags, when=when, reset_when=reset,
                     reads=[(n, [(first_active, n)], 0) for n in range(LANES)],
                     outputs={4: (branch_nonzero, {True: True})})
    write_back.table("record values", writes=writes, values=[Source(g) for g in x], when=when, reset_when=reset,
                     reads=[(n, [(write_back_lane, n)], 0) for n in range(LANES)],
                     outputs={i: (wb_value[i], {v: v for v in range(16)}) for i in range(WORD)})
    lanes_any = (write_back_lane, list(range(LANES)))
    for s in range(LANES):
        header, lo, hi = (FIRST_WRITE_BACK + 3 * s + phase for phase in range(3))
        write_back.unit("write-back header", [(distance, header), lanes_any], [(out_family, "MEM")])
        for v in range(1, 16):
            write_back.unit("write-back address", [(distance, header), lanes_any, (wb_address[0], v)], [(out[0], v)])
            if v & 7:
                write_back.unit("write-back address", [(distance, header), lanes_any, (wb_address[1], v)],
                                [(out[1], v & 7)])
        for position, half in ((lo, 0), (hi, 1)):
            write_back.unit("write-back value", [(distance, position), lanes_any], [(out_family, "VAL")])
            for i in range(NIBBLES):
                for v in range(1, 16):
                    write_back.unit("write-back value",
                                    [(distance, position), lanes_any, (wb_value[4 * half + i], v)], [(out[i], v)])
    next_block(layers, tokens, control, end, branch_nonzero, branch_any)
