"""Emission: executable basic blocks, in program order, as machine ops under lane predicates.

Forward branches are if-converted into lane predicates (so ``if (i != 0) return;`` lets one thread post a flag);
backward branches stay real branches: uniform ones (``while (*flag < k) {}``) as the machine's branch on lane values.
Registers that hold addresses (pointers.address_registers) are kept in words, or in bytes where a byte offset is
not known to be a whole number of words (``Emitter.bytes``); every other register holds a plain value: 32-bit
registers their value, narrower ones their value zero-extended (so unsigned compares need nothing),
64-bit ones their low word. Each PTX instruction becomes a short sequence of the machine's ALU ops (isa.OPS); the
table ``self.OPS`` names the method that builds each. Fences are no-ops: one warp runs at a time and stores leave in
order. ``bar.sync`` is a no-op in a block of one warp; with several warps it becomes a marker that
``lowering.barriers`` expands.

Example::

    >>> from qwengpu.lowering import lower                 # the stages in order; see lowering/__init__.py
"""
from __future__ import annotations

import itertools

from ..isa import LANES, MachineError
from ..ptx import Imm, Instruction, Mem, Reg
from .cfg import BasicBlock
from .mop import MOp
from .pointers import address_registers
from .predicates import FALSE, TRUE, Predicate
from .transfer import evaluate, guard_value, make_reader, sources, step
from .values import DYNAMIC, MASK32, SPECIAL, Affine, Const, Context, destination, signed, unsupported, width
from .semantics import bits_of, to_signed, types

# Every function of two 0/1 atoms (a, b) that depends on both, as one ALU op on (a, b) and whether to negate it.
TWO_ATOMS = {
    frozenset({(True, True)}): ("and", False),
    frozenset({(True, False)}): ("gt_u", False),
    frozenset({(False, True)}): ("lt_u", False),
    frozenset({(False, False)}): ("or", True),
    frozenset({(True, True), (True, False), (False, True)}): ("or", False),
    frozenset({(True, False), (False, True)}): ("ne", False),
    frozenset({(True, True), (False, False)}): ("ne", True),
    frozenset({(True, True), (True, False), (False, False)}): ("lt_u", True),
    frozenset({(True, True), (False, True), (False, False)}): ("gt_u", True),
    frozenset({(True, False), (False, True), (False, False)}): ("and", True),
}


class _Divergent(Exception):
    """A loop believed uniform has a lane-dependent condition: emission restarts with it in SIMT form."""

    def __init__(self, header: int):
        super().__init__(header)
        self.header = header


CMP_OPS = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
           "lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


class Emitter:
    """Walks the executable basic blocks in program order and emits machine ops under lane predicates."""

    def __init__(self, kernel, blocks: list[BasicBlock], states: dict, context: Context):
        self.kernel, self.blocks, self.states, self.context = kernel, blocks, states, context
        self.mops: list[MOp] = []
        self.barrier = False
        self.temps = itertools.count()
        self.materialized: dict[Predicate, tuple] = {}
        self.addresses = address_registers(kernel.body)
        self.definitions: dict[str, list[Instruction]] = {}
        for inst in kernel.body:
            if isinstance(inst, Instruction) and destination(inst):
                self.definitions.setdefault(destination(inst), []).append(inst)
        self.dynamic = self._dynamic_registers()
        self.used = self._source_registers()
        self.bytes = self._byte_registers()
        self.pred = TRUE
        self.inst: Instruction | None = None

    # -- analyses over the executable blocks ----------------------------------------------------------------------
    def _walk(self):
        """(instruction, state before it, read) for every instruction of every executable block."""
        for index, entry in self.states.items():
            state = dict(entry)
            read = make_reader(state, self.context)
            block = self.blocks[index]
            for inst in block.body:
                yield inst, state, read
                step(inst, state, read, self.context)
            if block.terminator is not None:
                yield block.terminator, state, read

    def _dynamic_registers(self) -> set[str]:
        """Registers whose value the machine must hold in some place they are read."""
        dynamic = set()
        for inst, state, read in self._walk():
            for operand in inst.operands + ((inst.guard,) if inst.guard else ()):
                reg = operand.base if isinstance(operand, Mem) else operand
                if isinstance(reg, Reg) and reg.name not in SPECIAL and state.get(reg.name) == DYNAMIC:
                    dynamic.add(reg.name)
        return dynamic

    def _byte_registers(self) -> set[str]:
        """Address registers the machine keeps in bytes rather than words: those some definition makes from a value
        not known to be a multiple of 4 (``x[(v >> 22) & 7]`` written as a byte offset ``cvt.u64.u32 %rd, %r``
        and an ``and.b64`` with 28), and what they feed. An ``and`` with a multiple of 4 makes words again. Every
        other address register stays in words, so kernels whose addresses are whole words lower as before."""
        definitions = []            # (dst, a byte-making source value?, address registers it reads, word-making and?)
        for inst, state, read in self._walk():
            dst = destination(inst)
            if dst not in self.addresses or dst not in self.dynamic or guard_value(inst, read) == Const(0):
                continue
            value = evaluate(inst, read, self.context)
            if value is None:
                continue
            if inst.base == "ld":
                # A word (or narrower) loaded into a register that addresses use: a value, so a byte offset as it
                # stands (``ld.global.u32 %rd7, [..]; and.b64 %rd8, %rd7, 31`` indexes bytes). 64-bit loads of
                # pointers are refused where they are emitted.
                definitions.append((dst, True, (), False))
                continue
            if value != DYNAMIC:
                definitions.append((dst, not self._whole_words(value), (), False))
                continue
            base, ops = inst.base, inst.operands
            if base in ("mov", "cvta", "add", "sub", "and", "or", "xor", "selp"):
                operands = ops[1:3] if base == "selp" else ops[1:]
                values = [read(o) for o in operands]
                unaligned = any(isinstance(v, (Const, Affine)) and not self._whole_words(v) for v in values)
                regs = tuple(o.name for o, v in zip(operands, values) if isinstance(o, Reg) and v == DYNAMIC
                             and o.name in self.addresses)
                words_again = base == "and" and any(isinstance(v, Const) and v.value % 4 == 0 for v in values)
                definitions.append((dst, unaligned and not words_again, regs, words_again))
            elif base in ("mul", "shl", "cvt"):
                definitions.append((dst, not self._scaled_to_words(inst, read), (), False))
            else:
                # A value made by other arithmetic (``shr.u64`` of NVRTC's division by a constant, ``not.b64``)
                # that an and / add then makes a byte offset: the value itself, in bytes.
                definitions.append((dst, True, (), False))
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for dst, unaligned, regs, words_again in definitions:
                if dst not in found and not words_again and (unaligned or any(r in found for r in regs)):
                    found.add(dst)
                    changed = True
        return found

    @staticmethod
    def _whole_words(value) -> bool:
        if isinstance(value, Const):
            return value.value % 4 == 0
        return isinstance(value, Affine) and value.coef % 4 == 0 and value.offset % 4 == 0

    def _scaled_to_words(self, inst: Instruction, read) -> bool:
        """Whether a mul / shl / cvt that makes a byte offset makes a whole number of words (the element size a
        multiple of 4, or an index that is one)."""
        ops = inst.operands
        if inst.base == "cvt":
            index, factor = ops[1], 1
        elif inst.base == "shl":
            amount = read(ops[2])
            if not isinstance(amount, Const):
                return True                 # refused where it is emitted
            index, factor = ops[1], 1 << min(amount.value, 63)
        else:
            a, b = read(ops[1]), read(ops[2])
            index, other = (ops[2], a) if isinstance(a, Const) else (ops[1], b)
            if not isinstance(other, Const):
                return True                 # refused where it is emitted
            factor = to_signed(other.value, 64)
        if factor % 4 == 0:
            return True
        return isinstance(index, Reg) and self._aligned(index.name)

    def _source_registers(self) -> set[str]:
        names = set()
        for block in self.blocks:
            for inst in block.body + ([block.terminator] if block.terminator else []):
                first = 1 if destination(inst) else 0
                for operand in list(inst.operands[first:]) + [inst.guard]:
                    reg = operand.base if isinstance(operand, Mem) else operand
                    if isinstance(reg, Reg):
                        names.add(reg.name)
        return names

    def temp(self) -> str:
        return f"%t{next(self.temps)}"

    def reg_bits(self, name: str) -> int:
        """The declared width of a register (by its name's prefix)."""
        typ = self.kernel.registers.get(name.rstrip("0123456789")) or self.kernel.registers.get(name, "b32")
        return 1 if typ == "pred" else bits_of(typ) or 32

    # -- predicates ------------------------------------------------------------------------------------------------
    def predicate_field(self, pred: Predicate):
        """A machine predicate (register, negated) that holds exactly where ``pred`` does; None for always."""
        if pred.always:
            return None
        if pred.never:
            raise MachineError("internal: emitting under a false predicate")
        if len(pred.atoms) == 1:
            return (pred.atoms[0], (True,) not in pred.rows)
        if pred not in self.materialized:
            self.materialized[pred] = self._truth(pred)
        return self.materialized[pred]

    def _truth(self, pred: Predicate) -> tuple[str, bool]:
        """Compute a predicate over 0/1 registers: any function of two atoms is one ALU op (and, or, ne, lt_u,
        gt_u, possibly negated); more atoms split on the first (Shannon), joined by a predicated copy."""
        a, b = pred.atoms[0], pred.atoms[1] if len(pred.atoms) > 1 else None
        if len(pred.atoms) == 2:
            op, negated = TWO_ATOMS[pred.rows]
            result = self.temp()
            self.mops.append(MOp(op, (a, 0), (b, 0), result, text="lane predicate"))
            return (result, negated)
        low = self._restrict(pred, a, False)
        high = self._restrict(pred, a, True)
        result = self.temp()
        self.mops.append(MOp("a", self._truth_value(low), dst=result, text="lane predicate"))
        self.mops.append(MOp("a", self._truth_value(high), dst=result, pred=(a, False), text="lane predicate"))
        return (result, False)

    def _truth_value(self, pred: Predicate) -> tuple:
        """A machine operand that is 1 where pred holds and 0 elsewhere."""
        if pred.always or pred.never:
            return (None, int(pred.always))
        source, negated = self.predicate_field(pred)
        if not negated:
            return (source, 0)
        flipped = self.temp()
        self.mops.append(MOp("eq", (source, 0), (None, 0), flipped, text="lane predicate"))
        return (flipped, 0)

    @staticmethod
    def _restrict(pred: Predicate, atom: str, value: bool) -> Predicate:
        i = pred.atoms.index(atom)
        atoms = pred.atoms[:i] + pred.atoms[i + 1:]
        rows = frozenset(r[:i] + r[i + 1:] for r in pred.rows if r[i] == value)
        return Predicate(atoms, rows).simplify()

    def invalidate(self, register: str) -> None:
        self.materialized = {p: v for p, v in self.materialized.items() if register not in p.atoms}

    # -- operands --------------------------------------------------------------------------------------------------
    def value_operand(self, operand, value) -> tuple:
        """A machine operand (source, imm) holding ``value`` as a plain 32-bit word."""
        if isinstance(value, Const):
            return (None, value.value & MASK32)
        if isinstance(value, Affine):
            if value.coef == 1:
                return ("tid", value.offset & MASK32)
            scaled = self.temp()
            self.mops.append(MOp("mul", ("tid", 0), (None, value.coef & MASK32), scaled, text="thread index scale"))
            return (scaled, value.offset & MASK32)
        if value == DYNAMIC and isinstance(operand, Reg):
            if operand.name == "%laneid":
                lane = self.temp()
                self.mops.append(MOp("and", ("tid", 0), (None, 3), lane, text="lane id"))
                return (lane, 0)
            return (operand.name, 0)
        raise MachineError(f"register {operand} is read before any definition reaches it")

    def word_value(self, value, what: str):
        """A known byte address or offset as a known word address: it must be a multiple of 4."""
        inst = self.inst
        if isinstance(value, Const):
            byte = to_signed(value.value, 64)
            if byte % 4:
                raise MachineError(f"line {inst.line}: {what} {byte} is not a multiple of 4 (word aligned): "
                                   f"{inst.text}")
            return Const((byte // 4) & MASK32)
        if value.coef % 4 or value.offset % 4:
            raise MachineError(f"line {inst.line}: {what} {value.coef}*tid{value.offset:+d} is not word aligned: "
                               f"{inst.text}")
        return Affine(value.coef // 4, value.offset // 4)

    def src(self, read, i: int) -> tuple:
        """Source i of the current instruction as a plain value."""
        operand = sources(self.inst)[i]
        value = read(operand)
        if isinstance(operand, Reg) and operand.name in self.addresses:
            # A register that holds addresses or byte offsets, read here as a value (``cvt.u32.u64 %r, %rd`` of an
            # index NVRTC also adds to a char array's address): its byte value, from words times 4. A pointer
            # stored to memory stays refused (the machine keeps no pointers in its words).
            if self.inst.base in ("st", "atom", "red"):
                raise MachineError(f"line {self.inst.line}: {operand.name} holds an address and is stored here as "
                                   f"a value (pointers are not kept in memory): {self.inst.text}")
            if value == DYNAMIC:
                if operand.name in self.bytes:
                    return (operand.name, 0)
                return (self.op("shl", (operand.name, 0), (None, 2)), 0)
        bits = width(self.inst)
        if isinstance(value, Const) and bits < 32:
            # An immediate of a narrow instruction is its low bits (``mul.wide.u16 %r, %rs, -21845`` is 0xAAAB).
            value = Const(value.value & ((1 << bits) - 1))
        return self.value_operand(operand, value)

    def word(self, read, operand) -> tuple:
        """An operand of address arithmetic, in words."""
        value = read(operand)
        if isinstance(value, (Const, Affine)):
            return self.value_operand(operand, self.word_value(value, "byte offset"))
        if isinstance(operand, Reg) and operand.name in self.addresses:
            return (operand.name, 0)
        raise MachineError(f"line {self.inst.line}: {operand} is used as an address but holds a plain value: "
                           f"{self.inst.text}")

    def byte_operand(self, read, operand) -> tuple:
        """An operand of address arithmetic kept in bytes (self.bytes): known values as they are, a word-kept
        address register times 4."""
        value = read(operand)
        if isinstance(value, (Const, Affine)):
            return self.value_operand(operand, value)
        if isinstance(operand, Reg) and operand.name in self.bytes:
            return (operand.name, 0)
        if isinstance(operand, Reg) and operand.name in self.addresses:
            return (self.op("shl", (operand.name, 0), (None, 2)), 0)
        raise MachineError(f"line {self.inst.line}: {operand} is used as an address but holds a plain value: "
                           f"{self.inst.text}")

    def address(self, read, mem: Mem) -> tuple[tuple, int | str]:
        """A memory operand as (word address operand, byte within the word); where the byte is known only to the
        machine, the second item is a register holding its bit shift (byte * 8)."""
        inst = self.inst
        if isinstance(mem.base, str) and mem.base in self.context.symbols:
            byte = self.context.symbols[mem.base] + mem.offset      # ``[s+4]``: a .shared array's word
            return (None, (byte // 4) & MASK32), byte % 4
        if isinstance(mem.base, str) or mem.base is None:
            raise unsupported(inst, "only addresses held in registers are global memory")
        value = read(mem.base)
        if isinstance(value, Const):
            byte = value.value + mem.offset
            return (None, (byte // 4) & MASK32), byte % 4
        if isinstance(value, Affine):
            shifted = Affine(value.coef, value.offset + mem.offset)
            if shifted.coef % 4:
                # Bytes or halfwords indexed by the thread: the word is byte >> 2, the field's shift (byte & 3) * 8.
                byte_address = self.value_operand(None, shifted)
                word = self.op("shr_u", byte_address, (None, 2))
                low = self.op("and", byte_address, (None, 3))
                return (word, 0), self.op("shl", (low, 0), (None, 3))
            base = Affine(shifted.coef, shifted.offset - shifted.offset % 4)
            return self.value_operand(None, self.word_value(base, "address")), shifted.offset % 4
        if mem.base.name not in self.addresses:
            raise MachineError(f"line {inst.line}: {mem.base.name} is not an address the machine can use: "
                               f"{inst.text}")
        if mem.base.name in self.bytes:
            # A byte address computed at run time: the word is byte >> 2, the field's shift (byte & 3) * 8 (a
            # 32-bit access is aligned, as on a GPU, so it needs no shift).
            byte_address = (mem.base.name, mem.offset & MASK32)
            if mem.offset:
                byte_address = (self.op("a", byte_address), 0)
            word = self.op("shr_u", byte_address, (None, 2))
            if width(inst) >= 32:
                return (word, 0), 0
            low = self.op("and", byte_address, (None, 3))
            return (word, 0), self.op("shl", (low, 0), (None, 3))
        return (mem.base.name, (mem.offset // 4) & MASK32), mem.offset % 4

    # -- emission --------------------------------------------------------------------------------------------------
    def loops(self) -> dict[int, int]:
        """header block -> latch block (the one block whose branch goes back to it); loops must nest."""
        loops: dict[int, int] = {}
        for block in self.blocks:
            term = block.terminator
            if term is None or term.base != "bra" or block.index not in self.states:
                continue
            header = block.successors[0]
            if header <= block.index:
                if header in loops:
                    raise MachineError(f"kernel {self.kernel.name}: the loop at line {term.line} has a second branch "
                                       "back to its start (one latch per loop is supported)")
                loops[header] = block.index
        spans = sorted(loops.items())
        for h1, l1 in spans:
            for h2, l2 in spans:
                if h1 < h2 <= l1 < l2:
                    raise MachineError(f"kernel {self.kernel.name}: loops overlap without nesting (blocks {h1}..{l1} "
                                       f"and {h2}..{l2})")
        return loops

    def run(self) -> list[MOp]:
        """Emit every executable block. A loop is first tried as a uniform loop (the machine's uniform branch: no
        extra records); if its condition turns out to differ across lanes, emission restarts with that loop in
        SIMT form."""
        self.divergent: set[int] = set()
        loops = self.loops()
        while True:
            self.mops, self.materialized, self.barrier, self.after_loop = [], {}, False, {}
            self.loop_entries: dict[int, list[str]] = {}
            try:
                return self._run(loops)
            except _Divergent as d:
                if d.header in self.divergent:
                    raise MachineError(f"internal: loop at block {d.header} diverges in SIMT form") from None
                self.divergent.add(d.header)

    def _run(self, loops: dict[int, int]) -> list[MOp]:
        incoming: dict[int, Predicate] = {0: TRUE}
        self.incoming = incoming
        first_mop: dict[int, int] = {}
        back_edges = []
        open_loops: list[tuple[int, int, dict]] = []      # (header, latch, exit target -> its mask register)
        for block in self.blocks:
            if block.index not in self.states:
                continue
            pred = incoming.get(block.index, FALSE)
            if block.index in loops and block.index in self.divergent:
                pred = self._enter_loop(block.index, loops[block.index], pred, open_loops)
            if pred.never:
                continue
            first_mop[block.index] = len(self.mops)
            if len(pred.atoms) >= 3:
                # A join of many paths: computed once into a mask, so later predicates stay small.
                self.inst = block.body[0] if block.body else block.terminator
                mask = self.temp()
                self._materialize(pred, mask)
                pred = Predicate.atom(mask)
            self.block_index = block.index
            state = dict(self.states[block.index])
            read = make_reader(state, self.context)
            self.block_pred = pred
            for inst in block.body:
                self.instruction(inst, self.block_pred, state, read)
            pred = self.block_pred
            for successor, contribution in self.terminator(block, pred, read, open_loops):
                if successor <= block.index:
                    back_edges.append((block, successor, contribution))
                    continue
                exits = [lp for lp in open_loops if successor > lp[1]]
                if exits and successor in exits[-1][2]:                  # leaving a SIMT loop: the lane is remembered in the loop's exit mask
                    mask = exits[-1][2][successor]
                    self.inst = block.terminator or (block.body[-1] if block.body else None)
                    self.emit(MOp("a", (None, 1), dst=mask), contribution)
                    self.invalidate(mask)
                else:
                    incoming[successor] = incoming.get(successor, FALSE) | contribution
            while open_loops and open_loops[-1][1] == block.index:
                _, _, exits = open_loops.pop()
                after = self.after_loop.pop(block.index, None)
                if after is not None:           # a loop left only at its end: the lanes that entered it
                    incoming[block.index + 1] = incoming.get(block.index + 1, FALSE) | after
                for target, mask in exits.items():
                    if any(target > lp[1] for lp in open_loops):
                        continue               # an exit of an enclosing loop too: handled where that loop ends
                    incoming[target] = incoming.get(target, FALSE) | Predicate.atom(mask)
        for block, header, contribution in back_edges:
            if header not in self.divergent and incoming.get(header, FALSE) != contribution:
                raise _Divergent(header)
        for mop in self.mops:
            if isinstance(mop.target, int):
                if mop.target not in first_mop:
                    raise MachineError(f"internal: branch to block {mop.target} that emitted nothing")
                mop.target_index = first_mop[mop.target]
        targets = {mop.target for mop in self.mops if isinstance(mop.target, int)}
        for index, position in first_mop.items():
            if index in targets and position < len(self.mops):
                self.mops[position].labels.add(index)
        return self.mops

    def _enter_loop(self, header: int, latch: int, pred: Predicate, open_loops) -> Predicate:
        """Before a SIMT loop: its active mask (the lanes that enter) and a zeroed exit mask per exit target."""
        self.inst = self.blocks[header].body[0] if self.blocks[header].body else self.blocks[header].terminator
        targets = set()
        for index in range(header, latch + 1):
            if index not in self.states:
                continue
            for successor in self.blocks[index].successors:
                if successor > latch:
                    targets.add(successor)
        enclosing = [lp for lp in open_loops]
        exits = {}
        # A loop may be entered in its middle (a rotated loop jumps to its condition first): those lanes start
        # there, once. Each such entry gets a mask, cleared at the latch so it admits no lane again.
        entries = []
        entered = pred
        for index in range(header + 1, latch + 1):
            middle = self.incoming.get(index, FALSE)
            if middle.never:
                continue
            entered = entered | middle
            register = f"%enter{index}"
            self._materialize(middle, register)
            self.invalidate(register)
            self.incoming[index] = Predicate.atom(register)
            entries.append(register)
        self.loop_entries[header] = entries
        inside = [self.blocks[i] for i in range(header, latch + 1) if i in self.states]
        returns = any(b.terminator is not None and b.terminator.base in ("ret", "exit") for b in inside)
        if targets <= {latch + 1} and not returns and not any(latch + 1 > lp[1] for lp in enclosing):
            # Left only through its end: after it, the lanes that entered (kept in a register only if the loop
            # rewrites one that the entry predicate reads).
            written = {destination(i) for b in inside for i in b.body} - {None}
            mask = f"%active{header}"
            if written & set(entered.atoms) or len(entered.atoms) > 2 or entries:
                register = f"%entered{header}"
                self._materialize(entered, register)
                self.invalidate(register)
                self.after_loop[latch] = Predicate.atom(register)
            else:
                self.after_loop[latch] = entered
            self._materialize(pred, mask)
            self.invalidate(mask)
            open_loops.append((header, latch, {}))
            return Predicate.atom(mask)
        for target in sorted(targets):
            # An exit that also leaves an enclosing SIMT loop reuses that loop's mask (the lane left both).
            outer = [lp for lp in enclosing if target > lp[1]]
            if outer:
                exits[target] = outer[-1][2][target]
                continue
            exits[target] = f"%exit{header}_{target}"
            self.emit(MOp("a", (None, 0), dst=exits[target]), TRUE)
            self.invalidate(exits[target])
        mask = f"%active{header}"
        if not pred.never:
            self._materialize(pred, mask)
        else:
            self.emit(MOp("a", (None, 0), dst=mask), TRUE)
        self.invalidate(mask)
        open_loops.append((header, latch, exits))
        return Predicate.atom(mask)

    def _materialize(self, pred: Predicate, dst: str, **kw) -> None:
        """dst = 1 on the lanes where pred holds, 0 elsewhere (every lane writes)."""
        if pred.always:
            self.emit(MOp("a", (None, 1), dst=dst, **kw), TRUE)
            return
        if pred.never:
            self.emit(MOp("a", (None, 0), dst=dst, **kw), TRUE)
            return
        if len(pred.atoms) == 2 and pred not in self.materialized:
            op, negated = TWO_ATOMS[pred.rows]
            if not negated:          # one op straight into dst
                self.emit(MOp(op, (pred.atoms[0], 0), (pred.atoms[1], 0), dst, **kw), TRUE)
                return
        source, negated = self.predicate_field(pred)
        self.emit(MOp("eq" if negated else "ne", (source, 0), (None, 0), dst, **kw), TRUE)

    def _varying(self, register: str) -> bool:
        """Whether a register may differ across lanes, from the ops emitted so far (thread index, predicated
        writes, loads at lane-dependent addresses, and what they feed)."""
        varying: set[str] = set()
        changed = True
        while changed:
            changed = False
            for mop in self.mops:
                sources_ = [s for s, _ in (mop.a, mop.b)]
                if mop.dst and mop.dst not in varying and (
                        mop.pred is not None or "tid" in sources_ or any(s in varying for s in sources_)
                        or mop.atomic):
                    varying.add(mop.dst)
                    changed = True
        return register in varying

    def terminator(self, block: BasicBlock, pred: Predicate, read, open_loops=()):
        term = block.terminator
        fall = block.index + 1
        self.inst = term
        if term is None:
            return [(fall, pred)] if fall < len(self.blocks) else []
        guard = guard_value(term, read)
        if guard == Const(0):
            return [(fall, pred)] if fall < len(self.blocks) else []
        guarded = guard != Const(1)
        taken_pred = pred & Predicate.atom(term.guard.name, term.guard_negated) if guarded else pred
        if term.base in ("ret", "exit"):
            return [(fall, pred & ~taken_pred)] if guarded and fall < len(self.blocks) else []
        target = block.successors[0]
        if target > block.index:                               # forward: if-converted, no machine branch
            edges = [(target, taken_pred)]
            if guarded:
                edges.append((fall, pred & ~taken_pred))
            return edges
        if target in self.divergent:                           # the latch of a SIMT loop
            if guarded and not (pred & ~taken_pred).never and fall in open_loops[-1][2]:
                # Lanes leaving here are remembered before the mask is rewritten and the loop branches back.
                exit_mask = open_loops[-1][2][fall]
                self.emit(MOp("a", (None, 1), dst=exit_mask), pred & ~taken_pred)
                self.invalidate(exit_mask)
            entries = self.loop_entries.get(target, ())
            if set(entries) & set(taken_pred.atoms):
                # The lanes that go on are read before the entry masks they depend on are cleared.
                going_on = self.temp()
                self._materialize(taken_pred, going_on)
                taken_pred = Predicate.atom(going_on)
            for register in entries:
                self.emit(MOp("a", (None, 0), dst=register), TRUE)
                self.invalidate(register)
            mask = f"%active{target}"
            self._materialize(taken_pred, mask, branch="any", target=target)
            self.invalidate(mask)
            return [(target, taken_pred)]
        # A backward branch is a loop: a real, uniform branch.
        if not pred.always:
            raise _Divergent(target)
        if guarded:
            condition = self.value_operand(term.guard, read(term.guard))
            if condition[0] is not None and self._varying(condition[0]):
                raise _Divergent(target)
            self.mops.append(MOp("a", condition, branch="zero" if term.guard_negated else "nonzero", target=target,
                                 line=term.line, text=term.text))
            return [(target, pred), (fall, pred)]
        self.mops.append(MOp("a", branch="always", target=target, line=term.line, text=term.text))
        return [(target, pred)]

    def emit(self, mop: MOp, pred: Predicate | None = None) -> MOp:
        if self.inst is not None:
            mop.line, mop.text = self.inst.line, self.inst.text
        mop.pred = self.predicate_field(self.pred if pred is None else pred)
        self.mops.append(mop)
        return mop

    def op(self, name: str, a: tuple, b: tuple = (None, 0), dst: str | None = None, **kw) -> str:
        """Emit ``dst = name(a, b)`` under the current predicate; a fresh temporary when dst is None."""
        dst = dst or self.temp()
        self.emit(MOp(name, a, b, dst, **kw))
        return dst

    def instruction(self, inst: Instruction, pred: Predicate, state: dict, read) -> None:
        self.inst = inst
        base = inst.base
        if base in ("membar", "fence", "bar", "barrier"):
            if base in ("bar", "barrier"):
                self._barrier(read)
            return
        guard = guard_value(inst, read)
        if guard == Const(0):
            return
        if guard != Const(1):
            pred = pred & Predicate.atom(inst.guard.name, inst.guard_negated)
        self.pred = pred
        if destination(inst) in self.dynamic:
            self._protect(destination(inst))
        if base in ("st", "red"):
            self._check_global()
            if base == "red":
                self._atomic(read, None)
            else:
                self._store(read)
            return
        dst = destination(inst)
        if dst is None:
            raise unsupported(inst)
        if base == "atom":
            self._check_global()
            self._atomic(read, dst)
        elif dst in self.dynamic:
            value_here = evaluate(inst, read, self.context)
            if value_here is not None:
                self._compute(read, dst, value_here)
        step(inst, state, read, self.context)
        self.invalidate(dst)

    def _barrier(self, read) -> None:
        """``__syncthreads()``: a no-op for one warp (its lanes run in step); for several warps a marker that
        lowering.barriers turns into a parking block and a resume point. Every lane of the warp stops there,
        including lanes masked off by an if-converted branch (their masks are kept with the other registers)."""
        inst = self.inst
        mods = set(inst.modifiers)
        if inst.base == "bar" and mods == {"warp", "sync"}:
            return                  # __syncwarp(): a warp's lanes run in step
        if mods - {"sync", "aligned", "cta"} or len(inst.operands) not in (1, 2):
            raise unsupported(inst, "the barriers are bar.sync / barrier.sync of the whole block "
                                    "(__syncthreads); bar.arrive, bar.red and named partial barriers are not")
        if len(inst.operands) == 2:
            count = read(inst.operands[1])
            if not (isinstance(count, Const) and count.value >= self.context.threads):
                raise unsupported(inst, f"a barrier of fewer than the block's {self.context.threads} threads")
        if guard_value(inst, read) != Const(1):
            raise unsupported(inst, "a barrier under a lane predicate")
        self.barrier = True
        if self.context.threads > LANES:
            self.mops.append(MOp("a", barrier=True, line=inst.line, text=inst.text))

    def _protect(self, register: str | None) -> None:
        """Before ``register`` is rewritten, lane predicates still to be used (this block's, and those waiting at
        later blocks) that read it get a copy of its current value: they mean the value it had where they arose."""
        if register is None:
            return
        waiting = [(t, p) for t, p in self.incoming.items() if t > self.block_index and register in p.atoms]
        if register not in self.block_pred.atoms and not waiting:
            return
        copy = self.temp()
        saved = self.inst
        self.emit(MOp("ne", (register, 0), (None, 0), copy), TRUE)
        self.inst = saved

        def rename(p: Predicate) -> Predicate:
            if register not in p.atoms:
                return p
            named = [copy if a == register else a for a in p.atoms]
            order = sorted(range(len(named)), key=lambda i: named[i])
            rows = frozenset(tuple(row[i] for i in order) for row in p.rows)
            return Predicate(tuple(named[i] for i in order), rows)
        self.block_pred = rename(self.block_pred)
        self.pred = rename(self.pred)
        for target, p in waiting:
            self.incoming[target] = rename(p)

    def _check_global(self) -> None:
        inst = self.inst
        if "global" not in inst.modifiers and "shared" not in inst.modifiers and "volatile" not in inst.modifiers:
            raise MachineError(f"line {inst.line}: only global memory exists on this machine: {inst.text}")
        if width(inst) not in (8, 16, 32):
            raise MachineError(f"line {inst.line}: memory words are 32 bits; a {width(inst)}-bit access is not "
                               f"supported: {inst.text}")

    # -- memory ----------------------------------------------------------------------------------------------------
    def _store(self, read) -> None:
        inst = self.inst
        where, byte = self.address(read, inst.operands[0])
        value = self.src(read, 0)
        bits = width(inst)
        if bits == 32:
            if byte:
                raise MachineError(f"line {inst.line}: a 32-bit store at byte {byte} of a word is not aligned: "
                                   f"{inst.text}")
            self.emit(MOp("a", value, store=where))
            return
        # A narrow store is two atomic read-modify-writes of the word (clear the field, or in the value), so lanes
        # storing different bytes of one word all land.
        low_mask = (1 << bits) - 1
        if isinstance(byte, str):
            masked = self.op("and", value, (None, low_mask)) if value[0] is not None else None
            part = (self.op("shl", (masked, 0) if masked else (None, value[1] & low_mask), (byte, 0)), 0)
            field = self.op("shl", (None, low_mask), (byte, 0))
            keep = (self.op("xor", (field, 0), (None, MASK32)), 0)
        else:
            shift = 8 * byte
            keep = (None, ~(low_mask << shift) & MASK32)
            if value[0] is None:
                part = (None, ((value[1] & low_mask) << shift) & MASK32)
            else:
                masked = self.op("and", value, (None, low_mask))
                part = (self.op("shl", (masked, 0), (None, shift)), 0) if shift else (masked, 0)
        self.emit(MOp("and", where, keep, load=True, store=where, atomic=True))
        self.emit(MOp("or", where, part, load=True, store=where, atomic=True))

    def _load(self, read, dst: str) -> None:
        inst = self.inst
        where, byte = self.address(read, inst.operands[1])
        bits = width(inst)
        if bits == 32:
            if byte:
                raise MachineError(f"line {inst.line}: a 32-bit load at byte {byte} of a word is not aligned: "
                                   f"{inst.text}")
            self.op("a", where, dst=dst, load=True)
            return
        word = self.op("a", where, load=True)
        if isinstance(byte, str):           # the field moved to the top, then shifted down (sign or zero)
            lift = self.op("sub", (None, 32 - bits), (byte, 0))
            top = self.op("shl", (word, 0), (lift, 0))
            self._extract(top, 32 - bits, bits, signed(inst), dst)
            return
        self._extract(word, 8 * byte, bits, signed(inst), dst)

    def _extract(self, word: str, shift: int, bits: int, is_signed: bool, dst: str) -> None:
        """dst = the field of ``bits`` bits at ``shift`` of word, zero- or sign-extended to dst's width."""
        dst_bits = self.reg_bits(dst)
        if is_signed:
            top = self.op("shl", (word, 0), (None, 32 - shift - bits)) if 32 - shift - bits else word
            if dst_bits >= 32:
                self.op("shr_s", (top, 0), (None, 32 - bits), dst=dst)
            else:
                extended = self.op("shr_s", (top, 0), (None, 32 - bits))
                self.op("and", (extended, 0), (None, (1 << dst_bits) - 1), dst=dst)
            return
        shifted = self.op("shr_u", (word, 0), (None, shift)) if shift else word
        if shift + bits < 32:
            self.op("and", (shifted, 0), (None, (1 << bits) - 1), dst=dst)
        else:
            self.op("a", (shifted, 0), dst=dst)

    def _atomic(self, read, dst: str | None) -> None:
        inst = self.inst
        mem = inst.operands[1] if dst is not None else inst.operands[0]
        if width(inst) != 32:
            raise MachineError(f"line {inst.line}: atomics are on 32-bit words: {inst.text}")
        where, byte = self.address(read, mem)
        kinds = {"add": "add", "min": "min", "max": "max", "and": "and", "or": "or", "xor": "xor", "exch": "b",
                 "inc": None, "dec": None, "cas": None}
        kind = next((m for m in inst.modifiers if m in kinds), None)
        if kind == "cas":
            if dst is None:
                raise unsupported(inst, "atom.cas without a destination")
            self._atomic_in_lane_order(where, "b", self.src(read, 1), dst, compare=self.src(read, 0))
            return
        if kind in ("inc", "dec"):
            self._atomic_in_lane_order(where, kind, self.src(read, 0), dst if dst in self.used else None)
            return
        if kind is None or kinds[kind] is None:
            raise unsupported(inst, "atomics are add, min, max, and, or, xor and exch")
        op = kinds[kind]
        if op in ("min", "max"):
            op += "_s" if signed(inst) else "_u"
        value = self.src(read, 0)
        wanted = dst is not None and dst in self.used
        if not wanted:
            self.emit(MOp(op, where, value, None, load=True, store=where, atomic=True))
            return
        if op in ("add", "xor"):   # atom returns the old value: new - v or new ^ v, computed by the machine
            new = self.temp()
            self.emit(MOp(op, where, value, new, load=True, store=where, atomic=True))
            self.op("sub" if op == "add" else "xor", (new, 0), value, dst=dst)
            return
        self._atomic_in_lane_order(where, op, value, dst)

    def _atomic_in_lane_order(self, where: tuple, op: str, value: tuple, dst: str | None,
                              compare: tuple | None = None):
        """An atomic whose old value is wanted and cannot be recovered from the new one (min, max, and, or, exch),
        or one the atomic block cannot apply (cas, inc, dec): the lanes take turns in lane order, a uniform loop of
        one trip per lane. On its turn a lane loads the word, then updates it: an atomic block of that one lane, or
        for cas a store of the new value where the word equalled ``compare``, for inc / dec a store of the wrapped
        count. About 5 records a trip and 7-9 ROM blocks. The old value is the word one record before the update,
        so a peer's store landing at that record boundary is not in the returned value (an atomic block still
        applies its op to it; cas, inc and dec store what they computed from the old value)."""
        trips = min(LANES, self.context.threads)
        lane = self.temp()
        self.emit(MOp("and", ("tid", 0), (None, LANES - 1), lane), TRUE)
        rank = self.temp()          # trips - lane: the lanes' turns come as the counter goes down
        self.emit(MOp("sub", (None, trips), (lane, 0), rank), TRUE)
        left, old, turn = self.temp(), self.temp(), self.temp()
        self.emit(MOp("a", (None, trips), dst=left), TRUE)
        head = len(self.mops)
        self.emit(MOp("eq", (rank, 0), (left, 0), turn), TRUE)
        self.mops[head].labels.add(f"lanes{head}")
        mine = self.pred & Predicate.atom(turn)
        self.emit(MOp("a", where, dst=old, load=True), mine)
        if op == "inc":             # atomicInc: old >= v ? 0 : old + 1, as (old + 1) * (old < v)
            below = self.temp()
            self.emit(MOp("lt_u", (old, 0), value, below), mine)
            plus = self.temp()
            self.emit(MOp("add", (old, 0), (None, 1), plus), mine)
            self.emit(MOp("mul", (plus, 0), (below, 0), store=where), mine)
        elif op == "dec":           # atomicDec: old == 0 || old > v ? v : old - 1, i.e. v where old - 1 >= v
            less = self.temp()
            self.emit(MOp("add", (old, 0), (None, MASK32), less), mine)
            wraps = self.temp()
            self.emit(MOp("ge_u", (less, 0), value, wraps), mine)
            self.emit(MOp("a", (less, 0), store=where), mine)
            self.emit(MOp("a", value, store=where), mine & Predicate.atom(wraps))
            self.invalidate(wraps)
        elif compare is None:
            self.emit(MOp(op, where, value, None, load=True, store=where, atomic=True), mine)
        else:
            equal = self.temp()
            self.emit(MOp("eq", (old, 0), compare, equal), mine)
            self.emit(MOp("a", value, store=where), mine & Predicate.atom(equal))
            self.invalidate(equal)
        loop = self.emit(MOp("add", (left, 0), (None, MASK32), left, branch="nonzero", target="lanes"), TRUE)
        loop.target_index = head
        self.invalidate(turn)
        if dst is not None:
            self.op("a", (old, 0), dst=dst)

    # -- arithmetic --------------------------------------------------------------------------------------------------
    def _compute(self, read, dst: str, value_here) -> None:
        """Emit the machine op(s) that compute a dynamic destination."""
        inst = self.inst
        base = inst.base
        if value_here != DYNAMIC:
            # Known here, but the register merges with another definition elsewhere: the machine holds it.
            if dst in self.addresses and dst not in self.bytes:
                value_here = self.word_value(value_here, "address")
            self.op("a", self.value_operand(None, value_here), dst=dst)
            return
        if base == "ld":
            if "param" in inst.modifiers:
                raise unsupported(inst)
            self._check_global()
            self._load(read, dst)
            return
        if dst in self.addresses:
            self._address_arithmetic(read, dst)
            return
        method = getattr(self, "_op_" + base, None)
        if method is None:
            raise unsupported(inst)
        method(read, dst)

    def _address_arithmetic(self, read, dst: str) -> None:
        """Arithmetic whose result is an address or byte offset, computed in words."""
        inst = self.inst
        base, ops = inst.base, inst.operands
        if dst in self.bytes or (base == "and" and any(
                isinstance(o, Reg) and o.name in self.bytes or not self._whole_words(read(o)) and read(o) != DYNAMIC
                for o in ops[1:])):
            self._byte_arithmetic(read, dst)
            return
        if base in ("mov", "cvta"):
            self.op("a", self.word(read, ops[1]), dst=dst)
        elif base in ("add", "sub", "and", "or", "xor"):
            self.op(base, self.word(read, ops[1]), self.word(read, ops[2]), dst=dst)
        elif base == "selp":
            self._select(read, dst, self.word(read, ops[1]), self.word(read, ops[2]), ops[3])
        elif base in ("mul", "shl") or (base == "cvt" and len(types(inst)) == 2):
            # An index times the element size: the product in bytes, divided by 4 (exact for aligned addresses).
            if base == "cvt":
                index, factor = self.src(read, 0), 1
            elif base == "shl":
                if not isinstance(read(ops[2]), Const):
                    raise unsupported(inst, "an address shifted by a register")
                index, factor = self.src(read, 0), 1 << read(ops[2]).value
            else:
                a, b = read(ops[1]), read(ops[2])
                if isinstance(a, Const):
                    a, b = b, a
                    index_op = ops[2]
                else:
                    index_op = ops[1]
                if not isinstance(b, Const):
                    raise unsupported(inst, "an address that is a product of two machine values")
                index, factor = self.value_operand(index_op, a), to_signed(b.value, 64)
                if isinstance(index_op, Reg) and index_op.name in self.addresses:
                    raise unsupported(inst, "an address multiplied")
            whole = index[0] is not None and index[1] == 0 and self._aligned(index[0])
            if base == "cvt" and (bits_of(types(inst)[1]) or 32) < 32:
                index = (self.op("and", index, (None, (1 << bits_of(types(inst)[1])) - 1)), 0)
            if factor % 4 == 0:
                if factor // 4 == 1:
                    self.op("a", index, dst=dst)
                else:
                    self.op("mul", index, (None, (factor // 4) & MASK32), dst=dst)
            elif whole:
                # The index is itself a multiple of 4 (``i << 2`` made by the compiler): exact in words.
                shift = "shr_s" if (base == "cvt" and types(inst)[1].startswith("s")) or signed(inst) else "shr_u"
                words_ = self.op(shift, index, (None, 2))
                if factor == 1:
                    self.op("a", (words_, 0), dst=dst)
                else:
                    self.op("mul", (words_, 0), (None, factor & MASK32), dst=dst)
            else:
                raise MachineError(f"line {inst.line}: a byte offset of {factor} x a machine value is not a whole "
                                   f"number of words; byte-granular addresses must be known at launch (from the "
                                   f"thread index and arguments): {inst.text}")
        else:
            raise unsupported(inst, "this instruction cannot compute an address")

    def _byte_arithmetic(self, read, dst: str) -> None:
        """Address arithmetic kept in bytes (dst in self.bytes), or an ``and`` with a multiple of 4 that takes a
        byte-kept register back to words (the and in bytes, then >> 2)."""
        inst = self.inst
        base, ops = inst.base, inst.operands
        if base in ("mov", "cvta"):
            result = self.op("a", self.byte_operand(read, ops[1]), dst=dst if dst in self.bytes else None)
        elif base in ("add", "sub", "and", "or", "xor"):
            result = self.op(base, self.byte_operand(read, ops[1]), self.byte_operand(read, ops[2]),
                             dst=dst if dst in self.bytes else None)
        elif base == "selp":
            self._select(read, dst, self.byte_operand(read, ops[1]), self.byte_operand(read, ops[2]), ops[3])
            return
        elif base == "cvt":
            index = self.src(read, 0)
            source_bits = bits_of(types(inst)[1]) or 32
            if source_bits < 32:
                index = (self.op("and", index, (None, (1 << source_bits) - 1)), 0)
            self.op("a", index, dst=dst)
            return
        elif base == "shl":
            amount = read(ops[2])
            if not isinstance(amount, Const):
                raise unsupported(inst, "an address shifted by a register")
            self.op("shl", self.src(read, 0), (None, min(amount.value, 32)), dst=dst)
            return
        elif base == "mul":
            a, b = read(ops[1]), read(ops[2])
            index_op, factor = (ops[2], a) if isinstance(a, Const) else (ops[1], b)
            if not isinstance(factor, Const):
                raise unsupported(inst, "an address that is a product of two machine values")
            if isinstance(index_op, Reg) and index_op.name in self.addresses:
                raise unsupported(inst, "an address multiplied")
            self.op("mul", self.value_operand(index_op, read(index_op)), (None, factor.value & MASK32), dst=dst)
            return
        else:
            method = getattr(self, "_op_" + base, None)
            if method is None or dst not in self.bytes:
                raise unsupported(inst, "this instruction cannot compute an address")
            method(read, dst)       # a plain value (its low word) that is used as a byte offset
            return
        if dst not in self.bytes:
            self.op("shr_u", (result, 0), (None, 2), dst=dst)

    def _extension(self, read, operand, seen: frozenset = frozenset()) -> str | None:
        """"u" when a 64-bit operand's value is a zero-extended 32-bit value, "s" when sign-extended, else None."""
        value = read(operand) if not seen else None
        if isinstance(value, Const):
            v = value.value
            return "u" if v < (1 << 31) else ("u" if v < (1 << 32) else ("s" if v >= (1 << 64) - (1 << 31) else None))
        if isinstance(value, Affine):
            ends = [value.coef * t + value.offset for t in (0, self.context.threads - 1)]
            return "u" if 0 <= min(ends) and max(ends) < (1 << 31) else None
        if not isinstance(operand, Reg) or operand.name in seen or (
                operand.name in self.addresses and operand.name not in self.bytes):
            return None
        kinds = set()
        for inst in self.definitions.get(operand.name, []):
            typed = types(inst)
            if inst.base == "ld" and "param" not in inst.modifiers and width(inst) <= 32:
                kinds.add("s" if signed(inst) else "u")       # a word or narrower, extended into 64 bits
            elif inst.base == "cvt" and len(typed) == 2 and (bits_of(typed[1]) or 64) <= 32:
                kinds.add("s" if typed[1].startswith("s") else "u")
            elif inst.base == "mov" and isinstance(inst.operands[1], (Reg, Imm)):
                kinds.add(self._extension(read, inst.operands[1], seen | {operand.name}))
            elif self._below_2_32(inst, read, seen | {operand.name}):
                kinds.add("u")      # a 64-bit result whose high word is zero (``(x >> 34) & 1``)
            else:
                return None
        return kinds.pop() if len(kinds) == 1 else None

    def _below_2_32(self, inst: Instruction, read, seen: frozenset) -> bool:
        """Whether a 64-bit and / or / xor / shr / selp always leaves its high word zero: a right shift by 32 or
        more, an and with a zero-extended word, or / xor / selp of zero-extended words."""
        ops = [o for o in inst.operands[1:] if isinstance(o, (Reg, Imm))]
        if inst.guard is not None or width(inst) != 64 or len(ops) < 2:
            return False

        def small(o) -> bool:
            if isinstance(o, Imm):
                return 0 <= o.value < (1 << 32)
            return self._extension(read, o, seen) == "u"
        if inst.base == "shr" and not signed(inst) and isinstance(ops[1], Imm):
            return ops[1].value >= 32 or small(ops[0])
        if inst.base == "and":
            return small(ops[0]) or small(ops[1])
        if inst.base in ("or", "xor"):
            return small(ops[0]) and small(ops[1])
        if inst.base == "selp":
            return small(ops[0]) and small(ops[1])
        return False

    def _aligned(self, register: str, seen: frozenset = frozenset()) -> bool:
        """Whether every definition of a plain register makes a multiple of 4 (so a byte offset held in it is a
        whole number of words)."""
        if register in seen:
            return False
        defs = self.definitions.get(register)
        if not defs:
            return False
        for inst in defs:
            ops = inst.operands
            const = [o.value for o in ops[1:] if isinstance(o, Imm)]
            regs = [o.name for o in ops[1:] if isinstance(o, Reg)]
            if inst.base == "shl" and const and const[0] >= 2:
                continue
            if inst.base in ("mul", "and") and any(c % 4 == 0 for c in const):
                continue
            if inst.base in ("add", "sub", "mov", "selp", "or", "xor", "and") and all(
                    c % 4 == 0 for c in const) and all(
                    self._aligned(r, seen | {register}) for r in regs[:2 if inst.base == "selp" else 3]):
                continue
            return False
        return True

    def _select(self, read, dst: str, first: tuple, second: tuple, cond) -> None:
        """dst = cond ? first : second, correct when dst is also one of the sources (written last, never read
        after it is overwritten)."""
        atom = Predicate.atom(cond.name)
        if first == (dst, 0) and second == (dst, 0):
            return
        if first == (dst, 0):
            self.emit(MOp("a", second, dst=dst), self.pred & ~atom)
            return
        if second == (dst, 0):
            self.emit(MOp("a", first, dst=dst), self.pred & atom)
            return
        if first[0] == dst or second[0] == dst:      # dst + k: read it into a temporary first
            copy = self.op("a", (dst, 0))
            first = (copy, first[1]) if first[0] == dst else first
            second = (copy, second[1]) if second[0] == dst else second
        self.emit(MOp("a", second, dst=dst))
        self.emit(MOp("a", first, dst=dst), self.pred & atom)

    def _narrow(self, result: str | tuple, dst: str, bits: int) -> None:
        """Write a result to dst keeping the narrow-register invariant (zero-extended to the register's width)."""
        source = (result, 0) if isinstance(result, str) else result
        if bits < 32:
            self.op("and", source, (None, (1 << bits) - 1), dst=dst)
        else:
            self.op("a", source, dst=dst)

    def _extended(self, read, i: int, bits: int, is_signed: bool) -> tuple:
        """Source i as a full 32-bit value: a narrow signed register sign-extended."""
        operand = self.src(read, i)
        if bits >= 32 or not is_signed:
            return operand
        if operand[0] is None:
            return (None, to_signed(operand[1], bits) & MASK32)
        top = self.op("shl", operand, (None, 32 - bits))
        return (self.op("shr_s", (top, 0), (None, 32 - bits)), 0)

    def _need_fits(self, bits: int) -> None:
        if bits > 32:
            raise MachineError(f"line {self.inst.line}: a 64-bit {self.inst.base} depends on the high word, which "
                               f"the machine's 32-bit registers do not hold: {self.inst.text}")

    # Each _op_<base>(read, dst) builds one PTX instruction from machine ops.
    def _op_mov(self, read, dst):
        if "pred" in self.inst.modifiers:
            source = self.src(read, 0)
            self.op("ne", source, (None, 0), dst=dst) if source[0] is not None else self.op(
                "a", (None, int(bool(source[1]))), dst=dst)
            return
        self.op("a", self.src(read, 0), dst=dst)

    _op_cvta = _op_mov

    def _op_cvt(self, read, dst):
        inst = self.inst
        typed = types(inst)
        if len(typed) != 2 or "pred" in typed:
            raise unsupported(inst)
        dst_bits, src_bits = bits_of(typed[0]), bits_of(typed[1])
        source = self._extended(read, 0, src_bits, typed[1].startswith("s"))
        operand = sources(inst)[0]
        if (src_bits < 32 and not typed[1].startswith("s") and isinstance(operand, Reg)
                and self.reg_bits(operand.name) > src_bits):
            # A narrow register holds its value zero-extended; a wider one is cut to the source width here.
            source = (self.op("and", source, (None, (1 << src_bits) - 1)), 0)
        if dst_bits < 32 and (src_bits > dst_bits or typed[1].startswith("s")):
            self._narrow(source, dst, dst_bits)
        else:
            self.op("a", source, dst=dst)

    def _binary(self, read, dst, op: str, extend: bool = False) -> None:
        inst = self.inst
        bits = width(inst)
        is_signed = signed(inst)
        if extend:
            self._need_fits(bits)
            a, b = self._extended(read, 0, bits, is_signed), self._extended(read, 1, bits, is_signed)
        else:
            a, b = self.src(read, 0), self.src(read, 1)
        if bits < 32 and op not in ("and", "or", "xor", "shr_u", "min_u", "max_u", "div_u", "rem_u"):
            self._narrow(self.op(op, a, b), dst, bits)
        else:
            self.op(op, a, b, dst=dst)

    def _op_add(self, read, dst):
        self._binary(read, dst, "add")

    def _op_sub(self, read, dst):
        self._binary(read, dst, "sub")

    def _op_and(self, read, dst):
        self._binary(read, dst, "and")

    def _op_or(self, read, dst):
        self._binary(read, dst, "or")

    def _op_xor(self, read, dst):
        self._binary(read, dst, "xor")

    def _op_shl(self, read, dst):
        self._shift(read, dst, "shl")

    def _op_shr(self, read, dst):
        product = self._wide_product(read)
        if product is not None:
            # ``mul.wide.u32 %rd, %r, C; shr.u64 %rd2, %rd, 32 + k``: NVRTC's unsigned division by a constant. The
            # register holds only the product's low word, so the high word is computed again from its factors.
            inst, shift = self.inst, read(sources(self.inst)[1]).value
            self.inst = product
            a, b = self.src(read, 0), self.src(read, 1)
            self.inst = inst
            high = self._mul_hi32(a, b, None, signed(product))
            if shift == 32:
                self.op("a", (high, 0), dst=dst)
            elif signed(inst):
                self.op("shr_s", (high, 0), (None, shift - 32), dst=dst)
            else:
                self.op("shr_u", (high, 0), (None, shift - 32), dst=dst)
            return
        inst = self.inst
        amount = read(sources(inst)[1])
        if width(inst) == 64 and isinstance(amount, Const):
            # A 64-bit right shift of a word zero- or sign-extended (``ld.global.u32 %rd`` then ``>> 3``): the
            # 32-bit shift of its low word.
            kind = self._extension(read, sources(inst)[0])
            n = amount.value & 63
            if kind == "u":
                if n >= 32:
                    self.op("a", (None, 0), dst=dst)
                else:
                    self.op("shr_u", self.src(read, 0), (None, n), dst=dst)
                return
            if kind == "s" and signed(inst):
                self.op("shr_s", self.src(read, 0), (None, min(n, 31)), dst=dst)
                return
            demanded = self._demanded_bits(dst)
            if n < 32 and demanded is not None and demanded <= 32 - n:
                # Only the result's low bits are read (``(v >> 3) & 31``): they come from the low word alone.
                self.op("shr_u", self.src(read, 0), (None, n), dst=dst)
                return
        self._shift(read, dst, "shr_s" if signed(self.inst) else "shr_u")

    def _demanded_bits(self, register: str) -> int | None:
        """How many low bits of a register its readers use, when each of them is an ``and`` with an immediate or a
        narrowing ``cvt`` (None: some reader may use them all)."""
        bits = 0
        for inst in self.kernel.body:
            if not isinstance(inst, Instruction):
                continue
            reads = [o for o in sources(inst) if isinstance(o, Reg) and o.name == register]
            reads += [o for o in inst.operands if isinstance(o, Mem) and o.base == Reg(register)]
            if inst.guard is not None and inst.guard.name == register:
                return None
            if not reads:
                continue
            ops = sources(inst)
            if inst.base == "and" and len(ops) == 2 and any(isinstance(o, Imm) for o in ops):
                mask = next(o.value for o in ops if isinstance(o, Imm)) & ((1 << 64) - 1)
                bits = max(bits, mask.bit_length())
            elif inst.base == "cvt" and len(types(inst)) == 2 and (bits_of(types(inst)[0]) or 64) <= 32:
                bits = max(bits, bits_of(types(inst)[0]))
            else:
                return None
        return bits

    def _wide_product(self, read) -> Instruction | None:
        """The ``mul.wide`` of two 32-bit values that a 64-bit right shift by 32..63 reads the high word of, when
        its factors still hold (registers defined once, as NVRTC writes them); None otherwise."""
        inst = self.inst
        source, amount = sources(inst)[0], read(sources(inst)[1])
        if width(inst) != 64 or not isinstance(amount, Const) or not 32 <= amount.value < 64:
            return None
        if not isinstance(source, Reg) or len(self.definitions.get(source.name, [])) != 1:
            return None
        product = self.definitions[source.name][0]
        if product.base != "mul" or "wide" not in product.modifiers or width(product) != 32 or product.guard:
            return None
        body = self.blocks[self.block_index].body
        here = [k for k, other in enumerate(body) if other is product or other is inst]
        between = body[here[0] + 1:here[1]] if len(here) == 2 and body[here[0]] is product else None
        for factor in sources(product)[:2]:
            if not isinstance(factor, Reg):
                continue
            if factor.name in self.addresses:
                return None
            # Defined once, or not redefined between the product and the shift in one basic block.
            if len(self.definitions.get(factor.name, [])) != 1 and (
                    between is None or any(destination(other) == factor.name for other in between
                                           if isinstance(other, Instruction))):
                return None
        return product

    def _shift(self, read, dst, op):
        bits = width(self.inst)
        amount = read(sources(self.inst)[1])
        if bits < 32 and not (isinstance(amount, Const) and amount.value < bits):
            raise unsupported(self.inst, f"a {bits}-bit shift by a register")
        self._binary(read, dst, op, extend=op != "shl")

    def _op_min(self, read, dst):
        self._binary(read, dst, "min_s" if signed(self.inst) else "min_u", extend=True)

    def _op_max(self, read, dst):
        self._binary(read, dst, "max_s" if signed(self.inst) else "max_u", extend=True)

    def _op_div(self, read, dst):
        self._divide(read, dst, "div")

    def _op_rem(self, read, dst):
        self._divide(read, dst, "rem")

    def _divide(self, read, dst, kind):
        """Division by a constant (a launch argument or a literal) is the machine's own div / rem op with an
        immediate (every backend divides by 1..IMMEDIATE_DIVISORS; the circuit refuses others before a launch);
        by a value the machine computes, a software long division (``_long_division``), as real GPUs do it, built
        from add, or, shift and compare ops so that it runs on every backend."""
        inst = self.inst
        bits = width(inst)
        is_signed = signed(inst)
        op = f"{kind}_{'s' if is_signed else 'u'}"
        divisor = read(sources(inst)[1])
        if isinstance(divisor, Const):
            self._binary(read, dst, op, extend=True)
            return
        self._need_fits(bits)
        n, d = self._extended(read, 0, bits, is_signed), self._extended(read, 1, bits, is_signed)
        if is_signed:            # magnitudes (|INT_MIN| is 2^31 read unsigned), then the sign of C's result
            n_abs = self.op("max_s", n, (self.op("sub", (None, 0), n), 0))
            d_abs = self.op("max_s", d, (self.op("sub", (None, 0), d), 0))
            quotient, remainder = self._long_division((n_abs, 0), (d_abs, 0))
            result = quotient if kind == "div" else remainder
            sign = self.op("xor", n, d) if kind == "div" else None
            negative = self.op("lt_s", (sign, 0) if sign else n, (None, 0))
            if kind == "div":            # x / 0 stays all ones (the machine's div_s), whatever x's sign
                negative = self.op("gt_u", (negative, 0), (self.op("eq", d, (None, 0)), 0))
            flipped = self.op("sub", (None, 0), (result, 0))
            self._select(read, result, (flipped, 0), (result, 0), Reg(negative))
        else:
            quotient, remainder = self._long_division(n, d)
            result = quotient if kind == "div" else remainder
        self._narrow(result, dst, bits) if bits < 32 else self.op("a", (result, 0), dst=dst)

    def _long_division(self, n: tuple, d: tuple) -> tuple[str, str]:
        """Unsigned restoring division, one quotient bit per trip of a uniform 32-trip loop (8 records a trip):
        the remainder takes the dividend's top bit, the divisor is subtracted where it fits, and the quotient bit
        enters the dividend's register from below. Division by 0 gives all ones and the dividend, as on NVIDIA
        GPUs. Every lane runs the loop (the trip count is the same everywhere); lanes the division does not
        apply to only compute unused values."""
        dividend, remainder, trips = self.temp(), self.temp(), self.temp()
        self.emit(MOp("a", n, dst=dividend), TRUE)
        self.emit(MOp("a", (None, 0), dst=remainder), TRUE)
        self.emit(MOp("a", (None, 32), dst=trips), TRUE)
        head = len(self.mops)
        top = self.temp()
        self.emit(MOp("shr_u", (dividend, 0), (None, 31), top), TRUE)
        self.mops[head].labels.add(f"division{head}")
        self.emit(MOp("add", (remainder, 0), (remainder, 0), remainder), TRUE)
        self.emit(MOp("or", (remainder, 0), (top, 0), remainder), TRUE)
        self.emit(MOp("add", (dividend, 0), (dividend, 0), dividend), TRUE)
        fits = self.temp()
        self.emit(MOp("ge_u", (remainder, 0), d, fits), TRUE)
        self.emit(MOp("sub", (remainder, 0), d, remainder), Predicate.atom(fits))
        self.emit(MOp("or", (dividend, 0), (fits, 0), dividend), TRUE)
        loop = self.emit(MOp("add", (trips, 0), (None, MASK32), trips, branch="nonzero", target="division"), TRUE)
        loop.target_index = head
        return dividend, remainder

    def _op_mul(self, read, dst):
        inst = self.inst
        mods = inst.modifiers
        bits = width(inst)
        if "lo" in mods:
            self._binary(read, dst, "mul")
        elif "wide" in mods:
            if bits > 16:
                # The low word of a 64-bit product is the 32-bit product: exact for every use that reads only it.
                self.op("mul", self.src(read, 0), self.src(read, 1), dst=dst)
            else:
                a = self._extended(read, 0, bits, signed(inst))
                b = self._extended(read, 1, bits, signed(inst))
                self.op("mul", a, b, dst=dst)
        elif bits > 16:
            self._need_fits(bits)
            self._mul_hi32(self.src(read, 0), self.src(read, 1), dst, signed(inst))
        else:
            product = self.op("mul", self._extended(read, 0, bits, signed(inst)),
                              self._extended(read, 1, bits, signed(inst)))
            self._narrow(self.op("shr_s" if signed(inst) else "shr_u", (product, 0), (None, bits)), dst, bits)

    def _mul_hi32(self, a: tuple, b: tuple, dst: str | None, is_signed: bool) -> str:
        """The high word of a 32 x 32 product (NVRTC's division by a constant) from 16-bit halves: four partial
        products, each exact in a word, their carries summed in a middle column of at most 18 bits. Signed: the
        unsigned high word minus b where a < 0 and minus a where b < 0 (mod 2^32)."""
        if a[0] is None:
            a, b = b, a

        def halves(x):
            if x[0] is None:
                return (None, x[1] & 0xFFFF), (None, (x[1] >> 16) & 0xFFFF)
            return (self.op("and", x, (None, 0xFFFF)), 0), (self.op("shr_u", x, (None, 16)), 0)

        (al, ah), (bl, bh) = halves(a), halves(b)
        ll, lh = self.op("mul", al, bl), self.op("mul", al, bh)
        hl, hh = self.op("mul", ah, bl), self.op("mul", ah, bh)
        mid = self.op("add", (self.op("shr_u", (ll, 0), (None, 16)), 0),
                      (self.op("and", (lh, 0), (None, 0xFFFF)), 0))
        mid = self.op("add", (mid, 0), (self.op("and", (hl, 0), (None, 0xFFFF)), 0))
        high = self.op("add", (hh, 0), (self.op("shr_u", (lh, 0), (None, 16)), 0))
        high = self.op("add", (high, 0), (self.op("shr_u", (hl, 0), (None, 16)), 0))
        if not is_signed:
            return self.op("add", (high, 0), (self.op("shr_u", (mid, 0), (None, 16)), 0), dst=dst)
        high = self.op("add", (high, 0), (self.op("shr_u", (mid, 0), (None, 16)), 0))
        for x, y in ((a, b), (b, a)):
            if x[0] is None:
                if x[1] & 0x80000000:
                    high = self.op("sub", (high, 0), y)
                continue
            sign = self.op("shr_s", x, (None, 31))
            high = self.op("sub", (high, 0), (self.op("and", (sign, 0), y), 0))
        return self.op("a", (high, 0), dst=dst)

    def _op_popc(self, read, dst):
        self._need_fits(width(self.inst))
        self._popcount(self.src(read, 0), dst)

    def _popcount(self, x: tuple, dst: str | None = None) -> str:
        """Bits set in a word: the SWAR sum of 2-, 4- and 8-bit fields, the bytes added by one multiply."""
        pairs = self.op("and", (self.op("shr_u", x, (None, 1)), 0), (None, 0x55555555))
        x = (self.op("sub", x, (pairs, 0)), 0)
        quads = self.op("and", (self.op("shr_u", x, (None, 2)), 0), (None, 0x33333333))
        x = (self.op("add", (self.op("and", x, (None, 0x33333333)), 0), (quads, 0)), 0)
        x = (self.op("add", x, (self.op("shr_u", x, (None, 4)), 0)), 0)
        x = (self.op("and", x, (None, 0x0F0F0F0F)), 0)
        return self.op("shr_u", (self.op("mul", x, (None, 0x01010101)), 0), (None, 24), dst=dst)

    def _op_clz(self, read, dst):
        """Leading zeros: every bit below the highest set one smeared to 1, then the zeros counted."""
        self._need_fits(width(self.inst))
        x = self.src(read, 0)
        for shift in (1, 2, 4, 8, 16):
            x = (self.op("or", x, (self.op("shr_u", x, (None, shift)), 0)), 0)
        self._popcount((self.op("xor", x, (None, MASK32)), 0), dst)

    def _op_brev(self, read, dst):
        """Bit reversal: swap neighbouring bits, pairs, nibbles, bytes, then the halves."""
        self._need_fits(width(self.inst))
        x = self.src(read, 0)
        for shift, mask in ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF)):
            down = self.op("and", (self.op("shr_u", x, (None, shift)), 0), (None, mask))
            up = self.op("shl", (self.op("and", x, (None, mask)), 0), (None, shift))
            x = (self.op("or", (down, 0), (up, 0)), 0)
        up = self.op("shl", x, (None, 16))
        self.op("or", (self.op("shr_u", x, (None, 16)), 0), (up, 0), dst=dst)

    def _op_mad(self, read, dst):
        inst = self.inst
        if "hi" in inst.modifiers:
            raise unsupported(inst, "mad.hi needs the high word of a product")
        bits = width(inst)
        if "wide" in inst.modifiers and bits <= 16:
            product = self.op("mul", self._extended(read, 0, bits, signed(inst)),
                              self._extended(read, 1, bits, signed(inst)))
        else:
            product = self.op("mul", self.src(read, 0), self.src(read, 1))
        total = self.op("add", (product, 0), self.src(read, 2))
        if bits < 32 and "wide" not in inst.modifiers:
            self._narrow(total, dst, bits)
        else:
            self.op("a", (total, 0), dst=dst)

    def _op_neg(self, read, dst):
        bits = width(self.inst)
        result = self.op("sub", (None, 0), self.src(read, 0))
        self._narrow(result, dst, bits)

    def _op_not(self, read, dst):
        if "pred" in self.inst.modifiers:
            self.op("eq", self.src(read, 0), (None, 0), dst=dst)
            return
        bits = width(self.inst)
        if bits < 32:
            self.op("xor", self.src(read, 0), (None, (1 << bits) - 1), dst=dst)
        else:
            self.op("xor", self.src(read, 0), (None, MASK32), dst=dst)

    def _op_cnot(self, read, dst):
        self.op("eq", self.src(read, 0), (None, 0), dst=dst)

    def _op_abs(self, read, dst):
        bits = width(self.inst)
        self._need_fits(bits)
        a = self._extended(read, 0, bits, True)
        negated = self.op("sub", (None, 0), a)
        self._narrow(self.op("max_s", a, (negated, 0)), dst, bits)

    def _op_setp(self, read, dst):
        inst = self.inst
        mods = inst.modifiers
        cmp = CMP_OPS.get(mods[0])
        if cmp is None or len(mods) != 2:
            raise unsupported(inst, "setp with a combining operation or a float comparison")
        bits = width(inst)
        unsigned_cmp = mods[0] in ("lo", "ls", "hi", "hs") or not signed(inst)
        if bits > 32:
            # A 64-bit compare of values that are 32-bit values extended (size_t i = threadIdx.x; i < n) is the
            # 32-bit compare of their low words.
            kinds = {self._extension(read, o) for o in sources(inst)[:2]}
            if kinds == {"u"} and (unsigned_cmp or cmp in ("eq", "ne")) or kinds == {"s"}:
                bits = 32
        self._need_fits(bits)
        op = cmp if cmp in ("eq", "ne") else f"{cmp}_{'u' if unsigned_cmp else 's'}"
        is_signed = not unsigned_cmp and cmp not in ("eq", "ne")
        a, b = self._extended(read, 0, bits, is_signed), self._extended(read, 1, bits, is_signed)
        self.op(op, a, b, dst=dst)

    def _op_selp(self, read, dst):
        ops = self.inst.operands
        cond = read(ops[3])
        if isinstance(cond, Const):
            self.op("a", self.src(read, 0 if cond.value else 1), dst=dst)
            return
        self._select(read, dst, self.src(read, 0), self.src(read, 1), ops[3])

    def _op_slct(self, read, dst):
        inst = self.inst
        cond = self.src(read, 2)
        negative = self.op("lt_s", cond, (None, 0))
        first, second = self.src(read, 0), self.src(read, 1)
        # slct picks the first source where c >= 0.
        self._select(read, dst, second, first, Reg(negative))

    def _op_bfe(self, read, dst):
        inst = self.inst
        bits = width(inst)
        self._need_fits(bits)
        pos, length = read(sources(inst)[1]), read(sources(inst)[2])
        if not (isinstance(pos, Const) and isinstance(length, Const)):
            raise unsupported(inst, "bfe with a position or length held in a register")
        p, n = pos.value & 0xFF, length.value & 0xFF
        a = self.src(read, 0)
        if n == 0:
            self.op("a", (None, 0), dst=dst)
            return
        p = min(p, 31)
        n = min(n, 32 - p) if not signed(inst) else n
        if signed(inst):
            n = min(n, 32 - p)
            top = self.op("shl", a, (None, 32 - p - n)) if 32 - p - n else a[0]
            self.op("shr_s", (top, 0) if isinstance(top, str) else a, (None, 32 - n), dst=dst)
        else:
            self._extract_operand(a, p, n, dst)

    def _extract_operand(self, a: tuple, shift: int, bits: int, dst: str) -> None:
        shifted = (self.op("shr_u", a, (None, shift)), 0) if shift else a
        if shift + bits < 32:
            self.op("and", shifted, (None, (1 << bits) - 1), dst=dst)
        else:
            self.op("a", shifted, dst=dst)

    def _op_bfi(self, read, dst):
        inst = self.inst
        pos, length = read(sources(inst)[2]), read(sources(inst)[3])
        if not (isinstance(pos, Const) and isinstance(length, Const)):
            raise unsupported(inst, "bfi with a position or length held in a register")
        p, n = pos.value & 0xFF, length.value & 0xFF
        if n == 0 or p >= 32:
            self.op("a", self.src(read, 1), dst=dst)
            return
        n = min(n, 32 - p)
        field = (((1 << n) - 1) << p) & MASK32
        inserted = self.op("shl", self.src(read, 0), (None, p)) if p else None
        part = self.op("and", (inserted, 0) if inserted else self.src(read, 0), (None, field))
        kept = self.op("and", self.src(read, 1), (None, ~field & MASK32))
        self.op("or", (kept, 0), (part, 0), dst=dst)

    def _op_shf(self, read, dst):
        inst = self.inst
        amount = read(sources(inst)[2])
        if not isinstance(amount, Const):
            raise unsupported(inst, "a funnel shift by a register")
        n = amount.value & 31 if "wrap" in inst.modifiers else min(amount.value & MASK32, 32)
        low, high = self.src(read, 0), self.src(read, 1)
        if n == 0:
            self.op("a", high if "l" in inst.modifiers else low, dst=dst)
            return
        if n == 32:
            self.op("a", low if "l" in inst.modifiers else high, dst=dst)
            return
        if "l" in inst.modifiers:
            up, down = self.op("shl", high, (None, n)), self.op("shr_u", low, (None, 32 - n))
        else:
            up, down = self.op("shl", high, (None, 32 - n)), self.op("shr_u", low, (None, n))
        self.op("or", (up, 0), (down, 0), dst=dst)

    def _op_prmt(self, read, dst):
        inst = self.inst
        selector = read(sources(inst)[2])
        if not isinstance(selector, Const) or len(inst.modifiers) != 1:
            raise unsupported(inst, "prmt with a selector held in a register, or a prmt mode")
        sources_ = [self.src(read, 0), self.src(read, 1)]
        parts = []
        for i in range(4):
            sel = (selector.value >> (4 * i)) & 0xF
            source = sources_[(sel & 7) // 4]
            byte = sel & 3
            if sel & 8:                                  # the byte's sign replicated
                top = self.op("shl", source, (None, 24 - 8 * byte)) if byte != 3 else source[0]
                filled = self.op("shr_s", (top, 0) if isinstance(top, str) else source, (None, 31))
                parts.append(self.op("and", (filled, 0), (None, 0xFF << (8 * i))))
                continue
            shift = 8 * (i - byte)
            if shift > 0:
                moved = (self.op("shl", source, (None, shift)), 0)
            elif shift < 0:
                moved = (self.op("shr_u", source, (None, -shift)), 0)
            else:
                moved = source
            parts.append(self.op("and", moved, (None, 0xFF << (8 * i))))
        total = parts[0]
        for part in parts[1:-1]:
            total = self.op("or", (total, 0), (part, 0))
        self.op("or", (total, 0), (parts[-1], 0), dst=dst)

