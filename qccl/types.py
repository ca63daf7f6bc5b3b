"""Reduction ops and data types, with NCCL's numbering (ncclRedOp_t, ncclDataType_t)."""
from __future__ import annotations

from enum import IntEnum

import numpy as np

from .errors import InvalidArgument


class _Named(IntEnum):
    """NCCL's number; printed as its lower-case name."""

    def __str__(self) -> str:
        return self.name.lower()


class RedOp(_Named):
    """ncclRedOp_t."""
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


SUM, PROD, MAX, MIN, AVG = RedOp.SUM, RedOp.PROD, RedOp.MAX, RedOp.MIN, RedOp.AVG

_OP_NAMES = {"sum": SUM, "prod": PROD, "product": PROD, "max": MAX, "min": MIN, "avg": AVG, "mean": AVG}


def red_op(op) -> RedOp:
    """An op given as a RedOp, its NCCL number or its name ('sum', 'prod', 'max', 'min', 'avg')."""
    if isinstance(op, RedOp):
        return op
    if isinstance(op, str) and op.lower() in _OP_NAMES:
        return _OP_NAMES[op.lower()]
    if isinstance(op, (int, np.integer)) and not isinstance(op, bool) and int(op) in RedOp._value2member_map_:
        return RedOp(int(op))
    name = getattr(op, "name", None)        # torch.distributed.ReduceOp and friends
    if isinstance(name, str) and name.lower() in _OP_NAMES:
        return _OP_NAMES[name.lower()]
    raise InvalidArgument(f"invalid reduction op {op!r} (ops are sum, prod, max, min, avg)")


class DataType(_Named):
    """ncclDataType_t."""
    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT8E4M3 = 10
    FLOAT8E5M2 = 11


_NUMPY = {"int8": DataType.INT8, "uint8": DataType.UINT8, "int32": DataType.INT32, "uint32": DataType.UINT32,
          "int64": DataType.INT64, "uint64": DataType.UINT64, "float16": DataType.FLOAT16,
          "float32": DataType.FLOAT32, "float64": DataType.FLOAT64, "bfloat16": DataType.BFLOAT16}


def data_type(dtype) -> DataType | str:
    """NCCL's data type for a numpy / torch dtype; the dtype's own name when NCCL has none (e.g. 'int16')."""
    name = str(dtype).replace("torch.", "")
    return _NUMPY.get(name, name)
