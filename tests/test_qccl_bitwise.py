"""BAND, BOR and BXOR (the machine's ALU has them, NCCL lacks them): qccl's reductions against numpy, on the ring and
the multicast algorithm, and refused where they make no sense."""
import numpy as np
import pytest

import qccl

OPS = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def _inputs(n: int, count: int, dtype, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32).view(dtype) for _ in range(n)]


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("algo", ["ring", "multicast"])
def test_allreduce_bitwise_equals_numpy(op, dtype, algo):
    comms = qccl.Communicator.init_all(4)
    xs = _inputs(4, 11, dtype, seed=len(op))
    ys = [np.zeros(11, dtype) for _ in range(4)]
    with qccl.group():
        for c in comms:
            c.allreduce(xs[c.rank], ys[c.rank], op, algo=algo)
    expect = OPS[op].reduce(np.stack(xs), axis=0)
    for y in ys:
        np.testing.assert_array_equal(y, expect)


@pytest.mark.parametrize("op", sorted(OPS))
def test_reduce_and_reduce_scatter_bitwise_equal_numpy(op):
    comms = qccl.Communicator.init_all(3)
    xs = _inputs(3, 9, np.int32, seed=7)
    ys = [np.zeros(9, np.int32) for _ in range(3)]
    with qccl.group():
        for c in comms:
            c.reduce(xs[c.rank], ys[c.rank] if c.rank == 2 else None, op, root=2)
    np.testing.assert_array_equal(ys[2], OPS[op].reduce(np.stack(xs), axis=0))
    zs = [np.zeros(3, np.int32) for _ in range(3)]
    with qccl.group():
        for c in comms:
            c.reduce_scatter(xs[c.rank], zs[c.rank], op)
    full = OPS[op].reduce(np.stack(xs), axis=0)
    for r, z in enumerate(zs):
        np.testing.assert_array_equal(z, full[3 * r:3 * r + 3])


def test_bitwise_ops_have_names_not_nccl_numbers():
    assert qccl.red_op("bxor") is qccl.BXOR and qccl.red_op("BAND") is qccl.BAND
    with pytest.raises(qccl.InvalidArgument, match="NCCL's numbers 0..4"):
        qccl.red_op(5)          # NCCL has no bitwise ops: no number names one
    with pytest.raises(qccl.InvalidArgument, match="bor takes int32 or uint32, not float32"):
        qccl.Communicator.init_all(1)[0].allreduce(np.ones(2, np.float32), np.ones(2, np.float32), "bor")
