"""Loads, stores and atomics as machine ops: the memory part of the emitter (mixed into ``emit.Emitter``).

The machine's memory is words: a 32-bit access is one op with the address in words; a narrow store is two atomic
read-modify-writes of its word (so lanes storing different bytes of one word all land) and a narrow load the word's
field, shifted and extended. An atomic whose old value cannot be recovered from the new one runs lane by lane, a
uniform loop of one trip per lane, so the old values are those of the lanes' order; so does a 16-bit
compare-and-swap, on its halfword's word.
"""
from __future__ import annotations

from ..isa import LANES, MachineError
from .mop import MOp
from .predicates import TRUE, Predicate
from .values import MASK32, signed, unsupported, width


class MemoryOps:
    """``ld`` / ``st`` / ``atom`` / ``red`` on global (and __shared__) memory. Uses the emitter's ``address``,
    ``src``, ``op``, ``emit`` and ``temp``."""

    def _check_global(self) -> None:
        inst = self.inst
        if not {"global", "const", "shared", "local", "volatile"} & set(inst.modifiers):
            raise MachineError(f"line {inst.line}: only global memory exists on this machine (with the __shared__ "
                               f"and .local arrays and __constant__ variables placed in its words): {inst.text}",
                               line=inst.line)
        if width(inst) not in (8, 16, 32):
            raise MachineError(f"line {inst.line}: memory words are 32 bits; a {width(inst)}-bit access is not "
                               f"supported: {inst.text}", line=inst.line)

    def _store(self, read) -> None:
        inst = self.inst
        where, byte = self.address(read, inst.operands[0])
        value = self.src(read, 0)
        bits = width(inst)
        if bits == 32:
            if byte:
                raise MachineError(f"line {inst.line}: a 32-bit store at byte {byte} of a word is not aligned: "
                                   f"{inst.text}", line=inst.line)
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
                                   f"{inst.text}", line=inst.line)
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
        if width(inst) == 16 and "cas" in inst.modifiers and dst is not None:
            self._halfword_compare_and_swap(read, mem, dst)
            return
        if width(inst) != 32:
            raise MachineError(f"line {inst.line}: atomics are on 32-bit words (of 16-bit ones, atom.cas.b16 runs): "
                               f"{inst.text}", line=inst.line)
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

    def _halfword_compare_and_swap(self, read, mem, dst: str) -> None:
        """``atom.cas.b16`` (CUDA's ``atomicCAS`` of an ``unsigned short``: what a 16-bit atomic such as a half's add
        is built from) on the halfword's word: on its turn a lane compares the halfword with ``compare`` and, where
        equal, stores the word with the new halfword in it (the other halfword as loaded, in the same turn)."""
        inst = self.inst
        where, byte = self.address(read, mem)
        if isinstance(byte, int) and byte % 2:
            raise MachineError(f"line {inst.line}: a 16-bit atomic at byte {byte} of a word is not aligned: "
                               f"{inst.text}", line=inst.line)
        shift = (byte, 0) if isinstance(byte, str) else (None, 8 * byte)
        self._atomic_in_lane_order(where, "b", self.src(read, 1), dst, compare=self.src(read, 0), field=shift)

    def _atomic_in_lane_order(self, where: tuple, op: str, value: tuple, dst: str | None,
                              compare: tuple | None = None, field: tuple | None = None):
        """An atomic whose old value is wanted and cannot be recovered from the new one (min, max, and, or, exch),
        or one the atomic block cannot apply (cas, inc, dec): the lanes take turns in lane order, a uniform loop of
        one trip per lane. On its turn a lane loads the word, then updates it: an atomic block of that one lane, or
        for cas a store of the new value where the word equalled ``compare``, for inc / dec a store of the wrapped
        count (for a 16-bit cas, ``field``: the halfword's bit position, the compare of the halfword and a store of
        the word with the new halfword in it). About 5 records a trip and 7-9 ROM blocks. The old value is the word
        one record before the update, so a peer's store landing at that record boundary is not in the returned value
        (an atomic block still applies its op to it; cas, inc and dec store what they computed from the old value)."""
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
        load = len(self.mops)
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
        elif field is None:
            equal = self.temp()
            self.emit(MOp("eq", (old, 0), compare, equal), mine)
            self.emit(MOp("a", value, store=where), mine & Predicate.atom(equal))
            self.invalidate(equal)
        else:                       # cas of the halfword at bit ``field``: the word stored with the new one in it
            half = self._halfword(old, field)
            equal = self.op("eq", (half, 0), (self.op("and", compare, (None, 0xFFFF)), 0))
            mask = (self.op("shl", (None, 0xFFFF), field), 0)
            kept = self.op("and", (old, 0), (self.op("xor", mask, (None, MASK32)), 0))
            new = self.op("shl", (self.op("and", value, (None, 0xFFFF)), 0), field)
            self.emit(MOp("or", (kept, 0), (new, 0), store=where), mine & Predicate.atom(equal))
            self.invalidate(equal)
        self.keep_whole(load)       # the lane's turn: no other warp writes the word between its load and its store
        loop = self.emit(MOp("add", (left, 0), (None, MASK32), left, branch="nonzero", target="lanes"), TRUE)
        loop.target_index = head
        self.invalidate(turn)
        if dst is not None and field is not None:
            self._halfword(old, field, dst)
        elif dst is not None:
            self.op("a", (old, 0), dst=dst)

    def _halfword(self, word: str, field: tuple, dst: str | None = None) -> str:
        """The halfword of ``word`` at bit ``field`` (an operand: known, or a register the machine computes)."""
        return self.op("and", (self.op("shr_u", (word, 0), field), 0), (None, 0xFFFF), dst=dst)
