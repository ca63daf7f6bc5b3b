"""Arithmetic on 32-bit words held as eight one-hot nibbles, in SwiGLU lookup units.

An addition takes two MLP layers. The digit layer has one unit per (nibble, p, q): it writes the nibble's digit
(p + q) mod 16 and whether the nibble generates a carry (p + q >= 16) or propagates one (p + q = 15). The carry layer
writes each result nibble as its digit, plus one unit per carry path "nibble j generates, nibbles j+1 .. i-1
propagate" that moves the digit up by one: the paths into a nibble exclude each other, so exactly one fires or none.
Subtraction adds the complement with a carry in; a comparison reads the subtraction's carry out (and "all nibbles
propagate" for equality), with the top bits flipped for signed order.

- Layers 6-7 (``operands``): A = R[a] + imm_a, B = R[b] + imm_b, and the store address's low byte R[s] + imm_s.
- Layer 6: the lane's activity (its warp has it and its predicate holds).
- Layers 9-12 (``alu``): X = op(A, B) for the ops in compiler.SUPPORTED_OPS (add, sub, compares, min / max, and /
  or / xor, shifts).
"""
from __future__ import annotations

from ..isa import LANES, NONE
from .basis import Group
from .compiler import BITWISE, COMPARES, MINMAX, SHIFTS, Circuit
from .registers import WORD

IMMEDIATE_WORDS = {"a": 4, "b": 6, "s": 8}      # ROM word holding the low half of each immediate


def operands(circuit: Circuit) -> list[Group]:
    """Layers 6-7: the three operand adders, and the lane's activity (layer 6: the memory layer's pending-store table
    needs it). Returns the digit groups, to be freed once layer 8 has cleared them."""
    r = circuit.residual
    L = circuit.layers
    _activity(circuit)
    digits, results = [], {}
    for name, width in (("a", WORD), ("b", WORD), ("s", 2)):
        word = IMMEDIATE_WORDS[name]
        base = [r[f"{name}_base{i}"] for i in range(width)]
        imm = [r[f"rom{word + i // 4}_{i % 4}"] for i in range(width)]
        dig, gp = _digit_groups(circuit, name, width)
        digits += dig + gp
        _digit_units(L[6], f"{name} digits", base, imm, dig, gp, [])
        for group in base:
            clear(L[7], group)
        for group in base:
            r.free(group)
        out = [r.group(f"{name}{i}" if name != "s" else f"address{i}", range(16)) for i in range(width)]
        carry_units(L[7], f"{name} carries", dig, gp, out, [], None)
        results[name] = out
    for word in range(4, 10):
        for i in range(4):
            clear(L[7], r[f"rom{word}_{i}"])
            r.free(r[f"rom{word}_{i}"])
    for group in digits:
        clear(L[8], group)
    return digits


def alu(circuit: Circuit) -> None:
    """Layers 9-11: X = op(A, B) into x0..7, then the lane's activity."""
    r = circuit.residual
    L = circuit.layers
    op_class = r["op_class"]
    a = [r[f"a{i}"] for i in range(WORD)]
    b = [r[f"b{i}"] for i in range(WORD)]
    x = [r.group(f"x{i}", range(16)) for i in range(WORD)]
    dig, gp = _digit_groups(circuit, "alu", WORD)
    subtracts = ["sub", "compare", "compare_signed"]
    _digit_units(L[9], "add digits", a, b, dig, gp, [(op_class, "add")])
    _digit_units(L[9], "subtract digits", a[:-1], b[:-1], dig[:-1], gp[:-1], [(op_class, subtracts)], complement=True)
    _digit_units(L[9], "subtract top digit", a[-1:], b[-1:], dig[-1:], gp[-1:], [(op_class, ["sub", "compare"])],
                 complement=True)
    _digit_units(L[9], "signed compare top digit", a[-1:], b[-1:], dig[-1:], gp[-1:], [(op_class, "compare_signed")],
                 complement=True, flip_top=True)
    carry_units(L[10], "add", dig, gp, x, [(op_class, "add")], None)
    carry_units(L[10], "subtract", dig, gp, x, [(op_class, "sub")], [])
    order = r.group("order", (None, "eq", "gt"))      # None: A < B (no carry out of A - B)
    compare = [(op_class, ["compare", "compare_signed"])]
    L[10].unit("A == B", compare + [(g, "p") for g in gp], [(order, "eq")])
    for j in range(WORD):
        L[10].unit(f"A > B from nibble {j}", compare + [(gp[j], "g")] + [(g, "p") for g in gp[j + 1:]],
                   [(order, "gt")])

    # layer 11: the ops that select
    op = lambda name: circuit.field("op", _code(name))   # noqa: E731
    truth = {"eq": ["eq"], "ne": [None, "gt"], "lt": [None], "le": [None, "eq"], "gt": ["gt"], "ge": ["eq", "gt"]}
    for name in COMPARES:
        L[11].unit(f"{name} true", op(name) + [(order, truth[name.split("_")[0]])], [(x[0], 1)])
    for name, source in (("a", a), ("b", b)):
        for i in range(WORD):
            for v in range(1, 16):
                L[11].unit(f"x = {name}", op(name) + [(source[i], v)], [(x[i], v)])
    for name in MINMAX:
        a_wins = [None, "eq"] if name.startswith("min") else ["eq", "gt"]
        b_wins = ["gt"] if name.startswith("min") else [None]
        for source, wins in ((a, a_wins), (b, b_wins)):
            for i in range(WORD):
                for v in range(1, 16):
                    L[11].unit(f"{name}", op(name) + [(order, wins), (source[i], v)], [(x[i], v)])
    clear_all(L[11], dig + gp)
    for group in dig + gp:
        r.free(group)
    _bitwise(circuit, a, b, x)
    _shifts(circuit, a, b, x)


def _activity(circuit: Circuit) -> None:
    """Layer 6: is the lane active? It exists in the warp, and its predicate (if any) holds."""
    r = circuit.residual
    layer = circuit.layers[6]
    active = r.group("active", (False, True))
    lane, lanes = r["lane"], r["warp_lanes"]
    lo, hi = r["pred_lo_nonzero"], r["pred_hi_nonzero"]
    has_pred = [_high_nibble(circuit, "pred", 0)]           # a register 0..14, not NONE
    keep, negate = circuit.flag("pred_negate", False), circuit.flag("pred_negate", True)
    for n in range(LANES):
        exists = [(lane, n), (lanes, list(range(n + 1, LANES + 1)))]
        layer.unit(f"lane {n} runs unpredicated", exists + circuit.field("pred", NONE), [(active, True)])
        layer.unit(f"lane {n} predicate lo", exists + has_pred + [keep, (lo, True)], [(active, True)])
        layer.unit(f"lane {n} predicate hi", exists + has_pred + [keep, (lo, False), (hi, True)], [(active, True)])
        layer.unit(f"lane {n} predicate zero", exists + has_pred + [negate, (lo, False), (hi, False)],
                   [(active, True)])


def _bitwise(circuit: Circuit, a, b, x) -> None:
    """and / or / xor: one unit per (nibble, p, q), in layers 10, 11 and 12 (a full table each)."""
    op_class = circuit.residual["op_class"]
    functions = {"and": lambda p, q: p & q, "or": lambda p, q: p | q, "xor": lambda p, q: p ^ q}
    for layer, name in zip((10, 11, 12), BITWISE):
        for i in range(WORD):
            for p in range(16):
                for q in range(16):
                    v = functions[name](p, q)
                    if v:
                        circuit.layers[layer].unit(name, [(op_class, name), (a[i], p), (b[i], q)], [(x[i], v)])


def _shifts(circuit: Circuit, a, b, x) -> None:
    """shl / shr_u / shr_s by B: whole nibbles in layer 10, then bits in two parts that do not overlap (layer 11),
    joined in layer 12. A shift by 32 or more gives 0 (shl, shr_u) or the sign (shr_s), as the ISA table says."""
    r = circuit.residual
    L = circuit.layers
    op_class = r["op_class"]
    big = r.group("shift_out_of_range", (False, True))
    L[9].unit("shift >= 32", [(b[1], list(range(2, 16)))], [(big, True)])
    for k in range(2, WORD):
        L[9].unit("shift >= 32", [(b[1], [0, 1])] + [(b[j], 0) for j in range(2, k)] + [(b[k], list(range(1, 16)))],
                  [(big, True)])
    shifted = [r.group(f"shifted{i}", range(16)) for i in range(WORD)]
    part = [r.group(f"shift_part{i}", range(16)) for i in range(WORD)]
    carried = [r.group(f"shift_carried{i}", range(16)) for i in range(WORD)]
    right, left = (op_class, ["shr_u", "shr_s"]), (op_class, "shl")
    negative = (a[WORD - 1], list(range(8, 16)))
    in_range = (big, False)
    for k in range(WORD):                       # nibbles: k = amount >> 2 = (B0 >> 2) + 4 * B1
        by = [in_range, (b[0], list(range(4 * (k % 4), 4 * (k % 4) + 4))), (b[1], k // 4)]
        for i in range(WORD):
            for v in range(1, 16):
                if i + k < WORD:
                    L[10].unit("shift right by nibbles", [right] + by + [(a[i + k], v)], [(shifted[i], v)])
                if i - k >= 0:
                    L[10].unit("shift left by nibbles", [left] + by + [(a[i - k], v)], [(shifted[i], v)])
            if i + k >= WORD:
                L[10].unit("sign fill", [(op_class, "shr_s"), negative] + by, [(shifted[i], 15)])
    for s in range(4):                          # bits: s = amount & 3
        by = [in_range, (b[0], [s, s + 4, s + 8, s + 12])]
        for i in range(WORD):
            for v in range(1, 16):
                L[11].unit("shift right: own bits", [right] + by + [(shifted[i], v)], [(part[i], v >> s)])
                L[11].unit("shift left: own bits", [left] + by + [(shifted[i], v)], [(part[i], (v << s) & 15)])
                if s and i + 1 < WORD:
                    L[11].unit("shift right: bits from above", [right] + by + [(shifted[i + 1], v)],
                               [(carried[i], (v << (4 - s)) & 15)])
                if s and i >= 1:
                    L[11].unit("shift left: bits from below", [left] + by + [(shifted[i - 1], v)],
                               [(carried[i], v >> (4 - s))])
        if s:
            L[11].unit("sign bits from above", [(op_class, "shr_s"), negative] + by,
                       [(carried[WORD - 1], (15 << (4 - s)) & 15)])
    shifting = (op_class, list(SHIFTS))
    for i in range(WORD):
        for p in range(16):
            for q in range(16):
                if p | q and not p & q:
                    L[12].unit("shift joined", [shifting, (part[i], p), (carried[i], q)], [(x[i], p | q)])
    L[12].unit("shr_s by 32 or more", [(op_class, "shr_s"), (big, True), negative], [(x[i], 15) for i in range(WORD)])
    clear_all(L[11], shifted)
    clear_all(L[12], part + carried)
    for group in shifted + part + carried:
        r.free(group)


def _high_nibble(circuit: Circuit, field: str, value: int) -> tuple:
    from .compiler import FIELDS
    word, nibble, _ = FIELDS[field]
    return (circuit.residual[f"rom{word}_{nibble + 1}"], value)


def _code(name: str) -> int:
    from .compiler import op_code
    return op_code(name)


def _digit_groups(circuit: Circuit, name: str, width: int):
    r = circuit.residual
    dig = [r.group(f"{name}_digit{i}", range(16)) for i in range(width)]
    gp = [r.group(f"{name}_carry{i}", (None, "g", "p")) for i in range(width)]
    return dig, gp


def _digit_units(layer, name, left, right, dig, gp, when, complement=False, flip_top=False) -> None:
    for i, (p_group, q_group) in enumerate(zip(left, right)):
        for p in range(16):
            for q in range(16):
                pp, qq = (p ^ 8, q ^ 8) if flip_top else (p, q)
                total = pp + (15 - qq if complement else qq)
                moves = [(dig[i], total & 15)]
                moves.append((gp[i], "g" if total >= 16 else "p" if total == 15 else None))
                if all(m[1] == m[0].default for m in moves):
                    continue
                layer.unit(name, when + [(p_group, p), (q_group, q)], moves)


def carry_units(layer, name, dig, gp, out, when, carry_in) -> None:
    """Result nibbles = digits plus the incoming carry. carry_in: None, or [] (a constant carry into nibble 0)."""
    for i in range(len(dig)):
        paths = [[(gp[j], "g")] + [(g, "p") for g in gp[j + 1:i]] for j in range(i)]
        if carry_in is not None:
            paths.append(carry_in + [(g, "p") for g in gp[:i]])
        for v in range(16):
            if v:
                layer.unit(f"{name} nibble {i}", when + [(dig[i], v)], [(out[i], v)])
            for path in paths:
                layer.unit(f"{name} carry into {i}", when + path + [(dig[i], v)], [(out[i], (v + 1) & 15, v)])


def clear(layer, group: Group) -> None:
    """Units that move ``group`` back to its default, whatever slot it holds."""
    for slot in group.slots:
        if slot != group.default:
            layer.unit(f"clear {group.name}", [(group, slot)], [(group, group.default, slot)])


def clear_all(layer, groups) -> None:
    for group in groups:
        clear(layer, group)
