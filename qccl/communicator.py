"""The communicator: NCCL's calls, with nccl4py's names. This module is the API face only: each call checks its
arguments (nothing changes when it raises) and enqueues one call record (qccl.enqueue), which matches it against the
other ranks' calls and runs it on the transport, found by name through pluggy (qccl.plugins).

    import qccl
    comms = qccl.Communicator.init_all(4)                       # all ranks in this process
    with qccl.group():
        for c in comms:
            c.allreduce(send[c.rank], recv[c.rank], op="sum")
"""
from __future__ import annotations

import functools
import inspect
import os
import secrets
import weakref
from dataclasses import dataclass

import numpy as np

from . import enqueue as E
from .board import Board
from .buffers import Buffer, as_buffer
from .calls import Call, Sig
from .config import Config
from .errors import InvalidArgument, InvalidUsage, QcclError, Result
from .heap import Heap
from .plugins import get_transport, tune
from .schedule import RankState, algo_label, max_chunk
from .types import BITWISE, RedOp, _integer, red_op

MAX_RANKS = 8
ALGOS = {"allreduce": ("ring", "multicast"), "reduce": ("ring",), "reduce_scatter": ("ring",),
         "allgather": ("ring", "multicast"), "broadcast": ("ring", "multicast")}
SPLIT_NOCOLOR = -1          # NCCL_SPLIT_NOCOLOR: this rank joins no new communicator

_boards: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()     # world -> Board, freed with the world


@dataclass(frozen=True)
class UniqueId:
    """ncclUniqueId: names a communicator; ``address`` (host:port) is where processes rendezvous, when set.

    >>> UniqueId.parse("ab12@127.0.0.1:29500").address
    '127.0.0.1:29500'
    """
    token: str
    address: str | None = None

    def __str__(self) -> str:
        return self.token + (f"@{self.address}" if self.address else "")

    @classmethod
    def parse(cls, text: str) -> "UniqueId":
        token, _, address = text.partition("@")
        return cls(token, address or None)


def get_unique_id() -> UniqueId:
    """ncclGetUniqueId: a new communicator id. Under ``python -m qccl.launch`` every process gets the launcher's id
    (as if rank 0 had broadcast it), which carries the rendezvous address.

    >>> qccl.get_unique_id() != qccl.get_unique_id()      # doctest: +SKIP
    True
    """
    env = os.environ.get("QCCL_UNIQUE_ID")
    if env:
        return UniqueId.parse(env)
    return UniqueId(secrets.token_hex(16))


def _bound(method):
    """Arguments that do not fit ``method`` (an unknown keyword, a missing buffer) are InvalidArgument naming its
    parameters, not Python's TypeError: every error through qccl's API is one of qccl's classes."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            signature.bind(*args, **kwargs)
        except TypeError as e:
            params = ", ".join(p for p in signature.parameters if p not in ("self", "cls"))
            raise InvalidArgument(f"{method.__name__}: {e} (its parameters: {params})") from None
        return method(*args, **kwargs)
    return wrapper


def _api(method):
    """A call of a communicator: its arguments checked (:func:`_bound`), and a qccl error it raises recorded as the
    communicator's last error (get_last_error)."""
    checked = _bound(method)

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return checked(self, *args, **kwargs)
        except QcclError as e:
            self._last_error = str(e)
            raise
    return wrapper


class Communicator:
    """One rank of a communicator (ncclComm_t). Made by :meth:`init`, :meth:`init_all`, :meth:`split` or
    :meth:`shrink`.

    >>> comms = qccl.Communicator.init_all(2)
    >>> comms[1].rank, comms[1].nranks
    (1, 2)
    """

    def __init__(self, nranks: int, rank: int, world, transport, config: Config, mode: str = "all", uid=None):
        self._setup(nranks, rank, world, transport, config, mode, uid)

    def _setup(self, nranks, rank, world, transport, config: Config, mode: str, uid) -> None:
        self._nranks, self._rank, self._mode, self._uid = nranks, rank, mode, uid
        self.world, self.transport, self.config = world, transport, config
        self.heap = Heap(nranks, rank, fifo_slots=config.fifo_slots, slot_words=config.slot_words,
                         window_words=config.window_words, p2p_slot_words=config.p2p_slot_words)
        self.state = RankState()
        self.destroyed = False
        self.aborted = False
        self._last_error = ""
        self._async_error: QcclError | None = None
        self._splits = 0
        board = _boards.get(world)
        if board is None:
            board = _boards[world] = Board(nranks)
        self._board = board
        world.connect(rank, self.heap.routes())

    # -- construction ------------------------------------------------------------------------------------------------
    @classmethod
    @_bound
    def init(cls, nranks: int, rank: int, uid: UniqueId, transport: str = "qlink", config=None) -> "Communicator":
        """ncclCommInitRank: this caller's rank ``rank`` of an ``nranks`` communicator named by ``uid``: one process
        per rank (under qccl.launch or torchrun) or one thread per rank of this process.

        >>> comm = qccl.Communicator.init(int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"]),
        ...                               qccl.get_unique_id())                                   # doctest: +SKIP
        """
        cfg = Config.of(config)
        n = _check_size(nranks)
        r = _integer(rank)
        if r is None or not 0 <= r < n:
            raise InvalidArgument(f"invalid rank {_show(rank)} (rank should be in the 0..{n - 1} range)")
        t = get_transport(transport)
        world = _create_world(t, n, [r], uid, cfg)
        mode = "all" if n == 1 else "process" if len(world.local_ranks) < n else "thread"
        return cls(n, r, world, t, cfg, mode, uid)

    @classmethod
    @_bound
    def init_all(cls, n: int, transport: str = "qlink", config=None) -> list["Communicator"]:
        """ncclCommInitAll: ``n`` ranks, all driven by this thread (group their calls, or call them one after the
        other: a call that waits for other ranks is held until they call).

        >>> comms = qccl.Communicator.init_all(4, config={"burst": 4})
        """
        cfg = Config.of(config)
        n = _check_size(n)
        t = get_transport(transport)
        uid = get_unique_id()
        world = _create_world(t, n, list(range(n)), uid, cfg)
        return [cls(n, r, world, t, cfg, "all", uid) for r in range(n)]

    @_api
    def split(self, color: int, key: int = 0, config=None) -> "Communicator | None":
        """ncclCommSplit: the ranks that pass the same ``color`` form a new communicator, ranked by ``key`` (then by
        their rank here); ``color`` SPLIT_NOCOLOR (-1) joins none and gets None. Every rank of this communicator
        calls it. With one thread driving every rank the result is ready once the last rank called (using it before
        is InvalidUsage); with one thread per rank, the call waits for the others; with one process per rank
        (qccl.launch, torchrun) the members meet in the parent's rendezvous store (at most ``thread_timeout`` s) and
        each process joins its rank of its color's new world.

        >>> evens_odds = [c.split(c.rank % 2, c.rank) for c in comms]      # doctest: +SKIP
        """
        c, k = _integer(color), _integer(key)
        if c is None or c < SPLIT_NOCOLOR or k is None:
            raise InvalidArgument(f"split: invalid color {_show(color)} or key {_show(key)} (color: an integer >= 0, "
                                  f"or {SPLIT_NOCOLOR} for none; key: an integer)")
        return self._regroup("split", c, k, tuple(range(self._nranks)), config)

    @_api
    def shrink(self, exclude_ranks, config=None) -> "Communicator":
        """ncclCommShrink: a new communicator of this one's ranks but ``exclude_ranks`` (renumbered in order). Every
        rank that stays calls it with the same list; the excluded ranks do not (also across processes: an excluded
        process may have gone).

        >>> smaller = [c.shrink([2]) for c in comms if c.rank != 2]      # doctest: +SKIP
        """
        try:
            excluded = sorted({int(self._root(r, "excluded rank")) for r in exclude_ranks})
        except TypeError:
            raise InvalidArgument(f"shrink: exclude_ranks={exclude_ranks!r} is not a list of ranks") from None
        if self._rank in excluded:
            raise InvalidArgument(f"shrink: rank {self._rank} is in exclude_ranks {excluded}; an excluded rank "
                                  "does not call shrink")
        stay = tuple(r for r in range(self._nranks) if r not in excluded)
        return self._regroup("shrink", 0, self._rank, stay, config)

    def _regroup(self, kind: str, color: int, key: int, members: tuple, config):
        """split and shrink: every member posts (color, key); the last one to arrive makes the new communicators.
        With one thread per rank, each member's thread then joins its own rank of the new world (the worlds of
        threads meet at init); across processes the members meet through the transport (:meth:`_regroup_processes`)."""
        self._alive(kind)
        cfg = Config.of(config) if config is not None else self.config
        if self._mode == "process":
            return self._regroup_processes(kind, color, key, members, cfg)
        board = self._board
        with board.cond:
            index = self._splits
            table = board.regroups.setdefault(index, {})
            if table:
                other = next(iter(table.values()))
                if (other["kind"], other["members"]) != (kind, members):
                    raise InvalidUsage(f"mismatched calls: communicator-creation call {index} is {other['kind']} "
                                       f"over ranks {list(other['members'])} on rank {other['rank']} but {kind} over "
                                       f"ranks {list(members)} on rank {self._rank}")
            child = Communicator.__new__(Communicator)
            child._pending = f"{kind} waits for ranks " + ", ".join(
                str(r) for r in members if r not in table and r != self._rank)
            table[self._rank] = {"kind": kind, "members": members, "rank": self._rank, "color": color, "key": key,
                                 "child": child}
            self._splits += 1
            if set(table) == set(members):
                del board.regroups[index]
                self._make_children(table, index, cfg)
                board.cond.notify_all()
            elif self._mode == "thread":
                if not board.cond.wait_for(lambda: child.__dict__.get("_pending") is None,
                                           timeout=float(self.config.thread_timeout)):
                    raise InvalidUsage(f"rank {self._rank} waited {self.config.thread_timeout:g} s in {kind}: "
                                       f"{child._pending}")
        assigned = child.__dict__.pop("_assigned", None)
        if assigned is not None:        # outside the board's lock: init waits for the other members' threads
            m, new, uid = assigned
            child._setup(m, new, _create_world(self.transport, m, [new], uid, cfg), self.transport, cfg, "thread",
                         uid)
        return None if color == SPLIT_NOCOLOR else child

    def _make_children(self, table: dict, index: int, cfg: Config) -> None:
        colors: dict[int, list] = {}
        for r, e in table.items():
            if e["color"] != SPLIT_NOCOLOR:
                colors.setdefault(e["color"], []).append((e["key"], r))
        for color, members in colors.items():
            members.sort()
            m = len(members)
            uid = UniqueId(f"{getattr(self._uid, 'token', self._uid)}.{index}.{color}")
            if self._mode == "thread" and m > 1:
                for new, (_, r) in enumerate(members):
                    child = table[r]["child"]
                    child._assigned = (m, new, uid)        # its own thread joins the new world (_regroup)
            else:
                world = _create_world(self.transport, m, list(range(m)), uid, cfg)
                for new, (_, r) in enumerate(members):
                    child = table[r]["child"]
                    child._setup(m, new, world, self.transport, cfg, "all", uid)
                    child._pending = None
        for e in table.values():
            e["child"].__dict__["_pending"] = None

    def _regroup_processes(self, kind: str, color: int, key: int, members: tuple, cfg: Config):
        """split / shrink with one process per rank: the members swap (kind, members, color, key) through the
        transport's rendezvous (``world.regroup``), then each process joins its rank of its color's new world, whose
        own rendezvous lives under the old one's (``world.child_id``)."""
        regroup = getattr(self.world, "regroup", None)
        if regroup is None:
            raise InvalidUsage(f"{kind} across processes: transport {self.transport.name} cannot regroup its ranks "
                               "(it has no world.regroup)")
        index = self._splits
        self._splits += 1
        mine = [kind, list(members), color, key]
        entries = regroup(self._rank, index, members, mine, float(self.config.thread_timeout))
        for r in members:
            theirs = entries[r]
            if theirs[:2] != mine[:2]:
                raise InvalidUsage(f"mismatched calls: communicator-creation call {index} is {theirs[0]} over ranks "
                                   f"{theirs[1]} on rank {r} but {kind} over ranks {list(members)} on rank "
                                   f"{self._rank}")
        if color == SPLIT_NOCOLOR:
            return None
        group = sorted((entries[r][3], r) for r in members if entries[r][2] == color)
        m, new = len(group), group.index((key, self._rank))
        uid = self.world.child_id(index, color, f"{getattr(self._uid, 'token', self._uid)}.{index}.{color}")
        world = _create_world(self.transport, m, [new], uid, cfg)
        mode = "all" if m == 1 else "process" if len(world.local_ranks) < m else "thread"
        return Communicator(m, new, world, self.transport, cfg, mode, uid)

    # -- queries -------------------------------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This rank (ncclCommUserRank): ``comms[2].rank == 2``."""
        self._ready()
        return self._rank

    @property
    def nranks(self) -> int:
        """The number of ranks (ncclCommCount): ``comms[0].nranks == len(comms)``."""
        self._ready()
        return self._nranks

    @property
    def size(self) -> int:
        """The number of ranks (an alias of nranks): ``comms[0].size == comms[0].nranks``."""
        return self.nranks

    @property
    def device(self):
        """This rank's device (ncclCommCuDevice): on QLink the rank's qwengpu.Device, in this process; None when the
        transport does not say. ``comms[0].device.stats["tokens_written"]``"""
        self._ready()
        return getattr(self.world, "devices", {}).get(self._rank)

    @property
    def stats(self) -> dict:
        """This rank's counters: tokens_written, tokens_fed, launches, records, packets_sent, packets_received,
        exchanges (cumulative). ``comms[0].stats["tokens_written"]``"""
        self._alive("stats")
        return dict(self.world.stats(self._rank))

    def get_last_error(self) -> str:
        """ncclGetLastError: the message of the last error a call on this communicator raised ("" when none).

        >>> comms[0].get_last_error()          # doctest: +SKIP
        'invalid root 9 (root should be in the 0..3 range) (invalid argument, result 4)'
        """
        return self._last_error

    def get_async_error(self) -> Result:
        """ncclCommGetAsyncError: Result.SUCCESS, or the code of an error that reached this rank from another rank's
        call (e.g. a call of this rank withdrawn because another rank's call did not match it); the message is in
        :meth:`get_last_error`. Reading it clears it.

        >>> comms[0].get_async_error()         # doctest: +SKIP
        <Result.SUCCESS: 0>
        """
        err, self._async_error = self._async_error, None
        if err is None:
            return Result.SUCCESS
        self._last_error = str(err)
        return err.result

    def __repr__(self) -> str:
        if "_pending" in self.__dict__ and self._pending:
            return f"<qccl.Communicator not ready: {self._pending}>"
        return f"<qccl.Communicator rank {self._rank} of {self._nranks} on {self.transport.name}>"

    # -- lifecycle -----------------------------------------------------------------------------------------------------
    @_api
    def synchronize(self) -> None:
        """Wait until this rank's calls have finished: InvalidUsage naming the calls still waiting for other ranks'
        calls, DeadlockError if the devices cannot finish. ``comms[0].synchronize()``"""
        self._alive("synchronize")
        if self._mode == "process":
            E.flush(self)
        held = self._board.held(self._rank)
        if held:
            raise InvalidUsage(f"rank {self._rank} cannot finish: {held[0]} waits for other ranks' calls. "
                               f"{self._board.waiting()}")
        self.world.synchronize(self._rank)

    def destroy(self) -> None:
        """ncclCommDestroy: finish outstanding work, then release the rank; its calls still waiting for other ranks
        are dropped. Later calls raise InvalidUsage. Idempotent. ``comm.destroy()``"""
        if self.__dict__.get("_pending") or self.destroyed:
            return
        try:
            if not self.aborted and not self._board.held(self._rank):
                self.world.synchronize(self._rank)
        finally:
            self.destroyed = True
            self._board.leave(self._rank, "destroyed")
            self.world.destroy(self._rank)
            self.state = RankState()

    def abort(self) -> None:
        """ncclCommAbort: drop outstanding work at once and release the rank; the other ranks' calls that need it
        raise RemoteError. ``comm.abort()``"""
        if self.__dict__.get("_pending") or self.destroyed:
            return
        self.aborted = True
        self._board.leave(self._rank, "aborted")
        self.world.abort(self._rank)
        self.destroyed = True

    def _ready(self) -> None:
        pending = self.__dict__.get("_pending")
        if pending:
            raise InvalidUsage(f"this communicator is not ready: {pending}")

    def _alive(self, what: str) -> None:
        self._ready()
        if self.destroyed:
            state = "aborted" if self.aborted else "destroyed"
            raise InvalidUsage(f"{what} on a {state} communicator (rank {self._rank})")

    # -- argument checks -----------------------------------------------------------------------------------------------
    def _reducible(self, buf: Buffer, what: str, op: RedOp) -> str:
        name = str(buf.dtype)
        if op in BITWISE and name not in ("int32", "uint32"):
            raise InvalidArgument(f"{what}: op {op} takes int32 or uint32, not {name}")
        if name not in self.transport.dtypes:
            raise InvalidArgument(f"{what}: dtype {name} is not supported by transport {self.transport.name} for "
                                  f"reductions (supported: {', '.join(self.transport.dtypes)}; the copy collectives "
                                  "move any dtype)")
        check = getattr(self.transport, "check_reduction", None)     # a transport's own limits (dtype x op)
        if check is not None:
            check(name, op)
        return name

    def _root(self, root, what="root") -> int:
        r = _integer(root)
        if r is None or not 0 <= r < self._nranks:
            raise InvalidArgument(f"invalid {what} {_show(root)} ({what} should be in the 0..{self._nranks - 1} range)")
        return r

    def _algo(self, kind: str, algo, count: int = 0, dtype=None, op=None, root=None, words: int | None = None) -> str:
        """The algorithm a call runs, as its signature names it ("ring", "multicast", or "ring:4" when a tuner chose
        4-word chunks, qccl.schedule.algo_label); "auto" (the default) asks the tuners (qccl.plugins.tune), the same
        answer on every rank. ``words``: the words the schedule moves per block (the copy collectives pad any dtype
        to words)."""
        if not algo:
            algo = self.config.algo
            if algo not in ALGOS[kind] and algo != "auto":     # a config-wide default: where the kind has it
                algo = "ring"
        if algo != "auto" and algo not in ALGOS[kind]:
            raise InvalidArgument(f"{kind}: unknown algorithm {algo!r} (available: auto, {', '.join(ALGOS[kind])})")
        chunks = {a: max_chunk(self.heap, kind, a) for a in ALGOS[kind]}
        t = tune(kind, algo, ALGOS[kind], self._nranks, count, dtype, op, root, self.config.as_dict(),
                 count if words is None else words, chunks)
        return algo_label(t.algo, t.chunk, chunks[t.algo])

    @staticmethod
    def _stream(stream) -> None:
        if stream is not None and not (_integer(stream) == 0):
            raise InvalidArgument(f"stream={stream!r} is not supported (valid: None or 0, the default stream: each "
                                  "rank's calls run in order on its device's one queue)")

    def _buffers(self, kind: str, sendbuf, recvbuf, layout: str = "same", send: bool = True, recv: bool = True):
        """Wrap and check the buffers a rank passes to a collective; ``send``/``recv`` False: this rank does not use
        that one (a non-root's Broadcast input, Reduce output). Both used: one dtype, the sizes ``layout`` asks
        (same: equal; gather: recv = nranks x send; scatter: send = nranks x recv), and either disjoint or the in-place
        arrangement NCCL defines (recv's, or send's, block of this rank; none for all-to-all). Returns (send, recv)."""
        s = as_buffer(sendbuf, f"{kind} sendbuf") if send else None
        r = _writable(as_buffer(recvbuf, f"{kind} recvbuf"), f"{kind} recvbuf") if recv else None
        if s is not None and r is not None and s.dtype != r.dtype:
            raise InvalidArgument(f"{kind}: send dtype {s.dtype} and recv dtype {r.dtype} differ")
        if s is None or r is None:
            return s, r
        n = self._nranks
        if layout == "same" and s.count != r.count:
            raise InvalidArgument(f"{kind}: sendbuf has {s.count} elements, recvbuf {r.count}")
        if layout == "gather" and r.count != s.count * n:
            raise InvalidArgument(f"{kind}: recvbuf has {r.count} elements; it needs nranks x sendcount = "
                                  f"{n} x {s.count}")
        if layout == "scatter" and s.count != r.count * n:
            raise InvalidArgument(f"{kind}: sendbuf has {s.count} elements; it needs nranks x recvcount = "
                                  f"{n} x {r.count}")
        if layout == "alltoall" and (s.count != r.count or s.count % n):
            raise InvalidArgument(f"{kind}: sendbuf has {s.count} elements, recvbuf {r.count}; both need nranks x "
                                  f"count ({n} x count)")
        in_place = {"same": s.ptr == r.ptr, "gather": s.ptr == r.ptr + self._rank * s.nbytes,
                    "scatter": r.ptr == s.ptr + self._rank * r.nbytes, "alltoall": False}[layout]
        if s.overlaps(r) and not in_place:
            raise InvalidArgument(f"{kind}: send and recv buffers overlap without being in place")
        return s, r

    def _enqueue(self, sig: Sig, send: Buffer | None, recv: Buffer | None) -> None:
        E.enqueue(Call(sig, self._rank, self, send, recv))

    # -- collectives ---------------------------------------------------------------------------------------------------
    @_api
    def allreduce(self, sendbuf, recvbuf, op="sum", stream=None, algo=None) -> None:
        """ncclAllReduce: recv = op over ranks of send (int32 / uint32 on QLink). In place when send is recv.

        >>> c.allreduce(x, y, qccl.SUM)            # doctest: +SKIP
        """
        self._alive("allreduce")
        self._stream(stream)
        op = red_op(op)
        s, r = self._buffers("allreduce", sendbuf, recvbuf)
        dt = self._reducible(s, "allreduce", op)
        self._enqueue(Sig("allreduce", s.count, dt, str(op), None,
                          self._algo("allreduce", algo, s.count, s.dtype, op)), s, r)

    @_api
    def reduce(self, sendbuf, recvbuf, op="sum", root=0, stream=None, algo=None) -> None:
        """ncclReduce: the root's recv = op over ranks of send; the other ranks' recv is not touched (may be None).

        >>> c.reduce(x, y if c.rank == 0 else None, "max", root=0)          # doctest: +SKIP
        """
        self._alive("reduce")
        self._stream(stream)
        root = self._root(root)
        op = red_op(op)
        s, r = self._buffers("reduce", sendbuf, recvbuf, recv=self._rank == root)
        dt = self._reducible(s, "reduce", op)
        self._enqueue(Sig("reduce", s.count, dt, str(op), root, self._algo("reduce", algo, s.count, dt, op, root)),
                      s, r)

    @_api
    def broadcast(self, sendbuf, recvbuf, root=0, stream=None, algo=None) -> None:
        """ncclBroadcast: every rank's recv = the root's send (send may be None on other ranks). Any dtype.

        >>> c.broadcast(x if c.rank == 1 else None, y, root=1)             # doctest: +SKIP
        """
        self._alive("broadcast")
        self._stream(stream)
        root = self._root(root)
        s, r = self._buffers("broadcast", sendbuf, recvbuf, send=self._rank == root)
        self._enqueue(Sig("broadcast", r.count, str(r.dtype), None, root,
                          self._algo("broadcast", algo, r.count, r.dtype, None, root, r.as_words().count)), s, r)

    @_api
    def bcast(self, buf, root=0, stream=None, algo=None) -> None:
        """ncclBcast: in-place broadcast. ``c.bcast(x, root=0)``"""
        self.broadcast(buf, buf, root, stream, algo)

    @_api
    def allgather(self, sendbuf, recvbuf, stream=None, algo=None) -> None:
        """ncclAllGather: recv = the ranks' send buffers, rank order. In place when send is recv's own block. Any
        dtype. ``c.allgather(x, y)`` with ``y.size == c.nranks * x.size``"""
        self._alive("allgather")
        self._stream(stream)
        s, r = self._buffers("allgather", sendbuf, recvbuf, "gather")
        self._enqueue(Sig("allgather", s.count, str(s.dtype), None, None,
                          self._algo("allgather", algo, s.count, s.dtype, words=s.as_words().count)), s, r)

    @_api
    def reduce_scatter(self, sendbuf, recvbuf, op="sum", stream=None, algo=None) -> None:
        """ncclReduceScatter: rank r's recv = block r of op over ranks of send. In place when recv is send's block r.
        ``c.reduce_scatter(x, y, "sum")`` with ``x.size == c.nranks * y.size``"""
        self._alive("reduce_scatter")
        self._stream(stream)
        op = red_op(op)
        s, r = self._buffers("reduce_scatter", sendbuf, recvbuf, "scatter")
        dt = self._reducible(s, "reduce_scatter", op)
        self._enqueue(Sig("reduce_scatter", r.count, dt, str(op), None,
                          self._algo("reduce_scatter", algo, r.count, dt, op)), s, r)

    @_api
    def alltoall(self, sendbuf, recvbuf, stream=None) -> None:
        """ncclAlltoAll: block p of this rank's send goes to rank p, and block p of recv comes from rank p (grouped
        send / recv, as NCCL builds it). Any dtype; not in place. ``c.alltoall(x, y)`` with ``x.size == y.size ==
        c.nranks * count``"""
        self._alive("alltoall")
        self._stream(stream)
        s, r = self._buffers("alltoall", sendbuf, recvbuf, "alltoall")
        self._enqueue(Sig("alltoall", s.count // self._nranks, str(s.dtype)), s, r)

    @_api
    def gather(self, sendbuf, recvbuf, root=0, stream=None) -> None:
        """ncclGather: the root's recv = the ranks' send buffers in rank order (recv may be None elsewhere). Any
        dtype. ``c.gather(x, y if c.rank == 0 else None, root=0)``"""
        self._alive("gather")
        self._stream(stream)
        root = self._root(root)
        s, r = self._buffers("gather", sendbuf, recvbuf, "gather", recv=self._rank == root)
        self._enqueue(Sig("gather", s.count, str(s.dtype), None, root), s, r)

    @_api
    def scatter(self, sendbuf, recvbuf, root=0, stream=None) -> None:
        """ncclScatter: rank p's recv = block p of the root's send (send may be None elsewhere). Any dtype.
        ``c.scatter(x if c.rank == 0 else None, y, root=0)``"""
        self._alive("scatter")
        self._stream(stream)
        root = self._root(root)
        s, r = self._buffers("scatter", sendbuf, recvbuf, "scatter", send=self._rank == root)
        self._enqueue(Sig("scatter", r.count, str(r.dtype), None, root), s, r)

    @_api
    def barrier(self, stream=None) -> None:
        """Every rank's barrier returns after every rank called it (a one-word allreduce on the devices).
        ``c.barrier()``"""
        self._alive("barrier")
        self._stream(stream)
        self._enqueue(Sig("barrier"), None, None)

    @_api
    def send(self, sendbuf, peer, stream=None) -> None:
        """ncclSend: to ``peer``, which must post a matching recv (count and dtype). Any dtype.
        ``c.send(x, peer=1)``"""
        self._alive("send")
        self._stream(stream)
        peer = self._root(peer, "peer")
        s = as_buffer(sendbuf, "send buf")
        self._enqueue(Sig("send", s.count, str(s.dtype), None, peer), s, None)

    @_api
    def recv(self, recvbuf, peer, stream=None) -> None:
        """ncclRecv: from ``peer``. Any dtype. ``c.recv(y, peer=0)``"""
        self._alive("recv")
        self._stream(stream)
        peer = self._root(peer, "peer")
        r = _writable(as_buffer(recvbuf, "recv buf"), "recv buf")
        self._enqueue(Sig("recv", r.count, str(r.dtype), None, peer), None, r)


def _create_world(transport, nranks: int, ranks: list, uid, cfg: Config):
    """The transport's world for these ranks; an error that is not qccl's becomes InvalidArgument naming the config."""
    try:
        return transport.create_world(nranks, ranks, uid, cfg.as_dict())
    except QcclError:
        raise
    except Exception as e:      # noqa: BLE001  (e.g. the machine refusing backend='nope')
        raise InvalidArgument(f"transport {transport.name} cannot create a world of {nranks} ranks with this config "
                              f"(backend={cfg.backend!r}, burst={cfg.burst}): {e}") from e


def _show(value) -> str:
    """A value as the user would write it: numpy integers as plain integers."""
    n = _integer(value)
    return str(n) if n is not None else repr(value)


def _writable(buf: Buffer, what: str) -> Buffer:
    if not buf.array.flags.writeable:
        raise InvalidArgument(f"{what}: the buffer is read-only")
    return buf


def _check_size(n) -> int:
    v = _integer(n)
    if v is None or not 1 <= v <= MAX_RANKS:
        raise InvalidArgument(f"invalid number of ranks {_show(n)} (qccl on QLink supports 1..{MAX_RANKS})")
    return v
