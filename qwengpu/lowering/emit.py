"""Emission: executable basic blocks, in program order, as machine ops under lane predicates.

Forward branches are if-converted into lane predicates (so ``if (i != 0) return;`` lets one thread post a flag);
backward branches stay real branches: uniform ones (``while (*flag < k) {}``) as the machine's branch on lane values.
Registers that hold addresses (pointers.address_registers) are kept in words, or in bytes where a byte offset is
not known to be a whole number of words (``Emitter.bytes``); every other register holds a plain value: 32-bit
registers their value, narrower ones their value zero-extended (so unsigned compares need nothing),
64-bit ones their low word. Fences are no-ops: one warp runs at a time and stores leave in order. ``bar.sync`` is a
no-op in a block of one warp; with several warps it becomes a marker that ``lowering.barriers`` expands.

This module walks the blocks and holds the emitter's state (predicates, operands, loops); each PTX instruction
becomes a short sequence of the machine's ALU ops (isa.OPS), built by the method ``_op_<base>`` of one of the
instruction modules the Emitter is made of:

    memory.MemoryOps          ld / st / atom / red
    addressing.AddressOps     arithmetic whose result is an address or a byte offset
    arithmetic.ArithmeticOps  add ... mul / div / rem, setp, selp, cvt, mov
    bits.BitOps               popc, clz, brev, bfe, bfi, shf, prmt, lop3, vabsdiff2 / 4
    warp.WarpOps              shfl, vote, activemask, match, redux; %laneid, %warpid, %lanemask_*

Example::

    >>> from qwengpu.lowering import lower                 # the stages in order; see lowering/__init__.py
"""
from __future__ import annotations

import itertools

from ..isa import LANES, MachineError
from ..ptx import Instruction, Mem, Reg
from .addressing import AddressOps
from .arithmetic import ArithmeticOps
from .bits import BitOps
from . import counters, deadline
from .cfg import BasicBlock
from .memory import MemoryOps
from .mop import MOp
from .pointers import address_registers
from .predicates import FALSE, TRUE, Predicate
from .transfer import WARP_INSTRUCTIONS, evaluate, guard_value, make_reader, registers_read, sources, step
from .values import (DYNAMIC, LANE_SPECIAL, MASK32, SPECIAL, THREAD_INDEX, Affine, Const, Context, destination,
                     unsupported, width)
from .warp import WarpOps
from .semantics import declared_bits, to_signed

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


class _Truths(dict):
    """The lane predicates of more than one atom computed so far (``Predicate`` -> its machine predicate), with the
    predicates that read each register: a write of the register drops those (``drop``). Rebuilding the dict at
    every write was most of a long program's emission (a double lgamma: 157,000 writes, 870 s of a 1,010 s
    profile)."""

    def __init__(self):
        super().__init__()
        self.reading: dict[str, list[Predicate]] = {}

    def __setitem__(self, pred: Predicate, truth: tuple) -> None:
        super().__setitem__(pred, truth)
        for atom in pred.atoms:
            self.reading.setdefault(atom, []).append(pred)

    def drop(self, register: str) -> None:
        """Forget the predicates that read ``register`` (a predicate also listed under another atom, dropped
        already, is skipped there)."""
        for pred in self.reading.pop(register, ()):
            self.pop(pred, None)


class Emitter(MemoryOps, AddressOps, ArithmeticOps, BitOps, WarpOps):
    """Walks the executable basic blocks in program order and emits machine ops under lane predicates."""

    def __init__(self, kernel, blocks: list[BasicBlock], states: dict, context: Context):
        self.kernel, self.blocks, self.states, self.context = kernel, blocks, states, context
        self.mops: list[MOp] = []
        self.barrier = False
        self.wholes = 0                 # the spans kept whole emitted so far (MOp.whole)
        self.whole_of = 0               # the last instruction's Instruction.whole (its stage's number for it)
        self.temps = itertools.count()
        self.materialized = _Truths()
        self.addresses = address_registers(kernel.body)
        self.definitions: dict[str, list[Instruction]] = {}
        for inst in kernel.body:
            if isinstance(inst, Instruction) and destination(inst):
                self.definitions.setdefault(destination(inst), []).append(inst)
        self.dynamic = self._dynamic_registers()
        self.used = self._source_registers()
        self.bytes = self._byte_registers()
        self.counters = self._counters()    # after the registers' kinds: _extension reads them (and these)
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

    def _counters(self) -> counters.Counters:
        """The 64-bit loop counters (lowering.counters) this launch keeps to words: each step adds words (or
        counters), each other write is a word, and a sum known here is a word; or, for a counter only compared
        for equality, every other write is one value v known here (it holds its count from v). The registers
        that fail are ordinary 64-bit registers, and the counters are found again without them (a step or a view
        that read one is none now)."""
        # a byte offset is a plain number (a counter of bytes: ``p[i]`` of chars); a word-kept address is none
        wide = {name for name in self.dynamic - (self.addresses - self.bytes) if self.reg_bits(name) == 64}
        unbounded = {}
        while True:
            self.counters = found = counters.find(self.blocks, wide)
            found.unbounded.update(unbounded)
            unbounded = found.unbounded
            if not found.registers:
                return found
            failed = set()
            starts: dict[str, set] = {}         # counter -> the values its other writes give, known here
            moved: set[str] = set()             # counters a step moves from a value known here
            for inst, state, read in self._walk():
                dst = destination(inst)
                if dst not in found.registers:
                    continue
                value = evaluate(inst, read, self.context)
                known = value not in (None, DYNAMIC)
                if id(inst) in found.steps:
                    fits = self._value_extension(value) == "u" if known else all(
                        self._extension(read, o) == "u" for o in sources(inst))
                    if known or read(Reg(dst)) != DYNAMIC:
                        moved.add(dst)
                else:
                    fits = self._value_extension(value) == "u" if known else self._written_extension(
                        inst, read, frozenset({dst})) == "u"
                    starts.setdefault(dst, set()).add(value.value if isinstance(value, Const) else None)
                    # a counter only compared for equality may start from any value known here (``-(n & 3)``)
                    fits = fits or (dst in found.compared and isinstance(value, Const))
                if not fits:
                    failed.add(dst)
            for register in found.compared - failed:
                values = starts.get(register, set())
                if any(v is not None and self._value_extension(Const(v)) != "u" for v in values):
                    if len(values) == 1 and None not in values and register not in moved:
                        found.offsets[register] = values.pop()
                    else:
                        failed.add(register)
            if not failed:
                return found
            wide -= failed

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
                names |= registers_read(inst)
        return names

    def temp(self) -> str:
        return f"%t{next(self.temps)}"

    def reg_bits(self, name: str) -> int:
        """The declared width of a register (by its name's prefix)."""
        return declared_bits(self.kernel.registers, name)

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
            self.mops.append(MOp(op, (a, 0), (b, 0), result, text="lane predicate", lane_predicate=True))
            return (result, negated)
        low = self._restrict(pred, a, False)
        high = self._restrict(pred, a, True)
        result = self.temp()
        self.mops.append(MOp("a", self._truth_value(low), dst=result, text="lane predicate", lane_predicate=True))
        self.mops.append(MOp("a", self._truth_value(high), dst=result, pred=(a, False), text="lane predicate",
                             lane_predicate=True))
        return (result, False)

    def _truth_value(self, pred: Predicate) -> tuple:
        """A machine operand that is 1 where pred holds and 0 elsewhere."""
        if pred.always or pred.never:
            return (None, int(pred.always))
        source, negated = self.predicate_field(pred)
        if not negated:
            return (source, 0)
        flipped = self.temp()
        self.mops.append(MOp("eq", (source, 0), (None, 0), flipped, text="lane predicate", lane_predicate=True))
        return (flipped, 0)

    @staticmethod
    def _restrict(pred: Predicate, atom: str, value: bool) -> Predicate:
        i = pred.atoms.index(atom)
        atoms = pred.atoms[:i] + pred.atoms[i + 1:]
        rows = frozenset(r[:i] + r[i + 1:] for r in pred.rows if r[i] == value)
        return Predicate(atoms, rows).simplify()

    def invalidate(self, register: str) -> None:
        self.materialized.drop(register)

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
            if operand.name in LANE_SPECIAL or operand.name in THREAD_INDEX:
                return self.special(operand.name)
            return (operand.name, 0)
        raise MachineError(f"register {operand} is read before any definition reaches it")

    def word_value(self, value, what: str):
        """A known byte address or offset as a known word address: it must be a multiple of 4."""
        inst = self.inst
        if isinstance(value, Const):
            byte = to_signed(value.value, 64)
            if byte % 4:
                raise MachineError(f"line {inst.line}: {what} {byte} is not a multiple of 4 (word aligned): "
                                   f"{inst.text}", line=inst.line)
            return Const((byte // 4) & MASK32)
        if value.coef % 4 or value.offset % 4:
            raise MachineError(f"line {inst.line}: {what} {value.coef}*tid{value.offset:+d} is not word aligned: "
                               f"{inst.text}", line=inst.line)
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
                                   f"a value (pointers are not kept in memory): {self.inst.text}", line=self.inst.line)
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
                           f"{self.inst.text}", line=self.inst.line)

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
                           f"{self.inst.text}", line=self.inst.line)

    def address(self, read, mem: Mem) -> tuple[tuple, int | str]:
        """A memory operand as (word address operand, byte within the word); where the byte is known only to the
        machine, the second item is a register holding its bit shift (byte * 8)."""
        inst = self.inst
        if isinstance(mem.base, str) and mem.base in self.context.symbols:
            symbol = self.context.symbols[mem.base]
            if isinstance(symbol, Affine):                          # ``[depot+4]``: each thread's own .local word
                if symbol.coef % 4 or (symbol.offset + mem.offset) % 4:
                    raise MachineError(f"line {inst.line}: a .local access at byte {mem.offset} is not within a "
                                       f"word: {inst.text}", line=inst.line)
                return self.value_operand(None, Affine(symbol.coef // 4, (symbol.offset + mem.offset) // 4)), 0
            byte = symbol + mem.offset      # ``[s+4]``: a .shared array's word
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
                               f"{inst.text}", line=inst.line)
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
            self.mops, self.materialized, self.barrier, self.after_loop = [], _Truths(), False, {}
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
            deadline.check("emission")
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
                elif exits:
                    # Leaving SIMT loops none of which keeps a mask for this target: only a loop left through its
                    # end keeps none, and every lane that entered it comes here after it (after_loop). This edge's
                    # predicate adds no lane, and read there it would read registers the loop has since rewritten.
                    if not any(self._left_through_end(lp[1], successor) for lp in exits):
                        raise MachineError(f"internal: kernel {self.kernel.name}: block {block.index} leaves the SIMT "
                                           f"loop at block {exits[-1][0]} for block {successor}, which has no exit "
                                           "mask")
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
                _, outer_latch, outer_exits = outer[-1]
                if target in outer_exits:
                    exits[target] = outer_exits[target]
                elif self._left_through_end(outer_latch, target):
                    # That loop is left only through its end, so it keeps no exit masks: every lane that entered
                    # it comes to its end after it (after_loop). A lane leaving both loops here needs no mask
                    # either: it drops out of this loop's predicates, then out of the enclosing loop's.
                    pass
                else:
                    raise MachineError(f"internal: kernel {self.kernel.name}: the exit to block {target} of the SIMT "
                                       f"loop at block {header} leaves the enclosing loop at block {outer[-1][0]}, "
                                       "which keeps no mask for it")
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

    def _left_through_end(self, latch: int, target: int) -> bool:
        """Whether ``target`` is the end of an open SIMT loop left only through its end (it keeps no exit masks:
        every lane that entered it arrives there after it)."""
        return target == latch + 1 and latch in self.after_loop

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
        first = len(self.mops)
        self._instruction(inst, pred, state, read)
        # A warp instruction passes values through the exchange words (a lane's store, then loads of the others'):
        # that is one warp's run only if no overlay's end falls inside it, since at one the block's other warps run
        # that overlay (lowering.overlays). So is a lane's turn at an atomic (its load of the word, then its store),
        # which the instructions a stage wrote for it mark with one number (Instruction.whole: a 64-bit atomic's).
        if len(self.mops) == first:
            return
        if inst.base in WARP_INSTRUCTIONS or inst.whole and inst.whole != self.whole_of:
            self.keep_whole(first)
        elif inst.whole:                    # the turn of the instruction before goes on
            for mop in self.mops[first:]:
                mop.whole = self.wholes
        self.whole_of = inst.whole

    def keep_whole(self, first: int) -> None:
        """The ops from ``first`` on are one span, which no overlay's end falls in (``MOp.whole``)."""
        self.wholes += 1
        for mop in self.mops[first:]:
            mop.whole = self.wholes

    def _instruction(self, inst: Instruction, pred: Predicate, state: dict, read) -> None:
        self.inst = inst
        base = inst.base
        if base in ("membar", "fence", "bar", "barrier", "nanosleep", "prefetch", "prefetchu"):
            # fences order nothing one warp at a time; a sleep is a hint about time, which the machine has none of;
            # a prefetch, one about caches, which it has none of either
            if base in ("bar", "barrier"):
                self._barrier(read)
            return
        guard = guard_value(inst, read)
        if guard == Const(0):
            return
        if guard != Const(1):
            pred = pred & Predicate.atom(inst.guard.name, inst.guard_negated)
        self.pred = pred
        if inst.pair is not None and base not in ("shfl", "match"):
            raise unsupported(inst, "a second destination (d|p) is supported on shfl and match.all only")
        for written in (destination(inst), inst.pair.name if inst.pair else None):
            if written in self.dynamic:
                self._protect(written)
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
        if inst.pair is not None:
            self.invalidate(inst.pair.name)

    def _barrier(self, read) -> None:
        """``__syncthreads()``: a no-op for one warp (its lanes run in step); for several warps a marker that
        lowering.barriers turns into a parking block and a resume point. Every lane of the warp stops there,
        including lanes masked off by an if-converted branch (their masks are kept with the other registers).

        ``__syncwarp(mask)``: a no-op where the mask's lanes lie in one of the machine's 4-lane warps (a cooperative
        groups tile's). A mask of more lanes (``__syncwarp()``: a GPU warp's 32) names lanes that are other warps
        here, which run one after another: warp-synchronous code (``if (t < o) v += s[t + o]; __syncwarp();``
        over 16 threads) needs them to meet there, so it is a barrier of the block's warps, as ``__syncthreads``.
        That is more than a GPU's warp barrier where the block has more than 32 threads, which changes no result of
        a program without races; as ``__syncthreads``, every warp stops there, also one whose lanes an if-converted
        branch masks off (``if (t < 32)`` in a block of 64), and one under a guard of its own is refused."""
        inst = self.inst
        mods = set(inst.modifiers)
        warp = inst.base == "bar" and mods == {"warp", "sync"}
        if warp:
            mask = read(inst.operands[0]) if inst.operands else Const(MASK32)
            lanes = mask.value & MASK32 if isinstance(mask, Const) else MASK32
            if len({lane // LANES for lane in range(32) if lanes >> lane & 1}) <= 1:
                return
            if guard_value(inst, read) != Const(1):
                raise unsupported(inst, f"a __syncwarp() of lanes 0x{lanes:x} under a lane predicate: the "
                                        f"machine's warp is {LANES} lanes, so it is a barrier of the block's warps "
                                        f"here, which every warp must reach (sync a tile of {LANES}, or use "
                                        f"__syncthreads())")
        elif mods - {"sync", "aligned", "cta"} or len(inst.operands) not in (1, 2):
            raise unsupported(inst, "the barriers are bar.sync / barrier.sync of the whole block "
                                    "(__syncthreads) and bar.red (__syncthreads_count / _and / _or); bar.arrive and "
                                    "named partial barriers are not")
        if len(inst.operands) == 2 and not warp:
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

    # -- dispatch to the instruction modules -------------------------------------------------------------------------
    def _compute(self, read, dst: str, value_here) -> None:
        """Emit the machine op(s) that compute a dynamic destination."""
        inst = self.inst
        base = inst.base
        if dst in self.counters.offsets and id(inst) not in self.counters.steps:
            self.op("a", (None, 0), dst=dst)        # a counter from v holds its count: 0 here (lowering.counters)
            return
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

