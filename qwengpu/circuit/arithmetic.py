"""Arithmetic on 32-bit words held as eight one-hot nibbles, in SwiGLU lookup units.

An addition takes two MLP layers. The digit layer has one unit per (nibble, p, q): it writes the nibble's digit
(p + q) mod 16 and whether the nibble generates a carry (p + q >= 16) or propagates one (p + q = 15). The carry layer
writes each result nibble as its digit, plus one unit per carry path "nibble j generates, nibbles j+1 .. i-1
propagate" that moves the digit up by one: the paths into a nibble exclude each other, so exactly one fires or none.
Subtraction adds the complement with a carry in; a comparison reads the subtraction's carry out (and "all nibbles
propagate" for equality), with the top bits flipped for signed order.

- ``operands`` (plan.ACTIVITY, plan.OPERANDS): the lane's activity (its warp has it and its predicate holds), then
  A = R[a] + imm_a, B = R[b] + imm_b, and the store address's low byte R[s] + imm_s.
- ``alu`` (plan.ALU): X = op(A, B) for the ops in qwengpu.circuit.ops.SUPPORTED_OPS but mul and the divisions
  (add, sub, compares, min / max, and / or / xor, shifts).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..isa import LANES, NONE
from . import plan
from .basis import Group, Residual
from .control import Control, Rom
from .layers import Layer
from .ops import BITWISE, COMPARES, MINMAX, SHIFTS, op_code
from .registers import Registers
from .vocabulary import WORD


@dataclass(frozen=True)
class Operands:
    """The lane's operands and activity (the memory stage replaces A by a loaded word where the block loads)."""
    a: tuple[Group, ...]            # A = R[a] + imm_a, eight nibbles
    b: tuple[Group, ...]            # B = R[b] + imm_b, eight nibbles
    address: tuple[Group, ...]      # the store address's low byte, R[s] + imm_s, two nibbles
    active: Group                   # the lane runs: its warp has it and its predicate holds


def operands(layers: list[Layer], residual: Residual, control: Control, registers: Registers
             ) -> tuple[Operands, list[Group]]:
    """The lane's activity (first: the memory layer's pending-store table needs it) and the three operand adders.
    Returns the operands and the adders' digit groups, to be freed once the memory stage has placed its groups
    (the last OPERANDS layer clears them)."""
    r = residual
    digit_layer, carry_layer, clear_layer = plan.OPERANDS.of(layers)
    active = _activity(layers, r, control, registers)
    digits, results = [], {}
    for name, base, immediate in (("a", registers.a, 0), ("b", registers.b, 1), ("s", registers.store, 2)):
        width = len(base)
        imm = control.rom.immediate(immediate)[:width]
        dig, gp = _digit_groups(r, name, width)
        digits += dig + gp
        _digit_units(digit_layer, f"{name} digits", base, imm, dig, gp, [])
        for group in base:
            clear(carry_layer, group)
        for group in base:
            r.free(group)
        out = tuple(r.group(f"{name}{i}" if name != "s" else f"address{i}", range(16)) for i in range(width))
        carry_units(carry_layer, f"{name} carries", dig, gp, out, [], None)
        results[name] = out
    for index in range(3):
        for group in control.rom.immediate(index):
            clear(carry_layer, group)
            r.free(group)
    for group in digits:
        clear(clear_layer, group)
    return Operands(results["a"], results["b"], results["s"], active), digits


def alu(layers: list[Layer], residual: Residual, rom: Rom, op_class: Group, operands: Operands) -> tuple[Group, ...]:
    """X = op(A, B): returns X's eight nibbles (the multiplier and the divider write into them too)."""
    r = residual
    digit_layer, carry_layer, select_layer, _ = plan.ALU.of(layers)
    a, b = operands.a, operands.b
    x = tuple(r.group(f"x{i}", range(16)) for i in range(WORD))
    dig, gp = _digit_groups(r, "alu", WORD)
    subtracts = ["sub", "compare", "compare_signed"]
    _digit_units(digit_layer, "add digits", a, b, dig, gp, [(op_class, "add")])
    _digit_units(digit_layer, "subtract digits", a[:-1], b[:-1], dig[:-1], gp[:-1], [(op_class, subtracts)],
                 complement=True)
    _digit_units(digit_layer, "subtract top digit", a[-1:], b[-1:], dig[-1:], gp[-1:],
                 [(op_class, ["sub", "compare"])], complement=True)
    _digit_units(digit_layer, "signed compare top digit", a[-1:], b[-1:], dig[-1:], gp[-1:],
                 [(op_class, "compare_signed")], complement=True, flip_top=True)
    carry_units(carry_layer, "add", dig, gp, x, [(op_class, "add")], None)
    carry_units(carry_layer, "subtract", dig, gp, x, [(op_class, "sub")], [])
    order = r.group("order", (None, "eq", "gt"))      # None: A < B (no carry out of A - B)
    compare = [(op_class, ["compare", "compare_signed"])]
    carry_layer.unit("A == B", compare + [(g, "p") for g in gp], [(order, "eq")])
    for j in range(WORD):
        carry_layer.unit(f"A > B from nibble {j}", compare + [(gp[j], "g")] + [(g, "p") for g in gp[j + 1:]],
                         [(order, "gt")])

    # the ops that select
    def op(name):
        return rom.field("op", op_code(name))
    truth = {"eq": ["eq"], "ne": [None, "gt"], "lt": [None], "le": [None, "eq"], "gt": ["gt"], "ge": ["eq", "gt"]}
    for name in COMPARES:
        select_layer.unit(f"{name} true", op(name) + [(order, truth[name.split("_")[0]])], [(x[0], 1)])
    for name, source in (("a", a), ("b", b)):
        for i in range(WORD):
            for v in range(1, 16):
                select_layer.unit(f"x = {name}", op(name) + [(source[i], v)], [(x[i], v)])
    for name in MINMAX:
        a_wins = [None, "eq"] if name.startswith("min") else ["eq", "gt"]
        b_wins = ["gt"] if name.startswith("min") else [None]
        for source, wins in ((a, a_wins), (b, b_wins)):
            for i in range(WORD):
                for v in range(1, 16):
                    select_layer.unit(f"{name}", op(name) + [(order, wins), (source[i], v)], [(x[i], v)])
    clear_all(select_layer, dig + gp)
    for group in dig + gp:
        r.free(group)
    _bitwise(layers, op_class, a, b, x)
    _shifts(layers, r, op_class, a, b, x)
    return x


def _activity(layers: list[Layer], r: Residual, control: Control, registers: Registers) -> Group:
    """Is the lane active? It exists in the warp, and its predicate (if any) holds."""
    (layer,) = plan.ACTIVITY.of(layers)
    rom = control.rom
    active = r.group("active", (False, True))
    lane, lanes = control.lane, control.warp_lanes
    lo, hi = registers.pred_nonzero
    has_pred = [rom.high_nibble("pred", 0)]             # a register 0..14, not NONE
    keep, negate = rom.flag("pred_negate", False), rom.flag("pred_negate", True)
    for n in range(LANES):
        exists = [(lane, n), (lanes, list(range(n + 1, LANES + 1)))]
        layer.unit(f"lane {n} runs unpredicated", exists + rom.field("pred", NONE), [(active, True)])
        layer.unit(f"lane {n} predicate lo", exists + has_pred + [keep, (lo, True)], [(active, True)])
        layer.unit(f"lane {n} predicate hi", exists + has_pred + [keep, (lo, False), (hi, True)], [(active, True)])
        layer.unit(f"lane {n} predicate zero", exists + has_pred + [negate, (lo, False), (hi, False)],
                   [(active, True)])
    return active


def _bitwise(layers: list[Layer], op_class: Group, a, b, x) -> None:
    """and / or / xor: one unit per (nibble, p, q), in the ALU's last three layers (a full table each)."""
    functions = {"and": lambda p, q: p & q, "or": lambda p, q: p | q, "xor": lambda p, q: p ^ q}
    for layer, name in zip(plan.ALU.of(layers)[1:], BITWISE):
        for i in range(WORD):
            for p in range(16):
                for q in range(16):
                    v = functions[name](p, q)
                    if v:
                        layer.unit(name, [(op_class, name), (a[i], p), (b[i], q)], [(x[i], v)])


def _shifts(layers: list[Layer], r: Residual, op_class: Group, a, b, x) -> None:
    """shl / shr_u / shr_s by B: the range in the ALU's first layer, whole nibbles in its second, then bits in two
    parts that do not overlap (third), joined in the fourth. A shift by 32 or more gives 0 (shl, shr_u) or the sign
    (shr_s), as the ISA table says."""
    range_layer, nibble_layer, bit_layer, join_layer = plan.ALU.of(layers)
    big = r.group("shift_out_of_range", (False, True))
    range_layer.unit("shift >= 32", [(b[1], list(range(2, 16)))], [(big, True)])
    for k in range(2, WORD):
        range_layer.unit("shift >= 32", [(b[1], [0, 1])] + [(b[j], 0) for j in range(2, k)] +
                         [(b[k], list(range(1, 16)))], [(big, True)])
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
                    nibble_layer.unit("shift right by nibbles", [right] + by + [(a[i + k], v)], [(shifted[i], v)])
                if i - k >= 0:
                    nibble_layer.unit("shift left by nibbles", [left] + by + [(a[i - k], v)], [(shifted[i], v)])
            if i + k >= WORD:
                nibble_layer.unit("sign fill", [(op_class, "shr_s"), negative] + by, [(shifted[i], 15)])
    for s in range(4):                          # bits: s = amount & 3
        by = [in_range, (b[0], [s, s + 4, s + 8, s + 12])]
        for i in range(WORD):
            for v in range(1, 16):
                bit_layer.unit("shift right: own bits", [right] + by + [(shifted[i], v)], [(part[i], v >> s)])
                bit_layer.unit("shift left: own bits", [left] + by + [(shifted[i], v)], [(part[i], (v << s) & 15)])
                if s and i + 1 < WORD:
                    bit_layer.unit("shift right: bits from above", [right] + by + [(shifted[i + 1], v)],
                                   [(carried[i], (v << (4 - s)) & 15)])
                if s and i >= 1:
                    bit_layer.unit("shift left: bits from below", [left] + by + [(shifted[i - 1], v)],
                                   [(carried[i], v >> (4 - s))])
        if s:
            bit_layer.unit("sign bits from above", [(op_class, "shr_s"), negative] + by,
                           [(carried[WORD - 1], (15 << (4 - s)) & 15)])
    shifting = (op_class, list(SHIFTS))
    for i in range(WORD):
        for p in range(16):
            for q in range(16):
                if p | q and not p & q:
                    join_layer.unit("shift joined", [shifting, (part[i], p), (carried[i], q)], [(x[i], p | q)])
    join_layer.unit("shr_s by 32 or more", [(op_class, "shr_s"), (big, True), negative],
                    [(x[i], 15) for i in range(WORD)])
    clear_all(bit_layer, shifted)
    clear_all(join_layer, part + carried)
    for group in shifted + part + carried:
        r.free(group)


def _digit_groups(r: Residual, name: str, width: int):
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
