"""The communicator: NCCL's calls, with nccl4py's names.

    import qccl
    comms = qccl.Communicator.init_all(4)                       # all ranks in this process
    with qccl.group():
        for c in comms:
            c.allreduce(send[c.rank], recv[c.rank], op="sum")

A call checks its arguments (nothing changes when it raises), becomes a host schedule per rank (qccl.schedule) and
runs on the communicator's transport, found by name through pluggy (qccl.plugins).
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

import numpy as np

from . import group as G
from .buffers import Buffer, as_buffer
from .errors import InvalidArgument, InvalidUsage
from .heap import Heap
from .plugins import get_transport, run_epoch, tune
from .schedule import RankState, Scheduler
from .transport import Work
from .types import DataType, RedOp, red_op

MAX_RANKS = 8
ALGOS = {"allreduce": ("ring", "multicast"), "reduce": ("ring",), "reduce_scatter": ("ring",),
         "allgather": ("ring", "multicast"), "broadcast": ("ring", "multicast")}


@dataclass(frozen=True)
class UniqueId:
    """ncclUniqueId: names a communicator; ``address`` (host:port) is where processes rendezvous, when set."""
    token: str
    address: str | None = None

    def __str__(self) -> str:
        return self.token + (f"@{self.address}" if self.address else "")

    @classmethod
    def parse(cls, text: str) -> "UniqueId":
        token, _, address = text.partition("@")
        return cls(token, address or None)


def get_unique_id() -> UniqueId:
    """A new communicator id. Under ``python -m qccl.launch`` every process gets the launcher's id (as if rank 0 had
    broadcast it), which carries the rendezvous address."""
    env = os.environ.get("QCCL_UNIQUE_ID")
    if env:
        return UniqueId.parse(env)
    return UniqueId(secrets.token_hex(16))


@dataclass
class Call:
    comm: "Communicator"
    kind: str
    send: Buffer | None = None
    recv: Buffer | None = None
    count: int = 0
    dtype: object = None
    op: RedOp | None = None
    root: int | None = None         # root of broadcast/reduce, peer of send/recv
    algo: str = "ring"
    extra: dict = field(default_factory=dict)

    @property
    def p2p(self) -> bool:
        return self.kind in ("send", "recv")

    def signature(self) -> tuple:
        op = None if self.op is None else int(self.op)
        return (self.kind, self.count, str(self.dtype), op, self.root, self.algo)

    def __str__(self) -> str:
        text = f"{self.kind}(count={self.count}, dtype={self.dtype}"
        if self.op is not None:
            text += f", op={self.op}"
        if self.root is not None:
            text += f", {'peer' if self.p2p else 'root'}={self.root}"
        return text + ")"


class Communicator:
    """One rank of a communicator (ncclComm_t)."""

    def __init__(self, nranks: int, rank: int, world, transport, config: dict):
        self._nranks, self._rank = nranks, rank
        self.world, self.transport, self.config = world, transport, dict(config)
        self.heap = Heap(nranks, rank, fifo_slots=int(config.get("fifo_slots", 2)),
                         slot_words=int(config.get("slot_words", 8)),
                         window_words=int(config.get("window_words", 16)),
                         p2p_slot_words=config.get("p2p_slot_words"))
        self.state = RankState()
        self.destroyed = False
        self.aborted = False
        world.connect(rank, self.heap.routes())

    # -- construction ------------------------------------------------------------------------------------------------
    @classmethod
    def init(cls, nranks: int, rank: int, uid: UniqueId, transport: str = "qlink", config: dict | None = None):
        """ncclCommInitRank: this process's rank ``rank`` of an ``nranks`` communicator named by ``uid``."""
        config = dict(config or {})
        _check_size(nranks)
        if not isinstance(rank, int) or not 0 <= rank < nranks:
            raise InvalidArgument(f"invalid rank {rank} (rank should be in the 0..{nranks - 1} range)")
        t = get_transport(transport)
        world = t.create_world(nranks, [rank], uid, config)
        return cls(nranks, rank, world, t, config)

    @classmethod
    def init_all(cls, n: int, transport: str = "qlink", config: dict | None = None) -> list["Communicator"]:
        """ncclCommInitAll: ``n`` ranks, all driven by this process (use groups to call them together)."""
        config = dict(config or {})
        _check_size(n)
        t = get_transport(transport)
        world = t.create_world(n, list(range(n)), get_unique_id(), config)
        return [cls(n, r, world, t, config) for r in range(n)]

    # -- queries -------------------------------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def nranks(self) -> int:
        return self._nranks

    @property
    def size(self) -> int:
        return self._nranks

    @property
    def stats(self) -> dict:
        """This rank's counters: tokens_written, launches, records, packets_sent, packets_received (cumulative)."""
        self._alive("stats")
        return dict(self.world.stats(self._rank))

    def __repr__(self) -> str:
        return f"<qccl.Communicator rank {self._rank} of {self._nranks} on {self.transport.name}>"

    # -- lifecycle -----------------------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait until this rank's calls have finished (DeadlockError if they cannot)."""
        self._alive("synchronize")
        self.world.synchronize(self._rank)

    def destroy(self) -> None:
        """ncclCommDestroy: finish outstanding work, then release the rank. Later calls raise InvalidUsage."""
        if self.destroyed:
            return
        try:
            if not self.aborted:
                self.world.synchronize(self._rank)
        finally:
            self.destroyed = True
            self.world.destroy(self._rank)

    def abort(self) -> None:
        """ncclCommAbort: drop outstanding work at once and release the rank."""
        if self.destroyed:
            return
        self.aborted = True
        self.world.abort(self._rank)
        self.destroyed = True

    def _alive(self, what: str) -> None:
        if self.destroyed:
            state = "aborted" if self.aborted else "destroyed"
            raise InvalidUsage(f"{what} on a {state} communicator (rank {self._rank})")

    # -- argument checks -----------------------------------------------------------------------------------------------
    def _dtype(self, buf: Buffer, what: str):
        name = str(buf.dtype)
        if name not in self.transport.dtypes:
            raise InvalidArgument(f"{what}: dtype {name} is not supported by transport {self.transport.name} "
                                  f"(supported: {', '.join(self.transport.dtypes)})")
        return buf.dtype

    def _root(self, root, what="root") -> int:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < self._nranks:
            raise InvalidArgument(f"invalid {what} {root} ({what} should be in the 0..{self._nranks - 1} range)")
        return int(root)

    def _algo(self, kind: str, algo, count: int = 0, dtype=None, op=None, root=None) -> str:
        """The algorithm a call runs; "auto" asks the tuners (qccl.plugins.tune), the same answer on every rank."""
        algo = algo or self.config.get("algo", "ring")
        if algo != "auto" and algo not in ALGOS[kind]:
            raise InvalidArgument(f"{kind}: unknown algorithm {algo!r} (available: auto, {', '.join(ALGOS[kind])})")
        return tune(kind, algo, ALGOS[kind], self._nranks, count, dtype, op, root, self.config)

    def _buffers(self, kind: str, sendbuf, recvbuf, layout: str = "same", send: bool = True, recv: bool = True):
        """Wrap and check the buffers a rank passes to a collective; ``send``/``recv`` False: this rank does not use
        that one (a non-root's Broadcast input, Reduce output). Both used: one dtype, the sizes ``layout`` asks
        (same: equal; gather: recv = nranks x send; scatter: send = nranks x recv), and either disjoint or the in-place
        arrangement NCCL defines (recv's, or send's, block of this rank). Returns (send, recv, dtype)."""
        s = as_buffer(sendbuf, f"{kind} sendbuf") if send else None
        r = _writable(as_buffer(recvbuf, f"{kind} recvbuf"), f"{kind} recvbuf") if recv else None
        if s is not None and r is not None and s.dtype != r.dtype:
            raise InvalidArgument(f"{kind}: send dtype {s.dtype} and recv dtype {r.dtype} differ")
        dt = self._dtype(s if s is not None else r, kind)
        if s is None or r is None:
            return s, r, dt
        n = self._nranks
        if layout == "same" and s.count != r.count:
            raise InvalidArgument(f"{kind}: sendbuf has {s.count} elements, recvbuf {r.count}")
        if layout == "gather" and r.count != s.count * n:
            raise InvalidArgument(f"{kind}: recvbuf has {r.count} elements; it needs nranks x sendcount = "
                                  f"{n} x {s.count}")
        if layout == "scatter" and s.count != r.count * n:
            raise InvalidArgument(f"{kind}: sendbuf has {s.count} elements; it needs nranks x recvcount = "
                                  f"{n} x {r.count}")
        in_place = {"same": s.ptr == r.ptr, "gather": s.ptr == r.ptr + self._rank * s.nbytes,
                    "scatter": r.ptr == s.ptr + self._rank * r.nbytes}[layout]
        if s.overlaps(r) and not in_place:
            raise InvalidArgument(f"{kind}: send and recv buffers overlap without being in place")
        return s, r, dt

    def _submit(self, call: Call) -> None:
        if G.in_group():
            G.add(call)
        else:
            execute([call])

    # -- collectives ------------------------------------------------------------------------------------------------------
    def allreduce(self, sendbuf, recvbuf, op="sum", stream=None, algo=None) -> None:
        """ncclAllReduce: recv = op over ranks of send. In place when send is recv."""
        self._alive("allreduce")
        op = red_op(op)
        s, r, dt = self._buffers("allreduce", sendbuf, recvbuf)
        self._submit(Call(self, "allreduce", s, r, s.count, dt, op, None,
                          self._algo("allreduce", algo, s.count, dt, op)))

    def reduce(self, sendbuf, recvbuf, op="sum", root=0, stream=None, algo=None) -> None:
        """ncclReduce: the root's recv = op over ranks of send; the other ranks' recv is not touched (may be None)."""
        self._alive("reduce")
        root = self._root(root)
        op = red_op(op)
        s, r, dt = self._buffers("reduce", sendbuf, recvbuf, recv=self._rank == root)
        self._submit(Call(self, "reduce", s, r, s.count, dt, op, root, self._algo("reduce", algo)))

    def broadcast(self, sendbuf, recvbuf, root=0, stream=None, algo=None) -> None:
        """ncclBroadcast: every rank's recv = the root's send (send may be None on other ranks)."""
        self._alive("broadcast")
        root = self._root(root)
        s, r, dt = self._buffers("broadcast", sendbuf, recvbuf, send=self._rank == root)
        self._submit(Call(self, "broadcast", s, r, r.count, dt, None, root,
                          self._algo("broadcast", algo, r.count, dt, None, root)))

    def bcast(self, buf, root=0, stream=None, algo=None) -> None:
        """In-place broadcast (ncclBcast)."""
        self.broadcast(buf, buf, root, stream, algo)

    def allgather(self, sendbuf, recvbuf, stream=None, algo=None) -> None:
        """ncclAllGather: recv = the ranks' send buffers, rank order. In place when send is recv's own block."""
        self._alive("allgather")
        s, r, dt = self._buffers("allgather", sendbuf, recvbuf, "gather")
        self._submit(Call(self, "allgather", s, r, s.count, dt, None, None,
                          self._algo("allgather", algo, s.count, dt)))

    def reduce_scatter(self, sendbuf, recvbuf, op="sum", stream=None, algo=None) -> None:
        """ncclReduceScatter: rank r's recv = block r of op over ranks of send. In place when recv is send's block r."""
        self._alive("reduce_scatter")
        op = red_op(op)
        s, r, dt = self._buffers("reduce_scatter", sendbuf, recvbuf, "scatter")
        self._submit(Call(self, "reduce_scatter", s, r, r.count, dt, op, None, self._algo("reduce_scatter", algo)))

    def send(self, sendbuf, peer, stream=None) -> None:
        """ncclSend: to ``peer``, which must post a matching recv (in the same group, when one process drives both)."""
        self._alive("send")
        peer = self._root(peer, "peer")
        s = as_buffer(sendbuf, "send buf")
        self._submit(Call(self, "send", s, None, s.count, self._dtype(s, "send"), None, peer))

    def recv(self, recvbuf, peer, stream=None) -> None:
        """ncclRecv: from ``peer``."""
        self._alive("recv")
        peer = self._root(peer, "peer")
        r = _writable(as_buffer(recvbuf, "recv buf"), "recv buf")
        self._submit(Call(self, "recv", None, r, r.count, self._dtype(r, "recv"), None, peer))

    # -- schedules --------------------------------------------------------------------------------------------------------
    def _schedule(self, calls: list[Call], state: RankState) -> list:
        ops = []
        pipelined = bool(self.config.get("p2p_pipeline", True))
        i = 0
        while i < len(calls):
            c = calls[i]
            if c.p2p:
                j = i
                while j < len(calls) and calls[j].p2p:
                    j += 1
                batch = calls[i:j]
                sends = [(x.root, x.send) for x in batch if x.kind == "send" and x.count]
                recvs = [(x.root, x.recv) for x in batch if x.kind == "recv" and x.count]
                sch = Scheduler(self.heap, state, DataType.INT32, RedOp.SUM, "sendrecv")
                sch.send_recv(sends, recvs, pipelined)
                ops += sch.ops
                i = j
                continue
            i += 1
            if c.count == 0:
                continue
            sch = Scheduler(self.heap, state, c.dtype, c.op or RedOp.SUM, c.kind)
            if c.kind == "allreduce":
                sch.allreduce(c.send, c.recv, c.count, c.algo)
            elif c.kind == "reduce":
                sch.reduce(c.send, c.recv, c.count, c.root)
            elif c.kind == "broadcast":
                sch.broadcast(c.send, c.recv, c.count, c.root, c.algo)
            elif c.kind == "allgather":
                sch.allgather(c.send, c.recv, c.count, c.algo)
            elif c.kind == "reduce_scatter":
                sch.reduce_scatter(c.send, c.recv, c.count)
            ops += sch.ops
        return ops


def _writable(buf: Buffer, what: str) -> Buffer:
    if not buf.array.flags.writeable:
        raise InvalidArgument(f"{what}: the buffer is read-only")
    return buf


def _check_size(n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RANKS:
        raise InvalidArgument(f"invalid number of ranks {n} (qccl on QLink supports 1..{MAX_RANKS})")


def _check_p2p(calls_by_rank: dict, nranks: int, complete: bool) -> None:
    """Sends and receives must pair up: same peer order, counts and dtypes. A send to self needs a recv from self."""
    def lists(rank, kind, peer):
        return [(c.count, str(c.dtype)) for c in calls_by_rank.get(rank, []) if c.kind == kind and c.root == peer]

    for s, calls in calls_by_rank.items():
        for peer in sorted({c.root for c in calls if c.kind == "send"}):
            if peer != s and (not complete and peer not in calls_by_rank):
                continue
            sent, got = lists(s, "send", peer), lists(peer, "recv", s)
            if sent != got:
                raise InvalidUsage(f"rank {s} sends {_fmt(sent)} to rank {peer}, but rank {peer} receives "
                                   f"{_fmt(got)} from rank {s}")
        for peer in sorted({c.root for c in calls if c.kind == "recv"}):
            if peer != s and (not complete and peer not in calls_by_rank):
                continue
            if lists(peer, "send", s) != lists(s, "recv", peer):
                raise InvalidUsage(f"rank {s} receives {_fmt(lists(s, 'recv', peer))} from rank {peer}, but rank "
                                   f"{peer} sends {_fmt(lists(peer, 'send', s))} to rank {s}")


def _fmt(items) -> str:
    if not items:
        return "nothing"
    return ", ".join(f"{n} x {t}" for n, t in items)


def _check_collectives(calls_by_rank: dict) -> None:
    seqs = {r: [c for c in calls if not c.p2p and c.count] for r, calls in calls_by_rank.items()}
    ranks = sorted(seqs)
    base = ranks[0]
    for r in ranks[1:]:
        a, b = seqs[base], seqs[r]
        for i in range(max(len(a), len(b))):
            ca = a[i] if i < len(a) else None
            cb = b[i] if i < len(b) else None
            if ca is None or cb is None or ca.signature() != cb.signature():
                raise InvalidUsage(f"mismatched collective calls: call {i} is {ca or 'missing'} on rank {base} but "
                                   f"{cb or 'missing'} on rank {r}")


def execute(calls: list[Call]) -> None:
    """Run calls (one group, or a single call): check, schedule per rank, submit each world's epoch."""
    for c in calls:
        c.comm._alive(c.kind)
    worlds: dict[int, list] = {}
    for c in calls:
        worlds.setdefault(id(c.comm.world), []).append(c)
    plans = []
    for wcalls in worlds.values():
        world = wcalls[0].comm.world
        nranks = wcalls[0].comm.nranks
        by_rank: dict[int, list[Call]] = {}
        comms = {}
        for c in wcalls:
            if c.comm.rank in comms and comms[c.comm.rank] is not c.comm:
                raise InvalidUsage(f"two communicators for rank {c.comm.rank} in one group")
            comms[c.comm.rank] = c.comm
            by_rank.setdefault(c.comm.rank, []).append(c)
        complete = len(by_rank) == nranks
        for r, rc in by_rank.items():
            for c in rc:
                if c.kind == "send" and c.root == r and not any(x.kind == "recv" and x.root == r for x in rc):
                    raise InvalidUsage(f"rank {r} sends to itself without a matching recv in the same group")
        _check_p2p(by_rank, nranks, complete)
        if complete:
            _check_collectives(by_rank)
        for r, rc in by_rank.items():
            gathered = world.gather_calls(r, [(c.kind, c.count, str(c.dtype), None if c.op is None else int(c.op),
                                               c.root, c.algo) for c in rc])
            if gathered is not None:
                _check_gathered(gathered, r)
        work = []
        states = {}
        for r, rc in sorted(by_rank.items()):
            comm = comms[r]
            state = comm.state.clone()
            work.append(Work(r, comm._schedule(rc, state), [c.signature() for c in rc]))
            states[r] = state
        plans.append((world, comms, states, work))
    for world, comms, states, work in plans:
        for r, st in states.items():
            comms[r].state = st
        run_epoch(world, work)


def _check_gathered(gathered: list, me: int) -> None:
    """Across processes: the same collectives everywhere, and point-to-point calls that pair up."""
    class _C:
        def __init__(self, sig):
            self.kind, self.count, self.dtype, self.op, self.root, self.algo = sig
            self.p2p = self.kind in ("send", "recv")

        def signature(self):
            return (self.kind, self.count, self.dtype, self.op, self.root, self.algo)

        def __str__(self):
            return f"{self.kind}(count={self.count}, dtype={self.dtype})"

    by_rank = {r: [_C(tuple(s)) for s in sigs] for r, sigs in enumerate(gathered)}
    _check_p2p(by_rank, len(gathered), True)
    _check_collectives(by_rank)
