"""What a 64-bit loop counter costs on a QwenGPU, beside an int one: the same loops with the counter an ``int`` and a
``size_t`` (qwengpu.lowering.counters keeps it in one word; each step that may carry saturates).

``python -m qccl_bench.loop_cost [--count 64] [--json OUT]``

Per loop, on the interpreter (the circuit and the model write the same tokens): records and tokens written for
``count`` elements, and the ratio of the size_t loop's tokens to the int loop's.
  grid-stride  ``for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)``, 2 blocks
               of 4 threads: a step by a stride known at launch saturates in two ops (min, add) where the int's is one;
  serial       ``for (i = 0; i < n; ++i)`` on one thread: NVRTC unrolls the size_t loop by four (its exit a view of
               the counter, a remainder loop counting up to 0), the int loop too.
"""
from __future__ import annotations

import argparse

import numpy as np

from qccl_bench.cost_table import tabulate
from qwengpu import Device

SOURCE = r"""
template <typename I> __device__ void grid_stride(int *x, I n)
{
    for (I i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        x[i] = 3 * x[i];
}
template <typename I> __device__ void serial(int *x, I n)
{
    for (I i = 0; i < n; ++i)
        x[i] = 3 * x[i];
}
extern "C" __global__ void grid_stride_int(int *x, int n) { grid_stride(x, n); }
extern "C" __global__ void grid_stride_size_t(int *x, size_t n) { grid_stride(x, n); }
extern "C" __global__ void serial_int(int *x, int n) { serial(x, n); }
extern "C" __global__ void serial_size_t(int *x, size_t n) { serial(x, n); }
"""
LOOPS = {"grid-stride": (4, 2), "serial": (1, 1)}        # threads, blocks


def measure(loop: str, counter: str, count: int) -> dict:
    """One launch of the loop over ``count`` elements: its records and tokens written (checked: x * 3)."""
    threads, blocks = LOOPS[loop]
    dev = Device()
    x = dev.alloc(count)
    dev.write(x, np.arange(count, dtype=np.int32))
    kernel = dev.load_kernel(SOURCE, f"{loop.replace('-', '_')}_{counter}")
    dev.launch(kernel, threads=threads, blocks=blocks, args=[x, count])
    assert (dev.read(x, count) == 3 * np.arange(count)).all(), (loop, counter)
    return {"records": dev.stats["records"], "tokens": dev.stats["tokens_written"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=64, help="elements each loop covers (at most 100: memory)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    tabulate(LOOPS, ("int", "size_t"), lambda loop, counter: measure(loop, counter, args.count), ("loop", "counter"),
             args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
