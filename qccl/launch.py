"""Start one process per rank: ``python -m qccl.launch -n 4 script.py [args...]``.

Each process gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun's names) and QCCL_UNIQUE_ID, so
``qccl.get_unique_id()`` returns the same id everywhere (as if rank 0 had broadcast it) and
``qccl.Communicator.init(world_size, rank, uid)`` joins the others over gloo. The launcher hosts the rendezvous store
(torch.distributed's TCPStore, as torchrun's agent does), so the store outlives any rank, and ``dist.init_process_group``
with ``env://`` in the script joins that same store.

When a rank fails (a non-zero exit, a signal), the launcher prints which rank and why, writes it into the store (the
other ranks' pending calls then raise RemoteError naming it; see qccl.liveness), gives the others ``--grace`` seconds
to end on their own, then terminates and finally kills them. It never leaves a rank behind: the ranks die with it
when it is terminated (SIGTERM, SIGINT, SIGHUP) or killed (PR_SET_PDEATHSIG).

Exit status: 0 when every rank exits 0; otherwise the first failing rank's code (128 + N for signal N); 124 after
``--timeout``.

    $ python -m qccl.launch -n 2 examples/some_script.py
    qccl.launch: rank 1 failed: exited with code 3 after 2.4 s
"""
from __future__ import annotations

import argparse
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

GRACE = 10.0        # seconds the surviving ranks get to end on their own after a failure
KILL_AFTER = 3.0    # seconds between SIGTERM and SIGKILL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent(parent: int):
    """preexec_fn of a rank: the kernel sends it SIGKILL when the launcher dies, however it dies (Linux)."""
    def hook():
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)      # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass        # not Linux: the signal handlers of the launcher still stop the ranks
        if os.getppid() != parent:      # the launcher died before prctl took effect
            os._exit(1)
    return hook


def spawn(n: int, argv: list[str], port: int | None = None, env: dict | None = None, module: bool = False,
          store: bool = True):
    """Start the n processes; returns their Popen objects. ``store``: the launcher will host the rendezvous store at
    ``port`` (call :func:`host_store` after spawning: the ranks wait for it)."""
    port = port or free_port()
    uid = f"{secrets.token_hex(16)}@127.0.0.1:{port}"
    procs = []
    for rank in range(n):
        e = dict(os.environ if env is None else env)
        e.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), QCCL_UNIQUE_ID=uid)
        if store:       # torch's env:// then connects as a client, as under torchrun's agent
            e.update(QCCL_STORE="launcher", TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
        cmd = [sys.executable] + (["-m"] if module else []) + argv
        procs.append(subprocess.Popen(cmd, env=e, preexec_fn=_die_with_parent(os.getpid())))
    return procs


def host_store(port: int):
    """The rendezvous store, hosted here (None without torch: then rank 0 hosts it)."""
    try:
        from datetime import timedelta

        import torch.distributed as dist
    except ImportError:
        return None
    return dist.TCPStore("127.0.0.1", port, None, True, timeout=timedelta(seconds=30), wait_for_workers=False,
                         multi_tenant=True)


def describe(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with code {rc}"


def _stop(procs: dict, sig) -> None:
    for p in procs.values():
        if p.poll() is None:
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass


def wait(procs, timeout: float | None = None, store=None, grace: float = GRACE, log=print) -> int:
    """Wait for every process; after the first failure, tell the others through the store, give them ``grace``
    seconds, then stop them. Returns the exit status (see the module docstring)."""
    start = time.monotonic()
    running = dict(enumerate(procs))
    status, failed_at, termed_at = 0, None, None
    outcome = {}

    def note(rank, reason):
        if store is not None:
            try:
                store.set(f"qccl/launch/gone/{rank}", reason)
            except Exception:       # noqa: BLE001
                pass

    while running:
        now = time.monotonic()
        for rank, p in list(running.items()):
            rc = p.poll()
            if rc is None:
                continue
            del running[rank]
            outcome[rank] = f"{describe(rc)} after {now - start:.1f} s"
            note(rank, describe(rc))
            if rc != 0 and status == 0:
                status = rc if rc > 0 else 128 - rc
                failed_at = now
                log(f"qccl.launch: rank {rank} failed: {outcome[rank]}", file=sys.stderr, flush=True)
        if timeout is not None and now - start > timeout and running and status != 124:
            log(f"qccl.launch: timeout after {timeout:g} s; still running: ranks {sorted(running)}", file=sys.stderr,
                flush=True)
            status, failed_at, grace = 124, now, 0.0
        if failed_at is not None and running:
            if termed_at is None and now - failed_at >= grace:
                _stop(running, signal.SIGTERM)
                termed_at = now
            elif termed_at is not None and now - termed_at >= KILL_AFTER:
                _stop(running, signal.SIGKILL)
        time.sleep(0.02)
    if status:
        for rank in sorted(outcome):
            log(f"qccl.launch:   rank {rank} {outcome[rank]}", file=sys.stderr, flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qccl.launch", description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--nprocs", type=int, required=True, help="number of ranks (processes)")
    ap.add_argument("--port", type=int, default=None, help="rendezvous port (default: a free one)")
    ap.add_argument("-m", "--module", action="store_true", help="run the target as a module (python -m)")
    ap.add_argument("--timeout", type=float, default=None, help="stop every rank after this many seconds")
    ap.add_argument("--grace", type=float, default=GRACE,
                    help=f"seconds the other ranks get to end after a failure (default {GRACE:g})")
    ap.add_argument("target", help="script (or module with -m)")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if not 1 <= a.nprocs <= 8:
        ap.error(f"-n {a.nprocs}: qccl on QLink supports 1..8 ranks")
    port = a.port or free_port()
    procs = spawn(a.nprocs, [a.target] + a.args, port, module=a.module)
    running = dict(enumerate(procs))

    def stop(signum, frame):
        """The launcher is being stopped: the ranks go with it (SIGTERM, then SIGKILL)."""
        _stop(running, signal.SIGTERM)
        deadline = time.monotonic() + KILL_AFTER
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.02)
        _stop(running, signal.SIGKILL)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    store = host_store(port)      # after the fork: the store's threads must not exist in a forking process
    return wait(procs, a.timeout, store, a.grace)


if __name__ == "__main__":
    sys.exit(main())
