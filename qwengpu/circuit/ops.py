"""The ALU ops the circuit computes, and the class the registers stage decodes each into (``op_class``).

A launch whose program uses an op outside SUPPORTED_OPS, or divides by anything but an immediate 1..DIVISORS, is
refused before it starts (Device reads these from the backend).
"""
from __future__ import annotations

from ..isa import DIVISIONS, IMMEDIATE_DIVISORS, OPS

DIVISORS = IMMEDIATE_DIVISORS      # div / rem divide by an immediate 1..DIVISORS (defined in qwengpu.isa)
COMPARES = ("eq", "ne", "lt_s", "le_s", "gt_s", "ge_s", "lt_u", "le_u", "gt_u", "ge_u")
MINMAX = ("min_s", "max_s", "min_u", "max_u")
SHIFTS = ("shl", "shr_u", "shr_s")
BITWISE = ("and", "or", "xor")
SUPPORTED_OPS = ("a", "b", "add", "sub", "mul") + COMPARES + MINMAX + SHIFTS + BITWISE + DIVISIONS
OP_CLASSES = {"a": "a", "b": "b", "add": "add", "sub": "sub", "mul": "mul",
              **{op: op for op in SHIFTS + BITWISE + DIVISIONS},
              **{op: ("compare_signed" if op.endswith("_s") else "compare") for op in COMPARES + MINMAX}}


def op_code(name: str) -> int:
    """The op's number in a ROM row's op field."""
    return OPS[name][0]
