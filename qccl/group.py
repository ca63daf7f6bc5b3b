"""Group semantics (ncclGroupStart / ncclGroupEnd), per thread as in NCCL.

    with qccl.group():
        for c in comms:
            c.allreduce(x[c.rank], y[c.rank])

Inside a group, each call checks its own arguments at once (a refused call is not recorded and changes nothing) and is
queued; the outermost group_end runs the queued calls together (qccl.enqueue.launch): every rank's calls are matched
against the other ranks' first, then each communicator's ranks run in one epoch, their point-to-point calls fused and
software-pipelined. A call made outside a group is a group of one.
"""
from __future__ import annotations

import contextlib

from . import enqueue as E


def in_group() -> bool:
    """True between group_start and its matching group_end on this thread.

    >>> in_group()
    False
    """
    return E.in_group()


def group_start() -> None:
    """ncclGroupStart: calls until the matching group_end are queued and run together.

    >>> group_start(); group_end()
    """
    E.group_start()


def group_end() -> None:
    """ncclGroupEnd: at the outermost level, runs every call queued since group_start (InvalidUsage without one).

    >>> group_start(); group_start(); group_end(); group_end()     # nested: only the outermost runs
    """
    E.group_end()


@contextlib.contextmanager
def group():
    """``with qccl.group(): ...`` is group_start(); ...; group_end(). On an exception inside, the group is dropped
    (none of its calls run).

    >>> with group():
    ...     pass
    """
    E.group_start()
    try:
        yield
    except BaseException:
        E.group_drop()
        raise
    E.group_end()
