"""Transports are plugins: qlink comes through its entry point; a second, minimal transport written here (outside
qccl) is registered on the plugin manager and runs collectives. It wraps qwengpu Devices differently: no lockstep,
each device runs until it spins and its stores are fed to the peer at once (an asynchronous reference)."""
from __future__ import annotations

from collections import deque
from importlib.metadata import entry_points

import numpy as np
import pytest

import qccl
from qccl_bench.harness import run
from qccl.transport import Launch, Read, Stall, Transport, World, Write
from qwengpu import Device

hookimpl = qccl.hookimpl


class _Routes:
    """The simplest router: address -> the route qccl gave (it has .peers and .multicast, all a device asks)."""

    def __init__(self):
        self.table = {}

    def route(self, address):
        return self.table.get(address)


class EagerWorld(World):
    def __init__(self, nranks):
        self.nranks, self.local_ranks = nranks, tuple(range(nranks))
        self.devices = {r: Device() for r in range(nranks)}
        self.routes = {r: _Routes() for r in range(nranks)}
        for r, d in self.devices.items():
            d.router = self.routes[r]
        self.queues = {r: deque() for r in range(nranks)}
        self.kernels = {}
        self.sent = {r: 0 for r in range(nranks)}
        self.received = {r: 0 for r in range(nranks)}

    def connect(self, rank, routes):
        for route in routes:
            for a in range(route.start, route.stop):
                self.routes[rank].table[a] = route

    def _advance(self, r) -> bool:
        """Run rank r until it has nothing to do or spins; True if it did anything but spin."""
        dev, q, moved = self.devices[r], self.queues[r], False
        for _ in range(10_000):
            if not dev.busy:
                if not q:
                    return moved
                op = q.popleft()
                moved = True
                if isinstance(op, Write):
                    dev.write(op.address, op.source.words[op.start:op.start + op.count])
                elif isinstance(op, Read):
                    op.dest.words[op.start:op.start + op.count] = dev.read(op.address, op.count)
                else:
                    key = (str(op.kernel.source), op.kernel.name)
                    if key not in self.kernels:
                        self.kernels[key] = dev.load_kernel(*key)
                    dev.start(self.kernels[key], op.threads, list(op.args))
                continue
            rec = dev.step()
            for p in dev.take_packets():
                for peer in p.aperture.peers:
                    self.devices[peer].deliver(p.tokens)        # the peer is at a record boundary: it is not running
                    self.sent[r] += 1
                    self.received[peer] += 1
                moved = True
            if rec.wait is not None and rec.next == rec.block:
                return moved
            moved = True
        return moved

    def run(self, work):
        for w in work:
            self.queues[w.rank].extend(w.ops)
        while any(self.queues[r] or self.devices[r].busy for r in self.local_ranks):
            if not any([self._advance(r) for r in self.local_ranks]):
                if any(not self.queues[r] and not self.devices[r].busy for r in self.local_ranks):
                    return       # waits for another call
                raise qccl.DeadlockError("eager: every rank spins", {r: Stall(r, "?") for r in self.local_ranks})

    def stats(self, rank):
        s = dict(self.devices[rank].stats)
        s.update(packets_sent=self.sent[rank], packets_received=self.received[rank])
        return s


class EagerTransport(Transport):
    name = "eager"
    dtypes = ("int32", "uint32")

    def create_world(self, nranks, ranks, uid, config):
        return EagerWorld(nranks)


class EagerPlugin:
    @hookimpl
    def qccl_transports(self):
        return [EagerTransport()]


@pytest.fixture
def eager():
    pm = qccl.plugin_manager()
    plugin = EagerPlugin()
    pm.register(plugin, name="eager-test")
    yield
    pm.unregister(plugin)


def test_qlink_comes_from_its_entry_point():
    eps = entry_points(group="qccl_transports")
    assert "qlink" in [e.name for e in eps]
    assert qccl.get_transport("qlink").name == "qlink"
    assert qccl.get_transport("qlink").dtypes == ("int32", "uint32", "float32", "bfloat16", "float16")


def test_a_second_transport_registered_from_outside(eager):
    assert {"qlink", "eager"} <= set(qccl.transports())
    for kind, op in (("allreduce", "sum"), ("allgather", None), ("reduce_scatter", "max"), ("sendrecv", None),
                     ("broadcast", None)):
        comms = qccl.Communicator.init_all(3, transport="eager")
        o = run(3, kind, 7, op or "sum", root=1, seed=4, comms=comms)
        assert o.ok, kind
        assert all(t > 0 for t in o.tokens), "the numbers came out of the devices"
    assert qccl.Communicator.init_all(2, transport="eager")[0].transport.name == "eager"


def test_selection_by_name_after_unregistering(eager):
    pm = qccl.plugin_manager()
    plugin = pm.get_plugin("eager-test")
    pm.unregister(plugin)
    try:
        with pytest.raises(qccl.InvalidArgument, match="unknown transport 'eager'"):
            qccl.Communicator.init_all(2, transport="eager")
    finally:
        pm.register(plugin, name="eager-test")
