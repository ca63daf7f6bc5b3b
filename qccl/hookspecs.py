"""qccl's plugin hooks (pluggy, project name "qccl").

Transports are found only through these hooks: qccl never imports a transport. A transport package registers a module
or object implementing them, either through the ``qccl_transports`` entry point group::

    [project.entry-points.qccl_transports]
    qlink = "qccl_transports.qlink.plugin"

or at run time with ``qccl.plugin_manager().register(obj)``.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("qccl")
hookimpl = pluggy.HookimplMarker("qccl")


@hookspec
def qccl_transports() -> list:
    """Return the :class:`qccl.transport.Transport` objects this plugin provides (each has a unique ``name``).

    A transport declares the dtypes it moves (``dtypes``) and creates the :class:`qccl.transport.World` of a
    communicator (``create_world(nranks, ranks, uid, config)``)."""
