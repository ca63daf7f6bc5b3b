"""__half (<cuda_fp16.h>) and __nv_bfloat16 (<cuda_bf16.h>) kernels on the interpreter: the stand-in headers'
arithmetic, comparisons and conversions against results computed in float64 and rounded once (numpy's float16,
torch's bfloat16), edge values included; and, on a lent GPU, the conversions of NaNs against CUDA's own headers."""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import Device, toolchain
from qwengpu.toolchain import CompileError

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

HALVES = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// op is a launch argument: the lowering folds the choice, so each launch holds one operation's code
template <typename T>
__device__ void arithmetic(T *y, const T *a, const T *b, int *flags, int op)
{
    int i = threadIdx.x;
    T r = -a[i];
    if (op == 0) r = a[i] + b[i];
    if (op == 1) r = a[i] - b[i];
    if (op == 2) r = a[i] * b[i];
    if (op == 3) r = a[i] / b[i];
    if (op == 4) r = __hmax(a[i], b[i]);
    if (op == 6)
        flags[i] = (a[i] < b[i]) | (a[i] == b[i]) << 1 | (a[i] != b[i]) << 2 | __hisnan(a[i]) << 3
                   | (__hisinf(a[i]) & 3) << 4;
    else
        y[i] = r;
}

extern "C" __global__ void halves(__half *y, const __half *a, const __half *b, int *flags, int op)
{ arithmetic(y, a, b, flags, op); }

extern "C" __global__ void bfloats(__nv_bfloat16 *y, const __nv_bfloat16 *a, const __nv_bfloat16 *b, int *flags,
                                   int op)
{ arithmetic(y, a, b, flags, op); }
"""
N = 16          # halves a round, 4 a launch (one warp)


def _edges(kind: str) -> np.ndarray:
    """Bit patterns: zeros, the smallest subnormals, the largest finite, infinities, NaNs, 1 and neighbours."""
    if kind == "f16":
        return np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00,
                         0x7C01, 0x3C00, 0x3C01, 0xBBFF, 0x4000], dtype=np.uint16)
    return np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0,
                     0x7F81, 0x3F80, 0x3F81, 0xBF7F, 0x4000], dtype=np.uint16)


def _to_float(bits: np.ndarray, kind: str) -> np.ndarray:
    if kind == "f16":
        return bits.view(np.float16).astype(np.float64)
    with np.errstate(invalid="ignore"):         # NaN patterns widen to NaNs
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _round(values: np.ndarray, kind: str) -> np.ndarray:
    """float64 results rounded once to the half format (exact, or innocuous: float64 holds more than twice a
    half's digits), a NaN the canonical 0x7fff."""
    with np.errstate(all="ignore"):
        if kind == "f16":
            bits = values.astype(np.float16).view(np.uint16)
        else:
            torch = pytest.importorskip("torch")
            # float64 -> float32 -> bfloat16: each step rounds a result that float64 / float32 hold with twice the
            # target's digits and more, so the two roundings are one
            bits = torch.from_numpy(values.astype(np.float32)).to(torch.bfloat16).view(torch.int16).numpy()
            bits = bits.view(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FFF), bits).astype(np.uint16)


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_half_arithmetic_and_comparisons_equal_float64_rounded_once(kind):
    rng = np.random.default_rng(5 if kind == "f16" else 6)
    dev = Device()
    kernel = dev.load_kernel(HALVES, "halves" if kind == "f16" else "bfloats")
    y, a, b, flags = dev.alloc(2), dev.alloc(2), dev.alloc(2), dev.alloc(4)
    edges = _edges(kind)
    rounds = [(edges, edges[::-1].copy()), (edges, np.roll(edges, 3))]
    for _ in range(2):
        rounds.append((rng.integers(0, 1 << 16, N).astype(np.uint16), rng.integers(0, 1 << 16, N).astype(np.uint16)))
        near = rng.integers(0x3000, 0x4800, N).astype(np.uint16) | (rng.integers(0, 2, N).astype(np.uint16) << 15)
        rounds.append((near, near ^ rng.integers(0, 4, N).astype(np.uint16)))
    for av, bv in rounds:
        got = np.zeros((6, N), dtype=np.uint16)
        got_flags = np.zeros(N, dtype=np.int32)
        for k in range(0, N, 4):
            dev.write(a, av[k:k + 4].view(np.int32))
            dev.write(b, bv[k:k + 4].view(np.int32))
            for op in range(7):
                dev.launch(kernel, threads=4, args=[y, a, b, flags, op])
                if op < 6:
                    got[op, k:k + 4] = dev.read(y, 2).view(np.uint16)
            got_flags[k:k + 4] = dev.read(flags, 4)
        fa, fb = _to_float(av, kind), _to_float(bv, kind)
        with np.errstate(all="ignore"):
            maximum = np.where(np.isnan(fa), fb, np.where(np.isnan(fb), fa, np.maximum(fa, fb)))
            maximum = np.where((fa == 0) & (fb == 0), np.where(np.signbit(fa) & np.signbit(fb), -0.0, 0.0), maximum)
            want = np.stack([_round(fa + fb, kind), _round(fa - fb, kind), _round(fa * fb, kind),
                             _round(fa / fb, kind), _round(maximum, kind), av ^ np.uint16(0x8000)])
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} {av} {bv}")
        inf = np.where(np.isinf(fa), np.where(fa > 0, 1, 3), 0)
        want_flags = ((fa < fb) | (fa == fb) << 1 | (fa != fb) << 2 | np.isnan(fa) << 3 | inf << 4)
        np.testing.assert_array_equal(got_flags, want_flags.astype(np.int32))


PAIRS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void pairs(__half2 *y, const __half2 *a, const __half2 *b, __nv_bfloat162 *z, const float2 *f)
{
    int i = threadIdx.x;
    __half2 s = a[i] + b[i];
    s *= __half2half2(__float2half(0.5f));
    y[i] = __hmax2(s, -a[i]);
    z[i] = __float22bfloat162_rn(f[i]);
}
"""


def test_pairs_of_halves_compute_lane_by_lane():
    """__half2 / __nv_bfloat162: a word of two halves (x low, y high), each lane's arithmetic the single half's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(22)
    a = rng.integers(0x2000, 0x5000, 8).astype(np.uint16) | (rng.integers(0, 2, 8).astype(np.uint16) << 15)
    b = rng.integers(0x2000, 0x5000, 8).astype(np.uint16)
    f = rng.standard_normal(8).astype(np.float32) * 100
    dev = Device()
    y, ya, yb, z, zf = dev.alloc(4), dev.alloc(4), dev.alloc(4), dev.alloc(4), dev.alloc(8)
    dev.write(ya, a.view(np.int32))
    dev.write(yb, b.view(np.int32))
    dev.write(zf, f.view(np.int32))
    dev.launch(dev.load_kernel(PAIRS, "pairs"), threads=4, args=[y, ya, yb, z, zf])
    fa, fb = _to_float(a, "f16"), _to_float(b, "f16")
    s = _to_float(_round(_to_float(_round(fa + fb, "f16"), "f16") * 0.5, "f16"), "f16")
    np.testing.assert_array_equal(dev.read(y, 4).view(np.uint16), _round(np.maximum(s, -fa), "f16"))
    want = torch.from_numpy(f).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(dev.read(z, 4).view(np.uint16), want)


HALF_ATOMICS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void add_halves(__half2 *y, const __half2 *x, __half2 *old)
{ old[threadIdx.x] = atomicAdd(y, x[threadIdx.x]); }
extern "C" __global__ void add_bfloats(__nv_bfloat162 *y, const __nv_bfloat162 *x, __nv_bfloat162 *old)
{ old[threadIdx.x] = atomicAdd(y, x[threadIdx.x]); }
// single halves: lanes adding into both halves of one word
template <typename H> __device__ void add(H *y, const H *x, H *old)
{ int i = threadIdx.x; old[i] = atomicAdd(&y[i & 1], x[i]); }
extern "C" __global__ void add_half(__half *y, const __half *x, __half *old) { add(y, x, old); }
extern "C" __global__ void add_bfloat(__nv_bfloat16 *y, const __nv_bfloat16 *x, __nv_bfloat16 *old)
{ add(y, x, old); }
"""


ATOMIC_START = {"f16": [0x3C00, 0x0200], "bf16": [0x3F80, 0x0040]}      # 1, and a subnormal


def _random_halves(kind: str, seed: int, n: int) -> np.ndarray:
    """n halves' bits of either sign, below 512 (f16) or 2^17 (bf16), so that their sums round but stay finite."""
    rng = np.random.default_rng(seed)
    top = 0x6000 if kind == "f16" else 0x4800
    return rng.integers(0, top, n).astype(np.uint16) | (rng.integers(0, 2, n).astype(np.uint16) << 15)


def _launch_atomic_adds(kind: str, kernel: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HALF_ATOMICS' ``kernel`` on 4 threads, y one word holding ATOMIC_START[kind], x the halves they add: the old
    halves (one per half of x) and y's two halves after."""
    dev = Device()
    y, xs, old = dev.alloc(1), dev.alloc(len(x) // 2), dev.alloc(len(x) // 2)
    dev.write(y, np.array(ATOMIC_START[kind], np.uint16).view(np.int32))
    dev.write(xs, x.view(np.int32))
    dev.launch(dev.load_kernel(HALF_ATOMICS, kernel), threads=4, args=[y, xs, old])
    return dev.read(old, len(x) // 2).view(np.uint16), dev.read(y, 1).view(np.uint16)


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_atomic_add_of_a_pair_of_halves_adds_each_lane_in_thread_order(kind):
    """atomicAdd(__half2 *, __half2) / (__nv_bfloat162 *, ...): the stand-in's compare-and-swap loop on the pair's
    word; each half the sum rounded once (subnormals kept: the GPU's atom.add.noftz), in thread order, each thread
    given the pair before its add."""
    x = _random_halves(kind, 23 if kind == "f16" else 24, 8)
    x[:2] = [0x0003, 0x8001]         # subnormals
    got_old, got_y = _launch_atomic_adds(kind, "add_halves" if kind == "f16" else "add_bfloats", x)
    word, olds = np.array(ATOMIC_START[kind], np.uint16), []
    for t in range(4):
        olds.append(word)
        word = _round(_to_float(word, kind) + _to_float(x[2 * t:2 * t + 2], kind), kind)
    np.testing.assert_array_equal(got_old, np.concatenate(olds))
    np.testing.assert_array_equal(got_y, word)


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_atomic_add_of_a_half_adds_in_thread_order(kind):
    """atomicAdd(__half *, __half) / (__nv_bfloat16 *, ...): the stand-in's compare-and-swap loop on the half's 16
    bits (atomicCAS of an unsigned short), lanes adding into both halves of one word: each the sum rounded once,
    subnormals kept, in thread order, the other half of the word untouched by each add."""
    x = _random_halves(kind, 25 if kind == "f16" else 26, 4)
    x[1] = 0x8001                   # a subnormal
    got_old, got_y = _launch_atomic_adds(kind, "add_half" if kind == "f16" else "add_bfloat", x)
    word, olds = np.array(ATOMIC_START[kind], np.uint16), []
    for t in range(4):
        olds.append(int(word[t & 1]))
        word[t & 1] = _round(_to_float(word[t & 1:(t & 1) + 1], kind) + _to_float(x[t:t + 1], kind), kind)[0]
    assert got_old.tolist() == olds
    assert got_y.tolist() == word.tolist()


def test_a_double_makes_no_half():
    """__half(double) is deleted: a double converts to a half only through float here, which would round twice."""
    source = ('#include <cuda_fp16.h>\n'
              'extern "C" __global__ void k(__half *y) { y[threadIdx.x] = __half(1.1); }\n')
    with pytest.raises(CompileError, match="deleted function"):
        Device().load_kernel(source, "k")


NANS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void nans(unsigned *widened, unsigned short *narrowed, const unsigned short *h,
                                const unsigned *f)
{
    int i = threadIdx.x;
    widened[i] = __float_as_uint(__half2float(__ushort_as_half(h[i])));
    widened[i + 4] = __float_as_uint(__bfloat162float(__ushort_as_bfloat16(h[i + 4])));
    narrowed[i] = __half_as_ushort(__float2half(__uint_as_float(f[i])));
    narrowed[i + 4] = __bfloat16_as_ushort(__float2bfloat16(__uint_as_float(f[i])));
}
"""


def test_on_a_gpu_half_conversions_of_nans_match_cudas_headers(cuda_gpu):
    """The NaNs' bits: the machine makes every NaN the canonical one of its width; a GPU with CUDA's own headers
    (CuPy's NVRTC) is the reference, where a device is lent (bench/gpu_check.sh runs the tests)."""
    cupy = cuda_gpu
    halves = np.array([0x7E00, 0xFE01, 0x7C01, 0x7FFF, 0x7FC0, 0xFF81, 0x7F80 | 0x0041, 0x7FFF], dtype=np.uint16)
    floats = np.array([0x7FC00000, 0xFF800001, 0x7F800001, 0x7FFFFFFF], dtype=np.uint32)
    module = cupy.RawModule(code=NANS, options=("--std=c++17",))       # CUDA's own headers, as CuPy finds them
    widened, narrowed = cupy.zeros(8, cupy.uint32), cupy.zeros(8, cupy.uint16)
    module.get_function("nans")((1,), (4,), (widened, narrowed, cupy.asarray(halves), cupy.asarray(floats)))
    dev = Device()
    w, n, h, f = dev.alloc(8), dev.alloc(4), dev.alloc(4), dev.alloc(4)
    dev.write(h, halves.view(np.int32))
    dev.write(f, floats.view(np.int32))
    dev.launch(dev.load_kernel(NANS, "nans"), threads=4, args=[w, n, h, f])
    assert dev.read(w, 8).view(np.uint32).tolist() == cupy.asnumpy(widened).tolist()
    assert dev.read(n, 4).view(np.uint16).tolist() == cupy.asnumpy(narrowed).tolist()


HALF_ATOMICS_SERIAL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void pairs(__half2 *y, __nv_bfloat162 *z, const unsigned *x, unsigned *old, int n)
{
    for (int k = 0; k < n; k++) {
        __half2 h = atomicAdd(y, *(const __half2 *)&x[k]);
        __nv_bfloat162 b = atomicAdd(z, *(const __nv_bfloat162 *)&x[k]);
        old[k] = *(unsigned *)&h;
        old[n + k] = *(unsigned *)&b;
    }
}
extern "C" __global__ void singles(__half *y, __nv_bfloat16 *z, const unsigned *x, unsigned *old, int n)
{
    for (int k = 0; k < n; k++) {
        __half h = atomicAdd(&y[1], *(const __half *)&x[k]);
        __nv_bfloat16 b = atomicAdd(&z[1], *(const __nv_bfloat16 *)&x[k]);
        old[k] = *(unsigned short *)&h;
        old[n + k] = *(unsigned short *)&b;
    }
}
"""


def test_on_a_gpu_atomic_adds_of_pairs_of_halves_match_cudas_headers(cuda_gpu):
    """One thread's atomicAdds of pairs and of single halves (one after another: a GPU's order of several
    threads' is open), with subnormals, infinities and NaNs: the stand-in's compare-and-swap loops against the GPU's
    atom.add.noftz.f16x2 / .bf16x2 / .f16 / .bf16 under CUDA's own headers, where a device is lent."""
    cupy = cuda_gpu
    x = np.array([0x80013C00, 0x00030001, 0x7C00FBFF, 0x7E00BC00, 0x3C017F81, 0x7F80FF80, 0x00018001, 0x40004000],
                 dtype=np.uint32)
    n = len(x)
    module = cupy.RawModule(code=HALF_ATOMICS_SERIAL, options=("--std=c++17",))
    # a word of halves, a word of bfloat16s; the single halves are the words' high halves
    for kernel, starts in (("pairs", [0x02003C00, 0x3F800040]), ("singles", [0xBEEF3C00, 0x3F80BEEF])):
        on_gpu = [cupy.asarray(np.array([w], np.uint32)) for w in starts] + [cupy.asarray(x),
                                                                               cupy.zeros(2 * n, cupy.uint32)]
        module.get_function(kernel)((1,), (1,), (*on_gpu, np.int32(n)))
        dev = Device()
        words = [dev.alloc(1), dev.alloc(1), dev.alloc(n), dev.alloc(2 * n)]
        for p, a in zip(words, [np.array([w], np.uint32) for w in starts] + [x]):
            dev.write(p, a.view(np.int32))
        dev.launch(dev.load_kernel(HALF_ATOMICS_SERIAL, kernel), threads=1, args=[*words, n])
        assert dev.read(words[3], 2 * n).view(np.uint32).tolist() == cupy.asnumpy(on_gpu[3]).tolist(), kernel
        assert [int(dev.read(p, 1).view(np.uint32)[0]) for p in words[:2]] == \
            [int(cupy.asnumpy(a)[0]) for a in on_gpu[:2]], kernel