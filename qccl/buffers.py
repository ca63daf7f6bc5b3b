"""User buffers: numpy arrays and torch tensors, read as count, dtype and a span of host memory.

A buffer's words are a view of the user's memory reinterpreted as 32-bit words; the host copies words into and out of
device memory through it and never looks at what they mean.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InvalidArgument
from .types import DataType, data_type


@dataclass(frozen=True)
class Buffer:
    """A contiguous 1-d view of a user's buffer."""
    array: np.ndarray          # the user's memory, flat (a view, never a copy)
    dtype: DataType | str
    owner: object              # the object the user passed (kept alive)

    @property
    def count(self) -> int:
        return int(self.array.size)

    @property
    def itemsize(self) -> int:
        return int(self.array.dtype.itemsize)

    @property
    def ptr(self) -> int:
        return int(self.array.__array_interface__["data"][0])

    @property
    def nbytes(self) -> int:
        return self.count * self.itemsize

    @property
    def words(self) -> np.ndarray:
        """The buffer as int32 words (a view): what the host copies to and from the device."""
        return self.array.view(np.int32)

    def span(self) -> tuple[int, int]:
        return self.ptr, self.ptr + self.nbytes

    def overlaps(self, other: "Buffer") -> bool:
        a0, a1 = self.span()
        b0, b1 = other.span()
        return a0 < b1 and b0 < a1 and self.nbytes > 0 and other.nbytes > 0


def as_buffer(obj, what: str) -> Buffer:
    """Wrap a numpy array or a CPU torch tensor; anything else is an InvalidArgument naming ``what``."""
    if isinstance(obj, Buffer):
        return obj
    owner = obj
    array = None
    if isinstance(obj, np.ndarray):
        array = obj
    elif type(obj).__module__.startswith("torch"):
        device = getattr(obj, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            raise InvalidArgument(f"{what}: a tensor on {device}; the QLink transport takes CPU tensors (the QwenGPUs' "
                                  "memory is reached through the host)")
        if not obj.is_contiguous():
            raise InvalidArgument(f"{what}: the tensor is not contiguous")
        tensor = obj.detach()
        try:
            array = tensor.numpy()
        except TypeError:           # a dtype numpy lacks (bfloat16, float8): keep its bytes, name its type
            import torch
            raw = tensor.view(torch.uint8) if tensor.element_size() == 1 else tensor.view(torch.int16)
            array = raw.numpy()
            if not (array.flags["C_CONTIGUOUS"] or array.size <= 1):
                raise InvalidArgument(f"{what}: the tensor is not contiguous") from None
            return Buffer(array.reshape(-1), data_type(obj.dtype), owner)
    else:
        raise InvalidArgument(f"{what}: expected a numpy array or a torch tensor, got {type(obj).__name__}")
    if not (array.flags["C_CONTIGUOUS"] or array.size <= 1):
        raise InvalidArgument(f"{what}: the array is not contiguous")
    flat = array.reshape(-1)
    if array.size and not np.shares_memory(flat, array):
        raise InvalidArgument(f"{what}: the array is not contiguous")
    return Buffer(flat, data_type(array.dtype), owner)
