"""Fabrics: how the packets of one exchange reach their ranks.

An exchange takes what the local ranks sent during a window (packets: source rank, destination ranks, the three tokens
of the store record as the model wrote them) and a status per local rank, and returns the packets each local rank
receives plus every rank's status. Packets come out in a canonical order (by source rank, then in the order written), so
the schedule is the same whichever fabric carries them.

- InMemoryFabric: every rank lives in this process.
- GlooFabric: one rank per process; one gloo all_gather per exchange on the world's own group, every wait bounded
  and watching the peers' liveness (qccl.liveness).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Status:
    """A rank's state at the end of a window (what the deadlock detector and the end of an epoch look at)."""
    busy: bool = False          # a launch is in flight
    queued: int = 0             # host ops not yet run
    progress: bool = False      # did anything but spin (a host op, a launch start, a non-spin record, a delivery)
    error: bool = False
    wait_address: int = -1      # the flag of the last spin record (-1: none)
    wait_value: int = 0
    wait_expected: int = 0

    FIELDS = 7

    def pack(self) -> list[int]:
        return [int(self.busy), self.queued, int(self.progress), int(self.error), self.wait_address, self.wait_value,
                self.wait_expected]

    @classmethod
    def unpack(cls, values) -> "Status":
        v = [int(x) for x in values]
        return cls(bool(v[0]), v[1], bool(v[2]), bool(v[3]), v[4], v[5], v[6])


Packet = tuple[int, tuple[int, ...], tuple[int, int, int]]     # (source, destinations, (MEM a, VAL lo, VAL hi))


class Fabric:
    nranks: int
    local_ranks: tuple[int, ...]
    exchanges: int = 0

    def exchange(self, packets: list[Packet], status: dict[int, Status]):
        """-> (incoming: {local rank: [tokens, ...]}, statuses: {rank: Status} for every rank, packets moved by all
        ranks in this exchange)."""
        raise NotImplementedError

    def all_gather_object(self, obj) -> list:
        """Every rank's ``obj`` (only meaningful where one rank lives in this process)."""
        raise NotImplementedError

    @property
    def distributed(self) -> bool:
        return len(self.local_ranks) < self.nranks


def _sorted_incoming(packets: list[Packet], local_ranks) -> dict[int, list]:
    incoming = {r: [] for r in local_ranks}
    for src, dests, tokens in sorted(packets, key=lambda p: p[0]):      # stable: keeps each source's order
        for d in dests:
            if d in incoming:
                incoming[d].append(tokens)
    return incoming


class InMemoryFabric(Fabric):
    """All ranks in this process: the exchange is a rearrangement of lists."""

    def __init__(self, nranks: int):
        self.nranks = nranks
        self.local_ranks = tuple(range(nranks))
        self.exchanges = 0

    def exchange(self, packets, status):
        self.exchanges += 1
        return _sorted_incoming(packets, self.local_ranks), dict(status), len(packets)

    def all_gather_object(self, obj) -> list:
        raise RuntimeError("an in-memory fabric has every rank in this process")


class GlooFabric(Fabric):
    """One rank per process; packets and statuses travel in one gloo all_gather of int64 tensors per exchange, on the
    world's own gloo group, waited for through the world's Liveness (deadline, a peer's death or abort: see
    qccl.liveness)."""

    def __init__(self, nranks: int, rank: int, burst: int, live):
        import torch
        self.torch, self.live = torch, live
        self.nranks, self.rank = nranks, rank
        self.local_ranks = (rank,)
        self.exchanges = 0
        self.capacity = 4 * max(1, burst)          # a record stores from at most 4 lanes
        self.size = Status.FIELDS + 1 + 4 * self.capacity

    def _all_gather(self, local, what: str) -> list:
        """Every rank's ``local`` tensor (same shape everywhere), waited for with a deadline and liveness."""
        if self.live.failure is not None or self.live.aborted.is_set():
            self.live.check(what)       # a broken or aborted world raises before starting new work
        out = [[self.torch.empty_like(local) for _ in range(self.nranks)]]
        # the group is the Liveness's alone (it decides at exit whether the group is destroyed or kept forever)
        self.live.wait(self.live.group.allgather(out, [local]), what)
        return out[0]

    def exchange(self, packets, status):
        torch = self.torch
        self.exchanges += 1
        self.live.exchanges = self.exchanges
        mine = [p for p in packets if p[0] == self.rank]
        if len(mine) > self.capacity:
            raise RuntimeError(f"rank {self.rank} sent {len(mine)} packets in one window (capacity {self.capacity})")
        buf = status[self.rank].pack() + [len(mine)]
        for _, dests, tokens in mine:
            mask = 0
            for d in dests:
                mask |= 1 << d
            buf += [mask, *tokens]
        buf += [0] * (self.size - len(buf))
        out = self._all_gather(torch.tensor(buf, dtype=torch.int64),
                               f"packet exchange {self.exchanges} of {self.live.last_call}")
        statuses, all_packets = {}, []
        for r, t in enumerate(out):
            v = t.tolist()
            statuses[r] = Status.unpack(v[:Status.FIELDS])
            count = v[Status.FIELDS]
            at = Status.FIELDS + 1
            for i in range(count):
                mask, a, b, c = v[at + 4 * i: at + 4 * i + 4]
                dests = tuple(d for d in range(self.nranks) if mask >> d & 1)
                all_packets.append((r, dests, (a, b, c)))
        return _sorted_incoming(all_packets, self.local_ranks), statuses, len(all_packets)

    def all_gather_object(self, obj, what: str = "the call-signature exchange") -> list:
        """Every rank's picklable ``obj``: its length, then its bytes padded to the longest (two all_gathers)."""
        import pickle
        torch = self.torch
        data = pickle.dumps(obj)
        sizes = self._all_gather(torch.tensor([len(data)], dtype=torch.int64), what)
        longest = max(int(t.item()) for t in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8)
        mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        out = self._all_gather(mine, what)
        return [pickle.loads(t[:int(n.item())].numpy().tobytes()) for t, n in zip(out, sizes)]
