"""Programs longer than the 32-block ROM run as overlays (qwengpu.lowering.overlays), checked against Python's
integers: straight-line code, a loop around a cut, a uniform branch across cuts both ways, several warps and a
grid, __syncthreads across warps, the specializer's reuse, the circuit writing the interpreter's tokens, and the
block memory the overlays' state takes."""

import numpy as np
import pytest

from qwengpu.device import Device
from qwengpu.isa import MachineError, ROM_BLOCKS

M = 0xFFFFFFFF

SOURCE = r'''
extern "C" __global__ void mix(unsigned *y, const unsigned *x, int n) {
    int i = threadIdx.x;
    if (i < n) {
        unsigned v = x[i];
        v ^= v >> 7; v *= 0x9E3779B1u; v ^= __popc(v) << 3; v += __clz(v | 1);
        v ^= v >> 11; v *= 0x85EBCA6Bu; v ^= __popc(v ^ 0x5555) << 5; v += __brev(v) >> 9;
        y[i] = v;
    }
}
extern "C" __global__ void rounds(unsigned *y, const unsigned *x, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned v = x[i];
    for (int j = 0; j < k; j++) {
        v ^= v >> 7; v *= 0x9E3779B1u; v ^= __popc(v) << 3; v += __clz(v | 1);
        v ^= v >> 11; v *= 0x85EBCA6Bu; v ^= __popc(v ^ 0x5555) << 5;
    }
    y[i] = v;
}
extern "C" __global__ void choose(unsigned *y, const unsigned *x, const volatile int *flag) {
    int i = threadIdx.x;
    unsigned v = x[i];
    if (*flag > 5) {
        v ^= __popc(v * 3u) << 1; v ^= __popc(v + 7u) << 9; v ^= __popc(v ^ 0xf0f0u) << 17;
    } else {
        v += __popc(v * 5u) << 2; v += __popc(v - 3u) << 11; v += __popc(v | 0x0ff0u) << 20;
    }
    y[i] = v;
}
'''


def popc(v):
    return bin(v).count("1")


def clz(v):
    return 32 - v.bit_length()


def brev(v):
    return int(f"{v:032b}"[::-1], 2)


def mix(v):
    v ^= v >> 7; v = v * 0x9E3779B1 & M; v ^= popc(v) << 3; v = (v + clz(v | 1)) & M          # noqa: E702
    v ^= v >> 11; v = v * 0x85EBCA6B & M; v ^= popc(v ^ 0x5555) << 5                          # noqa: E702
    return (v + (brev(v) >> 9)) & M


def rounds(v, k):
    for _ in range(k):
        v ^= v >> 7; v = v * 0x9E3779B1 & M; v ^= popc(v) << 3; v = (v + clz(v | 1)) & M      # noqa: E702
        v ^= v >> 11; v = v * 0x85EBCA6B & M; v ^= popc(v ^ 0x5555) << 5                      # noqa: E702
    return v


def choose(v, flag):
    if flag > 5:
        v ^= popc(v * 3 & M) << 1; v ^= popc(v + 7 & M) << 9; v ^= popc(v ^ 0xF0F0) << 17      # noqa: E702
        return v & M
    v = v + (popc(v * 5 & M) << 2) & M; v = v + (popc(v - 3 & M) << 11) & M                    # noqa: E702
    return v + (popc(v | 0x0FF0) << 20) & M


def words(n, seed=1):
    return np.random.default_rng(seed).integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)


def overlays_of(program):
    """Each overlay's blocks, checked to fit the ROM."""
    assert len(program.overlays) > 1
    assert sum(count for _, count in program.overlays) == len(program.blocks)
    assert all(count <= ROM_BLOCKS for _, count in program.overlays)
    return program.overlays


@pytest.mark.parametrize("threads", [4, 6, 8])
def test_straight_line_code_longer_than_the_rom(threads):
    dev = Device()
    kernel = dev.load_kernel(SOURCE, "mix")
    y, x = dev.alloc(8), dev.alloc(8)
    data = words(8)
    dev.write(x, data)
    n = threads - 1                 # the last thread skips the body
    overlays_of(kernel.program(kernel.arguments([y, x, n]), threads))
    dev.launch(kernel, threads=threads, args=[y, x, n])
    got = dev.read(y, 8).astype(np.uint32)
    assert list(got[:n]) == [mix(int(v)) for v in data[:n]]
    assert not got[n:].any()


@pytest.mark.parametrize("trips", [0, 1, 3])
def test_a_loop_around_the_cuts_over_a_grid(trips):
    """The loop's body spans overlays: each trip goes round the overlays again (a grid of 2 blocks of 6 threads,
    so the second warp of each block is part full)."""
    dev = Device()
    kernel = dev.load_kernel(SOURCE, "rounds")
    y, x = dev.alloc(12), dev.alloc(12)
    data = words(12, seed=2)
    dev.write(x, data)
    program = kernel.program(kernel.arguments([y, x, trips]), 6, 1, 2)
    if trips:                               # no trips: the loop folds away and the program fits
        overlays_of(program)
    dev.launch(kernel, threads=6, blocks=2, args=[y, x, trips])
    assert list(dev.read(y, 12).astype(np.uint32)) == [rounds(int(v), trips) for v in data]


@pytest.mark.parametrize("flag", [9, 2])
def test_a_uniform_branch_across_cuts(flag):
    dev = Device()
    kernel = dev.load_kernel(SOURCE, "choose")
    y, x, f = dev.alloc(4), dev.alloc(4), dev.alloc(1)
    data = words(4, seed=3)
    dev.write(x, data)
    dev.write(f, [flag])
    dev.launch(kernel, threads=4, args=[y, x, f])
    assert list(dev.read(y, 4).astype(np.uint32)) == [choose(int(v), flag) for v in data]


def test_the_specializer_reuses_an_overlaid_program_for_new_pointers():
    dev = Device()
    kernel = dev.load_kernel(SOURCE, "mix")
    dev.alloc(4)                            # (a pointer 0 is a decision of its own: x + 0 folds)
    y1, x1, y2, x2 = dev.alloc(4), dev.alloc(4), dev.alloc(4), dev.alloc(4)
    dev.write(x1, words(4, 4))
    dev.write(x2, words(4, 5))
    for y, x in ((y1, x1), (y2, x2)):
        dev.launch(kernel, threads=4, args=[y, x, 4])
    assert kernel.lowerings == 1
    for y, x in ((y1, x1), (y2, x2)):
        assert list(dev.read(y, 4).astype(np.uint32)) == [mix(int(v)) for v in dev.read(x, 4).astype(np.uint32)]
    # the reused program is the one a fresh lowering gives
    from qwengpu.lowering import lower
    fresh = lower(kernel.ptx, list(kernel.arguments([y2, x2, 4])), 4)
    reused = kernel.program(kernel.arguments([y2, x2, 4]), 4)
    assert (reused.blocks, reused.overlays, reused.listing) == (fresh.blocks, fresh.overlays, fresh.listing)


def test_the_circuit_writes_the_interpreters_tokens_across_overlays():
    """A loop around the cuts, one trip: the ROM rows fed between rounds and the parks are the same tokens."""
    def run(backend):
        dev = Device(backend=backend)
        y, x = dev.alloc(4), dev.alloc(4)
        dev.write(x, words(4, 6))
        dev.launch(dev.load_kernel(SOURCE, "rounds"), threads=4, args=[y, x, 1])
        return dev.read(y, 4).astype(np.uint32), [(t.id, t.origin) for t in dev.tokens]
    (values, circuit), (ref_values, interpreter) = run("circuit"), run("interpreter")
    assert list(values) == [rounds(int(v), 1) for v in words(4, 6)]
    np.testing.assert_array_equal(values, ref_values)
    assert circuit == interpreter


BARRIERS = r'''
extern "C" __global__ void counts(unsigned *y, const unsigned *x) {
    __shared__ unsigned s[8];
    s[threadIdx.x] = __popc(x[threadIdx.x]) ^ __popc(x[threadIdx.x] * 3u) ^ __popc(x[threadIdx.x] + 7u);
    __syncthreads();
    y[threadIdx.x] = s[7 - threadIdx.x] + __popc(s[(threadIdx.x + 1) & 7] * 5u);
}
extern "C" __global__ void tree(unsigned *y, const unsigned *x) {
    __shared__ unsigned s[8];
    unsigned v = x[threadIdx.x];
    s[threadIdx.x] = v ^ __popc(v * 3u) ^ (__popc(v + 7u) << 8);
    __syncthreads();
    for (int stride = 4; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride)
            s[threadIdx.x] += __popc(s[threadIdx.x + stride] * 5u) ^ s[threadIdx.x + stride];
        __syncthreads();
    }
    y[threadIdx.x] = s[0] + __popc(s[threadIdx.x] ^ 0x5555u);
}
extern "C" __global__ void skew(unsigned *y, const unsigned *x) {
    __shared__ unsigned s[8];
    unsigned v = x[threadIdx.x];
    for (unsigned j = 0; j < x[8 + threadIdx.x / 4]; j++)     // a trip count of each warp's own
        v = v ^ __popc(v * 3u) ^ (__popc(v + 7u) << 8) ^ (__popc(v ^ 0x5555u) << 16);
    s[threadIdx.x] = v;
    __syncthreads();
    y[threadIdx.x] = s[7 - threadIdx.x];
}
'''


def skew(x):
    s = []
    for t in range(8):
        v = x[t]
        for _ in range(x[8 + t // 4]):
            v = v ^ popc(v * 3 & M) ^ (popc(v + 7 & M) << 8) ^ (popc(v ^ 0x5555) << 16)
        s.append(v)
    return [s[7 - t] for t in range(8)]


def counts(x):
    s = [popc(v) ^ popc(v * 3 & M) ^ popc(v + 7 & M) for v in x]
    return [(s[7 - t] + popc(s[(t + 1) & 7] * 5 & M)) & M for t in range(8)]


def tree(x):
    s = [v ^ popc(v * 3 & M) ^ (popc(v + 7 & M) << 8) for v in x]
    stride = 4
    while stride:
        for t in range(stride):             # every thread reads before any writes: the barrier's order
            s[t] = s[t] + (popc(s[t + stride] * 5 & M) ^ s[t + stride]) & M
        stride >>= 1
    return [(s[0] + popc(s[t] ^ 0x5555)) & M for t in range(8)]


@pytest.mark.parametrize("name, reference", [("counts", counts), ("tree", tree), ("skew", skew)])
def test_barriers_of_several_warps_in_a_program_longer_than_the_rom(name, reference):
    """Two warps: a warp waits at a __syncthreads until the other reached it, whichever overlay each is on (the
    tree's barrier sits in a loop; in skew the first warp reaches the barrier rounds before the second, whose loop
    around the overlays runs three trips to its one)."""
    dev = Device()
    kernel = dev.load_kernel(BARRIERS, name)
    y, x = dev.alloc(8), dev.alloc(10)
    data = np.concatenate([words(8, seed=7), np.array([1, 3], dtype=np.uint32)])
    dev.write(x, data)
    program = kernel.program(kernel.arguments([y, x]), 8)
    overlays_of(program)
    assert program.waits and program.waits < program.parks
    dev.launch(kernel, threads=8, args=[y, x])
    assert list(dev.read(y, 8).astype(np.uint32)) == reference([int(v) for v in data])


def test_the_overlay_state_words_are_kept_from_allocations():
    dev = Device()
    kernel = dev.load_kernel(SOURCE, "rounds")
    program = kernel.program(kernel.arguments([0, 4, 2]), 4)
    first, count = program.reserved
    assert count >= 4 * 2                   # a resume word and at least one register a thread
    dev.alloc(4, at=first)
    with pytest.raises(MachineError, match=rf"words {first}\.\.{first + count - 1}"):
        dev.launch(kernel, threads=4, args=[0, 4, 2])


# A loop whose first trip reads %r2 before any op wrote it (the machine's registers start at 0), with float adds
# enough to cut it into overlays: the value kept across each cut must be that 0 on the first trip, not what the
# register's slot held from an earlier launch or another register.
UNWRITTEN = r'''
.version 9.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
    .reg .pred %p<3>;
    .reg .f32 %f<5>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [k_param_0];
    ld.param.u64 %rd2, [k_param_1];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    ld.global.u32 %r1, [%rd4];
    ld.global.f32 %f1, [%rd4+4];
    ld.global.f32 %f2, [%rd4+8];
    mov.u32 %r3, 0;
$LOOP:
    add.rn.f32 %f1, %f1, %f2;
    add.rn.f32 %f1, %f1, %f2;
    st.global.u32 [%rd3], %r2;
    add.s32 %r2, %r3, 7;
    add.s32 %r3, %r3, 1;
    setp.lt.u32 %p1, %r3, %r1;
    @%p1 bra $LOOP;
    st.global.f32 [%rd3+4], %f1;
    ret;
}
'''


def test_a_register_not_yet_written_is_zero_across_cuts_whatever_its_slot_held():
    """out[0] is the %r2 of the last trip: 0 for one trip (unwritten), 7 + trips - 2 otherwise; a launch of 3 trips
    first leaves 8 in %r2's slot, which the next launches of 1 trip must not read back."""
    dev = Device()
    kernel = dev.load_kernel(UNWRITTEN, "k")
    out, x = dev.alloc(2), dev.alloc(3)
    assert len(kernel.program(kernel.arguments([out, x]), 1).overlays) > 2
    for trips in (3, 1, 4, 1):
        dev.write(x, np.array([trips, 0x3F800000, 0x3F800000], dtype=np.uint32).view(np.int32))
        dev.write(out, [99, 99])
        dev.launch(kernel, threads=1, args=[out, x])
        assert dev.read(out, 1)[0] == (0 if trips == 1 else 7 + trips - 2)
        assert dev.read(out + 1, 1).view(np.float32)[0] == np.float32(1 + 2 * trips)


def test_a_launch_whose_state_would_cover_words_the_host_wrote_outside_allocations_is_refused():
    """Data written at a fixed address (dev.write without dev.alloc) where a launch keeps its overlay state would be
    overwritten silently (a 16-thread popc kernel read back another lane's input this way): the launch is refused
    naming the words, before anything is fed; the same data in an allocation runs."""
    source = ('extern "C" __global__ void k(unsigned *y, const unsigned *x)\n'
              '{ y[threadIdx.x] = __popc(x[threadIdx.x]) + 100 * __clz(x[threadIdx.x]); }')
    values = [3, 0x80000001, 0xFFFF, 7] * 4
    dev = Device()
    kernel = dev.load_kernel(source, "k")
    first, count = kernel.program(kernel.arguments([0, 64]), 16).reserved
    assert first < 80 and count, "the test needs the state to reach the input"
    dev.write(64, values)
    tokens = len(dev.tokens)
    with pytest.raises(MachineError, match=rf"the host wrote words {max(first, 64)}\.\.79 there outside any "
                                           "allocation"):
        dev.launch(kernel, threads=16, args=[0, 64])
    assert len(dev.tokens) == tokens
    fresh = Device()
    y, x = fresh.alloc(16), fresh.alloc(16)
    fresh.write(x, values)
    fresh.launch(fresh.load_kernel(source, "k"), threads=16, args=[y, x])
    assert list(fresh.read(y, 16).astype(np.uint32)) == [bin(v).count("1") + 100 * (32 - v.bit_length())
                                                         for v in values]
