"""Which CUDA source and entry point runs each kernel for each dtype.

int32 and uint32 run qccl's own qccl/kernels/prim.cu and mcast.cu, the very sources QLink's QwenGPUs run. Every
other NCCL dtype runs an instantiation of transports/cupy/prim_t.cu, one templated source with prim's modes and flag
protocol (prim_<dtype>, mcast_<dtype>).
"""
from __future__ import annotations

from pathlib import Path

from qccl.transport import MCAST, PRIM

TEMPLATE = Path(__file__).resolve().parent / "prim_t.cu"
DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16")
ITEMSIZE = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float16": 2, "float32": 4,
            "float64": 8, "bfloat16": 2}
SAME_AS_QLINK = ("int32", "uint32")


def source(kernel: str, dtype: str) -> tuple[str, str]:
    """(CUDA source text, entry point) of ``kernel`` ("prim" or "mcast") for ``dtype``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: the cupy transport has {', '.join(DTYPES)}")
    if dtype in SAME_AS_QLINK:
        k = {"prim": PRIM, "mcast": MCAST}[kernel]
        return k.source.read_text(), k.name
    return TEMPLATE.read_text(), f"{kernel}_{dtype}"


def every_source() -> list[tuple[str, str, str]]:
    """(kernel, dtype, entry) for every function the transport loads before anything runs."""
    return [(k, d, source(k, d)[1]) for d in DTYPES for k in ("prim", "mcast")]
