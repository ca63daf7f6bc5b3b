"""64-bit integers as pairs of words: ``long long``, ``size_t`` and ``uint64_t`` arrays in memory (``x[i] += 1``,
``s += x[i]``, ``x[i] < y[i]``, ``x[i] / y[i]``), 64-bit atomics (``atomicAdd``, ``atomicCAS``, ``atomicMax``, ...),
``__popcll`` and its kin, and any 64-bit value whose high word the lowering cannot follow in one word (a ``long``
loop's 64-bit trip count).

The machine's registers hold a 64-bit value's low word; the lowering knows the high word where it follows from how
the value was made (a word extended, a product of words, a loop counter: ``arithmetic``'s ``shr`` by 32). A value
loaded from memory has a high word of its own, so this stage keeps it, and every 64-bit value computed from it, in
two 32-bit registers: the *pair* of a register, its low and its high word. Memory holds each value as two words, the
low word first (a GPU's little-endian layout)::

    ld.u64   d, [a]           ld.u32 d.lo, [a];  ld.u32 d.hi, [a+4]
    add.u64  d, a, b          d.lo = a.lo + b.lo;  d.hi = a.hi + b.hi + (d.lo < a.lo)
    setp.lt.s64 p, a, b       p = a.hi < b.hi (signed) or a.hi == b.hi and a.lo < b.lo (unsigned)
    st.u64   [a], v           st.u32 [a], v.lo;  st.u32 [a+4], v.hi
    atom.add.u64 d, [a], v    d.lo = atom.add.u32 [a], v.lo;  d.hi = atom.add.u32 [a+4], v.hi + (d.lo + v.lo < d.lo)
    popc.b64 d, a             d = popc(a.lo) + popc(a.hi)

- The pairs: every 64-bit register a 64-bit load writes, the ``seeds`` (registers the lowering refused for their
  high word: ``lower`` lowers the kernel again with them), and every one an instruction of PAIRED writes from a pair
  (add, sub, mul.lo and .hi, mad.lo, mad.wide with a 64-bit addend, div, rem, neg, abs, and, or, xor, not, shl,
  shr, selp, min, max, brev, mov, bfi at a constant place),
  and every one an atomic whose old value is read writes; each definition of a pair register writes both words
  (``s = 0`` too: a register of ``cvt`` or a parameter takes its high word as the lowering computes it, ``v >>
  32``). Not a pair: a register loaded into and used as an address (its words joined, below: an offset added to a
  pointer, ``bytes[x[i]]``, runs; a pointer loaded is refused).
- ``(float)`` of a pair, in any rounding (``to_float``); ``popc``, ``clz`` and ``bfind`` of a pair from its words'
  counts (``count_bits``); ``match.any`` / ``.all`` of a 64-bit value as the matches of its words (``match``). A
  pair read by anything else (an address's offset, a 32-bit instruction) is joined into a 64-bit register as NVRTC
  joins two words, ``(u64)lo | (u64)hi << 32``, whose ``>> 32`` the lowering reads as hi.
- A store of a value that is no pair writes ``v >> 32`` as its high word: refused, naming the store, where the
  machine does not hold it. A 64-bit value computed from a 64-bit kernel parameter is not stored: PTX does not tell
  ``int *x`` from ``size_t n``, and the machine keeps no pointers in memory.
- Atomics (``atomic``): add and xor, and and / or / exch whose old value is not read, are two atomics of words
  (an add's high word plus the carry of its low add, from the old low word each lane got: in any order of such
  adds the two words end as the 64-bit sum); cas, min, max, and and / or / exch whose old value is read, take
  turns in lane order (``_in_lane_order``; a lane's turn is one span no overlay's end falls in). A reader between
  the two words' updates sees one updated and not yet the other.

Doubles come here as 64-bit integers (qwengpu.lowering.doubles writes their arithmetic so, and gives their registers
as seeds).
"""
from __future__ import annotations

import dataclasses

from ..isa import LANES, MachineError
from ..ptx import Imm, Instruction, Kernel, Label, Mem, Reg
from .pointers import address_registers
from .semantics import bits_of, declared_bits, types
from .transfer import registers_read, sources
from .values import destination, signed, width

INTEGER = ("u64", "s64", "b64")
WORD, DOUBLE, PRED = "%__pair_w", "%__pair_d", "%__pair_p"     # the stage's registers: b32, b64, pred
# Instructions whose 64-bit result, from a pair, is a pair (built word by word below).
PAIRED = {"mov", "add", "sub", "mul", "mad", "div", "rem", "neg", "abs", "and", "or", "xor", "not", "shl", "shr",
          "selp", "min", "max", "brev", "bfi"}
COUNTS = {"popc", "clz", "bfind"}       # a 64-bit source, a 32-bit count: from the counts of the two words
ROUNDINGS = ("rn", "rz", "rm", "rp")
MIRRORED = {"rm": "rp", "rp": "rm"}     # a magnitude's rounding where the value is negative
ATOMICS = {"add", "and", "or", "xor", "exch", "cas", "min", "max", "inc", "dec"}
COMPARES = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
            "lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


def rewrite(kernel: Kernel, seeds: frozenset = frozenset()) -> Kernel:
    """The kernel with its 64-bit memory accesses as word accesses and the values loaded by them kept as pairs, and
    ``seeds`` too: 64-bit registers whose high words the lowering refused (``lower``). Itself where it has neither."""
    if not seeds and not any(_wide_access(item) for item in kernel.body):
        return kernel
    return _Pairs(kernel, seeds).run()


def _wide_access(item) -> bool:
    """A 64-bit integer load, store or atomic of memory (not a parameter's)."""
    return (isinstance(item, Instruction) and item.base in ("ld", "st", "atom", "red") and width(item) == 64
            and any(m in INTEGER for m in item.modifiers) and "param" not in item.modifiers)


class _Pairs:
    def __init__(self, kernel: Kernel, seeds: frozenset = frozenset()):
        self.kernel = kernel
        self.seeds = seeds
        self.insts = [i for i in kernel.body if isinstance(i, Instruction)]
        self.addresses = address_registers(kernel.body)
        self.read = {name for inst in self.insts for name in registers_read(inst)}
        self.from_parameters = self._from_parameters()
        self._check_no_loaded_pointer()
        self.pairs = self._find()
        self.count = 0
        self.words = {name: (self.temp(WORD), self.temp(WORD)) for name in sorted(self.pairs)}
        self.item: Instruction | None = None
        self.atomics = 0        # the lanes' turns at 64-bit atomics written so far (Instruction.whole)
        self.out: list = []

    # -- which registers are pairs ------------------------------------------------------------------------------
    def wide(self, name: str) -> bool:
        return declared_bits(self.kernel.registers, name) == 64

    def _find(self) -> set[str]:
        """The 64-bit registers loaded from memory, and those computed from them by the instructions of PAIRED."""
        pairs = {inst.operands[0].name for inst in self.insts if _wide_access(inst) and (
                 inst.base == "ld" or inst.base == "atom" and inst.operands[0].name in self.read)
                 and inst.operands[0].name not in self.addresses} | (self.seeds - self.addresses)
        return self._forward(pairs, lambda inst, dst: dst not in self.addresses and inst.base in PAIRED
                             and self.wide(dst) and ("wide" not in inst.modifiers or inst.base == "mad"))

    def _forward(self, found: set, admits) -> set:
        """``found`` and every register an instruction ``admits(inst, dst)`` writes from one of them, to a fixed
        point (flow-insensitive: any instruction of the body)."""
        changed = True
        while changed:
            changed = False
            for inst in self.insts:
                dst = destination(inst)
                if dst is not None and dst not in found and registers_read(inst) & found and admits(inst, dst):
                    found.add(dst)
                    changed = True
        return found

    def _check_no_loaded_pointer(self) -> None:
        """A memory access whose address comes from a 64-bit value loaded and not from a pointer parameter or an
        array (``int *q = p[0]; q[i] = 7``) is refused: the machine keeps no pointers in memory. A loaded value
        added to a pointer (``bytes[x[i]]``) is an offset, which runs."""
        based = {i.operands[0].name for i in self.insts if (i.base == "ld" and "param" in i.modifiers) or (
            i.base in ("mov", "cvta") and isinstance(i.operands[1], Label))}
        loaded = {i.operands[0].name for i in self.insts if _wide_access(i) and i.base == "ld"}
        self._forward(based, lambda inst, dst: self.wide(dst) and inst.base in ("add", "sub", "mov", "cvta", "selp"))
        self._forward(loaded, lambda inst, dst: self.wide(dst) and inst.base != "ld")
        for inst in self.insts:
            if inst.base in ("ld", "st", "atom", "red") and "param" not in inst.modifiers:
                mem = next(o for o in inst.operands if isinstance(o, Mem))
                name = getattr(mem.base, "name", None)
                if name in loaded and name not in based:
                    raise MachineError(f"line {inst.line}: the address {name} comes from a 64-bit value loaded from "
                                       f"memory, not from a pointer argument or an array: a pointer kept in memory, "
                                       f"which the machine does not keep: {inst.text}", line=inst.line)

    def _from_parameters(self) -> set[str]:
        """The 64-bit registers whose value may be computed from a 64-bit kernel parameter (through any instruction
        with a 64-bit result but a load or an atomic: a loaded value is not computed from its address)."""
        doubles = {p.name for p in self.kernel.params if p.type == "f64"}     # a double's bits: no pointer
        found = {i.operands[0].name for i in self.insts if i.base == "ld" and "param" in i.modifiers
                 and width(i) == 64 and isinstance(i.operands[0], Reg) and i.operands[1].base not in doubles}
        return self._forward(found, lambda inst, dst: width(inst) == 64 and inst.base not in ("ld", "atom"))

    # -- emission -----------------------------------------------------------------------------------------------
    def temp(self, prefix: str) -> Reg:
        self.count += 1
        return Reg(f"{prefix}{self.count}")

    def emit(self, opcode: str, *operands, why: str = "", guard: Reg | None = None, pair: Reg | None = None) -> None:
        """An instruction under the current one's guard (or ``guard``), with its line and text (``why`` first);
        ``pair``: its second destination (``d|p``)."""
        item = self.item
        self.out.append(Instruction(opcode, operands, guard or item.guard, item.guard_negated and guard is None,
                                    item.line, item.text if not why else f"{why} ({item.text})", pair=pair,
                                    whole=item.whole))

    def op(self, opcode: str, *operands, prefix: str = WORD) -> Reg:
        """A fresh register written by one instruction."""
        result = self.temp(prefix)
        self.emit(opcode, result, *operands)
        return result

    def halves(self, operand, why: str = "the high word of a 64-bit value") -> tuple:
        """An operand's low and high words: a pair's registers, an immediate's halves, or of another 64-bit
        register its word and ``>> 32`` as the lowering computes it (refused, with ``why``, where it does not)."""
        if isinstance(operand, Imm):
            bits = operand.value & ((1 << 64) - 1)
            return Imm(bits & 0xFFFFFFFF), Imm(bits >> 32)
        if operand.name in self.words:
            return self.words[operand.name]
        low = self.op("cvt.u32.u64", operand)
        shifted = self.temp(DOUBLE)
        self.emit("shr.u64", shifted, operand, Imm(32), why=why)
        return low, self.op("cvt.u32.u64", shifted)

    def joined(self, operand):
        """A pair as one 64-bit register, ``(u64)lo | (u64)hi << 32`` (other operands as they are)."""
        if not isinstance(operand, Reg) or operand.name not in self.words:
            return operand
        lo, hi = self.words[operand.name]
        low, high = self.op("cvt.u64.u32", lo, prefix=DOUBLE), self.op("cvt.u64.u32", hi, prefix=DOUBLE)
        shifted = self.op("shl.b64", high, Imm(32), prefix=DOUBLE)
        return self.op("or.b64", low, shifted, prefix=DOUBLE)

    def run(self) -> Kernel:
        for item in self.kernel.body:
            if not isinstance(item, Instruction):
                self.out.append(item)
                continue
            self.item = item
            dst = destination(item)
            if dst in self.pairs:
                self.define(item, self.words[dst])
            elif _wide_access(item) and item.base == "ld":
                # a value loaded into an address's register (an offset: bytes[x[i]]): its words joined, whose
                # low word the address arithmetic reads (a pointer loaded is refused there: it holds a plain value)
                lo = self.op(f"ld.{self.space(item)}.u32", item.operands[1])
                hi = self.op(f"ld.{self.space(item)}.u32", _next_word(item.operands[1]))
                self.words[item.operands[0].name] = (lo, hi)
                self.emit("mov.b64", item.operands[0], self.joined(item.operands[0]))
                del self.words[item.operands[0].name]
            elif _wide_access(item):
                self.access(item)
            elif item.base in COUNTS and width(item) == 64 and getattr(sources(item)[0], "name", None) in self.words:
                self.count_bits(item)
            elif item.base == "match" and width(item) == 64:
                self.match(item)
            elif item.base == "setp" and any(getattr(o, "name", None) in self.words for o in sources(item)[:2]):
                self.compare(item)
            elif item.base == "cvt" and item.modifiers[1:] in (("f32", "u64"), ("f32", "s64")) \
                    and item.modifiers[0] in ROUNDINGS and getattr(item.operands[1], "name", None) in self.words:
                self.to_float(item)
            elif item.base == "cvt" and len(types(item)) == 2 and types(item)[0][0] in "usb" \
                    and bits_of(types(item)[0]) <= 32 and getattr(item.operands[1], "name", None) in self.words:
                lo = self.words[item.operands[1].name][0]     # a truncation: the low word, narrowed as PTX says
                self.emit(f"cvt.{types(item)[0]}.u32" if bits_of(types(item)[0]) < 32 else "mov.b32",
                          item.operands[0], lo)
            elif registers_read(item) & set(self.words):
                operands = tuple(o if isinstance(o, Mem) else self.joined(o) for o in item.operands)
                first = 1 if dst is not None else 0
                self.out.append(dataclasses.replace(item, operands=item.operands[:first] + operands[first:]))
            else:
                self.out.append(item)
        registers = {**self.kernel.registers, WORD: "b32", DOUBLE: "b64", PRED: "pred"}
        return dataclasses.replace(self.kernel, body=self.out, registers=registers)

    def define(self, item: Instruction, words: tuple) -> None:
        """Both words of a pair register, from one instruction that writes it."""
        base, ops = item.base, sources(item)
        if base == "ld" and _wide_access(item):        # (a word loaded into the register: below, as computed)
            lo, hi = self.op(f"ld.{self.space(item)}.u32", item.operands[1]), \
                self.op(f"ld.{self.space(item)}.u32", _next_word(item.operands[1]))
        elif base == "atom":
            lo, hi = self.atomic(item, wanted=True)
        elif base == "cvt" and len(types(item)) == 2 and types(item)[1][0] in "usb" and bits_of(types(item)[1]) <= 32:
            source = ops[0]
            if bits_of(types(item)[1]) < 32:
                source = self.op(f"cvt.{types(item)[1][0]}32.{types(item)[1]}", source)
            lo = self.op("mov.b32", source)
            hi = self.op("shr.s32", source, Imm(31)) if types(item)[1].startswith("s") else Imm(0)
        elif base == "mad" and "wide" in item.modifiers:
            # words' product plus a 64-bit addend: a multi-word product's running carry (CUDA's sinf and cosf
            # reduce a huge argument so, ``c = a * b[k] + (c >> 32)``), whose high word the lowering cannot follow
            kind = "s32" if signed(item) else "u32"
            product = (self.op(f"mul.lo.{kind}", *ops[:2]), self.op(f"mul.hi.{kind}", *ops[:2]))
            lo, hi = self._add(item, [product, self.halves(ops[2])], ops)
        elif base not in PAIRED or "wide" in item.modifiers:
            # computed by the lowering as a 64-bit value (a parameter, a constant, a product of words): its words
            result = self.temp(DOUBLE)
            self.out.append(dataclasses.replace(item, operands=(result, *(self.joined(o) for o in item.operands[1:]))))
            lo, hi = self.halves(result, why=f"the high word of {item.operands[0].name}, a pair of words")
        else:       # a shift's amount, a select's predicate: not 64-bit values
            single = base in ("mov", "not", "neg", "abs", "shl", "shr", "brev")
            values = ops[:1] if single else ops[:3 if base == "mad" else 2]
            lo, hi = getattr(self, f"_{base}")(item, [self.halves(o) for o in values], ops)
        self.emit("mov.b32", words[0], lo)
        self.emit("mov.b32", words[1], hi)

    # Each _<base>(item, [(a.lo, a.hi), (b.lo, b.hi)], operands) returns the result's (lo, hi).
    def _mov(self, item, halves, ops):
        return halves[0]

    def _add(self, item, halves, ops):
        (alo, ahi), (blo, bhi) = halves
        lo, carry = self._add_carry(alo, blo)
        return lo, self.op("add.u32", self.op("add.u32", ahi, bhi), carry)

    def _sub(self, item, halves, ops):
        (alo, ahi), (blo, bhi) = halves
        borrow = self.op("setp.lt.u32", alo, blo, prefix=PRED)
        high = self.op("sub.u32", self.op("sub.u32", ahi, bhi), self.op("selp.u32", Imm(1), Imm(0), borrow))
        return self.op("sub.u32", alo, blo), high

    def _neg(self, item, halves, ops):
        return self._sub(item, [(Imm(0), Imm(0)), halves[0]], ops)

    def _mul(self, item, halves, ops):
        if "hi" in item.modifiers:
            return self._mul_high(item, halves)
        (alo, ahi), (blo, bhi) = halves
        cross = self.op("add.u32", self.op("mul.lo.u32", alo, bhi), self.op("mul.lo.u32", ahi, blo))
        return self.op("mul.lo.u32", alo, blo), self.op("add.u32", self.op("mul.hi.u32", alo, blo), cross)

    def _mad(self, item, halves, ops):
        """mad.lo: the low product, then the add."""
        if "lo" not in item.modifiers:
            raise MachineError(f"line {item.line}: mad of 64-bit values other than .lo is not supported: {item.text}",
                               line=item.line)
        return self._add(item, [self._mul(item, halves[:2], ops), halves[2]], ops)

    def _mul_high(self, item, halves):
        """``mul.hi`` of two 64-bit values (NVRTC's division of a 64-bit value by a constant): the top 64 bits of
        the 128-bit product, from the four products of words. The middle column (the low product's high word and
        the cross products' low words) carries into the top; signed, the unsigned top less b where a < 0 and a
        where b < 0."""
        (a0, a1), (b0, b1) = halves

        def product(x, y) -> tuple:
            return self.op("mul.lo.u32", x, y), self.op("mul.hi.u32", x, y)
        (_, hi00), (lo01, hi01), (lo10, hi10), (lo11, hi11) = (product(a0, b0), product(a0, b1), product(a1, b0),
                                                               product(a1, b1))
        middle, carries = hi00, []
        for part in (lo01, lo10):
            middle, carry = self._add_carry(middle, part)
            carries.append(carry)
        low, high = lo11, [hi11]
        for part in (hi01, hi10, *carries):
            low, carry = self._add_carry(low, part)
            high.append(carry)
        top = high[0]
        for carry in high[1:]:
            top = self.op("add.u32", top, carry)
        if not signed(item):
            return low, top
        result = (low, top)
        for sign, other in ((a1, (b0, b1)), (b1, (a0, a1))):
            negative = self.op("setp.lt.s32", sign, Imm(0), prefix=PRED)
            less = tuple(self.op("selp.b32", word, Imm(0), negative) for word in other)
            result = self._sub(item, [result, less], ())
        return result

    def _div(self, item, halves, ops):
        return self._divide(item, halves, "div")

    def _rem(self, item, halves, ops):
        return self._divide(item, halves, "rem")

    def _divide(self, item, halves, kind: str) -> tuple:
        """div / rem of 64-bit values: a long division of the magnitudes (``_long_division``), then C's sign (the
        quotient's: the operands' signs differ; the remainder's: the dividend's). x / 0 is all ones whatever x's
        sign and x % 0 is x, as the machine's 32-bit division gives them."""
        n, d = halves
        if not signed(item):
            quotient, remainder = self._long_division(n, d)
            return quotient if kind == "div" else remainder
        negative_n = self.op("setp.lt.s32", n[1], Imm(0), prefix=PRED)
        negative_d = self.op("setp.lt.s32", d[1], Imm(0), prefix=PRED)
        magnitude = [self._pick(negative, self._sub(item, [(Imm(0), Imm(0)), value], ()), value)
                     for negative, value in ((negative_n, n), (negative_d, d))]
        quotient, remainder = self._long_division(*magnitude)
        if kind == "rem":
            flip, result = negative_n, remainder
        else:
            zero = self.op("setp.eq.u32", self.op("or.b32", d[0], d[1]), Imm(0), prefix=PRED)
            differ = self.op("xor.pred", negative_n, negative_d, prefix=PRED)
            flip = self.op("and.pred", differ, self.op("not.pred", zero, prefix=PRED), prefix=PRED)
            result = quotient
        return self._pick(flip, self._sub(item, [(Imm(0), Imm(0)), result], ()), result)

    def _pick(self, predicate, chosen: tuple, other: tuple) -> tuple:
        return tuple(self.op("selp.b32", a, b, predicate) for a, b in zip(chosen, other))

    def _long_division(self, n: tuple, d: tuple) -> tuple:
        """Unsigned restoring division of pairs, a quotient bit a trip of a 64-trip loop, as the emitter's of words:
        the remainder takes the dividend's top bit, the divisor is subtracted where it fits (or where the shift
        carried out of the remainder: it is then past any divisor), and the bit enters the quotient from below.
        The loop runs unguarded, whatever the instruction's guard (every lane, the same trips); its result is
        written under the guard. Division by 0 gives all ones and the dividend."""
        item = self.item
        self.item = dataclasses.replace(item, guard=None, guard_negated=False)
        a, r, q = [self.temp(WORD), self.temp(WORD)], [self.temp(WORD), self.temp(WORD)], [self.temp(WORD),
                                                                                            self.temp(WORD)]
        count = self.temp(WORD)
        for register, value in ((a[0], n[0]), (a[1], n[1]), (r[0], Imm(0)), (r[1], Imm(0)), (q[0], Imm(0)),
                                (q[1], Imm(0)), (count, Imm(64))):
            self.emit("mov.b32", register, value)
        head = Label(f"$__pair_division{self.temp(WORD).name[len(WORD):]}")
        self.out.append(head)

        def shift_in(pair: list, bit) -> None:
            """pair = pair << 1 | bit (bit a word of 0 or 1)."""
            self.emit("shl.b32", pair[1], pair[1], Imm(1))
            self.emit("or.b32", pair[1], pair[1], self.op("shr.u32", pair[0], Imm(31)))
            self.emit("shl.b32", pair[0], pair[0], Imm(1))
            self.emit("or.b32", pair[0], pair[0], bit)
        out = self.op("shr.u32", r[1], Imm(31))
        shift_in(r, self.op("shr.u32", a[1], Imm(31)))
        shift_in(a, Imm(0))
        below = self._less(tuple(r), d, "u", strict=True)
        carried = self.op("setp.ne.u32", out, Imm(0), prefix=PRED)
        fits = self.op("or.pred", self.op("not.pred", below, prefix=PRED), carried, prefix=PRED)
        less = self._sub(item, [tuple(r), d], ())
        for word, value in zip(r, less):
            self.emit("selp.b32", word, value, word, fits)
        shift_in(q, self.op("selp.u32", Imm(1), Imm(0), fits))
        self.emit("sub.u32", count, count, Imm(1))
        self.emit("bra", head, guard=self.op("setp.ne.u32", count, Imm(0), prefix=PRED))
        self.item = item
        return tuple(q), tuple(r)

    def _add_carry(self, a, b) -> tuple:
        """a + b of words, and its carry (0 or 1) as a word."""
        total = self.op("add.u32", a, b)
        return total, self.op("selp.u32", Imm(1), Imm(0), self.op("setp.lt.u32", total, a, prefix=PRED))

    def _logic(self, item, halves, ops):
        (alo, ahi), (blo, bhi) = halves
        return self.op(f"{item.base}.b32", alo, blo), self.op(f"{item.base}.b32", ahi, bhi)

    _and = _or = _xor = _logic

    def _abs(self, item, halves, ops):
        negative = self.op("setp.lt.s32", halves[0][1], Imm(0), prefix=PRED)
        lo, hi = self._sub(item, [(Imm(0), Imm(0)), halves[0]], ops)
        return (self.op("selp.b32", lo, halves[0][0], negative), self.op("selp.b32", hi, halves[0][1], negative))

    def _not(self, item, halves, ops):
        return self.op("not.b32", halves[0][0]), self.op("not.b32", halves[0][1])

    def _brev(self, item, halves, ops):
        """``__brevll``: each word reversed, and the words swapped."""
        lo, hi = halves[0]
        return self.op("brev.b32", hi), self.op("brev.b32", lo)

    # Shifts by an amount the kernel computes: PTX clamps an amount past the width to it, and so do the machine's
    # 32-bit shifts (``shl`` / ``shr.u32`` by 32 or more give 0, ``shr.s32`` the sign), so each word is the one
    # formula for any amount, the two cases (below 32, 32 and more) chosen by a select.
    def _shl(self, item, halves, ops):
        lo, hi = halves[0]
        if not isinstance(ops[1], Imm):
            n = ops[1]
            carried = self.op("shr.u32", lo, self.op("sub.u32", Imm(32), n))
            below = self.op("or.b32", self.op("shl.b32", hi, n), carried)
            above = self.op("shl.b32", lo, self.op("sub.u32", n, Imm(32)))
            return self.op("shl.b32", lo, n), self.op("selp.b32", above, below, self.at_least_32(n))
        n = ops[1].value & 0xFFFFFFFF
        if n >= 64:
            return Imm(0), Imm(0)
        if n == 0:
            return lo, hi
        if n >= 32:
            return Imm(0), self.op("shl.b32", lo, Imm(n - 32))
        top = self.op("or.b32", self.op("shl.b32", hi, Imm(n)), self.op("shr.u32", lo, Imm(32 - n)))
        return self.op("shl.b32", lo, Imm(n)), top

    def _shr(self, item, halves, ops):
        lo, hi = halves[0]
        kind = "s32" if signed(item) else "u32"
        if not isinstance(ops[1], Imm):
            n = ops[1]
            carried = self.op("shl.b32", hi, self.op("sub.u32", Imm(32), n))
            below = self.op("or.b32", self.op("shr.u32", lo, n), carried)
            above = self.op(f"shr.{kind}", hi, self.op("sub.u32", n, Imm(32)))
            return self.op("selp.b32", above, below, self.at_least_32(n)), self.op(f"shr.{kind}", hi, n)
        n = min(ops[1].value & 0xFFFFFFFF, 64)
        if n == 64:
            fill = self.op("shr.s32", hi, Imm(31)) if signed(item) else Imm(0)
            return fill, fill
        if n == 0:
            return lo, hi
        if n >= 32:
            fill = self.op("shr.s32", hi, Imm(31)) if signed(item) else Imm(0)
            return self.op(f"shr.{kind}", hi, Imm(n - 32)) if n > 32 else hi, fill
        bottom = self.op("or.b32", self.op("shr.u32", lo, Imm(n)), self.op("shl.b32", hi, Imm(32 - n)))
        return bottom, self.op(f"shr.{kind}", hi, Imm(n))

    def _bfi(self, item, halves, ops):
        """``bfi.b64 d, a, b, pos, len`` with a constant position and length (NVRTC's ``(u64)x << 11 | y`` of
        values whose bits cannot overlap): b with the bits pos .. pos + len - 1 (those below bit 64) replaced by a's
        low len bits, word by word: ``(b & ~mask) | ((a << pos) & mask)``."""
        position, length = ops[2:4]
        if not isinstance(position, Imm) or not isinstance(length, Imm):
            raise MachineError(f"line {item.line}: bfi of 64-bit values with a position or length held in a "
                               f"register is not supported: {item.text}", line=item.line)
        pos, size = position.value & 0xFF, length.value & 0xFF       # (PTX reads their low 8 bits)
        mask = ((1 << size) - 1) << pos & (1 << 64) - 1
        shifted = self._shl(item, halves[:1], [ops[0], Imm(min(pos, 64))])
        (blo, bhi) = halves[1]
        words = []
        for inserted, kept, part in zip(shifted, (blo, bhi), (mask & 0xFFFFFFFF, mask >> 32)):
            if part == 0:
                words.append(kept)
            elif part == 0xFFFFFFFF:
                words.append(inserted)
            else:
                words.append(self.op("or.b32", self.op("and.b32", kept, Imm(~part & 0xFFFFFFFF)),
                                     self.op("and.b32", inserted, Imm(part))))
        return tuple(words)

    def at_least_32(self, n) -> Reg:
        return self.op("setp.ge.u32", n, Imm(32), prefix=PRED)

    def _selp(self, item, halves, ops):
        (alo, ahi), (blo, bhi) = halves
        return self.op("selp.b32", alo, blo, ops[2]), self.op("selp.b32", ahi, bhi, ops[2])

    def _order(self, item, halves, ops):
        """min / max: the compare (``_less``), then a select of each word."""
        first, second = halves
        less = self._less(first, second, "s" if signed(item) else "u", strict=True)
        pick = (first, second) if item.base == "min" else (second, first)
        return (self.op("selp.b32", pick[0][0], pick[1][0], less), self.op("selp.b32", pick[0][1], pick[1][1], less))

    _min = _max = _order

    def _less(self, a, b, kind: str, strict: bool) -> Reg:
        """a < b (or a <= b) of two pairs: the high words compared (signed or unsigned), then the low words
        (unsigned) where the high words are equal."""
        (alo, ahi), (blo, bhi) = a, b
        above = self.op(f"setp.lt.{kind}32", ahi, bhi, prefix=PRED)
        level = self.op("setp.eq.u32", ahi, bhi, prefix=PRED)
        low = self.op(f"setp.{'lt' if strict else 'le'}.u32", alo, blo, prefix=PRED)
        return self.op("or.pred", above, self.op("and.pred", level, low, prefix=PRED), prefix=PRED)

    def compare(self, item: Instruction) -> None:
        """setp of 64-bit values, one of them a pair."""
        cmp = COMPARES.get(item.modifiers[0])
        if cmp is None or len(item.modifiers) != 2 or item.pair is not None:
            raise MachineError(f"line {item.line}: this compare of a 64-bit value loaded from memory is not "
                               f"supported (a combining setp, or a second destination): {item.text}", line=item.line)
        a, b = (self.halves(o) for o in sources(item)[:2])
        # lo / ls / hi / hs are unsigned whatever the type; lt / le / gt / ge as the type says
        kind = "s" if cmp == item.modifiers[0] and item.modifiers[1].startswith("s") else "u"
        dst = item.operands[0]
        if cmp in ("eq", "ne"):
            differ = self.op("or.b32", self.op("xor.b32", a[0], b[0]), self.op("xor.b32", a[1], b[1]))
            self.emit(f"setp.{cmp}.u32", dst, differ, Imm(0))
            return
        less = self._less(*((a, b) if cmp in ("lt", "le") else (b, a)), kind, strict=cmp in ("lt", "gt"))
        self.emit("mov.pred", dst, less)

    def to_float(self, item: Instruction) -> None:
        """``cvt.rn`` / ``.rz`` / ``.rm`` / ``.rp .f32`` of a pair, (float) of a long long: the magnitude shifted left
        by the high word's leading zeros s (``clz``; 32 where it is 0, and the low word is the word converted), the
        low word's bits left below folded into the high word's lowest bit (they only tell the rounding that it is not
        exact: the rounding's own bit is bit 7), that word converted (the 32-bit conversion, in the instruction's
        rounding), and its exponent raised by 32 - s, exactly. Signed: of the magnitude (2^63 too, read unsigned),
        then the sign; a negative value's magnitude rounded the other way where the rounding is toward an infinity
        (down, -x rounds as x up)."""
        mode, kind = item.modifiers[0], item.modifiers[2]
        lo, hi = self.words[item.operands[1].name]
        negative = None
        if kind == "s64":
            negative = self.op("setp.lt.s32", hi, Imm(0), prefix=PRED)
            lo, hi = self._pick(negative, self._sub(item, [(Imm(0), Imm(0)), (lo, hi)], ()), (lo, hi))
        shift = self.op("clz.b32", hi)
        top = self.op("or.b32", self.op("shl.b32", hi, shift), self.op("shr.u32", lo, self.op("sub.u32", Imm(32),
                                                                                                shift)))
        rest = self.op("setp.ne.u32", self.op("shl.b32", lo, shift), Imm(0), prefix=PRED)
        sticky = self.op("or.b32", top, self.op("selp.u32", Imm(1), Imm(0), rest))
        word = self.op(f"cvt.{mode}.f32.u32", sticky)
        if negative is not None and mode in MIRRORED:
            word = self.op("selp.b32", self.op(f"cvt.{MIRRORED[mode]}.f32.u32", sticky), word, negative)
        bits = self.op("add.u32", word, self.op("shl.b32", self.op("sub.u32", Imm(32), shift), Imm(23)))
        if negative is not None:
            bits = self.op("or.b32", bits, self.op("selp.b32", Imm(0x80000000), Imm(0), negative))
        self.emit("mov.b32", item.operands[0], bits)

    def match(self, item: Instruction) -> None:
        """``match.any`` / ``match.all .sync.b64`` (``__match_any_sync`` / ``__match_all_sync`` of a 64-bit value)
        as the 32-bit matches of its words: a lane's value equals another's where both words do, so any is the and
        of the words' masks; every active lane holds one value where each word does, so all is the and of the
        words' (each the active mask or 0), and p the and of theirs."""
        dst, value, *rest = item.operands
        lo, hi = self.halves(value, why="the high word of a 64-bit value matched across the warp")
        word = item.opcode.replace(".b64", ".b32")
        if item.pair is None:
            self.emit("and.b32", dst, self.op(word, lo, *rest), self.op(word, hi, *rest))
            return
        low, high, p_low, p_high = self.temp(WORD), self.temp(WORD), self.temp(PRED), self.temp(PRED)
        self.emit(word, low, lo, *rest, pair=p_low)
        self.emit(word, high, hi, *rest, pair=p_high)
        self.emit("and.b32", dst, low, high)
        self.emit("and.pred", item.pair, p_low, p_high)

    def count_bits(self, item: Instruction) -> None:
        """``popc`` / ``clz`` / ``bfind`` of a pair (``__popcll``, ``__clzll``, NVRTC's ``__ffsll``: 64 minus the
        clz of ``x & -x``), from the words' 32-bit counts: popc the sum of both; clz the high word's, plus the low
        word's where the high word is 0 (32 leading zeros); bfind 63 minus the clz (64 for 0 gives 0xffffffff, PTX's
        "none"), .shiftamt the clz itself, 0xffffffff for 0; .s64 of x ^ (x >> 63), as the 32-bit one."""
        lo, hi = self.words[sources(item)[0].name]
        dst = item.operands[0]
        if item.base == "popc":
            self.emit("add.u32", dst, self.op("popc.b32", lo), self.op("popc.b32", hi))
            return
        if item.base == "bfind" and signed(item):
            sign = self.op("shr.s32", hi, Imm(31))
            lo, hi = self.op("xor.b32", lo, sign), self.op("xor.b32", hi, sign)
        empty = self.op("setp.eq.u32", hi, Imm(0), prefix=PRED)
        below = self.op("selp.b32", self.op("clz.b32", lo), Imm(0), empty)
        zeros = self.op("add.u32", self.op("clz.b32", hi), below)
        if item.base == "clz":
            self.emit("mov.b32", dst, zeros)
        elif "shiftamt" not in item.modifiers:
            self.emit("sub.u32", dst, Imm(63), zeros)
        else:
            none = self.op("setp.eq.u32", zeros, Imm(64), prefix=PRED)
            self.emit("selp.b32", dst, Imm(0xFFFFFFFF), zeros, none)

    # -- memory -------------------------------------------------------------------------------------------------
    @staticmethod
    def space(item: Instruction) -> str:
        """The access's state space and qualifiers (global, shared, volatile, ...): its modifiers but the type and
        the atomic's operation."""
        return ".".join(m for m in item.modifiers if m not in INTEGER and m not in ATOMICS)

    def access(self, item: Instruction) -> None:
        """A 64-bit store, or an atomic whose old value is not read (a load's register is always a pair, and so is
        an atomic's whose old value is read: ``define``)."""
        if item.base != "st":
            self.atomic(item, wanted=False)
            return
        mem, value = item.operands
        lo, hi = self.stored_words(item, value)
        space = self.space(item)
        self.emit(f"st.{space}.u32", mem, lo)
        self.emit(f"st.{space}.u32", _next_word(mem), hi)

    def stored_words(self, item: Instruction, value) -> tuple:
        """The words of a 64-bit value a store or an atomic writes to memory."""
        if isinstance(value, Reg) and value.name in self.from_parameters and value.name not in self.words:
            raise MachineError(
                f"line {item.line}: the 64-bit value {value.name} stored here is computed from a 64-bit kernel "
                f"parameter, which may be a pointer (PTX does not tell int *x from size_t n), and the machine keeps "
                f"no pointers in memory; store a 32-bit value ((unsigned)n) or one the kernel computes: {item.text}",
                line=item.line)
        if isinstance(value, Reg) and value.name not in self.words:
            # a 32-bit access reads its word (and refuses a register that holds an address)
            what = "store" if item.base == "st" else "atomic"
            return value, self.halves(value, why=f"the high word of a 64-bit {what}")[1]
        return self.halves(value)

    def atomic(self, item: Instruction, wanted: bool) -> tuple:
        """A 64-bit atomic (``atom`` / ``red``); ``wanted``: its old value is read, and returned as two words. Lanes
        update a value in lane order, as the 32-bit atomics do (``memory``); which lane's update comes first is
        not fixed on a GPU either.
        - add: the low words added by one atomic of words (each lane gets the old low word), then the high words
          plus each lane's carry out of its low add, by a second: a lane's old high word is the high word of the
          sum of the lanes before it. So the old value is a lane's in that order, and in any order of such adds the
          two words end as the 64-bit sum. xor: two atomics of words.
        - and, or, exch: two atomics of words where the old value is not read; where it is, as cas (the 32-bit
          ones would each take turns for their old values: one loop for both words is half the records).
        - cas, min, max: the lanes take turns, a uniform loop of one trip per lane: on its turn a lane loads both
          words, then stores both where the word pair compares so.
        Between the two words' updates, a reader (a peer's packet at a record boundary, a warp of another overlay
        round) sees one word updated and not yet the other, where a GPU's 64-bit atomic is one access. A lane's
        turn, from its loads to its stores, is one span of ops that no overlay's end falls in (Instruction.whole)."""
        mem = next(o for o in item.operands if isinstance(o, Mem))
        values = [self.stored_words(item, value) for value in item.operands[item.operands.index(mem) + 1:]]
        kind = next(m for m in item.modifiers if m in ATOMICS)
        space = self.space(item)
        if kind == "add":
            (lo, hi), = values
            old = self.op(f"atom.{space}.add.u32", mem, lo)
            wrapped = self.op("setp.lt.u32", self.op("add.u32", old, self.word(lo)), old, prefix=PRED)
            high = self.op("add.u32", hi, self.op("selp.u32", Imm(1), Imm(0), wrapped))
            return old, self.op(f"atom.{space}.add.u32", _next_word(mem), high)
        if kind == "xor" or kind in ("and", "or", "exch") and not wanted:
            (lo, hi), = values
            return (self.op(f"atom.{space}.{kind}.b32", mem, lo),
                    self.op(f"atom.{space}.{kind}.b32", _next_word(mem), hi))
        values = [tuple(self.word(w) for w in words) for words in values]
        if kind in ("and", "or", "exch"):
            def update(old):
                if kind == "exch":
                    return values[0], None
                return tuple(self.op(f"{kind}.b32", a, b) for a, b in zip(old, values[0])), None
        elif kind == "cas":
            def update(old):
                expected, new = values
                differ = self.op("or.b32", self.op("xor.b32", old[0], expected[0]),
                                 self.op("xor.b32", old[1], expected[1]))
                return new, self.op("setp.eq.u32", differ, Imm(0), prefix=PRED)
        elif kind in ("min", "max"):
            def update(old):
                first, second = (values[0], old) if kind == "min" else (old, values[0])
                return values[0], self._less(first, second, "s" if signed(item) else "u", strict=True)
        else:
            raise MachineError(f"line {item.line}: a 64-bit atom.{kind} is not supported: {item.text}",
                               line=item.line)
        return self._in_lane_order(item, mem, space, update)

    def word(self, operand):
        """A 64-bit register's low word as a 32-bit register (other operands as they are)."""
        if isinstance(operand, Reg) and declared_bits(self.kernel.registers, operand.name) == 64:
            return self.op("cvt.u32.u64", operand)
        return operand

    def _in_lane_order(self, item: Instruction, mem: Mem, space: str, update) -> tuple:
        """A 64-bit atomic the lanes take turns at: ``update(old words)`` gives the words to store and where to
        store them (None: always). The loop runs unguarded (every lane, LANES trips); a lane loads and stores on its
        own turn and where the instruction's guard holds."""
        self.item = dataclasses.replace(item, guard=None, guard_negated=False)
        old = (self.temp(WORD), self.temp(WORD))
        lane, count = self.op("mov.u32", Reg("%laneid")), self.temp(WORD)
        self.emit("mov.b32", count, Imm(0))
        head = Label(f"$__pair_turns{self.temp(WORD).name[len(WORD):]}")
        self.out.append(head)
        turn = self.op("setp.eq.u32", lane, count, prefix=PRED)
        if item.guard is not None:
            guard = self.op("not.pred", item.guard, prefix=PRED) if item.guard_negated else item.guard
            turn = self.op("and.pred", turn, guard, prefix=PRED)
        self.atomics += 1           # the lane's turn: no other warp writes the words between its loads and stores
        self.item = dataclasses.replace(self.item, whole=self.atomics)
        self.emit(f"ld.{space}.u32", old[0], mem, guard=turn)
        self.emit(f"ld.{space}.u32", old[1], _next_word(mem), guard=turn)
        new, holds = update(old)
        store = turn if holds is None else self.op("and.pred", turn, holds, prefix=PRED)
        self.emit(f"st.{space}.u32", mem, new[0], guard=store)
        self.emit(f"st.{space}.u32", _next_word(mem), new[1], guard=store)
        self.item = dataclasses.replace(self.item, whole=0)
        self.emit("add.u32", count, count, Imm(1))
        self.emit("bra", head, guard=self.op("setp.lt.u32", count, Imm(LANES), prefix=PRED))
        self.item = item
        return old


def _next_word(mem: Mem) -> Mem:
    return Mem(mem.base, mem.offset + 4)
