"""qccl's errors, in NCCL's classes (ncclResult_t).

Every error is a :class:`QcclError` with a ``result`` code equal to NCCL's. A call that raises changes nothing: the
arguments are checked before any state moves.
"""
from __future__ import annotations

from enum import IntEnum


class Result(IntEnum):
    """ncclResult_t."""
    SUCCESS = 0
    UNHANDLED_CUDA_ERROR = 1
    SYSTEM_ERROR = 2
    INTERNAL_ERROR = 3
    INVALID_ARGUMENT = 4
    INVALID_USAGE = 5
    REMOTE_ERROR = 6
    IN_PROGRESS = 7
    TIMEOUT = 8


_STRINGS = {
    Result.SUCCESS: "no error",
    Result.UNHANDLED_CUDA_ERROR: "unhandled device error",
    Result.SYSTEM_ERROR: "unhandled system error",
    Result.INTERNAL_ERROR: "internal error",
    Result.INVALID_ARGUMENT: "invalid argument",
    Result.INVALID_USAGE: "invalid usage",
    Result.REMOTE_ERROR: "remote process exited or there was a network error",
    Result.IN_PROGRESS: "operation in progress",
    Result.TIMEOUT: "timeout: no rank can make progress",
}


def get_error_string(result: int) -> str:
    """ncclGetErrorString: the text of a result code.

    >>> get_error_string(5)
    'invalid usage'
    """
    try:
        return _STRINGS[Result(result)]
    except ValueError:
        return "unknown result code"


class QcclError(Exception):
    """Base class of every qccl error; ``result`` is NCCL's code for it."""
    result: Result = Result.INTERNAL_ERROR

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} ({get_error_string(self.result)}, result {int(self.result)})"


class UnhandledDeviceError(QcclError):
    result = Result.UNHANDLED_CUDA_ERROR


class SystemError(QcclError):  # noqa: A001  (NCCL's name, inside qccl's namespace)
    result = Result.SYSTEM_ERROR


class InternalError(QcclError):
    result = Result.INTERNAL_ERROR


class InvalidArgument(QcclError):
    """A bad argument: a root or peer out of range, a wrong dtype, op or buffer size."""
    result = Result.INVALID_ARGUMENT


class InvalidUsage(QcclError):
    """A call in the wrong state: group_end without group_start, a destroyed communicator, mismatched calls."""
    result = Result.INVALID_USAGE


class RemoteError(QcclError):
    result = Result.REMOTE_ERROR


class DeadlockError(QcclError):
    """No rank can make progress: ``waits`` maps each rank to what it waits for (a :class:`Stall`)."""
    result = Result.TIMEOUT

    def __init__(self, message: str, waits: dict | None = None):
        super().__init__(message)
        self.waits = dict(waits or {})
