"""__syncthreads_count / __syncthreads_and / __syncthreads_or (PTX's bar.red) on the interpreter, against numpy:
one warp and several, a partial last warp, a 2-d block, a grid of blocks, in a loop (each round's count its own)."""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import Device, MachineError, toolchain

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

VOTES = r"""
extern "C" __global__ void votes(int *y, const int *x, int rounds)
{
    int t = threadIdx.x + threadIdx.y * blockDim.x;
    int i = blockIdx.x * blockDim.x * blockDim.y + t;
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        int c = __syncthreads_count(x[i] > r);
        int a = __syncthreads_and(x[i] > r - 3);
        int o = __syncthreads_or(x[i] == r);
        acc = acc * 7 + c * 100 + a * 10 + o;
    }
    y[i] = acc;
}
"""


def expected(x: np.ndarray, per_block: int, rounds: int) -> np.ndarray:
    out = []
    for block in x.reshape(-1, per_block):
        acc = 0
        for r in range(rounds):
            acc = acc * 7 + int((block > r).sum()) * 100 + int((block > r - 3).all()) * 10 + int((block == r).any())
        out += [acc] * per_block
    return np.array(out, dtype=np.int32)


@pytest.mark.parametrize("threads, blocks", [(4, 1), (8, 1), (6, 1), ((3, 2), 1), (4, 2), (5, 2)])
def test_block_counts_ands_and_ors_equal_numpy(threads, blocks):
    per_block = threads if isinstance(threads, int) else threads[0] * threads[1]
    rng = np.random.default_rng(per_block * 10 + blocks)
    x = rng.integers(-1, 6, per_block * blocks).astype(np.int32)
    dev = Device()
    kernel = dev.load_kernel(VOTES, "votes")
    y, xa = dev.alloc(len(x)), dev.alloc(len(x))
    dev.write(xa, x)
    dev.launch(kernel, threads=threads, blocks=blocks, args=[y, xa, 3])
    np.testing.assert_array_equal(dev.read(y, len(x)), expected(x, per_block, 3))


GUARDED = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [k_param_0];
    mov.u32 %r1, %tid.x;
    setp.gt.u32 %p1, %r1, 2;
    setp.lt.u32 %p2, %r1, 6;
    @%p1 bar.red.popc.u32 %r2, 0, %p2;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}
"""


def test_a_block_vote_under_a_guard_is_refused():
    """PTX written by hand: a bar.red only some threads reach (undefined in CUDA) is refused naming the line."""
    dev = Device()
    with pytest.raises(MachineError, match=r"line 13 \(a barrier under a lane predicate\)"):
        dev.launch(dev.load_kernel(GUARDED, "k"), threads=8, args=[dev.alloc(8)])
    assert dev.tokens == []
