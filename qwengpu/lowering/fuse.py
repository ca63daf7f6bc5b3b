"""Block fusion: pack neighbouring machine ops into one ROM block where the pipeline allows (every record saved is
about nine tokens): a load into its consumer, a store or a branch into the op that computes its value, copies with an
offset into the operands that read them, dead and overwritten ops removed.

Example::

    >>> from qwengpu.lowering.mop import MOp
    >>> mops = fuse([MOp("add", ("tid", 0), (None, 1), "%r1"), MOp("a", ("%r1", 0), store=("tid", 0))])
    >>> len(mops), mops[0].store
    (1, ('tid', 0))
"""
from __future__ import annotations

from ..isa import MachineError
from . import deadline
from .barriers import numbering, successors
from .mop import COMMUTATIVE, MIRROR, MOp

MASK32 = 0xFFFFFFFF


def _uses(mops: list[MOp]) -> dict[str, int]:
    """How many ops read each register (a predicated op's own destination not counted)."""
    counts: dict[str, int] = {}
    for mop in mops:
        for reg in mop.reads(keep=False):
            counts[reg] = counts.get(reg, 0) + 1
    return counts


def _simple(mop: MOp) -> bool:
    return not mop.load and mop.store is None and mop.branch == "none" and not mop.atomic


def fuse(mops: list[MOp]) -> list[MOp]:
    """Pack neighbouring ops into one block where the pipeline allows: every record saved is ~9 tokens."""
    changed, rounds = True, 0
    while changed:
        changed, rounds = False, rounds + 1
        deadline.check("block fusion")
        if rounds > 100 * (len(mops) + 10):
            raise MachineError("internal: block fusion does not settle")
        uses = _uses(mops)
        for i, mop in enumerate(mops):
            if mop.dst and not uses.get(mop.dst) and mop.store is None and mop.branch == "none" and not mop.atomic:
                _remove(mops, i)
                changed = True
                break
        if changed:
            continue
        for mop in mops:
            _canonical_copy(mop)
        for i, mop in enumerate(mops):
            if _propagate_copy(mops, i):
                changed = True

        for i, mop in enumerate(mops):
            if _overwritten(mops, i):
                _remove(mops, i)
                changed = True
                break
        if changed:
            continue
        for i in range(len(mops) - 1):
            first, second = mops[i], mops[i + 1]
            if second.labels or first.pred != second.pred:
                continue
            # compute ; store it
            if (first.dst and first.store is None and first.branch == "none" and second.op == "a"
                    and second.a == (first.dst, 0) and not second.load and second.store is not None
                    and second.dst is None and second.branch == "none" and not second.atomic
                    and second.store[0] != first.dst):
                first.store = second.store
                if uses.get(first.dst, 0) == 1:
                    first.dst = None
                _merge(mops, i)
                changed = True
                break
            # compute ; branch on it
            if (first.dst and first.branch == "none" and second.op == "a" and second.a == (first.dst, 0)
                    and _simple_branch(second)):
                first.branch, first.target = second.branch, second.target
                first.target_index = second.target_index
                if uses.get(first.dst, 0) == 1:
                    first.dst = None
                _merge(mops, i)
                changed = True
                break
            # anything ; jump
            if (first.branch == "none" and second.branch == "always" and second.op == "a" and second.a == (None, 0)
                    and second.dst is None and second.store is None and second.pred is None):
                first.branch, first.target, first.target_index = "always", second.target, second.target_index
                _merge(mops, i)
                changed = True
                break
            # load ; use it (not a register loaded back after a barrier: its reader would look lane-dependent)
            if (first.load and not first.atomic and not first.restore and first.op == "a" and first.store is None and first.branch == "none"
                    and first.dst and uses.get(first.dst, 0) == 1
                    and not second.load and not second.atomic and second.dst != first.dst
                    and (second.store is None or second.store[0] != first.dst)):
                if second.a == (first.dst, 0) and second.b[0] != first.dst:
                    second.a, second.load = first.a, True
                elif second.b == (first.dst, 0) and second.a[0] != first.dst and (
                        second.op in COMMUTATIVE or second.op in MIRROR):
                    second.op = MIRROR.get(second.op, second.op)
                    second.a, second.b, second.load = first.a, second.a, True
                else:
                    continue
                second.labels |= first.labels
                mops.pop(i)
                _shift_targets(mops, i)
                changed = True
                break
        if not changed:
            for i in range(len(mops)):
                if _sink_load(mops, i):
                    changed = True
                    break
    return mops


def arithmetic(mops: list[MOp]) -> int:
    """How many ops compute something other than a copy (``a``, and ``add`` / ``sub``, which may be copies with an
    offset): fusion packs no two of them into one block, and removes one only where nothing reads it or where it is
    overwritten before it is read. Of ops ``prune`` left, nearly all stay: the count bounds the blocks from below
    within the few that a predicated write overwritten under the same predicate takes away."""
    return sum(mop.op not in ("a", "add", "sub") for mop in mops)


def _canonical_copy(mop: MOp) -> None:
    """``d = s + k`` and ``d = s - k`` with k an immediate are copies with an offset: operands absorb them."""
    if mop.load or mop.atomic or mop.op not in ("add", "sub"):
        return
    if mop.b[0] is None:
        k = mop.b[1] if mop.op == "add" else -mop.b[1]
        mop.op, mop.a, mop.b = "a", (mop.a[0], (mop.a[1] + k) & MASK32), (None, 0)
    elif mop.op == "add" and mop.a[0] is None:
        mop.op, mop.a, mop.b = "a", (mop.b[0], (mop.b[1] + mop.a[1]) & MASK32), (None, 0)


def _sink_load(mops: list[MOp], i: int) -> bool:
    """Pack a plain load into the later op that is its only reader, across ops that neither store, branch nor touch
    its registers. Each success removes an op, so fusion always ends."""
    mop = mops[i]
    if not (mop.load and not mop.atomic and not mop.restore and mop.op == "a" and mop.store is None and mop.branch == "none"
            and mop.dst and _uses(mops).get(mop.dst, 0) == 1):
        return False
    # A predicated load goes only into an op under the same predicate, before the predicate changes.
    address_regs = {s for s, _ in (mop.a, mop.b) if s not in (None, "tid")} | ({mop.pred[0]} if mop.pred else set())
    for j in range(i + 1, len(mops)):
        later = mops[j]
        if later.labels:
            return False
        if mop.dst in later.reads():
            if later.load or later.atomic or later.pred != mop.pred or later.dst == mop.dst or (
                    later.store is not None and later.store[0] == mop.dst):
                return False
            if later.a == (mop.dst, 0) and later.b[0] != mop.dst:
                later.a, later.load = mop.a, True
            elif later.b == (mop.dst, 0) and later.a[0] != mop.dst and (
                    later.op in COMMUTATIVE or later.op in MIRROR):
                later.op = MIRROR.get(later.op, later.op)
                later.a, later.b, later.load = mop.a, later.a, True
            else:
                return False
            mops[i + 1].labels |= mop.labels
            mops.pop(i)
            _shift_targets(mops, i)
            return True
        if later.store is not None or later.branch != "none" or later.dst == mop.dst or later.dst in address_regs:
            return False
    return False


def _propagate_copy(mops: list[MOp], i: int) -> bool:
    """After ``d = s + k``, later reads of d in the same straight line read s + k directly. True if any changed.

    A predicated copy ``@p d = s + k`` reaches only later ops under the same predicate (on the other lanes d kept
    its old value), until p is rewritten."""
    mop = mops[i]
    if (mop.op != "a" or not mop.dst or mop.load or mop.store is not None or mop.branch != "none"
            or mop.b != (None, 0)):
        return False
    source, offset = mop.a
    if source == mop.dst or (mop.pred is not None and source == mop.pred[0]):
        return False
    changed = False
    for later in mops[i + 1:]:
        if later.labels:
            break
        if mop.pred is not None and later.pred != mop.pred:
            if later.dst in (mop.dst, source, mop.pred[0]) or later.branch != "none":
                break
            continue
        for name in ("a", "b", "store"):
            operand = getattr(later, name)
            if operand is not None and operand[0] == mop.dst:
                setattr(later, name, (source, (operand[1] + offset) & MASK32))
                changed = True
        if later.dst in (mop.dst, source) or later.branch != "none" or (
                mop.pred is not None and later.dst == mop.pred[0]):
            break
    return changed


def _overwritten(mops: list[MOp], i: int) -> bool:
    """True when mops[i]'s result is replaced on every lane it wrote before anything reads it."""
    mop = mops[i]
    if not mop.dst or mop.store is not None or mop.branch != "none" or mop.atomic:
        return False
    for later in mops[i + 1:]:
        if later.labels or mop.dst in later.reads(keep=False):
            return False
        if later.dst == mop.dst and later.pred in (None, mop.pred):
            return True
        if later.branch != "none" or (mop.pred and later.dst == mop.pred[0]):
            return False
    return False


def _simple_branch(mop: MOp) -> bool:
    return (mop.branch in ("nonzero", "zero") and mop.b == (None, 0) and not mop.load and mop.store is None
            and mop.dst is None and mop.pred is None)


def prune(mops: list[MOp]) -> list[MOp]:
    """Drop ops whose value no later op reads, by liveness over the op graph (fuse drops an op nobody reads; this
    also drops a chain that only updates itself, ``@q r = r << 8`` with r read by nothing after it: the side of a
    float ``?:`` that the launch's arguments decide against). Loads go too; stores, branches and atomics stay.
    The lowering runs it on programs that do not fit the ROM as they are (those that fit are left as they were).

    The liveness counts only the reads of ops that stay (an op whose value is read by nothing that stays is as dead
    as one read by nothing), found in one fixed point rather than by dropping the dead ops and starting again: a
    chain of n dead ops took n rounds of liveness over the whole program (230 for a double sin, most of a minute).
    Starting from nothing live, it also drops a value a loop carries that only its own updates read (a 64-bit
    division kernel's: 832 blocks became 782)."""
    succ = successors(mops)
    _, bits = numbering()
    reads = [bits(mop.reads(keep=True)) for mop in mops]
    writes = [bits([mop.dst]) if mop.dst else 0 for mop in mops]
    droppable = [bool(mop.dst) and mop.store is None and mop.branch == "none" and not mop.atomic for mop in mops]
    live = [0] * len(mops)          # live on entry, counting the reads of ops that stay
    changed = True
    while changed:              # from nothing live up: a chain that only feeds itself never becomes live
        deadline.check("dead ops removed (prune)")
        changed = False
        for i in reversed(range(len(mops))):
            out = 0
            for s in succ[i]:
                out |= live[s]
            new = out if droppable[i] and not out & writes[i] else (out & ~writes[i]) | reads[i]
            if new != live[i]:
                live[i], changed = new, True
    dead = set()
    for i in range(len(mops)):
        if droppable[i] and not any(live[s] & writes[i] for s in succ[i]):
            dead.add(i)
    return _without(mops, dead)


def _without(mops: list[MOp], dead: set[int]) -> list[MOp]:
    """Copies of the ops not in ``dead``; a branch to a dropped op goes to the op that takes its place, which also
    takes its labels (a branch target stays a block start)."""
    kept, place, labels = [], [], set()
    for i, mop in enumerate(mops):
        place.append(len(kept))
        if i in dead:
            labels |= mop.labels
            continue
        mop = mop.copy()
        mop.labels |= labels
        labels = set()
        kept.append(mop)
    place.append(len(kept))
    for mop in kept:
        if mop.target_index is not None:
            mop.target_index = place[mop.target_index]      # (the end, len(mops), stays the end)
    return kept


def _remove(mops: list[MOp], i: int) -> None:
    """Drop a dead op; a branch target it carried moves to the op that takes its place."""
    if i + 1 < len(mops):
        mops[i + 1].labels |= mops[i].labels
    mops.pop(i)
    _shift_targets(mops, i)


def _merge(mops: list[MOp], i: int) -> None:
    """Drop mops[i + 1] after its work moved into mops[i]."""
    mops.pop(i + 1)
    _shift_targets(mops, i + 1)


def _shift_targets(mops: list[MOp], removed: int) -> None:
    for mop in mops:
        index = getattr(mop, "target_index", None)
        if index is not None and index > removed:
            mop.target_index = index - 1
