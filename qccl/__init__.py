"""qccl: an NCCL-compatible communicator whose collectives run on QwenGPUs over QLink.

    import qccl
    comms = qccl.Communicator.init_all(4)                 # or Communicator.init(nranks, rank, qccl.get_unique_id())
    with qccl.group():
        for c in comms:
            c.allreduce(send[c.rank], recv[c.rank], op=qccl.SUM)

Every number a collective produces comes out of the devices: the host launches kernels, copies words and routes
packets by their header token; it never computes a payload value.
"""
from .communicator import SPLIT_NOCOLOR, Communicator, UniqueId, get_unique_id
from .config import Config
from .errors import (DeadlockError, InternalError, InvalidArgument, InvalidUsage, QcclError, RemoteError, Result,
                     SystemError, UnhandledDeviceError, get_error_string)
from .group import group, group_end, group_start
from .hookspecs import ProfilerEvent, TuneRequest, Tuning, hookimpl
from .plugins import get_transport, plugin_manager, transports
from .types import AVG, BAND, BOR, BXOR, MAX, MIN, PROD, SUM, DataType, RedOp, data_type, red_op
from .version import __version__, get_version

__all__ = [
    "Communicator", "UniqueId", "get_unique_id", "Config", "SPLIT_NOCOLOR", "group", "group_start", "group_end",
    "SUM", "PROD", "MAX", "MIN", "AVG", "BAND", "BOR", "BXOR", "RedOp", "DataType", "red_op", "data_type", "get_version", "__version__",
    "QcclError", "InvalidArgument", "InvalidUsage", "InternalError", "SystemError", "RemoteError", "DeadlockError",
    "UnhandledDeviceError", "Result", "get_error_string", "plugin_manager", "transports", "get_transport",
    "hookimpl", "ProfilerEvent", "TuneRequest", "Tuning",
]
