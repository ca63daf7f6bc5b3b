"""qccl as a torch.distributed backend: ``import qccl.torch`` registers "qccl".

    import torch, torch.distributed as dist
    import qccl.torch                                   # registers the backend
    dist.init_process_group("qccl")                     # under torchrun or python -m qccl.launch
    t = torch.arange(4, dtype=torch.int32) * (dist.get_rank() + 1)
    dist.all_reduce(t)                                  # summed by the QwenGPUs over QLink

Ranks of a group are qccl ranks of one QLink world (one QwenGPU per process); the packets travel over the world's own
gloo group built from the store torch hands the backend, with qccl's liveness (qccl.liveness) on every wait.

- Reductions (all_reduce, reduce, reduce_scatter, reduce_scatter_tensor) take the dtypes the transport reduces (QLink:
  int32, uint32) and the ops qccl has (SUM, PRODUCT, MIN, MAX, AVG, which truncates like C, and the bitwise BAND,
  BOR, BXOR that the machine's ALU has and NCCL lacks). Any other dtype or op is refused before anything moves, with an error naming it and the
  supported ones; the group stays usable.
- The copy collectives (broadcast, all_gather, all_gather_into_tensor, all_to_all_single, all_to_all, gather,
  scatter, send / recv) take any dtype: the tensor's bytes travel as 32-bit words, each block padded to whole words.
- Collectives run when called; with ``async_op=True`` the returned Work is already complete. Point-to-point calls
  (send / recv / isend / irecv, batch_isend_irecv) are queued and run together, as one qccl group, at the first
  wait() of one of them or at the next collective: every rank of the group must take part in that epoch (a QLink
  exchange involves the whole world), so pair the calls the way a ring or a pairwise exchange does.
- new_group builds a new QLink world for the members (torch calls the backend's creator for them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

import qccl
from qccl.errors import InvalidArgument
from qccl.types import red_op

NAME = "qccl"
_RED = dist.ReduceOp.RedOpType
_OPS = {_RED.SUM: "sum", _RED.PRODUCT: "prod", _RED.MIN: "min", _RED.MAX: "max", _RED.AVG: "avg",
        _RED.BAND: "band", _RED.BOR: "bor", _RED.BXOR: "bxor"}
_TORCH_DTYPES = {"int32": torch.int32, "uint32": torch.uint32}


@dataclass(frozen=True)
class StoreId(qccl.UniqueId):
    """A unique id whose rendezvous is a store torch.distributed already made (the group's, prefixed per group)."""
    store: object = field(default=None, compare=False, repr=False)


def _has_op(name: str) -> bool:
    try:
        red_op(name)
        return True
    except InvalidArgument:
        return False


# -- tensors as words ---------------------------------------------------------------------------------------------------
def _bytes(t: torch.Tensor) -> np.ndarray:
    """The tensor's bytes (a contiguous tensor: a view; the caller copies back otherwise)."""
    return t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8)


def to_words(t: torch.Tensor) -> np.ndarray:
    """The bytes of ``t`` as int32 words, zero-padded to whole words (a copy: the host moves bytes, reads none).

    >>> to_words(torch.tensor([True, False, True])).view(np.uint8).tolist()
    [1, 0, 1, 0]
    """
    raw = _bytes(t.detach().contiguous())
    out = np.zeros(-(-raw.size // 4) * 4, np.uint8)
    out[:raw.size] = raw
    return out.view(np.int32)


def from_words(t: torch.Tensor, words: np.ndarray) -> None:
    """Store words made by :func:`to_words` of a tensor shaped like ``t`` back into ``t`` (padding dropped)."""
    raw = words.view(np.uint8)[:t.numel() * t.element_size()]
    if t.is_contiguous():
        _bytes(t)[:] = raw
    else:
        t.copy_(torch.from_numpy(raw.copy()).view(t.dtype).reshape(t.shape))


def _nwords(t: torch.Tensor) -> int:
    return -(-t.numel() * t.element_size() // 4)


# -- works --------------------------------------------------------------------------------------------------------------
def _done(tensors) -> dist.Work:
    fut = torch.futures.Future()
    fut.set_result(list(tensors))
    return _create_work_from_future(fut)


class _P2PWork(dist._Work):
    """A queued send / recv: waiting runs every queued point-to-point call of the group (one qccl group)."""

    def __init__(self, pg: "ProcessGroupQccl", tensors):
        super().__init__()
        self.pg, self.tensors = pg, list(tensors)

    def wait(self, timeout: timedelta | None = None) -> bool:
        self.pg._flush()
        return True

    def is_completed(self) -> bool:
        return not self.pg._p2p

    def get_future(self) -> torch.futures.Future:
        self.pg._flush()
        fut = torch.futures.Future()
        fut.set_result(self.tensors)
        return fut


# -- the process group ----------------------------------------------------------------------------------------------------
class ProcessGroupQccl(dist.ProcessGroup):
    """A torch.distributed group whose ranks are the ranks of one qccl communicator (QLink world)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self.comm = qccl.Communicator.init(size, rank, StoreId("torch.distributed", store=store))
        self._p2p: list = []        # queued (kind, tensor, peer, words)

    def getBackendName(self) -> str:
        return NAME

    def name(self) -> str:
        return NAME

    # -- checks ---------------------------------------------------------------------------------------------------
    def _op(self, opts, what: str) -> str:
        """qccl's name of torch's op, refused (InvalidArgument naming it and the supported ones) when qccl lacks it."""
        op = opts.reduceOp.op
        if op in _OPS and _has_op(_OPS[op]):
            return _OPS[op]
        supported = [o.name for o, name in _OPS.items() if _has_op(name)]
        raise InvalidArgument(f"{what}: reduction op {op.name} is not supported by qccl (supported: "
                              f"{', '.join(supported)})")

    def _reducible(self, t: torch.Tensor, what: str) -> np.ndarray:
        """The tensor as a numpy array qccl can reduce (a view when contiguous)."""
        names = self.comm.transport.dtypes
        name = str(t.dtype).removeprefix("torch.")
        if name not in names:
            raise InvalidArgument(f"{what}: dtype {t.dtype} cannot be reduced by qccl's {self.comm.transport.name} "
                                  f"transport (reductions take {', '.join('torch.' + n for n in names)}; the copy "
                                  "collectives take any dtype)")
        c = t.detach().contiguous()
        return c if t.dtype == torch.bfloat16 else c.numpy()     # numpy has no bfloat16: qccl takes the tensor

    @staticmethod
    def _back(t: torch.Tensor, a: np.ndarray) -> None:
        """Results computed in a contiguous copy go back into a non-contiguous tensor (a host copy)."""
        if not t.is_contiguous():
            t.copy_((a if isinstance(a, torch.Tensor) else torch.from_numpy(a)).reshape(t.shape))

    # -- collectives ------------------------------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        self._flush()
        op = self._op(opts, "all_reduce")
        arrays = [self._reducible(t, "all_reduce") for t in tensors]
        for t, a in zip(tensors, arrays):
            self.comm.allreduce(a, a, op)
            self._back(t, a)
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts=None):
        self._flush()
        op = self._op(opts, "reduce")
        root = opts.rootRank
        for t in tensors:
            a = self._reducible(t, "reduce")
            self.comm.reduce(a, a if self._rank == root else None, op, root)
            if self._rank == root:
                self._back(t, a)
        return _done(tensors)

    def broadcast(self, tensors, opts=None):
        self._flush()
        for t in tensors:
            w = to_words(t)
            self.comm.broadcast(w, w, opts.rootRank)
            from_words(t, w)
        return _done(tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        self._flush()
        for outs, t in zip(output_tensors, input_tensors):
            w = to_words(t)
            got = np.empty(w.size * self._size, np.int32)
            self.comm.allgather(w, got)
            for r, o in enumerate(outs):
                from_words(o, got[r * w.size:(r + 1) * w.size])
        return _done([o for outs in output_tensors for o in outs])

    def all_gather_single(self, output, input, opts=None):
        self._flush()
        w = to_words(input)
        got = np.empty(w.size * self._size, np.int32)
        self.comm.allgather(w, got)
        for r, o in enumerate(output.reshape(self._size, -1) if output.numel() else []):
            from_words(o, got[r * w.size:(r + 1) * w.size])
        return _done([output])

    _allgather_base = all_gather_single

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        self._flush()
        op = self._op(opts, "reduce_scatter")
        for out, ins in zip(output_tensors, input_tensors):
            send = self._reducible(torch.cat([t.reshape(-1) for t in ins]), "reduce_scatter")
            recv = self._reducible(out, "reduce_scatter")
            self.comm.reduce_scatter(send, recv, op)
            self._back(out, recv)
        return _done(output_tensors)

    def reduce_scatter_single(self, output, input, opts=None):
        self._flush()
        op = self._op(opts, "reduce_scatter_tensor")
        send, recv = self._reducible(input, "reduce_scatter_tensor"), self._reducible(output, "reduce_scatter_tensor")
        self.comm.reduce_scatter(send, recv, op)
        self._back(output, recv)
        return _done([output])

    _reduce_scatter_base = reduce_scatter_single

    def _exchange(self, sends: dict, recvs: dict) -> None:
        """One qccl group of sends {peer: tensor} and receives {peer: tensor} (NCCL builds all-to-all, gather and
        scatter this way); each tensor travels as words."""
        words = {p: np.zeros(_nwords(t), np.int32) for p, t in recvs.items()}
        with qccl.group():
            for p, t in sorted(sends.items()):
                if t.numel():
                    self.comm.send(to_words(t), p)
            for p, t in sorted(recvs.items()):
                if t.numel():
                    self.comm.recv(words[p], p)
        for p, t in recvs.items():
            from_words(t, words[p])

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        self._flush()
        n = self._size

        def chunks(t, splits):
            if not splits:
                if t.shape[0] % n if t.dim() else True:
                    raise InvalidArgument(f"all_to_all_single: {tuple(t.shape)} does not split into {n} equal "
                                          "chunks along dim 0")
                splits = [t.shape[0] // n] * n
            if len(splits) != n or sum(splits) != t.shape[0]:
                raise InvalidArgument(f"all_to_all_single: split sizes {list(splits)} do not cover {t.shape[0]} rows "
                                      f"in {n} parts")
            return list(torch.split(t, list(splits)))

        ins, outs = chunks(input, input_split_sizes), chunks(output, output_split_sizes)
        got = [torch.empty_like(o) for o in outs]
        self._exchange(dict(enumerate(ins)), dict(enumerate(got)))
        for o, g in zip(outs, got):
            o.copy_(g)          # a host copy of bytes the machines moved
        return _done([output])

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        self._flush()
        got = [torch.empty_like(o) for o in output_tensors]
        self._exchange(dict(enumerate(input_tensors)), dict(enumerate(got)))
        for o, g in zip(output_tensors, got):
            o.copy_(g)
        return _done(output_tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        self._flush()
        root, t = opts.rootRank, input_tensors[0]
        if self._rank == root:
            outs = output_tensors[0]
            self._exchange({root: t}, dict(enumerate(outs)))
            return _done(outs)
        self._exchange({root: t}, {})
        return _done([t])

    def scatter(self, output_tensors, input_tensors, opts=None):
        self._flush()
        root, out = opts.rootRank, output_tensors[0]
        sends = dict(enumerate(input_tensors[0])) if self._rank == root else {}
        self._exchange(sends, {root: out})
        return _done([out])

    def barrier(self, opts=None):
        self._flush()
        word = np.zeros(1, np.int32)
        self.comm.allreduce(word, word, "sum")      # returns on every rank once every rank called it
        return _done([])

    # -- point to point ---------------------------------------------------------------------------------------------------
    def send(self, tensors, dst: int, tag: int = 0):
        for t in tensors:
            self._p2p.append(("send", t, dst))
        return _P2PWork(self, tensors)

    def recv(self, tensors, src: int, tag: int = 0):
        for t in tensors:
            self._p2p.append(("recv", t, src))
        return _P2PWork(self, tensors)

    def _flush(self) -> None:
        """Run the queued point-to-point calls as one qccl group (sends and receives paired per peer in order)."""
        if not self._p2p:
            return
        calls, self._p2p = self._p2p, []
        words = [np.zeros(_nwords(t), np.int32) if kind == "recv" else to_words(t) for kind, t, _ in calls]
        with qccl.group():
            for (kind, t, peer), w in zip(calls, words):
                if not w.size:
                    continue        # nothing moves (both sides skip it: the counts must match)
                if kind == "send":
                    self.comm.send(w, peer)
                else:
                    self.comm.recv(w, peer)
        for (kind, t, _), w in zip(calls, words):
            if kind == "recv":
                from_words(t, w)


def _create(store, rank: int, size: int, timeout: timedelta) -> ProcessGroupQccl:
    return ProcessGroupQccl(store, rank, size, timeout)


if NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(NAME, _create, devices=["cpu"])       # a list: a string would be iterated
