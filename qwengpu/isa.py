"""The QwenGPU machine: its sizes, its block format and the semantics table.

This module is the one definition of what a machine block does. The reference interpreter executes it and the circuit
compiler reads the same tables, so the two cannot drift.

A block is one record. It runs on every lane of a warp through a fixed pipeline of stages:

1. operand read:  A = R[a.reg] + a.imm, B = R[b.reg] + b.imm  (reg may be NONE, or TID: the lane's thread index)
2. load (optional): A = mem[A]                                 (a uniform or per-lane address; never routed)
3. ALU:           X = OPS[op](A, B)                             (one op from a small table, 32-bit wrap-around)
4. write-back:    R[dst] = X on active lanes                    (dst may be NONE)
5. store (optional): mem[R[s.reg] + s.imm] = X                  (becomes a write-back record, may cross QLink)
6. branch (optional): uniform on X != 0 / X == 0, always, or on any active lane's X != 0, to a block or to EXIT

A lane is active when it exists in the warp and its predicate register (if the block has one) is nonzero (or zero,
with ``pred_negate``). An atomic block loads and stores the same address with the lanes in order, each lane seeing the
stores of the lanes before it, so four lanes adding into one word all count.
"""
from __future__ import annotations

from dataclasses import dataclass, field

LANES = 4
REGISTERS = 15
ROM_BLOCKS = 32
MEMORY_WORDS = 128          # rows 0..126 are memory, row 127 is the sink
SINK = 127
USABLE_WORDS = 127
WORD_MASK = 0xFFFFFFFF

# Register field values: 0..14 are r0..r14; two special sources.
TID = 16                    # the lane's thread index (warp base + lane)
NONE = 31                   # no register: the operand is its immediate alone, or no dst / store / predicate
EXIT = 63                   # branch target that ends the warp


class MachineError(Exception):
    """A kernel or a launch broke a limit of the machine (the message names the value and the limit). ``line``: the
    PTX line of the instruction refused, where there is one (the device names the CUDA source line it came from)."""

    def __init__(self, message: str = "", line: int | None = None):
        super().__init__(message)
        self.line = line


def _s(x: int) -> int:
    x &= WORD_MASK
    return x - (1 << 32) if x & 0x80000000 else x


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _u(x: int) -> int:
    return x & WORD_MASK


# The ALU table: name -> (code, function of two uint32 -> int). Results are reduced mod 2^32 by the caller.
OPS: dict[str, tuple[int, object]] = {
    "a":      (0,  lambda a, b: a),
    "add":    (1,  lambda a, b: a + b),
    "sub":    (2,  lambda a, b: a - b),
    "mul":    (3,  lambda a, b: a * b),
    "and":    (4,  lambda a, b: a & b),
    "or":     (5,  lambda a, b: a | b),
    "xor":    (6,  lambda a, b: a ^ b),
    "shl":    (7,  lambda a, b: a << (b & 31) if b < 32 else 0),
    "shr_u":  (8,  lambda a, b: a >> b if b < 32 else 0),
    "shr_s":  (9,  lambda a, b: _s(a) >> min(b, 31)),
    "min_s":  (10, lambda a, b: min(_s(a), _s(b))),
    "max_s":  (11, lambda a, b: max(_s(a), _s(b))),
    "min_u":  (12, lambda a, b: min(a, b)),
    "max_u":  (13, lambda a, b: max(a, b)),
    "eq":     (14, lambda a, b: int(a == b)),
    "ne":     (15, lambda a, b: int(a != b)),
    "lt_s":   (16, lambda a, b: int(_s(a) < _s(b))),
    "le_s":   (17, lambda a, b: int(_s(a) <= _s(b))),
    "gt_s":   (18, lambda a, b: int(_s(a) > _s(b))),
    "ge_s":   (19, lambda a, b: int(_s(a) >= _s(b))),
    "lt_u":   (20, lambda a, b: int(a < b)),
    "le_u":   (21, lambda a, b: int(a <= b)),
    "gt_u":   (22, lambda a, b: int(a > b)),
    "ge_u":   (23, lambda a, b: int(a >= b)),
    "b":      (24, lambda a, b: b),
    # C's truncating division (NCCL's avg post-op); division by zero gives all ones, as on NVIDIA GPUs.
    "div_s":  (25, lambda a, b: _trunc_div(_s(a), _s(b)) if b else WORD_MASK),
    "div_u":  (26, lambda a, b: a // b if b else WORD_MASK),
    "rem_s":  (27, lambda a, b: _s(a) - _trunc_div(_s(a), _s(b)) * _s(b) if b else a),
    "rem_u":  (28, lambda a, b: a % b if b else a),
}
OP_NAMES = {code: name for name, (code, _) in OPS.items()}
DIVISIONS = ("div_u", "div_s", "rem_u", "rem_s")        # the ops whose B is a divisor
# Every backend divides by an immediate 1..IMMEDIATE_DIVISORS (NCCL's avg divides by the rank count); the lowering
# builds a division by a register from add / or / shift / compare ops (qwengpu.lowering.arithmetic, long division).
IMMEDIATE_DIVISORS = 8

# Branch kinds. "nonzero" / "zero" are uniform: every active lane must see the same X (a warp-uniform loop such as
# ``while (*flag < k)``). "any" is the SIMT loop branch: taken when X is nonzero on any active lane, so a loop
# whose lanes leave at different trips repeats until the last one is done (the lowering keeps the others masked off).
BRANCHES = {"none": 0, "always": 1, "nonzero": 2, "zero": 3, "any": 4}
BRANCH_NAMES = {code: name for name, code in BRANCHES.items()}


def branch_taken(kind: str, values: list[int], where: str = "") -> bool:
    """Whether a block's branch is taken, given X on each active lane (in lane order): the one definition the
    interpreter and the circuit compiler share. A uniform branch that sees different values is an error."""
    if kind == "always":
        return True
    if kind == "none":
        return False
    if kind == "any":
        return any(v != 0 for v in values)
    if len(set(values)) > 1:
        raise MachineError(f"{where}divergent branch condition {values} (a uniform branch must see the same value on "
                           "every lane)")
    x = values[0] if values else 0
    return (x != 0) if kind == "nonzero" else (x == 0)


def alu(op: str, a: int, b: int) -> int:
    """X = op(A, B) on 32-bit words; the one place the machine's arithmetic is defined."""
    return _u(OPS[op][1](_u(a), _u(b)))


@dataclass(frozen=True)
class Operand:
    """R[reg] + imm; reg is 0..14, TID or NONE."""
    reg: int = NONE
    imm: int = 0

    def __post_init__(self):
        if not (0 <= self.reg < REGISTERS or self.reg in (TID, NONE)):
            raise MachineError(f"register r{self.reg} is outside r0..r{REGISTERS - 1}")
        object.__setattr__(self, "imm", _u(self.imm))

    def __str__(self) -> str:
        base = {TID: "tid", NONE: ""}.get(self.reg, f"r{self.reg}")
        if not base:
            return str(_s(self.imm))
        return base if self.imm == 0 else f"{base}{_s(self.imm):+d}"


@dataclass(frozen=True)
class Block:
    """One ROM row: the work of one record. See the module docstring for the stage order."""
    op: str = "a"
    a: Operand = field(default_factory=Operand)
    b: Operand = field(default_factory=Operand)
    dst: int = NONE
    load: bool = False
    store: int = NONE           # register holding the store address (NONE: no store)
    store_imm: int = 0          # added to the store address; with store == TID the address is tid + store_imm
    store_enable: bool = False  # a store with address register NONE is an absolute address store_imm
    atomic: bool = False
    pred: int = NONE
    pred_negate: bool = False
    branch: str = "none"
    target: int = EXIT

    def __post_init__(self):
        if self.op not in OPS:
            raise MachineError(f"unknown ALU op {self.op!r}")
        if not (0 <= self.dst < REGISTERS or self.dst == NONE):
            raise MachineError(f"destination r{self.dst} is outside r0..r{REGISTERS - 1}")
        if not (0 <= self.pred < REGISTERS or self.pred == NONE):
            raise MachineError(f"predicate r{self.pred} is outside r0..r{REGISTERS - 1}")
        if self.branch not in BRANCHES:
            raise MachineError(f"unknown branch kind {self.branch!r}")
        if not (0 <= self.target < ROM_BLOCKS or self.target == EXIT):
            raise MachineError(f"branch target {self.target} is outside the {ROM_BLOCKS}-block ROM")
        if self.atomic and not (self.load and self.store_enable):
            raise MachineError("an atomic block must load and store")
        object.__setattr__(self, "store_imm", _u(self.store_imm))

    @property
    def stores(self) -> bool:
        return self.store_enable

    def __str__(self) -> str:
        a = f"[{self.a}]" if self.load else str(self.a)
        text = f"{self.op} {a}, {self.b}"
        if self.dst != NONE:
            text = f"r{self.dst} = {text}"
        if self.pred != NONE:
            text = f"@{'!' if self.pred_negate else ''}r{self.pred} {text}"
        if self.store_enable:
            where = Operand(self.store, self.store_imm)
            text += f"; {'atom ' if self.atomic else ''}st [{where}]"
        if self.branch != "none":
            target = "exit" if self.target == EXIT else f"b{self.target}"
            text += f"; br.{self.branch} {target}"
        return text


# ROM row encoding: four control words, then the three 32-bit immediates as lo/hi halves. Every field starts on a
# nibble boundary (register fields and op take a byte, the flags a nibble), so the compiled circuit tests a field by
# matching whole nibbles of the word it read. Fields are (name, bits), low bits first.
CONTROL_FIELDS = (
    ("op", 8), ("dst", 8),                                                 # word 0
    ("a_reg", 8), ("b_reg", 8),                                            # word 1
    ("store", 8), ("pred", 8),                                             # word 2
    ("target", 8), ("load", 1), ("store_enable", 1), ("atomic", 1), ("pred_negate", 1), ("branch", 4),  # word 3
)
CONTROL_WORDS = 4
ROW_WORDS = CONTROL_WORDS + 6


def encode_block(block: Block) -> list[int]:
    """A block as the 16-bit words the host feeds after a ROM header (control words, then a, b, store immediates)."""
    values = {
        "op": OPS[block.op][0], "dst": block.dst, "a_reg": block.a.reg, "b_reg": block.b.reg,
        "store": block.store, "load": int(block.load), "store_enable": int(block.store_enable),
        "atomic": int(block.atomic), "pred": block.pred, "pred_negate": int(block.pred_negate),
        "branch": BRANCHES[block.branch], "target": block.target,
    }
    bits, shift = 0, 0
    for name, width in CONTROL_FIELDS:
        bits |= values[name] << shift
        shift += width
    words = [(bits >> (16 * i)) & 0xFFFF for i in range(CONTROL_WORDS)]
    for imm in (block.a.imm, block.b.imm, block.store_imm):
        words += [imm & 0xFFFF, imm >> 16]
    return words


def decode_block(words: list[int]) -> Block:
    """Inverse of encode_block."""
    if len(words) != ROW_WORDS:
        raise MachineError(f"a ROM row has {ROW_WORDS} words, got {len(words)}")
    bits = sum(words[i] << (16 * i) for i in range(CONTROL_WORDS))
    values, shift = {}, 0
    for name, width in CONTROL_FIELDS:
        values[name] = (bits >> shift) & ((1 << width) - 1)
        shift += width
    imms = [words[CONTROL_WORDS + 2 * i] | (words[CONTROL_WORDS + 1 + 2 * i] << 16) for i in range(3)]
    return Block(
        op=OP_NAMES[values["op"]], a=Operand(values["a_reg"], imms[0]), b=Operand(values["b_reg"], imms[1]),
        dst=values["dst"], load=bool(values["load"]), store=values["store"], store_imm=imms[2],
        store_enable=bool(values["store_enable"]), atomic=bool(values["atomic"]), pred=values["pred"],
        pred_negate=bool(values["pred_negate"]), branch=BRANCH_NAMES[values["branch"]], target=values["target"],
    )
