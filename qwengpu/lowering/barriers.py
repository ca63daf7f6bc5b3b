"""``__syncthreads()`` across the warps of a block, with nothing but the machine's own blocks.

The machine runs one warp at a time, each from block 0 to its end, with its registers zeroed by the warp header.
A barrier therefore splits a warp's run: at a ``bar.sync`` the warp stores the registers still needed after it
(its *barrier state*, one word per lane and register) and the number of the barrier it stopped at (its resume
word), then ends in a *parking* block. When every warp of the block has ended (parked or finished), the device runs
the parked warps again; their program starts with a dispatch that reads the resume word and branches to the point
after that barrier, where the registers are loaded back. So every warp finishes the phase before a barrier before
any warp starts the phase after it: what ``__syncthreads()`` means on a GPU. The device only follows the model's
control tokens (a warp that ended in a parking block runs again); every value, the resume point included, is
computed and stored by the machine. A barrier in a loop, uniform or not, works the same way.

Layout of the block's words (the top of memory, below the sink)::

    [ barrier state: slot 0 = resume words, slots 1..L = registers ] [ __shared__ arrays ] [ sink ]
      each slot is one word per thread of the block (address slot_base + tid)

Example::

    >>> from qwengpu.lowering.mop import MOp
    >>> mops = [MOp("add", ("tid", 0), (None, 1), "%v"), MOp(barrier=True), MOp("a", ("%v", 0), store=("tid", 0))]
    >>> mops, slots = expand(mops, threads=8, base=100)
    >>> slots, [m.parks for m in mops].count(True)
    (2, 1)
"""
from __future__ import annotations

from ..isa import MachineError
from . import deadline
from .mop import MOp


def successors(mops: list[MOp]) -> list[list[int]]:
    """Each op's successors in the op graph (fall-through and branch target)."""
    succ = []
    for i, mop in enumerate(mops):
        nexts = [] if mop.branch == "always" else [i + 1] if i + 1 < len(mops) else []
        if mop.jumps and mop.target_index < len(mops):
            nexts.append(mop.target_index)      # (a target past the last op is the end: the warp exits there)
        succ.append(nexts)
    return succ


def live_in(mops: list[MOp], keeps: list[bool] | None = None) -> list[set]:
    """The virtual registers live on entry to each op (read later before they are written, on some path).
    A predicated op reads its destination (inactive lanes keep the old value) unless ``keeps[i]`` says the old value
    is never observed (``observed_keeps``)."""
    words, bit = live_bits(mops, keeps)
    names = list(bit)
    sets = []
    for i, word in enumerate(words):
        if i % 256 == 0:        # (thousands of registers live at each of 100,000 ops: a double lgamma's)
            deadline.check("the registers live at each op")
        sets.append(_members(word, names))
    return sets


def live_bits(mops: list[MOp], keeps: list[bool] | None = None) -> tuple[list[int], dict[str, int]]:
    """``live_in`` as bits of Python integers, and each register's bit: a long program's passes over sets of sets
    were most of its lowering, and where predicated ops keep thousands of registers live (a double sin's
    if-converted paths) the sets themselves are too many to build."""
    succ = successors(mops)
    bit, bits = numbering()
    reads = [bits(mop.reads(keep=True if keeps is None else keeps[i])) for i, mop in enumerate(mops)]
    kills = [~bits([mop.dst]) if mop.dst else -1 for mop in mops]
    live = [0] * len(mops)
    changed = True
    while changed:
        deadline.check("liveness")
        changed = False
        for i in reversed(range(len(mops))):
            out = 0
            for s in succ[i]:
                out |= live[s]
            new = (out & kills[i]) | reads[i]
            if new != live[i]:
                live[i], changed = new, True
    return live, bit


def numbering():
    """A fresh numbering of registers as bits of Python integers: (each register's bit, ``bits(regs)``: their bits
    or-ed, numbering the registers it has not met)."""
    bit: dict[str, int] = {}

    def bits(regs) -> int:
        word = 0
        for reg in regs:
            word |= bit.setdefault(reg, 1 << len(bit))
        return word
    return bit, bits


def _members(word: int, names: list[str]) -> set:
    """The registers whose bits are set in ``word``."""
    found = set()
    while word:
        low = word & -word
        found.add(names[low.bit_length() - 1])
        word ^= low
    return found


def observed_keeps(mops: list[MOp], atoms: bool = False) -> list[bool]:
    """For each predicated op ``@q d = ...``: whether a later op may read the value d had before it on a lane where
    q was off. Reads under a predicate that d was written under since that predicate was last computed see only
    fresh lanes (``@!p x = ..; @!p y = x + 1`` in a loop keeps nothing); a read on every lane, or under another
    predicate, may see the old value. Without this every value an if-converted body computes would look live
    around its loop, and a barrier would keep registers whose old values no lane reads.

    A search from a write ends where d is dead even with every predicated write reading its old value (nothing
    after that point reads d before writing it on every lane): without that bound each search walked to the end
    of the program, and an if-converted double sin has thousands of predicated writes in 17,000 ops."""
    succ = successors(mops)
    live, bit = live_bits(mops)
    result = []
    for i, mop in enumerate(mops):
        if i % 64 == 0:
            deadline.check("which predicated writes' old values are read")
        if mop.pred is None or not mop.dst:
            result.append(False)
            continue
        d, observed = mop.dst, False
        alive = bit.get(d, 0)
        seen = set()
        start = frozenset() if mop.pred[0] == d else frozenset({mop.pred})   # ``@p p = ..`` rewrote its own mask
        work = [(s, start) for s in succ[i]]
        while work and not observed:
            j, covered = work.pop()
            if (j, covered) in seen or not live[j] & alive:
                continue
            seen.add((j, covered))
            later = mops[j]
            operands = [s for s, _ in (later.a, later.b)] + ([later.store[0]] if later.store else [])
            # ``m & d`` with d written where m is nonzero (a SIMT loop's ``active &= condition``): where m is 0 the
            # result is 0 whatever d held.
            masked = (later.op == "and" and not later.load and later.store is None and later.pred is None
                      and {later.a, later.b} <= {(d, 0), *((m, 0) for m, neg in covered if not neg)}
                      and later.a != later.b) or (atoms and _masks(later, d, covered))
            if (later.pred is not None and later.pred[0] == d) or (
                    d in operands and not masked and (later.pred is None or later.pred not in covered)):
                observed = True
                break
            if later.dst == d and later.pred is None:
                continue                       # rewritten on every lane: the old value is gone on this path
            if later.dst == d:
                covered = covered | {later.pred}
            if later.dst:
                gone = {(later.dst, False), (later.dst, True)}      # its old value's predicates no longer hold
                if not gone.isdisjoint(covered):
                    covered = covered - gone
                if later.pred is None and not later.load and later.dst != d and _narrows(later, covered, atoms):
                    covered = covered | {(later.dst, False)}     # on only where a covered predicate is
            work += [(s, covered) for s in succ[j]]
        result.append(observed)
    return result


def _masks(mop: MOp, d: str, covered) -> bool:
    """Whether ``mop`` is one of the emitter's lane predicates over 0/1 atoms (``emit.TWO_ATOMS``) that reads d only
    where it is fresh: ``gt_u(d, m)`` is d and not m, so where m is on the result is 0 whatever 0/1 value d held,
    and d need only be fresh where m is off (``(m, True)`` covered); ``gt_u(m, d)`` (m and not d), ``lt_u(d, m)``
    (not d and m) and ``lt_u(m, d)`` (not m and d) likewise.

    Only for what a barrier or an overlay keeps (``observed_keeps(atoms=True)``): a register not kept holds 0 when
    the warp resumes, a 0/1 value. Register allocation must not use it: a register shared with another value would
    hold that value's bits on the lanes the write skipped, and ``gt_u(d, 1)`` of those can be true."""
    if (not mop.lane_predicate or mop.op not in ("gt_u", "lt_u") or mop.load or mop.store is not None
            or mop.pred is not None or mop.a[1] != 0 or mop.b[1] != 0 or mop.a[0] == mop.b[0]):
        return False
    if mop.a[0] == d:                   # d and not m (gt_u), not d and m (lt_u)
        return (mop.b[0], mop.op == "gt_u") in covered
    if mop.b[0] == d:                   # m and not d (gt_u), not m and d (lt_u)
        return (mop.a[0], mop.op == "lt_u") in covered
    return False


def _narrows(mop: MOp, covered, atoms: bool) -> bool:
    """Whether ``mop.dst`` is nonzero only on lanes where a predicate in ``covered`` holds: ``t = m & x`` with m
    covered, ``a > b`` (a is nonzero) and ``a < b`` (b is), for any values; with ``atoms``, also the emitter's lane
    predicates over 0/1 atoms (``emit.TWO_ATOMS``): ``gt_u(a, b)`` is a and not b, ``lt_u(a, b)`` not a and b."""
    if mop.b[1] != 0 or mop.a[1] != 0:
        return False
    a, b = mop.a[0], mop.b[0]
    if mop.op == "and":
        return (a, False) in covered or (b, False) in covered
    if mop.op == "gt_u":
        return (a, False) in covered or (atoms and mop.lane_predicate and (b, True) in covered)
    if mop.op == "lt_u":
        return (b, False) in covered or (atoms and mop.lane_predicate and (a, True) in covered)
    return False


def kept_across(mops: list[MOp], live: list[set]) -> list[list[str]]:
    """At each op, the registers live there (``live``) that some path from the start writes before it, sorted: what
    a warp that stops there must keep. The others still hold the 0 of the warp's start, as they will again when the
    warp resumes."""
    succ = successors(mops)
    # the registers written before each op, as bits of a Python integer: in a long program (a double exp's 15,000
    # ops) these sets hold thousands, and set unions and subset tests made this quadratic in practice
    bit = {}
    for mop in mops:
        if mop.dst and mop.dst not in bit:
            bit[mop.dst] = 1 << len(bit)
    defined = [0] * len(mops)
    reached = [False] * len(mops)
    if mops:
        reached[0] = True
    changed = True
    while changed:
        deadline.check("the registers written before each op")
        changed = False
        for i, mop in enumerate(mops):
            if not reached[i]:
                continue
            out = defined[i] | (bit[mop.dst] if mop.dst else 0)
            for s in succ[i]:
                if not reached[s] or out & ~defined[s]:
                    reached[s], defined[s] = True, defined[s] | out
                    changed = True
    return [sorted(reg for reg in live[i] if defined[i] & bit.get(reg, 0)) for i in range(len(mops))]


def kept_registers(mops: list[MOp]) -> dict[int, list[str]]:
    """For each barrier marker, the registers its warps must keep: live after it and written before it."""
    markers = [i for i, mop in enumerate(mops) if mop.barrier]
    if not markers:
        return {}
    kept = kept_across(mops, live_in(mops, observed_keeps(mops, atoms=True)))
    return {i: kept[i] for i in markers}


def state_slots(mops: list[MOp]) -> int:
    """Words per thread the barrier state needs: the resume word and the most registers kept across one barrier."""
    kept = kept_registers(mops)
    return 1 + max(len(regs) for regs in kept.values()) if kept else 0


def expand(mops: list[MOp], threads: int, base: int) -> tuple[list[MOp], int]:
    """Replace each barrier marker by its spill stores and parking block, and the resume point after it by the loads
    that restore the registers; put the dispatch in front. ``base`` is the first word of the barrier state.
    Returns the new ops and the slots (words per thread) the state uses."""
    kept_at = kept_registers(mops)
    if not kept_at:
        return mops, 0
    slots = 1 + max(len(regs) for regs in kept_at.values())
    resume_word = ("tid", base)
    out: list[MOp] = []
    new_index: dict[int, int] = {}
    resumes: list[int] = []                 # the op each barrier's warps resume at, in barrier order
    for i, mop in enumerate(mops):
        new_index[i] = len(out)
        if not mop.barrier:
            out.append(mop)
            continue
        k = len(resumes) + 1
        kept = kept_at[i]
        note = dict(line=mop.line, text=mop.text)
        first = len(out)
        for j, reg in enumerate(kept, start=1):
            out.append(MOp("a", (reg, 0), store=("tid", base + j * threads), **note))
        out.append(MOp("a", (None, k), store=resume_word, branch="always", target="exit", parks=True, waits=True,
                       **note))
        out[first].labels |= mop.labels
        resumes.append(len(out))
        for j, reg in enumerate(kept, start=1):
            out.append(MOp("a", ("tid", base + j * threads), dst=reg, load=True, restore=True, **note))
    new_index[len(mops)] = len(out)         # a branch to the end lands on an exit
    if resumes[-1] == len(out) or any(mop.jumps and mop.target_index == len(mops) for mop in mops):
        out.append(MOp("a", branch="always", target="exit", text="exit"))
    for k, position in enumerate(resumes, start=1):
        out[position].labels.add(f"resume{k}")
    dispatch = [MOp("eq", resume_word, (None, k), load=True, branch="nonzero", target="resume", restore=True,
                    text=f"__syncthreads: resume after barrier {k}") for k in range(1, len(resumes) + 1)]
    shift = len(dispatch)
    for mop in out:
        if mop.jumps and mop.target_index is not None:
            if mop.target_index not in new_index:
                raise MachineError(f"internal: branch to op {mop.target_index} outside the program")
            mop.target_index = new_index[mop.target_index] + shift
    for k, mop in enumerate(dispatch):
        mop.target_index = resumes[k] + shift
    return dispatch + out, slots
