"""Integer arithmetic: each PTX instruction as a short sequence of the machine's 32-bit ALU ops (mixed into
``emit.Emitter``, which dispatches ``base`` to ``_op_<base>(read, dst)``).

Registers narrower than 32 bits hold their value zero-extended (``_narrow`` keeps that after each op); 64-bit
registers hold their low word, so a 64-bit op is lowered only where its result's low word is all that is read, or
its operands are 32-bit values extended (``_extension``) or a loop's 64-bit counter (lowering.counters); otherwise
it is refused (``_need_fits``). Division by a
machine value is a software long division, the high word of a product a sum of 16-bit partial products.
"""
from __future__ import annotations

from ..isa import MachineError
from ..ptx import Imm, Instruction, Mem, Reg
from . import counters
from .mop import MOp
from .predicates import TRUE, Predicate
from .transfer import sources
from .values import MASK32, Affine, Const, destination, signed, unsupported, width
from .semantics import bits_of, to_signed, types

CMP_OPS = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
           "lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}


class ArithmeticOps:
    """The ``_op_<base>`` builders of add / sub / logic / shifts / min / max / mul / mad / div / rem / neg / not /
    abs / setp / selp / slct / cvt / mov, and their helpers. Uses the emitter's ``src``, ``op``, ``emit`` and
    ``temp``."""

    def _extension(self, read, operand, seen: frozenset = frozenset()) -> str | None:
        """"u" when a 64-bit operand's value is a zero-extended 32-bit value, "s" when sign-extended, else None."""
        value = read(operand) if not seen else None
        if isinstance(value, Const):
            return self._value_extension(value)
        if isinstance(value, Affine) and self._value_extension(value) is not None:
            return self._value_extension(value)
        # an Affine value whose range says nothing (a widening keeps a 32-bit one as it is): what writes it may
        if not isinstance(operand, Reg) or operand.name in seen or (
                operand.name in self.addresses and operand.name not in self.bytes):
            return None
        if operand.name in self.counters.registers and operand.name not in self.counters.offsets:
            return "u"      # below 2^32 where read as a number; a bounding compare may read 2^32 - 1 for more
        kinds = {self._written_extension(inst, read, seen | {operand.name})
                 for inst in self.definitions.get(operand.name, [])}
        return kinds.pop() if len(kinds) == 1 else None

    def _value_extension(self, value: Const | Affine) -> str | None:
        """``_extension`` of a value known at launch (for a thread-index value, at every thread): "u" where it
        fits both."""
        fits = self._value_extensions(value)
        return "u" if "u" in fits else ("s" if fits else None)

    def _value_extensions(self, value: Const | Affine) -> set:
        """Each extension a value known at launch fits: "u" a word zero-extended (0 .. 2^32 - 1), "s" one
        sign-extended (-2^31 .. 2^31 - 1; a constant is its 64 bits)."""
        if isinstance(value, Const):
            v = value.value
            low, high = (v, v) if v < (1 << 63) else (v - (1 << 64), v - (1 << 64))
        else:       # a 64-bit register's thread-index value is its value (a widening keeps one only where it is)
            low, high = value.bounds(self.context.threads)
        return {kind for kind, fits in (("u", 0 <= low and high < (1 << 32)),
                                        ("s", -(1 << 31) <= low and high < (1 << 31))) if fits}

    def _alike(self, read) -> str | None:
        """The extension ("u" / "s") the two sources of a 64-bit compare, min or max share, so that the 32-bit op
        on their low words gives its answer: a value known at launch takes either that it fits (5 is both: an int
        index compared with a ``long`` size, ``while (i < size)``, reads a sign-extended word and a constant)."""
        def fitting(operand) -> set:
            value = read(operand)
            if isinstance(value, (Const, Affine)):
                return self._value_extensions(value)
            return {self._extension(read, operand)} - {None}
        first, second = (fitting(o) for o in sources(self.inst)[:2])
        common = first & second
        return "u" if "u" in common else ("s" if common else None)

    def _written_extension(self, inst: Instruction, read, seen: frozenset) -> str | None:
        """``_extension`` of the value one instruction writes, from what it is (``seen``: the registers followed)."""
        typed = types(inst)
        if inst.base == "ld" and "param" not in inst.modifiers and width(inst) <= 32:
            return "s" if signed(inst) else "u"        # a word or narrower, extended into 64 bits
        if inst.base == "cvt" and len(typed) == 2 and (bits_of(typed[1]) or 64) <= 32:
            return "s" if typed[1].startswith("s") else "u"
        if inst.base == "mov" and isinstance(inst.operands[1], (Reg, Imm)):
            return self._extension(read, inst.operands[1], seen)
        if self._below_2_32(inst, read, seen):
            return "u"      # a 64-bit result whose high word is zero (``(x >> 34) & 1``)
        return None

    def _below_2_32(self, inst: Instruction, read, seen: frozenset) -> bool:
        """Whether a 64-bit and / or / xor / min / max / shr / selp always leaves its high word zero: a right shift
        by 32 or more, an and with a zero-extended word, or / xor / min / max / selp of zero-extended words."""
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
        if inst.base in ("or", "xor", "min", "max"):
            return small(ops[0]) and small(ops[1])
        if inst.base == "selp":
            return small(ops[0]) and small(ops[1])
        return False

    def _select(self, read, dst: str, first: tuple, second: tuple, cond) -> None:
        """dst = cond ? first : second, correct when dst is also one of the sources (written last, never read
        after it is overwritten)."""
        atom = Predicate.atom(cond.name)
        for chosen, other in ((second, atom), (first, ~atom)):
            if (self.pred & other).never:
                # The block's own predicate decides the condition (NVRTC's selp of p after a branch on p): one move.
                if chosen != (dst, 0):
                    self.emit(MOp("a", chosen, dst=dst))
                return
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
            error = MachineError(f"line {self.inst.line}: a 64-bit {self.inst.base} depends on the high word, which "
                                 f"the machine's 32-bit registers do not hold: {self.inst.text}"
                                 f"{self._unbounded_hint()}", line=self.inst.line)
            # the 64-bit values read: kept as pairs of words (lowering.pairs), the lowering may hold their high words
            error.high_words = frozenset(o.name for o in sources(self.inst) if isinstance(o, Reg)
                                         and self.reg_bits(o.name) == 64 and o.name not in self.addresses)
            raise error

    def _unbounded_hint(self) -> str:
        """Why a 64-bit register this instruction reads, stepped like a loop counter, is no counter."""
        for operand in sources(self.inst):
            read = self.counters.unbounded.get(getattr(operand, "name", None))
            if read is not None:
                return (f" ({operand.name} steps like a loop counter, but line {read.line} reads it where a step "
                        f"may have carried it past 2^32 - 1 (after its loop, or between the loops NVRTC unrolls one "
                        f"into), other than to compare it: {read.text}; write the counter as an int or unsigned)")
        return ""

    def _counted_equality(self, read) -> tuple[int, int] | None:
        """An == / != compare of a counter from a value v (the machine holds r - v) or of a view r + x of a
        counter (lowering.counters) with a value c: (the operand to compare, the word to compare it with), where
        the count it asks for (c - v, c - x) is below 2^32 - 1 (a saturated count is not it); else refused."""
        inst = self.inst
        for index, operand in enumerate(sources(inst)[:2]):
            name = getattr(operand, "name", None)
            if name in self.counters.views:
                counter, x = self.counters.views[name]
                start, own = read(x), False
            elif name in self.counters.offsets:
                counter, start, own = name, Const(self.counters.offsets[name]), True
            else:
                continue
            other = read(sources(inst)[1 - index])
            if isinstance(start, Const) and isinstance(other, Const):
                count = (other.value - start.value) % (1 << 64)
                if count < MASK32:
                    return index, count if own else other.value & MASK32
                what = f"a count of {count}, past 2^32 - 2, which its word cannot tell from a larger one"
            else:
                what = "a count this launch does not fix"
            error = MachineError(f"line {inst.line}: {inst.text} asks whether the loop counter {counter} has "
                                 f"reached {what}; write the counter as an int or unsigned", line=inst.line)
            error.high_words = frozenset({counter})     # as a pair of words (lowering.pairs) it is the count
            raise error
        return None

    def _check_saturated(self, read) -> None:
        """A compare that may read a counter saturated (lowering.counters) and answers 2^32 - 1 as the sum it
        stands for only where the other word is below 2^32 - 1 (``i <= last``): that word, at this launch."""
        register = self.counters.saturated.get(id(self.inst))
        if register is None or counters.strict(self.inst, register):
            return
        other = next(o for o in sources(self.inst)[:2] if getattr(o, "name", None) != register)
        value = read(other)
        if isinstance(value, Const):
            top = value.value
        elif isinstance(value, Affine):
            top = value.bounds(self.context.threads)[1]
        else:
            top = None
        if top is None or not 0 <= top < MASK32:
            error = MachineError(
                f"line {self.inst.line}: {self.inst.text} compares the loop counter {register} after a step that "
                f"may carry it past 2^32 - 1, where the machine's word holds 2^32 - 1, with "
                f"{'a value this launch does not fix' if top is None else top}: only a value below 2^32 - 1 tells "
                f"the two apart; compare with < or >= (i < n)", line=self.inst.line)
            error.high_words = frozenset({register})   # as a pair of words (lowering.pairs) it is the sum
            raise error

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
        if id(self.inst) in self.counters.steps:
            self._saturating_add(self.src(read, 0), self.src(read, 1), dst)
            return
        self._binary(read, dst, "add")

    def _saturating_add(self, a: tuple, b: tuple, dst: str) -> None:
        """A 64-bit counter's step (lowering.counters): the sum of two words, or 2^32 - 1 where it carries, so
        the bounding compare after it gives a GPU's answer: a + min(b, 2^32 - 1 - a), the room left above a; by
        a stride k known at launch, min(a, 2^32 - 1 - k) + k (two ops: a grid-stride loop's step)."""
        if a[0] is None:
            a, b = b, a
        if b[0] is None:
            stride = b[1] & MASK32
            kept = self.op("min_u", a, (None, MASK32 - stride))
            self.op("a", (kept, stride), dst=dst)
            return
        room = self.op("xor", a, (None, MASK32))
        self.op("add", a, (self.op("min_u", b, (room, 0)), 0), dst=dst)

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
        high = self._joined_high(read)
        if high is not None:
            # ``(u64)lo | (u64)hi << 32`` (two words joined: NVRTC's, and a pair read as one value: lowering.pairs)
            # shifted right by 32 or more: its high word, hi, shifted by the rest
            n = amount.value - 32
            self.op("a" if n == 0 else "shr_s" if signed(inst) else "shr_u", high, *([(None, n)] if n else []),
                    dst=dst)
            return
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
            if kind == "s" and (signed(inst) or n <= 32):
                # the bits shifted into the low word are copies of the sign (shr.u64 too, by up to 32)
                self.op("shr_s", self.src(read, 0), (None, min(n, 31)), dst=dst)
                return
            if kind == "s":     # shr.u64 by more than 32: the high word (the sign's copies) shifted down
                sign = self.op("shr_s", self.src(read, 0), (None, 31))
                self.op("shr_u", (sign, 0), (None, n - 32), dst=dst)
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

    def _joined_high(self, read) -> tuple | None:
        """The word hi (an operand), where a 64-bit right shift by 32..63 reads two words joined: ``(u64)lo |
        (u64)hi << 32`` (its ``or``, ``shl`` and the ``cvt`` of hi each the one definition of its register,
        unguarded, in that order in one basic block, so the register still holds the hi that was joined) or NVRTC's
        ``bfi.b64 d, hi, lo, 32, 32`` (hi defined once, before it in its block); None otherwise."""
        inst = self.inst
        source, amount = sources(inst)[0], read(sources(inst)[1])
        if width(inst) != 64 or not isinstance(amount, Const) or not 32 <= amount.value < 64:
            return None

        def single(operand, base: str) -> Instruction | None:
            definitions = self.definitions.get(operand.name, []) if isinstance(operand, Reg) else []
            ok = len(definitions) == 1 and definitions[0].base == base and definitions[0].guard is None
            return definitions[0] if ok else None

        def in_order(*definitions) -> bool:
            """Each definition before the next in one basic block."""
            block = next(b.body for b in self.blocks if any(i is definitions[-1] for i in b.body))
            order = [next((k for k, i in enumerate(block) if i is d), None) for d in definitions]
            return None not in order and order == sorted(order)
        insert = single(source, "bfi")        # NVRTC's join: bfi.b64 d, hi, lo, 32, 32
        if insert is not None and width(insert) == 64 and [read(o) for o in sources(insert)[2:4]] == [Const(32)] * 2:
            # the field's low word is the high word, wherever the register still holds it
            field = sources(insert)[0]
            definitions = self.definitions.get(field.name, []) if isinstance(field, Reg) else []
            if isinstance(field, Imm) or len(definitions) == 1 and in_order(definitions[0], insert):
                self.inst = insert
                word = self.src(read, 0)
                self.inst = inst
                return word
        join = single(source, "or")
        if join is None or width(join) != 64:
            return None
        for shifted, low in (sources(join)[:2], sources(join)[1::-1]):
            shift = single(shifted, "shl")
            if shift is None or width(shift) != 64 or read(sources(shift)[1]) != Const(32):
                continue
            widen = single(sources(shift)[0], "cvt")
            if widen is None or types(widen) != ["u64", "u32"] or self._extension(read, low) != "u":
                continue
            if not in_order(widen, shift, join):
                continue
            self.inst = shift           # the register the cvt wrote: its word is hi
            word = self.src(read, 0)
            self.inst = inst
            return word
        return None

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
            # a 16-bit value shifted by a 32-bit amount, which PTX clamps to the width: the value extended to a
            # word (its sign for shr.s), the word's shift (all its bits gone, or its sign, by 16 or more), narrowed
            value = self._extended(read, 0, bits, op == "shr_s")
            self._narrow(self.op(op, value, self.src(read, 1)), dst, bits)
            return
        self._binary(read, dst, op, extend=op != "shl")

    def _op_min(self, read, dst):
        self._order(read, dst, "min")

    def _op_max(self, read, dst):
        self._order(read, dst, "max")

    def _order(self, read, dst, name: str) -> None:
        """min / max. Of 64-bit values that are words extended alike, the 32-bit op on their low words: two
        zero-extended words order as unsigned words whatever the instruction's signedness (NVRTC's trip count
        of ``i < a && i < b`` is a max.u64), sign-extended ones as it says."""
        inst = self.inst
        kind = "s" if signed(inst) else "u"
        if width(inst) > 32:
            alike = self._alike(read)
            if alike is not None:
                kind = "u" if alike == "u" else kind
                self.op(f"{name}_{kind}", self.src(read, 0), self.src(read, 1), dst=dst)
                return
        self._binary(read, dst, f"{name}_{kind}", extend=True)

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


    def _op_mad(self, read, dst):
        inst = self.inst
        if "hi" in inst.modifiers:
            raise unsupported(inst, "mad.hi needs the high word of a product")
        bits = width(inst)
        if "wide" in inst.modifiers and bits <= 16:
            a, b = self._extended(read, 0, bits, signed(inst)), self._extended(read, 1, bits, signed(inst))
        else:
            a, b = self.src(read, 0), self.src(read, 1)
        if a[0] is None and b[0] is None:
            # Both factors known at launch (blockIdx.x * blockDim.x + threadIdx.x of a 2-d block): the product is
            # the addend's immediate.
            c = self.src(read, 2)
            total = (c[0], (c[1] + a[1] * b[1]) & MASK32)
        else:
            total = (self.op("add", (self.op("mul", a, b), 0), self.src(read, 2)), 0)
        if bits < 32 and "wide" not in inst.modifiers:
            self._narrow(total, dst, bits)
        else:
            self.op("a", total, dst=dst)

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

    def _op_sad(self, read, dst):
        """``__sad`` / ``__usad``: |a - b| + c, the difference of the larger and the smaller (signed or unsigned)."""
        bits = width(self.inst)
        self._need_fits(bits)
        a, b = self._extended(read, 0, bits, signed(self.inst)), self._extended(read, 1, bits, signed(self.inst))
        kind = "_s" if signed(self.inst) else "_u"
        difference = self.op("sub", (self.op("max" + kind, a, b), 0), (self.op("min" + kind, a, b), 0))
        self._narrow(self.op("add", (difference, 0), self.src(read, 2)), dst, bits)

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
            # A 64-bit compare of 32-bit values extended (size_t i = threadIdx.x; i < n) is the 32-bit compare of
            # their low words: unsigned where both are zero-extended, whatever the compare's signedness. A loop
            # counter (lowering.counters) is zero-extended, or saturated where this compare tells them apart.
            counted = self._counted_equality(read)
            if counted is not None:
                index, word = counted
                self.op(cmp, self.src(read, index), (None, word), dst=dst)
                return
            self._check_saturated(read)
            alike = self._alike(read)
            if alike is not None:
                bits = 32
                unsigned_cmp = unsigned_cmp or alike == "u"
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
        cond = self.src(read, 2)
        negative = self.op("lt_s", cond, (None, 0))
        first, second = self.src(read, 0), self.src(read, 1)
        # slct picks the first source where c >= 0.
        self._select(read, dst, second, first, Reg(negative))
