"""Host schedules: a call becomes, per rank, a list of host ops (write words, launch, read words).

The step order comes from :mod:`qccl.steps` (NCCL's runRing), the addresses from :mod:`qccl.heap`. The host tracks
step counters per channel (how many chunks this rank sent and received on it) and the multicast round; those are the
only numbers it computes, and they are control, never payload: every payload word is moved by a device's store or by
a host copy of words.

Launch shape of one ring step on a chunk of k words (see qccl/kernels/prim.cu):

    [write the chunk's local input into the staging words]
    data launch(es): <= 4 threads each; the first one waits for tail (RECV) and head (SEND)
    [read a received chunk straight out of its FIFO slot]     the slot is still ours: its head is not posted yet
    POST launch, one thread: tail to the next rank, head to the previous rank
    [read a result the device stored into the staging words]
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from . import steps as S
from .buffers import Buffer
from .heap import LANES, Channel, Heap
from .errors import InvalidArgument
from .transport import FPRIM, MCAST, PRIM, Launch, Read, Write
from .types import DataType, RedOp

# prim's mode bits (qccl/kernels/prim.cu)
RECV, SEND, LOCAL, SPLIT, COPY = 1, 2, 4, 8, 16
OP_SHIFT, UNSIGNED, DIV, NOWAIT, POST = 5, 256, 512, 1024, 2048
# mcast's mode bits (qccl/kernels/mcast.cu)
MC_PRE_WAIT, MC_STORE, MC_POST, MC_WAIT = 1, 2, 4, 8

# fprim's (qccl/kernels/fprim.cu): the format, the phase and the half of a soft-float reduce step
FP_FORMATS = {DataType.FLOAT32: 0, DataType.BFLOAT16: 1, DataType.FLOAT16: 2}
FP_OPS = (RedOp.SUM, RedOp.MAX, RedOp.MIN)
FMT_SHIFT, PHASE_SHIFT, HI = 12, 14, 1 << 17
FP_ALIGN, FP_ROUND, FP_SIGN, FP_FINAL, FP_MINMAX, FP_MERGE = range(6)

_OP_BITS = {RedOp.SUM: 0, RedOp.PROD: 1, RedOp.MAX: 2, RedOp.MIN: 3, RedOp.AVG: 0,
            RedOp.BAND: 4, RedOp.BOR: 5, RedOp.BXOR: 6}


def max_chunk(heap: Heap, kind: str, algo: str) -> int:
    """The most words per chunk a collective's schedule can use on ``heap`` (what it uses unless a tuner chose
    fewer): the ring's slot; multicast AllReduce min(slot, window / n) (a round's n blocks fill one window),
    AllGather window / n, Broadcast the window. Fewer words per chunk mean more steps (more launches, more tokens)
    and, for integers, never a different result (a float sum's order follows the chunking: Scheduler.per).

    >>> max_chunk(Heap(4, 0), "allreduce", "multicast")
    4
    """
    if heap.nranks == 1 or algo == "ring" or heap.multicast is None:
        return heap.slot_words
    window, n = heap.multicast.window_words, heap.nranks
    if kind == "allreduce":
        return min(heap.slot_words, window // n)
    if kind == "allgather":
        return window // n
    return window


def algo_label(algo: str, chunk: int | None, most: int) -> str:
    """How a call's signature names its algorithm: ``"ring"``, or ``"ring:4"`` when a tuner chose chunks of 4 words
    below the schedule's most (:func:`max_chunk`). Every rank's signature carries it, so the cross-rank check sees a
    chunking that differs between ranks as a mismatch.

    >>> algo_label("ring", 4, 8), algo_label("ring", 8, 8), parse_algo("multicast:2")
    ('ring:4', 'ring', ('multicast', 2))
    """
    return algo if chunk is None or chunk >= most else f"{algo}:{chunk}"


def parse_algo(label: str | None) -> tuple[str, int | None]:
    """A signature's algorithm -> (algorithm, words per chunk or None for the schedule's most)."""
    name, _, chunk = (label or "ring").partition(":")
    return name, int(chunk) if chunk else None


@dataclass
class RankState:
    """What a rank's host remembers between calls: chunk counters per channel and the multicast round."""
    sent: dict = field(default_factory=dict)
    received: dict = field(default_factory=dict)
    mc_seq: int = 0         # multicast rounds done
    mc_seen: int = 0        # this rank's kernels already waited for every peer's flag >= mc_seen

    def clone(self) -> "RankState":
        return copy.deepcopy(self)


@dataclass(frozen=True)
class Piece:
    """``count`` elements of a user buffer from ``start``."""
    buf: Buffer
    start: int
    count: int


class Scheduler:
    """Builds one rank's host ops for a sequence of calls (mutating ``state``, a clone the caller commits)."""

    def __init__(self, heap: Heap, state: RankState, dtype=DataType.INT32, op: RedOp = RedOp.SUM, note: str = "",
                 soft_float: bool = False):
        self.heap, self.state = heap, state
        self.rank, self.nranks = heap.rank, heap.nranks
        self.ops: list = []
        self.dtype, self.op, self.note = dtype, op, note
        # a float reduction on devices without floating point: the reduce steps run fprim (see _fstep)
        self.fmt = FP_FORMATS.get(dtype) if soft_float else None
        # elements per block unit: 16-bit floats reduced an element an address are cut in pairs, where a device
        # without floating point holds them, a word each pair (see per: the same adds in the same order)
        self.grain = 2 if self.fmt is None and dtype in (DataType.BFLOAT16, DataType.FLOAT16) else 1

    # -- building blocks ---------------------------------------------------------------------------------------------
    def _op_bits(self, final: bool) -> int:
        bits = _OP_BITS[self.op] << OP_SHIFT
        if self.dtype == DataType.UINT32:
            bits |= UNSIGNED
        if final and self.op == RedOp.AVG and self.nranks > 1:
            bits |= DIV
        return bits

    def _prim(self, mode: int, n: int, threads: int, *, rtail=0, rwait=0, rhead=0, swait=0, rslot=0, x=0, y=0,
              sslot=0, stail=0, spost=0, shead=0, rpost=0, note=""):
        args = (mode, n, rtail, rwait, rhead, swait, rslot, x, y, sslot, stail, spost, shead, rpost,
                self.nranks)
        self.ops.append(Launch(PRIM, threads, args, note or self.note))

    def step(self, ch: Channel | None, *, recv: bool, send: bool, local: Piece | None, reduce: bool,
             out: Piece | None, final: bool = False, note: str = "", y: int | None = None) -> None:
        """One Simple-protocol step on a chunk (k words = the local piece's or the output's size).

        ``y``: the device stores the result there (e.g. a multicast window) instead of the staging words, and the
        host reads nothing."""
        if reduce and self.fmt is not None:
            return self._fstep(ch, send=send, local=local, out=out, note=note, y=y)
        k = (local or out).count
        stage = self.heap.staging
        if local is not None:
            self.ops.append(Write(stage, local.buf, local.start, k))
        rs, ss, flags = self._flags(ch, recv, send)
        computed = local is not None and (reduce or not recv)          # the result is made on this device
        device_copy = computed and out is not None and (reduce or (not send and not recv))
        device_copy = device_copy or y is not None
        mode = (RECV if recv else 0) | (SEND if send else 0) | (LOCAL if local is not None else 0)
        mode |= COPY if device_copy else 0
        if reduce:
            mode |= self._op_bits(final)
        data = dict(flags, spost=0, rpost=0)
        if mode & (SEND | COPY):
            for g in range(0, k, LANES):
                m = min(LANES, k - g)
                d = dict(data)
                if recv:
                    d["rslot"] += g
                if send:
                    d["sslot"] += g
                dst = (stage if y is None else y) + g
                self._prim(mode | (NOWAIT if g else 0), m, m, x=stage + g, y=dst, note=note, **d)
        else:                                                   # a receive the host copies out of the slot
            self._prim(mode, 1, 1, note=note, **data)
        if recv and local is None and out is not None:
            self.ops.append(Read(ch.slot(rs), out.buf, out.start, k))
        if recv or send:
            self._prim(POST | (RECV if recv else 0) | (SEND if send else 0), 1, 1, note=note, **flags)
        if computed and out is not None and y is None:
            self.ops.append(Read(stage, out.buf, out.start, k))
        self._advance(ch, recv, send, rs, ss)

    def _fstep(self, ch: Channel, *, send: bool, local: Piece, out: Piece | None, note: str, y: int | None) -> None:
        """A reduce step of a float dtype on devices without floating point (qccl/kernels/fprim.cu): the combine is
        several fprim launches (phases), each short enough for the ROM; the first waits for the flags, the last
        stores the result (into the next rank's slot and/or locally); prim's POST launch posts the flags as in
        :meth:`step`. The local input sits in the first half of the staging words, fprim's scratch words in the
        second half (so a float chunk has at most half the staging words: :meth:`per`). bfloat16 / float16 buffers
        arrive here as words (two elements each; fprim reduces the low halves, then the high halves)."""
        k = local.count
        stage = self.heap.staging
        scratch = stage + self.heap.staging_words // 2
        self.ops.append(Write(stage, local.buf, local.start, k))
        rs, ss, flags = self._flags(ch, True, send)
        store = y is not None or out is not None
        mode = RECV | LOCAL | (SEND if send else 0) | (COPY if store else 0)
        mode |= (_OP_BITS[self.op] << OP_SHIFT) | (self.fmt << FMT_SHIFT)
        phases = (FP_ALIGN, FP_ROUND, FP_SIGN, FP_FINAL) if self.op == RedOp.SUM else (FP_MINMAX,)
        launches = [(p, 0) for p in phases] if self.fmt == 0 else \
            [(p, half) for half in (0, HI) for p in phases + (FP_MERGE,)]
        first = True
        for g in range(0, k, LANES):
            m = min(LANES, k - g)
            for phase, half in launches:
                args = (mode | (phase << PHASE_SHIFT) | half | (0 if first else NOWAIT), m,
                        flags.get("rtail", 0), flags.get("rwait", 0), flags.get("rhead", 0), flags.get("swait", 0),
                        flags["rslot"] + g, stage + g, (stage if y is None else y) + g,
                        flags.get("sslot", 0) + g if send else 0, flags.get("stail", 0), 0, flags.get("shead", 0), 0,
                        scratch + g)
                self.ops.append(Launch(FPRIM, m, args, note or self.note))
                first = False
        self._prim(POST | RECV | (SEND if send else 0), 1, 1, note=note, **flags)
        if out is not None and y is None:
            self.ops.append(Read(stage, out.buf, out.start, k))
        self._advance(ch, True, send, rs, ss)

    def _flags(self, ch: Channel | None, recv: bool, send: bool) -> tuple[int, int, dict]:
        """The chunk counters of a step on ``ch`` and the flag arguments of its launches (prim.cu): wait for the
        previous rank's tail / the next rank's head, the slots, and the values POST stores."""
        rs = self.state.received.get(ch.name, 0) if recv else 0
        ss = self.state.sent.get(ch.name, 0) if send else 0
        flags = {}
        if recv:
            flags.update(rtail=ch.tail, rwait=rs + 1, rslot=ch.slot(rs), shead=ch.head, rpost=rs + 1)
        if send:
            flags.update(rhead=ch.head, swait=ss + 1 - ch.slots, sslot=ch.slot(ss), stail=ch.tail, spost=ss + 1)
        return rs, ss, flags

    def _advance(self, ch: Channel | None, recv: bool, send: bool, rs: int, ss: int) -> None:
        if recv:
            self.state.received[ch.name] = rs + 1
        if send:
            self.state.sent[ch.name] = ss + 1

    def local_copy(self, src: Piece, dst: Piece, final: bool = False) -> None:
        """The device copies a piece (one rank, or a send to self): in chunks through the staging words."""
        for off in range(0, src.count, self.heap.staging_words):
            k = min(self.heap.staging_words, src.count - off)
            self.step(None, recv=False, send=False, local=Piece(src.buf, src.start + off, k), reduce=False,
                      out=Piece(dst.buf, dst.start + off, k), final=final, note=self.note + " localCopy")

    def _mc(self, mode: int, threads: int, *, x=0, win=0, seq=0, mask=0, wait=0, note=""):
        mc = self.heap.multicast
        args = (mode, x, win, mc.flags + self.rank, seq, mc.flags, mask, wait)
        self.ops.append(Launch(MCAST, threads, args, note or self.note))

    def _peers_mask(self) -> int:
        mask = 0
        for p in range(self.nranks):
            if p != self.rank:
                mask |= 1 << p
        return mask

    # -- collectives ------------------------------------------------------------------------------------------------
    def _ring_step(self, step: S.Step, local: Piece | None, out: Piece | None, final: bool, note: str,
                   y: int | None = None):
        p = step.prim
        self.step(self.heap.ring, recv=p.recv, send=p.send, local=local if p.local else None, reduce=p.reduce,
                  out=out if p.copy else None, final=final and p.copy, note=f"{note} {p}",
                  y=y if p.copy else None)

    def _one_rank(self, send: Buffer, recv: Buffer, count: int) -> bool:
        """One rank: every collective is a copy on the device (none when in place). True when that is the case."""
        if self.nranks > 1:
            return False
        if send.ptr != recv.ptr:
            self.local_copy(Piece(send, 0, count), Piece(recv, 0, count))
        return True

    @staticmethod
    def _chunks(count: int, per: int):
        """(offset, words) of each chunk of ``per`` words."""
        for off in range(0, count, per):
            yield off, min(per, count - off)

    def _rounds(self, count: int, per: int):
        """A ring-split collective (runRing's AllReduce shape) works in rounds of up to n x ``per`` elements, each cut
        into n blocks of k = ceil(m / n): yields (round offset, round size m, k)."""
        g = self.grain if per % self.grain == 0 else 1
        for off, m in self._chunks(count, self.nranks * per):
            yield off, m, -(-m // (self.nranks * g)) * g

    @staticmethod
    def _block(b: int, off: int, m: int, k: int) -> tuple[int, int]:
        """[lo, hi) of block b of a round (a short round leaves its last blocks empty)."""
        return off + min(b * k, m), off + min((b + 1) * k, m)

    def _blocks(self, order, off: int, m: int, k: int):
        """(step, lo, hi) for each step of ``order`` (qccl.steps) whose block is not empty."""
        for st in order(self.rank, self.nranks):
            lo, hi = self._block(st.block, off, m, k)
            if hi > lo:
                yield st, lo, hi

    def per(self, kind: str, algo: str, chunk: int | None = None) -> int:
        """The words per chunk a call runs with: ``chunk`` (a tuner's choice), at most :func:`max_chunk`.

        A float reduction's sum depends on the order of its adds, which the chunking decides (the ring block an
        element falls in picks the rank its chain starts at). So every transport cuts floats alike: the chunk of
        devices without floating point (fprim keeps its scratch in the staging words' second half, and runs at most
        LANES lanes), in their words, where two 16-bit floats share a word; a transport that holds an element an
        address (CuPy) takes twice as many 16-bit elements (so at most half the addresses are counted as words),
        and :meth:`_rounds` cuts its blocks in pairs."""
        most = max_chunk(self.heap, kind, algo)
        if self.dtype in FP_FORMATS and kind in ("allreduce", "reduce", "reduce_scatter"):
            words = min(most, self.heap.staging_words // 2, LANES)
            if words < 1:
                raise InvalidArgument(f"{self.dtype} reductions need slot_words >= 2 (fprim keeps its scratch words "
                                      f"in the staging words); this communicator has {self.heap.staging_words}")
            if self.dtype in (DataType.BFLOAT16, DataType.FLOAT16) and most >= 2:
                words = min(words, most // 2)       # its elements fit where each takes an address
            words = words if chunk is None else min(int(chunk), words)
            # a one-address chunk holds no pair: there the element-an-address order is its own
            return self.grain * words if self.grain * words <= most else words
        return most if chunk is None else min(int(chunk), most)

    def allreduce(self, send: Buffer, recv: Buffer, count: int, algo: str = "ring", chunk: int | None = None) -> None:
        if self._one_rank(send, recv, count):
            return
        if algo == "multicast":
            return self._allreduce_multicast(send, recv, count, chunk)
        for off, m, k in self._rounds(count, self.per("allreduce", algo, chunk)):
            for st, lo, hi in self._blocks(S.all_reduce, off, m, k):
                self._ring_step(st, Piece(send, lo, hi - lo), Piece(recv, lo, hi - lo), True, "allreduce")

    def reduce_scatter(self, send: Buffer, recv: Buffer, rc: int, chunk: int | None = None) -> None:
        if self._one_rank(send, recv, rc):
            return
        for off, k in self._chunks(rc, self.per("reduce_scatter", "ring", chunk)):
            for st in S.reduce_scatter(self.rank, self.nranks):
                self._ring_step(st, Piece(send, st.block * rc + off, k), Piece(recv, off, k), True, "reduce_scatter")

    def allgather(self, send: Buffer, recv: Buffer, sc: int, algo: str = "ring", chunk: int | None = None) -> None:
        if self._one_rank(send, recv, sc):
            return
        if algo == "multicast":
            return self._allgather_multicast(send, recv, sc, chunk)
        for off, k in self._chunks(sc, self.per("allgather", algo, chunk)):
            for st in S.all_gather(self.rank, self.nranks):
                self._ring_step(st, Piece(send, off, k), Piece(recv, st.block * sc + off, k), False, "allgather")

    def broadcast(self, send: Buffer | None, recv: Buffer, count: int, root: int, algo: str = "ring",
                  chunk: int | None = None) -> None:
        if self._one_rank(send, recv, count):
            return
        if algo == "multicast":
            return self._broadcast_multicast(send, recv, count, root, chunk)
        prim = S.broadcast(self.rank, self.nranks, root)
        in_place = self.rank == root and send.ptr == recv.ptr
        for off, k in self._chunks(count, self.per("broadcast", algo, chunk)):
            local = Piece(send, off, k) if prim.local else None
            out = None if in_place else Piece(recv, off, k)
            self.step(self.heap.ring, recv=prim.recv, send=prim.send, local=local, reduce=False, out=out,
                      note=f"broadcast {prim}")

    def reduce(self, send: Buffer, recv: Buffer | None, count: int, root: int, chunk: int | None = None) -> None:
        if self._one_rank(send, recv, count):
            return
        prim = S.reduce(self.rank, self.nranks, root)
        for off, k in self._chunks(count, self.per("reduce", "ring", chunk)):
            out = Piece(recv, off, k) if prim.copy else None
            self.step(self.heap.ring, recv=prim.recv, send=prim.send, local=Piece(send, off, k), reduce=prim.reduce,
                      out=out, final=prim.copy, note=f"reduce {prim}")

    # -- multicast ----------------------------------------------------------------------------------------------------
    def _mc_store(self, at: int, k: int, seq: int, note: str) -> None:
        """Store k words from ``at`` back to ``at`` in the window: they land locally and at every peer. The first
        launch of a round waits, once, until the peers are done with the window's previous round."""
        st = self.state
        for g in range(0, k, LANES):
            mode = MC_STORE
            if g == 0 and st.mc_seen < seq - 1:             # the peers have read this window's last round
                mode |= MC_PRE_WAIT
                st.mc_seen = seq - 1
            self._mc(mode, min(LANES, k - g), x=at + g, win=at + g, mask=self._peers_mask(), wait=seq - 1,
                     note=note)

    def _mc_step(self, step: S.Step, seq: int, blocks: list, source: Piece | None, root: int, note: str) -> None:
        """One multicast step of round ``seq``: ``blocks`` are the round's (window address, output piece) in block
        order, ``source`` the input piece a store sends (its block: ``step.block``)."""
        p, st = step.prim, self.state
        if p.store:
            at = blocks[step.block][0]
            self.ops.append(Write(at, source.buf, source.start, source.count))
            self._mc_store(at, source.count, seq, f"{note} store")
        if p.post and p.wait == "peers":
            self._mc(MC_POST | MC_WAIT, 1, seq=seq, mask=self._peers_mask(), wait=seq, note=f"{note} flags")
            st.mc_seen = seq
        elif p.post and p.wait == "root":
            self._mc(MC_POST | MC_WAIT, 1, seq=seq, mask=1 << root, wait=seq, note=f"{note} wait")
        elif p.post:
            self._mc(MC_POST, 1, seq=seq, note=f"{note} flag")
        if p.read:
            for at, out in blocks:
                if out is not None and out.count:
                    self.ops.append(Read(at, out.buf, out.start, out.count))

    def _allgather_multicast(self, send: Buffer, recv: Buffer, sc: int, chunk: int | None = None) -> None:
        n, mc, st = self.nranks, self.heap.multicast, self.state
        for off, kk in self._chunks(sc, self.per("allgather", "multicast", chunk)):
            seq = st.mc_seq + 1
            win = mc.window(seq)
            blocks = [(win + b * kk, Piece(recv, b * sc + off, kk)) for b in range(n)]
            for step in S.all_gather_multicast(self.rank, n):
                self._mc_step(step, seq, blocks, Piece(send, off, kk), 0, "allgather multicast")
            st.mc_seq = seq

    def _allreduce_multicast(self, send: Buffer, recv: Buffer, count: int, chunk: int | None = None) -> None:
        """The ring's ReduceScatter steps store each reduced block straight into the multicast window (``y``), so
        every rank gets it from one store: NVLS-style, the fabric still adds nothing. The peers are past their reads
        of the window's last round (the same parity, two rounds ago): every rank's data of this round is in the
        reduced block, so the store may land."""
        n, mc, st = self.nranks, self.heap.multicast, self.state
        per = self.per("allreduce", "multicast", chunk)
        for off, m, k in self._rounds(count, per):
            seq = st.mc_seq + 1
            win = mc.window(seq)
            blocks = [(win + lo - off, Piece(recv, lo, hi - lo)) for lo, hi in
                      (self._block(b, off, m, k) for b in range(n))]
            for step in S.all_reduce_multicast(self.rank, n):
                if isinstance(step.prim, S.McPrim):
                    self._mc_step(step, seq, blocks, None, 0, "allreduce multicast")
                    continue
                lo, hi = self._block(step.block, off, m, k)
                if hi > lo:
                    self._ring_step(step, Piece(send, lo, hi - lo), Piece(recv, lo, hi - lo), True,
                                    "allreduce multicast", y=win + lo - off)
            st.mc_seq = seq

    def _broadcast_multicast(self, send: Buffer | None, recv: Buffer, count: int, root: int,
                             chunk: int | None = None) -> None:
        mc, st = self.heap.multicast, self.state
        in_place = self.rank == root and send.ptr == recv.ptr
        for off, k in self._chunks(count, self.per("broadcast", "multicast", chunk)):
            seq = st.mc_seq + 1
            win = mc.window(seq)
            blocks = [(win, None if in_place else Piece(recv, off, k))]
            source = Piece(send, off, k) if self.rank == root else None
            for step in S.broadcast_multicast(self.rank, self.nranks, root):
                self._mc_step(step, seq, [blocks[0]] * self.nranks if step.prim.store else blocks, source, root,
                              "broadcast multicast")
            st.mc_seq = seq

    # -- point to point -----------------------------------------------------------------------------------------------
    def send_recv(self, sends: list[tuple[int, Buffer]], recvs: list[tuple[int, Buffer]],
                  pipelined: bool = True) -> None:
        """A group's sends and receives, NCCL-style: round d sends to rank+d and receives from rank-d."""
        n, r = self.nranks, self.rank
        for d in S.send_recv_rounds(n):
            to, frm = (r + d) % n, (r - d) % n
            out = [b for p, b in sends if p == to]
            inc = [b for p, b in recvs if p == frm]
            if not out and not inc:
                continue
            if d == 0:
                for a, b in zip(out, inc):
                    if a.count:
                        self.local_copy(Piece(a, 0, a.count), Piece(b, 0, b.count))
                continue
            ch = self.heap.p2p[d]
            per = ch.slot_words
            schunks = [Piece(b, o, min(per, b.count - o)) for b in out for o in range(0, b.count, per)]
            rchunks = [Piece(b, o, min(per, b.count - o)) for b in inc for o in range(0, b.count, per)]
            for ps in S.send_recv_pipeline(len(schunks), len(rchunks), pipelined):
                self._p2p_step(ch, schunks[ps.send] if ps.send is not None else None,
                               rchunks[ps.recv] if ps.recv is not None else None, d)

    def _p2p_step(self, ch: Channel, sp: Piece | None, rp: Piece | None, d: int) -> None:
        stage = self.heap.staging
        recv, send = rp is not None, sp is not None
        rs, ss, flags = self._flags(ch, recv, send)
        data = dict(flags, spost=0, rpost=0)
        note = f"sendrecv d={d}" + (" recv" if recv else "") + (" send" if send else "")
        if send:
            self.ops.append(Write(stage, sp.buf, sp.start, sp.count))
            mode = SEND | LOCAL | (RECV | SPLIT if recv else 0)
            for g in range(0, sp.count, LANES):
                m = min(LANES, sp.count - g)
                dd = dict(data)
                dd["sslot"] += g
                self._prim(mode | (NOWAIT if g else 0), m, m, x=stage + g, note=note, **dd)
        else:
            self._prim(RECV, 1, 1, note=note, **data)
        if recv:
            self.ops.append(Read(ch.slot(rs), rp.buf, rp.start, rp.count))
        self._prim(POST | (RECV if recv else 0) | (SEND if send else 0), 1, 1, note=note, **flags)
        self._advance(ch, recv, send, rs, ss)
