"""Group semantics (ncclGroupStart / ncclGroupEnd), per thread as in NCCL.

Inside a group, calls are checked at once (a refused call is not recorded and changes nothing) and run together at the
outermost group_end: all the ranks of a world that this process drives are submitted in one epoch, their point-to-point
calls fused and software-pipelined.
"""
from __future__ import annotations

import contextlib
import threading

from .errors import InvalidUsage

_state = threading.local()


def _get():
    if not hasattr(_state, "depth"):
        _state.depth = 0
        _state.calls = []
    return _state


def in_group() -> bool:
    return _get().depth > 0


def group_start() -> None:
    """ncclGroupStart: calls until the matching group_end are queued and run together."""
    _get().depth += 1


def group_end() -> None:
    """ncclGroupEnd: at the outermost level, runs every call queued since group_start."""
    st = _get()
    if st.depth == 0:
        raise InvalidUsage("group_end without group_start")
    if st.depth > 1:
        st.depth -= 1
        return
    calls, st.calls = st.calls, []
    st.depth = 0
    if calls:
        from .communicator import execute
        execute(calls)


def add(call) -> None:
    _get().calls.append(call)


def discard() -> None:
    """Drop the queued calls of this thread's open group (after an error the user cannot recover from)."""
    st = _get()
    st.depth, st.calls = 0, []


@contextlib.contextmanager
def group():
    """``with qccl.group(): ...`` is group_start(); ...; group_end(). On an exception inside, the group is dropped."""
    group_start()
    try:
        yield
    except BaseException:
        st = _get()
        st.depth -= 1
        if st.depth == 0:
            st.calls = []
        raise
    group_end()
