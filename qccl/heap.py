"""The symmetric heap: every rank lays out its 127 words the same way.

Layout (word addresses)::

    ring channel   FIFO slots, tail, head          stores to FIFO/tail go to rank+1, stores to head go to rank-1
    staging        S words                         the host writes a chunk's input here, local only
    multicast      two windows of W words, then one flag word per rank: stores land locally and at every peer
    p2p channels   one per distance d = 1..n-1      FIFO/tail go to rank+d, head goes to rank-d

A FIFO slot is both the receive buffer and the send window: a kernel loads the copy the previous rank sent, and its
stores to the same addresses leave for the next rank (the sink keeps them off local memory). Word 127 is never used.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgument

MEMORY_WORDS = 127          # usable words; 127 is the sink
LANES = 4


@dataclass(frozen=True)
class Route:
    """Stores to [start, stop) leave for ``peers`` (and stay local too when ``multicast``). A transport maps it onto
    its own mechanism (QLink: an aperture; peer pointers on real GPUs)."""
    start: int
    stop: int
    peers: tuple[int, ...]
    multicast: bool
    name: str

    def __str__(self) -> str:
        who = "every peer" if self.multicast else "rank " + ",".join(map(str, self.peers))
        return f"{self.name} [{self.start}, {self.stop}) -> {who}"


@dataclass(frozen=True)
class Channel:
    """A connection with NCCL's Simple protocol: ``slots`` FIFO slots of ``slot_words``, a tail word (chunks that
    arrived) right after the FIFO and a head word (chunks the receiver consumed)."""
    name: str
    fifo: int
    slots: int
    slot_words: int
    send_peer: int      # the rank this rank sends to
    recv_peer: int      # the rank this rank receives from

    @property
    def tail(self) -> int:
        return self.fifo + self.slots * self.slot_words

    @property
    def head(self) -> int:
        return self.tail + 1

    @property
    def size(self) -> int:
        return self.slots * self.slot_words + 2

    def slot(self, step: int) -> int:
        """Address of the slot that chunk number ``step`` (0-based, counted over the channel's life) uses."""
        return self.fifo + (step % self.slots) * self.slot_words

    def routes(self) -> list[Route]:
        return [Route(self.fifo, self.tail, (self.send_peer,), False, f"{self.name}.fifo"),
                Route(self.tail, self.tail + 1, (self.send_peer,), False, f"{self.name}.tail"),
                Route(self.head, self.head + 1, (self.recv_peer,), False, f"{self.name}.head")]


@dataclass(frozen=True)
class Multicast:
    """Two windows used alternately (round parity) and one flag word per rank."""
    base: int
    window_words: int
    nranks: int

    def window(self, seq: int) -> int:
        return self.base + (seq % 2) * self.window_words

    @property
    def flags(self) -> int:
        return self.base + 2 * self.window_words

    @property
    def size(self) -> int:
        return 2 * self.window_words + self.nranks

    def routes(self, rank: int) -> list[Route]:
        peers = tuple(p for p in range(self.nranks) if p != rank)
        return [Route(self.base, self.flags, peers, True, "multicast.windows"),
                Route(self.flags, self.flags + self.nranks, peers, True, "multicast.flags")]


class Heap:
    """The layout for one rank of an ``nranks`` communicator (the same addresses on every rank)."""

    def __init__(self, nranks: int, rank: int, fifo_slots: int = 2, slot_words: int = 8, window_words: int = 16,
                 p2p_slot_words: int | None = None):
        if fifo_slots < 1:
            raise InvalidArgument(f"fifo_slots={fifo_slots}: a FIFO has at least one slot")
        if not 1 <= slot_words <= 32:
            raise InvalidArgument(f"slot_words={slot_words}: a slot holds 1..32 words")
        self.nranks, self.rank = nranks, rank
        self.fifo_slots, self.slot_words = fifo_slots, slot_words
        n = nranks
        at = 0
        self.ring = None
        self.multicast = None
        self.p2p: dict[int, Channel] = {}
        if n > 1:
            self.ring = Channel("ring", at, fifo_slots, slot_words, (rank + 1) % n, (rank - 1) % n)
            at += self.ring.size
        self.staging = at
        self.staging_words = slot_words
        at += slot_words
        if n > 1:
            window_words = max(n, min(window_words, (MEMORY_WORDS - at - n - (n - 1) * (fifo_slots + 2)) // 2))
            self.multicast = Multicast(at, window_words, n)
            at += self.multicast.size
            room = MEMORY_WORDS - at
            per = room // (n - 1)
            sp = (per - 2) // fifo_slots
            if p2p_slot_words is not None:
                sp = p2p_slot_words
            sp = min(sp, slot_words)
            if sp < 1:
                raise InvalidArgument(f"{n} ranks do not fit in {MEMORY_WORDS} words with slot_words={slot_words}, "
                                      f"window_words={window_words}")
            for d in range(1, n):
                ch = Channel(f"p2p{d}", at, fifo_slots, sp, (rank + d) % n, (rank - d) % n)
                self.p2p[d] = ch
                at += ch.size
        if at > MEMORY_WORDS:
            raise InvalidArgument(f"the heap needs {at} words, the device has {MEMORY_WORDS}")
        self.used = at

    def channels(self) -> list[Channel]:
        return ([self.ring] if self.ring else []) + [self.p2p[d] for d in sorted(self.p2p)]

    def routes(self) -> list[Route]:
        routes = []
        for ch in self.channels():
            routes += ch.routes()
        if self.multicast:
            routes += self.multicast.routes(self.rank)
        return routes

    def describe(self) -> str:
        lines = [f"heap of rank {self.rank}/{self.nranks}: {self.used} of {MEMORY_WORDS} words"]
        for ch in self.channels():
            lines.append(f"  {ch.name}: fifo {ch.fifo}..{ch.tail - 1} ({ch.slots} x {ch.slot_words}), tail {ch.tail}, "
                         f"head {ch.head}; sends to {ch.send_peer}, receives from {ch.recv_peer}")
        lines.append(f"  staging: {self.staging}..{self.staging + self.staging_words - 1}")
        if self.multicast:
            m = self.multicast
            lines.append(f"  multicast: windows {m.window(0)} and {m.window(1)} ({m.window_words} words), flags "
                         f"{m.flags}..{m.flags + self.nranks - 1}")
        return "\n".join(lines)
