"""Multiplication (op mul: the low 32 bits of A * B) in the eight layers of plan.MULTIPLY, after the ALU.

Schoolbook on nibbles: A * B = sum over i + j <= 7 of a_i * b_j * 16^(i + j), each partial product a_i * b_j two
nibbles (lo, hi). B's nibbles (the rows) are taken in three steps, plan.MULTIPLY_STEPS; each step is two layers:

- products: one lookup unit per (i, j, a_i, b_j) writes the step's partial products as one-hot nibbles;
- accumulate: threshold units (``Layer.threshold``) add, for every column k, the accumulator's digit d_k, the carry
  c_(k-1) of the column below and the step's partial products of column k into S, and move d_k to S mod 16 and c_k to
  S div 16 (carry-save: no carry travels further than one column per step, so all columns work at once). The sum is
  linear in the one-hot nibbles, so a column costs two units per value S can take, not one per combination.

The last two layers add the carry-save pair, X = D + (C << 4), with the ALU's adder (digits, then carries) into x.
For every other op the partial products stay 0, so the accumulator and the adder write nothing.
"""
from __future__ import annotations

from . import plan
from .arithmetic import Operands, carry_units, clear, clear_all
from .basis import Group, Residual
from .layers import Layer
from .plan import MULTIPLY_STEPS as STEPS
from .vocabulary import WORD

LO_MAX, HI_MAX = 15, 14                     # largest lo and hi nibble of a product of two nibbles


def build(layers: list[Layer], residual: Residual, op_class: Group, operands: Operands,
          x: tuple[Group, ...]) -> list[Group]:
    """X = A * B for op mul. Returns the groups to free once the layers after plan.MULTIPLY have them back at their
    defaults."""
    r = residual
    *step_layers, digits, carries = plan.MULTIPLY.of(layers)
    mul = (op_class, "mul")
    a, b = operands.a, operands.b
    carry_max = _carry_bounds()
    digit = [r.group(f"product_digit{k}", range(16)) for k in range(WORD)]
    carry = [r.group(f"product_carry{k}", range(carry_max[k] + 1)) for k in range(WORD - 1)]

    for step, rows in enumerate(STEPS):
        products, accumulate = step_layers[2 * step:2 * step + 2]
        lo, hi = {}, {}
        for j in rows:
            for i in range(WORD - j):
                lo[i, j] = r.group(f"product_lo{i}_{j}", range(16))
                if i + j < WORD - 1:
                    hi[i, j] = r.group(f"product_hi{i}_{j}", range(16))
                for p in range(1, 16):
                    for q in range(1, 16):
                        moves = [(lo[i, j], p * q & 15)]
                        if (i, j) in hi:
                            moves.append((hi[i, j], p * q >> 4))
                        moves = [m for m in moves if m[1]]
                        if moves:
                            products.unit(f"a{i} * b{j}", [mul, (a[i], p), (b[j], q)], moves)
        for k in range(WORD):
            terms = [(lo[i, j], _values(lo[i, j], LO_MAX)) for (i, j) in lo if i + j == k]
            terms += [(hi[i, j], _values(hi[i, j], HI_MAX)) for (i, j) in hi if i + j == k - 1]
            if step:                                    # the accumulator so far: moved in place, so clear it too
                terms.append((digit[k], _values(digit[k])))
                clear(accumulate, digit[k])
                if k:
                    terms.append((carry[k - 1], _values(carry[k - 1])))
                    clear(accumulate, carry[k - 1])
            largest = sum(max(weights.values()) for _, weights in terms)
            for bound in range(1, largest + 1):
                moves = [(digit[k], bound % 16, (bound - 1) % 16)]
                if bound % 16 == 0 and k < WORD - 1:    # column 7's carry leaves the word
                    moves.append((carry[k], bound // 16, bound // 16 - 1))
                accumulate.threshold(f"column {k} reaches {bound}", terms, bound, moves)
        clear_all(accumulate, list(lo.values()) + list(hi.values()))
        for group in list(lo.values()) + list(hi.values()):
            r.free(group)

    # X = D + (C << 4): digits and generate / propagate per column, then the carries, as in the ALU's adder
    sums = [r.group(f"product_sum{k}", range(16)) for k in range(WORD)]
    gp = [r.group(f"product_sum_carry{k}", (None, "g", "p")) for k in range(WORD)]
    for k in range(WORD):
        for p in range(16):
            for q in (carry[k - 1].slots if k else (0,)):
                total = p + q
                moves = [(sums[k], total & 15), (gp[k], "g" if total >= 16 else "p" if total == 15 else None)]
                moves = [m for m in moves if m[1] != m[0].default]
                if moves:
                    digits.unit(f"product column {k}", [(digit[k], p)] + ([(carry[k - 1], q)] if k else []), moves)
    clear_all(digits, digit + carry)
    carry_units(carries, "product", sums, gp, x, [], None)
    clear_all(carries, sums + gp)
    return digit + carry + sums + gp


def _values(group, top: int = 15) -> dict:
    """A threshold term's weights: each slot counts its own value (slots above ``top`` never hold)."""
    return {v: v for v in group.slots if v <= top}


def _carry_bounds() -> list[int]:
    """The largest carry each column's accumulator can hold (column 7 has none)."""
    carry_max = []
    for k in range(WORD - 1):
        largest = 0
        for step, rows in enumerate(STEPS):
            lo = sum(1 for j in rows if 0 <= k - j)
            hi = sum(1 for j in rows if 0 <= k - 1 - j)
            below = carry_max[k - 1] if step and k else 0
            largest = max(largest, (15 if step else 0) + below + LO_MAX * lo + HI_MAX * hi)
        carry_max.append(largest // 16)
    return carry_max
