"""Floating-point reductions on QwenGPUs: float32, bfloat16 and float16 sum / max / min through QLink, bit for bit
equal to a numpy replay of NCCL's ring order.

The QwenGPU has no floating point: qccl/kernels/fprim.cu computes IEEE arithmetic with integer operations. The
references here are numpy's own float arithmetic, applied in the order NCCL's runRing reduces each element (the ring
block an element falls in starts at the rank after its block index and ends at the block's own rank), written
without looking at the kernels:
  - float32 sum: numpy float32 adds in that order; a NaN result is the GPU's canonical NaN (0x7fffffff);
  - bfloat16 sum: each add as NCCL's bf16 sum does it, float32 add then round to nearest even to bfloat16;
  - float16 sum: numpy float16 adds (computed in float32 and rounded once);
  - max / min: CUDA's fmaxf / fminf (a NaN operand is ignored; both NaN: canonical NaN), with -0 < +0.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import qccl
from qccl.errors import InvalidArgument

F32, BF16, F16 = "float32", "bfloat16", "float16"
CANONICAL = {F32: 0x7FFFFFFF, BF16: 0x7FFF, F16: 0x7FFF}
UINT = {F32: np.uint32, BF16: np.uint16, F16: np.uint16}


# -- the reference: IEEE arithmetic in numpy ------------------------------------------------------------------------
def _as_f32(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == F32:
        return bits.view(np.float32)
    if dtype == BF16:
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(np.float16).astype(np.float32)


def _bf16_round(f: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (as __float2bfloat16_rn); NaN -> canonical."""
    u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    r[np.isnan(f)] = 0x7FFF
    return r


def ref_op(a: np.ndarray, b: np.ndarray, dtype: str, op: str) -> np.ndarray:
    """a op b on bit patterns (uint32 for float32, uint16 for the halves), elementwise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if op == "sum":
            if dtype == F32:
                r = (a.view(np.float32) + b.view(np.float32)).view(np.uint32).copy()
            elif dtype == F16:
                r = (a.view(np.float16) + b.view(np.float16)).view(np.uint16).copy()
            else:
                return _bf16_round(_as_f32(a, dtype) + _as_f32(b, dtype))
            r[np.isnan(_as_f32(r, dtype))] = CANONICAL[dtype]
            return r
        fa, fb = _as_f32(a, dtype), _as_f32(b, dtype)
        pick = np.fmax(fa, fb) if op == "max" else np.fmin(fa, fb)       # NaN operands ignored
        r = np.where(pick == fa, a, b)
        r = np.where(fa == fb, (a & b) if op == "max" else (a | b), r)     # +0 beats -0 in max, -0 wins min
        r = r.astype(a.dtype)
        r[np.isnan(fa) & np.isnan(fb)] = CANONICAL[dtype]
        return r


def ring_words(nwords: int, nranks: int, per: int) -> list[tuple[int, int, int]]:
    """NCCL's runRing split of an AllReduce: rounds of nranks x per words, each cut into nranks blocks of
    ceil(m / nranks); (lo, hi, block) for every non-empty block."""
    out = []
    for off in range(0, nwords, nranks * per):
        m = min(nranks * per, nwords - off)
        k = -(-m // nranks)
        for b in range(nranks):
            lo, hi = off + min(b * k, m), off + min((b + 1) * k, m)
            if hi > lo:
                out.append((lo, hi, b))
    return out


def chain(xs: list[np.ndarray], last: int, dtype: str, op: str) -> np.ndarray:
    """Reduce along the ring ending at rank ``last``: start at last + 1, then each next rank combines its own input
    with what arrived (x_r op acc), last at rank ``last``."""
    n = len(xs)
    acc = xs[(last + 1) % n]
    for j in range(2, n + 1):
        acc = ref_op(xs[(last + j) % n], acc, dtype, op)
    return acc


def replay_allreduce(xs: list[np.ndarray], dtype: str, op: str, per: int = 4) -> np.ndarray:
    """The ring AllReduce's result of bit arrays ``xs`` (one per rank), ``per`` words per chunk (qccl's float chunk:
    half of the 8 staging words). bfloat16 / float16: two elements a word."""
    n = len(xs)
    epw = 1 if dtype == F32 else 2
    nwords = -(-xs[0].size // epw)
    out = np.empty_like(xs[0])
    for lo, hi, b in ring_words(nwords, n, per):
        sl = slice(lo * epw, hi * epw)
        out[sl] = chain([x[sl] for x in xs], b, dtype, op)
    return out


# -- inputs ---------------------------------------------------------------------------------------------------------
SPECIAL = {F32: [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 1, 0x80000001, 0x007FFFFF,
                 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x33800000, 0x3F800001],
           BF16: [0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 1, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80,
                  0xBF80, 0x3B80, 0x3F81],
           F16: [0, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 1, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00,
                 0xBC00, 0x1400, 0x3C01]}


def _from_f32(f: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == F32:
        return f.astype(np.float32).view(np.uint32)
    if dtype == F16:
        return f.astype(np.float16).view(np.uint16)
    return _bf16_round(f.astype(np.float32))


def operand_pairs(dtype: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of special values (zeros, infinities, NaNs, subnormals, the largest finite, ties), random bit
    patterns, near-cancelling pairs, subnormal pairs and ordinary values."""
    rng = np.random.default_rng(seed)
    u = UINT[dtype]
    s = np.array(SPECIAL[dtype], u)
    a, b = [np.repeat(s, s.size)], [np.tile(s, s.size)]
    top = 2 ** (8 * np.dtype(u).itemsize)
    a.append(rng.integers(0, top, 96, dtype=np.uint64).astype(u))
    b.append(rng.integers(0, top, 96, dtype=np.uint64).astype(u))
    f = rng.standard_normal(64)
    a.append(_from_f32(f, dtype))
    b.append(_from_f32(-f * (1 + rng.standard_normal(64) * 1e-3), dtype))      # cancellation
    sub = (1 << (23 if dtype == F32 else 7 if dtype == BF16 else 10)) * 2
    sign = u(1 << (8 * np.dtype(u).itemsize - 1))
    a.append(rng.integers(0, sub, 32).astype(u) | (rng.integers(0, 2, 32).astype(u) * sign))
    b.append(rng.integers(0, sub, 32).astype(u) | (rng.integers(0, 2, 32).astype(u) * sign))
    a.append(_from_f32(f[:32] * 1e3, dtype))
    b.append(_from_f32(f[32:] * 1e-3, dtype))
    return np.concatenate(a), np.concatenate(b)


# -- the kernel against numpy, one launch sequence per 4 words ------------------------------------------------------
def run_fprim(dev, kernel, a: np.ndarray, b: np.ndarray, dtype: str, op: str) -> np.ndarray:
    """a op b on one device through fprim's phases exactly as qccl.schedule launches them (no flags)."""
    from qccl.schedule import (FP_ALIGN, FP_FINAL, FP_FORMATS, FP_MERGE, FP_MINMAX, FP_ROUND, FP_SIGN, FMT_SHIFT,
                               HI, LOCAL, COPY, NOWAIT, OP_SHIFT, PHASE_SHIFT)
    from qccl.types import DataType
    fmt = FP_FORMATS[DataType[dtype.upper()]]
    phases = (FP_ALIGN, FP_ROUND, FP_SIGN, FP_FINAL) if op == "sum" else (FP_MINMAX,)
    launches = [(p, 0) for p in phases] if fmt == 0 else [(p, h) for h in (0, HI) for p in phases + (FP_MERGE,)]
    words_a, words_b = a.view(np.int32), b.view(np.int32)
    out = np.empty_like(words_a)
    R, X, T, Y = 0, 8, 12, 16
    for g in range(0, words_a.size, 4):
        m = min(4, words_a.size - g)
        dev.write(R, words_b[g:g + m])
        dev.write(X, words_a[g:g + m])
        for phase, half in launches:
            mode = LOCAL | COPY | NOWAIT | ({"sum": 0, "max": 2, "min": 3}[op] << OP_SHIFT) | (fmt << FMT_SHIFT)
            dev.launch(kernel, m, [mode | (phase << PHASE_SHIFT) | half, m, 0, 0, 0, 0, R, X, Y, 0, 0, 0, 0, 0, T])
        out[g:g + m] = dev.read(Y, m)
    return out.view(a.dtype)


@pytest.mark.parametrize("dtype", [F32, BF16, F16])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_fprim_equals_numpy_on_edge_values(dtype, op):
    from qwengpu import Device
    dev = Device()
    kernel = dev.load_kernel("qccl/kernels/fprim.cu", "fprim")
    a, b = operand_pairs(dtype, seed=len(op))
    if a.size % 2:
        a, b = a[:-1], b[:-1]
    got = run_fprim(dev, kernel, a, b, dtype, op)
    want = ref_op(a, b, dtype, op)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(hex(a[i]), hex(b[i]), hex(got[i]), hex(want[i])) for i in bad[:8]]
    # commutative bit for bit (the ring adds x_r + acc): b op a gives the same bits
    assert np.array_equal(run_fprim(dev, kernel, b[:64], a[:64], dtype, op), want[:64])


def test_every_phase_fits_the_machine():
    """Each launch of a float step fits the 32-block ROM and 15 registers (the lowering refuses otherwise); only a
    step's first launch (ALIGN or MINMAX on the low halves) waits for the flags."""
    from qwengpu import Device
    from qccl.schedule import (FP_ALIGN, FP_FINAL, FP_MERGE, FP_MINMAX, FP_ROUND, FP_SIGN, FMT_SHIFT, HI, LOCAL,
                               COPY, NOWAIT, OP_SHIFT, PHASE_SHIFT, RECV, SEND)
    kernel = Device().load_kernel("qccl/kernels/fprim.cu", "fprim")
    for fmt in (0, 1, 2):
        for phase in (FP_ALIGN, FP_ROUND, FP_SIGN, FP_FINAL, FP_MINMAX, FP_MERGE):
            for half in ((0,) if fmt == 0 else (0, HI)):
                first = phase in (FP_ALIGN, FP_MINMAX) and half == 0
                for wait in ((0, NOWAIT) if first else (NOWAIT,)):
                    mode = RECV | SEND | LOCAL | COPY | (2 << OP_SHIFT) | (fmt << FMT_SHIFT) | (phase << PHASE_SHIFT)
                    program = kernel.program((mode | half | wait, 4, 10, 1, 11, 1, 0, 20, 20, 0, 10, 0, 11, 0, 24),
                                             4, 0, 1)
                    assert len(program.blocks) <= 32 and program.registers <= 15


# -- collectives on QLink -------------------------------------------------------------------------------------------
def inputs(n: int, count: int, dtype: str, seed: int) -> list[np.ndarray]:
    """Per-rank bit arrays: ordinary values of mixed scale, with a few specials sprinkled in."""
    rng = np.random.default_rng(seed)
    xs = []
    for r in range(n):
        f = rng.standard_normal(count) * np.exp(rng.uniform(-8, 8, count))
        bits = _from_f32(f, dtype).copy()
        where = rng.integers(0, count, 2)
        bits[where] = np.array(SPECIAL[dtype], UINT[dtype])[rng.integers(0, 16, 2)]
        xs.append(bits)
    return xs


def _arrays(bits: list[np.ndarray], dtype: str):
    if dtype == F32:
        return [b.view(np.float32).copy() for b in bits]
    if dtype == F16:
        return [b.view(np.float16).copy() for b in bits]
    torch = pytest.importorskip("torch")
    return [torch.from_numpy(b.view(np.int16).copy()).view(torch.bfloat16) for b in bits]


def _bits(arr, dtype: str) -> np.ndarray:
    if dtype == BF16:
        import torch
        return arr.view(torch.int16).numpy().view(np.uint16)
    return arr.view(UINT[dtype])


def _zeros(like, dtype: str):
    if dtype == BF16:
        import torch
        return torch.zeros_like(like)
    return np.zeros_like(like)


@pytest.mark.parametrize("n,dtype,op,count,algo", [
    (4, F32, "sum", 37, "ring"), (4, F32, "max", 21, "ring"), (4, F32, "min", 21, "ring"),
    (3, F32, "sum", 29, "multicast"), (4, BF16, "sum", 27, "ring"), (2, BF16, "max", 9, "ring"),
    (3, F16, "sum", 19, "ring"), (3, F16, "min", 12, "ring"),
])
def test_allreduce_equals_numpy_replay_of_the_ring(n, dtype, op, count, algo):
    bits = inputs(n, count, dtype, seed=n * 100 + count)
    xs = _arrays(bits, dtype)
    outs = [_zeros(x, dtype) for x in xs]
    comms = qccl.Communicator.init_all(n)
    with qccl.group():
        for r in range(n):
            comms[r].allreduce(xs[r], outs[r], op, algo=algo)
    want = replay_allreduce(bits, dtype, op)
    for r in range(n):
        got = _bits(outs[r], dtype)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, (r, [(i, hex(got[i]), hex(want[i])) for i in bad[:6]])
    for x, b in zip(xs, bits):
        assert np.array_equal(_bits(x, dtype), b)           # the inputs are untouched


def test_multicast_chunks_follow_the_window():
    """On 5 ranks a multicast AllReduce round's blocks are 3 words (16-word window / 5, under the float chunk of 4),
    so its ring order differs from the ring algorithm's 4-word blocks: each matches its own replay."""
    from qccl.schedule import max_chunk
    n = 5
    bits = inputs(n, 23, F32, seed=5)
    comms = qccl.Communicator.init_all(n)
    per = {a: min(max_chunk(comms[0].heap, "allreduce", a), 4) for a in ("ring", "multicast")}
    assert per == {"ring": 4, "multicast": 3}
    assert not np.array_equal(replay_allreduce(bits, F32, "sum", 3), replay_allreduce(bits, F32, "sum", 4))
    for algo in ("ring", "multicast"):
        xs = _arrays(bits, F32)
        outs = [np.zeros_like(x) for x in xs]
        with qccl.group():
            for r in range(n):
                comms[r].allreduce(xs[r], outs[r], "sum", algo=algo)
        want = replay_allreduce(bits, F32, "sum", per=per[algo])
        assert all(np.array_equal(o.view(np.uint32), want) for o in outs), algo


def test_allreduce_in_place_and_the_order_matters():
    """The replay is not order-free: a different ring order gives different bits for these inputs, and qccl's in-place
    AllReduce gives the ring's."""
    n = 4
    rng = np.random.default_rng(7)
    f = [(rng.standard_normal(16) * 10.0 ** rng.integers(-6, 6, 16)).astype(np.float32) for _ in range(n)]
    bits = [x.view(np.uint32).copy() for x in f]
    comms = qccl.Communicator.init_all(n)
    with qccl.group():
        for r in range(n):
            comms[r].allreduce(f[r], f[r], "sum", algo="ring")
    want = replay_allreduce(bits, F32, "sum")
    assert all(np.array_equal(x.view(np.uint32), want) for x in f)
    naive = (bits[0].view(np.float32) + bits[1].view(np.float32) + bits[2].view(np.float32)
             + bits[3].view(np.float32)).view(np.uint32)
    assert not np.array_equal(naive, want)


def test_reduce_scatter_and_reduce_follow_the_ring():
    n, rc = 4, 6
    bits = inputs(n, n * rc, F32, seed=11)
    xs = _arrays(bits, F32)
    comms = qccl.Communicator.init_all(n)
    outs = [np.zeros(rc, np.float32) for _ in range(n)]
    with qccl.group():
        for r in range(n):
            comms[r].reduce_scatter(xs[r], outs[r], "sum")
    for r in range(n):           # rank r's block: from rank r + 1 round to rank r
        want = chain([b[r * rc:(r + 1) * rc] for b in bits], r, F32, "sum")
        assert np.array_equal(outs[r].view(np.uint32), want)
    root = 2
    out = np.zeros(n * rc, np.float32)
    with qccl.group():
        for r in range(n):
            comms[r].reduce(xs[r], out if r == root else None, "max", root=root)
    assert np.array_equal(out.view(np.uint32), chain(bits, root, F32, "max"))


def test_bfloat16_reduce_scatter_with_odd_blocks():
    torch = pytest.importorskip("torch")
    n, rc = 3, 5              # five bf16 elements a rank: its words are padded, the padding never reaches the user
    bits = inputs(n, n * rc, BF16, seed=12)
    xs = _arrays(bits, BF16)
    outs = [torch.full((rc,), 7.0, dtype=torch.bfloat16) for _ in range(n)]
    comms = qccl.Communicator.init_all(n)
    with qccl.group():
        for r in range(n):
            comms[r].reduce_scatter(xs[r], outs[r], "sum")
    for r in range(n):
        want = chain([b[r * rc:(r + 1) * rc] for b in bits], r, BF16, "sum")
        assert np.array_equal(_bits(outs[r], BF16), want)


@pytest.mark.parametrize("dtype,op,msg", [(F32, "prod", "prod"), (F32, "avg", "avg"), (BF16, "prod", "prod"),
                                          (F32, "band", "band"), (F16, "avg", "avg")])
def test_unsupported_float_ops_are_refused_before_anything_moves(dtype, op, msg):
    n = 2
    bits = inputs(n, 6, dtype, seed=3)
    xs = _arrays(bits, dtype)
    outs = [_zeros(x, dtype) for x in xs]
    comms = qccl.Communicator.init_all(n)
    before = comms[0].stats["tokens_written"]
    with pytest.raises(InvalidArgument) as e:
        comms[0].allreduce(xs[0], outs[0], op)
    assert msg in str(e.value) and dtype in str(e.value)
    assert comms[0].stats["tokens_written"] == before
    assert not _bits(outs[0], dtype).any()
    # the communicator still works afterwards
    with qccl.group():
        for r in range(n):
            comms[r].allreduce(xs[r], outs[r], "sum")
    assert np.array_equal(_bits(outs[1], dtype), replay_allreduce(bits, dtype, "sum"))


def test_float64_is_still_refused_for_reductions():
    comms = qccl.Communicator.init_all(2)
    with pytest.raises(InvalidArgument, match="float64"):
        comms[0].allreduce(np.ones(3), np.zeros(3), "sum")


def test_integer_schedules_are_unchanged():
    """The int32 path is prim's alone: no fprim launch in an int32 AllReduce's schedule."""
    from qccl.enqueue import _plan  # noqa: F401  (the one dispatch; here we check the schedule it builds)
    from qccl.heap import Heap
    from qccl.schedule import RankState, Scheduler
    from qccl.buffers import as_buffer
    from qccl.types import DataType, RedOp
    heap = Heap(4, 1)
    x = as_buffer(np.arange(40, dtype=np.int32), "x")
    ints = Scheduler(heap, RankState(), DataType.INT32, RedOp.SUM, "allreduce", soft_float=True)
    ints.allreduce(x, x, 40)
    assert {op.kernel.name for op in ints.ops if hasattr(op, "kernel")} == {"prim"}
    f = as_buffer(np.zeros(40, np.float32), "f")
    floats = Scheduler(heap, RankState(), DataType.FLOAT32, RedOp.SUM, "allreduce", soft_float=True)
    floats.allreduce(f, f, 40)
    assert {op.kernel.name for op in floats.ops if hasattr(op, "kernel")} == {"prim", "fprim"}
    plain = Scheduler(heap, RankState(), DataType.FLOAT32, RedOp.SUM, "allreduce")     # a GPU transport: prim
    plain.allreduce(f, f, 40)
    assert {op.kernel.name for op in plain.ops if hasattr(op, "kernel")} == {"prim"}


def test_torch_float32_tensors_through_qccl():
    torch = pytest.importorskip("torch")
    n = 3
    bits = inputs(n, 10, F32, seed=21)
    ts = [torch.from_numpy(b.view(np.float32).copy()) for b in bits]
    comms = qccl.Communicator.init_all(n)
    with qccl.group():
        for r in range(n):
            comms[r].allreduce(ts[r], ts[r], "sum")           # in place, on torch's memory
    want = replay_allreduce(bits, F32, "sum")
    assert all(np.array_equal(t.numpy().view(np.uint32), want) for t in ts)


# -- the compiled circuit: the same bits and the same tokens --------------------------------------------------------
def _circuit_allreduce(dtype: str, bits: list[np.ndarray], op: str = "sum"):
    n = len(bits)
    runs = {}
    for backend in ("interpreter", "circuit"):
        xs = _arrays(bits, dtype)
        outs = [_zeros(x, dtype) for x in xs]
        comms = qccl.Communicator.init_all(n, config={"backend": backend})
        with qccl.group():
            for r in range(n):
                comms[r].allreduce(xs[r], outs[r], op, algo="ring")
        runs[backend] = ([_bits(o, dtype) for o in outs], [c.stats["tokens_written"] for c in comms])
    want = replay_allreduce(bits, dtype, op)
    for backend, (outs, _) in runs.items():
        assert all(np.array_equal(o, want) for o in outs), backend
    assert runs["circuit"][1] == runs["interpreter"][1]


def test_float32_sum_on_the_circuit():
    """Two circuit-backed QwenGPUs (qwengpu.circuit, the compiled weights evaluated exactly) sum two float32 elements
    over QLink: a subnormal plus a normal number, and x + (-x) = +0 (about 2,000 model tokens, a minute)."""
    bits = [np.array([0x000116C2, 0x40400000], np.uint32), np.array([0x3F800001, 0xC0400000], np.uint32)]
    _circuit_allreduce(F32, bits)


@pytest.mark.slow
def test_bfloat16_sum_and_max_on_the_circuit():
    bits = [np.array([0x3F81, 0x8001], np.uint16), np.array([0xBF80, 0x7F80], np.uint16)]
    _circuit_allreduce(BF16, bits, "sum")
    _circuit_allreduce(BF16, bits, "max")
