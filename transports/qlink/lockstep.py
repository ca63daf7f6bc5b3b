"""Lockstep: the devices of a QLink world advance together, one record per tick (or ``burst`` records per exchange).

A window, for every local rank:
  1. the packets received in the last exchange are fed in (the device is at a record boundary);
  2. up to ``burst`` records: an idle device first runs its queued host ops (word copies, the next launch); a busy one
     writes one record; the stores that left through an aperture are collected;
  3. the packets and the statuses are exchanged (fabric.py).
The schedule depends only on what the devices write, so it is deterministic; burst > 1 gives the same results with
fewer exchanges (the spinning ranks write more records while they wait).

Deadlock detector: a window in which no rank did anything but spin and no packet moved leaves every device exactly
where it was; after ``stall_windows`` such windows no rank can make progress, and the detector names, per rank, the
kernel, the flag it spins on, its value and the value awaited (from the device's spin-loop records).
"""
from __future__ import annotations

import os
from collections import deque

from qccl.errors import DeadlockError, RemoteError, UnhandledDeviceError
from qccl.transport import Launch, Read, Stall, Write
from qwengpu.circuit.batched import run_windows

from .fabric import Fabric, Status


_LOADED: dict = {}


class Paused(Exception):
    """The local work waits for another call (a rank of this process has nothing queued yet)."""


class Lockstep:
    def __init__(self, fabric: Fabric, devices: dict, burst: int = 1, stall_windows: int = 2,
                 max_windows: int = 2_000_000, can_pause: bool = True):
        if burst < 1:
            raise ValueError(f"burst={burst}: at least one record per exchange")
        self.fabric, self.devices, self.burst = fabric, devices, burst
        self.stall_windows, self.max_windows, self.can_pause = stall_windows, max_windows, can_pause
        self.queues = {r: deque() for r in devices}
        self.inbox = {r: [] for r in devices}
        self.packets_sent = {r: 0 for r in devices}
        self.packets_received = {r: 0 for r in devices}
        self.last = {r: None for r in devices}          # the last record and the launch note, per rank
        self.notes = {r: "" for r in devices}
        self.windows = 0
        self.aborted: set[int] = set()
        self.tracer = None      # qccl.plugins.LaunchTracer: profiler launch events (set by the world)

    # -- queues --------------------------------------------------------------------------------------------------
    def submit(self, rank: int, ops) -> None:
        self.queues[rank].extend(ops)

    def pending(self, rank: int) -> bool:
        return bool(self.queues[rank]) or self.devices[rank].busy or bool(self.inbox[rank])

    def drop(self, rank: int) -> None:
        """Abort: forget a rank's queued ops and its launch in flight."""
        self.queues[rank].clear()
        dev = self.devices[rank]
        if dev.busy:
            dev.abort()
        self.aborted.add(rank)

    def _kernel(self, rank: int, kernel):
        """Load a kernel once per process: the loaded kernel caches its lowering per (arguments, threads), and ranks
        that run the same step share it (a device keeps no state in a loaded kernel)."""
        path = str(kernel.source)
        try:
            stamp = os.stat(path).st_mtime_ns
        except OSError:
            stamp = None
        key = (path, kernel.name, stamp)
        loaded = _LOADED.get(key)
        if loaded is None:
            loaded = _LOADED[key] = self.devices[rank].load_kernel(path, kernel.name)
        return loaded

    def _host_ops(self, rank: int) -> bool:
        """Run queued host ops until a launch starts or the queue is empty; True if any ran."""
        dev, q, ran = self.devices[rank], self.queues[rank], False
        while q and not dev.busy:
            op = q.popleft()
            ran = True
            if isinstance(op, Write):
                dev.write(op.address, op.source.words[op.start:op.start + op.count])
            elif isinstance(op, Read):
                op.dest.words[op.start:op.start + op.count] = dev.read(op.address, op.count)
            elif isinstance(op, Launch):
                dev.start(self._kernel(rank, op.kernel), op.threads, list(op.args))
                self.notes[rank] = op.note
                if self.tracer is not None:
                    self.tracer.begin(rank, op)
            else:
                raise TypeError(f"unknown host op {op!r}")
        return ran

    # -- one window ------------------------------------------------------------------------------------------------
    def _window(self, rank: int, packets: list) -> Status:
        dev = self.devices[rank]
        progress = False
        for tokens in self.inbox[rank]:
            dev.deliver(tokens)
            self.packets_received[rank] += 1
            progress = True
        self.inbox[rank] = []
        for _ in range(self.burst):
            if not dev.busy:
                progress |= self._host_ops(rank)
                if not dev.busy:
                    break
            rec = dev.step()
            self.last[rank] = rec
            if self.tracer is not None and not dev.busy:
                self.tracer.end(rank)
            if not (rec.wait is not None and rec.next == rec.block):
                progress = True
            for p in dev.take_packets():
                dests = tuple(p.aperture.peers)
                packets.append((rank, dests, tuple(p.tokens)))
                self.packets_sent[rank] += len(dests)
        if not dev.busy and self.queues[rank]:
            progress |= self._host_ops(rank)        # word copies after the last launch need no record
        w = self.last[rank].wait if dev.busy and self.last[rank] is not None else None
        spinning = w is not None and self.last[rank].next == self.last[rank].block
        return Status(busy=dev.busy, queued=len(self.queues[rank]), progress=progress,
                      wait_address=w.address if spinning else -1,
                      wait_value=w.value if spinning and w.value is not None else -1,
                      wait_expected=w.expected if spinning else 0)

    def stall_report(self, statuses: dict) -> dict:
        stalls = {}
        for r, st in sorted(statuses.items()):
            if r in self.devices and self.devices[r].busy and self.last[r] is not None and self.last[r].wait:
                w = self.last[r].wait
                router = self.devices[r].router
                ap = router.route(w.address) if router is not None else None
                flag = f"{ap.name}" if ap is not None and ap.name else ""
                stalls[r] = Stall(r, self.last[r].kernel, w.address, w.value, w.expected, w.op, self.notes[r], flag)
            elif st.busy:
                stalls[r] = Stall(r, "?", st.wait_address, st.wait_value, st.wait_expected, "?", "")
            else:
                stalls[r] = Stall(r, note="aborted" if r in self.aborted else "no work queued")
        return stalls

    def run(self, wait_for=None) -> None:
        """Windows until every rank is idle with nothing queued and no packet in flight.

        A stall with a local rank that has nothing queued raises Paused when pausing is allowed (another call may
        bring its work); any other stall raises DeadlockError."""
        stalled = 0
        start = self.windows
        while True:
            packets: list = []
            status: dict = {}
            error = None
            live = [r for r in self.fabric.local_ranks if r not in self.aborted]
            sent = {r: [] for r in live}
            # One call for all local ranks: on a shared model backend their windows run together, each token
            # position one batched forward (qwengpu.circuit.batched); packets are then gathered in rank order.
            outcomes = run_windows(self.devices, live, lambda r: self._window(r, sent[r]))
            for r in self.fabric.local_ranks:
                if r in self.aborted:
                    status[r] = Status()
                    continue
                if isinstance(outcomes[r], Exception):      # a machine error: every rank learns of it at the exchange
                    error = outcomes[r]
                    status[r] = Status(error=True)
                else:
                    status[r] = outcomes[r]
                packets.extend(sent[r])
            incoming, statuses, moved = self.fabric.exchange(packets, status)
            self.windows += 1
            for r, toks in incoming.items():
                if r not in self.aborted:
                    self.inbox[r].extend(toks)
            if error is not None:
                raise UnhandledDeviceError(f"rank {next(r for r, s in status.items() if s.error)}: {error}") from error
            if any(s.error for s in statuses.values()):
                bad = [r for r, s in statuses.items() if s.error]
                raise RemoteError(f"rank {bad[0]} failed on its device; this epoch is abandoned")
            moving = moved > 0 or any(self.inbox.values())
            if not moving and all(not s.busy and s.queued == 0 for s in statuses.values()) and \
                    not any(self.inbox[r] for r in self.fabric.local_ranks):
                return
            if wait_for is not None and not any(self.pending(r) for r in wait_for) and not self.fabric.distributed:
                return
            if any(s.progress for s in statuses.values()) or moved:
                stalled = 0
            else:
                stalled += 1
            if stalled >= self.stall_windows:
                if self.aborted:
                    stalls = self.stall_report(statuses)
                    raise RemoteError(f"rank {', '.join(map(str, sorted(self.aborted)))} aborted; the others wait "
                                      "for it: " + "; ".join(str(stalls[r]) for r in sorted(stalls)))
                idle = [r for r, s in statuses.items() if not s.busy and s.queued == 0]
                if idle and self.can_pause and not self.fabric.distributed:
                    raise Paused()
                stalls = self.stall_report(statuses)
                lines = "\n  ".join(str(stalls[r]) for r in sorted(stalls))
                raise DeadlockError(f"deadlock: no rank can make progress after {self.windows - start} windows:\n  "
                                    f"{lines}", stalls)
            if self.windows - start > self.max_windows:
                stalls = self.stall_report(statuses)
                raise DeadlockError(f"no end after {self.max_windows} windows (a livelock?)", stalls)

    def stats(self, rank: int) -> dict:
        d = self.devices[rank].stats
        return {"tokens_written": d["tokens_written"], "tokens_fed": d["tokens_fed"], "launches": d["launches"],
                "records": d["records"], "packets_sent": self.packets_sent[rank],
                "packets_received": self.packets_received[rank], "exchanges": self.fabric.exchanges}
