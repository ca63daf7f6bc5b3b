"""A memo of an analysis of a kernel's body, by the body itself: a kernel is lowered once per launch configuration,
and what the layout and the address analysis find depends on its body alone.

Example::

    >>> memo = ByBody(size=2)
    >>> body = ["ret;"]
    >>> memo.get(body, lambda: len(body)), memo.get(body, lambda: 99)      # the second call finds the first's
    (1, 1)
"""
from __future__ import annotations

import threading

__all__ = ["ByBody"]


class ByBody:
    """The results for the last ``size`` bodies, each entry keyed by the body's id and holding the body (so its id
    is not reused while the entry lives). Safe across threads: the threads transport lowers on one thread a rank,
    and two that evicted the same oldest entry at once raised KeyError."""

    def __init__(self, size: int = 256):
        self.size = size
        self._entries: dict[int, tuple] = {}
        self._lock = threading.Lock()

    def get(self, body, compute):
        """``compute()``'s value for ``body``, computed once (outside the lock: two threads may both compute a new
        body's, and the second keeps its own)."""
        with self._lock:
            known = self._entries.get(id(body))
        if known is not None and known[0] is body:
            return known[1]
        value = compute()
        with self._lock:
            self._entries[id(body)] = (body, value)
            while len(self._entries) > self.size:
                del self._entries[next(iter(self._entries))]
        return value
