"""Bit manipulation: population count, leading zeros, bit reversal, bit-field extract / insert, funnel shifts
and byte permutes, built from shifts, masks and ors (a population count adds its bytes with one multiply; mixed
into ``emit.Emitter``). Positions, lengths and selectors must be known at launch; held in a register they are
refused.
"""
from __future__ import annotations

from .transfer import sources
from .values import MASK32, Const, signed, unsupported, width


class BitOps:
    """The ``_op_<base>`` builders of popc / clz / brev / bfe / bfi / shf / prmt. Uses the emitter's ``src``,
    ``op`` and ``_need_fits``."""

    def _op_popc(self, read, dst):
        self._need_fits(width(self.inst))
        self._popcount(self.src(read, 0), dst)

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
        """Leading zeros: every bit below the highest set one smeared to 1, then the zeros counted."""
        self._need_fits(width(self.inst))
        x = self.src(read, 0)
        for shift in (1, 2, 4, 8, 16):
            x = (self.op("or", x, (self.op("shr_u", x, (None, shift)), 0)), 0)
        self._popcount((self.op("xor", x, (None, MASK32)), 0), dst)

    def _op_brev(self, read, dst):
        """Bit reversal: swap neighbouring bits, pairs, nibbles, bytes, then the halves."""
        self._need_fits(width(self.inst))
        x = self.src(read, 0)
        for shift, mask in ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF)):
            down = self.op("and", (self.op("shr_u", x, (None, shift)), 0), (None, mask))
            up = self.op("shl", (self.op("and", x, (None, mask)), 0), (None, shift))
            x = (self.op("or", (down, 0), (up, 0)), 0)
        up = self.op("shl", x, (None, 16))
        self.op("or", (self.op("shr_u", x, (None, 16)), 0), (up, 0), dst=dst)

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
        inst = self.inst
        amount = read(sources(inst)[2])
        if not isinstance(amount, Const):
            raise unsupported(inst, "a funnel shift by a register")
        n = amount.value & 31 if "wrap" in inst.modifiers else min(amount.value & MASK32, 32)
        low, high = self.src(read, 0), self.src(read, 1)
        if n == 0:
            self.op("a", high if "l" in inst.modifiers else low, dst=dst)
            return
        if n == 32:
            self.op("a", low if "l" in inst.modifiers else high, dst=dst)
            return
        if "l" in inst.modifiers:
            up, down = self.op("shl", high, (None, n)), self.op("shr_u", low, (None, 32 - n))
        else:
            up, down = self.op("shl", high, (None, 32 - n)), self.op("shr_u", low, (None, n))
        self.op("or", (up, 0), (down, 0), dst=dst)

    def _op_prmt(self, read, dst):
        inst = self.inst
        selector = read(sources(inst)[2])
        if not isinstance(selector, Const) or len(inst.modifiers) != 1:
            raise unsupported(inst, "prmt with a selector held in a register, or a prmt mode")
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
