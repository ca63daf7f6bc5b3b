"""The token vocabulary and record grammar: the one contract between interpreter, circuit, model and QLink.

Vocabulary (ids are contiguous, in this order)::

    VAL v        v in 0..65535   one 16-bit half-word; a 32-bit word is VAL(lo) VAL(hi)
    MEM a        a in 0..127     "gpu_mem a": header of a write record
    READ a       a in 0..127     the host asks for word a; the model answers VAL(lo) VAL(hi)
    EXEC b       b in 0..31      the model runs ROM block b
    ROM b        b in 0..31      header of a program row; ROW_WORDS VAL tokens follow (qwengpu.isa.encode_block)
    WARP                         start of a warp: VAL(tid base) VAL(active lanes) follow; registers reset to 0
    END                          the model ends the warp (no next block)

Grammar (who writes each token: H = host-fed, M = model-written, P = a peer's packet, fed)::

    write record  := MEM a  VAL lo  VAL hi                       H for cudaMemcpy, M for a store, P over QLink
    read          := READ a (H)  VAL lo (M)  VAL hi (M)
    program row   := ROM b  VAL w0 .. VAL w9                     all H
    warp          := WARP VAL base VAL lanes (H)  record+  END (M)
    record        := EXEC b (M)  [VAL lo VAL hi] x LANES (M)  write-back* (M)
    write-back    := write record, one per active storing lane, in lane order

- A record starts with the EXEC token the model predicts: control flow is the model's decision. The model writes
  EXEC 0 right after a warp header, and END after a block whose successor is EXIT.
- The register values are those of the block's destination after the block (the result X where there is none),
  two VAL tokens per lane, lane 0 first.
- Boundary rule: a packet (a write record from outside) enters the context only between records: after the model
  predicted the next EXEC or END and before that token is fed back. It can only write a memory row; the next record
  reads memory once its EXEC arrives.
- QLink: when the model writes MEM a for an address in a peer's aperture, the device forwards the record and feeds
  itself MEM 127 (the sink) instead; the payload VALs pass through unchanged.
- A launch is: the program rows that differ from the ROM's contents (H), then one warp per 4 threads, in order.
"""
from __future__ import annotations

from dataclasses import dataclass

from .isa import MEMORY_WORDS, ROM_BLOCKS, ROW_WORDS, LANES  # noqa: F401  (ROW_WORDS, LANES: part of the grammar)

VAL_BASE, VAL_COUNT = 0, 65536
MEM_BASE = VAL_BASE + VAL_COUNT
READ_BASE = MEM_BASE + MEMORY_WORDS
EXEC_BASE = READ_BASE + MEMORY_WORDS
ROM_BASE = EXEC_BASE + ROM_BLOCKS
WARP = ROM_BASE + ROM_BLOCKS
END = WARP + 1
VOCAB_SIZE = END + 1

HOST, MODEL, PEER = "host", "model", "peer"


def VAL(v: int) -> int:
    if not 0 <= v < VAL_COUNT:
        raise ValueError(f"VAL {v} is outside 0..{VAL_COUNT - 1}")
    return VAL_BASE + v


def MEM(a: int) -> int:
    if not 0 <= a < MEMORY_WORDS:
        raise ValueError(f"MEM address {a} is outside 0..{MEMORY_WORDS - 1}")
    return MEM_BASE + a


def READ(a: int) -> int:
    if not 0 <= a < MEMORY_WORDS:
        raise ValueError(f"READ address {a} is outside 0..{MEMORY_WORDS - 1}")
    return READ_BASE + a


def EXEC(b: int) -> int:
    if not 0 <= b < ROM_BLOCKS:
        raise ValueError(f"EXEC block {b} is outside 0..{ROM_BLOCKS - 1}")
    return EXEC_BASE + b


def ROM(b: int) -> int:
    if not 0 <= b < ROM_BLOCKS:
        raise ValueError(f"ROM row {b} is outside 0..{ROM_BLOCKS - 1}")
    return ROM_BASE + b


def word_tokens(word: int) -> list[int]:
    """A 32-bit word as VAL(lo) VAL(hi)."""
    word &= 0xFFFFFFFF
    return [VAL(word & 0xFFFF), VAL(word >> 16)]


def write_record(address: int, word: int) -> list[int]:
    return [MEM(address), *word_tokens(word)]


def kind(token: int) -> str:
    """The family of a token: 'VAL', 'MEM', 'READ', 'EXEC', 'ROM', 'WARP' or 'END'."""
    for name, base, count in FAMILIES:
        if base <= token < base + count:
            return name
    raise ValueError(f"token {token} is outside the vocabulary of {VOCAB_SIZE}")


def argument(token: int) -> int | None:
    """The number a token carries (the v of VAL v, the a of MEM a ...), None for WARP and END."""
    for name, base, count in FAMILIES:
        if base <= token < base + count:
            return None if count == 1 else token - base
    raise ValueError(f"token {token} is outside the vocabulary of {VOCAB_SIZE}")


def name(token: int) -> str:
    """Readable spelling, e.g. 'VAL 7', 'gpu_mem 12', 'EXEC 3', 'END'."""
    family, arg = kind(token), argument(token)
    label = {"MEM": "gpu_mem", "READ": "gpu_read"}.get(family, family)
    return label if arg is None else f"{label} {arg}"


FAMILIES = (
    ("VAL", VAL_BASE, VAL_COUNT), ("MEM", MEM_BASE, MEMORY_WORDS), ("READ", READ_BASE, MEMORY_WORDS),
    ("EXEC", EXEC_BASE, ROM_BLOCKS), ("ROM", ROM_BASE, ROM_BLOCKS), ("WARP", WARP, 1), ("END", END, 1),
)


@dataclass(frozen=True)
class Token:
    """One position of a device's stream: the id fed into the context and who produced it.

    ``written`` is the id the model wrote when the device fed something else in its place (a routed store's header,
    replaced by MEM 127); otherwise it equals ``id``.
    """
    id: int
    origin: str
    written: int | None = None

    def __str__(self) -> str:
        text = f"{self.origin[0].upper()} {name(self.id)}"
        if self.written is not None and self.written != self.id:
            text += f" (wrote {name(self.written)})"
        return text
