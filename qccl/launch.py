"""Start one process per rank: ``python -m qccl.launch -n 4 script.py [args...]``.

Each process gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun's names) and QCCL_UNIQUE_ID, so
``qccl.get_unique_id()`` returns the same id everywhere (as if rank 0 had broadcast it) and
``qccl.Communicator.init(world_size, rank, uid)`` joins the others over a gloo group. torchrun works too: without
QCCL_UNIQUE_ID the transport joins the group torchrun describes.

Exit status: 0 when every rank exits 0; otherwise the first failure's, after the other ranks are stopped.
"""
from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(n: int, argv: list[str], port: int | None = None, env: dict | None = None, module: bool = False):
    """Start the n processes; returns their Popen objects."""
    port = port or free_port()
    uid = f"{secrets.token_hex(16)}@127.0.0.1:{port}"
    procs = []
    for rank in range(n):
        e = dict(os.environ if env is None else env)
        e.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), QCCL_UNIQUE_ID=uid)
        cmd = [sys.executable] + (["-m"] if module else []) + argv
        procs.append(subprocess.Popen(cmd, env=e))
    return procs


def wait(procs, timeout: float | None = None) -> int:
    """Wait for every process; stop the rest at the first failure. Returns the exit status."""
    deadline = None if timeout is None else time.monotonic() + timeout
    status = 0
    while procs:
        for p in list(procs):
            rc = p.poll()
            if rc is None:
                continue
            procs.remove(p)
            if rc != 0 and status == 0:
                status = rc
                for q in procs:
                    q.terminate()
        if deadline is not None and time.monotonic() > deadline:
            for q in procs:
                q.kill()
            return 124
        time.sleep(0.02)
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl.launch", description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--nprocs", type=int, required=True, help="number of ranks (processes)")
    ap.add_argument("--port", type=int, default=None, help="rendezvous port (default: a free one)")
    ap.add_argument("-m", "--module", action="store_true", help="run the target as a module (python -m)")
    ap.add_argument("--timeout", type=float, default=None, help="stop every rank after this many seconds")
    ap.add_argument("target", help="script (or module with -m)")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if not 1 <= a.nprocs <= 8:
        ap.error("-n must be 1..8")
    return wait(spawn(a.nprocs, [a.target] + a.args, a.port, module=a.module), a.timeout)


if __name__ == "__main__":
    sys.exit(main())
