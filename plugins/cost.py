"""A cost model in model-written tokens (DESIGN.md's performance model): what a call would cost each rank.

A token the model writes costs a forward pass; fed tokens (host copies in, peers' packets) are nearly free. So the
cost of a call is the number of tokens each rank's model writes. The model here:

1. builds every rank's host schedule for the call (qccl.schedule, the schedules qccl would run);
2. prices each launch from its lowered program (qwengpu.lower: the blocks a launch runs, arguments bound): a record
   is EXEC + 2 VALs per lane = 9 tokens, plus 3 per storing lane, plus END per warp; a host read is 2 tokens a word;
3. replays the launches in lockstep on flags alone (no payload: only the step counters the host already computes
   and the flag words prim.cu and mcast.cu post), so a rank that must wait for a peer's flag pays 9 tokens per spin
   record, as on the machine.

It never runs a device, so it is cheap (milliseconds per shape) and it is only a model: the tuner's tests hold its
choices against token counts measured on the interpreter.

    >>> estimate("allreduce", 4, 16, "multicast").max        # doctest: +SKIP
    308
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qccl import schedule as SC
from qccl.buffers import as_buffer
from qccl.heap import Heap
from qccl.transport import Kernel, Launch, Read, flag_traffic
from qccl.types import DataType, red_op
from qwengpu.isa import LANES, NONE

RECORD_TOKENS = 9           # EXEC + 2 VALs x 4 lanes
STORE_TOKENS = 3            # a write-back record
READ_TOKENS = 2             # a host read: the model writes the word's two VALs
MAX_WINDOWS = 1_000_000
PRICED = ("allreduce", "allgather", "broadcast")    # the collectives with two algorithms


@dataclass(frozen=True)
class Estimate:
    """Predicted model-written tokens and launches per rank (``deadlock``: the flags never allow progress)."""
    tokens: tuple[int, ...]
    launches: tuple[int, ...]
    deadlock: bool = False

    @property
    def max(self) -> int:
        return max(self.tokens) if self.tokens else 0


@dataclass(frozen=True)
class _Priced:
    """A launch reduced to what its timing needs: its records, its tokens when it never waits, the flag waits of
    its spin loops and its flag stores, each at the record (the block of the lowered program) where it happens."""
    records: int
    tokens: int
    waits: tuple          # ((record, address, value), ...): that record loops until the local flag word >= value
    stores: tuple         # ((record, address, value), ...): a flag store leaving at that record


_kernels: dict = {}


def _program(launch: Launch):
    from qwengpu import Device
    key = (str(launch.kernel.source), launch.kernel.name)
    if key not in _kernels:
        _kernels[key] = Device().load_kernel(*key)
    return _kernels[key].program(tuple(launch.args), launch.threads)


_statics: dict = {}


def _static(launch: Launch, shape: tuple, waits: tuple, stores: tuple) -> tuple:
    """(records, tokens, record of each wait, record of each flag store) of one launch that never waits: every
    block once per warp (forward branches are lane predicates after lowering; a wait loop runs once when its flag is
    already set). A wait sits at the block that loops on a load of its address, a flag store at the block that
    stores to its address (the first warp's; at the first or last record if the program has none such). Cached by
    the launch's shape: the mode and which arguments are zero decide the blocks, not the addresses or counter
    values; for mcast also the mask of ranks whose flags it waits for (one unrolled loop each)."""
    key = (str(launch.kernel.source), launch.kernel.name, launch.threads, shape)
    if key in _statics:
        return _statics[key]
    blocks = _program(launch).blocks
    records = tokens = 0
    for base in range(0, launch.threads, LANES):
        lanes = min(LANES, launch.threads - base)
        for block in blocks:
            records += 1
            tokens += RECORD_TOKENS
            if block.store != NONE or block.store_enable:
                tokens += STORE_TOKENS * lanes
        tokens += 1                                     # END
    loops = [j for j, b in enumerate(blocks) if b.branch != "none" and b.target == j and b.load and b.a.reg == NONE]
    wait_at = []
    for i, (addr, _, pre) in enumerate(waits):
        j = next((j for j in loops if blocks[j].a.imm == addr and j not in wait_at), None)
        wait_at.append(j if j is not None else (0 if pre else len(blocks) - 1))
    store_at = []
    for addr, _ in stores:
        j = next((j for j, b in enumerate(blocks) if b.store_enable and b.store == NONE and b.store_imm == addr),
                 None)
        store_at.append(j if j is not None else len(blocks) - 1)
    _statics[key] = records, tokens, tuple(wait_at), tuple(store_at)
    return _statics[key]


def price(launch: Launch) -> _Priced:
    """A launch's records, tokens and flag traffic (prim.cu's and mcast.cu's argument conventions)."""
    a = launch.args
    shape = (a[0], a[1]) + tuple(x > 0 for x in a[2:])
    if launch.kernel.name == "mcast":
        shape += (a[6],)        # the mask: mcast.cu's wait unrolls one loop per rank in it (n - 1 records, not 1)
    flags = flag_traffic(launch)
    waits = tuple((addr, v, True) for addr, v in flags.pre) + tuple((addr, v, False) for addr, v in flags.post)
    records, tokens, wait_at, store_at = _static(launch, shape, waits, flags.stores)
    return _Priced(records, tokens, tuple((j, addr, v) for j, (addr, v, _) in zip(wait_at, waits)),
                   tuple((j, addr, v) for j, (addr, v) in zip(store_at, flags.stores)))


def simulate(ops: dict, heaps: dict) -> Estimate:
    """Replay every rank's host ops in lockstep on flags only (one record per rank per window; a flag store leaves
    at its record and reaches its peers at their next window, as QLink delivers packets; a record that loops on a
    flag not yet there is a spin record, 9 tokens). Returns tokens and launches per rank."""
    ranks = sorted(ops)
    routes = {r: heaps[r].routes() for r in ranks}
    flags = {r: {} for r in ranks}
    inbox = {r: [] for r in ranks}
    queue = {r: list(ops[r]) for r in ranks}
    at = {r: 0 for r in ranks}
    cur = {r: None for r in ranks}          # [priced, record index]
    tokens = {r: 0 for r in ranks}
    launches = {r: 0 for r in ranks}

    def start(r):
        while at[r] < len(queue[r]) and cur[r] is None:
            op = queue[r][at[r]]
            at[r] += 1
            if isinstance(op, Read):
                tokens[r] += READ_TOKENS * op.count
            elif isinstance(op, Launch):
                cur[r] = [price(op), 0]
                launches[r] += 1

    for r in ranks:
        start(r)
    stalled = 0
    for _ in range(MAX_WINDOWS):
        if all(cur[r] is None for r in ranks) and not any(inbox.values()):
            return Estimate(tuple(tokens[r] for r in ranks), tuple(launches[r] for r in ranks))
        out = []
        progress = False
        for r in ranks:
            for addr, v in inbox[r]:
                flags[r][addr] = v
                progress = True
            inbox[r] = []
            if cur[r] is None:
                continue
            p, i = cur[r]
            if any(j == i and flags[r].get(addr, 0) < v for j, addr, v in p.waits):
                tokens[r] += RECORD_TOKENS                  # a spin record: the flag is not there yet
                continue
            progress = True
            for j, addr, v in p.stores:
                if j != i:
                    continue
                route = next((x for x in routes[r] if x.start <= addr < x.stop), None)
                if route is None or route.multicast:
                    flags[r][addr] = v
                for peer in (route.peers if route is not None else ()):
                    out.append((peer, addr, v))
            if i >= p.records - 1:
                tokens[r] += p.tokens
                cur[r] = None
                start(r)
            else:
                cur[r][1] = i + 1
        for peer, addr, v in out:
            inbox[peer].append((addr, v))
        stalled = 0 if progress or out else stalled + 1
        if stalled > 2:
            break
    return Estimate(tuple(tokens[r] for r in ranks), tuple(launches[r] for r in ranks), deadlock=True)


def _heap(nranks: int, rank: int, config: dict) -> Heap:
    return Heap(nranks, rank, fifo_slots=int(config.get("fifo_slots", 2)), slot_words=int(config.get("slot_words", 8)),
                window_words=int(config.get("window_words", 16)), p2p_slot_words=config.get("p2p_slot_words"))


def estimate(kind: str, nranks: int, count: int, algo: str, root: int | None = 0, config: dict | None = None,
             op="sum", dtype="int32", chunk: int | None = None) -> Estimate:
    """The predicted cost of one call of the collectives that have two algorithms (allreduce, allgather, broadcast)
    on a fresh communicator; ``count`` in words per rank's block (the copy collectives move any dtype as words, so
    their dtype does not matter); ``chunk``: words per chunk (None: the schedule's most)."""
    config = dict(config or {})
    if kind != "allreduce":
        op, dtype = "sum", "int32"
    key = (kind, nranks, count, algo, root or 0, tuple(sorted((k, v) for k, v in config.items()
                                                              if isinstance(v, (int, str, bool, type(None))))),
           str(op), str(dtype), chunk)
    return _estimate(key, config)




_memo: dict = {}


def _estimate(key, config) -> Estimate:
    if key in _memo:
        return _memo[key]
    kind, n, count, algo, root, _, op, dtype, chunk = key
    dt = DataType.UINT32 if dtype == "uint32" else DataType.INT32
    rop = red_op(op) if op not in ("", "None") else red_op("sum")
    ops, heaps = {}, {}
    for r in range(n):
        heap = heaps[r] = _heap(n, r, config)
        sch = SC.Scheduler(heap, SC.RankState(), dt, rop, kind)
        buf = lambda m: as_buffer(np.zeros(max(m, 0), np.int32), "cost model")     # noqa: E731  (sizes only)
        if count:
            if kind == "allreduce":
                sch.allreduce(buf(count), buf(count), count, algo, chunk)
            elif kind == "allgather":
                sch.allgather(buf(count), buf(count * n), count, algo, chunk)
            elif kind == "broadcast":
                sch.broadcast(buf(count), buf(count), count, root, algo, chunk)
            else:
                raise ValueError(f"the cost model prices allreduce, allgather and broadcast, not {kind}")
        ops[r] = sch.ops
    est = simulate(ops, heaps)
    if len(_memo) > 4096:
        _memo.clear()
    _memo[key] = est
    return est
