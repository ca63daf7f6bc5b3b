"""Programs longer than the ROM: overlays, each a program of at most 32 blocks, run one after another.

The ROM holds 32 blocks, and one float32 add is about 65 integer ops. A program that does not fit is cut into
*overlays*: contiguous runs of the op list, each lowered on its own (fusion, registers) into at most 32 blocks.
A warp leaves an overlay as it leaves a barrier (qwengpu.lowering.barriers): it stores the registers still needed
that the overlay wrote or did not load (each kept register has a slot, a word per thread, which no other register
takes while it is kept) and the number of the point it goes on from (its resume word), and ends in a parking
block. The device runs the launch in rounds: every warp of the block on overlay 0, then the warps that parked on
overlay 1 (its rows fed into the ROM as program tokens, as at a launch), then 2, and round again to 0,
until no warp parks. Each overlay starts with a dispatch that reads the resume word: a point in this overlay
reloads the registers and goes on there; a point elsewhere parks again at once, state untouched. So a branch may go
from any overlay to any other, a loop around a cut included (each trip then costs a round of ROM feeds). The device
only follows the model's control tokens and feeds rows in a fixed order; every value, the resume points included,
is computed and stored by the machine.

The cuts: from each overlay's first op, a long run whose program fits (blocks and registers): the rest if it is
short and fits, else found by galloping from the last overlay's length, then bisection (each trial lowers only
the overlay it tries); then, in the run's last quarter, where the fewest registers are live across the cut
(anywhere in the run when the state would not fit memory otherwise); and not inside a loop that fits an overlay of
its own (the cut moves before it, or after it where the run starts at it, or every trip would cost a round of the
overlays). Never inside a span of ops kept whole (``MOp.whole``; the search steps over them): a warp instruction (a
shuffle's stores to the exchange words and its loads) or a lane's turn at an atomic (its load of the word, then its
store; a 64-bit atomic's two words), since the block's other warps run an overlay before a warp goes on to the next
one, and would write those words in between. An atomic's loop of turns is a loop like any: where it fits an
overlay it is not cut, so a warp's atomic is done, its lanes in order, before another warp's starts; where it does
not, the warps take turns at each cut, each lane's turn still whole (a float atomicAdd's compare-and-swap loop,
about 170 blocks: a later warp's swap fails in each round in which an earlier warp's lane changed the word). Warps
that come to an atomic in the same round (after a __syncthreads, or by paths of as many overlays) so update in
thread order, the order a C reference that runs the threads one after another reproduces; a warp that comes in an
earlier round goes first, one of the orders a GPU may take.

Layout of one overlay's ops (overlay 0 enters its body directly on its first run, when the resume word is 0)::

    overlay 0:  [resume word != 0 -> R] body [exits] R: [entries] [park] [reloads]
    overlay k:  [entries] [park] [reloads] body [exits]
    entry:  resume word == id(p) -> reload(p)        reload: the kept registers loaded back, then a jump to p
            (from the overlay's first op, each register is loaded where first used instead: _Cutter.overlay)
    exit:   the kept registers the overlay wrote stored, id(p) into the resume word, park (an edge from the body
            to a point p elsewhere)

A __syncthreads of several warps is a resume point too, left by a parking block of its own (``waits``): a warp
that ends there waits until no warp is left to run in the rounds (every warp has reached the barrier or finished),
then runs again on the overlay it stopped on, so none passes the barrier before every warp reached it.
"""
from __future__ import annotations

import bisect
import dataclasses

from ..isa import MachineError
from . import deadline
from .barriers import kept_across, live_in, observed_keeps
from .mop import MOp

__all__ = ["split", "Overlays"]


@dataclasses.dataclass
class Overlays:
    """Where a program is cut (``bounds``: each overlay's first op, then the end) and the words per thread the
    overlays' state takes (the resume word and the kept registers' slots)."""
    bounds: list[int]
    slots: int
    cutter: "_Cutter"

    def programs(self, base: int) -> list[list[MOp]]:
        """Each overlay's ops (over virtual registers, before fusion), its state from word ``base`` on."""
        return self.cutter.programs(self.bounds, base)[0]


class _Layout:
    """Ops with branches to named places, resolved to indices once every place is known."""

    def __init__(self):
        self.ops: list[MOp] = []
        self.places: dict = {}
        self.branches: list[tuple[int, object]] = []

    def place(self, key) -> None:
        self.places[key] = len(self.ops)

    def add(self, mop: MOp, to=None) -> None:
        if to is not None:
            mop.target = "overlay"
            self.branches.append((len(self.ops), to))
        self.ops.append(mop)

    def resolve(self) -> list[MOp]:
        for i, key in self.branches:
            self.ops[i].target_index = self.places[key]
        for _, key in self.branches:
            if self.places[key] < len(self.ops):
                self.ops[self.places[key]].labels.add("overlay")     # a branch target: fusion keeps it a block start
        return self.ops


class _Cutter:
    """The program's edges across cuts and what each resume point keeps, for one list of cuts."""

    def __init__(self, mops: list[MOp], threads: int):
        self.mops, self.threads, self.base = mops, threads, 0
        self.cycles = False         # overlay 0 may be entered again (set when a later cut makes a loop cross one)
        self.slot: dict[str, int] = {}     # each kept register's slot (programs() assigns them)
        self.kept = kept_across(mops, live_in(mops, observed_keeps(mops, atoms=True)))
        # what targets() and programs() look at for every list of cuts, found once: the branches (op, target), the
        # ops after a __syncthreads, and whether the program has one
        n = len(mops)
        self.jumps = [(i, m.target_index) for i, m in enumerate(mops) if m.jumps and m.target_index < n]
        self.after_barriers = [i + 1 for i, m in enumerate(mops) if m.barrier and i + 1 < n]
        self.barrier = any(m.barrier for m in mops)
        # no cut between two ops of one warp instruction or of a lane's turn at an atomic: the block's other warps
        # run an overlay before a warp goes on to the next, and would write the exchange words between its store and
        # its loads, or the word between a lane's load and store of it (from its first op to its last, the lane
        # predicates between included)
        spans: dict[int, list[int]] = {}
        for i, m in enumerate(mops):
            if m.whole:
                spans.setdefault(m.whole, [i, i])[1] = i
        self.uncut = {i for first, last in spans.values() for i in range(first + 1, last + 1)}

    def cut_from(self, stop: int) -> int:
        """The first op from ``stop`` on that a cut may go before (past the spans kept whole)."""
        while stop in self.uncut:
            stop += 1
        return stop

    def loops(self) -> list[tuple[int, int]]:
        """(first op, op of the branch back to it) of each loop: a branch to itself or an earlier op."""
        return [(target, i) for i, target in self.jumps if target <= i]

    @property
    def resume_word(self) -> tuple:
        return ("tid", self.base)

    def targets(self, bounds: list[int]) -> list[int]:
        """The ops entered across a cut: a branch's target in another overlay, the op after a cut that the op
        before it falls through to, and the op after a __syncthreads."""
        n = len(self.mops)
        found = {t for i, t in self.jumps if bisect.bisect_right(bounds, i) != bisect.bisect_right(bounds, t)}
        found.update(self.after_barriers)
        found.update(b for b in bounds[1:] if b < n and self.mops[b - 1].branch != "always")
        return sorted(found)

    def slot_word(self, reg: str) -> tuple:
        """Where a lane keeps register ``reg`` between overlays: a word per thread, slot by slot above the resume
        words."""
        return ("tid", self.base + self.slot[reg] * self.threads)

    def overlay(self, start: int, stop: int, ids: dict[int, int], cycles: bool) -> list[MOp]:
        """The ops of the overlay holding ops start..stop-1; ``ids``: every resume point's number.

        A register is kept in its slot (``slot_word``) across cuts, and a slot is never reused while its register
        is kept, so a register the overlay does not write is still in its slot when the warp leaves: it is stored
        only if written. From the overlay's first op, until the first op a branch of the overlay reaches, each
        register is loaded just before its first use (a float op's temporaries and a loop's state need not share
        the 15 registers at once); other entries load all they keep."""
        n, layout = len(self.mops), _Layout()
        mine = [t for t in ids if start <= t < stop]
        note = dict(line=0, text="")
        inner = {m.target_index for m in self.mops[start:stop]
                 if m.jumps and start <= m.target_index < stop}
        inner |= {t for t in mine if t != start}
        lazy = start > 0 and start in mine          # the first op's registers load where first used

        def reload(reg: str):
            layout.add(MOp("a", self.slot_word(reg), dst=reg, load=True, restore=True, **note))

        def entries_and_reloads():
            for t in mine:
                layout.add(MOp("eq", self.resume_word, (None, ids[t]), load=True, branch="nonzero", restore=True,
                               text=f"overlay: resume at point {ids[t]}"), to=("reload", t))
            layout.add(MOp("a", branch="always", target="exit", parks=True, text="overlay: resume elsewhere"))
            for t in sorted(mine, key=lambda t: t == start):      # the overlay's first op last: it falls through
                layout.place(("reload", t))
                if not (lazy and t == start):
                    for reg in self.kept[t]:
                        reload(reg)
                if t != start or start == 0:
                    layout.add(MOp("a", branch="always", **note), to=("op", t))

        if start == 0:
            if cycles:
                layout.add(MOp("ne", self.resume_word, (None, 0), load=True, branch="nonzero", restore=True,
                               text="overlay: resumed"), to=("entries",))
        else:
            entries_and_reloads()
        written = {m.dst for m in self.mops[start:stop] if m.dst}
        exits: list[tuple[int, tuple]] = []
        pending = list(self.kept[start]) if lazy else []
        straight, written_so_far, falls = lazy, set(), True

        # A register kept at every entry came in from its slot (loaded, or pending: to be loaded at its first use);
        # any other started this run at 0, a register's value until written, and its slot may hold anything (a
        # register sharing the slot, an earlier launch), so it is stored, 0 or not.
        loaded = set.intersection(*(set(self.kept[t]) for t in mine)) if start > 0 and mine else set()

        def stored(t: int) -> tuple:
            """The registers kept at t that a warp leaving from here must store: those this overlay wrote (on the
            way so far, while the path from the first op is straight), and those not loaded at every entry."""
            fresh = written_so_far if straight else written
            return tuple(r for r in self.kept[t] if r in fresh or (r not in loaded and r not in pending))

        def leave(t: int, regs: tuple, waits: bool = False):
            """Keep ``regs`` (of those live at op t), t's number into the resume word, and park."""
            for reg in regs:
                layout.add(MOp("a", (reg, 0), store=self.slot_word(reg), **note))
            layout.add(MOp("a", (None, ids[t]), store=self.resume_word, branch="always", target="exit", parks=True,
                           waits=waits, text=f"{'__syncthreads' if waits else 'overlay'}: leave for point {ids[t]}"))

        for i in range(start, stop):
            mop = self.mops[i].copy()
            jumps_inside = mop.jumps and start <= mop.target_index < stop
            if straight and (i in inner or jumps_inside or mop.barrier):
                if falls:                           # the rest of the overlay may use any of them
                    for reg in pending:
                        reload(reg)
                pending, straight = [], False
            for reg in [r for r in pending if r in mop.reads()]:
                reload(reg)
                pending.remove(reg)
            if mop.dst:                             # (written before its branch, if it has one, is taken)
                written_so_far.add(mop.dst)
                if mop.dst in pending:              # written before any read: its kept value is not needed
                    pending.remove(mop.dst)
            layout.place(("op", i))
            if mop.barrier:                         # every warp waits here, then goes on from the next op
                if i + 1 < n:
                    leave(i + 1, stored(i + 1), waits=True)
            elif mop.jumps:
                t = mop.target_index
                if t >= n:
                    mop.target, mop.target_index = "exit", None      # a branch to the end: the warp exits
                    layout.add(mop)
                elif start <= t < stop:
                    layout.add(mop, to=("op", t))
                else:
                    exits.append((t, stored(t)))
                    layout.add(mop, to=("exit",) + exits[-1])
            else:
                layout.add(mop)
            falls = not (mop.branch == "always" or mop.barrier)
        last = self.mops[stop - 1]
        ends = last.branch == "always" or (last.barrier and stop < n)     # (a barrier's own exit parks)
        if stop < n and not ends:
            exits.insert(0, (stop, stored(stop)))   # falls through into its exit
        elif not ends and (exits or (start == 0 and cycles)):
            layout.add(MOp("a", branch="always", target="exit", text="exit"))     # the end, before what follows
        for t, regs in dict.fromkeys(exits):
            layout.place(("exit", t, regs))
            leave(t, regs)
        if start == 0 and cycles:
            layout.place(("entries",))
            entries_and_reloads()
        return layout.resolve()

    def programs(self, bounds: list[int], base: int = 0, only: int | None = None) -> tuple[list[list[MOp]], int]:
        """The overlays' ops for these cuts, their state from word ``base``, and the words per thread it takes.
        ``only``: build overlay ``only`` alone (the others are None), numbered and with slots as among all of them:
        what a cut's trial lowers."""
        self.base = base
        targets = self.targets(bounds)
        ids = {t: k for k, t in enumerate(targets, start=1)}
        # slots: registers kept at the same point never share one (a greedy colouring, in order of first keeping)
        if only is not None:
            # a trial asks whether one overlay fits, which the slots' numbers do not change (they are addresses):
            # a fresh slot for each register it keeps, without the colouring, which is quadratic in the resume
            # points (a trial a cut, a few thousand trials for a double exp)
            self.slot = _FreshSlots()
        else:
            self.slot = {}
            together: dict[str, set] = {}
            for t in targets:
                for reg in self.kept[t]:
                    together.setdefault(reg, set()).update(self.kept[t])
            for reg in together:
                taken = {self.slot[other] for other in together[reg] if other in self.slot}
                self.slot[reg] = next(k for k in range(1, len(together) + 2) if k not in taken)
        cycles = self.cycles or any(t < bounds[1] for t in targets) or self.barrier or any(
            t < i and bisect.bisect_right(bounds, t) != bisect.bisect_right(bounds, i) for i, t in self.jumps)
        programs = [self.overlay(a, b, ids, cycles) if only in (None, k) else None
                    for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]
        slots = 1 + max(self.slot.values(), default=0)
        return programs, slots


class _FreshSlots(dict):
    """Slots numbered as registers ask for them (a trial's: any distinct numbers do)."""

    def __missing__(self, reg: str) -> int:
        self[reg] = len(self) + 1
        return self[reg]


def split(why: str, mops: list[MOp], threads: int, fits, share: int = 4) -> Overlays:
    """Cut ``mops`` into overlays whose programs ``fits`` accepts (it lowers a copy and returns whether the blocks
    and registers fit). A run of one op that does not fit is an error: ``why`` (the whole program's) and that op.
    ``share``: each cut goes where the fewest registers are live in the last 1/share of its run (1: anywhere in
    it; shorter overlays, less block memory)."""
    cutter = _Cutter(mops, threads)
    bounds = _cuts(why, cutter, fits, share)
    programs, slots = cutter.programs(bounds)
    if not fits(programs[0]):
        # overlay 0 was sized before a later cut put a loop across one, which gives it a dispatch: cut again with it
        cutter.cycles = True
        bounds = _cuts(why, cutter, fits, share)
        programs, slots = cutter.programs(bounds)
    return Overlays(bounds, slots, cutter)


def _cuts(why: str, cutter: _Cutter, fits, share: int) -> list[int]:
    """Each overlay's first op, and the end (the module's docstring says how the cuts are chosen)."""
    mops = cutter.mops
    n = len(mops)
    bounds = [0]
    while bounds[-1] < n:
        start = bounds[-1]

        def good(stop: int) -> bool:
            if stop in cutter.uncut:
                return False
            deadline.check(f"cutting into overlays (overlay {len(bounds)}, op {start} of {n})")
            k = len(bounds) - 1
            programs, _ = cutter.programs(bounds + [stop] + ([n] if stop < n else []), only=k)
            return fits(programs[k])

        def whole(first: int, stop: int) -> bool:
            """Whether ops first..stop-1 fit one overlay (cut before and after them)."""
            k = len(bounds)
            programs, _ = cutter.programs(bounds + [first, stop] + ([n] if stop < n else []), only=k)
            return fits(programs[k])

        first = cutter.cut_from(start + 1)      # a span kept whole is one run
        if not good(first):
            mop = mops[start]
            kept = max(len(cutter.kept[start]), len(cutter.kept[start + 1]) if start + 1 < len(mops) else 0)
            raise MachineError(f"{why}; cut into overlays, the op for line {mop.line} ({mop.text}) does not fit one "
                               f"with the loads and stores of the {kept} registers live across it")
        # good(lo); find a long good stop: the rest of the program if it is short and fits, else galloping from the
        # last overlay's length, then bisecting. Each trial lowers a run about an overlay long (bisecting from the
        # program's end lowered thousands of ops, and fusion is quadratic in them). Fitting is not quite monotone
        # (a cut where many registers are live costs their stores), so the stop found is one that fits, not always
        # the longest.
        # A stop inside a span kept whole is no cut: the search steps over the spans (a stop that failed there
        # would end it short of what follows them).
        lo, step = first, max(1, bounds[-1] - bounds[-2]) if len(bounds) > 1 else 16
        hi = n
        if n - start > 4 * step or not good(n):
            stop = cutter.cut_from(lo + step)
            while stop < n and good(stop):
                lo, step = stop, step * 2
                stop = cutter.cut_from(lo + step)
            hi = min(stop, n)
        else:
            lo = n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            below = next((k for k in range(mid, lo, -1) if k not in cutter.uncut), None)
            mid = below if below is not None else cutter.cut_from(mid)
            if mid >= hi:
                break
            if good(mid):
                lo = mid
            else:
                hi = mid
        if lo < n:
            # In the run's last share, the cut with the fewest registers live across it (the latest of those):
            # each kept register costs every warp a store and a load, and a word per thread of block memory.
            # (Tried fewest first, so only the cuts that would be taken are lowered.)
            near = sorted(range(max(start + 1, lo - (lo - start) // share), lo + 1),
                          key=lambda stop: (len(cutter.kept[stop]), -stop))
            lo = next(stop for stop in near if stop == lo or good(stop))
            # A cut inside a loop that would fit an overlay of its own costs a round of the overlays every trip:
            # cut before the outermost such loop instead, so it runs from one ROM.
            # One that starts the run and fits it (the search may have stopped short inside it: a cut in a loop
            # costs the exits and entries of its branch back, so a shorter run fails where the whole loop fits) is
            # taken whole.
            for head, latch in sorted(cutter.loops()):
                if start < head < lo <= latch and whole(head, latch + 1) and good(head):
                    lo = head
                    break
                if head == start < lo <= latch and good(latch + 1):
                    lo = latch + 1
                    break
        bounds.append(lo)
    return bounds
