"""Word addresses of qccl's heap as pointers on GPUs: which rank's memory a kernel argument names, and the launches a
multicast store becomes. Pure Python (no CuPy): tested on the CPU.

Every rank owns two arrays: ``flag`` (127 int words) and ``data`` (127 elements of the call's dtype, 8 bytes each
reserved). A word address ``a`` names flag[a] or data[a] depending on the parameter (qccl.transport.PARAMS). Loads
read the launching rank's own memory; a store follows the heap's routes (qccl.heap.Route): local, the one peer of a
unicast route (the peer's pointer: peer access, an IPC mapping, or another rank's buffer in the same context), or,
for a multicast route, every rank's copy: the launch is repeated once per copy, the repeats skipping the waits (the
first already waited; a repeated store of the same value is harmless, and flags are posted only after every copy of
the data is stored, by separate POST launches, so a peer never sees a flag before its data).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from qccl.transport import (MC_POST, MC_PRE_WAIT, MC_STORE, MC_WAIT, PARAMS, PRIM_NOWAIT, PRIM_POST, Launch, Read,
                            Write)

FLAG, DATA = "flag", "data"
ELEMENT_BYTES = 8           # the widest NCCL dtype: every rank's data array reserves 8 bytes per word address


@dataclass(frozen=True)
class Ptr:
    """A kernel pointer argument: ``rank``'s ``space`` array at word address ``address``."""
    rank: int
    space: str
    address: int


@dataclass(frozen=True)
class GpuLaunch:
    """One launch as the GPU runs it: the kernel family (prim, mcast), threads, arguments with pointers resolved,
    the dtype of its data, and the qccl launch it came from (named by the watchdog)."""
    kernel: str
    threads: int
    args: tuple
    dtype: str
    origin: Launch


def _route(routes, address):
    for r in routes:
        if r.start <= address < r.stop:
            return r
    return None


def resolve(rank: int, launch: Launch, routes, dtype: str) -> list[GpuLaunch]:
    """The GPU launches of one qccl launch on ``rank`` (one, or several for a multicast store)."""
    name = launch.kernel.name
    roles = PARAMS[name]
    if len(roles) != len(launch.args):
        raise ValueError(f"{name}: {len(launch.args)} arguments, PARAMS names {len(roles)}")
    base, copies = [], None
    for role, value in zip(roles, launch.args):
        if role == "value":
            base.append(int(value))
            continue
        space = FLAG if role.startswith("flag") else DATA
        owner = rank
        if role.endswith("store"):
            route = _route(routes, value)
            if route is not None and route.multicast:
                copies = (rank,) + tuple(route.peers)
            elif route is not None:
                owner = route.peers[0]
        base.append(Ptr(owner, space, int(value)))
    if copies is None:
        return [GpuLaunch(name, launch.threads, tuple(base), dtype, launch)]
    return _multicast(rank, name, launch, base, copies, dtype)


def _retarget(args: list, index: int, rank: int) -> tuple:
    out = list(args)
    out[index] = replace(out[index], rank=rank)
    return tuple(out)


def _multicast(rank, name, launch, args, copies, dtype) -> list[GpuLaunch]:
    one = lambda a, threads=launch.threads: GpuLaunch(name, threads, tuple(a), dtype, launch)  # noqa: E731
    if name == "prim":
        # a step whose result lands in a multicast window (qccl's NVLS-style AllReduce): y to every copy
        y = PARAMS["prim"].index("data_store")                     # y comes before sslot in prim's signature
        if args[0] & PRIM_POST:
            raise ValueError("a prim POST launch stores flags only; its flags are not in a multicast window")
        first = [one(_retarget(args, y, rank))]
        rest = [one(_retarget([args[0] | PRIM_NOWAIT] + list(args[1:]), y, c)) for c in copies if c != rank]
        return first + rest
    mode = args[0]
    win, flag = PARAMS["mcast"].index("data_store"), PARAMS["mcast"].index("flag_store")
    out = []
    if mode & (MC_PRE_WAIT | MC_STORE):
        out.append(one(_retarget([mode & (MC_PRE_WAIT | MC_STORE)] + list(args[1:]), win, rank)))
        if mode & MC_STORE:
            out += [one(_retarget([MC_STORE] + list(args[1:]), win, c)) for c in copies if c != rank]
    if mode & MC_POST:
        out += [one(_retarget([MC_POST] + list(args[1:]), flag, c), 1) for c in copies]
    if mode & MC_WAIT:
        out.append(one([MC_WAIT] + list(args[1:]), 1))
    return out


def launch_dtypes(ops, default: str) -> list:
    """The dtype of each op's data: a host copy's from its buffer; a launch's from the copy that feeds it (the Write
    just before a launch that reads local input) or drains it (the next Read), which is how qccl.schedule lays out a
    step. Launches that move flags only get ``default``."""
    out = [None] * len(ops)
    for i, op in enumerate(ops):
        if isinstance(op, (Write, Read)):
            out[i] = str(op.source.dtype if isinstance(op, Write) else op.dest.dtype)
    nxt = None
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if isinstance(op, Read):
            nxt = out[i]
        elif isinstance(op, Launch):
            out[i] = nxt
    prev = None
    for i, op in enumerate(ops):
        if isinstance(op, Write):
            prev = out[i]
        elif isinstance(op, Launch):
            local = (op.kernel.name == "prim" and op.args[0] & 4) or (op.kernel.name == "mcast" and op.args[0] & 2)
            if local and prev is not None:
                out[i] = prev
            elif out[i] is None:
                out[i] = prev or default
    return out
