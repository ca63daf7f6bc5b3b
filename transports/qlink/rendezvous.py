"""Rendezvous of a QLink world across processes: the store, the join check, and the world's gloo group.

The store is torch.distributed's TCPStore, found where the job's launcher put it:
- ``python -m qccl.launch``: the launcher hosts it (QCCL_STORE=launcher), so it outlives any rank;
- torchrun: its agent hosts it (TORCHELASTIC_USE_AGENT_STORE=True) at MASTER_ADDR:MASTER_PORT;
- a uid with an address and no launcher: rank 0 hosts it;
- the torch backend (qccl.torch): the store torch.distributed hands to the backend's creator (``uid.store``).

Joining: every rank writes its unique id, world size and rank under the world's prefix, then waits (bounded, polling
the store) for all the others. A different id, a different world size, a rank claimed twice, or ranks that never come
are errors at init that say which rank and what is missing.
"""
from __future__ import annotations

import os
from datetime import timedelta

from qccl import liveness as L
from qccl.errors import InvalidArgument, SystemError

_joined = 0         # worlds this process has joined: the k-th world of every process meets under the same prefix


def connect(nranks: int, rank: int, uid):
    """-> (store, description of where it is)."""
    import torch.distributed as dist
    store = getattr(uid, "store", None)
    if store is not None:
        return store, "the store torch.distributed gave the backend"
    address = getattr(uid, "address", None)
    hosted = os.environ.get("QCCL_STORE") == "launcher"
    if not address:
        if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
            raise SystemError(f"rank {rank} of {nranks}: no rendezvous address (the unique id has none and "
                              "MASTER_ADDR / MASTER_PORT are not set): start the script with qccl.launch or torchrun")
        address = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        hosted = hosted or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    host, _, port = address.rpartition(":")
    master = rank == 0 and not hosted
    try:
        store = dist.TCPStore(host, int(port), None, master, timeout=timedelta(seconds=L.INIT_TIMEOUT),
                              wait_for_workers=False, multi_tenant=master)
    except Exception as e:      # noqa: BLE001
        raise SystemError(f"rank {rank} of {nranks} cannot reach the rendezvous store at {address} within "
                          f"{L.INIT_TIMEOUT:g} s ({str(e).splitlines()[0][:160]}): was the script started with "
                          "qccl.launch or torchrun?") from None
    return store, f"the store at {address}"


def join(store, nranks: int, rank: int, token: str, timeout: float | None = None,
         prefix: str | None = None, same_id: bool = True) -> "L.Liveness":
    """Meet the other ranks of this process's next world; returns this rank's Liveness for it. ``prefix``: the
    world's keys (default: by how many worlds this process joined before, which is the same on every rank of an
    SPMD program; torch's groups give each group a store of its own, and pass "qccl"). ``same_id``: every rank must
    pass rank 0's unique id (False under torchrun without qccl.launch, where each process made its own: rank 0's is
    then the communicator's, shared through the store as if rank 0 had broadcast it)."""
    global _joined
    timeout = L.INIT_TIMEOUT if timeout is None else timeout
    if prefix is None:
        prefix = f"qccl/w{_joined}"
        _joined += 1
    store.set_timeout(L.STORE_TIMEOUT)
    if store.add(f"{prefix}/claim/{rank}", 1) > 1:
        raise InvalidArgument(f"rank {rank} of {nranks} was claimed by two processes (give each process its own "
                              "rank)")
    store.set(f"{prefix}/join/{rank}", f"{nranks}|{token}")
    live = L.Liveness(store, rank, nranks, prefix)
    keys = [f"{prefix}/join/{r}" for r in range(nranks)]

    def missing() -> str:
        absent = [r for r, k in enumerate(keys) if not store.check([k])]
        return L._ranks(absent) if absent else "no rank"

    try:
        live.poll_until(lambda: store.check(keys), f"init of a {nranks}-rank communicator", timeout, missing)
    except BaseException:
        live.leave("gave up at init")
        raise
    for r, value in enumerate(store.multi_get(keys)):
        size, _, theirs = value.decode().partition("|")
        if int(size) != nranks:
            live.leave("init refused")
            raise InvalidArgument(f"rank {r} joined a communicator of {size} ranks, rank {rank} one of {nranks} "
                                  "(every rank must pass the same nranks)")
        if theirs != token and same_id:
            live.leave("init refused")
            raise InvalidArgument(f"rank {r} joined with unique id {theirs}, rank {rank} with {token} (every rank "
                                  "must use the id rank 0 created: get_unique_id() once, then share it)")
    return live


def gloo_group(store, live: "L.Liveness"):
    """The world's own gloo group (not torch.distributed's default group): its work is waited for in slices."""
    import torch.distributed as dist
    timeout = timedelta(seconds=max(L.TIMEOUT, L.INIT_TIMEOUT) + 60)
    try:
        return dist.ProcessGroupGloo(dist.PrefixStore(f"{live.prefix}/gloo", store), live.rank, live.nranks, timeout)
    except Exception as e:      # noqa: BLE001
        live.check("init")     # a peer that died meanwhile is named
        raise SystemError(f"rank {live.rank}: cannot build the gloo group: {e}") from None


def process_fabric(nranks: int, rank: int, burst: int, uid):
    """This process's rank of a world whose ranks are processes: store, join, gloo group -> a GlooFabric."""
    from .fabric import GlooFabric
    store, _ = connect(nranks, rank, uid)
    token = str(getattr(uid, "token", uid))
    given = getattr(uid, "address", None) or getattr(uid, "store", None) is not None
    live = join(store, nranks, rank, token, prefix="qccl" if getattr(uid, "store", None) is not None else None,
                same_id=bool(given))
    try:
        live.group = gloo_group(store, live)
    except BaseException:
        live.leave("gave up at init")
        raise
    live.doing = "no call yet"
    return GlooFabric(nranks, rank, burst, live)
