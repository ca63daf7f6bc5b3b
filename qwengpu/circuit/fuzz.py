"""Random machine programs: every supported op on random operands, registers, predicates, loads and stores.

An independent check of the circuit beside the CUDA kernels: the interpreter runs a random program and records the
stream, and the circuit must predict every token the model wrote in it. Used by the tests and by ``make verify``.
"""
from __future__ import annotations

import numpy as np

from ..device import Device, Kernel
from ..isa import DIVISIONS, EXIT, NONE, REGISTERS, SINK, TID, Block, Operand
from ..lowering import Program
from .ops import DIVISORS

DATA = 64           # the program's words live at 0..DATA-1; stores go to DATA..SINK-1


def random_program(rng: np.random.Generator, ops, blocks: int = 12, atomics: bool = True) -> Program:
    """Blocks that first fill registers with random words, then apply random ops, then store every register."""
    program = []
    edges = (0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 33, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)

    def word():
        return int(rng.choice(edges)) if rng.random() < 0.3 else int(rng.integers(0, 2**32))

    def source():
        kind = rng.random()
        if kind < 0.6:
            return Operand(int(rng.integers(0, 6)), word() if rng.random() < 0.3 else 0)
        if kind < 0.75:
            return Operand(TID, word() if rng.random() < 0.5 else 0)
        return Operand(NONE, word())

    for reg in range(6):                                      # r0..r5 = random words (some from memory)
        if rng.random() < 0.5:
            program.append(Block(op="a", a=Operand(NONE, int(rng.integers(0, DATA))), load=True, dst=reg))
        else:
            program.append(Block(op="b", b=Operand(NONE, word()), dst=reg))
    for _ in range(blocks):
        op = str(rng.choice(list(ops)))
        b = source()
        if op.startswith("sh") and rng.random() < 0.7:
            b = Operand(NONE, int(rng.integers(0, 40)))         # mostly in range, sometimes 32..39
        if op in DIVISIONS:                                    # the circuit divides by an immediate 1..DIVISORS
            b = Operand(NONE, int(rng.integers(1, DIVISORS + 1)))
        block = dict(op=op, a=source(), b=b, dst=int(rng.integers(0, 6)) if rng.random() < 0.9 else NONE)
        if rng.random() < 0.2:                                 # load from a data word, the lane's own or a fixed one
            block.update(a=Operand(TID if rng.random() < 0.5 else NONE, int(rng.integers(0, DATA - 8))), load=True)
        if rng.random() < 0.3:
            block.update(pred=int(rng.integers(0, 6)), pred_negate=bool(rng.random() < 0.5))
        if rng.random() < 0.3:
            block.update(store=TID, store_imm=int(rng.integers(DATA, SINK - 8)), store_enable=True)
        if atomics and rng.random() < 0.15:                    # lanes adding into one word, or each into its own
            where = Operand(NONE if rng.random() < 0.6 else TID, int(rng.integers(DATA, SINK - 8)))
            block.update(a=where, load=True, store=where.reg, store_imm=where.imm, store_enable=True, atomic=True)
        program.append(Block(**block))
    for reg in range(6):
        program.append(Block(op="a", a=Operand(reg), store=TID, store_imm=DATA + 8 * reg, store_enable=True))
    program[-1] = Block(op="a", a=Operand(5), store=TID, store_imm=DATA + 40, store_enable=True, branch="always",
                        target=EXIT)
    assert len(program) <= 32 and all(b.dst < REGISTERS or b.dst == NONE for b in program)
    return Program("fuzz", program, 6, False, [str(b) for b in program])


def random_stream(seed: int, ops, threads: int = 6, blocks: int = 12):
    """An interpreter device's stream: random data, one random program launched on ``threads`` threads, reads."""
    rng = np.random.default_rng(seed)
    program = random_program(rng, ops, blocks)
    return program_stream(program, threads, rng.integers(-2**31, 2**31, DATA))


def program_stream(program: Program, threads: int, data):
    """An interpreter device's stream: ``data`` at word 0, ``program`` launched on ``threads`` threads, reads."""
    dev = Device()
    dev.write(0, data)
    dev.launch(Kernel.from_program(program), threads=threads, args=[])
    dev.read(DATA, SINK - DATA)
    return dev.tokens
