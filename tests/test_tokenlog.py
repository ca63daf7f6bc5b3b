"""The device's token log: the same positions as a list of Tokens (the reference here), compact, and bounded when
asked, with positions that stay absolute and a clear error for a trimmed one."""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import tokens as T
from qwengpu.device import Device
from qwengpu.tokenlog import TokenLog

VADD = "qwengpu/kernels/vadd.cu"      # c[i] = a[i] + b[i]


def random_tokens(rng, n):
    origins = (T.HOST, T.MODEL, T.PEER)
    out = []
    for _ in range(n):
        token = T.VAL(int(rng.integers(1 << 16)))
        written = T.MEM(int(rng.integers(127))) if rng.random() < 0.1 else None
        out.append(T.Token(token, origins[rng.integers(3)], written))
    return out


def test_it_reads_as_the_list_of_tokens_it_was_given():
    rng = np.random.default_rng(0)
    ref = random_tokens(rng, 500)
    log = TokenLog()
    for t in ref:
        log.append(t.id, t.origin, t.written)
    assert len(log) == 500 and log == ref and list(log) == ref
    assert log[7] == ref[7] and log[-1] == ref[-1] and log[100:140] == ref[100:140]
    assert log.ids().tolist() == [t.id for t in ref] and log.ids(10, 20).tolist() == [t.id for t in ref[10:20]]
    log[3] = T.Token(ref[3].id ^ 1, T.MODEL)
    ref[3] = T.Token(ref[3].id ^ 1, T.MODEL)
    del log[400:]
    assert log == ref[:400]


def test_a_bounded_log_keeps_the_latest_positions_and_names_a_trimmed_one():
    rng = np.random.default_rng(1)
    ref = random_tokens(rng, 1000)
    log = TokenLog(keep=100)
    for i, t in enumerate(ref):
        log.append(t.id, t.origin, t.written)
        if i % 37 == 0:
            log.trim()
    log.trim()
    assert len(log) == 1000 and log.start >= 800 and 100 <= 1000 - log.start < 200
    assert list(log) == ref[log.start:] and log[999] == ref[999] and log[log.start:] == ref[log.start:]
    with pytest.raises(IndexError, match=r"position 5 was trimmed: this log keeps the last 100 positions"):
        log[5]
    with pytest.raises(IndexError, match="trimmed"):
        log[0:10]
    with pytest.raises(ValueError, match="token_log=0"):
        TokenLog(keep=0)


def test_a_device_with_a_bounded_log_runs_the_same_stream_in_flat_memory():
    """The same 200 launches on a whole-stream device (the reference) and a bounded one: the same memory, the same
    latest positions, and the bounded log never holds more than twice its bound."""
    whole, bounded = Device(), Device(token_log=256)
    held = []
    for dev in (whole, bounded):
        k = dev.load_kernel(VADD, "vadd")
        dev.write(0, np.arange(4))
        dev.write(4, np.ones(4, np.int64))
        for _ in range(200):        # c = a + b with c = a: a += 1
            dev.launch(k, 4, [0, 4, 0, 4])
            held.append(len(dev.tokens) - dev.tokens.start)
    got = {id(dev): dev.read(0, 4) for dev in (whole, bounded)}       # a read is fed too: once on each
    assert np.array_equal(got[id(whole)], np.arange(4) + 200) and np.array_equal(got[id(bounded)], got[id(whole)])
    assert len(bounded.tokens) == len(whole.tokens) > 10 * 256
    assert bounded.tokens[bounded.tokens.start:] == whole.tokens[bounded.tokens.start:]
    assert max(held[200:]) < 2 * 256 + 200     # at most 2 x keep between launches, plus the last launch's own

