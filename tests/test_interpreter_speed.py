"""The fast interpreter writes the same token streams as before it was made fast.

The digests below were recorded from the streams of commit eb76979 (the interpreter before its parser was rewritten
to compare token ids instead of building tuples per token, and before snapshot() stopped deep-copying): every
device's stream of a 4-rank AllReduce of 37 words, ring and multicast, each token as (id, origin, written). Any change
in what a device writes, what it is fed, or in which order packets land changes the digest. Speed itself is measured
by ``python -m qccl_bench.interp_speed``, never asserted here.
"""
import hashlib

import numpy as np
import pytest

import qccl
from qwengpu import Device
from qwengpu import tokens as T
from qwengpu.interpreter import Interpreter
from qwengpu.isa import MachineError

RECORDED = {   # algo -> (sha256 of the four streams, tokens in rank 0's stream), from commit eb76979
    "ring": ("68fe66f9d33c33337b059bafd6bab750099f4c2baa80ae4a402b5ee3ad47d485", 2264),
    "multicast": ("9cf821de297a9b10ef95d916262568ab943debf85324d0be928f602e047427e5", 2084),
}


def _streams(algo):
    n = 37
    comms = qccl.Communicator.init_all(4)
    send = [((np.arange(n, dtype=np.int64) * 7919 * (r + 3)) % 100003 - 50000).astype(np.int32) for r in range(4)]
    recv = [np.zeros(n, np.int32) for _ in range(4)]
    with qccl.group():
        for c in comms:
            c.allreduce(send[c.rank], recv[c.rank], algo=algo)
    for r in range(4):
        np.testing.assert_array_equal(recv[r], np.sum(send, axis=0, dtype=np.int32))
    h = hashlib.sha256()
    for r in range(4):
        for t in comms[0].world.devices[r].tokens:
            h.update(f"{t.id},{t.origin},{t.written};".encode())
    return h.hexdigest(), len(comms[0].world.devices[0].tokens)


@pytest.mark.parametrize("algo", ["ring", "multicast"])     # named: the default (auto) would pick one of them
def test_allreduce_stream_unchanged(algo):
    assert _streams(algo) == RECORDED[algo]


def test_snapshot_is_a_copy():
    """restore() brings back the state of snapshot() even after the machine ran on (no shared lists)."""
    dev = Device()
    a = dev.alloc(4)
    dev.write(a, np.array([1, 2, 3, 4]))
    state = dev.backend.snapshot()
    dev.write(a, np.array([9, 9, 9, 9]))
    dev.backend.restore(state)
    np.testing.assert_array_equal(dev.read(a, 4), [1, 2, 3, 4])


def test_bad_tokens_are_refused():
    it = Interpreter()
    with pytest.raises(MachineError, match="outside the vocabulary"):
        it.feed(10**9)
    it.feed(T.MEM(3))
    with pytest.raises(MachineError, match="expected a VAL token"):
        it.feed(T.MEM(3))
