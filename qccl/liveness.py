"""Liveness across processes, carried by torch.distributed's own store and gloo (no protocol of qccl's own).

Every process of a world keeps, in the rendezvous store (the TCPStore that qccl.launch, torchrun's agent or rank 0
hosts), under the world's key prefix:

- ``beat/R``: a heartbeat ``seq|exchanges|what R waits in`` that a daemon thread rewrites every BEAT seconds;
- ``gone/R``: why rank R left (raised, exited, aborted, timed out), written once, with its last call.

The launcher writes ``qccl/launch/gone/R`` when a rank's process ends badly (exit code, signal), so even a rank that
was killed without a word is named. A blocking wait (the call-signature exchange, the packet exchange, the end of an
epoch, init) never blocks in gloo for long: it waits for the gloo work in slices, and between slices it looks at the
abort flag, the gone records and the heartbeats. So a peer that raised, exited, was killed or aborted turns every
other rank's pending and next call into RemoteError naming it within about ``dead_after`` seconds, and a peer that is
alive but never arrives turns it into DeadlockError after ``timeout`` seconds, naming the rank that is behind.

After such an error the world is broken for good (NCCL's async error): the gloo work it abandoned can never finish, so
the world's gloo group is kept alive on purpose (destroying it would join gloo's worker thread, which waits for that
work) and every later call raises the same error. A world that ends cleanly has its group destroyed at exit instead,
so no gloo thread outlives the interpreter (Liveness.close).

    >>> live = Liveness(store, rank=0, nranks=2, prefix="qccl/w0")      # doctest: +SKIP
    >>> live.wait(pg.allgather(outs, [mine]), "exchange 7")             # doctest: +SKIP
"""
from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
import time
from datetime import timedelta

from .errors import DeadlockError, InvalidUsage, QcclError, RemoteError, SystemError

# Defaults, overridable by the environment (so torchrun / qccl.launch scripts can set them without code changes).
BEAT = 0.25                 # seconds between heartbeats
# seconds without a heartbeat before a peer is declared dead: only for a silent death (SIGKILL under torchrun, a frozen
# process); a rank that raises, exits or aborts, and any death under qccl.launch, is named at once by a record
DEAD_AFTER = float(os.environ.get("QCCL_DEAD_AFTER", "10"))
TIMEOUT = float(os.environ.get("QCCL_TIMEOUT", "60"))          # seconds a wait waits for a live peer
INIT_TIMEOUT = float(os.environ.get("QCCL_INIT_TIMEOUT", "30"))  # seconds init waits for the world to assemble
SLICE = 0.05                # seconds of one gloo wait between two looks at the store
# one store operation; a store that is gone refuses at once, so this only bounds a store that is slow (a loaded host)
STORE_TIMEOUT = timedelta(seconds=30)
# seconds leave() waits for the heartbeat thread's last store call to return: that call's own timeout bounds it, so
# wait that long: 5 s can be too short on a loaded host, and a thread still in the store at finalization ends the
# process in std::terminate after every call passed (seen once in CI, 8 ranks on 2 cores); at once when it is idle
JOIN_BEAT = STORE_TIMEOUT.total_seconds() + 5.0
LAUNCH_PREFIX = "qccl/launch"            # where qccl.launch writes why a rank's process ended

_graveyard: list = []       # gloo groups with abandoned work: never destroyed (see the module docstring)


def keep_forever(obj) -> None:
    """Keep ``obj`` alive past interpreter shutdown: a gloo group whose worker waits for work that cannot finish
    would otherwise block the process's exit in its destructor."""
    _graveyard.append(obj)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def _ranks(rs) -> str:
    rs = sorted(rs)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ", ".join(map(str, rs[:-1])) + f" and {rs[-1]}"


class Liveness:
    """The liveness of one rank's world: heartbeat, gone records, deadlines and this rank's abort flag."""

    def __init__(self, store, rank: int, nranks: int, prefix: str, timeout: float | None = None,
                 dead_after: float | None = None):
        self.store, self.rank, self.nranks, self.prefix = store, rank, nranks, prefix
        self.timeout = TIMEOUT if timeout is None else float(timeout)
        self.dead_after = DEAD_AFTER if dead_after is None else float(dead_after)
        self.aborted = threading.Event()
        self.failure: QcclError | None = None      # sticky: once set, every call raises it
        self.doing = "init"                         # what this rank waits in (published with the heartbeat)
        self.last_call = "none yet"
        self.exchanges = 0
        self.waiting = False                        # in a wait of this world (else: in the rank's own program)
        self.left = False
        self.group = None           # the world's gloo group: kept forever once it holds abandoned work
        self._seen: dict[int, tuple[str, float]] = {}    # rank -> (last heartbeat seq, when it changed)
        self._looked = time.monotonic()                  # when this rank last looked at the heartbeats
        self._stop = threading.Event()
        self._beat_store = store.clone() if hasattr(store, "clone") else store
        for s in (self.store, self._beat_store):
            try:
                s.set_timeout(STORE_TIMEOUT)
            except Exception:       # noqa: BLE001  (a store without timeouts: its own default applies)
                pass
        self._beat_once(0)
        self._thread = threading.Thread(target=self._beat, name=f"qccl-heartbeat-{rank}", daemon=True)
        self._thread.start()
        _live.append(self)

    # -- what this rank publishes -------------------------------------------------------------------------------
    def _key(self, what: str, rank: int) -> str:
        return f"{self.prefix}/{what}/{rank}"

    def _beat_once(self, seq: int) -> None:
        self._beat_store.set(self._key("beat", self.rank),
                             f"{seq}|{self.exchanges}|{int(self.waiting)}|{self.doing}")

    def _beat(self) -> None:
        seq = 1
        while not self._stop.wait(BEAT):
            try:
                self._beat_once(seq)
            except Exception:       # noqa: BLE001  (a slow or gone store: the waits notice a gone one and say so)
                continue
            seq += 1

    def leave(self, reason: str) -> None:
        """Say why this rank leaves (once; never waits for a peer), and stop the heartbeat."""
        if self.left:
            return
        self.left = True
        self._stop.set()
        if threading.current_thread() is not self._thread:
            # a daemon thread still inside a store call when the interpreter finalizes is ended by pthread_exit,
            # whose unwind through torch's C++ ends the process with std::terminate (SIGABRT): wait for it here
            self._thread.join(JOIN_BEAT)
        try:
            self.store.set(self._key("gone", self.rank), f"{reason} (its last call: {self.last_call})")
        except Exception:       # noqa: BLE001  (the store is gone too: the peers see the heartbeat stop)
            pass

    def abort(self) -> None:
        """This rank aborts: a blocked wait of this rank raises at its next slice; the peers learn of it."""
        self.aborted.set()
        self._abandon()
        self.leave("aborted (comm.abort())")

    def fail(self, error: QcclError) -> QcclError:
        """Make ``error`` sticky (the world is broken) and tell the peers why this rank stops."""
        if self.failure is None:
            self.failure = error
            self._abandon()
            self.leave(f"stopped after an error: {error.message}")
        return error

    def _abandon(self) -> None:
        """The group may hold work that never ends: it must never be destroyed (its destructor would wait)."""
        if self.group is not None:
            keep_forever(self.group)
            self.group = None

    def close(self) -> None:
        """Destroy the world's gloo group now if it holds no work (no failure, no abort, no wait under way, no
        exception ending the process), else keep it forever. Destroying joins gloo's threads while the interpreter is
        whole: a process that exits with them running tears its C++ state down under them, the likely way a rank
        whose every call had passed ended in std::terminate in CI."""
        if self.failure is None and not self.aborted.is_set() and not self.waiting and _exit_reason is None:
            self.group = None       # the only reference: the destructor runs here
        else:
            self._abandon()

    # -- what the others published ---------------------------------------------------------------------------------
    def _gone(self) -> dict[int, str]:
        """rank -> why it left, from this world's records and the launcher's."""
        out = {}
        for r in range(self.nranks):
            if r == self.rank:
                continue
            for key in (self._key("gone", r), f"{LAUNCH_PREFIX}/gone/{r}"):
                if self.store.check([key]):
                    out[r] = self.store.get(key).decode(errors="replace")
                    break
        return out

    def _beats(self) -> dict[int, list[str]]:
        keys = [self._key("beat", r) for r in range(self.nranks)]
        values = self.store.multi_get(keys)
        return {r: v.decode(errors="replace").split("|", 3) for r, v in enumerate(values)}

    def check(self, what: str) -> None:
        """Raise if this rank aborted, the world is broken, or a peer left or stopped beating."""
        problem = self.problem(what)
        if problem is not None:
            raise self.fail(problem)

    def problem(self, what: str) -> QcclError | None:
        """What stops this rank's wait (None: nothing yet). Raises at once for this rank's own abort."""
        if self.aborted.is_set():
            raise InvalidUsage(f"rank {self.rank}: the communicator was aborted while {what} waited")
        if self.failure is not None:
            return self.failure
        try:
            gone = self._gone()
            beats = self._beats()
        except Exception as e:      # noqa: BLE001
            return RemoteError(f"rank {self.rank} lost the rendezvous store during {what} (the launcher, torchrun's "
                               f"agent or rank 0 that hosts it is gone): {str(e).splitlines()[0][:200]}")
        if gone:
            lines = "; ".join(f"rank {r} {why}" for r, why in sorted(gone.items()))
            return RemoteError(f"rank {self.rank}: {_ranks(gone)} left the communicator during {what}: {lines}")
        now = time.monotonic()
        if now - self._looked > self.dead_after / 2:
            self._seen.clear()      # this process itself was starved (a loaded host): its clock says nothing of theirs
        self._looked = now
        dead = []
        for r, (seq, _, _, doing) in beats.items():
            if r == self.rank:
                continue
            old = self._seen.get(r)
            if old is None or old[0] != seq:
                self._seen[r] = (seq, now)
            elif now - old[1] > self.dead_after:
                dead.append((r, doing))
        if dead:
            lines = "; ".join(f"rank {r} (last seen in {doing})" for r, doing in dead)
            return RemoteError(f"rank {self.rank}: {_ranks([r for r, _ in dead])} stopped beating for "
                               f"{self.dead_after:g} s during {what} (killed, or frozen): {lines}")
        return None

    def behind(self) -> str:
        """Where every rank waits (its exchange count and call), for a timeout message."""
        try:
            beats = self._beats()
        except Exception:       # noqa: BLE001
            return "(the store cannot tell)"
        counts = {r: int(b[1]) for r, b in beats.items()}
        away = [r for r, b in beats.items() if b[2] == "0"]         # in its own program, not in a qccl wait
        low = min(counts.values())
        slow = away or [r for r, c in counts.items() if c == low]
        lines = "; ".join(f"rank {r} at exchange {counts[r]}, " +
                          (f"in {beats[r][3]}" if beats[r][2] == "1" else f"in its own program after {beats[r][3]}")
                          for r in sorted(beats))
        return f"{_ranks(slow)} behind: {lines}"

    # -- waits -------------------------------------------------------------------------------------------------------
    def wait(self, work, what: str, timeout: float | None = None) -> None:
        """Wait for a gloo work; RemoteError when a peer leaves or dies, DeadlockError after ``timeout`` seconds,
        InvalidUsage when this rank aborts meanwhile. The first slice waits without looking at the store (the
        common case: every peer is there)."""
        self.doing, self.waiting = what, True
        try:
            self._wait(work, what, timeout)
        except BaseException as e:
            # whatever ended the wait, the work may never end now: the world is broken (later calls raise this) and
            # its group must outlive the work (fail() and abort() keep it forever). qccl's own errors came through
            # fail() or abort() already; anything else (a KeyboardInterrupt the program then catches) goes there now
            if self.failure is None and not self.aborted.is_set():
                self.fail(SystemError(f"rank {self.rank}: {what} was interrupted by {type(e).__name__}; its work "
                                      "may never end, so this communicator cannot be used again"))
            raise
        finally:
            self.waiting = False

    def _wait(self, work, what: str, timeout: float | None) -> None:
        limit = self.timeout if timeout is None else timeout
        start = time.monotonic()
        looked = start
        while True:
            try:
                work.wait(timedelta(seconds=SLICE))
                return
            except Exception as e:      # noqa: BLE001  (gloo: "timed out" is our slice; else a peer's socket closed)
                text = str(e)
                if "timed out" not in text.lower():
                    self._closed(what, text)
            now = time.monotonic()
            if self.aborted.is_set() or now - looked >= 4 * SLICE:
                looked = now
                problem = self.problem(what)
                if problem is not None:
                    # a peer that left after its own last exchange sent all its data: the work may still end
                    try:
                        work.wait(timedelta(seconds=4 * SLICE))
                        return
                    except Exception:       # noqa: BLE001
                        raise self.fail(problem) from None
            if now - start > limit:
                raise self.fail(DeadlockError(f"rank {self.rank} waited {limit:g} s in {what}: "
                                              f"{self.behind()}", {}))

    def _closed(self, what: str, text: str) -> None:
        """gloo saw a peer's socket close: find out who (the launcher's record, a gone record, or the heartbeat)."""
        end = time.monotonic() + self.dead_after + 2 * BEAT
        while time.monotonic() < end:
            self.check(what)
            time.sleep(BEAT / 2)
        raise self.fail(RemoteError(f"rank {self.rank}: a peer closed its connection during {what} and no rank "
                                    f"says why: {text.splitlines()[0][:200]}"))

    def poll_until(self, ready, what: str, timeout: float, missing) -> None:
        """Poll ``ready()`` (a store question) until it is true; on timeout raise SystemError with ``missing()``."""
        start = time.monotonic()
        while not ready():
            if self.aborted.is_set():
                raise InvalidUsage(f"rank {self.rank}: aborted during {what}")
            if time.monotonic() - start > timeout:
                raise SystemError(f"rank {self.rank} waited {timeout:g} s for {missing()} during {what}: was the "
                                  "script started with qccl.launch or torchrun, with the same number of ranks?")
            time.sleep(0.02)


_live: list[Liveness] = []


def _at_exit() -> None:
    """Tell the peers this rank leaves, without waiting for them (a peer still waiting on it then gets RemoteError),
    stop the heartbeats before finalization (see leave()) and destroy the worlds' idle gloo groups (see close()); a
    group that may hold abandoned work is kept past interpreter shutdown, as its destructor would wait for it."""
    for live in _live:
        live.leave("exited" if _exit_reason is None else _exit_reason)
        live.close()


_exit_reason: str | None = None
_previous_hook = sys.excepthook


def _excepthook(kind, value, tb) -> None:
    global _exit_reason
    _exit_reason = f"raised {kind.__name__}: {str(value).splitlines()[0][:300] if str(value) else ''}"
    _at_exit()
    _previous_hook(kind, value, tb)


sys.excepthook = _excepthook
atexit.register(_at_exit)
