"""64-bit loop counters (qwengpu.lowering.counters): ``for (size_t i = ...; i < n; i += stride)`` runs on the
machine's 32-bit words, its last step saturating where the sum passes 2^32 - 1, against a replay of the loop in
Python's unbounded integers (a GPU's 64-bit arithmetic); also a counter of bytes, and the serial loop NVRTC unrolls
by four (its exit a view of the counter, its remainder loop a counter from -(n & 3)); what the saturated word
cannot answer is refused by name."""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import Device, MachineError, toolchain
from qwengpu.lowering import counters
from qwengpu.lowering.cfg import basic_blocks
from qwengpu.lowering.values import width
from qwengpu.ptx import Reg, parse

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

LOOPS = r"""
extern "C" __global__ void triple(int *x, size_t n)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        x[i] = 3 * x[i];
}

// the careful spelling: the index and the stride computed in 64 bits
extern "C" __global__ void copy(const int *x, int *y, size_t n)
{
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = x[i] + 1;
}

extern "C" __global__ void negate_below_both(int *x, unsigned long long n, unsigned long long m)
{
    for (unsigned long long i = threadIdx.x; i < n && i < m; i += blockDim.x)
        x[i] = -x[i];
}

extern "C" __global__ void up_to(int *x, size_t last)
{
    for (size_t i = threadIdx.x; i <= last; i += blockDim.x)
        x[i] += 1;
}

// a step that passes 2^32 - 1 after one trip: the low word would wrap to a small number and the loop go on
extern "C" __global__ void leap(int *x, size_t step, size_t n)
{
    for (size_t i = threadIdx.x; i < n; i += step)
        x[i & 15] += (int)(i >> 28) + 1;
}

extern "C" __global__ void leap_up_to(int *x, size_t step, size_t last)
{
    for (size_t i = threadIdx.x; i <= last; i += step)
        x[i & 15] += 1;
}

// the counter is also a byte offset (in + i of bytes)
extern "C" __global__ void histogram(const unsigned char *in, unsigned int *bins, size_t n)
{
    size_t stride = blockDim.x * gridDim.x;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        atomicAdd(&bins[in[i] % 8], 1u);
}

// a serial loop NVRTC unrolls by four: the exit of the unrolled loop is (n & 3) - n + i != 0 (a view of i),
// the remainder loop's counter counts from -(n & 3) up to 0 (a counter from a value)
extern "C" __global__ void serial_sum(const int *x, size_t n, int *out)
{
    int s = 0;
    for (size_t i = 0; i < n; ++i)
        s += x[i] * (int)(i + 1);
    out[0] = s;
}

extern "C" __global__ void count_after(int *x, size_t n, int *out)
{
    size_t i = threadIdx.x;
    for (; i < n; i += blockDim.x)
        x[i] += 1;
    out[threadIdx.x] = (int)i;
}
"""


def replay(x: list[int], threads: int, blocks: int, start, step, condition, body) -> list[int]:
    """The loop on every thread of every block in Python integers (no wrap-around below 2^64)."""
    x = list(x)
    for block in range(blocks):
        for tid in range(threads):
            i = start(block, tid)
            while condition(i):
                body(x, i)
                i += step
    return x


def run(name: str, words, args, threads: int = 4, blocks: int = 1):
    dev = Device(backend="interpreter")
    a, b = dev.alloc(16), dev.alloc(16)
    dev.write(a, np.array(words, dtype=np.int64))
    dev.launch(dev.load_kernel(LOOPS, name), threads=threads, blocks=blocks,
               args=[{"A": a, "B": b}.get(v, v) if isinstance(v, str) else v for v in args])
    return [int(v) for v in dev.read(a, 16)], [int(v) for v in dev.read(b, 16)]


WORDS = list(range(5, 21))


def times(k):
    def body(x, i):
        x[i] = k * x[i]
    return body


@pytest.mark.parametrize("n, threads, blocks", [(10, 4, 1), (13, 2, 3), (16, 4, 2), (3, 4, 2), (0, 4, 1)])
def test_grid_stride_loops_with_a_size_t_counter_run(n, threads, blocks):
    got, _ = run("triple", WORDS, ["A", n], threads, blocks)
    want = replay(WORDS, threads, blocks, lambda b, t: b * threads + t, threads * blocks, lambda i: i < n, times(3))
    assert got == want
    got, copied = run("copy", WORDS, ["A", "B", n], threads, blocks)
    assert got == WORDS and copied == [v + 1 for v in WORDS[:n]] + [0] * (16 - n)


@pytest.mark.parametrize("n, m", [(10, 7), (7, 10), (0, 5), (16, 16)])
def test_two_bounds_and_a_bound_with_less_or_equal(n, m):
    got, _ = run("negate_below_both", WORDS, ["A", n, m])
    assert got == replay(WORDS, 4, 1, lambda b, t: t, 4, lambda i: i < n and i < m, times(-1))

    def bump(x, i):
        x[i] += 1
    got, _ = run("up_to", WORDS, ["A", m - 1])
    assert got == replay(WORDS, 4, 1, lambda b, t: t, 4, lambda i: i <= m - 1, bump)


@pytest.mark.parametrize("step, n", [(2**31 + 5, 2**32 - 1), (2**31 + 5, 2**31 + 7), (2**32 - 1, 2**32 - 1),
                                     (2**30, 2**32 - 2), (2**31, 2**32 - 1)])
def test_a_step_past_the_word_ends_the_loop_as_on_a_gpu(step, n):
    """Where ``i + step`` passes 2^32 - 1, a GPU's i is past every word n, so the loop ends; the machine's step
    saturates at 2^32 - 1, which is not below n either. Its low word would be small and the loop go on (the
    replay of that, in 32-bit words, differs from the GPU's)."""
    def leap(x, i):
        x[i & 15] += (i >> 28) + 1
    got, _ = run("leap", WORDS, ["A", step, n])
    want = replay(WORDS, 4, 1, lambda b, t: t, step, lambda i: i < n, leap)
    assert got == want
    wrapped = replay(WORDS, 4, 1, lambda b, t: t, step, lambda i: (i & 0xFFFFFFFF) < n and i < 6 * step, leap)
    assert step < 2**31 or wrapped != want      # the case is one where a wrapped counter would be wrong

    def bump(x, i):
        x[i & 15] += 1
    last = n - 1
    got, _ = run("leap_up_to", WORDS, ["A", step, last])
    assert got == replay(WORDS, 4, 1, lambda b, t: t, step, lambda i: i <= last, bump)


@pytest.mark.parametrize("n, threads, blocks", [(50, 4, 2), (64, 8, 1), (7, 4, 3)])
def test_a_counter_of_bytes_runs(n, threads, blocks):
    data = np.random.default_rng(n).integers(0, 256, 64, dtype=np.uint8)
    dev = Device(backend="interpreter")
    words, bins = dev.alloc(16), dev.alloc(8)
    dev.write(words, data.view(np.int32))
    dev.launch(dev.load_kernel(LOOPS, "histogram"), threads=threads, blocks=blocks, args=[words, bins, n])
    assert list(dev.read(bins, 8)) == list(np.bincount(data[:n] % 8, minlength=8))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16])
def test_a_serial_size_t_loop_nvrtc_unrolls_runs(n):
    _, out = run("serial_sum", WORDS, ["A", n, "B"], threads=1)
    assert out[0] == sum(WORDS[i] * (i + 1) for i in range(n))


# a counter from -2^32 + k up to 0 by ones, written by hand: the count it asks for is 2^32 - k
FROM_BELOW = """
.version 9.0
.target sm_90
.address_size 64
.visible .entry from_below(.param .u64 from_below_param_0)
{
    .reg .pred %p<2>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [from_below_param_0];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u64 %rd3, START;
    mov.u32 %r1, 0;
$L__BB0_1:
    add.s32 %r1, %r1, 1;
    add.s64 %rd3, %rd3, 1;
    setp.ne.s64 %p1, %rd3, 0;
    @%p1 bra $L__BB0_1;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


def test_a_counter_from_below_zero_counts_up_to_it():
    dev = Device(backend="interpreter")
    out = dev.alloc(1)
    dev.launch(dev.load_kernel(FROM_BELOW.replace("START", "-5"), "from_below"), threads=1, args=[out])
    assert int(dev.read(out, 1)[0]) == 5
    # 2^32 - 1 steps: a count the saturated word cannot tell from more, refused there; kept as a pair of words
    # (lowering.pairs) the counter counts them all, as a GPU does, so the launch runs until the hang detector stops it
    with pytest.raises(MachineError, match=r"still running after 3000 records"):
        dev.launch(dev.load_kernel(FROM_BELOW.replace("START", "-4294967295"), "from_below"), threads=1,
                   args=[out], max_records=3000)


def test_less_or_equal_to_the_largest_word_runs_as_a_pair():
    """``i <= 2^32 - 1``: a GPU's loop ends when i passes 2^32 - 1, which the saturated word cannot say; refused in
    one word, the counter is kept as a pair of words (lowering.pairs) and the loop ends where a GPU's does."""
    def bump(x, i):
        x[i & 15] += 1
    got, _ = run("leap_up_to", WORDS, ["A", 2**31, 2**32 - 1])
    assert got == replay(WORDS, 4, 1, lambda b, t: t, 2**31, lambda i: i <= 2**32 - 1, bump)


@pytest.mark.parametrize("n", [10, 3, 0])
def test_a_counter_read_after_its_loop_runs_as_a_pair_of_words(n):
    """Read after its loop, a step may have carried the counter past 2^32 - 1, which its one word cannot hold: the
    lowering refuses it there, and the kernel is lowered again with the counter kept as a pair of words
    (qwengpu.lowering.pairs), whose last value the loop leaves as a GPU's does."""
    got, after = run("count_after", WORDS, ["A", n, "B"])
    assert got == [v + 1 if i < n else v for i, v in enumerate(WORDS)]
    assert after[:4] == [t + 4 * max(0, -(-(n - t) // 4)) for t in range(4)]


def wide_registers(blocks) -> set[str]:
    return {inst.operands[0].name for b in blocks for inst in b.body
            if isinstance(inst.operands[0], Reg) and width(inst) == 64}


def test_counters_are_found_from_the_control_flow_alone():
    kernels = parse(toolchain.compile_cuda(LOOPS)).kernels
    blocks = basic_blocks(kernels["triple"])
    found = counters.find(blocks, wide_registers(blocks))
    loop_compare = next(i for b in blocks for i in b.body if i.base == "setp" and i.modifiers[0] == "lt")
    counter = loop_compare.operands[1].name
    assert counter in found.registers
    assert [(s.operands[0].name, s.base) for s in found.steps.values() if s.operands[0].name == counter] == \
        [(counter, "add")]
    # the loop's compare reads it saturated: i < n is strict, so any word n is answered right
    assert found.saturated == {id(loop_compare): counter} and counters.strict(loop_compare, counter)
    # an address is read by a load where a step may have passed 2^32 - 1: no counter
    addresses = {i.operands[1].base.name for b in blocks for i in b.body if i.base == "ld" and "global" in i.modifiers}
    assert addresses and not addresses & found.registers

    after = basic_blocks(kernels["count_after"])
    found = counters.find(after, wide_registers(after))
    stored = next(i for b in after for i in b.body if i.base == "st" and isinstance(i.operands[1], Reg)
                  and i.operands[1].name in wide_registers(after))
    assert stored.operands[1].name not in found.registers
    assert found.unbounded[stored.operands[1].name] is stored


def test_the_unrolled_loop_exit_is_a_view_and_the_remainder_counter_is_compared_only():
    blocks = basic_blocks(parse(toolchain.compile_cuda(LOOPS)).kernels["serial_sum"])
    found = counters.find(blocks, wide_registers(blocks))
    exits = [i for b in blocks for i in b.body if i.base == "setp" and i.modifiers == ("ne", "s64")]
    assert len(exits) == 2
    viewed, remainder = (e.operands[1].name for e in exits)
    assert viewed in found.views and found.views[viewed][0] in found.registers
    assert remainder in found.registers and remainder in found.compared
    assert found.views[viewed][0] not in found.compared       # the unrolled counter is also read by the view


def test_the_circuit_writes_the_interpreters_tokens_for_a_saturating_step():
    """The saturating step is ordinary machine ops (min_u, add): the compiled circuit predicts the interpreter's
    tokens for a loop whose last step passes 2^32 - 1."""
    def tokens(backend):
        dev = Device(backend=backend)
        a = dev.alloc(16)
        dev.write(a, np.array(WORDS, dtype=np.int64))
        dev.launch(dev.load_kernel(LOOPS, "leap"), threads=4, args=[a, 2**31 + 5, 2**32 - 1])
        return [int(v) for v in dev.read(a, 16)], [(t.id, t.origin) for t in dev.tokens]

    (values, stream), (ref_values, ref_stream) = tokens("circuit"), tokens("interpreter")
    assert values == ref_values and stream == ref_stream and len(stream) > 100
