"""The one path a call takes, as NCCL's enqueue: every call is a group of one.

    enqueue(call)        the one place a call enters (ncclEnqueueCheck): queued in this thread's open group, or, outside
                         a group, run as a group of its own
    launch(calls)        the one place a group runs (ncclGroupEnd): post every rank's calls on its communicator's board
                         (qccl.board: the cross-rank check), then schedule the released calls (qccl.schedule) and run
                         them on the world, one epoch per communicator

Modes, by how the communicator was made (``comm._mode``): "all" (one thread drives every rank: a call that waits for
other ranks' calls is held on the board and the call returns), "thread" (one thread per rank: the call waits until
its rank's calls have run, at most ``thread_timeout`` seconds), "process" (one process per rank: every group's call
signatures are exchanged through ``world.gather_calls`` first, so every process's board takes the same decisions).
"""
from __future__ import annotations

import threading
import time

import numpy as np

from .board import Board
from .buffers import Buffer, as_buffer
from .calls import Call, Sig
from .errors import DeadlockError, InvalidUsage
from .plugins import run_epoch
from .schedule import Scheduler, parse_algo
from .transport import Work
from .types import DataType, RedOp, red_op

_tls = threading.local()


def _queue():
    if not hasattr(_tls, "depth"):
        _tls.depth, _tls.calls = 0, []
    return _tls


def in_group() -> bool:
    return _queue().depth > 0


def group_start() -> None:
    _queue().depth += 1


def group_end() -> None:
    q = _queue()
    if q.depth == 0:
        raise InvalidUsage("group_end without group_start")
    q.depth -= 1
    if q.depth:
        return
    calls, q.calls = q.calls, []
    if calls:
        launch(calls)


def group_drop() -> None:
    """Close this thread's open group level and, at the outermost one, forget its calls (nothing of them ran)."""
    q = _queue()
    q.depth = max(0, q.depth - 1)
    if q.depth == 0:
        q.calls = []


def enqueue(call: Call) -> None:
    """The one place a call enters qccl: queued in this thread's open group, else run at once as a group of one."""
    q = _queue()
    if q.depth:
        q.calls.append(call)
        return
    group_start()
    q.calls.append(call)
    group_end()


# -- running a group -------------------------------------------------------------------------------------------------
def launch(calls: list[Call]) -> None:
    """Run one group: the one place a group is executed. Raises the first error (nothing of a refused group ran)."""
    for c in calls:
        c.comm._alive(c.sig.kind)
    by_world: dict[int, list[Call]] = {}
    for c in calls:
        by_world.setdefault(id(c.comm.world), []).append(c)
    error = None
    mine: list[tuple[Board, list[Call], float]] = []
    for wcalls in by_world.values():
        comm = wcalls[0].comm
        parts: dict[int, list[Call]] = {}
        owners: dict[int, object] = {}
        for c in wcalls:
            if owners.setdefault(c.rank, c.comm) is not c.comm:
                raise InvalidUsage(f"two communicators for rank {c.rank} in one group")
            parts.setdefault(c.rank, []).append(c)
        took_part = set(parts)
        if comm._mode == "process":
            gathered = comm.world.gather_calls(comm.rank, [c.sig.pack() for c in parts[comm.rank]])
            for r, sigs in enumerate(gathered):
                if r != comm.rank:
                    parts[r] = [Call(Sig.unpack(s), r) for s in sigs]
            took_part = set(range(comm.nranks))
        released, err = comm._board.submit(parts, took_part)
        _run(comm, released)
        error = error or err
        if comm._mode == "thread" and err is None:
            mine.append((comm._board, wcalls, float(comm.config.thread_timeout)))
    for board, wcalls, timeout in mine:
        _wait(board, wcalls, timeout)
    if error is not None:
        raise error


def flush(comm) -> None:
    """Across processes: take part in groups (posting nothing) until this rank's held calls have run."""
    while comm._board.held(comm.rank):
        before = len(comm._board.held(comm.rank))
        gathered = comm.world.gather_calls(comm.rank, [])
        parts = {r: [Call(Sig.unpack(s), r) for s in sigs] for r, sigs in enumerate(gathered) if r != comm.rank}
        released, err = comm._board.submit(parts, set(range(comm.nranks)))
        _run(comm, released)
        if err is not None:
            raise err
        if len(comm._board.held(comm.rank)) == before and not any(parts.values()):
            break


def _run(comm, released: dict) -> None:
    """Schedule the released segments of this process's ranks and run them as one epoch of the world."""
    work = []
    for rank, segments in sorted(released.items()):
        owner = segments[0][0].comm
        if owner is None:               # another process's rank: its own process runs it
            continue
        state = owner.state.clone()
        ops = []
        for seg in segments:
            ops += _plan(owner, state, seg)
        owner.state = state
        work.append(Work(rank, ops, [c.sig.pack() for seg in segments for c in seg]))
    if not work and comm._mode != "process":
        comm._board.finish(released)
        return
    try:
        run_epoch(comm.world, work)
    except BaseException as e:
        comm._board.finish(released, e)
        raise
    comm._board.finish(released)


def _wait(board: Board, calls: list[Call], timeout: float) -> None:
    """Thread mode: wait until this thread's calls have run (another rank's thread may run them)."""
    deadline = time.monotonic() + timeout
    with board.cond:
        while True:
            failed = [c.error for c in calls if c.error is not None]
            if failed:
                raise failed[0]
            if all(c.done for c in calls):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                behind = board.behind()
                who = f"rank {', '.join(map(str, behind))} is behind" if behind else "no rank posted the matching call"
                raise DeadlockError(f"rank {calls[0].rank} waited {timeout:g} s (thread_timeout) in {calls[0]}: "
                                    f"{who}. {board.waiting()}")
            board.cond.wait(min(left, 0.5))


# -- dispatch to the schedules ---------------------------------------------------------------------------------------
def _plan(comm, state, segment: list[Call]) -> list:
    """One segment of a rank's calls -> its host ops: a collective, or a fused run of sends and receives."""
    heap = comm.heap
    first = segment[0].sig
    if first.p2p:
        sends = [(c.sig.root, c.send.as_words()) for c in segment if c.sig.kind == "send" and c.sig.count]
        recvs = [(c.sig.root, c.recv.as_words()) for c in segment if c.sig.kind == "recv" and c.sig.count]
        return _sendrecv(comm, state, sends, recvs)
    call = segment[0]
    s, n = call.sig, comm.nranks
    if s.count == 0 and s.kind != "barrier":
        return []
    send, recv = call.send, call.recv
    algo, chunk = parse_algo(s.algo)        # "ring", or "ring:4" when a tuner chose 4-word chunks
    if s.kind in ("allreduce", "reduce", "reduce_scatter"):
        soft = bool(getattr(comm.transport, "soft_float", False))      # no floating point on its devices
        sch = Scheduler(heap, state, send.dtype, red_op(s.op), s.kind, soft_float=soft)
        count = s.count
        if soft and send.dtype in (DataType.BFLOAT16, DataType.FLOAT16):      # fprim takes two elements a word
            send = send.as_words(n if s.kind == "reduce_scatter" else 1)
            recv = recv.as_words() if recv is not None else None
            count = send.count // (n if s.kind == "reduce_scatter" else 1)
        if s.kind == "allreduce":
            sch.allreduce(send, recv, count, algo, chunk)
        elif s.kind == "reduce":
            sch.reduce(send, recv, count, s.root, chunk)
        else:
            sch.reduce_scatter(send, recv, count, chunk)
        return sch.ops
    sch = Scheduler(heap, state, DataType.INT32, RedOp.SUM, s.kind)
    if s.kind == "barrier":             # an allreduce of one word: every rank's kernel waits for every other's
        one = as_buffer(np.zeros(1, np.int32), "barrier")
        sch.allreduce(one, as_buffer(np.zeros(1, np.int32), "barrier"), 1, "ring")
    elif s.kind == "broadcast":
        w = recv.as_words()
        sch.broadcast(send.as_words() if send is not None else None, w, w.count, s.root, algo, chunk)
    elif s.kind == "allgather":
        w = send.as_words()
        sch.allgather(w, recv.as_words(n), w.count, algo, chunk)
    elif s.kind == "alltoall":
        c = s.count
        return _sendrecv(comm, state, [(p, send.part(p * c, c).as_words()) for p in range(n)],
                         [(p, recv.part(p * c, c).as_words()) for p in range(n)])
    elif s.kind == "gather":
        c = s.count
        recvs = [(p, recv.part(p * c, c).as_words()) for p in range(n)] if comm.rank == s.root else []
        return _sendrecv(comm, state, [(s.root, send.as_words())], recvs)
    elif s.kind == "scatter":
        c = s.count
        sends = [(p, send.part(p * c, c).as_words()) for p in range(n)] if comm.rank == s.root else []
        return _sendrecv(comm, state, sends, [(s.root, recv.as_words())])
    else:
        raise InvalidUsage(f"no schedule for {s}")
    return sch.ops


def _sendrecv(comm, state, sends: list[tuple[int, Buffer]], recvs: list[tuple[int, Buffer]]) -> list:
    sch = Scheduler(comm.heap, state, DataType.INT32, RedOp.SUM, "sendrecv")
    sch.send_recv(sends, recvs, bool(comm.config.p2p_pipeline))
    return sch.ops
