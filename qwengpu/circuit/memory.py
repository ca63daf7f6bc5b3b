"""Global memory (plan.MEMORY): three replicated heads whose state rows are the 127 memory words.

A word is stored as eight one-hot nibbles (lo then hi: 128 channels, 8 hot), written at the hi VAL of every write
record (host copy, a kernel's store, a peer's packet): the key is the header two tokens back (conv tap 2), the value
the lo VAL one back and the hi VAL now. The sink's key is zero, so a routed store writes nothing. A row never
written reads as zero, the word 0.

- ``memory lo`` / ``memory hi`` answer the host's READ a: the model writes the lo VAL at the READ (q from tap 0) and
  the hi VAL one token later (q from tap 1).
- ``memory load`` reads the word at A (its low 7 bits) for a block that loads, and the MLP replaces A by it.
- ``pending stores`` / ``pending store present`` keep, for an atomic block, what the record's earlier active lanes
  stored (row = address, reset at every EXEC): a lane of an atomic block loads an earlier lane's store where there is
  one, as the lanes of an atomic run one after another.
"""
from __future__ import annotations

from ..isa import MEMORY_WORDS, SINK
from . import plan
from .arithmetic import Operands
from .basis import Residual
from .control import Control
from .layers import Layer, Source
from .vocabulary import NIBBLES, WORD, Tokens


def build(layers: list[Layer], residual: Residual, tokens: Tokens, control: Control, operands: Operands) -> None:
    """Writes, the host's reads and loads; moves A (``operands.a``) to the loaded word where the block loads."""
    r = residual
    (layer,) = plan.MEMORY.of(layers)
    nibble, family, distance, rom = tokens.nibble, tokens.family, control.distance, control.rom

    def header(a, kind):
        """Conditions that a token is the header ``kind a`` (its nibbles spell the address)."""
        return [(family, kind), (nibble[0], a & 15), (nibble[1], a >> 4)]

    writes = [(a, header(a, "MEM")) for a in range(MEMORY_WORDS) if a != SINK]
    value = [Source(g, 1) for g in nibble] + [Source(g, 0) for g in nibble]
    when = [(control.back[2], "MEM")]
    for half, tap in (("lo", 0), ("hi", 1)):
        offset = 0 if half == "lo" else NIBBLES
        layer.table(f"memory {half}", writes=writes, key_tap=2, values=value, when=when,
                    reads=[(a, header(a, "READ"), tap) for a in range(SINK)],
                    outputs={offset + i: (tokens.out_nibble[i], {v: v for v in range(16)}) for i in range(NIBBLES)})
    # loads: A's low 7 bits name the word (bit 7 is ignored: a valid address is below 127)
    a = operands.a
    loads = [rom.flag("load", True), (distance, list(range(8)))]

    def query(w):
        return [(a[0], w & 15), (a[1], [w >> 4, (w >> 4) | 8])]

    loaded = [r.group(f"loaded{i}", range(16)) for i in range(WORD)]
    layer.table("memory load", writes=writes, key_tap=2, values=value, when=when,
                reads=[(w, loads + query(w), 0) for w in range(SINK)],
                outputs={i: (loaded[i], {v: v for v in range(16)}) for i in range(WORD)})
    # atomics: the stores of the record's earlier lanes, by address (the lane's hi VAL is fed two positions after
    # the position that computed its store address and activity, so those come from conv tap 1)
    atomic = rom.flag("atomic", True)
    address = operands.address
    pending_writes = [(w, [(address[0], w & 15), (address[1], [w >> 4, (w >> 4) | 8]), (operands.active, True)])
                      for w in range(SINK)]
    pending_when = [atomic, (distance, [2, 4, 6])]
    reset = [(family, "EXEC")]
    pending = [r.group(f"pending{i}", range(16)) for i in range(WORD)]
    hit = r.group("pending_hit", (False, True))
    atomic_reads = [(w, loads + [atomic] + query(w), 0) for w in range(SINK)]
    layer.table("pending stores", writes=pending_writes, key_tap=1, values=value, when=pending_when,
                reset_when=reset, reads=atomic_reads,
                outputs={i: (pending[i], {v: v for v in range(16)}) for i in range(WORD)})
    layer.table("pending store present", writes=pending_writes, key_tap=1, values=[Source(family)],
                when=pending_when, reset_when=reset, reads=atomic_reads, outputs={0: (hit, {"VAL": True})})
    for i in range(WORD):
        for old in range(16):
            for new in range(16):
                for source, present in ((loaded[i], False), (pending[i], True)):
                    moves = [(a[i], new, old)] + ([(source, 0, new)] if new else [])
                    if old == new and not new:
                        continue
                    layer.unit(f"A = {'pending store' if present else 'loaded word'} nibble {i}",
                               loads + [(hit, present), (a[i], old), (source, new)], moves)
        for v in range(1, 16):                          # the word that lost to a pending store is dropped
            layer.unit(f"drop loaded nibble {i}", loads + [(hit, True), (loaded[i], v)], [(loaded[i], 0, v)])
    for group in loaded + pending:
        r.free(group)
