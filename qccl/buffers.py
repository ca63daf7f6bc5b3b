"""User buffers: numpy arrays and torch tensors, read as count, dtype and a span of host memory.

A buffer's words are a view of the user's memory reinterpreted as 32-bit words; the host copies words into and out of
device memory through it and never looks at what they mean. The copy collectives move any dtype this way
(:meth:`Buffer.as_words`): int64 as two words an element, bfloat16 or bool packed two or four to a word, each block
padded with zero bytes to whole words where its size is not a multiple of four bytes::

    >>> b = as_buffer(np.array([True, False, True]), "x").as_words()
    >>> b.count, b.wordview[0:1].view(np.uint8).tolist()
    (1, [1, 0, 1, 0])
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InvalidArgument
from .types import DataType, data_type


class WordView:
    """The bytes of ``blocks`` equal blocks of user memory as 32-bit words, each block padded with zero bytes to a
    whole number of words (block b is words [b * per, (b + 1) * per)). Reading builds the padded words, writing stores
    the bytes back and drops the padding: the host moves bytes, it never looks at them."""

    def __init__(self, raw: np.ndarray, blocks: int):
        self.raw, self.blocks = raw, max(1, blocks)
        self.block_bytes = raw.size // self.blocks
        self.per = -(-self.block_bytes // 4)

    def __len__(self) -> int:
        return self.blocks * self.per

    def _span(self, s: slice) -> tuple[int, int, int, int]:
        start, stop, step = s.indices(len(self))
        if step != 1:
            raise IndexError("word views take contiguous slices")
        b0 = start // self.per if self.per else 0
        b1 = max(b0, -(-stop // self.per)) if self.per else 0
        return start, stop, b0, b1

    def _padded(self, b0: int, b1: int) -> np.ndarray:
        bb = self.block_bytes
        out = np.zeros((b1 - b0, self.per * 4), np.uint8)
        out[:, :bb] = self.raw[b0 * bb:b1 * bb].reshape(b1 - b0, bb)
        return out

    def __getitem__(self, s: slice) -> np.ndarray:
        start, stop, b0, b1 = self._span(s)
        return self._padded(b0, b1).view(np.int32).reshape(-1)[start - b0 * self.per:stop - b0 * self.per]

    def __setitem__(self, s: slice, values) -> None:
        start, stop, b0, b1 = self._span(s)
        padded = self._padded(b0, b1)
        padded.view(np.int32).reshape(-1)[start - b0 * self.per:stop - b0 * self.per] = values
        bb = self.block_bytes
        self.raw[b0 * bb:b1 * bb] = padded[:, :bb].reshape(-1)


@dataclass(frozen=True)
class Buffer:
    """A contiguous 1-d view of a user's buffer."""
    array: np.ndarray          # the user's memory, flat (a view, never a copy)
    dtype: DataType | str
    owner: object              # the object the user passed (kept alive)
    wordview: WordView | None = None    # set on a padded word buffer (as_words): its words are built from bytes

    @property
    def count(self) -> int:
        return len(self.wordview) if self.wordview is not None else int(self.array.size)

    @property
    def itemsize(self) -> int:
        return 4 if self.wordview is not None else int(self.array.dtype.itemsize)

    @property
    def ptr(self) -> int:
        return int(self.array.__array_interface__["data"][0])

    @property
    def nbytes(self) -> int:
        return self.count * self.itemsize

    @property
    def words(self):
        """The buffer as int32 words (a view): what the host copies to and from the device."""
        if self.wordview is not None:
            return self.wordview
        return self.array.view(np.int32)

    def part(self, start: int, count: int) -> "Buffer":
        """Elements [start, start + count) of this buffer (a view).

        >>> as_buffer(np.arange(6, dtype=np.int32), "x").part(2, 3).array.tolist()
        [2, 3, 4]
        """
        return Buffer(self.array[start:start + count], self.dtype, self.owner)

    def as_words(self, blocks: int = 1) -> "Buffer":
        """This buffer's bytes as a buffer of 32-bit words for the copy collectives, cut into ``blocks`` equal blocks
        (an allgather's output: one per rank) that each start on a word: a view when each block is a whole number of
        words, otherwise padded (see :class:`WordView`). ``count`` is then in words.

        >>> as_buffer(np.arange(3, dtype=np.int64), "x").as_words().count
        6
        """
        raw = self.array.reshape(-1).view(np.uint8)
        if raw.size % (4 * max(1, blocks)) == 0:
            return Buffer(raw.view(np.int32), DataType.INT32, self.owner)
        return Buffer(raw, DataType.INT32, self.owner, WordView(raw, blocks))

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
