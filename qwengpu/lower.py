"""Lowering: one PTX kernel plus its launch arguments -> machine blocks (qwengpu.isa.Block).

Stages, each a function below:

1. ``basic_blocks``   split the body at labels and branches.
2. ``propagate``      constants and thread-index affine values through the control-flow graph. Launch arguments are
                      bound as constants (the driver's "fixed device addresses, resident across launches"), so address
                      arithmetic and mode tests fold away; what stays is what the machine must compute.
3. ``Emitter``        linearises the executable blocks in program order. Forward branches are if-converted into
                      lane predicates (so ``if (i != 0) return;`` lets one thread post a flag); backward branches stay
                      real, uniform branches (``while (*flag < k) {}`` is a loop). 64-bit byte addresses become word
                      addresses. Fences and ``bar.sync`` are no-ops: one warp runs at a time and stores leave in order.
4. ``fuse``           packs a load into its consumer, a store or a branch into the op that computes its value.
5. ``allocate``       maps virtual registers onto the 15 machine registers.

Limits are errors that name the value and the limit: more than 32 blocks, more than 15 registers, an unsupported
instruction (with its text and line), wrong launch arguments.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from . import isa
from .isa import EXIT, LANES, NONE, REGISTERS, ROM_BLOCKS, TID, Block, MachineError, Operand
from .ptx import Imm, Instruction, Label, Mem, Reg

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------------------------------
# Abstract values: what is known about a register at a program point.
@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class Affine:
    """coef * tid + offset: a thread index expression, known without running the machine."""
    coef: int
    offset: int


DYNAMIC = "dynamic"     # computed by the machine


def join(a, b):
    if a is None:
        return b
    if b is None or a == b:
        return a
    return DYNAMIC


@dataclass
class BasicBlock:
    index: int
    labels: list[str]
    body: list[Instruction]
    terminator: Instruction | None     # bra or ret (possibly guarded), None when it falls through
    successors: list[int] = field(default_factory=list)


@dataclass
class Program:
    """Machine blocks for one launch configuration, with a listing for people."""
    kernel: str
    blocks: list[Block]
    registers: int
    barrier: bool
    listing: list[str]


def lower(kernel, args: list[int], threads: int) -> Program:
    """Lower a parsed PTX kernel for a launch with these argument values and this many threads."""
    if len(args) != len(kernel.params):
        names = ", ".join(f"{p.name}: {p.type}" for p in kernel.params)
        raise MachineError(f"kernel {kernel.name} takes {len(kernel.params)} arguments ({names}), got {len(args)}")
    params = {}
    for param, value in zip(kernel.params, args):
        if param.type.endswith("64"):
            if not 0 <= value <= isa.SINK:
                raise MachineError(f"kernel {kernel.name} argument {param.name}: pointer {value} is not a device "
                                   f"word address 0..{isa.SINK}")
            params[param.name] = Const(value * 4)       # PTX addresses are bytes; the machine's are words
        elif param.type.endswith("32"):
            if not -(1 << 31) <= value < (1 << 32):
                raise MachineError(f"kernel {kernel.name} argument {param.name}: {value} does not fit 32 bits")
            params[param.name] = Const(value & MASK32)
        else:
            raise MachineError(f"kernel {kernel.name} parameter {param.name}: type .{param.type} is not supported "
                               "(32-bit integers and pointers only)")
    blocks = basic_blocks(kernel)
    states = propagate(kernel, blocks, params, threads)
    emitter = Emitter(kernel, blocks, states, params, threads)
    mops = emitter.run()
    mops = fuse(mops)
    return allocate(kernel.name, mops, emitter.barrier)


# ---------------------------------------------------------------------------------------------------------------------
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
                raise MachineError(f"line {term.line}: branch to an unknown label: {term.text}")
            b.successors = [label_index[target.name]] + (fall if term.guard is not None else [])
    return blocks


# ---------------------------------------------------------------------------------------------------------------------
# Abstract evaluation, shared by constant propagation and emission.
SPECIAL = {"%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x", "%tid.y", "%tid.z", "%ntid.y", "%ntid.z", "%ctaid.y",
           "%ctaid.z", "%nctaid.y", "%nctaid.z"}


def _width(inst: Instruction) -> int:
    for mod in reversed(inst.modifiers):
        if mod[1:].isdigit() and mod[0] in "subf":
            return int(mod[1:])
    return 32


def _signed(inst: Instruction) -> bool:
    return any(m.startswith("s") and m[1:].isdigit() for m in inst.modifiers)


CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
       "lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
MIRROR = {"lt_s": "gt_s", "le_s": "ge_s", "gt_s": "lt_s", "ge_s": "le_s", "lt_u": "gt_u", "le_u": "ge_u",
          "gt_u": "lt_u", "ge_u": "le_u", "eq": "eq", "ne": "ne"}
COMMUTATIVE = {"add", "mul", "and", "or", "xor", "min_s", "max_s", "min_u", "max_u", "eq", "ne"}


def machine_op(inst: Instruction) -> str:
    """The ALU op of a 32-bit PTX arithmetic / compare instruction."""
    base, mods = inst.base, inst.modifiers
    signed = _signed(inst)
    if base == "setp":
        cmp = CMP.get(mods[0])
        if cmp is None or len(mods) != 2:
            raise _unsupported(inst)
        if cmp in ("eq", "ne"):
            return cmp
        unsigned_cmp = mods[0] in ("lo", "ls", "hi", "hs")
        return f"{cmp}_{'s' if signed and not unsigned_cmp else 'u'}"
    table = {"add": "add", "sub": "sub", "and": "and", "or": "or", "xor": "xor", "shl": "shl",
             "mul": "mul", "mad": "mul"}
    if base in table:
        if base in ("mul", "mad") and "lo" not in mods and "wide" not in mods:
            raise _unsupported(inst)
        return table[base]
    if base == "shr":
        return "shr_s" if signed else "shr_u"
    if base in ("min", "max", "div", "rem"):
        return f"{base}_{'s' if signed else 'u'}"
    raise _unsupported(inst)


def _unsupported(inst: Instruction) -> MachineError:
    return MachineError(f"unsupported PTX instruction at line {inst.line}: {inst.text}")


def fold(op: str, a: int, b: int, width: int) -> int:
    """Evaluate an op on constants (launch arguments and literals) with the machine's own ALU table."""
    if width <= 32:
        return isa.alu(op, a, b)
    table = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "shl": lambda: a << b,
             "and": lambda: a & b, "or": lambda: a | b, "xor": lambda: a ^ b}
    if op not in table:
        return None
    return table[op]() & MASK64


def affine_op(op: str, a, b, width: int):
    """The result of op on abstract values, or DYNAMIC when the machine must compute it."""
    if a is None or b is None:
        return None
    if isinstance(a, Const) and isinstance(b, Const):
        value = fold(op, a.value, b.value, width)
        return DYNAMIC if value is None else Const(value)
    if op == "add" and isinstance(a, Affine) and isinstance(b, (Const, Affine)):
        return _affine_add(a, b)
    if op == "add" and isinstance(b, Affine) and isinstance(a, Const):
        return _affine_add(b, a)
    if op == "sub" and isinstance(a, Affine) and isinstance(b, Const):
        return Affine(a.coef, a.offset - _signed_value(b.value, width))
    if op == "mul" and isinstance(a, Affine) and isinstance(b, Const):
        k = _signed_value(b.value, width)
        return Affine(a.coef * k, a.offset * k) if k else Const(0)
    if op == "mul" and isinstance(b, Affine) and isinstance(a, Const):
        return affine_op(op, b, a, width)
    if op == "shl" and isinstance(a, Affine) and isinstance(b, Const) and b.value < 32:
        return Affine(a.coef << b.value, a.offset << b.value)
    return DYNAMIC


def _affine_add(a: Affine, b):
    if isinstance(b, Const):
        return Affine(a.coef, a.offset + _signed_value(b.value, 64))
    coef = a.coef + b.coef
    return Affine(coef, a.offset + b.offset) if coef else Const(a.offset + b.offset)


def _signed_value(value: int, width: int) -> int:
    width = 64 if width > 32 else 32
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def evaluate(inst: Instruction, read, params: dict, threads: int):
    """Abstract result of ``inst`` (the value of its destination), given read(operand) -> abstract value."""
    base, mods = inst.base, inst.modifiers
    if any(m[:1] == "f" and m[1:].isdigit() for m in mods) or "rn" in mods or "rz" in mods:
        raise MachineError(f"unsupported PTX instruction at line {inst.line} (the machine has no floating point): "
                           f"{inst.text}")
    width = _width(inst)
    ops = inst.operands
    if base == "ld" and "param" in mods:
        return params[ops[1].base]
    if base in ("ld", "atom"):
        return DYNAMIC
    if base == "mov" or base == "cvta":
        return read(ops[1])
    if base == "cvt":
        value = read(ops[1])
        if isinstance(value, Const):
            dst_width = int(mods[-2][1:]) if len(mods) >= 2 and mods[-2][1:].isdigit() else 32
            src_signed = mods[-1].startswith("s")
            src_width = int(mods[-1][1:])
            v = value.value & ((1 << src_width) - 1)
            if src_signed and v >> (src_width - 1):
                v -= 1 << src_width
            return Const(v & ((1 << dst_width) - 1))
        if isinstance(value, Affine) and mods[-1] in ("u32", "s32") and mods[-2] in ("u64", "s64"):
            return value
        return DYNAMIC if value is not None else None
    if base == "selp":
        cond = read(ops[3])
        if isinstance(cond, Const):
            return read(ops[1]) if cond.value else read(ops[2])
        return DYNAMIC if cond is not None else None
    if base in ("and", "or", "xor", "not") and mods and mods[0] == "pred":
        values = [read(o) for o in ops[1:]]
        if any(v is None for v in values):
            return None
        if all(isinstance(v, Const) for v in values):
            if base == "not":
                return Const(1 - values[0].value)
            return Const(isa.alu(base, values[0].value, values[1].value))
        return DYNAMIC
    if base == "mul" and "wide" in mods:
        return affine_op("mul", read(ops[1]), read(ops[2]), 64)
    if base == "mad":
        product = affine_op("mul", read(ops[1]), read(ops[2]), width)
        return affine_op("add", product, read(ops[3]), width)
    if base in ("neg", "not"):
        value = read(ops[1])
        if isinstance(value, Const):
            return Const(fold("sub", 0, value.value, width) if base == "neg" else fold("xor", value.value, MASK64,
                                                                                        width))
        return DYNAMIC if value is not None else None
    if base in ("add", "sub", "and", "or", "xor", "shl", "shr", "mul", "min", "max", "div", "rem", "setp"):
        op = machine_op(inst)
        a, b = read(ops[1]), read(ops[2])
        if base == "setp" and isinstance(a, Const) and isinstance(b, Const):
            return Const(isa.alu(op, a.value, b.value) if width <= 32 else _compare64(op, a.value, b.value))
        if base == "setp" and a is not None and b is not None:
            return _decided_by_range(op, a, b, threads, width)
        return affine_op(op, a, b, width)
    raise _unsupported(inst)


def _decided_by_range(op: str, a, b, threads: int, width: int):
    """A compare of a thread-index expression with a constant that every thread of the launch decides alike
    (``i < n`` with n >= threads) is a constant: the launch's thread count bounds tid to 0..threads-1."""
    if isinstance(b, Affine) and isinstance(a, Const):
        return _decided_by_range(MIRROR.get(op, op), b, a, threads, width)
    if not (isinstance(a, Affine) and isinstance(b, Const)) or width > 32:
        return DYNAMIC
    ends = {a.coef * t + a.offset for t in (0, threads - 1)}
    if op.endswith("_u") and min(ends) < 0 or max(ends) >= (1 << 31) or min(ends) < -(1 << 31):
        return DYNAMIC
    values = {isa.alu(op, e & MASK32, b.value) for e in range(min(ends), max(ends) + 1)} if max(ends) - min(
        ends) <= 4096 else {None}
    return Const(values.pop()) if len(values) == 1 and None not in values else DYNAMIC


def _compare64(op: str, a: int, b: int) -> int:
    if op.endswith("_s"):
        a, b = _signed_value(a, 64), _signed_value(b, 64)
    name = op.split("_")[0]
    return int({"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[name])


def _source_registers(blocks) -> set[str]:
    """Every register some instruction reads (sources, memory bases, guards)."""
    names = set()
    for block in blocks:
        for inst in block.body + ([block.terminator] if block.terminator else []):
            sources = inst.operands[1:] if destination(inst) else inst.operands
            for operand in list(sources) + [inst.guard]:
                reg = operand.base if isinstance(operand, Mem) else operand
                if isinstance(reg, Reg):
                    names.add(reg.name)
    return names


def destination(inst: Instruction) -> str | None:
    if inst.base in ("st", "red", "membar", "fence", "bar", "barrier") or not inst.operands:
        return None
    first = inst.operands[0]
    return first.name if isinstance(first, Reg) else None


def make_reader(state: dict, params: dict, threads: int):
    def read(operand):
        if isinstance(operand, Imm):
            return Const(operand.value & MASK64)
        if isinstance(operand, Reg):
            name = operand.name
            if name in SPECIAL:
                if name == "%tid.x":
                    return Affine(1, 0)
                if name == "%ntid.x":
                    return Const(threads)
                if name in ("%nctaid.x", "%ntid.y", "%ntid.z", "%nctaid.y", "%nctaid.z"):
                    return Const(1)
                return Const(0)
            return state.get(name, Const(0))   # registers start at 0 on the machine
        raise MachineError(f"unexpected operand {operand!r}")
    return read


def propagate(kernel, blocks: list[BasicBlock], params: dict, threads: int) -> dict[int, dict]:
    """Constant and thread-index propagation; returns each executable block's entry state."""
    entry: dict[int, dict] = {0: {}}
    work = [0]
    steps = 0
    while work:
        steps += 1
        if steps > 100 * (len(blocks) + 1) ** 2:
            raise MachineError(f"kernel {kernel.name}: constant propagation does not settle")
        index = work.pop(0)
        state = dict(entry[index])
        read = make_reader(state, params, threads)
        for inst in blocks[index].body:
            dst = destination(inst)
            if dst is None:
                continue
            value = evaluate(inst, read, params, threads)
            if inst.guard is not None:
                guard = read(inst.guard)
                if isinstance(guard, Const) and bool(guard.value) == inst.guard_negated:
                    continue
                if not isinstance(guard, Const):
                    value = join(state.get(dst, Const(0)), value)
            state[dst] = value
        for successor in _executable_successors(blocks[index], read):
            old = entry.get(successor)
            if old is None:
                merged = dict(state)
            else:
                merged = dict(old)
                for name in set(old) | set(state):
                    merged[name] = join(old.get(name, Const(0)), state.get(name, Const(0)))
            if old != merged:
                entry[successor] = merged
                if successor not in work:
                    work.append(successor)
    return entry


def _executable_successors(block: BasicBlock, read) -> list[int]:
    term = block.terminator
    if term is None or term.guard is None:
        return block.successors
    cond = read(term.guard)
    if isinstance(cond, Const):
        taken = bool(cond.value) != term.guard_negated
        if term.base == "bra":
            return block.successors[:1] if taken else block.successors[1:]
        return [] if taken else block.successors
    return block.successors


# ---------------------------------------------------------------------------------------------------------------------
# Lane predicates as truth tables over predicate registers (atoms): exact, so p&c | p&!c simplifies back to p.
@dataclass(frozen=True)
class Predicate:
    atoms: tuple[str, ...]
    rows: frozenset      # assignments (tuples of bools, one per atom) under which a lane is active

    @staticmethod
    def const(value: bool) -> "Predicate":
        return Predicate((), frozenset({()}) if value else frozenset())

    @staticmethod
    def atom(name: str, negated: bool = False) -> "Predicate":
        return Predicate((name,), frozenset({(not negated,)}))

    def _expand(self, atoms):
        rows = set()
        for assignment in itertools.product((False, True), repeat=len(atoms)):
            mine = tuple(assignment[atoms.index(a)] for a in self.atoms)
            if mine in self.rows:
                rows.add(assignment)
        return rows

    def _combine(self, other, fn) -> "Predicate":
        atoms = tuple(sorted(set(self.atoms) | set(other.atoms)))
        mine, theirs = self._expand(atoms), other._expand(atoms)
        rows = {a for a in itertools.product((False, True), repeat=len(atoms)) if fn(a in mine, a in theirs)}
        return Predicate(atoms, frozenset(rows)).simplify()

    def __and__(self, other):
        return self._combine(other, lambda x, y: x and y)

    def __or__(self, other):
        return self._combine(other, lambda x, y: x or y)

    def __invert__(self):
        every = set(itertools.product((False, True), repeat=len(self.atoms)))
        return Predicate(self.atoms, frozenset(every - self.rows)).simplify()

    def simplify(self) -> "Predicate":
        atoms, rows = list(self.atoms), set(self.rows)
        i = 0
        while i < len(atoms):
            low = {r[:i] + r[i + 1:] for r in rows if not r[i]}
            high = {r[:i] + r[i + 1:] for r in rows if r[i]}
            if low == high:
                atoms.pop(i)
                rows = low
            else:
                i += 1
        return Predicate(tuple(atoms), frozenset(rows))

    @property
    def always(self) -> bool:
        return not self.atoms and bool(self.rows)

    @property
    def never(self) -> bool:
        return not self.rows


TRUE, FALSE = Predicate.const(True), Predicate.const(False)


# ---------------------------------------------------------------------------------------------------------------------
# Machine ops over virtual registers, before fusion and allocation.
@dataclass
class MOp:
    op: str = "a"
    a: tuple = (None, 0)            # (source, imm): source None, "tid" or a virtual register name
    b: tuple = (None, 0)
    dst: str | None = None
    load: bool = False
    store: tuple | None = None      # address (source, imm)
    atomic: bool = False
    pred: tuple | None = None       # (virtual register, negated)
    branch: str = "none"
    target: object = None           # basic block index, or "exit"
    line: int = 0
    text: str = ""
    labels: set = field(default_factory=set)   # basic blocks that start here
    target_index: int | None = None            # the machine op a branch goes to

    def reads(self, keep: bool = True) -> list[str]:
        regs = [s for s, _ in (self.a, self.b) if s not in (None, "tid")]
        if self.store is not None and self.store[0] not in (None, "tid"):
            regs.append(self.store[0])
        if self.pred is not None:
            regs.append(self.pred[0])
        if keep and self.pred is not None and self.dst is not None:
            regs.append(self.dst)          # inactive lanes keep the old value
        return regs


class Emitter:
    """Walks the executable basic blocks in program order and emits machine ops under lane predicates."""

    def __init__(self, kernel, blocks, states, params, threads):
        self.kernel, self.blocks, self.states = kernel, blocks, states
        self.params, self.threads = params, threads
        self.mops: list[MOp] = []
        self.barrier = False
        self.scale: dict[str, int] = {}         # 64-bit virtual register -> 4 (holds a word address) or 1
        self.temps = itertools.count()
        self.materialized: dict[Predicate, tuple] = {}
        self.dynamic = self._dynamic_registers()
        self.used = _source_registers(blocks)

    def _dynamic_registers(self) -> set[str]:
        """Registers whose value the machine must hold in some place they are read."""
        dynamic = set()
        for index, entry in self.states.items():
            state = dict(entry)
            read = make_reader(state, self.params, self.threads)
            block = self.blocks[index]
            for inst in block.body + ([block.terminator] if block.terminator else []):
                for operand in inst.operands + ((inst.guard,) if inst.guard else ()):
                    reg = operand.base if isinstance(operand, Mem) else operand
                    if isinstance(reg, Reg) and reg.name not in SPECIAL and state.get(reg.name) == DYNAMIC:
                        dynamic.add(reg.name)
                dst = destination(inst)
                if dst is not None and inst is not block.terminator:
                    value = evaluate(inst, read, self.params, self.threads)
                    if inst.guard is not None and not isinstance(read(inst.guard), Const):
                        value = join(state.get(dst, Const(0)), value)
                    state[dst] = value
        return dynamic

    def temp(self) -> str:
        return f"%t{next(self.temps)}"

    # -- predicates ------------------------------------------------------------------------------------------------
    def predicate_field(self, pred: Predicate):
        if pred.always:
            return None
        if pred.never:
            raise MachineError("internal: emitting under a false predicate")
        if len(pred.atoms) == 1:
            return (pred.atoms[0], (True,) not in pred.rows)
        if pred in self.materialized:
            return self.materialized[pred]
        # Sum of minterms over the atoms, each atom 0 or 1: a product is 1 exactly when every literal matches.
        terms = []
        for row in sorted(pred.rows):
            value = None
            for atom, bit in zip(pred.atoms, row):
                literal = self.temp()
                self.mops.append(MOp("eq", (atom, 0), (None, int(bit)), literal, text=f"predicate literal {atom}"))
                if value is not None:
                    product = self.temp()
                    self.mops.append(MOp("and", (value, 0), (literal, 0), product, text="predicate product"))
                    literal = product
                value = literal
            terms.append(value)
        result = terms[0]
        for term in terms[1:]:
            total = self.temp()
            self.mops.append(MOp("or", (result, 0), (term, 0), total, text="predicate sum"))
            result = total
        self.materialized[pred] = (result, False)
        return self.materialized[pred]

    def invalidate(self, register: str) -> None:
        self.materialized = {p: v for p, v in self.materialized.items() if register not in p.atoms}

    # -- operands --------------------------------------------------------------------------------------------------
    def operand(self, operand, value) -> tuple:
        """A machine operand (source, imm) for a PTX operand whose abstract value here is ``value``."""
        if isinstance(value, Const):
            return (None, value.value & MASK32)
        if isinstance(value, Affine):
            if value.coef == 1:
                return ("tid", value.offset & MASK32)
            scaled = self.temp()
            self.mops.append(MOp("mul", ("tid", 0), (None, value.coef & MASK32), scaled, text="thread index scale"))
            return (scaled, value.offset & MASK32)
        if value == DYNAMIC and isinstance(operand, Reg):
            return (operand.name, 0)
        raise MachineError(f"register {operand} is read before any definition reaches it")

    def address(self, inst, mem: Mem, read) -> tuple:
        """A word address (source, imm) for a PTX memory operand (bytes)."""
        if isinstance(mem.base, str) or mem.base is None:
            raise _unsupported(inst)
        value = read(mem.base)
        if mem.offset % 4:
            raise MachineError(f"line {inst.line}: byte offset {mem.offset} is not word aligned: {inst.text}")
        if isinstance(value, Const):
            byte = value.value + mem.offset
            if byte % 4:
                raise MachineError(f"line {inst.line}: address {byte} is not word aligned: {inst.text}")
            return (None, (byte // 4) & MASK32)
        if isinstance(value, Affine):
            if value.coef % 4 or value.offset % 4:
                raise MachineError(f"line {inst.line}: address {value.coef}*tid+{value.offset} is not word "
                                   f"aligned: {inst.text}")
            source, imm = self.operand(mem.base, Affine(value.coef // 4, value.offset // 4))
            return (source, (imm + mem.offset // 4) & MASK32)
        if self.scale.get(mem.base.name) != 4:
            raise MachineError(f"line {inst.line}: {mem.base.name} is not a word address the machine can use: "
                               f"{inst.text}")
        return (mem.base.name, (mem.offset // 4) & MASK32)

    # -- emission --------------------------------------------------------------------------------------------------
    def run(self) -> list[MOp]:
        incoming: dict[int, Predicate] = {0: TRUE}
        first_mop: dict[int, int] = {}
        back_edges = []
        for block in self.blocks:
            if block.index not in self.states:
                continue
            pred = incoming.get(block.index, FALSE)
            if pred.never:
                continue
            first_mop[block.index] = len(self.mops)
            state = dict(self.states[block.index])
            read = make_reader(state, self.params, self.threads)
            for inst in block.body:
                self.instruction(inst, pred, state, read)
            for successor, contribution in self.terminator(block, pred, read):
                if successor <= block.index:
                    back_edges.append((block, successor, contribution))
                else:
                    incoming[successor] = incoming.get(successor, FALSE) | contribution
        for block, header, contribution in back_edges:
            if incoming.get(header, FALSE) != contribution:
                raise MachineError(f"kernel {self.kernel.name}: the loop at line {block.terminator.line} runs under a "
                                   "divergent condition; loops must be uniform (same trip count on every lane)")
        # Resolve branch targets to the first machine op at or after the block's start.
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

    def terminator(self, block: BasicBlock, pred: Predicate, read):
        term = block.terminator
        fall = block.index + 1
        if term is None:
            return [(fall, pred)] if fall < len(self.blocks) else []
        taken_pred = pred
        if term.guard is not None:
            cond = read(term.guard)
            if isinstance(cond, Const):
                if bool(cond.value) == term.guard_negated:      # never taken
                    return [(fall, pred)] if fall < len(self.blocks) else []
            else:
                atom = Predicate.atom(term.guard.name, term.guard_negated)
                taken_pred = pred & atom
        guarded = term.guard is not None and not isinstance(read(term.guard), Const)
        if term.base in ("ret", "exit"):
            return [(fall, pred & ~taken_pred)] if guarded and fall < len(self.blocks) else []
        target = block.successors[0]
        if target > block.index:                               # forward: if-converted, no machine branch
            edges = [(target, taken_pred)]
            if guarded:
                edges.append((fall, pred & ~taken_pred))
            return edges
        # A backward branch is a loop: a real, uniform branch.
        if not pred.always:
            raise MachineError(f"kernel {self.kernel.name}: the loop at line {term.line} runs under a divergent "
                               "condition; loops must be uniform (same trip count on every lane)")
        if guarded:
            self.mops.append(MOp("a", self.operand(term.guard, read(term.guard)), branch="zero" if term.guard_negated
                                 else "nonzero", target=target, line=term.line, text=term.text))
            return [(target, pred), (fall, pred)]
        self.mops.append(MOp("a", branch="always", target=target, line=term.line, text=term.text))
        return [(target, pred)]

    def emit(self, mop: MOp, inst: Instruction, pred: Predicate) -> MOp:
        mop.line, mop.text = inst.line, inst.text
        mop.pred = self.predicate_field(pred)
        self.mops.append(mop)
        return mop

    def instruction(self, inst: Instruction, pred: Predicate, state: dict, read) -> None:
        base, mods, ops = inst.base, inst.modifiers, inst.operands
        if base in ("membar", "fence", "bar", "barrier"):
            if base in ("bar", "barrier"):
                self.barrier = True
            return
        if inst.guard is not None:
            guard = read(inst.guard)
            if isinstance(guard, Const):
                if bool(guard.value) == inst.guard_negated:
                    return
            else:
                pred = pred & Predicate.atom(inst.guard.name, inst.guard_negated)
        if base == "st" or base == "red":
            self._check_global(inst)
            if base == "red":
                return self._atomic(inst, pred, state, read, None, ops[0], ops[1])
            value = self.operand(ops[1], read(ops[1]))
            address = self.address(inst, ops[0], read)
            self.emit(MOp("a", value, store=address), inst, pred)
            return
        dst = destination(inst)
        if dst is None:
            raise _unsupported(inst)
        value = evaluate(inst, read, self.params, self.threads)
        if inst.guard is not None and not isinstance(read(inst.guard), Const):
            value = join(state.get(dst, Const(0)), value)
        if base == "atom":
            self._check_global(inst)
            if mods[-2:-1] != ("add",) and "add" not in mods:
                raise _unsupported(inst)
            self._atomic(inst, pred, state, read, dst, ops[1], ops[2])
        elif dst in self.dynamic and value is not None:
            self._compute(inst, pred, read, dst)
        state[dst] = value
        self.invalidate(dst)

    @staticmethod
    def _check_global(inst: Instruction) -> None:
        if "global" not in inst.modifiers:
            raise MachineError(f"line {inst.line}: only global memory exists on this machine: {inst.text}")
        if _width(inst) != 32:
            raise MachineError(f"line {inst.line}: memory words are 32 bits: {inst.text}")

    def _atomic(self, inst, pred, state, read, dst, mem, value) -> None:
        address = self.address(inst, mem, read)
        operand = self.operand(value, read(value))
        new = self.temp() if dst is not None and dst in self.used else None
        self.emit(MOp("add", address, operand, new, load=True, store=address, atomic=True), inst, pred)
        if new is not None:   # atom returns the old value: new - v, computed by the machine
            self.emit(MOp("sub", (new, 0), operand, dst), inst, pred)
            self.scale[dst] = 1

    def _compute(self, inst: Instruction, pred: Predicate, read, dst: str) -> None:
        """Emit the machine op(s) that compute a dynamic destination."""
        base, mods, ops = inst.base, inst.modifiers, inst.operands
        width = _width(inst)
        value_here = evaluate(inst, read, self.params, self.threads)
        if value_here not in (DYNAMIC, None):
            # Known here, but the register merges with another definition elsewhere: the machine holds it.
            scale = 4 if width == 64 and base != "cvt" else 1
            self._set_scale(inst, dst, scale)
            if scale == 4 and isinstance(value_here, Const):
                value_here = Const(value_here.value // 4)
            elif scale == 4:
                value_here = Affine(value_here.coef // 4, value_here.offset // 4)
            self.emit(MOp("a", self.operand(None, value_here), dst=dst), inst, pred)
            return
        operand = lambda i: self.operand(ops[i], read(ops[i]))   # noqa: E731
        if base == "ld":
            if "param" in mods:
                raise _unsupported(inst)
            self._check_global(inst)
            self.emit(MOp("a", self.address(inst, ops[1], read), dst=dst, load=True), inst, pred)
        elif base in ("mov", "cvta") or (base == "cvt" and mods[-1] in ("u32", "s32", "b32", "u64", "s64")
                                          and mods[-2] in ("u32", "s32", "u64", "s64", "b32")):
            if base == "cvt":
                self._set_scale(inst, dst, 1)
            else:
                self._copy_scale(inst, dst, ops[1])
            self.emit(MOp("a", operand(1), dst=dst), inst, pred)
        elif base == "cvt" and mods[-2] in ("u16", "u32") and mods[-1] in ("u32", "u16", "s16"):
            if mods[-1] == "s16":
                raise _unsupported(inst)
            self.emit(MOp("and", operand(1), (None, 0xFFFF), dst), inst, pred)
        elif base == "selp":
            cond = read(ops[3])
            if isinstance(cond, Const):
                self.emit(MOp("a", operand(1 if cond.value else 2), dst=dst), inst, pred)
            else:
                self.emit(MOp("a", operand(2), dst=dst), inst, pred)
                self.emit(MOp("a", operand(1), dst=dst), inst, pred & Predicate.atom(ops[3].name))
        elif base in ("and", "or", "xor") and mods[0] == "pred":
            self.emit(MOp(base, operand(1), operand(2), dst), inst, pred)
        elif base == "not" and mods[0] == "pred":
            self.emit(MOp("xor", operand(1), (None, 1), dst), inst, pred)
        elif base == "not":
            self.emit(MOp("xor", operand(1), (None, MASK32), dst), inst, pred)
        elif base == "neg":
            self.emit(MOp("sub", (None, 0), operand(1), dst), inst, pred)
        elif base == "mad":
            product = self.temp()
            self.emit(MOp("mul", operand(1), operand(2), product), inst, pred)
            self.emit(MOp("add", (product, 0), operand(3), dst), inst, pred)
        elif base == "mul" and "wide" in mods:
            factor = read(ops[2])
            if not isinstance(factor, Const):
                raise MachineError(f"line {inst.line}: 64-bit products of two machine values are not supported: "
                                   f"{inst.text}")
            if factor.value % 4 == 0:                 # a byte offset: keep it in words
                self._set_scale(inst, dst, 4)
                k = factor.value // 4
            else:
                self._set_scale(inst, dst, 1)
                k = factor.value
            if k == 1:
                self.emit(MOp("a", operand(1), dst=dst), inst, pred)
            else:
                self.emit(MOp("mul", operand(1), (None, k & MASK32), dst), inst, pred)
        elif width == 64 and base in ("add", "sub", "shl"):
            self._wide(inst, pred, read, dst)
        elif base in ("add", "sub", "and", "or", "xor", "shl", "shr", "mul", "min", "max", "div", "rem", "setp"):
            if width > 32:
                raise _unsupported(inst)
            if base == "setp" and width == 16 and mods[0] not in ("eq", "ne"):
                raise _unsupported(inst)
            self.emit(MOp(machine_op(inst), operand(1), operand(2), dst), inst, pred)
        else:
            raise _unsupported(inst)

    def _wide(self, inst, pred, read, dst) -> None:
        """64-bit address arithmetic on word addresses (registers with scale 4) or plain values (scale 1)."""
        base, ops = inst.base, inst.operands
        a, b = read(ops[1]), read(ops[2])
        if base == "shl":
            if not isinstance(b, Const) or a != DYNAMIC:
                raise _unsupported(inst)
            scale = self.scale.get(ops[1].name, 1)
            shift = b.value
            if scale == 1 and shift >= 2:
                self._set_scale(inst, dst, 4)
                shift -= 2
            else:
                self._set_scale(inst, dst, scale)
            op = MOp("shl", (ops[1].name, 0), (None, shift), dst) if shift else MOp("a", (ops[1].name, 0), dst=dst)
            self.emit(op, inst, pred)
            return
        scales = set()
        operands = []
        for operand, value in ((ops[1], a), (ops[2], b)):
            if value == DYNAMIC:
                scales.add(self.scale.get(operand.name, 1))
                operands.append((operand.name, 0))
            else:
                operands.append(value)
        scale = 4 if 4 in scales else 1
        if len(scales) > 1:
            raise MachineError(f"line {inst.line}: mixes a word address and a plain 64-bit value: {inst.text}")
        resolved = []
        for item in operands:
            if isinstance(item, tuple):
                resolved.append(item)
            elif isinstance(item, Const):
                if scale == 4 and item.value % 4:
                    raise MachineError(f"line {inst.line}: byte offset {item.value} is not word aligned: {inst.text}")
                resolved.append((None, (item.value // scale) & MASK32))
            else:
                if scale == 4 and (item.coef % 4 or item.offset % 4):
                    raise MachineError(f"line {inst.line}: address is not word aligned: {inst.text}")
                resolved.append(self.operand(None, Affine(item.coef // scale, item.offset // scale)))
        self._set_scale(inst, dst, scale)
        self.emit(MOp(base, resolved[0], resolved[1], dst), inst, pred)

    def _set_scale(self, inst, register: str, scale: int) -> None:
        if self.scale.setdefault(register, scale) != scale:
            raise MachineError(f"line {inst.line}: {register} holds both word addresses and plain values: "
                               f"{inst.text}")

    def _copy_scale(self, inst, dst: str, source) -> None:
        if isinstance(source, Reg) and source.name in self.scale:
            self._set_scale(inst, dst, self.scale[source.name])
        elif _width(inst) == 64:
            self._set_scale(inst, dst, 4)


# ---------------------------------------------------------------------------------------------------------------------
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
            # load ; use it
            if (first.load and not first.atomic and first.op == "a" and first.store is None and first.branch == "none"
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
    if not (mop.load and not mop.atomic and mop.op == "a" and mop.store is None and mop.branch == "none"
            and mop.dst and mop.pred is None and _uses(mops).get(mop.dst, 0) == 1):
        return False
    address_regs = {s for s, _ in (mop.a, mop.b) if s not in (None, "tid")}
    for j in range(i + 1, len(mops)):
        later = mops[j]
        if later.labels:
            return False
        if mop.dst in later.reads():
            if later.load or later.atomic or later.pred is not None or later.dst == mop.dst or (
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
    """After ``d = s + k``, later reads of d in the same straight line read s + k directly. True if any changed."""
    mop = mops[i]
    if (mop.op != "a" or not mop.dst or mop.load or mop.store is not None or mop.branch != "none"
            or mop.pred is not None or mop.b != (None, 0)):
        return False
    source, offset = mop.a
    if source == mop.dst:
        return False
    changed = False
    for later in mops[i + 1:]:
        if later.labels:
            break
        for name in ("a", "b", "store"):
            operand = getattr(later, name)
            if operand is not None and operand[0] == mop.dst:
                setattr(later, name, (source, (operand[1] + offset) & MASK32))
                changed = True
        if later.dst in (mop.dst, source) or later.branch != "none":
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


# ---------------------------------------------------------------------------------------------------------------------
def allocate(kernel: str, mops: list[MOp], barrier: bool) -> Program:
    """Give virtual registers machine registers (liveness over the block graph), then build the ROM blocks."""
    if not mops or mops[-1].branch != "none" and mops[-1].branch != "always":
        mops.append(MOp("a", branch="always", target="exit", text="exit"))
    elif mops[-1].branch == "none":
        mops[-1].branch, mops[-1].target = "always", "exit"
    if len(mops) > ROM_BLOCKS:
        raise MachineError(f"kernel {kernel} needs {len(mops)} blocks; the ROM holds {ROM_BLOCKS}")
    succ = []
    for i, mop in enumerate(mops):
        nexts = [] if mop.branch == "always" else [i + 1] if i + 1 < len(mops) else []
        if mop.branch != "none" and mop.target != "exit":
            nexts.append(mop.target_index)
        succ.append(nexts)
    live_in = [set() for _ in mops]
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(mops))):
            out = set().union(*(live_in[s] for s in succ[i])) if succ[i] else set()
            new = (out - ({mops[i].dst} if mops[i].dst else set())) | set(mops[i].reads())
            if new != live_in[i]:
                live_in[i], changed = new, True
    interference: dict[str, set] = {}
    for i, mop in enumerate(mops):
        out = set().union(*(live_in[s] for s in succ[i])) if succ[i] else set()
        for reg in out | set(mop.reads()) | ({mop.dst} if mop.dst else set()):
            interference.setdefault(reg, set())
        if mop.dst:
            for reg in out:
                if reg != mop.dst:
                    interference[mop.dst].add(reg)
                    interference[reg].add(mop.dst)
    live_at_entry = live_in[0] if mops else set()
    for a in live_at_entry:      # registers read before written hold 0 from the warp's start: keep them apart
        for b in live_at_entry:
            if a != b:
                interference[a].add(b)
    color: dict[str, int] = {}
    for reg in sorted(interference, key=lambda r: (-len(interference[r]), r)):
        taken = {color[n] for n in interference[reg] if n in color}
        free = next(c for c in range(len(interference) + 1) if c not in taken)
        color[reg] = free
    needed = max(color.values(), default=-1) + 1
    if needed > REGISTERS:
        raise MachineError(f"kernel {kernel} needs {needed} registers per lane; the machine has {REGISTERS}")

    def operand(source, imm=0) -> Operand:
        if source is None:
            return Operand(NONE, imm)
        if source == "tid":
            return Operand(TID, imm)
        return Operand(color[source], imm)

    blocks, listing = [], []
    for i, mop in enumerate(mops):
        store = operand(*mop.store) if mop.store is not None else None
        target = EXIT if mop.target == "exit" or mop.branch == "none" else mop.target_index
        block = Block(
            op=mop.op, a=operand(*mop.a), b=operand(*mop.b), dst=color[mop.dst] if mop.dst else NONE,
            load=mop.load, store=store.reg if store else NONE, store_imm=store.imm if store else 0,
            store_enable=store is not None, atomic=mop.atomic,
            pred=color[mop.pred[0]] if mop.pred else NONE, pred_negate=bool(mop.pred and mop.pred[1]),
            branch=mop.branch, target=target)
        blocks.append(block)
        listing.append(f"b{i:<2} {block}    ; line {mop.line}: {mop.text}" if mop.line else f"b{i:<2} {block}")
    _check_uniform_branches(kernel, mops)
    return Program(kernel, blocks, needed, barrier, listing)


def _check_uniform_branches(kernel: str, mops: list[MOp]) -> None:
    """A real branch must see the same value on every lane: refuse one whose condition depends on the thread."""
    divergent: set[str] = set()
    changed = True
    while changed:
        changed = False
        for mop in mops:
            sources = [s for s, _ in (mop.a, mop.b)]
            if mop.dst and mop.dst not in divergent and (
                    mop.pred is not None or "tid" in sources or any(s in divergent for s in sources)):
                divergent.add(mop.dst)
                changed = True
    for mop in mops:
        if mop.branch in ("nonzero", "zero"):
            sources = [s for s, _ in (mop.a, mop.b)]
            if "tid" in sources or any(s in divergent for s in sources):
                raise MachineError(f"kernel {kernel}: the branch at line {mop.line} ({mop.text}) depends on the "
                                   "thread index; a loop's condition must be the same on every lane")


del replace, LANES
