"""The threads transport as a qccl plugin (entry point ``threads`` in the ``qccl_transports`` group).

    comms = qccl.Communicator.init_all(4, transport="threads", config={"transport_options": {"seed": 3, "delay_us": 200}})

Its own keys, in ``config={"transport_options": {...}}``: seed (timing: delays and speeds, default 0), delay_us (mean packet delay, default 200), timeout (seconds
before a run that does not end is reported with every rank's flag, default 60). Several threads of one process may
each init one rank with the same uid; ranks in other processes are refused (use qlink for that).
"""
from __future__ import annotations

import threading

import qccl
from qccl.transport import SOFT_FLOAT_DTYPES, ThreadRoster, Transport

from .world import ThreadsWorld, check_single_process

hookimpl = qccl.hookimpl

_worlds: dict = {}
_lock = threading.Lock()


class ThreadsTransport(Transport):
    name = "threads"
    dtypes = ("int32", "uint32") + SOFT_FLOAT_DTYPES     # the same kernels as QLink's, floats by fprim
    soft_float = True

    def create_world(self, nranks, ranks, uid, config):
        ranks = tuple(ranks)
        if len(ranks) == nranks:
            return ThreadsWorld(nranks, config)
        if getattr(uid, "address", None):
            check_single_process(nranks, ranks)
        with _lock:                     # one rank per caller thread: one shared world per uid
            key = (getattr(uid, "token", uid), nranks)
            world = _worlds.get(key)
            if world is None:
                world = _worlds[key] = ThreadsWorld(nranks, config)
                world.threaded = True
                world.roster = ThreadRoster(nranks)
                world.forget = lambda: _forget(key, world)     # once every rank is destroyed
        try:
            world.roster.join(ranks, float(config.get("thread_timeout", 60)))
        except BaseException:
            if not world.roster.joined:
                _forget(key, world)
            raise
        return world


def _forget(key, world) -> None:
    with _lock:
        if _worlds.get(key) is world:
            del _worlds[key]


TRANSPORT = ThreadsTransport()


@hookimpl
def qccl_transports():
    return [TRANSPORT]
