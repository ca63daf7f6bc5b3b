"""Division by a small constant (div_u, div_s, rem_u, rem_s with B an immediate in 1..DIVISORS) in the three layers of
plan.DIVIDE.

C's truncating division is floor division of a shifted dividend T (36 bits: a top digit t and eight nibbles n):

- A >= 0 or unsigned: T = A. The quotient is floor(T / d), the remainder T mod d.
- A < 0 (signed): trunc(A / d) = floor((A + d - 1) / d), which mod 2^32 is floor(T / d) with
  T = (A + d - 1 mod 2^32) + (d - 1 + carry out) * 2^32; the remainder is (T mod d) - (d - 1).

Long division from the top nibble: q_i = (16 r_(i+1) + n_i) div d, where r_i = (T >> 4i) mod d. The remainders
are linear in the one-hot nibbles mod d, so threshold units (``Layer.threshold``) find them all at once, for the
odd moduli 3, 5 and 7; powers of two read a nibble's low bits, and 6 = 2 * 3 combines both.

- DIVIDE[0]: the dividend: n = A, or A + d - 1 with its carries for a negative signed A; the top digit t.
- DIVIDE[1]: the remainders r_1 .. r_7 mod 3, 5 and 7 (r_8 = t mod d).
- DIVIDE[2]: the quotient nibbles, and the remainder word, into x.

A divisor outside 1..DIVISORS, or one from a register, is refused before a launch starts (Device), so B = d.
"""
from __future__ import annotations

from . import plan
from .arithmetic import Operands, clear_all
from .basis import Group, Residual
from .layers import Layer
from .ops import DIVISORS
from .vocabulary import WORD

# the odd parts of the divisors (3, 5, 7): their remainders are threshold sums; 6 = 2 * 3 uses a nibble's low bit
MODULI = sorted({d // (d & -d) for d in range(1, DIVISORS + 1)} - {1})


def build(layers: list[Layer], residual: Residual, op_class: Group, operands: Operands,
          x: tuple[Group, ...]) -> list[Group]:
    """X = A div / rem B for an immediate B. Returns the groups to free once the layers after plan.DIVIDE have them
    back at their defaults."""
    r = residual
    dividend, remainders, digits = plan.DIVIDE.of(layers)
    a, b0 = operands.a, operands.b[0]
    n = [r.group(f"dividend{i}", range(16)) for i in range(WORD)]
    top = r.group("dividend_top", range(DIVISORS + 1))
    signed, unsigned = (op_class, ["div_s", "rem_s"]), (op_class, ["div_u", "rem_u"])
    negative, positive = (a[WORD - 1], list(range(8, 16))), (a[WORD - 1], list(range(8)))

    # -- the dividend -----------------------------------------------------------------------------------------------
    for i in range(WORD):
        for v in range(1, 16):
            dividend.unit("dividend = A", [unsigned, (a[i], v)], [(n[i], v)])
            dividend.unit("dividend = A", [signed, positive, (a[i], v)], [(n[i], v)])
    for d in range(1, DIVISORS + 1):
        by = [signed, negative, (b0, d)]
        for v in range(16):                     # nibble 0 + d - 1, and whether it carries
            if (v + d - 1) & 15:
                dividend.unit(f"A + {d - 1}: nibble 0", by + [(a[0], v)], [(n[0], (v + d - 1) & 15)])
        carries = (a[0], list(range(17 - d, 16)))
        for i in range(1, WORD):
            for v in range(16):
                if v:
                    dividend.unit(f"A + {d - 1}: nibble {i}", by + [(a[i], v)], [(n[i], v)])
                if d > 1:
                    dividend.unit(f"A + {d - 1}: carry into {i}", by + [carries] + [(a[j], 15) for j in range(1, i)]
                                  + [(a[i], v)], [(n[i], (v + 1) & 15, v)])
        if d > 1:
            dividend.unit(f"top digit {d - 1}", by, [(top, d - 1)])
            dividend.unit("top digit carried", by + [carries] + [(a[j], 15) for j in range(1, WORD)],
                          [(top, d, d - 1)])

    # -- the remainders r_i = (T >> 4i) mod m, i = 1..7 -----------------------------------------------------------
    residue = {}
    for m in MODULI:
        for i in range(1, WORD):
            group = residue[m, i] = r.group(f"dividend_mod{m}_{i}", range(m))
            terms = [(n[k], {v: v * pow(16, k - i, m) for v in range(16)}) for k in range(i, WORD)]
            terms.append((top, {v: v * pow(16, WORD - i, m) for v in top.slots}))
            largest = sum(max(weights.values()) for _, weights in terms)
            for bound in range(1, largest + 1):
                remainders.threshold(f"mod {m} of T >> {4 * i} reaches {bound}", terms, bound,
                                     [(group, bound % m, (bound - 1) % m)])

    # -- quotient and remainder words -------------------------------------------------------------------------------
    def remainder_is(d: int, i: int, value: int) -> list[tuple]:
        """Conditions that r_i = (T >> 4i) mod d is ``value`` (i = 1..8)."""
        if d == 1:
            return []
        if i == WORD:
            return [(top, [t for t in top.slots if t % d == value])]
        low = d & -d                            # the power of two in d: 16 is 0 mod it, so n_i's low bits decide
        conditions = [(n[i], [v for v in range(16) if v % low == value % low])] if low > 1 else []
        if d // low > 1:
            conditions.append((residue[d // low, i], value % (d // low)))
        return conditions

    for d in range(1, DIVISORS + 1):
        for i in range(WORD):
            for rest in range(d):
                for v in range(16):
                    q = (16 * rest + v) // d
                    if q:
                        digits.unit(f"quotient nibble {i} by {d}", [(op_class, ["div_u", "div_s"]), (b0, d),
                                    (n[i], v)] + remainder_is(d, i + 1, rest), [(x[i], q)])
        for rest in range(d):
            for v in range(16):
                left = (16 * rest + v) % d
                when = [(b0, d), (n[0], v)] + remainder_is(d, 1, rest)
                if left:
                    digits.unit(f"remainder by {d}", [(op_class, "rem_u")] + when, [(x[0], left)])
                    digits.unit(f"remainder by {d}", [(op_class, "rem_s"), positive] + when, [(x[0], left)])
                if left != d - 1:               # negative: (T mod d) - (d - 1) as a 32-bit word
                    word = (left - (d - 1)) & 0xFFFFFFFF
                    digits.unit(f"negative remainder by {d}", [(op_class, "rem_s"), negative] + when,
                                [(x[k], (word >> 4 * k) & 15) for k in range(WORD) if (word >> 4 * k) & 15])
    groups = n + [top] + list(residue.values())
    clear_all(digits, groups)
    return groups
