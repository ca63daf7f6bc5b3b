"""What a PTX integer instruction computes on known values: the constant folder of the lowering.

``fold(inst, values)`` takes the source values (as unsigned integers of the instruction's source width) and returns
the destination's value (unsigned, at the destination's width), or None when the instruction is not one the lowering
folds. Predicates are 0 or 1. This is PTX's meaning, written from the PTX ISA manual; the machine's own arithmetic is
qwengpu.isa.alu, and the emitter builds each instruction from those ops.

Example::

    >>> from qwengpu.ptx import Instruction
    >>> fold(Instruction("add.s32", (), None, False, 1, "add.s32"), [0xFFFFFFFF, 2])
    1
"""
from __future__ import annotations

from ..ptx import Instruction

CMP = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"}


def bits_of(mod: str) -> int | None:
    if len(mod) >= 2 and mod[0] in "usb" and mod[1:].isdigit():
        return int(mod[1:])
    return None


def declared_bits(registers: dict, name: str) -> int:
    """A register's declared width, by its name's prefix (``%rd7``: ``%rd``'s ``.b64``); 1 for a predicate, 32
    where the kernel declares none (a special register) or a float type."""
    typ = registers.get(name.rstrip("0123456789")) or registers.get(name, "b32")
    return 1 if typ == "pred" else bits_of(typ) or 32


def types(inst: Instruction) -> list[str]:
    """The type modifiers in order: ['u32'] for add.u32, ['u64', 'u32'] for cvt.u64.u32."""
    return [m for m in inst.modifiers if bits_of(m) is not None or m == "pred"]


def to_signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def compare(cmp: str, a: int, b: int, bits: int, is_signed: bool) -> int:
    if cmp in ("lo", "ls", "hi", "hs"):
        cmp, is_signed = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}[cmp], False
    if is_signed:
        a, b = to_signed(a, bits), to_signed(b, bits)
    else:
        a, b = a & ((1 << bits) - 1), b & ((1 << bits) - 1)
    return int({"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[cmp])


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def bfe(a: int, pos: int, length: int, bits: int, is_signed: bool) -> int:
    pos, length = pos & 0xFF, length & 0xFF
    mask = (1 << bits) - 1
    if length == 0:
        return 0
    field = (a >> pos) if pos < bits else 0
    field &= (1 << length) - 1 if length < bits else mask
    if is_signed:
        sign_bit = min(pos + length - 1, bits - 1)
        sign = (a >> sign_bit) & 1
        if length < bits and sign:
            field |= mask & ~((1 << length) - 1)
        elif pos >= bits and sign:
            field = mask
    return field & mask


def bfi(a: int, b: int, pos: int, length: int, bits: int) -> int:
    pos, length = pos & 0xFF, length & 0xFF
    mask = (1 << bits) - 1
    if length == 0 or pos >= bits:
        return b & mask
    field = ((1 << length) - 1) << pos
    return ((b & ~field) | ((a << pos) & field)) & mask


def prmt(a: int, b: int, selector: int) -> int:
    data = (a & 0xFFFFFFFF) | ((b & 0xFFFFFFFF) << 32)
    out = 0
    for i in range(4):
        sel = (selector >> (4 * i)) & 0xF
        byte = (data >> (8 * (sel & 7))) & 0xFF
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def fns(mask: int, base: int, offset: int) -> int | None:
    """PTX's ``fns.b32`` (CUDA's ``__fns``): the position of the |offset|-th set bit of ``mask`` from bit ``base`` on
    (upward for offset > 0, downward below 0; offset 0: base itself, if that bit is set), 0xffffffff where there is
    none. None for a base over 31, which PTX leaves undefined."""
    if base > 31:
        return None
    if offset == 0:
        return base if mask >> base & 1 else 0xFFFFFFFF
    step = 1 if offset > 0 else -1
    found = [p for p in range(base, 32 if step > 0 else -1, step) if mask >> p & 1]
    return found[abs(offset) - 1] if abs(offset) <= len(found) else 0xFFFFFFFF


def _lane(word: int, i: int, bits: int, is_signed: bool) -> int:
    """Lane i of ``bits`` bits of a word, as a signed or an unsigned integer."""
    v = (word >> (bits * i)) & ((1 << bits) - 1)
    return to_signed(v, bits) if is_signed else v


def _packed_lanes(base: str, is_signed: bool, relu: bool, values: list[int]) -> int:
    """add / sub / min / max of two 16-bit lanes a word (.u16x2 / .s16x2), each lane on its own; with .relu a
    negative lane is 0."""
    result = 0
    for lane in range(2):
        x, y = (_lane(v, lane, 16, is_signed) for v in values)
        r = {"add": x + y, "sub": x - y, "min": min(x, y), "max": max(x, y)}[base]
        r = max(r, 0) if relu else r
        result |= (r & 0xFFFF) << (16 * lane)
    return result


def _absolute_differences(lanes: int, inst: Instruction, values: list[int]) -> int | None:
    """PTX's vabsdiff2 / vabsdiff4 with the default lane selectors and mask: |a - b| of each lane (.s32: signed
    lanes), in its lane, or with .add their sum plus c."""
    if not set(inst.modifiers) <= {"u32", "s32", "add"} or len(set(inst.modifiers) - {"add"}) != 1:
        return None
    bits = 32 // lanes
    parts = []
    for lane in range(lanes):
        x, y = (_lane(v, lane, bits, "s32" in inst.modifiers) for v in values[:2])
        parts.append(abs(x - y))
    if "add" in inst.modifiers:
        return (sum(parts) + values[2]) & 0xFFFFFFFF
    return sum((p & ((1 << bits) - 1)) << (bits * lane) for lane, p in enumerate(parts))


def _dot_product(base: str, mods: tuple, values: list[int]) -> int | None:
    """dp4a: c + the products of a's and b's bytes; dp2a: c + a's 16-bit halves times b's bytes 0, 1 (.lo) or 2,
    3 (.hi); each part signed or unsigned as its operand's type."""
    typed = [m for m in mods if m in ("u32", "s32")]
    if len(typed) != 2:
        return None
    a_bits = 8 if base == "dp4a" else 16
    first = 2 if "hi" in mods else 0
    total = values[2]
    for i in range(4 if base == "dp4a" else 2):
        x = _lane(values[0], i, a_bits, typed[0] == "s32")
        y = _lane(values[1], i if base == "dp4a" else first + i, 8, typed[1] == "s32")
        total += x * y
    return total & 0xFFFFFFFF


def fold(inst: Instruction, values: list[int]) -> int | None:
    """The destination value of ``inst`` given its source values; None for what the folder does not know."""
    base, mods = inst.base, inst.modifiers
    lanes = [m for m in mods if m in ("u16x2", "s16x2")]
    if lanes and set(mods) <= {lanes[0], "relu"} and base in ("add", "sub", "min", "max") and len(values) == 2:
        return _packed_lanes(base, lanes[0][0] == "s", "relu" in mods, values)
    if base in ("dp4a", "dp2a") and len(values) == 3:
        return _dot_product(base, inst.modifiers, values)
    if base in ("vabsdiff2", "vabsdiff4") and len(values) == 3:
        return _absolute_differences(int(base[-1]), inst, values)
    if base == "fns" and len(values) == 3:
        return fns(values[0] & 0xFFFFFFFF, values[1] & 0xFFFFFFFF, to_signed(values[2] & 0xFFFFFFFF, 32))
    typed = types(inst)
    if not typed or not values:
        return None
    bits = 1 if typed[-1] == "pred" else bits_of(typed[-1])
    mask = (1 << bits) - 1
    is_signed = typed[-1].startswith("s")
    v = [x & ((1 << 64) - 1) for x in values]
    if base in ("mov", "cvta"):
        return int(bool(v[0])) if bits == 1 else v[0] & mask
    if base == "cvt":
        if len(typed) != 2 or "pred" in typed:
            return None
        dst_bits, src_bits = bits_of(typed[0]), bits_of(typed[1])
        x = v[0] & ((1 << src_bits) - 1)
        if typed[1].startswith("s"):
            x = to_signed(x, src_bits)
        return x & ((1 << dst_bits) - 1)
    if base == "setp":
        cmp = mods[0]
        if cmp not in CMP or len(mods) != 2:
            return None
        return compare(cmp, v[0], v[1], bits, is_signed)
    if base == "selp":
        return (v[0] if v[2] else v[1]) & mask
    if base == "slct":
        c = to_signed(v[2], 32)
        return (v[0] if c >= 0 else v[1]) & mask
    if bits == 1:                                               # predicate logic
        table = {"and": lambda: v[0] & v[1], "or": lambda: v[0] | v[1], "xor": lambda: v[0] ^ v[1],
                 "not": lambda: 1 - (v[0] & 1)}
        return table[base]() & 1 if base in table else None
    a = v[0] & mask
    sa = to_signed(a, bits)
    if base in ("not", "neg", "abs", "popc", "clz", "brev", "cnot"):
        return {"not": lambda: ~a, "neg": lambda: -a, "abs": lambda: abs(sa), "popc": lambda: bin(a).count("1"),
                "clz": lambda: bits - a.bit_length(), "cnot": lambda: int(a == 0),
                "brev": lambda: int(format(a, f"0{bits}b")[::-1], 2)}[base]() & (mask if base not in (
                    "popc", "clz") else 0xFFFFFFFF)
    if base == "bfind":                       # the highest bit that differs from the sign; none: all ones
        highest = ((sa ^ (sa >> (bits - 1))) if is_signed else a).bit_length() - 1
        if highest < 0:
            return mask
        return bits - 1 - highest if "shiftamt" in mods else highest
    b = v[1] & mask if len(v) > 1 else 0
    sb = to_signed(b, bits)
    if base == "sad":
        return (abs(sa - sb) if is_signed else abs(a - b)) + v[2] & mask
    if base == "add":
        return (a + b) & mask
    if base == "sub":
        return (a - b) & mask
    if base in ("mul", "mad"):
        x, y = (sa, sb) if is_signed else (a, b)
        product = x * y
        if "hi" in mods:
            result = (product >> bits) & mask
        elif "wide" in mods:
            result = product & ((1 << (2 * bits)) - 1)
        else:
            result = product & mask
        if base == "mad":
            out_bits = 2 * bits if "wide" in mods else bits
            result = (result + v[2]) & ((1 << out_bits) - 1)
        return result
    if base in ("and", "or", "xor"):
        return {"and": a & b, "or": a | b, "xor": a ^ b}[base]
    if base == "shl":
        return (a << b) & mask if b < bits else 0
    if base == "shr":
        if is_signed:
            return (sa >> min(b, bits - 1)) & mask
        return a >> b if b < bits else 0
    if base in ("min", "max"):
        x, y = (sa, sb) if is_signed else (a, b)
        r = min(x, y) if base == "min" else max(x, y)
        return (max(r, 0) if "relu" in mods else r) & mask       # .relu: a negative result is 0
    if base in ("div", "rem"):
        if b == 0:
            return mask if base == "div" else a
        if is_signed:
            q = _trunc_div(sa, sb)
            return (q if base == "div" else sa - q * sb) & mask
        return a // b if base == "div" else a % b
    if base == "bfe":
        return bfe(a, v[1], v[2], bits, is_signed)
    if base == "bfi":
        return bfi(a, b, v[2], v[3], bits)
    if base == "prmt":
        return prmt(a, b, v[2])
    if base == "lop3":                          # the LUT's bit (a << 2 | b << 1 | c) for each bit position
        if len(v) != 4 or "b32" not in mods:
            return None
        a, b, c, lut = v
        result = 0
        for row in range(8):
            if lut >> row & 1:
                result |= (a if row & 4 else ~a) & (b if row & 2 else ~b) & (c if row & 1 else ~c)
        return result & mask
    if base == "shf":
        n = v[2] & 0xFFFFFFFF
        n = n & 31 if "wrap" in mods else min(n, 32)
        wide = (b << 32) | a                          # b is the high word, a the low word
        if "l" in mods:
            return ((wide << n) >> 32) & 0xFFFFFFFF
        return (wide >> n) & 0xFFFFFFFF
    return None
