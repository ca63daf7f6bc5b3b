"""qccl/kernels/prim.cu on one device (no network: sslot and the posted flags are local words, so they can be read),
every mode compared with a numpy model of the kernel written here (the host-side reference)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qwengpu import Device

ROOT = Path(__file__).resolve().parents[1]
PRIM = ROOT / "qccl" / "kernels" / "prim.cu"

RECV, SEND, LOCAL, SPLIT, COPY = 1, 2, 4, 8, 16
OP_SHIFT = 5
SUM, PROD, MAX, MIN = 0, 1, 2, 3
UNSIGNED, DIV = 256, 512
SENTINEL = 0x0BADF00D
MASK = 0xFFFFFFFF


def s32(x: int) -> int:
    x &= MASK
    return x - (1 << 32) if x & 0x80000000 else x


def trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def model_prim(mode, n, rslot, x, divisor):
    """What one launch of prim computes: (y words written, sslot words written, flags posted), as int32 lists.

    y / sslot are None where the mode does not write them; the flags are {'stail': bool, 'shead': bool}.
    """
    op = (mode >> OP_SHIFT) & 7
    y, sslot = [], []
    for i in range(n):
        r = int(rslot[i]) if mode & RECV else 0
        v = int(x[i]) if mode & LOCAL else 0
        if not mode & SPLIT:
            if not mode & RECV:
                pass
            elif not mode & LOCAL:
                v = r
            elif op == SUM:
                v = s32(v + r)
            elif op == PROD:
                v = s32(v * r)
            elif mode & UNSIGNED:
                a, b = v & MASK, r & MASK
                v = s32(max(a, b) if op == MAX else min(a, b))
            else:
                v = max(v, r) if op == MAX else min(v, r)
        if mode & DIV:
            if mode & UNSIGNED:
                v = s32((v & MASK) // (divisor & MASK))
            else:
                v = s32(trunc_div(v, divisor))
        y.append(r if mode & SPLIT else v)
        sslot.append(v)
    return (y if mode & COPY else None), (sslot if mode & SEND else None), \
        {"stail": bool(mode & SEND), "shead": bool(mode & RECV)}


class Channel:
    """One device with prim's words laid out: four flags, then rslot, x, y, sslot of four words each."""

    def __init__(self):
        self.dev = Device(backend="interpreter")
        d = self.dev
        self.rtail, self.rhead, self.stail, self.shead = (d.alloc(1) for _ in range(4))
        self.rslot, self.x, self.y, self.sslot = (d.alloc(4) for _ in range(4))
        self.kernel = d.load_kernel(str(PRIM), "prim")

    def put(self, addr, words):
        self.dev.write(addr, np.asarray(words, dtype=np.int64).astype(np.int32))

    def args(self, mode, n, rwait, swait, spost, rpost, divisor):
        return [mode, n, self.rtail, rwait, self.rhead, swait, self.rslot, self.x, self.y, self.sslot,
                self.stail, spost, self.shead, rpost, divisor]

    def read(self, addr, n=4):
        return [int(w) for w in self.dev.read(addr, n)]


def mode_name(mode):
    parts = [name for bit, name in ((RECV, "RECV"), (SEND, "SEND"), (LOCAL, "LOCAL"), (SPLIT, "SPLIT"),
                                   (COPY, "COPY"), (UNSIGNED, "UNSIGNED"), (DIV, "DIV")) if mode & bit]
    op = (mode >> OP_SHIFT) & 7
    if op:
        parts.append(("SUM", "PROD", "MAX", "MIN")[op])
    return "|".join(parts)


def run_mode(mode, n, seed, divisor=3, rslot=None, x=None, swait=1):
    """Launch prim once with the waits pre-satisfied; compare y, sslot and the flags with model_prim."""
    rng = np.random.default_rng(seed)
    ch = Channel()
    rslot = rng.integers(-(1 << 31), (1 << 31) - 1, 4, endpoint=True) if rslot is None else np.asarray(rslot)
    x = rng.integers(-(1 << 31), (1 << 31) - 1, 4, endpoint=True) if x is None else np.asarray(x)
    rslot[:2] = rng.integers(-50, 50, 2)                   # some small values too: products and quotients vary
    x[:2] = rng.integers(-50, 50, 2)
    rwait, spost, rpost = 5, 9, 6
    ch.put(ch.rtail, [rwait])          # the chunk has arrived
    ch.put(ch.rhead, [max(swait, 0)])  # a slot is free at the next rank
    ch.put(ch.stail, [SENTINEL])
    ch.put(ch.shead, [SENTINEL])
    ch.put(ch.rslot, rslot)
    ch.put(ch.x, x)
    ch.put(ch.y, [SENTINEL] * 4)
    ch.put(ch.sslot, [SENTINEL] * 4)
    ch.dev.launch(ch.kernel, threads=4, args=ch.args(mode, n, rwait, swait, spost, rpost, divisor),
                  max_records=5000)
    y, sslot, flags = model_prim(mode, n, [s32(int(v)) for v in rslot], [s32(int(v)) for v in x], divisor)
    what = f"prim mode={mode_name(mode)} ({mode}) n={n}"
    exp_y = (y if y is not None else []) + [SENTINEL] * (4 - (n if y is not None else 0))
    exp_s = (sslot if sslot is not None else []) + [SENTINEL] * (4 - (n if sslot is not None else 0))
    assert ch.read(ch.y) == exp_y, f"{what}: y"
    assert ch.read(ch.sslot) == exp_s, f"{what}: sslot"
    assert ch.read(ch.stail, 1) == [spost if flags["stail"] else SENTINEL], f"{what}: stail (posted to the next rank)"
    assert ch.read(ch.shead, 1) == [rpost if flags["shead"] else SENTINEL], f"{what}: shead (posted to the previous)"
    assert ch.read(ch.rslot) == [s32(int(v)) for v in rslot], f"{what}: rslot changed"
    assert ch.read(ch.x) == [s32(int(v)) for v in x], f"{what}: x changed"
    assert ch.read(ch.rtail, 1) == [rwait] and ch.read(ch.rhead, 1) == [max(swait, 0)], f"{what}: a wait flag changed"
    return ch


# NCCL's primitive names for the modes qccl uses.
STEPS = {
    "send": LOCAL | SEND,
    "recv": RECV | COPY,
    "localCopy": LOCAL | COPY,
    "recvReduceCopy": RECV | LOCAL | COPY,
    "recvReduceSend": RECV | LOCAL | SEND,
    "recvReduceCopySend": RECV | LOCAL | COPY | SEND,
    "recvCopySend": RECV | COPY | SEND,
    "recvSend": RECV | SEND,
    # SPLIT: the received chunk goes to y and the local chunk is sent (a pipelined SendRecv step)
    "sendRecv": RECV | LOCAL | SPLIT | COPY | SEND,
    "splitRecv": RECV | SPLIT | COPY,
    "splitSend": LOCAL | SPLIT | SEND,
    "splitRecvSendZero": RECV | SPLIT | COPY | SEND,
    "nothing": 0,
}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("step", sorted(STEPS))
def test_prim_steps(step, n):
    run_mode(STEPS[step], n, seed=sorted(STEPS).index(step) * 10 + n)


REDUCE_MODES = [RECV | LOCAL | COPY, RECV | LOCAL | SEND, RECV | LOCAL | COPY | SEND]


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("base", REDUCE_MODES, ids=mode_name)
@pytest.mark.parametrize("op", [SUM, PROD, MAX, MIN], ids=["sum", "prod", "max", "min"])
@pytest.mark.parametrize("unsigned", [0, UNSIGNED], ids=["signed", "unsigned"])
def test_prim_reduce_ops(op, unsigned, base, n):
    run_mode(base | (op << OP_SHIFT) | unsigned, n, seed=op * 100 + unsigned + base + n)


def test_prim_unsigned_compare_differs_from_signed():
    rslot, x = np.array([-1, 5, -7, 1 << 30]), np.array([1, -5, 7, -(1 << 30)])
    for op in (MAX, MIN):
        mode = RECV | LOCAL | COPY | (op << OP_SHIFT)
        a = run_mode(mode, 4, 1, rslot=rslot.copy(), x=x.copy())
        b = run_mode(mode | UNSIGNED, 4, 1, rslot=rslot.copy(), x=x.copy())
        assert a.read(a.y) != b.read(b.y)


@pytest.mark.parametrize("divisor", [3, 4, -3, 7])
@pytest.mark.parametrize("mode", [RECV | LOCAL | COPY | DIV, RECV | LOCAL | COPY | SEND | DIV,
                                  RECV | LOCAL | SEND | DIV | UNSIGNED, RECV | COPY | DIV, LOCAL | COPY | DIV,
                                  LOCAL | COPY | DIV | UNSIGNED, RECV | LOCAL | COPY | DIV | (MAX << OP_SHIFT)],
                         ids=mode_name)
def test_prim_div(mode, divisor):
    run_mode(mode, 4, seed=divisor & 0xFF, divisor=divisor)


def test_prim_send_without_head_wait():
    run_mode(LOCAL | SEND, 4, seed=5, swait=0)


def _started(ch, mode, rtail, rhead, rwait=2, swait=3):
    ch.put(ch.rtail, [rtail])
    ch.put(ch.rhead, [rhead])
    ch.put(ch.rslot, [1, 2, 3, 4])
    ch.put(ch.x, [10, 20, 30, 40])
    ch.put(ch.y, [0] * 4)
    ch.put(ch.sslot, [0] * 4)
    ch.put(ch.stail, [0])
    ch.put(ch.shead, [0])
    ch.dev.start(ch.kernel, 4, ch.args(mode, 4, rwait, swait, 7, 8, 1))


def _finish(ch, limit=2000):
    for _ in range(limit):
        if not ch.dev.busy:
            return
        ch.dev.step()
    raise AssertionError("prim did not finish")


def test_prim_recv_waits_for_tail():
    ch = Channel()
    mode = RECV | LOCAL | COPY | SEND
    _started(ch, mode, rtail=1, rhead=3)
    for _ in range(12):
        ch.dev.step()
        assert ch.dev.busy, "prim went on before the chunk arrived (rtail < rwait)"
    ch.put(ch.rtail, [2])                  # the previous rank posts the tail between records
    _finish(ch)
    assert ch.read(ch.y) == [11, 22, 33, 44] and ch.read(ch.sslot) == [11, 22, 33, 44]
    assert ch.read(ch.stail, 1) == [7] and ch.read(ch.shead, 1) == [8]


def test_prim_send_waits_for_head():
    ch = Channel()
    mode = LOCAL | SEND
    _started(ch, mode, rtail=0, rhead=2)
    for _ in range(12):
        ch.dev.step()
        assert ch.dev.busy, "prim sent before the next rank freed a slot (rhead < swait)"
    ch.put(ch.rhead, [3])
    _finish(ch)
    assert ch.read(ch.sslot) == [10, 20, 30, 40] and ch.read(ch.y) == [0] * 4
    assert ch.read(ch.stail, 1) == [7] and ch.read(ch.shead, 1) == [0]


# The later protocol bits (NOWAIT, POST, "a flag of 0 posts nothing"): tested when the kernel defines them.
NOWAIT, POST = 1024, 2048


def _fresh(ch, rtail, rhead):
    ch.put(ch.rtail, [rtail])
    ch.put(ch.rhead, [rhead])
    ch.put(ch.rslot, [1, 2, 3, 4])
    ch.put(ch.x, [10, 20, 30, 40])
    for addr in (ch.y, ch.sslot):
        ch.put(addr, [SENTINEL] * 4)
    ch.put(ch.stail, [SENTINEL])
    ch.put(ch.shead, [SENTINEL])


@pytest.mark.parametrize("mode", [RECV | LOCAL | COPY | SEND, LOCAL | SEND, RECV | COPY], ids=mode_name)
def test_prim_zero_flags_post_nothing(mode):
    ch = Channel()
    _fresh(ch, rtail=5, rhead=5)
    ch.dev.launch(ch.kernel, threads=4, args=ch.args(mode, 4, 5, 5, 0, 0, 1), max_records=5000)
    y, sslot, _ = model_prim(mode, 4, [1, 2, 3, 4], [10, 20, 30, 40], 1)
    assert ch.read(ch.y) == (y if y is not None else [SENTINEL] * 4)
    assert ch.read(ch.sslot) == (sslot if sslot is not None else [SENTINEL] * 4)
    assert ch.read(ch.stail, 1) == [SENTINEL] and ch.read(ch.shead, 1) == [SENTINEL]


@pytest.mark.parametrize("mode", [RECV | SEND | POST, SEND | POST, RECV | POST, RECV | LOCAL | COPY | SEND | POST],
                         ids=mode_name)
def test_prim_post_only_writes_the_flags(mode):
    ch = Channel()
    _fresh(ch, rtail=0, rhead=0)                         # POST does not wait
    ch.dev.launch(ch.kernel, threads=1, args=ch.args(mode, 4, 5, 5, 9, 6, 1), max_records=5000)
    assert ch.read(ch.y) == [SENTINEL] * 4 and ch.read(ch.sslot) == [SENTINEL] * 4
    assert ch.read(ch.stail, 1) == [9 if mode & SEND else SENTINEL]
    assert ch.read(ch.shead, 1) == [6 if mode & RECV else SENTINEL]


@pytest.mark.parametrize("n", [1, 4])
def test_prim_nowait_does_not_wait(n):
    ch = Channel()
    mode = RECV | LOCAL | COPY | SEND | NOWAIT
    _fresh(ch, rtail=0, rhead=0)                         # neither wait would pass
    ch.dev.launch(ch.kernel, threads=4, args=ch.args(mode, n, 5, 5, 0, 0, 1), max_records=5000)
    y, sslot, _ = model_prim(mode & ~NOWAIT, n, [1, 2, 3, 4], [10, 20, 30, 40], 1)
    assert ch.read(ch.y) == y + [SENTINEL] * (4 - n)
    assert ch.read(ch.sslot) == sslot + [SENTINEL] * (4 - n)
    assert ch.read(ch.stail, 1) == [SENTINEL] and ch.read(ch.shead, 1) == [SENTINEL]
