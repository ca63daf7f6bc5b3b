"""Bit manipulation: population count, leading zeros, the highest set bit (bfind, and ``__ffs``), the n-th set
bit (fns: ``__fns``), bit reversal, bit-field extract / insert, funnel shifts, byte permutes, three-input logic
(``lop3``) and the lanes' absolute differences (``vabsdiff2`` / ``vabsdiff4``: CUDA's SIMD intrinsics), built from
shifts, masks and ors (a population count adds its bytes with one multiply; mixed into ``emit.Emitter``). A funnel
shift's amount and a byte permute's selector may be held in a register; bit-field positions and lengths, and fns'
base and offset, must be known at launch, and held in a register they are refused.
"""
from __future__ import annotations

import functools

from ..ptx import Reg
from .semantics import to_signed
from .transfer import sources
from .values import MASK32, Const, signed, unsupported, width


LOGIC_A, LOGIC_B, LOGIC_C = 0xF0, 0xCC, 0xAA       # lop3's inputs as the truth tables of three variables


@functools.cache
def _logic_recipes() -> dict[int, tuple]:
    """For each of the 256 functions of three bits (a truth table, lop3's LUT), the cheapest tree of and / or / xor
    / not over a, b, c: its op and the tables of its operands, ("input",) at a leaf. Built once by relaxing costs
    (a tree's ops: 1 + its operands') until no function gets cheaper; 0 and all ones are the constants."""
    cost = {LOGIC_A: 0, LOGIC_B: 0, LOGIC_C: 0, 0x00: 0, 0xFF: 0}
    recipe = {f: ("input",) for f in cost}
    changed = True
    while changed:
        changed = False
        known = sorted(cost.items())
        for f, cf in known:
            candidates = [(f ^ 0xFF, cf + 1, ("not", f))]
            for g, cg in known:
                if g < f:
                    continue
                candidates += [(f & g, cf + cg + 1, ("and", f, g)), (f | g, cf + cg + 1, ("or", f, g)),
                               (f ^ g, cf + cg + 1, ("xor", f, g))]
            for h, ch, how in candidates:
                if ch < cost.get(h, 1 << 30):
                    cost[h], recipe[h] = ch, how
                    changed = True
    return recipe


def logic_recipe(function: int) -> tuple | None:
    """How ``_op_lop3`` builds the function whose truth table is ``function``: ("input",) for a, b or c, None for
    a constant (0 or all ones), else (op, operand tables...)."""
    if function in (0x00, 0xFF):
        return None
    return _logic_recipes()[function]


class BitOps:
    """The ``_op_<base>`` builders of popc / clz / bfind / fns / brev / bfe / bfi / shf / prmt / lop3 / vabsdiff. Uses
    the emitter's ``src``, ``op``, ``value_operand``, ``definitions`` and ``_need_fits``."""

    def _op_popc(self, read, dst):
        self._zero_extended(read)
        self._popcount(self.src(read, 0), dst)

    def _zero_extended(self, read) -> None:
        """A 64-bit popc / clz runs on the low word where the high word is known to be zero (``__popcll`` of an
        unsigned int widened: ``_extension``); otherwise it is refused."""
        if width(self.inst) > 32 and self._extension(read, self.inst.operands[1]) != "u":
            self._need_fits(width(self.inst))

    def _popcount(self, x: tuple, dst: str | None = None) -> str:
        """Bits set in a word: the SWAR sum of 2-, 4- and 8-bit fields, the bytes added by one multiply."""
        pairs = self.op("and", (self.op("shr_u", x, (None, 1)), 0), (None, 0x55555555))
        x = (self.op("sub", x, (pairs, 0)), 0)
        quads = self.op("and", (self.op("shr_u", x, (None, 2)), 0), (None, 0x33333333))
        x = (self.op("add", (self.op("and", x, (None, 0x33333333)), 0), (quads, 0)), 0)
        x = (self.op("add", x, (self.op("shr_u", x, (None, 4)), 0)), 0)
        x = (self.op("and", x, (None, 0x0F0F0F0F)), 0)
        return self.op("shr_u", (self.op("mul", x, (None, 0x01010101)), 0), (None, 24), dst=dst)

    def _op_clz(self, read, dst):
        self._zero_extended(read)
        if width(self.inst) > 32:       # the high word's 32 zeros first
            self.op("add", (self._leading_zeros(self.src(read, 0)), 0), (None, 32), dst=dst)
            return
        self._leading_zeros(self.src(read, 0), dst)

    def _leading_zeros(self, x: tuple, dst: str | None = None) -> str:
        """Leading zeros: every bit below the highest set one smeared to 1, then the zeros counted."""
        for shift in (1, 2, 4, 8, 16):
            x = (self.op("or", x, (self.op("shr_u", x, (None, shift)), 0)), 0)
        return self._popcount((self.op("xor", x, (None, MASK32)), 0), dst)

    def _op_bfind(self, read, dst):
        """The position of the highest bit that differs from the sign (.u32: the highest set bit; .s32: of
        a ^ (a >> 31)), 0xffffffff where there is none; with .shiftamt the left shift that brings it to the top
        (31 minus it), 0xffffffff kept. ``__ffs(x)`` is a .shiftamt of ``brev x``: there the count is x's trailing
        zeros, popc((x & -x) - 1), read from the brev's source, so the reversal's 20 ops become dead and are dropped
        (lowering.fuse): 16 ops for __ffs instead of 44, which no ROM holds."""
        inst = self.inst
        self._need_fits(width(inst))
        shiftamt = "shiftamt" in inst.modifiers
        reversed_ = self._reversed_word(read, sources(inst)[0]) if shiftamt and not signed(inst) else None
        if reversed_ is not None:
            lowest = self.op("and", reversed_, (self.op("sub", (None, 0), reversed_), 0))
            count = self._popcount((lowest, MASK32))                # (x & -x) - 1: the bits below the lowest
        else:
            x = self.src(read, 0)
            if signed(inst):
                x = (self.op("xor", x, (self.op("shr_s", x, (None, 31)), 0)), 0)
            count = self._leading_zeros(x)
            if not shiftamt:                                        # 31 - 32 is 0xffffffff: no bit found
                self.op("sub", (None, 31), (count, 0), dst=dst)
                return
        none = self.op("sub", (None, 0), (self.op("shr_u", (count, 0), (None, 5)), 0))    # all ones for 32
        self.op("or", (count, 0), (none, 0), dst=dst)

    def _reversed_word(self, read, operand) -> tuple | None:
        """The source of the ``brev.b32`` that alone defines ``operand``, when that source is the same value here
        (a value known at launch, or a register with one definition); else None."""
        defined = self.definitions.get(operand.name, []) if isinstance(operand, Reg) else []
        if len(defined) != 1 or defined[0].base != "brev" or width(defined[0]) != 32 or defined[0].guard:
            return None
        source = defined[0].operands[1]
        if isinstance(source, Reg) and (len(self.definitions.get(source.name, [])) > 1 or source.name in
                                        self.addresses):
            return None
        value = read(source)
        return None if value is None else self.value_operand(source, value)

    def _op_brev(self, read, dst):
        self._need_fits(width(self.inst))
        self._reversal(self.src(read, 0), dst)

    def _reversal(self, x: tuple, dst: str | None = None) -> str:
        """Bit reversal: swap neighbouring bits, pairs, nibbles, bytes, then the halves."""
        for shift, mask in ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF)):
            down = self.op("and", (self.op("shr_u", x, (None, shift)), 0), (None, mask))
            up = self.op("shl", (self.op("and", x, (None, mask)), 0), (None, shift))
            x = (self.op("or", (down, 0), (up, 0)), 0)
        up = self.op("shl", x, (None, 16))
        return self.op("or", (self.op("shr_u", x, (None, 16)), 0), (up, 0), dst=dst)

    def _op_fns(self, read, dst):
        """``fns.b32 d, mask, base, offset`` (CUDA's ``__fns``): the |offset|-th set bit of mask from bit base on,
        upward for offset > 0, downward below 0 (offset 0: base, if that bit is set), 0xffffffff where there is
        none. base and offset must be known at launch. Downward is upward in the reversed word (position 31 - p).
        The bits below the start cleared, the lowest |offset| - 1 set bits dropped one by one (x & (x - 1)), the
        lowest left's position is its trailing zeros, popc((x & -x) - 1): 32 where none is left, made 0xffffffff
        (downward, 31 - 32 is already). About 20 ops, 2 more a step of the offset, 20 more downward."""
        inst = self.inst
        base, offset = read(sources(inst)[1]), read(sources(inst)[2])
        if not (isinstance(base, Const) and isinstance(offset, Const)):
            raise unsupported(inst, "fns (__fns) with a base or offset held in a register: they must be known at "
                                    "launch")
        start, n = base.value & MASK32, to_signed(offset.value & MASK32, 32)
        if start > 31:
            raise unsupported(inst, f"fns with base {start}: PTX leaves a base over 31 undefined")
        x = self.src(read, 0)
        if n == 0:                          # base | (bit - 1): base where the bit is set, else all ones
            bit = self.op("and", (self.op("shr_u", x, (None, start)), 0), (None, 1))
            self.op("or", (self.op("add", (bit, 0), (None, MASK32)), 0), (None, start), dst=dst)
            return
        if n < 0:
            x, start = (self._reversal(x), 0), 31 - start
        x = (self.op("and", x, (None, (MASK32 << start) & MASK32)), 0)
        for _ in range(abs(n) - 1):
            x = (self.op("and", x, (self.op("add", x, (None, MASK32)), 0)), 0)
        lowest = self.op("and", x, (self.op("sub", (None, 0), x), 0))
        count = self._popcount((self.op("add", (lowest, 0), (None, MASK32)), 0))
        if n < 0:
            self.op("sub", (None, 31), (count, 0), dst=dst)
            return
        none = self.op("sub", (None, 0), (self.op("shr_u", (count, 0), (None, 5)), 0))    # all ones for 32
        self.op("or", (count, 0), (none, 0), dst=dst)

    def _op_bfe(self, read, dst):
        inst = self.inst
        bits = width(inst)
        self._need_fits(bits)
        pos, length = read(sources(inst)[1]), read(sources(inst)[2])
        if not (isinstance(pos, Const) and isinstance(length, Const)):
            raise unsupported(inst, "bfe with a position or length held in a register")
        p, n = pos.value & 0xFF, length.value & 0xFF
        a = self.src(read, 0)
        if n == 0:
            self.op("a", (None, 0), dst=dst)
            return
        p = min(p, 31)
        n = min(n, 32 - p) if not signed(inst) else n
        if signed(inst):
            n = min(n, 32 - p)
            top = self.op("shl", a, (None, 32 - p - n)) if 32 - p - n else a[0]
            self.op("shr_s", (top, 0) if isinstance(top, str) else a, (None, 32 - n), dst=dst)
        else:
            self._extract_operand(a, p, n, dst)

    def _extract_operand(self, a: tuple, shift: int, bits: int, dst: str) -> None:
        shifted = (self.op("shr_u", a, (None, shift)), 0) if shift else a
        if shift + bits < 32:
            self.op("and", shifted, (None, (1 << bits) - 1), dst=dst)
        else:
            self.op("a", shifted, dst=dst)

    def _op_bfi(self, read, dst):
        inst = self.inst
        pos, length = read(sources(inst)[2]), read(sources(inst)[3])
        if not (isinstance(pos, Const) and isinstance(length, Const)):
            raise unsupported(inst, "bfi with a position or length held in a register")
        p, n = pos.value & 0xFF, length.value & 0xFF
        if n == 0 or p >= 32:
            self.op("a", self.src(read, 1), dst=dst)
            return
        n = min(n, 32 - p)
        field = (((1 << n) - 1) << p) & MASK32
        inserted = self.op("shl", self.src(read, 0), (None, p)) if p else None
        part = self.op("and", (inserted, 0) if inserted else self.src(read, 0), (None, field))
        kept = self.op("and", self.src(read, 1), (None, ~field & MASK32))
        self.op("or", (kept, 0), (part, 0), dst=dst)

    def _op_shf(self, read, dst):
        """PTX's funnel shift of the 64-bit value {b, a} (b the high word). By an amount held in a register (the
        rotate idiom ``(x << s) | (x >> (32 - s))`` compiles to one): the amount masked (.wrap) or clamped to 32
        (.clamp), then two shifts; the machine's shifts give 0 for an amount of 32 or more, which is what the
        word shifted out must give where the amount is 0 (.wrap) or 32 (.clamp)."""
        inst = self.inst
        low, high = self.src(read, 0), self.src(read, 1)
        left = "l" in inst.modifiers
        amount = read(sources(inst)[2])
        if not isinstance(amount, Const):
            n = (self.op("and" if "wrap" in inst.modifiers else "min_u", self.src(read, 2),
                         (None, 31 if "wrap" in inst.modifiers else 32)), 0)
            rest = (self.op("sub", (None, 32), n), 0)
            up = self.op("shl", high, n if left else rest)
            down = self.op("shr_u", low, rest if left else n)
            self.op("or", (up, 0), (down, 0), dst=dst)
            return
        n = amount.value & 31 if "wrap" in inst.modifiers else min(amount.value & MASK32, 32)
        if n == 0:
            self.op("a", high if left else low, dst=dst)
            return
        if n == 32:
            self.op("a", low if left else high, dst=dst)
            return
        if left:
            up, down = self.op("shl", high, (None, n)), self.op("shr_u", low, (None, 32 - n))
        else:
            up, down = self.op("shl", high, (None, 32 - n)), self.op("shr_u", low, (None, n))
        self.op("or", (up, 0), (down, 0), dst=dst)

    def _op_lop3(self, read, dst):
        """PTX's three-input logic op (CUDA's SIMD intrinsics' headers write it in inline assembly): the function
        its constant truth table names, as the shortest tree of and / or / xor / not (``logic_recipe``)."""
        inst = self.inst
        table = read(sources(inst)[3]) if len(sources(inst)) == 4 else None
        if not isinstance(table, Const) or inst.pair is not None or inst.modifiers != ("b32",):
            raise unsupported(inst, "lop3.b32 with a truth table known at launch")
        inputs = {LOGIC_A: self.src(read, 0), LOGIC_B: self.src(read, 1), LOGIC_C: self.src(read, 2)}

        def build(function: int, into: str | None = None) -> tuple:
            recipe = logic_recipe(function)
            if recipe is None or recipe[0] == "input":
                value = inputs[function] if recipe else (None, MASK32 if function else 0)
                if into is None:
                    return value
                self.op("a", value, dst=into)
                return into, 0
            if recipe[0] == "not":
                return self.op("xor", build(recipe[1]), (None, MASK32), dst=into), 0
            return self.op(recipe[0], build(recipe[1]), build(recipe[2]), dst=into), 0
        build(table.value & 0xFF, dst)

    def _permute_by_register(self, read, dst) -> None:
        """``__byte_perm(a, b, s)`` with s held in a register: each byte of the result from the nibble of s that
        names it. Bits 0-2 pick one of the 8 bytes of {b, a}: a shifted right by 8 times them, or b by that less
        32 (the machine's shift by 32 or more, or by a negative amount read as unsigned, gives 0, so only the
        named word's byte is left); bit 3 replicates that byte's sign. About 18 ops a byte."""
        a, b, selector = self.src(read, 0), self.src(read, 1), self.src(read, 2)
        total = None
        for i in range(4):
            moved = self.op("shr_u", selector, (None, 4 * i - 3)) if i else self.op("shl", selector, (None, 3))
            amount = (self.op("and", (moved, 0), (None, 0x38)), 0)     # 8 times the nibble's bits 0-2
            in_b = (self.op("sub", amount, (None, 32)), 0)
            either = self.op("or", (self.op("shr_u", a, amount), 0), (self.op("shr_u", b, in_b), 0))
            byte = (self.op("and", (either, 0), (None, 0xFF)), 0)
            top = self.op("shl", byte, (None, 24))
            replicated = (self.op("and", (self.op("shr_s", (top, 0), (None, 31)), 0), (None, 0xFF)), 0)
            flag = self.op("and", (self.op("shr_u", selector, (None, 4 * i + 3)), 0), (None, 1))
            chosen = self.op("and", (self.op("xor", byte, replicated), 0), (self.op("sub", (None, 0), (flag, 0)), 0))
            byte = (self.op("xor", byte, (chosen, 0)), 0)
            placed = (self.op("shl", byte, (None, 8 * i)), 0) if i else byte
            total = placed if total is None else (self.op("or", total, placed, dst=dst if i == 3 else None), 0)

    def _op_vabsdiff2(self, read, dst):
        self._lanes_absolute_difference(read, dst, 16)

    def _op_vabsdiff4(self, read, dst):
        self._lanes_absolute_difference(read, dst, 8)

    def _lanes_absolute_difference(self, read, dst, lane_bits: int) -> None:
        """PTX's SIMD video instructions vabsdiff2 / vabsdiff4 (CUDA's ``__vabsdiffu4``, ``__vsadu4``, ``__vabs4``,
        ... write them in inline assembly): |a - b| of each 16- or 8-bit lane, the lanes unsigned (.u32) or signed
        (.s32); with .add the lanes' differences summed and added to c (a sum of absolute differences), else each
        difference in its own lane (the default mask, every lane, so c is not read). Lane selectors, a mask, .sat
        and mixed types are refused."""
        inst = self.inst
        types = [m for m in inst.modifiers if m in ("u32", "s32")]
        if len(types) != 3 or len(set(types)) != 1 or set(inst.modifiers) - {"u32", "s32", "add"}:
            raise unsupported(inst, f"{inst.base} of .u32 or .s32 lanes, with .add or without")
        is_signed = types[0] == "s32"
        lanes = 32 // lane_bits
        larger, smaller = ("max_s", "min_s") if is_signed else ("max_u", "min_u")
        total = self.src(read, 2) if "add" in inst.modifiers else None
        for i in range(lanes):
            x = self._word_lane(self.src(read, 0), i, lane_bits, is_signed)
            y = self._word_lane(self.src(read, 1), i, lane_bits, is_signed)
            difference = (self.op("sub", (self.op(larger, x, y), 0), (self.op(smaller, x, y), 0)), 0)
            if "add" not in inst.modifiers and i:
                difference = (self.op("shl", difference, (None, lane_bits * i)), 0)
            last = i == lanes - 1
            total = difference if total is None else \
                (self.op("add", total, difference, dst=dst if last else None), 0)

    def _word_lane(self, x: tuple, i: int, lane_bits: int, is_signed: bool) -> tuple:
        """Lane i (of ``lane_bits`` bits) of a word, sign- or zero-extended."""
        if is_signed:       # the lane's top bit moved to bit 31, then shifted back with its sign
            left = 32 - lane_bits * (i + 1)
            top = (self.op("shl", x, (None, left)), 0) if left else x
            return self.op("shr_s", top, (None, 32 - lane_bits)), 0
        if lane_bits * (i + 1) == 32:
            return self.op("shr_u", x, (None, 32 - lane_bits)), 0
        moved = (self.op("shr_u", x, (None, lane_bits * i)), 0) if i else x
        return self.op("and", moved, (None, (1 << lane_bits) - 1)), 0

    def _op_dp4a(self, read, dst):
        """``__dp4a``: c plus the four products of a's and b's bytes, each byte signed or unsigned as its type."""
        self._dot_product(read, dst, [(0, 0), (1, 1), (2, 2), (3, 3)], 8)

    def _op_dp2a(self, read, dst):
        """``__dp2a_lo`` / ``_hi``: c plus a's two 16-bit halves times b's two low (.lo) or high (.hi) bytes."""
        first = 2 if "hi" in self.inst.modifiers else 0
        self._dot_product(read, dst, [(0, first), (1, first + 1)], 16)

    def _dot_product(self, read, dst, pairs: list, a_bits: int) -> None:
        inst = self.inst
        types = [m for m in inst.modifiers if m in ("u32", "s32")]
        if len(types) != 2 or set(inst.modifiers) - {"u32", "s32", "lo", "hi"}:
            raise unsupported(inst, f"{inst.base} takes the types of a and b (.u32 / .s32)")
        total = self.src(read, 2)
        for k, (i, j) in enumerate(pairs):
            x = self._word_lane(self.src(read, 0), i, a_bits, types[0] == "s32")
            y = self._word_lane(self.src(read, 1), j, 8, types[1] == "s32")
            product = (self.op("mul", x, y), 0)
            total = (self.op("add", total, product, dst=dst if k == len(pairs) - 1 else None), 0)

    def _op_prmt(self, read, dst):
        inst = self.inst
        selector = read(sources(inst)[2])
        if len(inst.modifiers) != 1:
            raise unsupported(inst, "a prmt mode (f4e, b4e, rc8, ecl, ecr, rc16)")
        if not isinstance(selector, Const):
            self._permute_by_register(read, dst)
            return
        sources_ = [self.src(read, 0), self.src(read, 1)]
        parts = []
        for i in range(4):
            sel = (selector.value >> (4 * i)) & 0xF
            source = sources_[(sel & 7) // 4]
            byte = sel & 3
            if sel & 8:                                  # the byte's sign replicated
                top = self.op("shl", source, (None, 24 - 8 * byte)) if byte != 3 else source[0]
                filled = self.op("shr_s", (top, 0) if isinstance(top, str) else source, (None, 31))
                parts.append(self.op("and", (filled, 0), (None, 0xFF << (8 * i))))
                continue
            shift = 8 * (i - byte)
            if shift > 0:
                moved = (self.op("shl", source, (None, shift)), 0)
            elif shift < 0:
                moved = (self.op("shr_u", source, (None, -shift)), 0)
            else:
                moved = source
            parts.append(self.op("and", moved, (None, 0xFF << (8 * i))))
        total = parts[0]
        for part in parts[1:-1]:
            total = self.op("or", (total, 0), (part, 0))
        self.op("or", (total, 0), (parts[-1], 0), dst=dst)
