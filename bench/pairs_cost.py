"""What a 64-bit integer loaded from memory costs on a QwenGPU, beside a 32-bit one: the same kernels over ``int``
and ``long long`` arrays (qwengpu.lowering.pairs keeps each value loaded, and what is computed from it, as a pair of
words).

``python -m qccl_bench.pairs_cost [--json OUT]``

Per kernel, on the interpreter (the circuit and the model write the same tokens): records and tokens written, and
the ratio of the long long kernel's tokens to the int one's; each result is checked against numpy.
  increment  ``x[i] += 1`` on 2 blocks of 4 threads, 8 elements: the add with its carry;
  sum        ``s += x[i]`` over 16 elements on one thread, then ``out[0] = s``;
  scale      ``y[i] = x[i] * 3 - y[i]`` on 2 blocks of 4 threads: a product of pairs, from partial products;
  maximum    ``m = max(m, x[i])`` over 16 elements on one thread: a compare of high words, then low ones.
"""
from __future__ import annotations

import argparse

import numpy as np

from qccl_bench.cost_table import tabulate
from qwengpu import Device

SOURCE = r"""
template <typename T> __device__ void increment(T *x) { x[blockIdx.x * blockDim.x + threadIdx.x] += 1; }
template <typename T> __device__ void sum(const T *x, T *out, int n)
{
    T s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    out[0] = s;
}
template <typename T> __device__ void scale(const T *x, T *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i] * 3 - y[i];
}
template <typename T> __device__ void maximum(const T *x, T *out, int n)
{
    T m = x[0];
    for (int i = 1; i < n; i++) m = max(m, x[i]);
    out[0] = m;
}
extern "C" __global__ void increment_int(int *x) { increment(x); }
extern "C" __global__ void increment_long_long(long long *x) { increment(x); }
extern "C" __global__ void sum_int(const int *x, int *out, int n) { sum(x, out, n); }
extern "C" __global__ void sum_long_long(const long long *x, long long *out, int n) { sum(x, out, n); }
extern "C" __global__ void scale_int(const int *x, int *y) { scale(x, y); }
extern "C" __global__ void scale_long_long(const long long *x, long long *y) { scale(x, y); }
extern "C" __global__ void maximum_int(const int *x, int *out, int n) { maximum(x, out, n); }
extern "C" __global__ void maximum_long_long(const long long *x, long long *out, int n) { maximum(x, out, n); }
"""
COUNT = 16
TYPES = {"int": np.int32, "long_long": np.int64}


def measure(kernel: str, kind: str) -> dict:
    """One launch: its records and tokens written, the result checked against numpy's."""
    dtype = TYPES[kind]
    rng = np.random.default_rng(5)
    x = rng.integers(-2**31, 2**31, COUNT).astype(dtype) * (1 if dtype is np.int32 else 3**19)
    y = rng.integers(-1000, 1000, COUNT).astype(dtype)
    dev = Device()
    per = np.dtype(dtype).itemsize // 4
    px, py = dev.alloc(COUNT * per), dev.alloc(COUNT * per)
    dev.write(px, x.view(np.uint32))
    dev.write(py, y.view(np.uint32))
    k = dev.load_kernel(SOURCE, f"{kernel}_{kind}")
    with np.errstate(over="ignore"):
        if kernel == "increment":
            dev.launch(k, threads=4, blocks=2, args=[px])
            got, want = dev.read(px, 8 * per).view(dtype), x[:8] + dtype(1)
        elif kernel == "scale":
            dev.launch(k, threads=4, blocks=2, args=[px, py])
            got, want = dev.read(py, 8 * per).view(dtype), x[:8] * dtype(3) - y[:8]
        else:
            dev.launch(k, threads=1, args=[px, py, COUNT])
            got = dev.read(py, per).view(dtype)
            want = [x.sum(dtype=dtype)] if kernel == "sum" else [x.max()]
    assert list(got) == list(want), (kernel, kind, got, want)
    return {"records": dev.stats["records"], "tokens": dev.stats["tokens_written"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    tabulate(("increment", "sum", "scale", "maximum"), TYPES, measure, ("kernel", "type"), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
