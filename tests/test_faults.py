"""Faults across processes end in qccl errors on every rank within the bound, never in hangs or leftover processes.

A few injections of qccl_bench.faults (the whole set, 100 injections: ``python -m qccl_bench.faults --injections
100``), abort() from another thread unblocking a blocked call, and init errors that name what is missing."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("fault,n", [("raise", 2), ("kill", 2), ("mismatch", 2), ("launcher", 2), ("raise", 4),
                                     ("kill", 4), ("mismatch", 4)])
def test_injected_fault_ends_every_rank_with_an_error(fault, n):
    from qccl_bench.faults import bound, inject, judge
    res = inject(fault, n, victim=n - 1, at=1, calls=4, seed=3)
    verdict = judge(res)
    assert not res["hung"] and res["left"] == 0, res["log"]
    assert res["status"] != 0, "the launcher reports the failure"
    assert verdict["ok"], (verdict, res["ranks"], res["log"])
    for rep in res["ranks"]:
        if fault in ("raise", "kill") and rep["rank"] != n - 1:
            assert rep["error"].startswith("RemoteError") and f"rank {n - 1}" in rep["error"], rep
            assert rep["delay"] <= bound(fault, rep["rank"], n - 1)
        if fault == "mismatch":
            assert rep["error"].startswith("InvalidUsage") and "mismatched" in rep["error"], rep
            assert rep["recovered"], "the calls after the mismatch are right"
    if fault == "kill":
        assert "SIGKILL" in res["ranks"][0]["error"]
        assert f"rank {n - 1} failed: was killed by SIGKILL" in res["log"]


@pytest.mark.parametrize("fault,n", [("kill", 2), ("kill", 4), ("mismatch", 4)])
def test_under_torchrun_a_fault_is_named_or_torchrun_stops_the_rest(fault, n):
    from qccl_bench.faults import bound, inject, judge
    res = inject(fault, n, victim=1, at=1, calls=4, seed=4, launcher="torchrun")
    assert judge(res)["ok"], (res["ranks"], res["log"])
    assert not res["hung"] and res["left"] == 0, res["log"]
    for rep in res["ranks"]:
        if fault == "mismatch":         # every rank's own check refuses it, and the calls after it are right
            assert rep["error"].startswith("InvalidUsage") and "mismatched" in rep["error"], rep
            assert rep["recovered"], rep
        elif rep["rank"] != 1 and rep["error"] is not None:        # qccl's error came before torchrun's SIGTERM
            assert rep["error"].startswith("RemoteError") and "rank 1" in rep["error"], rep
            assert rep["delay"] <= bound("kill", rep["rank"], 1)


def _launch(tmp_path, n, body: str, env=None, timeout=120):
    script = tmp_path / "script.py"
    script.write_text("import os, sys, time, threading\nimport numpy as np\nimport qccl\n"
                      "rank, n = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])\n" + body)
    e = dict(os.environ, **(env or {}))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "qccl.launch", "-n", str(n), "--grace", "20", str(script)], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout, env=e)
    return r, time.monotonic() - t0


def test_abort_from_another_thread_unblocks_the_call(tmp_path):
    r, _ = _launch(tmp_path, 2, """
c = qccl.Communicator.init(n, rank, qccl.get_unique_id())
x = np.arange(4, dtype=np.int32); y = np.zeros(4, np.int32)
c.allreduce(x, y)
if rank == 1:
    time.sleep(4)        # rank 0's next call waits for it
    try:
        c.allreduce(x, y)
    except qccl.QcclError as e:
        print('rank 1 error', type(e).__name__, e, flush=True)
        sys.exit(2)
    sys.exit(0)
threading.Timer(1.0, c.abort).start()
t = time.monotonic()
try:
    c.allreduce(x, y)
except qccl.QcclError as e:
    print(f'rank 0 unblocked after {time.monotonic() - t:.2f} s:', type(e).__name__, e, flush=True)
    sys.exit(3)
""")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    line = next(x for x in out.splitlines() if x.startswith("rank 0 unblocked"))
    assert float(line.split()[4]) < 3.0 and "InvalidUsage" in line and "aborted" in line, out
    assert "rank 1 error RemoteError" in out and "rank 0" in out and "aborted" in out, out


def test_mismatched_unique_ids_are_refused_at_init(tmp_path):
    r, took = _launch(tmp_path, 2, """
uid = qccl.get_unique_id()
try:
    qccl.Communicator.init(n, rank, qccl.UniqueId(f'id-of-rank-{rank}', uid.address))
except qccl.QcclError as e:
    print(f'rank {rank}:', type(e).__name__, e, flush=True)
    sys.exit(4)
""")
    out = r.stdout + r.stderr
    assert r.returncode == 4, out
    assert "InvalidArgument" in out and "id-of-rank-0" in out and "id-of-rank-1" in out, out


def test_a_world_that_never_assembles_names_the_missing_ranks(tmp_path):
    from qccl.launch import free_port
    script = tmp_path / "alone.py"
    script.write_text("import qccl\nqccl.Communicator.init(4, 0, qccl.UniqueId('t', '127.0.0.1:%d'))\n" % free_port())
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, QCCL_INIT_TIMEOUT="3"))
    took = time.monotonic() - t0
    assert r.returncode != 0
    assert "SystemError" in r.stderr and "waited 3 s for ranks 1, 2 and 3" in r.stderr, r.stderr
    assert "qccl.launch or torchrun" in r.stderr
    assert took < 60


@contextlib.contextmanager
def _one_rank(wrap=lambda store: store):
    """A one-rank Liveness on an in-process TCPStore (``wrap`` may stand in front of the store); forgotten after."""
    import datetime
    import torch.distributed as dist
    from qccl import liveness as L
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=10))
    live = L.Liveness(wrap(store), rank=0, nranks=1, prefix="t")
    try:
        yield store, live
    finally:
        live.leave("exited")
        L._live.remove(live)


def test_leave_waits_for_the_heartbeat_threads_last_store_call():
    """A heartbeat thread still inside a store call when the interpreter finalizes is ended by pthread_exit inside
    torch's C++, and the process aborts (SIGABRT after every result was right: CI lost a 4-process run to it on a
    loaded host). So leave(), which runs at exit, returns only once the thread has ended, even when each heartbeat
    blocks in C++ (here a 0.3 s wait for a key that never comes, as a slow store does)."""
    import datetime

    class SlowStore:
        def __init__(self, store):
            self.store = store

        def clone(self):
            return self

        def set_timeout(self, t):
            pass

        def set(self, key, value):
            if "/beat/" in key:
                try:
                    self.store.wait(["never"], datetime.timedelta(seconds=0.3))
                except Exception:       # noqa: BLE001  (the wait's timeout is the point)
                    pass
            self.store.set(key, value)

    with _one_rank(SlowStore) as (store, live):
        time.sleep(0.1)                 # the thread is inside its first slow heartbeat
        assert live._thread.is_alive()
        live.leave("exited")
        assert not live._thread.is_alive()
        assert store.get("t/gone/0").decode().startswith("exited")


def test_at_exit_an_idle_world_joins_gloos_threads_and_a_broken_one_keeps_them(tmp_path):
    """A process that exits with gloo's threads running tears its C++ state down under them (a rank whose every call
    had passed ended in std::terminate in CI). So at exit an idle world's gloo group is destroyed, which joins its
    threads; a world whose wait was abandoned (here: aborted) keeps its group, whose destructor would wait for it."""
    r, _ = _launch(tmp_path, 2, """
from qccl import liveness
def gloo_threads():
    return sorted(t for t in (open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task'))
                  if 'gloo' in t)
c = qccl.Communicator.init(n, rank, qccl.get_unique_id())
x = np.arange(4, dtype=np.int32); y = np.zeros(4, np.int32)
c.allreduce(x, y)
print(f'rank {rank} before: {gloo_threads()}', flush=True)
done = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'rank0-done')
if rank == 1:           # abort only once rank 0 is through: an abort during its last exchange would fail rank 0
    deadline = time.monotonic() + 60
    while not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.05)
    c.abort()
liveness._at_exit()
print(f'rank {rank} after: {gloo_threads()}', flush=True)
if rank == 0:
    open(done, 'w').close()
""")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for rank in (0, 1):
        assert f"rank {rank} before: ['gloo_tcp_loop', 'pt_gloo_runloop'" in out, out
    assert "rank 0 after: []" in out, out
    assert "rank 1 after: ['gloo_tcp_loop'" in out, out


def test_a_wait_ended_by_any_exception_keeps_the_group_and_an_idle_one_is_released():
    """close() at exit destroys an idle world's gloo group (joining its threads) but must never destroy one whose
    work may still be pending: a wait that a KeyboardInterrupt ended (and the program caught) leaves such work, and
    the world is broken from then on."""
    import qccl
    from qccl import liveness as L

    class Interrupted:
        def wait(self, timeout):
            raise KeyboardInterrupt

    with _one_rank() as (_, live):
        pending, idle = object(), object()
        live.group = pending
        with pytest.raises(KeyboardInterrupt):
            live.wait(Interrupted(), "an exchange")
        assert live.group is None and any(g is pending for g in L._graveyard)
        with pytest.raises(qccl.QcclError, match="an exchange was interrupted by KeyboardInterrupt"):
            live.check("the next call")        # the world is broken for good, and says why
        live.failure = None                    # (only to test close() on an idle group below)
        live.group = idle
        live.close()
        assert live.group is None and not any(g is idle for g in L._graveyard)
