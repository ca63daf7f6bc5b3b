"""64-bit loop counters held in one word: the ``size_t`` counter of a grid-stride loop.

A 64-bit register holds its low word (``emit``), so a 64-bit compare is lowered only where both values fit in a
word. ``for (size_t i = tid; i < n; i += stride)`` compares a sum that may pass 2^32 - 1 (the last trip's
``i + stride``) with ``n``: its low word would wrap to a small number and the loop would go on where a GPU's ends.

A *counter* is a 64-bit register (a value, or a byte offset: ``p[i]`` of chars) that grows by ``add r, r, s`` (a
*step*; also a sum of a word and a counter, as NVRTC peels a first trip or chains an unrolled loop's ``i + s``,
``i + 2s``) and is otherwise written only with words. After a step it may stand for a sum past 2^32 - 1, and until
a compare bounds it again (``i < n`` on the edge where it holds) only compares with a word read it. The step is
lowered as a saturating add of low words (``ArithmeticOps._saturating_add``: the sum, or 2^32 - 1 where it
carries), and such a compare gives a GPU's answer:

- ``i < c`` and ``i >= c`` (``c > i``, ``c <= i``) for every word ``c``: a sum of 2^32 or more is not below ``c``,
  and neither is 2^32 - 1;
- ``i <= c``, ``i == c``, ``i != c`` and the rest where ``c`` is below 2^32 - 1 at the launch (the emitter checks);
- on the edge where a compare says ``i <= c``, the word is the sum itself, and any instruction may read it there
  (the loop's body: ``x[i]``).

Two forms NVRTC writes for a loop it unrolls by four (``for (size_t i = 0; i < n; ++i)``) are compared for
equality only, and compared as the count they ask for:

- a *view* ``d = i + x`` of a counter, read once, by ``d == c`` (the unrolled loop's exit ``(n & 3) - n + i !=
  0``): ``i == c - x``, where that count is below 2^32 - 1 (``ArithmeticOps._counted_equality``);
- a counter read only by ``==`` / ``!=`` and its own steps, which may start from any value ``v`` the launch fixes
  (the remainder loop's ``-(n & 3)``, counting up to 0): the machine holds its count ``r - v`` and compares that
  with ``c - v`` (``offsets``).

This module finds the counters and views from the control-flow graph alone (:func:`find`). What depends on the
launch (that ``s`` and every other write of ``i`` are words: ``tid``, ``blockDim.x * gridDim.x``; the start ``v``)
is checked by the emitter (``Emitter._counters``), which treats a register that fails as any other 64-bit register
(a compare of its high word is refused, and names the read that made it no counter: ``return i`` after the loop).
What a saturated word cannot answer is refused naming the counter, and ``lower`` then keeps it as a pair of words
(qwengpu.lowering.pairs), which holds every sum.

Example::

    >>> counters = find(basic_blocks(kernel), {"%rd10"})      # doctest: +SKIP
    >>> counters.registers, [step.text for step in counters.steps.values()]   # doctest: +SKIP
    ({'%rd10'}, ['add.s64 %rd10, %rd10, %rd2'])
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ptx import Instruction, Reg
from .cfg import BasicBlock
from .transfer import registers_read
from .values import destination, width

# setp's comparison and the counter's side -> the predicate's value that says "the counter is at most the other
# value" (so below 2^32)
BOUNDS = {("lt", 1): True, ("lo", 1): True, ("le", 1): True, ("ls", 1): True, ("eq", 1): True,
          ("ge", 1): False, ("hs", 1): False, ("gt", 1): False, ("hi", 1): False, ("ne", 1): False,
          ("gt", 2): True, ("hi", 2): True, ("ge", 2): True, ("hs", 2): True, ("eq", 2): True,
          ("le", 2): False, ("ls", 2): False, ("lt", 2): False, ("lo", 2): False, ("ne", 2): False}
# the compares a saturated word answers as the sum past 2^32 - 1 whatever the other word: "counter below it"
STRICT = {("lt", 1), ("lo", 1), ("ge", 1), ("hs", 1), ("gt", 2), ("hi", 2), ("le", 2), ("ls", 2)}


@dataclass
class Counters:
    registers: set[str] = field(default_factory=set)
    steps: dict[int, Instruction] = field(default_factory=dict)     # id(instruction) -> each counter's step
    # id(setp) -> the counter it may read saturated (after a step, before a bound): other than a STRICT compare,
    # its answer is the GPU's only where the other word is below 2^32 - 1 (``i <= last``, ``i != n``)
    saturated: dict[int, str] = field(default_factory=dict)
    # a register that steps like a counter but is read as a number where it may be past 2^32 - 1 -> that read
    unbounded: dict[str, Instruction] = field(default_factory=dict)
    # a *view* d = r + x of a counter r, read once, by an == / != compare with another value in its block
    # (NVRTC's exit of a loop it unrolled: ``(n & 3) - n + i != 0``) -> (r, x)
    views: dict[str, tuple[str, object]] = field(default_factory=dict)
    # the counters read only by == / != compares with other values (and their own steps ``r = r + s``): one may
    # start from any value v (``-(n & 3)``, counting up to 0), and then holds its count r - v (``offsets``)
    compared: set[str] = field(default_factory=set)
    offsets: dict[str, int] = field(default_factory=dict)       # such a counter -> v (the emitter's, at launch)

    def drop(self, register: str) -> None:
        """Treat ``register`` as an ordinary 64-bit register."""
        self.registers.discard(register)
        self.steps = {key: inst for key, inst in self.steps.items() if destination(inst) != register}
        self.saturated = {key: name for key, name in self.saturated.items() if name != register}
        self.views = {d: (r, x) for d, (r, x) in self.views.items() if r != register}
        self.compared.discard(register)


def is_step(inst: Instruction) -> bool:
    """A 64-bit add on every lane (``add.s64 r, r, s``; a sum of two words; a sum of counters: an unrolled loop's
    ``i + s``, ``i + 2s``, ...)."""
    return inst.base == "add" and width(inst) == 64 and inst.guard is None and len(inst.operands) == 3


def _side(inst: Instruction, register: str) -> tuple[str, int] | None:
    """(comparison, operand index of ``register``) of a 64-bit setp comparing ``register`` with another value."""
    if inst.base != "setp" or width(inst) != 64 or len(inst.modifiers) != 2 or len(inst.operands) != 3:
        return None
    sides = [i for i in (1, 2) if isinstance(inst.operands[i], Reg) and inst.operands[i].name == register]
    return (inst.modifiers[0], sides[0]) if len(sides) == 1 else None


def bound(inst: Instruction, register: str) -> bool | None:
    """For a 64-bit setp that compares ``register`` with another value, the value of its predicate that says
    "register at most the other value"; else None."""
    return BOUNDS.get(_side(inst, register))


def strict(inst: Instruction, register: str) -> bool:
    """Whether a setp reading ``register`` answers a saturated word as the sum it stands for, whatever the other
    word (``i < n`` with n = 2^32 - 1 too); else only where the other word is below 2^32 - 1."""
    return _side(inst, register) in STRICT


def find(blocks: list[BasicBlock], wide: set[str]) -> Counters:
    """The counters among the 64-bit registers ``wide``, their steps and views."""
    counters = Counters()
    written: dict[str, list[Instruction]] = {}
    for block in blocks:
        for inst in block.body:
            if destination(inst) in wide:
                written.setdefault(destination(inst), []).append(inst)
    candidates = {register for register, writes in written.items() if any(is_step(inst) for inst in writes)}
    if not candidates:
        return counters
    counters.views = _views(blocks, candidates, written)
    for register in candidates - set(counters.views):
        counters.registers.add(register)
        counters.steps.update((id(inst), inst) for inst in written[register] if is_step(inst))
    steps = dict(counters.steps)
    while True:
        failed = _read_unbounded(blocks, counters)
        if not failed:
            break
        for register, inst in failed.items():
            counters.drop(register)
            if any(destination(step) == register and Reg(register) in step.operands[1:]
                   for step in steps.values()):
                counters.unbounded[register] = inst     # a loop counter (r = r + s): the refusal names the read
    counters.compared = _compared_only(blocks, counters)
    return counters


def _reads_by_register(blocks: list[BasicBlock]) -> dict[str, list[tuple[int, int, Instruction]]]:
    """register -> (block, position, instruction) of each instruction that reads it."""
    found: dict[str, list] = {}
    for block in blocks:
        for position, inst in enumerate(block.body):
            for name in registers_read(inst):
                found.setdefault(name, []).append((block.index, position, inst))
    return found


def _views(blocks: list[BasicBlock], candidates: set[str], written: dict) -> dict[str, tuple[str, object]]:
    """The sums d = r + x of a candidate counter r and another value x, written once and read once: by an == / !=
    compare of d with another value, further on in the same block, r and d not written between."""
    readers = _reads_by_register(blocks)
    views = {}
    for block in blocks:
        for position, inst in enumerate(block.body):
            if not is_step(inst):
                continue
            d, a, b = inst.operands
            counted = [o for o in (a, b) if isinstance(o, Reg) and o.name in candidates]
            if len(counted) != 1 or a == b or len(written.get(d.name, ())) != 1:
                continue
            r, x = counted[0].name, b if counted[0] == a else a
            uses = readers.get(d.name, [])
            if len(uses) != 1 or uses[0][0] != block.index or uses[0][1] <= position:
                continue
            compare = uses[0][2]
            other = [o for o in compare.operands[1:] if o != d]
            if (_side(compare, d.name) or ("", 0))[0] not in ("eq", "ne") or len(other) != 1 or (
                    isinstance(other[0], Reg) and other[0].name in candidates):
                continue
            between = block.body[position + 1:uses[0][1]]
            if any(destination(i) in (r, d.name, getattr(x, "name", None)) for i in between):
                continue
            views[d.name] = (r, x)
    return views


def _compared_only(blocks: list[BasicBlock], counters: Counters) -> set[str]:
    """The counters whose every read is an == / != compare with a value no counter holds, or their own step
    ``r = r + s``."""
    compared = set(counters.registers)
    for block in blocks:
        for inst in block.body:
            for register in registers_read(inst) & compared:
                others = [o for o in inst.operands[1:] if not (isinstance(o, Reg) and o.name == register)]
                if id(inst) in counters.steps and destination(inst) == register and len(others) == 1:
                    ok = not (isinstance(others[0], Reg) and others[0].name in counters.registers)
                else:
                    ok = ((_side(inst, register) or ("", 0))[0] in ("eq", "ne") and len(others) == 1
                          and not (isinstance(others[0], Reg) and others[0].name in counters.registers))
                if not ok:
                    compared.discard(register)
    return compared


def _read_unbounded(blocks: list[BasicBlock], counters: Counters) -> dict[str, Instruction]:
    """The counters read, other than by a compare, where a step may have left them past 2^32 - 1 (each with such
    a read), and ``counters.saturated``: a forward analysis of the set of such ("unbounded") counters at each
    block's entry, the union over its predecessors' edges."""
    entry: dict[int, frozenset] = {0: frozenset()}
    work, failed = [0], {}
    counters.saturated = {}
    while work:
        index = work.pop(0)
        unbounded = set(entry[index])
        # predicate -> {(counter, a value of the predicate that says the counter is below its bound)}
        facts: dict[str, frozenset] = {}
        block = blocks[index]
        for inst in block.body:
            for register in registers_read(inst) & unbounded:
                if id(inst) in counters.steps or destination(inst) in counters.views:
                    continue        # a step's sum saturates with its operand; a view is compared only
                if bound(inst, register) is None or len(registers_read(inst) & unbounded) > 1:
                    failed.setdefault(register, inst)
                else:
                    counters.saturated[id(inst)] = register
            dst = destination(inst)
            facts = {p: frozenset(f for f in fs if f[0] != dst) for p, fs in facts.items() if p != dst}
            if dst in counters.registers:
                if id(inst) in counters.steps:
                    unbounded.add(dst)
                elif inst.guard is None:
                    unbounded.discard(dst)
            elif dst is not None and inst.guard is None:
                made = _predicate_facts(inst, counters, facts)
                if made:
                    facts[dst] = made
        for successor, bounded in _edges(block, facts):
            out = frozenset(unbounded - bounded)
            old = entry.get(successor)
            new = out if old is None else old | out
            if new != old:
                entry[successor] = new
                if successor not in work:
                    work.append(successor)
    return failed


def _predicate_facts(inst: Instruction, counters: Counters, facts: dict) -> frozenset:
    """What a predicate an instruction writes says of the counters: a bounding compare's (of a counter, or of a
    view: d == c bounds its counter), or the facts of the predicates it combines (``i < n && i < m``: and.pred;
    ``i >= n || i >= m``: or.pred; not.pred; mov.pred)."""
    if inst.base == "setp":
        made = {(r, below) for r in counters.registers if (below := bound(inst, r)) is not None}
        made |= {(counters.views[d][0], below) for d in registers_read(inst) & set(counters.views)
                 if (below := bound(inst, d)) is not None}
        return frozenset(made)
    if "pred" not in inst.modifiers:
        return frozenset()
    operands = [facts.get(o.name, frozenset()) if isinstance(o, Reg) else frozenset() for o in inst.operands[1:]]
    if inst.base == "mov" and len(operands) == 1:
        return operands[0]
    if inst.base == "not" and len(operands) == 1:
        return frozenset((r, not value) for r, value in operands[0])
    # a and b is true only where both are; a or b is false only where both are
    kept = {"and": True, "or": False}.get(inst.base)
    return frozenset(f for fs in operands for f in fs if f[1] == kept) if kept is not None else frozenset()


def _edges(block: BasicBlock, facts: dict) -> list[tuple[int, set[str]]]:
    """Each successor with the counters its edge proves below their bound (a branch on a bounding compare)."""
    term = block.terminator
    if term is None or term.guard is None or term.base != "bra":
        return [(s, set()) for s in block.successors]
    known = facts.get(term.guard.name, frozenset())
    taken = not term.guard_negated          # the predicate's value on the taken edge
    edges = [(block.successors[0], {r for r, value in known if value == taken})]
    edges += [(s, {r for r, value in known if value != taken}) for s in block.successors[1:]]
    return edges
