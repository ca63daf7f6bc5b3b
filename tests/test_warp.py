"""Warp-level CUDA (qwengpu/kernels/warp.cu, qwengpu/lowering/warp.py): shuffles, votes, warp reductions and the
lane's special registers on the interpreter, each held against a Python reading of the PTX ISA's definitions over a
warp of 4 lanes (or numpy where there is one); the circuit writing the interpreter's tokens; what is refused; and
the parser's part (inline asm's { } scopes, a module whose other kernel is refused)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qwengpu import Device, MachineError
from qwengpu.ptx import PTXError, parse
from qwengpu.toolchain import ptx_for

ROOT = Path(__file__).resolve().parents[1]
WARP = str(ROOT / "qwengpu" / "kernels" / "warp.cu")
WARP_SIZE = 4
MODES = ("up", "down", "bfly", "idx")


def run(name, threads, inputs, extra, outputs):
    """Launch kernel ``name`` with out (outputs words), x (inputs) and the extra arguments; out as uint32."""
    dev = Device()
    out, x = dev.alloc(outputs), dev.alloc(len(inputs))
    dev.write(out, np.full(outputs, 0x5A5A5A5A, dtype=np.uint32).view(np.int32))
    dev.write(x, np.asarray(inputs, dtype=np.int64).astype(np.uint32).view(np.int32))
    dev.launch(dev.load_kernel(WARP, name), threads=threads, args=[out, x] + list(extra))
    return dev.read(out, outputs).view(np.uint32)


def u32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).astype(np.uint32)


def warps(threads):
    """The thread indices of each warp (the last one partial when threads is not a multiple of 4)."""
    return [list(range(w, min(w + WARP_SIZE, threads))) for w in range(0, threads, WARP_SIZE)]


def isa_source(mode, lane, b, c):
    """PTX ISA, shfl.sync: the source lane j and p, from the lane, b and c (a warp of 32 lanes)."""
    bval, cval, segmask = b & 0x1F, c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask)
    min_lane = lane & segmask
    if mode == "up":
        j = lane - bval
        return j, j >= max_lane
    if mode == "down":
        j = lane + bval
    elif mode == "bfly":
        j = lane ^ bval
    else:
        j = min_lane | (bval & ~segmask)
    return j, j <= max_lane


def ptx_shfl(mode, values, bs, c, threads):
    """PTX ISA, shfl.sync: d and p of every thread. The source lane j and p as the ISA computes them from the lane, b
    and c; where p is false, or lane j is not a thread of this warp (the warp is 4 lanes, the last one may be
    partial), d is the thread's own value and p is 0."""
    d, p = [], []
    for t in range(threads):
        lane, base = t % WARP_SIZE, t - t % WARP_SIZE
        j, pval = isa_source(mode, lane, bs[t], c)
        if not (pval and 0 <= j < WARP_SIZE and base + j < threads):
            j, pval = lane, False
        d.append(values[base + j])
        p.append(int(pval))
    return u32(d), u32(p)


# ------------------------------------------------------------------------------------------------ against numpy

@pytest.mark.parametrize("threads", [4, 8, 16])
def test_the_textbook_warp_sums_equal_numpy(threads):
    """``for (offset = warpSize / 2; offset > 0; offset >>= 1) v += __shfl_down_sync(FULL, v, offset)`` leaves each
    warp's total in its lane 0; the xor butterfly leaves it in every lane (warpSize is the machine's 4)."""
    rng = np.random.default_rng(threads)
    x = rng.integers(-(1 << 31), 1 << 31, threads)
    totals = u32([x[w].sum() for w in warps(threads)])
    out = run("warp_sum", threads, x, [], 4)
    np.testing.assert_array_equal(out[:len(totals)], totals)
    assert (out[len(totals):] == 0x5A5A5A5A).all()          # no other word written
    np.testing.assert_array_equal(run("warp_allsum", threads, x, [], threads), np.repeat(totals, WARP_SIZE))


@pytest.mark.parametrize("threads", [4, 8, 6])
def test_warp_reductions_equal_numpy(threads):
    """__reduce_{add,min,max,and,or,xor}_sync over each warp's threads (a partial warp: the threads it has)."""
    rng = np.random.default_rng(threads + 1)
    x = rng.integers(-(1 << 31), 1 << 31, threads)
    out = run("reductions", threads, x, [], 6 * threads).reshape(6, threads)
    for w in warps(threads):
        v, uv = x[w], u32(x[w])
        expect = [u32(v.sum()), u32(v.min()), uv.max(), np.bitwise_and.reduce(uv), np.bitwise_or.reduce(uv),
                  np.bitwise_xor.reduce(uv)]
        for row, value in enumerate(expect):
            assert (out[row, w] == value).all(), (row, w, out[row, w], value)


# ------------------------------------------------------------------------------------------------ against the ISA

# Offsets inside and past the warp; the full width with its clamp at 31, 0 (up's) and 1, segments of 4 and 2.
SHUFFLE_CASES = [(mode, b, width, clamp) for mode in MODES for b in (1, 2, 6) for width, clamp in
                 ((32, 31), (32, 0), (4, 31), (2, 0), (32, 1))]


@pytest.mark.parametrize("threads", [8, 6])
@pytest.mark.parametrize("mode, b, width, clamp", SHUFFLE_CASES)
def test_shuffle_with_b_known_at_launch_follows_the_isa(mode, b, width, clamp, threads):
    """shfl.sync with b and c launch arguments: the source lane is tabulated when lowering (ptx_shfl's reading of
    the ISA is the reference); d and the in-range predicate p of every thread, partial warps included."""
    c = ((32 - width) << 8) | clamp
    x = np.arange(threads) * 7 + 100
    if any(p and j >= WARP_SIZE for j, p in (isa_source(mode, t % WARP_SIZE, b, c) for t in range(threads))):
        # a lane of the segment that a GPU's warp has and the machine's does not: refused, not run differently
        with pytest.raises(MachineError, match=r"the shuffle reads lane \d+ of its segment, which a warp of the "
                                               r"machine \(4 lanes: warpSize\) does not have"):
            run("shuffle", threads, x, [0, MODES.index(mode), b, c, 0], 2 * threads)
        return
    out = run("shuffle", threads, x, [0, MODES.index(mode), b, c, 0], 2 * threads)
    d, p = ptx_shfl(mode, list(x), [b] * threads, c, threads)
    np.testing.assert_array_equal(out[:threads], d)
    np.testing.assert_array_equal(out[threads:], p)


def test_a_warp_sum_written_for_32_lanes_is_refused_not_run_differently():
    """The unrolled reduction of code written for 32 lanes (offsets 16, 8, 4, 2, 1): on the machine's 4-lane warp
    the first three would give each lane its own value (a sum 4 times too large, silently); it is refused naming
    the lane and what to write instead, which runs."""
    fixed = ('extern "C" __global__ void k(int *y, const int *x)\n{\n    int v = x[threadIdx.x];\n'
             '    for (int o = 16; o > 0; o /= 2)\n        v += __shfl_down_sync(0xffffffff, v, o);\n'
             '    if (threadIdx.x == 0) y[0] = v;\n}\n')
    dev = Device()
    y, x = dev.alloc(1), dev.alloc(4)
    dev.write(x, [3, 5, 7, 11])
    with pytest.raises(MachineError, match=r"reads lane 16 of its segment.*warpSize / 2.*\n  from kernel\.cu line 5"):
        dev.launch(dev.load_kernel(fixed, "k"), threads=4, args=[y, x])
    portable = fixed.replace("int o = 16", "int o = warpSize / 2")
    dev.launch(dev.load_kernel(portable, "k"), threads=4, args=[y, x])
    assert dev.read(y, 1)[0] == 3 + 5 + 7 + 11


@pytest.mark.parametrize("threads", [4, 8, 6])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("width, clamp", [(32, 31), (4, 31), (2, 0), (32, 2)])
def test_shuffle_with_b_computed_by_the_machine_follows_the_isa(mode, width, clamp, threads):
    """b is each thread's own word (bs[tid], 0..40: offsets past the warp and the 5 bits of b included): the
    machine computes the source lane with the ISA's formula."""
    rng = np.random.default_rng(threads * 100 + width + clamp + MODES.index(mode))
    c = ((32 - width) << 8) | clamp
    x = rng.integers(-1000, 1000, threads)
    bs = rng.integers(0, 41, threads)
    dev = Device()
    out, xa, ba = dev.alloc(2 * threads), dev.alloc(threads), dev.alloc(threads)
    dev.write(xa, x)
    dev.write(ba, bs)
    dev.launch(dev.load_kernel(WARP, "shuffle"), threads=threads, args=[out, xa, ba, MODES.index(mode), 0, c, 1])
    got = dev.read(out, 2 * threads).view(np.uint32)
    d, p = ptx_shfl(mode, list(x), list(bs), c, threads)
    np.testing.assert_array_equal(got[:threads], d)
    np.testing.assert_array_equal(got[threads:], p)


@pytest.mark.parametrize("threads, limit", [(4, 0), (8, 3), (6, -100), (8, 100), (12, 5)])
def test_votes_follow_the_isa(threads, limit):
    """ballot, any, all and uni of q = x[tid] > limit over each warp's threads, and the active mask inside a branch
    (the lanes of the warp that took it), as bit masks of lanes."""
    x = np.array([5, -3, 9, 2, 7, 11, -8, 1, 4, 6, 300, -300])[:threads]
    q = x > limit
    out = run("votes", threads, x, [limit], 3 * threads).reshape(3, threads)
    extra = run("uniform_and_active", threads, x, [limit], 2 * threads).reshape(2, threads)
    for w in warps(threads):
        ballot = sum(1 << (t % WARP_SIZE) for t in w if q[t])
        odd = sum(1 << (t % WARP_SIZE) for t in w if x[t] & 1)
        assert (out[0, w] == ballot).all()
        assert (out[1, w] == int(q[w].any())).all()
        assert (out[2, w] == int(q[w].all())).all()
        assert (extra[0, w] == int(q[w].all() or not q[w].any())).all()
        np.testing.assert_array_equal(extra[1, w], [odd if x[t] & 1 else 0 for t in w])


@pytest.mark.parametrize("threads", [4, 8, 7])
def test_the_lanes_special_registers(threads):
    """%laneid, %warpid (the warp's index in the block: warps run one after another) and the five %lanemask_*."""
    dev = Device()
    out = dev.alloc(6 * threads)
    dev.launch(dev.load_kernel(WARP, "lanes"), threads=threads, args=[out])
    got = dev.read(out, 6 * threads).view(np.uint32).reshape(6, threads)
    lane = np.arange(threads) % WARP_SIZE
    np.testing.assert_array_equal(got[0], lane + 16 * (np.arange(threads) // WARP_SIZE))
    for row, mask in enumerate([1 << lane, (2 << lane) - 1, (1 << lane) - 1, 0xFFFFFFFF << lane,
                                0xFFFFFFFF << (lane + 1)], start=1):
        np.testing.assert_array_equal(got[row], u32(mask & 0xFFFFFFFF))


MATCH = r'''
extern "C" __global__ void match(unsigned *out, const int *x, int n) {
    int t = threadIdx.x;
    if (t < n) {                      // a last warp's lanes past n are not active
        out[t] = __match_any_sync(__activemask(), x[t]);
        int p;
        out[t + 8] = __match_all_sync(__activemask(), x[t] & 1, &p);
        out[t + 16] = p;
    }
}'''


@pytest.mark.parametrize("n, x", [(8, [3, 5, 3, 3, 7, 7, 7, 7]), (7, [1, 1, 2, 1, 4, 6, 4, 9]),
                                  (6, [2, 4, 6, 8, 5, 5, 0, 0]), (8, [-1, 0, -1, 0, 9, 9, 8, 9])])
def test_warp_matches_follow_the_isa(n, x):
    """__match_any_sync: the active lanes of the warp holding this lane's value; __match_all_sync: the active lanes
    if all hold one value (and p = 1), else 0 (p = 0). Threads 0..n-1 active, in warps of 4 lanes."""
    dev = Device()
    dev.write(32, np.array(x, dtype=np.int32))
    dev.write(0, np.full(24, 0x5A5A5A5A, dtype=np.int32))
    dev.launch(dev.load_kernel(MATCH, "match"), threads=8, args=[0, 32, n])
    got = dev.read(0, 24).view(np.uint32).reshape(3, 8)
    for w in warps(n):
        active = sum(1 << (t % WARP_SIZE) for t in w)
        alike = len({x[t] & 1 for t in w}) == 1
        for t in w:
            assert got[0, t] == sum(1 << (u % WARP_SIZE) for u in w if x[u] == x[t])
            assert (got[1, t], got[2, t]) == ((active, 1) if alike else (0, 0))
    assert (got[:, n:] == 0x5A5A5A5A).all()


MATCH64 = r'''
extern "C" __global__ void match64(unsigned *out, const long long *x, int n) {
    int t = threadIdx.x;
    if (t < n) {
        out[t] = __match_any_sync(__activemask(), x[t]);
        int p;
        out[t + 8] = __match_all_sync(__activemask(), (unsigned long long)x[t] >> 33, &p);
        out[t + 16] = p;
    }
}'''


@pytest.mark.parametrize("n, x", [(8, [1, 2**32 + 1, 1, -1, 5, 5, 5, 5]),
                                  (7, [2**40, 2**41, 2**40 + 2**32, 2**40, -2, -2, 2**33 - 2]),
                                  (6, [7, 7, 2**33 + 7, 2**33 + 7, 2**62, 2**62 + 1])])
def test_64_bit_warp_matches_compare_both_words(n, x):
    """match.any / match.all .b64 (NVRTC's for __match_*_sync of a long long): values that differ in one word
    only are not alike (2**32 + 1 and 1, 2**40 + 2**32 and 2**40); ``>> 33`` makes values alike that differ below
    bit 33. Against Python's integers, threads 0..n-1 active."""
    dev = Device()
    out, xs = dev.alloc(24), dev.alloc(16)
    dev.write(xs, np.array(x + [0] * (8 - len(x)), dtype=np.int64).view(np.uint32))
    dev.write(out, np.full(24, 0x5A5A5A5A, dtype=np.int32))
    dev.launch(dev.load_kernel(MATCH64, "match64"), threads=8, args=[out, xs, n])
    got = dev.read(out, 24).view(np.uint32).reshape(3, 8)
    for w in warps(n):
        active = sum(1 << (t % WARP_SIZE) for t in w)
        alike = len({(x[t] % 2**64) >> 33 for t in w}) == 1
        for t in w:
            assert got[0, t] == sum(1 << (u % WARP_SIZE) for u in w if x[u] == x[t])
            assert (got[1, t], got[2, t]) == ((active, 1) if alike else (0, 0))
    assert (got[:, n:] == 0x5A5A5A5A).all()


def _mixed(v: int, k: int) -> int:
    return ((v * (2 * k + 3)) & 0xFFFFFFFF) ^ (v >> (k % 7 + 1))


def test_warp_instructions_in_a_program_cut_into_overlays_stay_whole():
    """Two warps, a program long enough to be cut into overlays, shuffles and a ballot in its middle. The block's
    warps run an overlay each before either goes on, so a cut between a warp's stores to the exchange words and
    its loads of them would give it the other warp's values: warp instructions are never cut. (With such cuts
    allowed, this program fails, and so did 21 of 60 like it with the shuffles and the ballot alone, the shortest
    at 12 steps before them.)"""
    steps = 12
    body = "".join(f"v = (v * {2 * k + 3}u) ^ (v >> {k % 7 + 1});\n" for k in range(steps))
    source = ('extern "C" __global__ void k(unsigned *y, const unsigned *x) {\n int t = threadIdx.x;\n'
              ' unsigned v = x[t];\n' + body +
              ' unsigned s = __shfl_xor_sync(0xffffffffu, v, 1) + __shfl_down_sync(0xffffffffu, v, 2, 4);\n'
              ' y[t] = s + 7u * __ballot_sync(0xffffffffu, v & 2u) + __match_any_sync(0xffffffffu, v & 1u);\n}')
    x = [(t * 2654435761) & 0xFFFFFFFF for t in range(8)]
    dev = Device()
    out, xs = dev.alloc(8), dev.alloc(8)
    dev.write(xs, u32(x).view(np.int32))
    kernel = dev.load_kernel(source, "k")
    dev.launch(kernel, threads=8, args=[out, xs])
    assert kernel.program((out, xs), 8).overlays
    v = x
    for k in range(steps):
        v = [_mixed(a, k) for a in v]
    want = []
    for t in range(8):
        warp = warps(8)[t // WARP_SIZE]
        s = v[t ^ 1] + (v[t + 2] if t % WARP_SIZE < 2 else v[t])
        ballot = sum(1 << (u % WARP_SIZE) for u in warp if v[u] & 2)
        match = sum(1 << (u % WARP_SIZE) for u in warp if v[u] & 1 == v[t] & 1)
        want.append((s + 7 * ballot + match) & 0xFFFFFFFF)
    np.testing.assert_array_equal(dev.read(out, 8).view(np.uint32), u32(want))


# ------------------------------------------------------------------------------------------------ other backends

def test_the_circuit_writes_the_interpreters_tokens_for_a_warp_sum():
    """Two warps of the textbook warp sum on the compiled circuit: the interpreter's tokens, one by one."""
    def tokens(backend):
        dev = Device(backend=backend)
        out, x = dev.alloc(2), dev.alloc(8)
        dev.write(x, np.arange(8) * 5 - 17)
        dev.launch(dev.load_kernel(WARP, "warp_sum"), threads=8, args=[out, x])
        return dev.read(out, 2), [(t.id, t.origin) for t in dev.tokens]
    (values, circuit), (ref_values, interpreter) = tokens("circuit"), tokens("interpreter")
    np.testing.assert_array_equal(values, [(np.arange(4) * 5 - 17).sum(), (np.arange(4, 8) * 5 - 17).sum()])
    np.testing.assert_array_equal(values, ref_values)
    assert circuit == interpreter


# ------------------------------------------------------------------------------------------------ refusals

KERNEL = '''extern "C" __global__ void k(int *out, int c) {{ unsigned v; {body} out[threadIdx.x] = v; }}'''


@pytest.mark.parametrize("body, words", [
    ('asm volatile("mov.u32 %0, %%clock;" : "=r"(v));', "special register %clock is not supported"),
    ('asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(v));', "globaltimer_lo"),
    ('v = __shfl_sync(0xffffffff, threadIdx.x, 1, out[0]);', "width) must be known at launch"),
    ('asm volatile("{ .reg .pred p, q; setp.lt.u32 p|q, %1, 2; selp.u32 %0, 1, 0, q; }" : "=r"(v) : '
     '"r"(threadIdx.x));', "second destination (d|p) is supported on shfl and match.all only"),
])
def test_what_is_refused_is_named(body, words):
    """A clock, a timer, a shuffle width the machine would have to compute, setp's second destination: refused
    before the launch, naming what (a special register the machine lacks never reads as 0)."""
    dev = Device()
    out = dev.alloc(4)
    dev.write(out, [9, 9, 9, 9])
    with pytest.raises(MachineError, match=words.replace("(", r"\(").replace(")", r"\)").replace("|", r"\|")):
        dev.launch(dev.load_kernel(KERNEL.format(body=body), "k"), threads=4, args=[out, 0])
    np.testing.assert_array_equal(dev.read(out, 4), [9, 9, 9, 9])


# ------------------------------------------------------------------------------------------------ the parser

def test_inline_asm_scopes_declare_registers_of_their_own():
    """Four inline asm blocks each declare ``.reg .pred q``: four registers, each read where its scope wrote it."""
    kernel = parse(ptx_for(ROOT / "qwengpu" / "kernels" / "warp.cu")).kernels["shuffle"]
    scoped = sorted(name for name, kind in kernel.registers.items() if name.startswith("%q_s"))
    assert len(scoped) == 4 and all(kernel.registers[name] == "pred" for name in scoped)
    pairs = [inst.pair.name for inst in kernel.body if getattr(inst, "pair", None) is not None]
    assert sorted(pairs) == scoped


def test_a_refused_kernel_leaves_the_rest_of_its_module_usable():
    """A kernel that calls a recursive function (a call that cannot be inlined, outside the subset): the other
    kernel of the same source loads and runs; the refused one raises its own error when asked for; the strict parse
    raises it for the module."""
    source = ('__device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n'
              'extern "C" __global__ void with_call(int *y) { y[threadIdx.x] = fib(y[threadIdx.x]); }\n'
              'extern "C" __global__ void plain(int *y) { y[threadIdx.x] = threadIdx.x * 3; }\n')
    dev = Device()
    y = dev.alloc(4)
    dev.launch(dev.load_kernel(source, "plain"), threads=4, args=[y])
    np.testing.assert_array_equal(dev.read(y, 4), [0, 3, 6, 9])
    with pytest.raises(PTXError, match="function calls are not supported"):
        dev.load_kernel(source, "with_call")
    with pytest.raises(PTXError, match="function calls are not supported"):
        parse(ptx_for(source))
    module = parse(ptx_for(source), strict=False)
    assert sorted(module.kernels) == ["plain"] and sorted(module.refused) == ["with_call"]
