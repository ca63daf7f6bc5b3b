"""Finding transports: a pluggy PluginManager that loads the ``qccl_transports`` entry points once."""
from __future__ import annotations

import threading

import pluggy

from . import hookspecs
from .errors import InvalidArgument

ENTRY_POINT_GROUP = "qccl_transports"
_pm: pluggy.PluginManager | None = None
_lock = threading.Lock()


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager (entry points loaded on first use). Register more plugins on it at will."""
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager("qccl")
            pm.add_hookspecs(hookspecs)
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
            _pm = pm
        return _pm


def transports() -> dict:
    """Every registered transport, by name."""
    found = {}
    for result in plugin_manager().hook.qccl_transports():
        for t in result or ():
            found.setdefault(t.name, t)
    return found


def get_transport(name: str):
    """The transport called ``name``; InvalidArgument naming the registered ones otherwise."""
    available = transports()
    if name not in available:
        raise InvalidArgument(f"unknown transport {name!r} (registered: {', '.join(sorted(available)) or 'none'})")
    return available[name]
