"""Reduction ops and data types, with NCCL's numbering (ncclRedOp_t, ncclDataType_t).

Wherever qccl takes an op it takes a :class:`RedOp`, NCCL's number or a name; wherever it takes a data type, a
:class:`DataType`, NCCL's number, a name, or a numpy / torch dtype::

    >>> red_op("max"), red_op(2), data_type(7), data_type("bf16")
    (<RedOp.MAX: 2>, <RedOp.MAX: 2>, <DataType.FLOAT32: 7>, <DataType.BFLOAT16: 9>)
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np

from .errors import InvalidArgument


class _Named(IntEnum):
    """NCCL's number; printed as its lower-case name."""

    def __str__(self) -> str:
        return self.name.lower()


class RedOp(_Named):
    """ncclRedOp_t, then the bitwise ops the machine's ALU has and NCCL lacks (torch.distributed's BAND, BOR, BXOR).
    NCCL has no number for those: they are taken by name only, and their values lie outside NCCL's op numbers."""
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4
    BAND = 0x100
    BOR = 0x101
    BXOR = 0x102


SUM, PROD, MAX, MIN, AVG = RedOp.SUM, RedOp.PROD, RedOp.MAX, RedOp.MIN, RedOp.AVG
BAND, BOR, BXOR = RedOp.BAND, RedOp.BOR, RedOp.BXOR
BITWISE = (BAND, BOR, BXOR)         # integer dtypes only
_NCCL_OPS = (SUM, PROD, MAX, MIN, AVG)

_OP_NAMES = {"sum": SUM, "prod": PROD, "product": PROD, "max": MAX, "min": MIN, "avg": AVG, "mean": AVG,
             "band": BAND, "bor": BOR, "bxor": BXOR}


def _integer(x) -> int | None:
    """``x`` as a Python int when it is an integer (numpy's too) but not a bool; None otherwise."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return int(x)
    return None


def red_op(op) -> RedOp:
    """An op given as a RedOp, its NCCL number or its name ('sum', 'prod', 'max', 'min', 'avg', 'band', 'bor', 'bxor').

    >>> red_op("avg") is red_op(4) is AVG
    True
    """
    if isinstance(op, RedOp):
        return op
    if isinstance(op, str) and op.lower() in _OP_NAMES:
        return _OP_NAMES[op.lower()]
    number = _integer(op)
    if number is not None and number in _NCCL_OPS:
        return RedOp(number)
    name = getattr(op, "name", None)        # torch.distributed.ReduceOp and friends
    if isinstance(name, str) and name.lower() in _OP_NAMES:
        return _OP_NAMES[name.lower()]
    raise InvalidArgument(f"invalid reduction op {op!r} (ops are sum, prod, max, min, avg, band, bor, bxor, or NCCL's numbers 0..4)")


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


# names numpy, torch and NCCL's own aliases (ncclChar, ncclInt, ncclHalf, ncclFloat, ncclDouble) use
_NAMES = {"int8": DataType.INT8, "char": DataType.INT8, "uint8": DataType.UINT8, "int32": DataType.INT32,
          "int": DataType.INT32, "uint32": DataType.UINT32, "int64": DataType.INT64, "uint64": DataType.UINT64,
          "float16": DataType.FLOAT16, "half": DataType.FLOAT16, "float32": DataType.FLOAT32,
          "float": DataType.FLOAT32, "float64": DataType.FLOAT64, "double": DataType.FLOAT64,
          "bfloat16": DataType.BFLOAT16, "bf16": DataType.BFLOAT16, "float8_e4m3fn": DataType.FLOAT8E4M3,
          "float8e4m3": DataType.FLOAT8E4M3, "float8_e5m2": DataType.FLOAT8E5M2, "float8e5m2": DataType.FLOAT8E5M2}


def data_type(dtype) -> DataType | str:
    """NCCL's data type for a DataType, NCCL's number, a name, or a numpy / torch dtype; the dtype's own name when
    NCCL has none (e.g. 'bool', 'int16': such buffers still travel through the copy collectives as raw bytes).

    >>> data_type(np.dtype("int32")), data_type(2), data_type("torch.bfloat16"), data_type(np.bool_)
    (<DataType.INT32: 2>, <DataType.INT32: 2>, <DataType.BFLOAT16: 9>, 'bool')
    """
    if isinstance(dtype, DataType):
        return dtype
    number = _integer(dtype)
    if number is not None:
        if number in DataType._value2member_map_:
            return DataType(number)
        raise InvalidArgument(f"invalid data type number {number} (NCCL's numbers are 0..{len(DataType) - 1})")
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        dtype = np.dtype(dtype)
    name = str(dtype).replace("torch.", "")
    return _NAMES.get(name.lower(), name)
