"""QCCL_DEBUG=INFO: one NCCL_DEBUG-style line per call on stderr (NCCL prints opCount, count, datatype, op, root,
comm and stream; qccl adds the tokens the rank's model wrote, which is what a call costs)::

    QCCL_DEBUG=INFO python -m qccl_bench.perf all_reduce -g 2
    host:1234:1234 [0] QCCL INFO AllReduce: opCount 0 count 4 datatype int32 op sum root 0 comm 0x7f3a... nranks 2
        algo ring tokens 143 fed 208 launches 6 records 14 wall 0.011s
    host:1234:1234 [0] QCCL INFO Exchange: opCount 0 calls allreduce comm 0x7f3a... nranks 2 fabric GlooFabric
        (processes) exchanges 40 packets sent 12 received 12 wall 0.180s

The Exchange line (one per rank and epoch, after its calls' lines) is what crossed the fabric: lockstep windows
exchanged and packets sent and received (across processes, each window is one gloo all_gather).

QCCL_DEBUG_FILE=path writes the lines to a file instead (NCCL's NCCL_DEBUG_FILE).
"""
from __future__ import annotations

import os
import socket
import sys

from qccl.hookspecs import COLLECTIVE, EXCHANGE, hookimpl

NAMES = {"allreduce": "AllReduce", "broadcast": "Broadcast", "reduce": "Reduce", "allgather": "AllGather",
         "reduce_scatter": "ReduceScatter", "send": "Send", "recv": "Recv", "alltoall": "AlltoAll",
         "gather": "Gather", "scatter": "Scatter"}


def enabled() -> bool:
    return os.environ.get("QCCL_DEBUG", "").upper() in ("INFO", "TRACE")


@hookimpl
def qccl_profiler_mask():
    return COLLECTIVE | EXCHANGE if enabled() else 0


def line(ev) -> str:
    """The line for a finished collective or exchange event."""
    if ev.kind == "exchange":
        return (f"{socket.gethostname()}:{os.getpid()}:{os.getpid()} [{ev.rank}] QCCL INFO Exchange: opCount "
                f"{ev.op_count:x} calls {ev.call or '-'} comm {ev.comm} nranks {ev.nranks} fabric {ev.note} "
                f"exchanges {ev.exchanges} packets sent {ev.packets_sent} received {ev.packets_received} "
                f"wall {ev.wall:.6f}s")
    name = NAMES.get(ev.call, ev.call)
    root = 0 if ev.root is None else ev.root
    tokens = "shared" if ev.tokens_written is None else ev.tokens_written
    return (f"{socket.gethostname()}:{os.getpid()}:{os.getpid()} [{ev.rank}] QCCL INFO {name}: opCount "
            f"{ev.op_count:x} count {ev.count} datatype {ev.dtype} op {ev.op or 'none'} root {root} comm {ev.comm} "
            f"nranks {ev.nranks} algo {ev.algo or '-'} tokens {tokens} fed {ev.tokens_fed} launches {ev.launches} "
            f"records {ev.records} wall {ev.wall:.6f}s")


@hookimpl
def qccl_profiler_stop(event):
    if event.kind not in ("collective", "exchange") or not enabled():
        return
    text = line(event) + "\n"
    path = os.environ.get("QCCL_DEBUG_FILE")
    if path:
        with open(path, "a") as f:
            f.write(text)
    else:
        sys.stderr.write(text)
