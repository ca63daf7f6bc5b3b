"""The reference interpreter: a backend that reads the token stream and predicts the tokens the model must write.

Every backend has the same two calls: ``feed(token)`` puts a token into the context and ``predict()`` returns the
token the machine writes next. The interpreter keeps the machine's state (memory, registers, ROM) and parses the
context with the grammar of qwengpu.tokens; it executes a block when its EXEC token is fed, so the values a record
shows depend only on what was fed before that EXEC (packets spliced in at a record boundary are seen by the next
record, as the boundary rule says).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import tokens as T
from .isa import EXIT, LANES, MEMORY_WORDS, NONE, REGISTERS, ROW_WORDS, SINK, TID, Block, MachineError, Operand, alu, branch_taken, decode_block

# Token id ranges of the families (qwengpu.tokens), as plain ints: the parser compares ids, it builds no objects.
_VAL_LO, _VAL_HI = T.VAL_BASE, T.VAL_BASE + T.VAL_COUNT
_MEM_LO, _MEM_HI = T.MEM_BASE, T.READ_BASE
_READ_LO, _READ_HI = T.READ_BASE, T.EXEC_BASE
_EXEC_LO, _EXEC_HI = T.EXEC_BASE, T.ROM_BASE
_ROM_LO, _ROM_HI = T.ROM_BASE, T.WARP
_VOCAB = T.VOCAB_SIZE


def _control(token: int) -> bool:
    """EXEC b or END: the tokens that start the next record (a packet may be fed before them)."""
    return _EXEC_LO <= token < _EXEC_HI or token == T.END


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
        self._expect: list[int] = []      # tokens the machine writes (a record's body, a read's answer) ...
        self._at = 0                      # ... from this index on
        self._parse = "idle"              # where the context stands in the grammar (see feed)
        self._row_written = 0             # "write": the row being written
        self._halves: list[int] = []      # "write", "rom", "warp", "read", "values": the VALs collected so far
        self._back = "idle"               # "write": the state to return to
        self._row = 0                     # "rom": the ROM row; "values": the block being shown
        self._lane = 0                    # "values": the lane whose value comes next
        self.last: Execution | None = None

    # -- backend interface -------------------------------------------------------------------------------------
    # The context parser is a small state machine. Its state is plain fields (no per-token objects): ``_parse``
    # names where the context stands ("idle", "boundary", "write", "rom", "warp", "values", "read") and the other
    # fields hold what that state has collected so far. A record's tokens are computed once, when its EXEC is fed
    # (``_execute``), and kept in ``_expect``; ``_at`` is the next one the model writes.
    def snapshot(self):
        """The machine's whole state, copied (ROM blocks and Execution records are never mutated, so they are
        shared)."""
        return (list(self.memory), [list(r) for r in self.registers], list(self.rom), self.warp_base, self.lanes,
                self._expect[self._at:], self._parse, self._row_written, list(self._halves), self._back, self._row,
                self._lane, self.last)

    def restore(self, state) -> None:
        (memory, registers, rom, self.warp_base, self.lanes, expect, self._parse, self._row_written, halves, self._back,
         self._row, self._lane, self.last) = state
        self.memory, self.registers, self.rom = list(memory), [list(r) for r in registers], list(rom)
        self._expect, self._at, self._halves = list(expect), 0, list(halves)

    def predict(self) -> int:
        if self._at >= len(self._expect):
            raise MachineError(f"the machine has nothing to write here (context state {self._parse})")
        return self._expect[self._at]

    def feed(self, token: int) -> None:
        if not _VAL_LO <= token < _VOCAB:
            raise MachineError(f"token {token} is outside the vocabulary of {_VOCAB}")
        # A packet or host write at a record boundary is not the model's output: the pending EXEC stays expected.
        if self._at < len(self._expect) and (not _control(self._expect[self._at]) or _control(token)):
            self._at += 1
        state = self._parse
        if state == "write":                         # MEM a seen; collecting lo, hi; then back to where it was
            self._halves.append(self._val(token))
            if len(self._halves) == 2:
                self.memory[self._row_written] = self._halves[0] | (self._halves[1] << 16)
                self._parse = self._back
            return
        if state == "rom":
            self._halves.append(self._val(token))
            if len(self._halves) == ROW_WORDS:
                self.rom[self._row] = decode_block(self._halves)
                self._parse = "idle"
            return
        if state == "warp":
            self._halves.append(self._val(token))
            if len(self._halves) == 2:
                self.warp_base, self.lanes = self._halves
                self.registers = [[0] * REGISTERS for _ in range(LANES)]
                self._parse = "boundary"
                self._expect, self._at = [T.EXEC(0)], 0
            return
        if state == "values":                        # a record's register values, lane by lane
            value = self._val(token)
            if not self._halves:
                self._halves.append(value)
                return
            dst = self.rom[self._row].dst
            if dst != NONE:
                self.registers[self._lane][dst] = self._halves[0] | (value << 16)
            self._halves = []
            self._lane += 1
            if self._lane == LANES:
                self._parse = "boundary"
            return
        if state == "read":
            self._val(token)
            self._halves.append(0)
            if len(self._halves) == 2:
                self._parse = "idle"
            return
        # Between records or outside a warp.
        self._halves = []
        if _MEM_LO <= token < _MEM_HI:
            self._back = "boundary" if state == "boundary" else "idle"
            self._row_written, self._parse = token - _MEM_LO, "write"
        elif _READ_LO <= token < _READ_HI:
            address = token - _READ_LO
            if address >= SINK:
                raise MachineError(f"read of word {address}: addresses are 0..{SINK - 1}")
            self._expect, self._at = T.word_tokens(self.memory[address]), 0
            self._parse = "read"
        elif _EXEC_LO <= token < _EXEC_HI:
            self._execute(token - _EXEC_LO)
        elif _ROM_LO <= token < _ROM_HI:
            self._row, self._parse = token - _ROM_LO, "rom"
        elif token == T.WARP:
            self._parse = "warp"
        elif token == T.END:
            self._parse = "idle"
            self._expect, self._at = [], 0
        else:
            raise MachineError(f"unexpected {T.name(token)} in context state {state}")

    # -- execution -----------------------------------------------------------------------------------------------
    @staticmethod
    def _val(token: int) -> int:
        if not _VAL_LO <= token < _VAL_HI:
            raise MachineError(f"expected a VAL token, got {T.name(token)}")
        return token - _VAL_LO

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
        if branch_taken(block.branch, branch_values, f"block {index}: "):
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
        self._expect, self._at = expect, 0
        self._parse, self._row, self._lane, self._halves = "values", index, 0, []
