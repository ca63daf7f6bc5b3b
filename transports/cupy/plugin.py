"""The CuPy transport as a qccl plugin (entry point ``cupy`` in the ``qccl_transports`` group).

    comms = qccl.Communicator.init_all(2, transport="cupy")                 # two ranks on this process's GPU(s)
    comms[0].allreduce(cupy_or_numpy_send, recv, "sum")

Buffers are host arrays (numpy or CPU torch) as for every qccl transport; the collectives run on the GPUs. Its own
keys, in ``config={"transport_options": {...}}``: devices (the device of each rank), timeout (the watchdog, seconds, default 60), pinned_bytes (the pinned slab
per rank, default 4 MiB). CuPy is imported when a world is made, never at plugin discovery, so qccl works where
CuPy is absent (the transport then refuses with SystemError naming what is missing).
"""
from __future__ import annotations

import qccl
from qccl.transport import Transport

from .kernels import DTYPES

hookimpl = qccl.hookimpl


class CupyTransport(Transport):
    name = "cupy"
    dtypes = DTYPES

    def create_world(self, nranks, ranks, uid, config):
        from .world import CupyWorld
        return CupyWorld(nranks, ranks, uid, config)


TRANSPORT = CupyTransport()


@hookimpl
def qccl_transports():
    return [TRANSPORT]
