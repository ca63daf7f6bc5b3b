"""The one cross-rank check: every rank's calls are posted on the communicator's board and run only once matched.

Every mode feeds the same board: ranks driven by one thread (init_all, grouped or not), one thread per rank (the
board is shared by the threads), or one process per rank (each process's board receives every rank's call
signatures through the world's ``gather_calls`` and so takes the same decisions as the others).

Matching, as NCCL orders calls:
- the k-th collective of every rank (kind, count, dtype, op, root, algorithm) is one key; it is complete when every
  rank posted it, and a rank posting a different call there is a mismatch;
- the j-th send from rank s to rank d and the j-th receive of d from s are one key (count and dtype must agree).
A call runs (is *released*) only when its key is complete, so no data moves before every rank's call is known; a
rank's calls are released in its order, a segment at a time (one collective, or a run of point-to-point calls that
the schedule fuses). A mismatch refuses the posting group (nothing of it is recorded) and withdraws the calls it
conflicts with from every rank (their later calls move up one place), so every rank stays usable.

    >>> b = Board(2)
    >>> b.submit({0: [Call(Sig("allreduce", 4, "int32", "sum", algo="ring"), 0)]}, {0})[0]     # held: rank 1 missing
    {}
"""
from __future__ import annotations

import threading

from .calls import Call
from .errors import InvalidUsage, RemoteError

COLL = "coll"


def _family(call: Call) -> tuple[tuple, object]:
    """The sequence a call belongs to and its side in it: the collectives (side: the rank), or the send / receive
    pairs from rank s to rank d (side: "send" or "recv")."""
    s = call.sig
    if s.kind == "send":
        return ("p2p", call.rank, s.root), "send"
    if s.kind == "recv":
        return ("p2p", s.root, call.rank), "recv"
    return (COLL,), call.rank


class Ledger:
    """How many calls each side posted per sequence, and the keys some side has not posted yet (copied cheaply, so a
    group can be tried before it is committed)."""

    def __init__(self):
        self.posted: dict = {}      # family -> {side: calls posted}
        self.open: dict = {}        # (family, index) -> {side: Call}

    def copy(self) -> "Ledger":
        other = Ledger()
        other.posted = {f: dict(v) for f, v in self.posted.items()}
        other.open = dict(self.open)
        return other


class Board:
    """The calls of one communicator's ranks, matched before they run (see the module docstring)."""

    def __init__(self, nranks: int):
        self.nranks = nranks
        self.cond = threading.Condition(threading.RLock())
        self.ledger = Ledger()
        self.queue: dict[int, list[list[Call]]] = {r: [] for r in range(nranks)}
        self.count = [0] * nranks                   # calls each rank posted (for messages)
        self.last: dict = {}                        # each rank's last posted call (its Sig)
        self.gone: dict[int, str] = {}              # ranks destroyed or aborted
        self.regroups: dict = {}                    # split / shrink calls in progress (qccl.communicator)

    # -- posting -------------------------------------------------------------------------------------------------
    def _needed(self, family: tuple) -> set:
        return set(range(self.nranks)) if family[0] == COLL else {"send", "recv"}

    def _post(self, ledger: Ledger, call: Call, commit: bool):
        """Post one call on ``ledger``: (key, the call it conflicts with or None)."""
        family, side = _family(call)
        index = ledger.posted.get(family, {}).get(side, 0)
        key = (family, index)
        entry = ledger.open.get(key, {})
        for other in entry.values():
            if _conflict(call, other):
                return key, other
        entry = {**entry, side: call}
        ledger.posted[family] = {**ledger.posted.get(family, {}), side: index + 1}
        if set(entry) == self._needed(family):
            ledger.open.pop(key, None)
            if commit:
                for c in entry.values():
                    c.matched = True
        else:
            ledger.open[key] = entry
        if commit:
            call.key = key
        return key, None

    def submit(self, parts: dict[int, list[Call]], took_part: set[int]):
        """Post one group: ``parts`` maps each rank to its calls in order, ``took_part`` the ranks whose calls of this
        group are all here (a send to one of them must be matched in it). Returns (released, error): the segments
        now ready to run, per rank, and the InvalidUsage / RemoteError that refused the group (None when accepted;
        calls released by withdrawing a conflict are still returned)."""
        with self.cond:
            error = self._check_gone(parts)
            if error is not None:
                return {}, error
            trial = self.ledger.copy()
            for r in sorted(parts):
                for c in parts[r]:
                    key, other = self._post(trial, c, commit=False)
                    if other is not None:
                        return self._refuse(c, other, key)
            error = self._unmatched(trial, parts, took_part)
            if error is not None:
                return {}, error
            for r in sorted(parts):
                for c in parts[r]:
                    self._post(self.ledger, c, commit=True)
                    self.count[r] += 1
                    self.last[r] = c.sig      # a signature: the board never holds a communicator
                self.queue[r] += _segments(parts[r])
            return self._release(), None

    def _check_gone(self, parts):
        for r, calls in parts.items():
            for c in calls:
                family, _ = _family(c)
                needs = range(self.nranks) if family[0] == COLL else family[1:]
                for g in needs:
                    if g in self.gone:
                        cls = RemoteError if self.gone[g] == "aborted" else InvalidUsage
                        return cls(f"rank {g} of this communicator was {self.gone[g]}: {c} on rank {r} cannot "
                                   "complete")
        return None

    def _unmatched(self, trial: Ledger, parts, took_part):
        """A send or receive left open although its peer took part in this group; a send to self whose receive is not
        in the same run of point-to-point calls (the device copies it within that run)."""
        for r, calls in parts.items():
            for seg in _segments(calls):
                sent = [(c.sig.count, c.sig.dtype) for c in seg if c.sig.kind == "send" and c.sig.root == r]
                got = [(c.sig.count, c.sig.dtype) for c in seg if c.sig.kind == "recv" and c.sig.root == r]
                if sent != got:
                    return InvalidUsage(f"rank {r} sends {_items(sent)} to itself and receives {_items(got)} from "
                                        "itself in one run of point-to-point calls: a send to self needs its recv in "
                                        "the same group, with no collective between them")
        mine = {id(c) for calls in parts.values() for c in calls}
        for (family, index), entry in sorted(trial.open.items(), key=lambda kv: str(kv[0])):
            if family[0] == COLL:
                continue
            _, src, dst = family
            for side, c in entry.items():
                if id(c) not in mine:
                    continue
                peer = dst if side == "send" else src
                if peer in took_part:
                    theirs = [str(x) for x in parts.get(peer, [])]
                    what = "sends" if side == "send" else "receives"
                    want = "recv" if side == "send" else "send"
                    return InvalidUsage(
                        f"rank {c.rank} {what} {c.sig.count} x {c.sig.dtype} {'to' if side == 'send' else 'from'} "
                        f"rank {peer} ({c}), but rank {peer} posts no matching {want} in the same group (its calls "
                        f"there: {', '.join(theirs) or 'none'})")
        return None

    def _refuse(self, call: Call, other: Call, key):
        """A mismatch: refuse the group; withdraw the posted calls it conflicts with (on every rank)."""
        family, index = key
        if family[0] == COLL:
            error = InvalidUsage(f"mismatched calls: collective call {index} on this communicator is {other} on "
                                 f"rank {other.rank} but {call} on rank {call.rank}")
        else:
            _, src, dst = family
            send, recv = (call, other) if call.sig.kind == "send" else (other, call)
            error = InvalidUsage(f"mismatched point-to-point calls: rank {src} sends {send.sig.count} x "
                                 f"{send.sig.dtype} to rank {dst} ({send}), but rank {dst} receives "
                                 f"{recv.sig.count} x {recv.sig.dtype} from rank {src} ({recv})")
        if key in self.ledger.open and other in self.ledger.open[key].values():
            self._withdraw(key, error)
        return self._release(), error

    def _withdraw(self, key, error: BaseException) -> None:
        """Drop the calls posted at ``key`` (none of them ran: the key is incomplete) and move the same sides' later
        calls of that sequence up one place."""
        family, index = key
        entry = self.ledger.open.pop(key)
        for side, c in entry.items():
            self.ledger.posted[family][side] -= 1
            c.error = error
            self._remove(c)
        later = sorted(k for k in self.ledger.open if k[0] == family and k[1] > index)
        for k in later:
            moved = self.ledger.open.pop(k)
            self.ledger.open[(family, k[1] - 1)] = moved
            for c in moved.values():
                c.key = (family, k[1] - 1)
        self.cond.notify_all()

    def _remove(self, call: Call) -> None:
        segs = self.queue[call.rank]
        for seg in segs:
            if call in seg:
                seg.remove(call)
        self.queue[call.rank] = [s for s in segs if s]
        if call.comm is not None:
            call.comm._async_error = call.error

    def _release(self) -> dict[int, list[list[Call]]]:
        out: dict = {}
        for r, segs in self.queue.items():
            while segs and all(c.matched for c in segs[0]):
                out.setdefault(r, []).append(segs.pop(0))
        return out

    # -- completion, departures, waits -----------------------------------------------------------------------------
    def finish(self, released: dict, error: BaseException | None = None) -> None:
        """Mark released calls done (or failed with ``error``) and wake the threads that wait for them."""
        with self.cond:
            for segs in released.values():
                for seg in segs:
                    for c in seg:
                        if error is None:
                            c.done = True
                        else:
                            c.error = error
            self.cond.notify_all()

    def held(self, rank: int) -> list[Call]:
        """A rank's posted calls that have not been released (waiting for other ranks' calls)."""
        with self.cond:
            return [c for seg in self.queue[rank] for c in seg]

    def leave(self, rank: int, how: str) -> None:
        """A rank was destroyed or aborted: its held calls are dropped, and the held calls that need it fail."""
        with self.cond:
            self.gone[rank] = how
            cls = RemoteError if how == "aborted" else InvalidUsage
            for key in list(self.ledger.open):
                family, _ = key
                needs = range(self.nranks) if family[0] == COLL else family[1:]
                if rank not in needs:
                    continue
                for c in self.ledger.open.pop(key).values():
                    c.error = cls(f"rank {rank} of this communicator was {how}: {c} on rank {c.rank} cannot complete")
                    self._remove(c)
            self.cond.notify_all()

    def waiting(self) -> str:
        """Where every rank stands: its posted calls and the first call it waits in (for timeout messages)."""
        lines = []
        with self.cond:
            for r in range(self.nranks):
                held = [c for seg in self.queue[r] for c in seg]
                if r in self.gone:
                    state = self.gone[r]
                elif held:
                    state = f"waits in {held[0]} (its call {self.count[r] - len(held)})"
                else:
                    last = self.last.get(r)
                    state = f"is not in a call (last: {last})" if last is not None else "has posted no call"
                lines.append(f"rank {r} posted {self.count[r]} calls and {state}")
        return "; ".join(lines)

    def behind(self) -> list[int]:
        """The ranks that posted the fewest collectives: the ones the others wait for."""
        with self.cond:
            posted = self.ledger.posted.get((COLL,), {})
            counts = {r: posted.get(r, 0) for r in range(self.nranks) if r not in self.gone}
            if not counts:
                return []
            low = min(counts.values())
            return [r for r, n in counts.items() if n == low and n < max(counts.values())]


def _items(items) -> str:
    return ", ".join(f"{n} x {t}" for n, t in items) or "nothing"


def _conflict(call: Call, other: Call) -> bool:
    if call.sig.p2p:
        return (call.sig.count, call.sig.dtype) != (other.sig.count, other.sig.dtype)
    return call.sig != other.sig


def _segments(calls: list[Call]) -> list[list[Call]]:
    """A rank's calls of one group, cut into what runs as a unit: each collective alone, each run of consecutive
    point-to-point calls together (the schedule fuses and software-pipelines them)."""
    segs: list[list[Call]] = []
    for c in calls:
        if c.sig.p2p and segs and segs[-1][-1].sig.p2p:
            segs[-1].append(c)
        else:
            segs.append([c])
    return segs
