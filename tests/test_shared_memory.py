"""__shared__ memory and __syncthreads() across the warps of a block (qwengpu/kernels/shared.cu,
qwengpu/lowering/barriers.py): each kernel against numpy on the interpreter, the limits as errors that name the value
and the limit and leave memory untouched, the host's part (program rows, warp headers, zeroed resume words: no value
computed), and the circuit writing the interpreter's tokens (the bf16 model in make verify)."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from qwengpu import Device, MachineError
from qwengpu import tokens as T
from qwengpu.isa import LANES, SINK
from qwengpu.ptx import PTXError, parse
from qwengpu.toolchain import compile_with_nvcc

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "qwengpu" / "kernels" / "shared.cu"


def words(rng, n, lo=-(1 << 31), hi=(1 << 31) - 1):
    return rng.integers(lo, hi, n, endpoint=True, dtype=np.int64).astype(np.int32)


def wrap(values) -> np.ndarray:
    """int32 wrap-around of exact integer sums (the machine's words)."""
    return np.asarray(values, dtype=np.int64).astype(np.uint32).view(np.int32)


def kernel(dev, name):
    return dev.load_kernel(str(SHARED), name)


# ------------------------------------------------------------------------------------------------ against numpy

@pytest.mark.parametrize("threads, blocks", [(8, 1), (8, 2), (6, 1), (5, 3), (4, 2)])
def test_block_sum_across_two_warps(threads, blocks):
    """The Done-when kernel: every thread stores its word in a __shared__ array, __syncthreads(), thread 0 adds the
    block's words (in warp 0, reading what warp 1 stored)."""
    rng = np.random.default_rng(threads * 10 + blocks)
    dev = Device()
    out, x = dev.alloc(4), dev.alloc(24)
    xv = words(rng, 24)
    dev.write(out, np.full(4, -5))
    dev.write(x, xv)
    dev.launch(kernel(dev, "block_sum"), threads=threads, blocks=blocks, args=[out, x])
    expect = np.full(4, -5, dtype=np.int32)
    expect[:blocks] = wrap(xv[:threads * blocks].astype(np.int64).reshape(blocks, threads).sum(axis=1))
    np.testing.assert_array_equal(dev.read(out, 4), expect)
    np.testing.assert_array_equal(dev.read(x, 24), xv)


@pytest.mark.parametrize("threads, blocks, n", [(8, 1, 8), (8, 3, 21), (16, 2, 29), (16, 1, 3), (12, 2, 20)])
def test_tree_reduction_with_a_barrier_in_its_loop(threads, blocks, n):
    rng = np.random.default_rng(n)
    dev = Device()
    out, x = dev.alloc(4), dev.alloc(32)
    xv = words(rng, 32, -(1 << 20), 1 << 20)
    dev.write(x, xv)
    dev.launch(kernel(dev, "tree_sum"), threads=threads, blocks=blocks, args=[out, x, n])
    padded = np.where(np.arange(threads * blocks) < n, xv[:threads * blocks], 0).reshape(blocks, threads)
    if threads & (threads - 1):          # not a power of two: the tree adds the pairs it reaches, as on a GPU
        expect = []
        for row in padded.astype(np.int64):
            s = row.copy()
            stride = threads // 2
            while stride > 0:
                s[:stride] += s[stride:2 * stride]
                stride //= 2
            expect.append(s[0])
    else:
        expect = padded.astype(np.int64).sum(axis=1)
    np.testing.assert_array_equal(dev.read(out, blocks), wrap(expect))


@pytest.mark.parametrize("threads", [8, 6, 7])
def test_reverse_through_shared_memory_keeps_a_register_across_the_barrier(threads):
    rng = np.random.default_rng(threads)
    dev = Device()
    out, x = dev.alloc(16), dev.alloc(16)
    xv = words(rng, 16, -(1 << 28), 1 << 28)
    dev.write(x, xv)
    dev.launch(kernel(dev, "reverse"), threads=threads, args=[out, x])
    v = xv[:threads].astype(np.int64) * 3
    np.testing.assert_array_equal(dev.read(out, threads), wrap(v[::-1] - v))


@pytest.mark.parametrize("threads, n", [(8, 8), (8, 5), (12, 11), (5, 5)])
def test_shared_histogram_with_shared_atomics(threads, n):
    rng = np.random.default_rng(threads + n)
    dev = Device()
    h, x = dev.alloc(4), dev.alloc(16)
    xv = words(rng, 16)
    dev.write(h, np.full(4, 99))
    dev.write(x, xv)
    dev.launch(kernel(dev, "shared_histogram"), threads=threads, args=[h, x, n])
    np.testing.assert_array_equal(dev.read(h, 4), np.bincount(xv[:n] & 3, minlength=4))


@pytest.mark.parametrize("threads, rounds", [(8, 3), (6, 2), (12, 0), (16, 5), (8, 1)])
def test_barriers_in_a_loop_whose_trip_count_is_in_memory(threads, rounds):
    rng = np.random.default_rng(threads * rounds + 1)
    dev = Device()
    out, x, r = dev.alloc(16), dev.alloc(16), dev.alloc(1)
    xv = words(rng, 16)
    dev.write(x, xv)
    dev.write(r, [rounds])
    dev.launch(kernel(dev, "rotate"), threads=threads, args=[out, x, r])
    np.testing.assert_array_equal(dev.read(out, threads), np.roll(xv[:threads], -max(rounds, 1)))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_nvcc_32_bit_shared_addresses_give_the_same_results():
    """nvcc addresses __shared__ arrays with 32-bit registers (``mov.u32 %r, s; st.shared.u32 [%r]``), NVRTC with
    64-bit ones: both lower to the same words."""
    nvcc_ptx = compile_with_nvcc(SHARED)
    assert "mov.u32" in nvcc_ptx and "st.shared.u32 \t[%r" in nvcc_ptx
    runs = [("block_sum", 8, lambda o, x, r: [o, x]), ("tree_sum", 16, lambda o, x, r: [o, x, 13]),
            ("reverse", 8, lambda o, x, r: [o, x]), ("shared_histogram", 8, lambda o, x, r: [o, x, 7]),
            ("rotate", 8, lambda o, x, r: [o, x, r])]
    for name, threads, args in runs:
        results = []
        for source in (SHARED.with_suffix(".ptx").read_text(), nvcc_ptx):
            dev = Device()
            out, x, r = dev.alloc(16), dev.alloc(16), dev.alloc(1)
            dev.write(x, np.arange(16) * 7 - 30)
            dev.write(r, [3])
            dev.launch(dev.load_kernel(source, name), threads=threads, args=args(out, x, r))
            results.append(dev.read(out, 16))
        np.testing.assert_array_equal(results[0], results[1], err_msg=name)


@pytest.mark.parametrize("threads, rounds", [(8, 0), (8, 3), (6, 9), (8, 1)])
def test_barrier_in_a_simt_loop(threads, rounds):
    """spread's loop is entered under a lane mask (NVRTC's guard), so it runs on the 'any' branch: its mask, counter
    and induction variable are kept across the barrier."""
    dev = Device()
    out, x, r = dev.alloc(8), dev.alloc(8), dev.alloc(1)
    xv = words(np.random.default_rng(rounds), 8, -1000, 1000)
    dev.write(x, xv)
    dev.write(r, [rounds])
    k = kernel(dev, "spread")
    assert any(block.branch == "any" for block in k.program((out, x, r), threads).blocks)
    dev.launch(k, threads=threads, args=[out, x, r])
    expect = xv.astype(np.int64)
    expect[threads:] = 0
    for round_ in range(rounds):
        for i in range(threads):
            expect[(i + round_) & 7] += i + 1
    got = dev.read(out, threads)
    np.testing.assert_array_equal(got, expect[:threads])


# ------------------------------------------------------------------------------------------------ how it runs

def test_one_warp_needs_no_barrier_state_and_two_warps_park_at_each_barrier():
    dev = Device()
    k = kernel(dev, "tree_sum")
    out, x = dev.alloc(2), dev.alloc(16)
    one, two = k.program((out, x, 16), 4), k.program((out, x, 16), 8)
    assert not one.parks and one.cleared == (0, 0)
    assert one.reserved == (SINK - 16, 16)                 # the __shared__ array alone, at the top of memory
    assert len(two.parks) == 2 and two.cleared == (SINK - 16 - 2 * 8, 8)
    assert two.reserved == (SINK - 16 - 2 * 8, 16 + 2 * 8)   # resume words and one kept register (the stride)
    dev.write(x, np.arange(16))
    dev.launch(k, threads=8, args=[out, x, 16])
    # 2 warps x (the first phase, one phase per trip of the stride loop 4, 2, 1, the last): 10 warp runs
    assert dev.read(out, 1)[0] == sum(range(8))
    runs = sum(1 for t in dev.tokens if t.id == T.WARP)
    assert runs == 2 * 5


def test_the_host_feeds_rows_headers_and_zero_resume_words_only():
    """The rule: the host launches and copies words. In a launch with barriers the host-fed tokens are program rows,
    warp headers (base, lanes) and the zeroing of the block's resume words; every value is the model's."""
    dev = Device()
    out, x = dev.alloc(2), dev.alloc(8)
    dev.write(x, np.arange(8) * 7)
    k = kernel(dev, "block_sum")
    program = k.program((out, x), 8)
    start = len(dev.tokens)
    dev.launch(k, threads=8, args=[out, x])
    fed = [t.id for t in dev.tokens[start:] if t.origin == T.HOST]
    i, cleared, headers = 0, [], []
    while i < len(fed):
        kind = T.kind(fed[i])
        if kind == "ROM":
            i += 1 + 10
        elif kind == "WARP":
            headers.append((T.argument(fed[i + 1]), T.argument(fed[i + 2])))
            i += 3
        elif kind == "MEM":
            cleared.append((T.argument(fed[i]), T.argument(fed[i + 1]), T.argument(fed[i + 2])))
            i += 3
        else:
            raise AssertionError(f"the host fed {T.name(fed[i])}")
    first, count = program.cleared
    assert cleared == [(a, 0, 0) for a in range(first, first + count)]
    assert headers == [(0, LANES), (4, LANES)] * 2          # each warp runs twice: before and after the barrier
    assert dev.read(out, 1)[0] == 7 * sum(range(8))


def test_a_launch_whose_shared_words_are_allocated_is_refused_untouched():
    dev = Device()
    low = dev.alloc(100)
    high = dev.alloc(20)                                     # words 100..119: under block_sum's shared / state words
    dev.write(high, np.arange(20))
    before, tokens = dev.read(0, SINK), len(dev.tokens)
    with pytest.raises(MachineError, match=r"words 111\.\.126, and allocation 100\.\.119 overlaps them"):
        dev.launch(kernel(dev, "block_sum"), threads=8, args=[low, low])
    assert len(dev.tokens) == tokens and not dev.busy
    np.testing.assert_array_equal(dev.read(0, SINK), before)


def test_a_launch_whose_shared_words_peers_store_into_is_refused_untouched():
    """A transport's FIFOs and flags are never allocated on the device (peers' stores land there whenever they run):
    block state over an aperture's words is refused naming it; below the state the same launch runs."""
    from transports.qlink.aperture import Aperture, Router
    dev = Device(router=Router([Aperture(90, 115, (1,), name="ring.fifo")]))
    data = dev.alloc(8)
    dev.write(data, np.arange(8))
    before, tokens = dev.read(0, SINK), len(dev.tokens)
    with pytest.raises(MachineError, match=r"words 111\.\.126, and peers store into words 111\.\.114 \(aperture "
                                           r"ring\.fifo \[90, 115\) -> rank 1\)"):
        dev.launch(kernel(dev, "block_sum"), threads=8, args=[data, data])
    assert len(dev.tokens) == tokens and not dev.busy
    np.testing.assert_array_equal(dev.read(0, SINK), before)
    below = Device(router=Router([Aperture(90, 111, (1,), name="ring.fifo")]))
    out, x = below.alloc(1), below.alloc(8)
    below.write(x, np.arange(8))
    below.launch(kernel(below, "block_sum"), threads=8, args=[out, x])
    assert below.read(out, 1)[0] == np.arange(8).sum()


def test_too_many_threads_for_the_barrier_state_names_the_words():
    dev = Device()
    with pytest.raises(MachineError, match=r"kernel block_sum with 120 threads needs 128 words of block memory \(8 of "
                                           r"__shared__ arrays, 120 to keep 0 registers.*memory has 127 words"):
        dev.launch(kernel(dev, "block_sum"), threads=120, args=[0, 0])


PTX_HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"


def _ptx(body: str, decl: str = "") -> str:
    return (PTX_HEAD + decl + "\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\t.reg .b32 %r<4>;\n"
            "\t.reg .b64 %rd<4>;\n" + body + "\n\tret;\n}\n")


def test_shared_arrays_larger_than_memory_are_refused():
    text = _ptx("\t.shared .align 4 .b8 big[800];\n\tmov.u64 %rd1, big;\n\tst.shared.u32 [%rd1], 1;")
    dev = Device()
    with pytest.raises(MachineError, match="declares 200 words of __shared__ arrays .big 200.; memory has 127 words"):
        dev.launch(dev.load_kernel(text, "k"), threads=4, args=[0])


def test_partial_barriers_are_refused_by_name():
    assert parse(_ptx("\tmov.u64 %rd1, smem;", ".extern .shared .align 4 .b8 smem[];\n")).kernels["k"].shared == {
        "smem": None}, "dynamic shared memory parses, its size left to the launch"
    with pytest.raises(PTXError, match=r"this extern .shared declaration is not supported"):
        parse(_ptx("", ".extern .shared .align 4 .b8 smem[4];\n"))
    dev = Device()
    k = dev.load_kernel(_ptx("\tbar.arrive 0, 8;"), "k")
    with pytest.raises(MachineError, match=r"line \d+ \(the barriers are bar.sync.*\): bar.arrive 0, 8"):
        dev.launch(k, threads=8, args=[0])


def test_syncwarp_of_one_machine_warps_lanes_is_free_and_of_more_parks():
    """``__syncwarp(mask)`` (bar.warp.sync): lanes of one of the machine's 4-lane warps run in step, so a mask of
    them costs nothing; the full mask names lanes that are other warps here, so with several warps it is a barrier
    of the block (it parks)."""
    def text(mask):
        return _ptx(f"\tmov.u32 %r1, %tid.x;\n\tbar.warp.sync {mask};\n\tmul.wide.u32 %rd1, %r1, 4;\n"
                    "\tld.param.u64 %rd2, [k_param_0];\n\tadd.s64 %rd3, %rd2, %rd1;\n\tst.global.u32 [%rd3], %r1;")
    for mask, parks in ((0xF, False), (0xF0, False), (-1, True)):
        dev = Device()
        kernel = dev.load_kernel(text(mask), "k")
        out = dev.alloc(8)
        assert bool(kernel.program((out,), 8).parks) == parks, mask
        dev.launch(kernel, threads=8, args=[out])
        np.testing.assert_array_equal(dev.read(out, 8), np.arange(8))


WARP_SYNCHRONOUS = r'''
extern "C" __global__ void reduce(int *out, const int *in, int n) {
    __shared__ int s[16];
    int t = threadIdx.x;
    s[t] = t < n ? in[t] : 0;
    __syncthreads();
    if (t < n) {                    // n threads: in one GPU warp, in 2 or 4 of the machine's warps
        int v = s[t];
        for (int o = n / 2; o > 0; o >>= 1) {
            if (t < o) v += s[t + o];
            __syncwarp();
            if (t < o) s[t] = v;
            __syncwarp();
        }
        if (t == 0) *out = v;
    }
}'''


@pytest.mark.parametrize("n", [16, 8])
def test_a_warp_synchronous_reduction_over_16_threads_equals_numpys(n):
    """Code written for a GPU's 32-lane warp: 16 threads reduce through shared memory with __syncwarp() between
    the steps. On a GPU they are one warp; on the machine they are 4 warps, which __syncwarp() makes meet (a barrier
    of the block), so the sum is the GPU's (as a no-op it was 78, not 136: warp 0 ran ahead of the others)."""
    dev = Device()
    out, x = dev.alloc(1), dev.alloc(n)
    values = np.arange(1, n + 1, dtype=np.int32)
    dev.write(x, values)
    dev.launch(dev.load_kernel(WARP_SYNCHRONOUS, "reduce"), threads=16, args=[out, x, n])
    assert dev.read(out, 1)[0] == values.sum()


def test_a_guarded_syncwarp_of_a_gpu_warp_is_refused():
    dev = Device()
    k = dev.load_kernel(_ptx("\t.reg .pred %p<2>;\n\tmov.u32 %r1, %tid.x;\n\tsetp.lt.u32 %p1, %r1, 4;\n"
                             "\t@%p1 bar.warp.sync -1;"), "k")
    with pytest.raises(MachineError, match=r"a __syncwarp\(\) of lanes 0xffffffff under a lane predicate: the "
                                           r"machine's warp is 4 lanes"):
        dev.launch(k, threads=8, args=[0])


def test_shared_symbols_at_a_constant_offset_and_by_register():
    """``[s+28]`` and ``mov.u64 %rd, s`` name the same words (hand-written PTX, as clang or a person writes it); every
    thread reads the word thread 7 (warp 1) stored, after the barrier."""
    text = _ptx("\t.shared .align 4 .b8 s[32];\n\tmov.u32 %r1, %tid.x;\n\tmul.wide.u32 %rd1, %r1, 4;\n"
                "\tmov.u64 %rd2, s;\n\tadd.s64 %rd3, %rd2, %rd1;\n\tst.shared.u32 [%rd3], %r1;\n\tbar.sync 0;\n"
                "\tld.shared.u32 %r2, [s+28];\n\tld.param.u64 %rd2, [k_param_0];\n\tcvta.to.global.u64 %rd3, %rd2;\n"
                "\tadd.s64 %rd3, %rd3, %rd1;\n\tst.global.u32 [%rd3], %r2;")
    dev = Device()
    out = dev.alloc(8)
    dev.launch(dev.load_kernel(text, "k"), threads=8, args=[out])
    np.testing.assert_array_equal(dev.read(out, 8), np.full(8, 7))


# ------------------------------------------------------------------------------------------------ other backends

# Two warps on each: one barrier (block_sum), a barrier in a uniform loop with a register kept (tree_sum, two blocks),
# a barrier in a loop run on the 'any' branch (spread).
BACKEND_RUNS = {"block_sum": (8, 1, lambda out, x, r: [out, x]), "tree_sum": (8, 2, lambda out, x, r: [out, x, 13]),
                "spread": (8, 1, lambda out, x, r: [out, x, r])}


def _tokens(backend, name):
    threads, blocks, args = BACKEND_RUNS[name]
    dev = Device(backend=backend)
    out, x, r = dev.alloc(8), dev.alloc(16), dev.alloc(1)
    dev.write(x, np.arange(16) * 3 - 11)
    dev.write(r, [2])
    dev.launch(kernel(dev, name), threads=threads, blocks=blocks, args=args(out, x, r))
    return dev.read(out, 8), dev.tokens


@pytest.mark.parametrize("name", sorted(BACKEND_RUNS))
def test_the_circuit_writes_the_interpreters_tokens_across_warps(name):
    (values, tokens), (ref_values, ref_tokens) = _tokens("circuit", name), _tokens("interpreter", name)
    if name == "block_sum":
        assert values[0] == sum(np.arange(8) * 3 - 11)
    np.testing.assert_array_equal(values, ref_values)
    assert [(t.id, t.origin) for t in tokens] == [(t.id, t.origin) for t in ref_tokens]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BACKEND_RUNS))
def test_the_bf16_model_writes_the_interpreters_tokens_across_warps(name):
    from qwengpu.circuit.model import ModelBackend
    from qwengpu.circuit.verify import verify_chunked
    _, tokens = _tokens("interpreter", name)
    result = verify_chunked(ModelBackend(dtype="bfloat16"), tokens, chunk=192)
    assert result.compared > 100 and result.mismatches == [], str(result)
    assert result.min_margin >= 8


# ------------------------------------------------------------------------------------------------ differential

@pytest.mark.skipif(shutil.which("gcc") is None, reason="the host C compiler gcc is not installed")
def test_random_block_programs_match_c_run_phase_by_phase():
    """A CI share of ``python -m qccl_bench.kernel_fuzz --shared 1.0``: random block programs (several warps, a
    __shared__ array filled at each thread's index, barriers, shared atomics at computed indices, reads of other
    threads' words) against gcc's C run phase by phase."""
    from qccl_bench.kernel_fuzz import cuda_source, fuzz
    report = fuzz(40, seed=5, batch=40, shared=1.0)
    assert report["tried"] == 40
    assert report["mismatches"] == [], "\n".join(f"{cuda_source(case.body, case.phases)}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["ran"] >= 20, report["refused"]


DYNAMIC_SHARED = r"""
extern "C" __global__ void k(int *out, const int *x) {
  extern __shared__ int s[];
  unsigned t = threadIdx.x;
  s[t] = x[t] * 3;
  __syncthreads();
  out[t] = s[blockDim.x - 1 - t] + s[t];
}
extern "C" __global__ void both(int *out, const int *x) {
  __shared__ int fixed[2];
  extern __shared__ unsigned char bytes[];
  unsigned t = threadIdx.x;
  if (t < 2) fixed[t] = x[t];
  bytes[t] = (unsigned char)(x[t] + 1);
  __syncthreads();
  out[t] = fixed[t & 1] * 1000 + bytes[(t + 1) % blockDim.x];
}
"""


@pytest.mark.parametrize("threads", [4, 6, 8])
def test_dynamic_shared_memory_sized_at_launch(threads):
    """``extern __shared__ int s[];`` takes its bytes from the launch (``shared=``), as CUDA's third launch
    parameter: checked against numpy, with one warp and with two."""
    dev = Device()
    out, x = dev.alloc(8), dev.alloc(8)
    xv = np.array([5, -3, 12, 7, 100, -40, 9, 2])
    dev.write(x, xv)
    dev.launch(dev.load_kernel(DYNAMIC_SHARED, "k"), threads=threads, args=[out, x], shared=4 * threads)
    v = xv[:threads] * 3
    np.testing.assert_array_equal(dev.read(out, threads), v[::-1] + v)
    dev.launch(dev.load_kernel(DYNAMIC_SHARED, "both"), threads=threads, args=[out, x], shared=threads)
    b = (xv[:threads] + 1) & 0xFF
    want = [xv[t & 1] * 1000 + b[(t + 1) % threads] for t in range(threads)]
    np.testing.assert_array_equal(dev.read(out, threads), want)


def test_dynamic_shared_memory_without_a_size_is_refused_by_name():
    dev = Device()
    out, x = dev.alloc(8), dev.alloc(8)
    tokens = list(dev.tokens)
    k = dev.load_kernel(DYNAMIC_SHARED, "k")
    with pytest.raises(MachineError, match=r"kernel k declares extern __shared__ s \(dynamic shared memory\): give "
                                           r"its size in bytes at launch, dev.launch\(\.\.\., shared=BYTES\)"):
        dev.launch(k, threads=4, args=[out, x])
    with pytest.raises(MachineError, match=r"kernel k declares 130 words of __shared__ arrays \(extern s 130\); "
                                           r"memory has 127 words"):
        dev.launch(k, threads=4, args=[out, x], shared=520)
    assert dev.tokens == tokens


def test_the_command_line_takes_dynamic_shared_memory(tmp_path, capsys):
    """``python -m qwengpu asm / trace --shared BYTES``: the kernel a launch with ``shared=`` runs, and without it the
    same refusal as dev.launch."""
    from qwengpu.__main__ import main
    src = tmp_path / "dyn.cu"
    src.write_text(DYNAMIC_SHARED)
    assert main(["asm", str(src), "--kernel", "k", "--threads", "4"]) != 0
    assert "declares extern __shared__ s" in "".join(capsys.readouterr())
    assert main(["asm", str(src), "--kernel", "k", "--threads", "4", "--shared", "16"]) == 0
    assert "ROM blocks" in capsys.readouterr().out
    assert main(["trace", str(src), "--kernel", "k", "--args", "0,8", "--threads", "4", "--shared", "16"]) == 0
    records = [line for line in capsys.readouterr().out.splitlines() if " values=" in line]
    dev = Device()
    dev.launch(dev.load_kernel(DYNAMIC_SHARED, "k"), threads=4, args=[0, 8], shared=16)
    assert len(records) == dev.stats["records"]


ASYNC_COPY = r'''
extern "C" __global__ void staged(int *y, const int *x, int n)
{
    __shared__ int tile[8];
    int t = threadIdx.x;
    // each thread copies two words of its pair's slice into shared memory, asynchronously (sm_80's cp.async)
    unsigned to = (unsigned)__cvta_generic_to_shared(&tile[2 * (t / 2)]);
    if (t % 2 == 0)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(to), "l"(x + 2 * (t / 2)));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();
    int v;
    asm volatile("ld.shared::cta.u32 %0, [%1];" : "=r"(v)
                 : "r"((unsigned)__cvta_generic_to_shared(&tile[(t + 1) % n])));
    y[t] = v * 10 + tile[t];
}'''


def test_an_asynchronous_copy_to_shared_memory_and_a_shared_window_address():
    """cp.async (global words into __shared__ ones, done when issued: its waits are then nothing) and
    __cvta_generic_to_shared's 32-bit address of &tile[i] read by ld.shared::cta, across two warps, against
    numpy."""
    dev = Device()
    y, x = dev.alloc(8), dev.alloc(8)
    values = np.arange(8) * 3 + 1
    dev.write(x, values)
    dev.launch(dev.load_kernel(ASYNC_COPY, "staged"), threads=8, args=[y, x, 8])
    np.testing.assert_array_equal(dev.read(y, 8), np.roll(values, -1) * 10 + values)
