"""The CUDA calls the CuPy transport makes, in one small adapter (so the world's logic is CuPy-free and the tests can
hold it against a recording double on machines without a GPU).

Facts relied on (CuPy 13/14, cupy-cuda12x): ``cupy.RawModule(code=..., options=...)`` compiles with NVRTC and
``get_function`` loads the module on the current device; a RawKernel launches on the current stream
(``with stream:``) and takes numpy scalars by value (``numpy.uint64`` for a pointer, ``numpy.int32`` for an int);
``cupy.cuda.runtime.memcpyAsync(dst, src, size, kind, stream_ptr)``; ``cupy.cuda.alloc_pinned_memory``;
``cupy.cuda.Memory(size)`` is a plain cudaMalloc allocation (a base pointer, which IPC needs, unlike the pool);
``cupy.cuda.runtime.deviceCanAccessPeer / deviceEnablePeerAccess / ipcGetMemHandle / ipcOpenMemHandle``.
"""
from __future__ import annotations

import numpy as np

from qccl.errors import SystemError, UnhandledDeviceError


def load_cupy():
    """CuPy, or SystemError saying what is missing (qccl's class for the environment's faults)."""
    try:
        import cupy
    except ImportError as e:
        raise SystemError(f"the cupy transport needs CuPy with a CUDA GPU (pip install cupy-cuda12x): {e}") from e
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:      # noqa: BLE001  (CUDARuntimeError when there is no driver)
        raise SystemError(f"the cupy transport found no CUDA device: {e}") from e
    if n < 1:
        raise SystemError("the cupy transport found no CUDA device")
    return cupy


class CupyGpu:
    """The real thing: every call goes to CuPy."""

    def __init__(self, cupy=None):
        self.cp = cupy or load_cupy()
        self.rt = self.cp.cuda.runtime
        self._keep = []                 # allocations and pinned buffers live as long as the adapter

    def device_count(self) -> int:
        return self.rt.getDeviceCount()

    def enable_peer(self, dev: int, peer: int) -> bool:
        """Peer access from ``dev`` to ``peer``'s memory; False where the pair cannot."""
        if dev == peer:
            return True
        if not self.rt.deviceCanAccessPeer(dev, peer):
            return False
        with self.cp.cuda.Device(dev):
            try:
                self.rt.deviceEnablePeerAccess(peer)
            except self.rt.CUDARuntimeError as e:       # already enabled is fine
                if "PeerAccessAlreadyEnabled" not in str(e) and "already" not in str(e):
                    raise
        return True

    def alloc(self, dev: int, nbytes: int) -> int:
        with self.cp.cuda.Device(dev):
            mem = self.cp.cuda.Memory(nbytes)
            self.rt.memset(mem.ptr, 0, nbytes)          # before anything runs: synchronous is fine
        self._keep.append(mem)
        return int(mem.ptr)

    def pinned(self, nbytes: int) -> np.ndarray:
        mem = self.cp.cuda.alloc_pinned_memory(nbytes)
        self._keep.append(mem)
        return np.frombuffer(mem, np.uint8, nbytes)

    def stream(self, dev: int):
        with self.cp.cuda.Device(dev):
            return self.cp.cuda.Stream(non_blocking=True)

    def h2d(self, dst: int, host: np.ndarray, stream) -> None:
        self.rt.memcpyAsync(dst, host.ctypes.data, host.nbytes, self.rt.memcpyHostToDevice, stream.ptr)

    def d2h(self, host: np.ndarray, src: int, stream) -> None:
        self.rt.memcpyAsync(host.ctypes.data, src, host.nbytes, self.rt.memcpyDeviceToHost, stream.ptr)

    def function(self, dev: int, code: str, name: str):
        """Compile (NVRTC) and load on ``dev`` now: loading may synchronise the device, so never after a spin."""
        with self.cp.cuda.Device(dev):
            return self.cp.RawModule(code=code, options=("--std=c++14",)).get_function(name)

    def launch(self, dev: int, fn, threads: int, args: tuple, stream) -> None:
        with self.cp.cuda.Device(dev), stream:
            fn((1,), (threads,), args)

    @staticmethod
    def pointer(p: int):
        return np.uint64(p)

    @staticmethod
    def value(v: int):
        return np.uint32(v & 0xFFFFFFFF).view(np.int32)

    def event(self, dev: int, stream):
        with self.cp.cuda.Device(dev):
            ev = self.cp.cuda.Event(block=False, disable_timing=True)
            ev.record(stream)
        return ev

    @staticmethod
    def done(ev) -> bool:
        return bool(ev.done)

    @staticmethod
    def wait(ev) -> None:
        ev.synchronize()

    def ipc_handle(self, ptr: int) -> bytes:
        return bytes(self.rt.ipcGetMemHandle(ptr))

    def ipc_open(self, dev: int, handle: bytes) -> int:
        with self.cp.cuda.Device(dev):
            return int(self.rt.ipcOpenMemHandle(handle))

    def errors(self) -> tuple:
        """The exception classes CUDA errors arrive as (turned into UnhandledDeviceError by the world)."""
        cuda = self.cp.cuda
        out = [cuda.runtime.CUDARuntimeError]
        for name in ("driver", "compiler"):
            mod = getattr(cuda, name, None)
            for cls in ("CUDADriverError", "CompileException"):
                if mod is not None and hasattr(mod, cls):
                    out.append(getattr(mod, cls))
        return tuple(out)


def device_error(e: Exception, what: str) -> UnhandledDeviceError:
    return UnhandledDeviceError(f"{what}: {type(e).__name__}: {e}")
