"""What qccl asks of a transport: the contract between the communicator and its plugins.

qccl turns every call into a *host schedule* per rank: a list of the three things a host may do to a device (copy
words in, copy words out, launch a kernel). A transport owns the devices and the links between them; it runs the
schedules and moves the stores that cross its links. It never looks at a payload.

A transport plugin (see :mod:`qccl.hookspecs`) returns a :class:`Transport`; ``create_world`` gives the
:class:`World` of one communicator (all its ranks in this process, or this process's rank of several).
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .buffers import Buffer
from .errors import InvalidArgument, SystemError
from .heap import Route

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"


@dataclass(frozen=True)
class Kernel:
    """A CUDA kernel of qccl: its source file (with the checked-in PTX beside it) and entry point."""
    source: Path
    name: str

    def __str__(self) -> str:
        return self.name


PRIM = Kernel(KERNEL_DIR / "prim.cu", "prim")
MCAST = Kernel(KERNEL_DIR / "mcast.cu", "mcast")
# The soft-float combine of a reduce step (transports whose devices have no floating point: QLink); its first 14
# arguments follow prim's conventions (flag waits; it posts nothing: prim's POST launch does).
FPRIM = Kernel(KERNEL_DIR / "fprim.cu", "fprim")

# What each parameter of qccl's kernels is, for transports that map word addresses onto their own memory (the CuPy
# transport: flags are int words, data are elements of the call's dtype; loads read local memory, stores follow the
# heap's routes). "value": an integer argument. Must match the signatures in prim.cu and mcast.cu
# (tests/test_cupy_transport.py parses the sources and checks).
PARAMS = {
    "prim": ("value", "value", "flag_load", "value", "flag_load", "value", "data_load", "data_load", "data_store",
             "data_store", "flag_store", "value", "flag_store", "value", "value"),
    "mcast": ("value", "data_load", "data_store", "flag_store", "value", "flag_load", "value", "value"),
}

# prim's and mcast's mode bits (as in the .cu files; qccl.schedule builds launches with them)
PRIM_RECV, PRIM_SEND, PRIM_NOWAIT, PRIM_POST = 1, 2, 1024, 2048
MC_PRE_WAIT, MC_STORE, MC_POST, MC_WAIT = 1, 2, 4, 8


@dataclass(frozen=True)
class FlagTraffic:
    """The flags a launch of qccl's kernels touches: ``pre`` (address, value) pairs it waits for (word >= value)
    before its work, ``post`` those it waits for at its end, ``stores`` the (address, value) flags it writes (after
    its data stores and a fence). A transport or a cost model needs nothing else to know who waits for whom.

    >>> flag_traffic(Launch(PRIM, 1, (2048 | 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 17, 3, 0, 0, 4))).stores
    ((17, 3),)
    """
    pre: tuple = ()
    post: tuple = ()
    stores: tuple = ()


def flag_traffic(launch: "Launch") -> FlagTraffic:
    """Read a launch's flag waits and posts from its arguments (prim.cu's and mcast.cu's conventions)."""
    a = launch.args
    pre, post, stores = [], [], []
    if launch.kernel.name in ("prim", "fprim"):
        mode, rtail, rwait, rhead, swait, stail, spost, shead, rpost = (a[0], a[2], a[3], a[4], a[5], a[10], a[11],
                                                                         a[12], a[13])
        if not mode & PRIM_POST and not mode & PRIM_NOWAIT:
            if mode & PRIM_RECV:
                pre.append((rtail, rwait))
            if mode & PRIM_SEND and swait > 0:
                pre.append((rhead, swait))
        if mode & PRIM_SEND and spost > 0:
            stores.append((stail, spost))
        if mode & PRIM_RECV and rpost > 0:
            stores.append((shead, rpost))
    elif launch.kernel.name == "mcast":
        mode, flag, seq, flags, mask, wait = a[0], a[3], a[4], a[5], a[6], a[7]
        waits = [(flags + b, wait) for b in range(8) if mask >> b & 1]
        if mode & MC_PRE_WAIT:
            pre += waits
        if mode & MC_WAIT:
            post += waits
        if mode & MC_POST:
            stores.append((flag, seq))
    else:
        raise ValueError(f"flag_traffic: {launch.kernel.name} is not one of qccl's kernels (prim, mcast)")
    return FlagTraffic(tuple(pre), tuple(post), tuple(stores))


@dataclass(frozen=True)
class Write:
    """Host -> device: words ``source.words[start:start+count]`` to ``address`` (read when the op runs)."""
    address: int
    source: Buffer
    start: int
    count: int


@dataclass(frozen=True)
class Read:
    """Device -> host: ``count`` words at ``address`` into ``dest.words[start:start+count]``."""
    address: int
    dest: Buffer
    start: int
    count: int


@dataclass(frozen=True)
class Launch:
    kernel: Kernel
    threads: int
    args: tuple[int, ...]
    note: str = ""


HostOp = Write | Read | Launch


@dataclass
class Work:
    """One rank's part of an epoch: its host ops and, for cross-rank checks, a signature of the calls they came from."""
    rank: int
    ops: list = field(default_factory=list)
    calls: list = field(default_factory=list)


@dataclass(frozen=True)
class Stall:
    """Why a rank could not progress: the kernel and the flag it spins on (None when the rank is idle)."""
    rank: int
    kernel: str | None = None
    address: int | None = None
    value: int | None = None
    expected: int | None = None
    op: str | None = None
    note: str = ""
    flag: str = ""          # what the address is (e.g. ring.head), where the transport can tell

    def __str__(self) -> str:
        if self.kernel is None:
            return f"rank {self.rank}: idle{' (' + self.note + ')' if self.note else ''}"
        what = f" ({self.flag})" if self.flag else ""
        cond = {"lt_s": ">=", "lt_u": ">=", "ne": "==", "eq": "!="}.get(self.op, f"[{self.op}]")
        return (f"rank {self.rank}: kernel {self.kernel} spins on address {self.address}{what}: value "
                f"{'unknown' if self.value is None else self.value}, "
                f"waits for {cond} {self.expected}{' during ' + self.note if self.note else ''}")


class World(ABC):
    """The ranks of one communicator that this process drives, and their links."""
    nranks: int
    local_ranks: tuple[int, ...]

    @abstractmethod
    def connect(self, rank: int, routes: Sequence[Route]) -> None:
        """Install the routes of a rank's heap (stores into them leave for peers)."""

    @abstractmethod
    def run(self, work: Sequence[Work]) -> None:
        """Enqueue each local rank's host ops and drive the devices until the epoch's work is done.

        Raises qccl.DeadlockError naming every rank's stall when no rank can make progress. In a single process a rank
        may be left waiting for work another call will bring (the call returns; a later call completes it)."""

    @abstractmethod
    def stats(self, rank: int) -> dict:
        """tokens_written, launches, records, packets_sent, packets_received (and what else the transport counts)."""

    def pending(self, rank: int) -> bool:
        """True while a rank still has host ops or a launch in flight."""
        return False

    def synchronize(self, rank: int) -> None:
        """Finish a rank's outstanding work or raise DeadlockError."""

    def gather_calls(self, rank: int, calls: list) -> list | None:
        """Across processes: every rank's call signatures for this epoch (None where the world cannot tell)."""
        return None

    def abort(self, rank: int) -> None:
        """Drop a rank's outstanding work."""

    def destroy(self, rank: int) -> None:
        """Release a rank."""


SOFT_FLOAT_DTYPES = ("float32", "bfloat16", "float16")     # what qccl/kernels/fprim.cu reduces
SOFT_FLOAT_OPS = ("sum", "max", "min")


class Transport(ABC):
    """A transport plugin: a name, the dtypes it moves, and worlds."""
    name: str = ""
    dtypes: tuple[str, ...] = ()
    soft_float: bool = False    # its devices have no floating point: float reductions run qccl's fprim kernel

    def check_reduction(self, dtype: str, op) -> None:
        """Raise InvalidArgument when this transport cannot reduce ``dtype`` (a name in ``dtypes``) with ``op`` (a
        RedOp), before anything of the call moves. The default takes every op, but for a soft-float transport's
        floats: fprim has sum, max and min."""
        if self.soft_float and dtype in SOFT_FLOAT_DTYPES and str(op) not in SOFT_FLOAT_OPS:
            raise InvalidArgument(f"op {op} on {dtype}: the {self.label} transport reduces floats "
                                  f"({', '.join(SOFT_FLOAT_DTYPES)}) with {', '.join(SOFT_FLOAT_OPS)} only (software "
                                  "floating point on the QwenGPUs); int32 / uint32 take every op")

    @property
    def label(self) -> str:
        """The name as messages print it."""
        return {"qlink": "QLink"}.get(self.name, self.name)

    @abstractmethod
    def create_world(self, nranks: int, ranks: Sequence[int], uid, config: dict) -> World:
        """A world of ``nranks`` in which this process drives ``ranks`` (all of them for init_all)."""


def options(config: dict, defaults: dict, transport: str) -> dict:
    """A transport's own keys from ``config["transport_options"]`` over ``defaults``; a key it does not define is
    InvalidArgument naming the ones it does.

    >>> options({"transport_options": {"seed": 3}}, {"seed": 0, "timeout": 60.0}, "threads")
    {'seed': 3, 'timeout': 60.0}
    """
    given = dict(config.get("transport_options") or {})
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise InvalidArgument(f"transport_options {unknown[0]!r} is not a key of the {transport} transport "
                              f"(its keys: {', '.join(sorted(defaults))})")
    return {**defaults, **given}


class ThreadRoster:
    """The ranks of a world shared by the threads of one process (one rank per thread), for its init: like
    ncclCommInitRank, a thread's init returns once every rank has joined, and a world that never assembles is an
    error within ``timeout`` seconds naming the ranks that never came (a lone ``init(2, 0, uid)`` without a
    launcher would otherwise fail only at its first call).

    >>> roster = ThreadRoster(2); roster.join([0, 1], timeout=1.0); roster.assembled
    True
    """

    def __init__(self, nranks: int):
        self.nranks = nranks
        self.joined: set[int] = set()
        self.assembled = False
        self._changed = threading.Condition()

    def join(self, ranks: Sequence[int], timeout: float) -> None:
        """Add ``ranks`` and wait for the others; on timeout take them out again and raise SystemError."""
        with self._changed:
            self.joined.update(ranks)
            if len(self.joined) == self.nranks:
                self.assembled = True
                self._changed.notify_all()
            end = time.monotonic() + timeout
            while not self.assembled:
                left = end - time.monotonic()
                if left <= 0:
                    self.joined.difference_update(ranks)
                    missing = sorted(set(range(self.nranks)) - self.joined - set(ranks))
                    names = ", ".join(map(str, missing))
                    raise SystemError(f"rank {', '.join(map(str, ranks))} waited {timeout:g} s (thread_timeout) at "
                                      f"init of a {self.nranks}-rank communicator for rank(s) {names}, which never "
                                      "called init with this unique id in this process: start one thread per rank, "
                                      "use Communicator.init_all, or start one process per rank with qccl.launch or "
                                      "torchrun")
                self._changed.wait(left)

    def leave(self, rank: int) -> bool:
        """A rank was destroyed; True once every rank left (the world can be forgotten)."""
        with self._changed:
            self.joined.discard(rank)
            return not self.joined
