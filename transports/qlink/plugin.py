"""qccl's QLink transport: QwenGPUs (qwengpu.Device) whose stores cross apertures, run in lockstep.

Registered with qccl through the ``qccl_transports`` entry point (pyproject.toml); qccl finds it with pluggy.

Worlds:
- ``Communicator.init_all(n)``: n devices in this process, an in-memory fabric.
- ``Communicator.init(n, rank, uid)`` in several processes: one device per process, packets over a gloo group
  (the uid carries the rendezvous address; ``python -m qccl.launch -n N script.py`` or torchrun provide it).
- ``Communicator.init(n, rank, uid)`` from several threads of one process with a uid without an address: one shared
  in-memory world; each call drives the world until its own rank's work is done.

Config keys (``config=`` of init / init_all): burst (records per exchange, default 1), backend (qwengpu backend,
default "interpreter"), backend_options (keyword arguments of that backend, e.g. {"checkpoint": DIR}), stall_windows
(deadlock detector, default 2), fabric ("memory" or "gloo").
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import qccl
from qccl.errors import DeadlockError
from qccl.plugins import LaunchTracer, comm_id
from qccl.transport import SOFT_FLOAT_DTYPES, ThreadRoster, Transport, World
from qwengpu import Device

from .aperture import Aperture, Router
from .fabric import InMemoryFabric
from .rendezvous import process_fabric
from .lockstep import Lockstep, Paused

hookimpl = qccl.hookimpl          # pytest's pattern: plugins mark hooks with the marker qccl exports

# The machine has no floating point: float reductions run qccl's soft-float kernel (qccl/kernels/fprim.cu), which
# has sum, max and min (the result bit-identical to IEEE arithmetic in NCCL's ring order); prod and avg would need a
# soft-float multiply (NCCL's float avg pre-multiplies by 1/nranks) and are refused (Transport.check_reduction).
DTYPES = ("int32", "uint32") + SOFT_FLOAT_DTYPES
# Positions of each device's token log a communicator keeps (at least; trimmed between launches): a long-lived
# communicator's memory stays flat. backend_options={"token_log": None} keeps the whole stream, for verification.
TOKEN_LOG = 1 << 16


class QLinkWorld(World):
    def __init__(self, nranks: int, ranks, uid, config: dict):
        self.nranks = nranks
        self.local_ranks = tuple(ranks)
        self.config = dict(config)
        backend = self.config.get("backend", "interpreter")
        burst = int(self.config.get("burst", 1))
        self.routers = {r: Router() for r in self.local_ranks}
        devices = {}
        for r in self.local_ranks:
            devices[r] = Device(backend=backend, **{"token_log": TOKEN_LOG, **self.config.get("backend_options", {})})
            devices[r].router = self.routers[r]
        self.devices = devices
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.threaded = False
        if len(self.local_ranks) == nranks:
            fabric = InMemoryFabric(nranks)
        else:
            fabric = process_fabric(nranks, self.local_ranks[0], burst, uid)
        self.fabric = fabric
        self.engine = Lockstep(fabric, devices, burst=burst, stall_windows=int(self.config.get("stall_windows", 2)))
        self.engine.tracer = LaunchTracer(comm_id(self), nranks, lambda r: self.devices[r].stats)

    # -- World -----------------------------------------------------------------------------------------------------
    def connect(self, rank, routes) -> None:
        for route in routes:
            self.routers[rank].add(Aperture(route.start, route.stop, tuple(route.peers), route.multicast, route.name))

    def run(self, work) -> None:
        with self.lock:
            for w in work:
                self.engine.submit(w.rank, w.ops)
            self.changed.notify_all()
            if not self.threaded:
                try:
                    self.engine.run()
                except Paused:
                    pass
                except DeadlockError as e:
                    if not self.fabric.distributed:
                        raise
                    raise _shared_deadlock(self.fabric, e) from None
                return
            mine = [w.rank for w in work]
            deadline = time.monotonic() + float(self.config.get("thread_timeout", 60))
            while True:
                try:
                    self.engine.run(wait_for=mine)
                    self.changed.notify_all()
                    return
                except Paused:
                    if not any(self.engine.pending(r) for r in mine):
                        return
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DeadlockError(f"ranks {mine} waited {self.config.get('thread_timeout', 60)} s for the "
                                            "other ranks' calls", {})
                    self.changed.wait(timeout=min(left, 0.05))

    def pending(self, rank) -> bool:
        return self.engine.pending(rank)

    def synchronize(self, rank) -> None:
        with self.lock:
            if not self.engine.pending(rank):
                return
            try:
                self.engine.run()
            except Paused:
                stalls = self.engine.stall_report({r: _status(self.engine, r) for r in self.local_ranks})
                lines = "\n  ".join(str(s) for s in stalls.values())
                raise DeadlockError(f"rank {rank} cannot finish: it waits for work no rank has queued:\n  {lines}",
                                    stalls) from None

    def gather_calls(self, rank, calls):
        if not self.fabric.distributed:
            return None
        self.fabric.live.last_call = _calls_text(calls)     # named in the peers' errors if this rank goes away
        return self.fabric.all_gather_object(calls, f"the call-signature exchange of {self.fabric.live.last_call}")

    def regroup(self, rank, index, members, entry, timeout):
        """split / shrink across processes: post this rank's ``entry`` (plain values) for communicator-creation call
        ``index`` in the world's store and read every member's; waits at most ``timeout`` s, naming who is missing."""
        import json
        live = self.fabric.live
        keys = {r: f"{live.prefix}/regroup/{index}/{r}" for r in members}
        live.store.set(keys[rank], json.dumps(entry))
        live.poll_until(lambda: live.store.check(list(keys.values())), f"communicator-creation call {index}", timeout,
                        lambda: "ranks " + ", ".join(str(r) for r in members if not live.store.check([keys[r]])))
        return {r: json.loads(v) for r, v in zip(keys, live.store.multi_get(list(keys.values())))}

    def child_id(self, index, color, token):
        """The unique id of a world split off this one: its rendezvous is this world's store, under its own prefix."""
        import torch.distributed as dist
        live = self.fabric.live
        return ChildId(token, store=dist.PrefixStore(f"{live.prefix}/regroup/{index}/color{color}", live.store))

    def stats(self, rank) -> dict:
        return self.engine.stats(rank)

    def abort(self, rank) -> None:
        live = getattr(self.fabric, "live", None)
        if live is not None:
            live.abort()        # first, without the lock: a call blocked in a wait holds it, and raises at once now
        with self.lock:
            self.engine.drop(rank)

    def destroy(self, rank) -> None:
        roster = getattr(self, "roster", None)
        if roster is not None:          # a world shared by threads: the registry forgets it once every rank left
            if roster.leave(rank):
                with _worlds_lock:
                    for key in [k for k, w in _worlds.items() if w is self]:
                        del _worlds[key]


def _status(engine, r):
    from .fabric import Status
    return Status(busy=engine.devices[r].busy, queued=len(engine.queues[r]))


_worlds: dict = {}
_worlds_lock = threading.Lock()


def _shared_deadlock(fabric, error: DeadlockError) -> DeadlockError:
    """Across processes every rank detects the deadlock at the same window; each knows its own kernel and flag names,
    so they swap their own lines and every rank reports every rank in full, as in one process."""
    mine = error.waits.get(fabric.rank)
    theirs = fabric.all_gather_object(mine, "the deadlock report")
    waits = {r: s for r, s in enumerate(theirs) if s is not None}
    head = error.message.split("\n", 1)[0]
    lines = "\n  ".join(str(waits[r]) for r in sorted(waits))
    return DeadlockError(f"{head}\n  {lines}", waits)


def _calls_text(calls) -> str:
    """Call signatures (kind, count, dtype, op, root, algo tuples, or objects that print themselves) for messages."""
    out = []
    for c in calls:
        if isinstance(c, tuple) and len(c) >= 3:
            out.append(f"{c[0]}(count={c[1]}, dtype={c[2]}" + "".join(f", {x}" for x in c[3:] if x is not None) + ")")
        else:
            out.append(str(c))
    return ", ".join(out) or "nothing"


@dataclass(frozen=True)
class ChildId:
    """A unique id whose rendezvous is a store that already exists (a split-off world's, under its parent's)."""
    token: str
    store: object = field(default=None, compare=False, repr=False)
    address: str | None = None

    def __str__(self) -> str:
        return self.token


class QLinkTransport(Transport):
    name = "qlink"
    dtypes = DTYPES
    soft_float = True

    def create_world(self, nranks, ranks, uid, config):
        ranks = tuple(ranks)
        fabric = config.get("fabric")
        if len(ranks) == nranks or nranks == 1:
            return QLinkWorld(nranks, range(nranks), uid, config)
        distributed = fabric == "gloo" or (fabric is None and (getattr(uid, "address", None) or
                                                               getattr(uid, "store", None) is not None or
                                                               _torch_distributed_ready(nranks)))
        if distributed:
            return QLinkWorld(nranks, ranks, uid, config)
        # several threads of this process, one rank each: one shared in-memory world per uid
        with _worlds_lock:
            key = (getattr(uid, "token", uid), nranks)
            world = _worlds.get(key)
            if world is None:
                world = QLinkWorld(nranks, range(nranks), uid, config)
                world.threaded = True
                world.roster = ThreadRoster(nranks)
                _worlds[key] = world
        try:
            world.roster.join(ranks, float(config.get("thread_timeout", 60)))
        except BaseException:
            with _worlds_lock:
                if not world.roster.joined and _worlds.get(key) is world:
                    del _worlds[key]
            raise
        return world


def _torch_distributed_ready(nranks: int) -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size() == nranks
    return os.environ.get("WORLD_SIZE") == str(nranks) and "MASTER_PORT" in os.environ


TRANSPORT = QLinkTransport()


@hookimpl
def qccl_transports():
    return [TRANSPORT]
