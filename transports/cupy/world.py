"""The CuPy world: qccl's host schedule on NVIDIA GPUs, the kernels' stores crossing into peers' memory.

Set-up, in this order, before any kernel can spin (module loading and pinning host memory may synchronise a device,
and a device synchronisation behind a spinning kernel never returns; the seed found this):
  1. devices: rank r on ``config["devices"][r]`` (default r mod the device count; several ranks may share one GPU);
     peer access enabled between the devices of this process;
  2. every rank's heap: a flag array (127 int words) and a data array (127 elements of 8 bytes), zeroed; in several
     processes their CUDA IPC handles are exchanged and opened;
  3. a pinned host slab per rank for the word copies;
  4. every module (prim and mcast for every dtype) compiled with NVRTC and loaded on every device.
Then run() only enqueues asynchronous copies and launches; ranks synchronise through the kernels' flags alone.

Several ranks of this process share a GPU or not, one host thread submits every rank's launches in the order of
transports/cupy/order.py, which makes progress certain without relying on concurrent streams. Across processes each
process submits its own rank in program order (one rank per GPU, or time-sliced contexts that all progress).

The watchdog: a run still unfinished after ``config["timeout"]`` seconds copies every rank's flags to the host on a
stream of its own (copies do not wait for the spinning kernels) and raises DeadlockError naming, per rank, the
launch that has not finished, the flag it waits for, the flag's value and the value awaited.
"""
from __future__ import annotations

import time

import numpy as np

from qccl.errors import DeadlockError, InvalidArgument, InvalidUsage
from qccl.heap import MEMORY_WORDS
from qccl.transport import Launch, Read, Stall, World, Write, flag_traffic, options

from . import kernels as K
from .gpu import CupyGpu, device_error
from .memory import DATA, ELEMENT_BYTES, FLAG, GpuLaunch, Ptr, launch_dtypes, resolve
from .order import Orderer

WORDS = MEMORY_WORDS + 1
DEFAULT_PINNED = 1 << 22


class _Heap:
    def __init__(self, flag: int, data: int):
        self.ptr = {FLAG: flag, DATA: data}


class CupyWorld(World):
    def __init__(self, nranks: int, ranks, uid, config: dict, gpu=None):
        self.nranks, self.local_ranks = nranks, tuple(ranks)
        self.config = dict(config)
        self.opts = options(config, {"devices": None, "timeout": 60.0, "pinned_bytes": DEFAULT_PINNED}, "cupy")
        self.gpu = gpu or CupyGpu()
        self.timeout = float(self.opts["timeout"])
        self.events_log: list = []          # the order of set-up steps and launches (tests check it)
        try:
            self._setup(uid)
        except self.gpu.errors() as e:
            raise device_error(e, "cupy transport set-up") from e
        self.routes = {r: () for r in self.local_ranks}
        self.orderer = Orderer(self.local_ranks)
        self.pending_reads: list = []
        self.inflight: dict = {r: [] for r in self.local_ranks}      # (event, GpuLaunch) per rank, oldest first
        self.counts = {r: {"launches": 0, "bytes_in": 0, "bytes_out": 0} for r in self.local_ranks}

    # -- set-up (everything that can synchronise a device happens here) ------------------------------------------------
    def _setup(self, uid) -> None:
        g = self.gpu
        count = g.device_count()
        devices = self.opts["devices"]
        if devices is None:
            devices = [r % count for r in range(self.nranks)]
        if len(devices) != self.nranks or any(not 0 <= int(d) < count for d in devices):
            raise InvalidArgument(f"transport_options devices={devices}: one device per rank (ranks {self.nranks}), each in "
                                  f"0..{count - 1}")
        self.device = {r: int(devices[r]) for r in range(self.nranks)}
        used = sorted({self.device[r] for r in self.local_ranks})
        for d in used:
            for p in used:
                if not g.enable_peer(d, p):
                    raise InvalidUsage(f"devices {d} and {p} cannot access each other's memory (no peer access); "
                                       "give the ranks of this process devices that can, or one process per rank")
                self.events_log.append(("peer", d, p))
        self.heaps = {}
        for r in self.local_ranks:
            d = self.device[r]
            self.heaps[r] = _Heap(g.alloc(d, WORDS * 4), g.alloc(d, WORDS * ELEMENT_BYTES))
            self.events_log.append(("alloc", r))
        if len(self.local_ranks) < self.nranks:
            self._exchange_handles(uid)
        self.streams = {r: g.stream(self.device[r]) for r in self.local_ranks}
        self.watch_stream = {d: g.stream(d) for d in used}
        size = int(self.opts["pinned_bytes"])
        self.slab = {r: g.pinned(size) for r in self.local_ranks}
        self.slab_at = {r: 0 for r in self.local_ranks}
        self.watch_host = g.pinned(WORDS * 4)
        self.events_log.append(("pinned",))
        self.functions = {}
        for d in used:
            for kernel, dtype, entry in K.every_source():
                code, name = K.source(kernel, dtype)
                self.functions[(d, kernel, dtype)] = g.function(d, code, name)
        self.events_log.append(("modules",))

    def _exchange_handles(self, uid) -> None:
        """One rank per process: every rank's heap through CUDA IPC (handles exchanged over the gloo group)."""
        import torch.distributed as dist
        if not dist.is_initialized():
            address = getattr(uid, "address", None)
            if not address:
                raise InvalidUsage("the cupy transport across processes needs a uid with a rendezvous address "
                                   "(python -m qccl.launch) or torch.distributed initialised")
            dist.init_process_group("gloo", init_method=f"tcp://{address}", world_size=self.nranks,
                                    rank=self.local_ranks[0])
        me = self.local_ranks[0]
        mine = (self.device[me], self.gpu.ipc_handle(self.heaps[me].ptr[FLAG]),
                self.gpu.ipc_handle(self.heaps[me].ptr[DATA]))
        got = [None] * self.nranks
        dist.all_gather_object(got, mine)
        for r, (dev, hf, hd) in enumerate(got):
            if r != me:
                self.heaps[r] = _Heap(self.gpu.ipc_open(self.device[me], hf), self.gpu.ipc_open(self.device[me], hd))
        self.events_log.append(("ipc",))

    # -- World ---------------------------------------------------------------------------------------------------------
    def connect(self, rank, routes) -> None:
        self.routes[rank] = tuple(routes)

    def run(self, work) -> None:
        try:
            for w in work:
                dtypes = launch_dtypes(w.ops, "int32")
                ops = []
                for op, dt in zip(w.ops, dtypes):
                    if isinstance(op, Launch):
                        if dt not in K.DTYPES:
                            raise InvalidArgument(f"dtype {dt} is not one of the cupy transport's ({K.DTYPES})")
                        ops += resolve(w.rank, op, self.routes[w.rank], dt)
                    else:
                        ops.append(op)
                if len(self.local_ranks) < self.nranks:
                    for op in ops:                  # the peers' flags come from other processes: program order
                        self._submit(w.rank, op)
                else:
                    self.orderer.add(w.rank, ops)
            if len(self.local_ranks) == self.nranks:
                for rank, op in self.orderer.take(may_wait=True):
                    self._submit(rank, op)
            self._finish([w.rank for w in work])
        except self.gpu.errors() as e:
            raise device_error(e, "cupy transport") from e

    def pending(self, rank) -> bool:
        return bool(self.orderer.pending[rank] or self.inflight[rank])

    def synchronize(self, rank) -> None:
        if self.orderer.pending[rank]:
            for r, op in self.orderer.take(may_wait=False):     # or DeadlockError: its flags can never come
                self._submit(r, op)
        self._finish([rank])

    def stats(self, rank) -> dict:
        c = self.counts[rank]
        return {"tokens_written": 0, "tokens_fed": 0, "records": 0, "launches": c["launches"], "packets_sent": 0,
                "packets_received": 0, "exchanges": 0, "bytes_in": c["bytes_in"], "bytes_out": c["bytes_out"]}

    def gather_calls(self, rank, calls):
        if len(self.local_ranks) == self.nranks:
            return None
        import torch.distributed as dist
        got = [None] * self.nranks
        dist.all_gather_object(got, calls)
        return got

    def abort(self, rank) -> None:
        self.orderer.pending[rank].clear()

    # -- submission ----------------------------------------------------------------------------------------------------
    def _region(self, rank: int, nbytes: int) -> np.ndarray:
        """Bytes of the rank's pinned slab for one copy; a full slab is recycled once the work that used it is done
        (safe at any point: see order.py, everything submitted so far finishes)."""
        slab = self.slab[rank]
        if nbytes > len(slab):
            raise InvalidArgument(f"a copy of {nbytes} bytes exceeds the pinned slab ({len(slab)} bytes; "
                                  "transport_options pinned_bytes)")
        if self.slab_at[rank] + nbytes > len(slab):
            self._finish(list(self.local_ranks))
            self.slab_at = {r: 0 for r in self.local_ranks}
        at = self.slab_at[rank]
        self.slab_at[rank] = at + (nbytes + 15) // 16 * 16
        return slab[at:at + nbytes]

    def _submit(self, rank: int, op) -> None:
        g, heap, stream = self.gpu, self.heaps[rank], self.streams[rank]
        if isinstance(op, Write):
            if _words_like(op.source):
                dev = _Staged
                src = dev.write(op.address, op.source.words[op.start:op.start + op.count])
            else:
                src = op.source.array[op.start:op.start + op.count]
            src = np.ascontiguousarray(src)
            self._drain_reads_into(op.source.array)
            host = self._region(rank, src.nbytes)
            host[:] = src.view(np.uint8).reshape(-1)
            g.h2d(heap.ptr[DATA] + op.address * src.itemsize, host, stream)
            self.counts[rank]["bytes_in"] += src.nbytes
        elif isinstance(op, Read):
            size = _itemsize(op.dest)
            host = self._region(rank, op.count * size)
            g.d2h(host, heap.ptr[DATA] + op.address * size, stream)
            self.pending_reads.append((g.event(self.device[rank], stream), host, op))
            self.counts[rank]["bytes_out"] += host.nbytes
        elif isinstance(op, GpuLaunch):
            fn = self.functions[(self.device[rank], op.kernel, op.dtype)]
            size = K.ITEMSIZE[op.dtype]
            args = tuple(g.pointer(self.heaps[a.rank].ptr[a.space] + a.address * (4 if a.space == FLAG else size))
                         if isinstance(a, Ptr) else g.value(a) for a in op.args)
            g.launch(self.device[rank], fn, op.threads, args, stream)
            self.events_log.append(("launch", rank, op.kernel, op.dtype))
            self.counts[rank]["launches"] += 1
            self.inflight[rank].append((g.event(self.device[rank], stream), op))
        else:
            raise TypeError(f"unknown host op {op!r}")

    def _drain_reads_into(self, src: np.ndarray) -> None:
        """A copy about to read user memory that a pending read will write: complete that read first."""
        lo = src.__array_interface__["data"][0]
        hi = lo + src.nbytes
        for item in list(self.pending_reads):
            ev, host, op = item
            out = op.dest.array
            a = out.__array_interface__["data"][0]
            if a < hi and lo < a + out.nbytes:
                self.gpu.wait(ev)
                _deliver(host, op)
                self.pending_reads.remove(item)

    def _finish(self, ranks) -> None:
        """Wait (with the watchdog's deadline) until the submitted work is done, then deliver the reads."""
        deadline = time.monotonic() + self.timeout
        while True:
            for r in self.local_ranks:
                q = self.inflight[r]
                while q and self.gpu.done(q[0][0]):
                    q.pop(0)
            busy = [r for r in self.local_ranks if self.inflight[r]]
            if not busy and all(self.gpu.done(ev) for ev, _, _ in self.pending_reads):
                break
            if time.monotonic() > deadline:
                self._watchdog(busy)
            time.sleep(0.0002)
        for ev, host, op in self.pending_reads:
            _deliver(host, op)
        self.pending_reads = []

    def _watchdog(self, busy) -> None:
        stalls = {}
        for r in self.local_ranks:
            if r not in busy:
                stalls[r] = Stall(r, note="done")
                continue
            op = self.inflight[r][0][1]
            flat = Launch(op.origin.kernel, op.threads,
                          tuple(a.address if isinstance(a, Ptr) else a for a in op.args), op.origin.note)
            t = flag_traffic(flat)
            values = self._read_flags(r)
            waits = [(a, v) for a, v in t.pre + t.post if values[a] < v] or list(t.pre + t.post)
            if not waits:
                stalls[r] = Stall(r, op.kernel, None, None, None, "?", op.origin.note)
                continue
            a, v = waits[0]
            name = next((x.name for x in self.routes[r] if x.start <= a < x.stop), "")
            stalls[r] = Stall(r, op.kernel, a, int(values[a]), v, "lt_s", op.origin.note, name)
        lines = "\n  ".join(str(stalls[r]) for r in sorted(stalls))
        raise DeadlockError(f"GPU watchdog: the epoch did not finish within {self.timeout:g} s (the kernels still "
                            f"spin; the CUDA context cannot be reused):\n  {lines}", stalls)

    def _read_flags(self, rank: int) -> np.ndarray:
        d = self.device[rank]
        s = self.watch_stream[d]
        self.gpu.d2h(self.watch_host, self.heaps[rank].ptr[FLAG], s)
        self.gpu.wait(self.gpu.event(d, s))
        return self.watch_host.view(np.int32).copy()


def _words_like(buf) -> bool:
    """A buffer the host moves as 32-bit words (int32 / uint32, or another dtype's bytes packed into words by
    qccl for a copy collective): its ``words`` view is what the schedule counts."""
    return buf.wordview is not None or str(buf.dtype) in ("int32", "uint32")


def _itemsize(buf) -> int:
    return 4 if _words_like(buf) else int(buf.array.dtype.itemsize)


class _Staged:
    """The host's two word copies, in the one form qccl's transports use for them (tests/test_qccl_rule.py checks
    that words are touched nowhere else): ``write`` hands the words on to the pinned slab, ``read`` returns the
    words a finished device-to-host copy brought back."""

    def __init__(self, host: np.ndarray):
        self.host = host

    @staticmethod
    def write(address: int, words) -> np.ndarray:
        return np.asarray(words, dtype=np.int32)

    def read(self, address: int, count: int) -> np.ndarray:
        words = self.host.view(np.int32)
        if len(words) != count:
            raise InvalidArgument(f"read of {count} words at {address}: the copy brought {len(words)}")
        return words


def _deliver(host: np.ndarray, op: Read) -> None:
    """A finished read: the pinned bytes into the user's buffer (through the word view where there is one)."""
    if _words_like(op.dest):
        dev = _Staged(host)
        op.dest.words[op.start:op.start + op.count] = dev.read(op.address, op.count)
    else:
        op.dest.array[op.start:op.start + op.count] = host.view(op.dest.array.dtype)
