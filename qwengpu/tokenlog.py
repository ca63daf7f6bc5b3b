"""A device's token log: every position of its stream (id, who produced it, what the model wrote in its place),
stored compactly, and bounded when asked.

The log is what verification replays (the circuit and the model are checked against it position by position), so by
default it keeps the whole stream. It holds ids in an int32 array and origins in a byte array (5 bytes a position,
against about 120 for a list of Token objects) and builds a :class:`qwengpu.tokens.Token` only when one is read.

A long-lived device (a communicator's, over thousands of calls) can keep only the last ``keep`` positions: the host
trims between launches, never during one, so a failed launch can always be rolled back. Positions stay absolute:
``len(log)`` counts every position ever fed, ``log.start`` is the first one still kept, and reading before it is an
IndexError that says so.

    >>> log = TokenLog()
    >>> log.append(T.EXEC(0), T.MODEL); log.append(T.VAL(7), T.MODEL)
    >>> len(log), log[1].id == T.VAL(7), log.ids().tolist() == [T.EXEC(0), T.VAL(7)]
    (2, True, True)
"""
from __future__ import annotations

from array import array
from typing import Iterator

import numpy as np

from . import tokens as T

ORIGINS = (T.HOST, T.MODEL, T.PEER)
_CODE = {origin: code for code, origin in enumerate(ORIGINS)}


class TokenLog:
    """The positions of one device's stream. ``keep``: None (the whole stream) or the number of most recent
    positions a trim keeps (at least that many are always kept; a trim runs when twice that many are held)."""

    def __init__(self, keep: int | None = None):
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"token_log={keep!r}: expected None (keep the whole stream) or a number of positions >= 1")
        self.keep = keep
        self.start = 0                          # absolute position of _ids[0]
        self._ids = array("i")
        self._origins = bytearray()
        self._written: dict[int, int] = {}      # absolute position -> the id the model wrote there (rare)

    # -- writing -------------------------------------------------------------------------------------------------
    def append(self, token: int, origin: str, written: int | None = None) -> None:
        if written is not None and written != token:
            self._written[self.start + len(self._ids)] = written
        self._ids.append(token)
        self._origins.append(_CODE[origin])

    def trim(self) -> int:
        """Drop the oldest positions beyond ``keep`` (once twice that many are held); returns how many went."""
        if self.keep is None or len(self._ids) < 2 * self.keep:
            return 0
        drop = len(self._ids) - self.keep
        del self._ids[:drop]
        del self._origins[:drop]
        self.start += drop
        self._written = {p: w for p, w in self._written.items() if p >= self.start}
        return drop

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (a rolled-back launch)."""
        if length < self.start:
            raise IndexError(f"cannot roll the token log back to position {length}: positions before {self.start} "
                             f"were trimmed (token_log={self.keep})")
        del self._ids[length - self.start:]
        del self._origins[length - self.start:]
        self._written = {p: w for p, w in self._written.items() if p < length}

    # -- reading -------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.start + len(self._ids)

    def _index(self, i: int) -> int:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"position {i} is outside the token log (0..{n - 1})")
        if i < self.start:
            raise IndexError(f"position {i} was trimmed: this log keeps the last {self.keep} positions "
                             f"(from {self.start} now; token_log=None keeps the whole stream)")
        return i - self.start

    def _range(self, s: slice) -> range:
        if s.step not in (None, 1):
            raise IndexError("the token log is read in contiguous slices (step 1)")
        lo, hi, _ = s.indices(len(self))
        if lo < self.start and hi > lo:
            raise IndexError(f"positions {lo}..{hi - 1} reach before {self.start}, where this log was trimmed "
                             f"(token_log={self.keep})")
        return range(lo, max(lo, hi))

    def _token(self, j: int) -> T.Token:
        return T.Token(self._ids[j], ORIGINS[self._origins[j]], self._written.get(self.start + j))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._token(p - self.start) for p in self._range(i)]
        return self._token(self._index(i))

    def __setitem__(self, i: int, token: T.Token) -> None:
        """Replace one position (tests corrupt a stream this way to see verification catch it)."""
        j = self._index(i)
        self._ids[j] = token.id
        self._origins[j] = _CODE[token.origin]
        self._written.pop(self.start + j, None)
        if token.written is not None and token.written != token.id:
            self._written[self.start + j] = token.written

    def __delitem__(self, s: slice) -> None:
        if not isinstance(s, slice) or s.step not in (None, 1) or s.stop is not None:
            raise IndexError("the token log forgets only a tail: del log[n:]")
        self.truncate(self._range(s).start)

    def __iter__(self) -> Iterator[T.Token]:
        for j in range(len(self._ids)):
            yield self._token(j)

    def __eq__(self, other) -> bool:
        if isinstance(other, (TokenLog, list, tuple)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        kept = "whole stream" if self.keep is None else f"keeps {self.keep}, from {self.start}"
        return f"TokenLog({len(self)} positions, {kept})"

    def ids(self, start: int | None = None, stop: int | None = None) -> np.ndarray:
        """The ids of positions start..stop-1 (default: every kept position) as an int64 array, without Tokens."""
        r = self._range(slice(self.start if start is None else start, stop))
        return np.frombuffer(self._ids, np.int32)[r.start - self.start:r.stop - self.start].astype(np.int64)

    def id(self, i: int) -> int:
        """The id at position i, without building a Token."""
        return self._ids[self._index(i)]
