"""The reference interpreter: a backend that reads the token stream and predicts the tokens the model must write.

Every backend has the same two calls: ``feed(token)`` puts a token into the context and ``predict()`` returns the
token the machine writes next. The interpreter keeps the machine's state (memory, registers, ROM) and parses the
context with the grammar of qwengpu.tokens; it executes a block when its EXEC token is fed, so the values a record
shows depend only on what was fed before that EXEC (packets spliced in at a record boundary are seen by the next
record, as the boundary rule says).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from . import tokens as T
from .isa import EXIT, LANES, MEMORY_WORDS, NONE, REGISTERS, ROW_WORDS, SINK, TID, Block, MachineError, Operand, alu, decode_block


@dataclass(frozen=True)
class Wait:
    """What a spin-loop record waited for: the flag's address, the value it read (None where the backend shows only
    tokens), the operand it compares with."""
    address: int
    value: int | None
    expected: int
    op: str


@dataclass
class Execution:
    """What a block did on one record (the interpreter's view; the tokens are the contract)."""
    block: int
    values: list[int]
    stores: list[tuple[int, int]]
    next: int | None
    loads: list[tuple[int, int, int]]   # (lane, address, value)
    wait: Wait | None


class Interpreter:
    """Reference backend: executes machine blocks record by record and predicts exactly the model's tokens."""

    name = "interpreter"

    def __init__(self):
        self.memory = [0] * MEMORY_WORDS
        self.registers = [[0] * REGISTERS for _ in range(LANES)]
        self.rom: list[Block | None] = [None] * 32
        self.warp_base = 0
        self.lanes = 0
        self._expect: list[int] = []      # tokens the machine will write next (a record's body, a read's answer)
        self._parse: tuple = ("idle",)    # where the context stands in the grammar
        self.last: Execution | None = None

    # -- backend interface -------------------------------------------------------------------------------------
    def snapshot(self):
        return copy.deepcopy((self.memory, self.registers, self.rom, self.warp_base, self.lanes, self._expect,
                              self._parse, self.last))

    def restore(self, state) -> None:
        (self.memory, self.registers, self.rom, self.warp_base, self.lanes, self._expect, self._parse,
         self.last) = copy.deepcopy(state)

    def predict(self) -> int:
        if not self._expect:
            raise MachineError(f"the machine has nothing to write here (context state {self._parse[0]})")
        return self._expect[0]

    def feed(self, token: int) -> None:
        family, arg = T.kind(token), T.argument(token)
        # A packet or host write at a record boundary is not the model's output: the pending EXEC stays expected.
        if self._expect and (T.kind(self._expect[0]) not in ("EXEC", "END") or family in ("EXEC", "END")):
            self._expect.pop(0)
        state = self._parse
        if state[0] == "write":                      # MEM a seen; collecting lo, hi; then back to where it was
            _, address, halves, back = state
            halves = halves + [self._val(token, family)]
            if len(halves) == 2:
                self.memory[address] = halves[0] | (halves[1] << 16)
                self._parse = back
            else:
                self._parse = ("write", address, halves, back)
            return
        if state[0] == "rom":
            _, row, words = state
            words = words + [self._val(token, family)]
            if len(words) == ROW_WORDS:
                self.rom[row] = decode_block(words)
                self._parse = ("idle",)
            else:
                self._parse = ("rom", row, words)
            return
        if state[0] == "warp":
            _, halves = state
            halves = halves + [self._val(token, family)]
            if len(halves) == 2:
                self.warp_base, self.lanes = halves
                self.registers = [[0] * REGISTERS for _ in range(LANES)]
                self._parse = ("boundary",)
                self._expect = [T.EXEC(0)]
            else:
                self._parse = ("warp", halves)
            return
        if state[0] == "values":                     # a record's register values, lane by lane
            _, block, lane, lo = state
            value = self._val(token, family)
            if lo is None:
                self._parse = ("values", block, lane, value)
                return
            dst = self.rom[block].dst
            if dst != NONE:
                self.registers[lane][dst] = lo | (value << 16)
            if lane + 1 < LANES:
                self._parse = ("values", block, lane + 1, None)
            else:
                self._parse = ("boundary",)
            return
        if state[0] == "read":
            self._val(token, family)
            self._parse = ("read", state[1] - 1) if state[1] > 1 else ("idle",)
            return
        # Between records or outside a warp.
        if family == "MEM":
            back = ("boundary",) if state[0] == "boundary" else ("idle",)
            self._parse = ("write", arg, [], back)
        elif family == "READ":
            if arg >= SINK:
                raise MachineError(f"read of word {arg}: addresses are 0..{SINK - 1}")
            self._expect = T.word_tokens(self.memory[arg])
            self._parse = ("read", 2)
        elif family == "ROM":
            self._parse = ("rom", arg, [])
        elif family == "WARP":
            self._parse = ("warp", [])
        elif family == "EXEC":
            self._execute(arg)
        elif family == "END":
            self._parse = ("idle",)
            self._expect = []
        else:
            raise MachineError(f"unexpected {T.name(token)} in context state {state[0]}")

    # -- execution -----------------------------------------------------------------------------------------------
    @staticmethod
    def _val(token: int, family: str) -> int:
        if family != "VAL":
            raise MachineError(f"expected a VAL token, got {T.name(token)}")
        return T.argument(token)

    def _operand(self, lane: int, operand) -> int:
        if operand.reg == NONE:
            base = 0
        elif operand.reg == TID:
            base = self.warp_base + lane
        else:
            base = self.registers[lane][operand.reg]
        return (base + operand.imm) & 0xFFFFFFFF

    def _address(self, block_index: int, lane: int, address: int, what: str) -> int:
        if not 0 <= address < SINK:
            raise MachineError(f"block {block_index} lane {lane}: {what} address {address} is outside 0..{SINK - 1}")
        return address

    def execute(self, index: int) -> Execution:
        """Run ROM block ``index`` on the current warp against the current memory; returns what it did."""
        block = self.rom[index]
        if block is None:
            raise MachineError(f"EXEC {index}: ROM row {index} was never loaded")
        values, stores, loads = [], [], []
        pending: dict[int, int] = {}            # this record's stores, seen by later lanes of an atomic block
        branch_values = []
        for lane in range(LANES):
            active = lane < self.lanes
            if active and block.pred != NONE:
                active = (self.registers[lane][block.pred] != 0) != block.pred_negate
            old = self.registers[lane][block.dst] if block.dst != NONE else 0
            if not active:
                values.append(old)
                continue
            a = self._operand(lane, block.a)
            b = self._operand(lane, block.b)
            if block.load:
                address = self._address(index, lane, a, "load")
                a = pending.get(address, self.memory[address]) if block.atomic else self.memory[address]
                loads.append((lane, address, a))
            x = alu(block.op, a, b)
            values.append(x)
            branch_values.append(x)
            if block.store_enable:
                base = 0 if block.store == NONE else self._operand(lane, Operand(block.store, 0))
                address = self._address(index, lane, (base + block.store_imm) & 0xFFFFFFFF, "store")
                stores.append((address, x))
                if block.atomic:
                    pending[address] = x
        next_block = index + 1
        if block.branch != "none":
            if block.branch == "always":
                taken = True
            else:
                if len(set(branch_values)) > 1:
                    raise MachineError(f"block {index}: divergent branch condition {branch_values} (a uniform branch "
                                       "must see the same value on every lane)")
                x = branch_values[0] if branch_values else 0
                taken = (x != 0) if block.branch == "nonzero" else (x == 0)
            if taken:
                next_block = block.target
        if next_block == EXIT or next_block >= len(self.rom) or self.rom[next_block] is None:
            next_block = None
        wait = None
        if block.load and block.branch in ("nonzero", "zero") and block.target == index and loads:
            lane, address, value = loads[0]
            wait = Wait(address, value, self._operand(lane, block.b), block.op)
        return Execution(index, values, stores, next_block, loads, wait)

    def _execute(self, index: int) -> None:
        run = self.execute(index)
        self.last = run
        expect = []
        for value in run.values:
            expect += T.word_tokens(value)
        for address, value in run.stores:
            expect += T.write_record(address, value)
        expect.append(T.END if run.next is None else T.EXEC(run.next))
        self._expect = expect
        self._parse = ("values", index, 0, None)
