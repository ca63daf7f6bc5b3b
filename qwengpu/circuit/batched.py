"""Several ranks in one forward: the devices of a lockstep window feed their tokens together.

``run_windows(devices, ranks, window)`` runs ``window(rank)`` for every rank. When two or more of the devices run
model backends on one shared model (QLink's ranks in one process share it), each window runs in its own thread and
every run of tokens a device gives its model (the tokens fed since the model's last prediction: the model's own
token, a host copy, a ROM row, a peer's packets; qwengpu.device) waits for the other devices' next runs: the runs
that meet, when of one length, run as ONE forward with the batch dimension = rank, each rank keeping its own cache
(``ModelBackend.forward_batch``). Ranks in lockstep feed runs of one length at the same time, so a tick is one
batched forward per prediction instead of one forward per token and rank. Devices that are done with their window
leave the batch, so the others never wait for them. Any other backend runs the windows one after another, as
before.

Only tokens move between the threads, and each row of a batched forward computes what the rank's forward alone
would: exactly on the compiled layers; on a merged model's full-attention layers, whose keys are padded to the
longest rank's and the padding masked, up to the last bits of the base's values, which cannot move a GPU token's
argmax (the margin argument in the circuit README). So the streams are the unbatched ones (tests/test_batched.py
checks it on the circuit and the bf16 model, tests/test_merge.py on a merged model).

    from qwengpu.circuit.batched import run_windows
    statuses = run_windows(devices, [0, 1, 2, 3], lambda rank: engine.window(rank))
"""
from __future__ import annotations

import threading

from ..isa import MachineError

DEADLINE = 600.0        # seconds a rank waits for the batch's forward before it is called stuck


def batchable(devices: dict, ranks) -> bool:
    """Whether the ranks' devices (more than one) are model backends that share one model."""
    backends = [devices[r].backend for r in ranks]
    if len(backends) < 2 or not all(hasattr(b, "forward_batch") for b in backends):
        return False
    return len({id(b.model) for b in backends}) == 1


def run_windows(devices: dict, ranks, window, force: bool = False, rendezvous: "Rendezvous | None" = None) -> dict:
    """``{rank: window(rank)}``, an exception a window raised standing in for its result. ``force`` batches
    backends without ``forward_batch`` too (each member then feeds in turn inside the rendezvous: the circuit's
    tests of the mechanism); ``rendezvous`` lets a caller read the forwards and batch sizes afterwards."""
    ranks = list(ranks)
    if not (force or batchable(devices, ranks)):
        out = {}
        for rank in ranks:
            try:
                out[rank] = window(rank)
            except Exception as error:          # the caller reports it at the exchange, as for a batched window
                out[rank] = error
        return out
    rendezvous = rendezvous if rendezvous is not None else Rendezvous()
    originals = {rank: devices[rank].backend for rank in ranks}
    out: dict = {}

    def run(rank: int) -> None:
        try:
            out[rank] = window(rank)
        except Exception as error:
            out[rank] = error
        finally:
            rendezvous.leave(rank)

    for rank in ranks:
        devices[rank].backend = Member(rendezvous, rank, originals[rank])
        rendezvous.join(rank)
    try:
        threads = [threading.Thread(target=run, args=(rank,), name=f"qwengpu-rank-{rank}") for rank in ranks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for rank in ranks:
            devices[rank].backend = originals[rank]
    return {rank: out[rank] for rank in ranks}


class Member:
    """A device's backend during a batched window: feeds go through the rendezvous, the rest to the backend."""

    def __init__(self, rendezvous: "Rendezvous", rank: int, backend):
        self._rendezvous, self._rank, self._backend = rendezvous, rank, backend

    def feed(self, token: int) -> None:
        self._rendezvous.feed(self._rank, self._backend, [token])

    def feed_run(self, tokens) -> None:
        self._rendezvous.feed(self._rank, self._backend, list(tokens))

    def __getattr__(self, name):
        return getattr(self._backend, name)


class Rendezvous:
    """Collects one run of tokens (a token, or what its device fed since the model's last prediction) from every
    rank still in its window, then runs runs of one length as one forward."""

    def __init__(self):
        self._cond = threading.Condition()
        self._active: set[int] = set()
        self._pending: dict[int, tuple] = {}       # rank -> (backend, run)
        self._done: dict[int, BaseException | None] = {}
        self.forwards = 0
        self.batch_sizes: list[int] = []

    def join(self, rank: int) -> None:
        with self._cond:
            self._active.add(rank)

    def leave(self, rank: int) -> None:
        with self._cond:
            self._active.discard(rank)
            self._maybe_run()

    def feed(self, rank: int, backend, run: list[int]) -> None:
        with self._cond:
            self._pending[rank] = (backend, run)
            self._maybe_run()
            if not self._cond.wait_for(lambda: rank in self._done, timeout=DEADLINE):
                raise MachineError(f"rank {rank} waited {DEADLINE:g} s for a batched forward: the other ranks "
                                   f"{sorted(self._active - {rank})} fed nothing")
            error = self._done.pop(rank)
        if error is not None:
            raise error

    def _maybe_run(self) -> None:
        """Called with the lock held: when every active rank has a run pending, run the runs of each length as one
        forward (ranks in lockstep feed runs of one length at the same time, so usually one forward a tick)."""
        if not self._pending or set(self._pending) != self._active:
            return
        ranks = sorted(self._pending)
        groups: dict[int, list] = {}
        for rank in ranks:
            groups.setdefault(len(self._pending[rank][1]), []).append(self._pending[rank])
        self._pending = {}
        try:
            for members in groups.values():
                backends = [backend for backend, _ in members]
                runs = [run for _, run in members]
                forward = getattr(backends[0], "forward_batch", None)
                if forward is not None and len(backends) > 1:
                    forward(backends, runs)
                    self.forwards += 1
                else:
                    for backend, run in members:
                        self.forwards += _feed_alone(backend, run)
                self.batch_sizes.append(len(members))
            errors = [None] * len(ranks)
        except BaseException as error:          # every rank of the tick learns of it
            errors = [error] * len(ranks)
        for rank, error in zip(ranks, errors):
            self._done[rank] = error
        self._cond.notify_all()


def _feed_alone(backend, run: list[int]) -> int:
    """Feed one rank's run on its own; the number of forwards it took."""
    if hasattr(backend, "feed_run"):
        backend.feed_run(run)
        return 1
    for token in run:
        backend.feed(token)
    return len(run)
