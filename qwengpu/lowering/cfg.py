"""Basic blocks: a kernel body split at labels and branches, with each block's successors; and the one rewrite the
body gets first, one latch per loop (:func:`merge_latches`).

Example::

    >>> from qwengpu.ptx import parse
    >>> blocks = basic_blocks(parse(PTX).kernels["k"])      # doctest: +SKIP
    >>> [b.successors for b in blocks]                       # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..isa import MachineError
from ..ptx import Instruction, Label
from .by_body import ByBody


@dataclass
class BasicBlock:
    index: int
    labels: list[str]
    body: list[Instruction]
    terminator: Instruction | None     # bra or ret (possibly guarded), None when it falls through
    successors: list[int] = field(default_factory=list)


def basic_blocks(kernel) -> list[BasicBlock]:
    blocks: list[BasicBlock] = []
    current = BasicBlock(0, [], [], None)
    for item in kernel.body:
        if isinstance(item, Label):
            if current.body or current.terminator is not None:
                blocks.append(current)
                current = BasicBlock(len(blocks), [], [], None)
            current.labels.append(item.name)
            continue
        if current.terminator is not None:
            blocks.append(current)
            current = BasicBlock(len(blocks), [], [], None)
        if item.base in ("bra", "ret", "exit"):
            current.terminator = item
        else:
            current.body.append(item)
    blocks.append(current)
    label_index = {name: b.index for b in blocks for name in b.labels}
    for b in blocks:
        term = b.terminator
        fall = [b.index + 1] if b.index + 1 < len(blocks) else []
        if term is None:
            b.successors = fall
        elif term.base in ("ret", "exit"):
            b.successors = fall if term.guard is not None else []
        else:
            target = term.operands[0]
            if not isinstance(target, Label) or target.name not in label_index:
                raise MachineError(f"line {term.line}: branch to an unknown label: {term.text}", line=term.line)
            b.successors = [label_index[target.name]] + (fall if term.guard is not None else [])
    return blocks


def merge_latches(kernel):
    """One latch per loop: where several backward branches reach one label (nvcc's loops with ``continue`` or a
    nested loop's exit that re-enters the outer one), each goes to a new block right after the last of them, whose
    one instruction branches back; the last one's fall-through jumps over it. The loops the emitter sees then have one
    latch each, and every path means what it meant. Returns ``kernel`` itself when no loop has two latches."""
    body = kernel.body
    at = {item.name: i for i, item in enumerate(body) if isinstance(item, Label)}
    back: dict[str, list[int]] = {}
    for i, item in enumerate(body):
        if isinstance(item, Instruction) and item.base == "bra" and isinstance(item.operands[0], Label):
            target = item.operands[0].name
            if target in at and at[target] < i:
                back.setdefault(target, []).append(i)
    many = {target: where for target, where in back.items() if len(where) > 1}
    if not many:
        return kernel
    redirected: dict[int, Instruction] = {}
    inserted: dict[int, list] = {}
    for target, where in many.items():
        latch, after = f"{target}$latch", f"{target}$after"
        for i in where:
            redirected[i] = _branch(body[i], latch)
        last = body[where[-1]]
        jump = [_branch(last, after, guard=False)] if last.guard is not None else []
        inserted[where[-1]] = jump + [Label(latch), _branch(last, target, guard=False)] + (
            [Label(after)] if jump else [])
    out = []
    for i, item in enumerate(body):
        out.append(redirected.get(i, item))
        out.extend(inserted.get(i, []))
    return replace(kernel, body=out)


def _branch(inst: Instruction, target: str, guard: bool = True) -> Instruction:
    """``inst`` (a bra) sent to ``target``; without its guard when ``guard`` is False."""
    keep = guard and inst.guard is not None
    prefix = f"@{'!' if inst.guard_negated else ''}{inst.guard.name} " if keep else ""
    return replace(inst, operands=(Label(target),), guard=inst.guard if keep else None,
                   guard_negated=inst.guard_negated if keep else False, text=f"{prefix}{inst.opcode} {target}")


_LAID = ByBody()           # each body laid out (None: as it is)


def layout(kernel):
    """Blocks in an order the emitter can walk: every loop's blocks together (its header first, one latch last), every
    other branch forward. nvcc sometimes places a block that several paths end in (``out[i] = ...; ret``) before a
    loop that reaches it, or a loop's blocks around another's; such a body is reordered (a loop-nesting topological
    order, fall-throughs that no longer fall through made explicit ``bra``). A body already in such an order, which
    is every body nvcc writes for qccl's kernels, is returned as it is. So is one this pass cannot order (a cycle
    with two entries, loops that share blocks without nesting): the emitter then names what it refuses."""
    laid = _LAID.get(kernel.body, lambda: _layout(kernel))
    return kernel if laid is None else replace(kernel, body=laid)


def _reachable(blocks: list[BasicBlock], start: int) -> set[int]:
    seen, work = {start}, [start]
    while work:
        for s in blocks[work.pop()].successors:
            if s not in seen:
                seen.add(s)
                work.append(s)
    return seen


def _in_order(blocks: list[BasicBlock], live: set[int]) -> bool:
    """Whether the emitter can walk the blocks as they stand: each backward branch closes a cycle, and the spans of
    the loops (header to last latch) nest."""
    spans: dict[int, int] = {}
    for b in blocks:
        if b.index not in live or b.terminator is None or b.terminator.base != "bra":
            continue
        target = b.successors[0]
        if target <= b.index:
            if b.index not in _reachable(blocks, target):
                return False            # a backward branch that is no loop
            spans[target] = max(spans.get(target, b.index), b.index)
    for h1, l1 in spans.items():
        for h2, l2 in spans.items():
            if h1 < h2 <= l1 < l2:
                return False
    return True


class _Unordered(Exception):
    pass


def _layout(kernel):
    blocks = basic_blocks(kernel)
    live = _reachable(blocks, 0)
    if _in_order(blocks, live):
        return None
    try:
        order, loops = _loop_order(blocks, live)
        return _emit_order(blocks, order, loops, live)
    except _Unordered:
        return None


def _loop_order(blocks: list[BasicBlock], live: set[int]):
    """(the new order of block indices, and for each loop header the loop's body) by a loop-nesting topological
    sort: inside each loop (and at the top) the inner loops are single nodes, ordered topologically along the
    forward edges, ties in the text's order."""
    succ = {i: [s for s in blocks[i].successors if s in live] for i in live}
    pred: dict[int, set[int]] = {i: set() for i in live}
    for i, ss in succ.items():
        for s in ss:
            pred[s].add(i)
    # Back edges: edges to a block on the depth-first stack.
    back: dict[int, set[int]] = {}
    state = {0: 1}
    stack = [(0, iter(succ[0]))]
    while stack:
        node, it = stack[-1]
        for s in it:
            if state.get(s) == 1:
                back.setdefault(s, set()).add(node)
            elif s not in state:
                state[s] = 1
                stack.append((s, iter(succ[s])))
                break
        else:
            state[node] = 2
            stack.pop()
    loops: dict[int, set[int]] = {}
    for header, latches in back.items():
        body, work = {header}, list(latches)
        while work:
            n = work.pop()
            if n not in body:
                body.add(n)
                work.extend(pred[n])
        loops[header] = body
    for h1, b1 in loops.items():
        for h2, b2 in loops.items():
            if h1 != h2 and b1 & b2 and not (b1 < b2 or b2 < b1):
                raise _Unordered          # loops that share blocks without nesting: a cycle with two entries
    order = _region(sorted(live), None, loops, succ)
    return order, loops


def _region(nodes: list[int], header: int | None, loops: dict, succ: dict) -> list[int]:
    members = set(nodes)
    inner = [h for h in loops if h != header and h in members]
    outermost = [h for h in inner if not any(h2 != h and h2 in inner and loops[h] < loops[h2] for h2 in inner)]
    rep = {n: n for n in nodes}
    for h in outermost:
        for n in loops[h]:
            rep[n] = h
    tops = sorted(set(rep.values()))
    edges: dict[int, set[int]] = {t: set() for t in tops}
    indegree = {t: 0 for t in tops}
    for u in nodes:
        for v in succ[u]:
            if v not in members or v == header or rep[u] == rep[v] or rep[v] in edges[rep[u]]:
                continue
            edges[rep[u]].add(rep[v])
            indegree[rep[v]] += 1
    first = header if header is not None else 0
    if indegree.get(first, 1):
        raise _Unordered
    ready, order = [first], []
    while ready:
        ready.sort()
        t = ready.pop(0)
        order.append(t)
        for v in edges[t]:
            indegree[v] -= 1
            if not indegree[v]:
                ready.append(v)
    if len(order) != len(tops):
        raise _Unordered                  # a cycle the back edges did not break (two entries)
    out = []
    for t in order:
        if t in outermost:
            out.extend(_region(sorted(loops[t]), t, loops, succ))
        else:
            out.append(t)
    return out


def _emit_order(blocks: list[BasicBlock], order: list[int], loops: dict, live: set[int]) -> list:
    """The body in the new order: branches to a loop's header from inside it go to one latch block placed after the
    loop's last block (unless one block, the last, is the only one going back), and a fall-through whose successor
    moved gets an explicit ``bra.uni``."""
    order = order + [b.index for b in blocks if b.index not in live]
    position = {index: k for k, index in enumerate(order)}
    latch_of: dict[int, str] = {}          # header -> the new latch label
    after: dict[int, list[int]] = {}       # block index -> headers whose latch goes right after it
    for header, body in loops.items():
        last = max(body, key=lambda n: position[n])
        going_back = [n for n in body if header in blocks[n].successors]
        term = blocks[last].terminator
        if going_back == [last] and term is not None and term.base == "bra" and blocks[last].successors[0] == header \
                and header not in blocks[last].successors[1:]:
            continue                    # the last block is the one latch already
        latch_of[header] = f"$L_latch{header}"
        after.setdefault(last, []).append(header)
    # Nested loops ending at one block: the inner loop's latch first.
    for index, headers in after.items():
        headers.sort(key=lambda h: len(loops[h]))
    labels = {b.index: (b.labels[0] if b.labels else f"$L_block{b.index}") for b in blocks}

    def target(source: int, dest: int) -> str:
        for header, body in loops.items():
            if dest == header and source in body and header in latch_of:
                return latch_of[header]
        return labels[dest]

    def jump(to: str, like) -> Instruction:
        return Instruction("bra.uni", (Label(to),), None, False, like.line if like else 0, f"bra.uni {to}")

    out: list = []
    # The text that comes next after each block in the new order (a label of the next block or of a latch).
    sequence: list[tuple[str, object]] = []
    for index in order:
        sequence.append(("block", index))
        for header in after.get(index, []):
            sequence.append(("latch", header))
    for k, (kind, item) in enumerate(sequence):
        nxt = sequence[k + 1] if k + 1 < len(sequence) else None
        next_label = None
        if nxt is not None:
            next_label = labels[nxt[1]] if nxt[0] == "block" else latch_of[nxt[1]]
        if kind == "latch":
            out.append(Label(latch_of[item]))
            last = blocks[max(loops[item], key=lambda n: position[n])]
            like = last.terminator or (last.body[-1] if last.body else None)
            out.append(jump(labels[item], like))
            continue
        b = blocks[item]
        names = b.labels or ([labels[item]] if any(item in blocks[o].successors for o in range(len(blocks))) else [])
        out.extend(Label(name) for name in names)
        out.extend(b.body)
        term = b.terminator
        like = term or (b.body[-1] if b.body else None)
        falls = term is None or term.guard is not None
        if term is not None:
            if term.base == "bra":
                to = target(item, b.successors[0])
                out.append(term if to == term.operands[0].name else _branch(term, to))
            else:
                out.append(term)
        if falls and item + 1 < len(blocks):
            to = target(item, item + 1)
            if to != next_label:
                out.append(jump(to, like))
    return out
