"""A deadline for one lowering: its long loops (constant propagation, emission, fusion, liveness,
the overlay cutter) ask ``check`` each round.

Lowering a kernel is thousands of machine ops for each double or float op, and a long program under lane
predicates (double code under a branch, whose paths are if-converted around a loop) can take the passes over the
op graph from seconds to hours: CUDA's double ``sin`` took them past 15 minutes until liveness bounded their
searches (it lowers in about 25 s on 2 cores now). Rather than wait without end, a lowering that runs past
``QWENGPU_LOWERING_SECONDS`` (300 by default) stops with a ``LoweringTimeout`` that names the kernel, the time, the
stage it was in and the setting; nothing has run on the machine then (a launch lowers before it feeds a token).
``0`` turns the deadline off.

Example::

    >>> with lowering("k", seconds=0.0):
    ...     check("fusion")         # no deadline: nothing happens
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

from ..isa import MachineError

__all__ = ["LoweringTimeout", "lowering", "check", "SETTING", "DEFAULT_SECONDS"]

SETTING = "QWENGPU_LOWERING_SECONDS"
DEFAULT_SECONDS = 300.0
_state = threading.local()      # each thread lowers on its own (the threads transport's ranks)


class LoweringTimeout(MachineError):
    """A lowering ran past its deadline."""


def limit() -> float:
    """The deadline in seconds from ``QWENGPU_LOWERING_SECONDS`` (0: none)."""
    text = os.environ.get(SETTING, "")
    if not text:
        return DEFAULT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        raise MachineError(f"{SETTING}={text!r} is no number of seconds (0 turns the deadline off)") from None
    if seconds < 0:
        raise MachineError(f"{SETTING}={text!r} is negative; give seconds, or 0 to turn the deadline off")
    return seconds


@contextlib.contextmanager
def lowering(kernel: str, seconds: float | None = None):
    """Lower ``kernel`` under a deadline of ``seconds`` (default: ``limit()``); a lowering inside another keeps the
    outer one's."""
    if getattr(_state, "kernel", None) is not None:
        yield
        return
    seconds = limit() if seconds is None else seconds
    _state.kernel, _state.seconds = kernel, seconds
    _state.end = time.monotonic() + seconds if seconds > 0 else None
    try:
        yield
    finally:
        _state.kernel = _state.end = None


def check(stage: str) -> None:
    """Raise ``LoweringTimeout`` if this thread's lowering is past its deadline."""
    end = getattr(_state, "end", None)
    if end is not None and time.monotonic() > end:
        raise LoweringTimeout(
            f"kernel {_state.kernel}: lowering stopped after {_state.seconds:g} s, in {stage}: a long program under "
            f"lane predicates (double arithmetic under a branch or in a loop) can take the lowering's "
            f"passes far longer; {SETTING} sets the limit in seconds (0: none)")
