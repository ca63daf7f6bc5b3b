"""Abstract values: what the lowering knows about a register at a program point.

A constant (launch arguments are bound as constants), an affine function of the thread index, DYNAMIC (the machine
computes it), or None (no definition reaches yet).

Example::

    >>> join(Const(1), Const(1)), join(Const(1), Const(2)), join(None, Affine(4, 0))
    (Const(value=1), 'dynamic', Affine(coef=4, offset=0))
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import isa
from ..isa import MachineError
from ..ptx import SPECIAL_REGISTER, Imm, Instruction, Label, Reg

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class Affine:
    """coef * tid + offset: a thread index expression, known without running the machine."""
    coef: int
    offset: int

    def bounds(self, threads: int) -> tuple[int, int]:
        """The least and the greatest value over threads 0 .. threads - 1."""
        ends = (self.offset, self.coef * (threads - 1) + self.offset)
        return min(ends), max(ends)


DYNAMIC = "dynamic"     # computed by the machine


def join(a, b):
    """The value a register may hold after two paths meet."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    return DYNAMIC


@dataclass(frozen=True)
class Context:
    """What the lowering knows of the launch: parameter values (pointers as byte addresses) and the thread count."""
    params: dict
    threads: int
    blocks: int = 1             # blocks in the grid (%nctaid.x)
    block: int = 0              # this block's index (%ctaid.x): blocks run one after another, each lowered alone
    symbols: dict = field(default_factory=dict)     # .shared array -> its byte address in the block's words
    #                                                 (.local: Affine, each thread's copy)
    shape: tuple[int, int, int] | None = None       # the block's (x, y, z) threads (CUDA's blockDim); None: 1-d
    grid: tuple[int, int, int] | None = None        # the grid's (x, y, z) blocks (gridDim); None: 1-d
    registers: dict = field(default_factory=dict)   # the kernel's declared register types ("%rd" -> "b64")

    def register_bits(self, name: str) -> int:
        """A register's declared width (by its name's prefix; 32 where the kernel does not say)."""
        typ = self.registers.get(name.rstrip("0123456789")) or self.registers.get(name, "b32")
        return 1 if typ == "pred" else int(typ[1:]) if typ[1:].isdigit() else 32

    @property
    def block_shape(self) -> tuple[int, int, int]:
        return self.shape or (self.threads, 1, 1)

    @property
    def grid_shape(self) -> tuple[int, int, int]:
        return self.grid or (self.blocks, 1, 1)


# The special registers the machine has. The thread and block indices, sizes and the lane are known at launch or
# computed from the thread index (``warp.WarpOps.special``): the warp of thread t is t // 4, its lane t % 4 (warps
# run one after another on one SM). Any other (%clock, %clock64, %globaltimer, %envreg<n>, %gridid, clusters) is
# refused by name (ptx.SPECIAL_REGISTER parses them all): a value the machine does not have must not read as 0.
SPECIAL = {"%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x", "%tid.y", "%tid.z", "%ntid.y", "%ntid.z", "%ctaid.y",
           "%ctaid.z", "%nctaid.y", "%nctaid.z", "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid",
           "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge", "%lanemask_gt"}
LANE_SPECIAL = {"%laneid", "%warpid", "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge",
                "%lanemask_gt"}       # lane-dependent: the machine computes them
# The thread's index in a block of more than one dimension: a function of the machine's (linear) tid that the
# machine computes like the lane's registers; in a 1-d block %tid.x is tid itself (Affine) and .y / .z are 0.
THREAD_INDEX = {"%tid.x", "%tid.y", "%tid.z"}


def width(inst: Instruction) -> int:
    """The width in bits of an instruction's (last) type modifier; 32 when it names none."""
    for mod in reversed(inst.modifiers):
        if mod[1:].isdigit() and mod[0] in "subf":
            return int(mod[1:])
    if "pred" in inst.modifiers:
        return 1
    return 32


def signed(inst: Instruction) -> bool:
    return any(m.startswith("s") and m[1:].isdigit() for m in inst.modifiers)


def is_predicate(inst: Instruction) -> bool:
    return "pred" in inst.modifiers


def unsupported(inst: Instruction, why: str = "") -> MachineError:
    return MachineError(f"unsupported PTX instruction at line {inst.line}{' (' + why + ')' if why else ''}: "
                        f"{inst.text}", line=inst.line)


def destination(inst: Instruction) -> str | None:
    """The register an instruction writes, or None (stores, fences, barriers, branches)."""
    if inst.base in ("st", "red", "membar", "fence", "bar", "barrier", "nanosleep", "prefetch", "prefetchu", "bra",
                     "ret", "exit") or not inst.operands:
        return None
    first = inst.operands[0]
    return first.name if isinstance(first, Reg) else None


def signed_value(value: int, bits: int) -> int:
    bits = 64 if bits > 32 else 32
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def make_reader(state: dict, context: Context):
    """read(operand) -> abstract value of a register or immediate in ``state``."""
    def read(operand):
        if isinstance(operand, Imm):
            return Const(operand.value & MASK64)
        if isinstance(operand, Reg):
            name = operand.name
            if name in SPECIAL:
                (nx, ny, nz), (gx, gy, gz) = context.block_shape, context.grid_shape
                if name in THREAD_INDEX:
                    if ny * nz == 1:            # a 1-d block: %tid.x is the machine's tid
                        return Affine(1, 0) if name == "%tid.x" else Const(0)
                    if name == "%tid.y" and ny == 1 or name == "%tid.z" and nz == 1:
                        return Const(0)
                    return DYNAMIC
                if name in LANE_SPECIAL:
                    return DYNAMIC
                if name == "%nwarpid":
                    return Const(-(-context.threads // isa.LANES))
                if name == "%nsmid":
                    return Const(1)
                b = context.block
                known = {"%ntid.x": nx, "%ntid.y": ny, "%ntid.z": nz, "%nctaid.x": gx, "%nctaid.y": gy,
                         "%nctaid.z": gz, "%ctaid.x": b % gx, "%ctaid.y": b // gx % gy, "%ctaid.z": b // (gx * gy)}
                return Const(known.get(name, 0))
            if SPECIAL_REGISTER.match(name):
                raise MachineError(f"special register {name} is not supported: the machine has no clock, timer, "
                                   "environment registers or clusters")
            return state.get(name, Const(0))   # registers start at 0 on the machine
        if isinstance(operand, Label) and operand.name in context.symbols:
            # a .shared array's address (``mov.u64 %rd1, s``), or a .local one's: each thread's own (Affine)
            address = context.symbols[operand.name]
            return address if isinstance(address, Affine) else Const(address)
        raise MachineError(f"unexpected operand {operand!r}")
    return read
