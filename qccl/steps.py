"""Collectives as step sequences, in the order of NCCL's runRing: the one definition the schedules use.

A collective is a short list of steps over a small vocabulary of primitives (NCCL's prims_simple): each primitive says
whether it receives from the previous rank, combines with local input, stores a result locally and sends to the next
rank. Ring-split collectives (AllReduce, ReduceScatter, AllGather) name the block each step works on (mod nranks);
pipelined ones (Broadcast, Reduce) apply one primitive per rank to every chunk in turn. The multicast algorithms read
the same way over the multicast primitives (qccl/kernels/mcast.cu: a store into the window lands locally and at every
peer; flags say a round's stores have landed), one round of a window at a time:

    >>> [str(s) for s in all_gather_multicast(1, 4)]
    ['mcStore(1)', 'mcPostWait', 'mcRead']
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prim:
    """A primitive of the Simple protocol."""
    name: str
    recv: bool = False      # wait for the previous rank's chunk and read it
    local: bool = False     # read this rank's input
    reduce: bool = False    # combine the received chunk with the local input (the op)
    copy: bool = False      # the result is final here: it lands in this rank's output
    send: bool = False      # the result goes to the next rank

    def __str__(self) -> str:
        return self.name


SEND = Prim("send", local=True, send=True)
RECV = Prim("recv", recv=True, copy=True)
COPY_SEND = Prim("copySend", local=True, copy=True, send=True)
RECV_REDUCE_SEND = Prim("recvReduceSend", recv=True, local=True, reduce=True, send=True)
RECV_REDUCE_COPY_SEND = Prim("recvReduceCopySend", recv=True, local=True, reduce=True, copy=True, send=True)
RECV_COPY_SEND = Prim("recvCopySend", recv=True, copy=True, send=True)
RECV_REDUCE_COPY = Prim("recvReduceCopy", recv=True, local=True, reduce=True, copy=True)
LOCAL_COPY = Prim("localCopy", local=True, copy=True)


@dataclass(frozen=True)
class Step:
    prim: Prim
    block: int | None = None   # the ring block (0..nranks-1) for ring-split collectives, None for pipelined ones

    def __str__(self) -> str:
        return f"{self.prim}({self.block})" if self.block is not None else str(self.prim)


def _reduce_phase(rank: int, n: int) -> list[Step]:
    """send(r-1); recvReduceSend(r-j) for j=2..n-1: block r is one step from reduced when it reaches rank r."""
    return [Step(SEND, (rank - 1) % n)] + [Step(RECV_REDUCE_SEND, (rank - j) % n) for j in range(2, n)]


def _gather_phase(rank: int, n: int) -> list[Step]:
    """recvCopySend(r-j) for j=1..n-2; recv(r+1): the final blocks go round once."""
    return [Step(RECV_COPY_SEND, (rank - j) % n) for j in range(1, n - 1)] + [Step(RECV, (rank + 1) % n)]


def all_reduce(rank: int, nranks: int) -> list[Step]:
    """send(r-1); recvReduceSend(r-j) for j=2..n-1; recvReduceCopySend(r); recvCopySend(r-j) for j=1..n-2; recv(r+1)."""
    if nranks == 1:
        return [Step(LOCAL_COPY, 0)]
    return _reduce_phase(rank, nranks) + [Step(RECV_REDUCE_COPY_SEND, rank)] + _gather_phase(rank, nranks)


def reduce_scatter(rank: int, nranks: int) -> list[Step]:
    """send(r-1); recvReduceSend(r-j) for j=2..n-1; recvReduceCopy(r): rank r ends with block r reduced."""
    if nranks == 1:
        return [Step(LOCAL_COPY, 0)]
    return _reduce_phase(rank, nranks) + [Step(RECV_REDUCE_COPY, rank)]


def all_gather(rank: int, nranks: int) -> list[Step]:
    """copySend(r); recvCopySend(r-j) for j=1..n-2; recv(r+1)."""
    if nranks == 1:
        return [Step(LOCAL_COPY, 0)]
    return [Step(COPY_SEND, rank)] + _gather_phase(rank, nranks)


def _chain(rank: int, n: int, first: int, head: Prim, middle: Prim, last: Prim) -> Prim:
    """A pipelined collective is a chain round the ring from rank ``first``: its head, the middle ranks, its last."""
    if n == 1:
        return LOCAL_COPY
    at = (rank - first) % n
    return head if at == 0 else last if at == n - 1 else middle


def broadcast(rank: int, nranks: int, root: int) -> Prim:
    """The root copySends, the rank before the root receives, the others recvCopySend (applied to every chunk)."""
    return _chain(rank, nranks, root, COPY_SEND, RECV_COPY_SEND, RECV)


def reduce(rank: int, nranks: int, root: int) -> Prim:
    """The rank after the root sends, the root recvReduceCopies, the others recvReduceSend (every chunk)."""
    return _chain(rank, nranks, root + 1, SEND, RECV_REDUCE_SEND, RECV_REDUCE_COPY)


@dataclass(frozen=True)
class McPrim:
    """A primitive of the multicast protocol."""
    name: str
    store: bool = False     # store this rank's block into the window: it lands locally and at every peer
    post: bool = False      # post this rank's flag for the round
    wait: str = ""          # wait for the round's flags: "peers" (every other rank) or "root"
    read: bool = False      # the host reads the round's output blocks out of the window

    def __str__(self) -> str:
        return self.name


MC_STORE = McPrim("mcStore", store=True)
MC_POST = McPrim("mcPost", post=True)
MC_POST_WAIT = McPrim("mcPostWait", post=True, wait="peers")
MC_POST_WAIT_ROOT = McPrim("mcPostWaitRoot", post=True, wait="root")
MC_READ = McPrim("mcRead", read=True)


def all_gather_multicast(rank: int, nranks: int) -> list[Step]:
    """mcStore(r): this rank's block into the window, once; mcPostWait: every peer's block has landed; mcRead."""
    return [Step(MC_STORE, rank), Step(MC_POST_WAIT), Step(MC_READ)]


def broadcast_multicast(rank: int, nranks: int, root: int) -> list[Step]:
    """The root mcStores the chunk and posts its flag; the others wait for the root's flag; every rank reads."""
    if rank == root:
        return [Step(MC_STORE, root), Step(MC_POST), Step(MC_READ)]
    return [Step(MC_POST_WAIT_ROOT), Step(MC_READ)]


def all_reduce_multicast(rank: int, nranks: int) -> list[Step]:
    """NVLS-style: ReduceScatter on the ring, its final step (recvReduceCopy) storing the reduced block into the
    window, so one store reaches every rank; then mcPostWait and mcRead."""
    return reduce_scatter(rank, nranks) + [Step(MC_POST_WAIT), Step(MC_READ)]


def send_recv_rounds(nranks: int) -> list[int]:
    """The distances of grouped point-to-point calls, in order: round d sends to r+d and receives from r-d."""
    return list(range(nranks))


@dataclass(frozen=True)
class P2PStep:
    """One launch of a software-pipelined SendRecv on a channel: receive chunk ``recv`` and send chunk ``send``."""
    recv: int | None
    send: int | None


def send_recv_pipeline(send_chunks: int, recv_chunks: int, pipelined: bool = True) -> list[P2PStep]:
    """Software pipelining as NCCL's grouped calls do it: step j receives chunk j-1 and sends chunk j.

    ``pipelined=False`` is the naive order (every send, then every receive), which deadlocks a FIFO of two slots as
    soon as more than two chunks are in flight both ways.
    """
    if not pipelined:
        return [P2PStep(None, j) for j in range(send_chunks)] + [P2PStep(j, None) for j in range(recv_chunks)]
    steps = []
    for j in range(max(send_chunks, recv_chunks + 1) if recv_chunks else send_chunks):
        r = j - 1 if 1 <= j <= recv_chunks else None
        s = j if j < send_chunks else None
        if r is not None or s is not None:
            steps.append(P2PStep(r, s))
    return steps

