"""The threads world: one thread per rank, links that deliver packets late but in order, and a hang detector.

A rank's thread loops: deliver the packets that are due (a record boundary), run host ops while the device is idle
(word copies, then a launch), write one record while it is busy, hand the stores that left through an aperture to the
links. Nothing ties the ranks together but the packets; a spinning kernel writes spin records until its flag arrives.

Links: a packet from rank s to rank d is due at ``now + delay`` (delay drawn from the sender's seeded generator,
exponential with mean ``delay_us``), never before the previous packet of the same link (stores leave in program
order and a fence keeps them ordered, as on a GPU). Speeds: after each record a rank yields, or sleeps with a
probability drawn per rank.

Hangs: when every rank with work spins, no packet is in flight and nobody can bring more (no rank is idle waiting for
another call), nothing can ever change: run() raises DeadlockError naming each rank's kernel and flag. A watchdog
(config ``timeout``, seconds) reports the same way a run that does not end, so a livelock cannot hang a test.
"""
from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from qccl.errors import DeadlockError, InvalidUsage, UnhandledDeviceError
from qccl.plugins import LaunchTracer, comm_id
from qccl.transport import Launch, Read, Stall, World, Write, options
from qwengpu import Device

from qccl_transports.qlink.aperture import Aperture, Router

IDLE, RUN, SPIN = "idle", "run", "spin"


class _Rank:
    """A rank's device, queue, inbox and counters (touched by its own thread; the rest under the world's lock)."""

    def __init__(self, rank: int, seed: int):
        self.rank = rank
        self.router = Router()
        self.device = Device(backend="interpreter", router=self.router)
        self.queue: deque = deque()
        self.rng = np.random.default_rng(seed)
        self.pause = float(self.rng.uniform(0.0, 0.5))     # this rank's chance of sleeping after a record
        self.state = IDLE
        self.last = None            # the last record written
        self.note = ""
        self.sent = self.received = 0
        self.error: BaseException | None = None
        self.drop = False           # set by abort / a reported hang: the thread aborts its launch itself
        self.kernels: dict = {}


class ThreadsWorld(World):
    def __init__(self, nranks: int, config: dict):
        self.nranks = nranks
        self.local_ranks = tuple(range(nranks))
        self.config = dict(config)
        opts = options(config, {"seed": 0, "delay_us": 200.0, "timeout": 60.0}, "threads")
        seed = int(opts["seed"])
        self.delay = float(opts["delay_us"]) * 1e-6
        self.timeout = float(opts["timeout"])
        self.ranks = {r: _Rank(r, seed * 1009 + r) for r in range(nranks)}
        self.links: dict = {(s, d): deque() for s in range(nranks) for d in range(nranks) if s != d}
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.closed = False
        self.threaded = False       # ranks driven by several threads of the caller: each waits for its own
        self.tracer = LaunchTracer(comm_id(self), nranks, lambda r: self.ranks[r].device.stats)
        self.threads = [threading.Thread(target=self._loop, args=(r,), name=f"qccl-threads-rank{r}", daemon=True)
                        for r in range(nranks)]
        for t in self.threads:
            t.start()

    # -- World -------------------------------------------------------------------------------------------------------
    def connect(self, rank, routes) -> None:
        for route in routes:
            self.ranks[rank].router.add(Aperture(route.start, route.stop, tuple(route.peers), route.multicast,
                                                 route.name))

    def run(self, work) -> None:
        mine = [w.rank for w in work]
        with self.lock:
            for w in work:
                self.ranks[w.rank].queue.extend(w.ops)
                if w.ops:
                    self.ranks[w.rank].state = RUN
            self.changed.notify_all()
            deadline = time.monotonic() + self.timeout
            while True:
                self._raise_errors()
                if not any(self._pending(r) for r in mine):
                    return
                if self._quiet():
                    if any(self.ranks[r].state == IDLE for r in self.ranks):
                        if not self.threaded:
                            return      # a rank waits for another call: that call completes this work
                    else:
                        self._hang("deadlock: every rank spins on a flag and no packet is in flight")
                left = deadline - time.monotonic()
                if left <= 0:
                    self._hang(f"timeout: the epoch did not end within {self.timeout:g} s")
                self.changed.wait(timeout=min(left, 0.05))

    def pending(self, rank) -> bool:
        with self.lock:
            return self._pending(rank)

    def synchronize(self, rank) -> None:
        with self.lock:
            deadline = time.monotonic() + self.timeout
            while self._pending(rank):
                self._raise_errors()
                if self._quiet():
                    self._hang(f"rank {rank} cannot finish: its kernels spin and no packet is in flight")
                if time.monotonic() > deadline:
                    self._hang(f"timeout: rank {rank} did not finish within {self.timeout:g} s")
                self.changed.wait(timeout=0.05)

    def stats(self, rank) -> dict:
        k = self.ranks[rank]
        d = k.device.stats
        return {"tokens_written": d["tokens_written"], "tokens_fed": d["tokens_fed"], "launches": d["launches"],
                "records": d["records"], "packets_sent": k.sent, "packets_received": k.received, "exchanges": 0}

    def abort(self, rank) -> None:
        with self.lock:
            self._drop(rank)
            self.changed.notify_all()

    def destroy(self, rank) -> None:
        with self.lock:
            self._drop(rank)
            if all(not self._pending(r) for r in self.ranks):
                self.closed = True
            self.changed.notify_all()
        roster = getattr(self, "roster", None)      # a world shared by threads: forgotten once every rank left
        if roster is not None and roster.leave(rank):
            self.forget()

    # -- the rank threads ----------------------------------------------------------------------------------------------
    def _loop(self, r: int) -> None:
        k = self.ranks[r]
        while True:
            with self.lock:
                if k.drop:
                    k.drop = False
                    if k.device.busy:
                        k.device.abort()
                    k.state = IDLE
                while not self.closed and not k.queue and not k.device.busy and not self._due(r):
                    if k.state != IDLE:         # tell waiters once: a notify on every wake-up would wake the
                        k.state = IDLE          # other idle threads, who notify back (a storm that burns the CPU)
                        self.changed.notify_all()
                    self.changed.wait(timeout=self._next_due(r))
                if self.closed:
                    return
                packets = self._take_due(r)
                if packets:
                    k.state = RUN           # a delivered packet may release a spin: not quiet until the next record
            try:
                for tokens in packets:
                    k.device.deliver(tokens)
                self._work(r)
            except BaseException as e:      # noqa: BLE001  (reported by run() in the caller's thread)
                with self.lock:
                    k.error = e
                    k.queue.clear()
                    if k.device.busy:
                        k.device.abort()
                    k.state = IDLE
                    self.changed.notify_all()
            if k.rng.random() < k.pause:
                time.sleep(float(k.rng.exponential(self.delay / 2)))
            else:
                time.sleep(0)

    def _work(self, r: int) -> None:
        """Host ops until a launch runs, then one record; its packets go to the links."""
        k = self.ranks[r]
        dev = k.device
        while not dev.busy and k.queue:
            op = k.queue.popleft()
            if isinstance(op, Write):
                dev.write(op.address, op.source.words[op.start:op.start + op.count])
            elif isinstance(op, Read):
                op.dest.words[op.start:op.start + op.count] = dev.read(op.address, op.count)
            elif isinstance(op, Launch):
                key = (str(op.kernel.source), op.kernel.name)
                if key not in k.kernels:
                    k.kernels[key] = dev.load_kernel(*key)
                dev.start(k.kernels[key], op.threads, list(op.args))
                k.note = op.note
                self.tracer.begin(r, op)
            else:
                raise TypeError(f"unknown host op {op!r}")
        if not dev.busy:
            with self.lock:
                k.state = IDLE if not k.queue else RUN
                self.changed.notify_all()
            return
        rec = dev.step()
        if not dev.busy:
            self.tracer.end(r)
        spinning = rec.wait is not None and rec.next == rec.block
        now = time.monotonic()
        with self.lock:
            k.last = rec
            for p in dev.take_packets():
                for peer in p.aperture.peers:
                    link = self.links[(r, peer)]
                    due = now + float(k.rng.exponential(self.delay)) if self.delay > 0 else now
                    if link:
                        due = max(due, link[-1][0])          # in order on a link
                    link.append((due, tuple(p.tokens)))
                    k.sent += 1
            k.state = SPIN if spinning else (RUN if dev.busy or k.queue else IDLE)
            self.changed.notify_all()

    # -- under the lock ------------------------------------------------------------------------------------------------
    def _due(self, r: int) -> bool:
        now = time.monotonic()
        return any(link and link[0][0] <= now for (s, d), link in self.links.items() if d == r)

    def _next_due(self, r: int) -> float:
        """Seconds until the next packet for rank r is due (new work wakes the thread through the condition)."""
        dues = [link[0][0] for (s, d), link in self.links.items() if d == r and link]
        return max(0.0, min([1.0] + [t - time.monotonic() for t in dues]))

    def _take_due(self, r: int) -> list:
        now, out = time.monotonic(), []
        for s in range(self.nranks):
            link = self.links.get((s, r))
            while link and link[0][0] <= now:
                out.append(link.popleft()[1])
                self.ranks[r].received += 1
        return out

    def _in_flight(self) -> bool:
        return any(self.links.values())

    def _pending(self, r: int) -> bool:
        k = self.ranks[r]
        return bool(k.queue) or k.device.busy or k.state != IDLE

    def _quiet(self) -> bool:
        """Nothing can change until another call: every rank idle or spinning, no packet in flight."""
        return not self._in_flight() and all(k.state in (IDLE, SPIN) for k in self.ranks.values())

    def _raise_errors(self) -> None:
        for k in self.ranks.values():
            if k.error is not None:
                e, k.error = k.error, None
                raise UnhandledDeviceError(f"rank {k.rank}: {e}") from e

    def stall_report(self) -> dict:
        out = {}
        for r, k in sorted(self.ranks.items()):
            rec = k.last
            if k.device.busy and rec is not None and rec.wait is not None:
                w = rec.wait
                ap = k.router.route(w.address)
                out[r] = Stall(r, rec.kernel, w.address, w.value, w.expected, w.op, k.note,
                               ap.name if ap is not None else "")
            elif k.device.busy:
                out[r] = Stall(r, rec.kernel if rec else "?", None, None, None, "?", k.note)
            else:
                out[r] = Stall(r, note="no work queued" if not k.queue else f"{len(k.queue)} host ops queued")
        return out

    def _hang(self, why: str) -> None:
        stalls = self.stall_report()
        for r in self.ranks:
            self._drop(r)
        self.changed.notify_all()
        lines = "\n  ".join(str(stalls[r]) for r in sorted(stalls))
        raise DeadlockError(f"{why}:\n  {lines}", stalls)

    def _drop(self, r: int) -> None:
        """Forget a rank's queued ops and its launch in flight (abort; after a reported hang). Its thread may be
        between records: the device is aborted only here, under the lock, and the thread re-checks after it."""
        k = self.ranks[r]
        k.queue.clear()
        k.drop = True
        for (s, d), link in self.links.items():
            if d == r:
                link.clear()


def check_single_process(nranks: int, ranks) -> None:
    if len(tuple(ranks)) != nranks:
        raise InvalidUsage(f"the threads transport runs every rank of a communicator in one process (init_all); "
                           f"this process asked for ranks {tuple(ranks)} of {nranks}")
