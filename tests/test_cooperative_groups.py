"""Cooperative groups (qwengpu/include's stand-in for <cooperative_groups.h>, NVRTC shipping none): a block's
sum through tiles of a warp and cg::reduce, a grid-stride loop over this_grid(), a tile's shuffles, ballot, any and
reduce, against numpy; what the machine cannot be (a tile wider than its 4-lane warp, a grid-wide sync) refused when
compiled, saying why."""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import Device, toolchain
from qwengpu.toolchain import CompileError

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

GROUPS = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// The reduction of CUDA's samples, with tiles of the machine's warp
extern "C" __global__ void block_sum(int *out, const int *x, int n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<4> tile = cg::tiled_partition<4>(block);
    __shared__ int partial[8];
    int v = 0;
    for (int i = block.thread_rank(); i < n; i += block.size())
        v += x[i];
    v = cg::reduce(tile, v, cg::plus<int>());
    if (tile.thread_rank() == 0)
        partial[tile.meta_group_rank()] = v;
    block.sync();
    if (block.thread_rank() == 0) {
        int s = 0;
        for (int w = 0; w < tile.meta_group_size(); w++)
            s += partial[w];
        out[blockIdx.x] = s;
    }
}

extern "C" __global__ void grid_scale(int *y, const int *x, int n)
{
    cg::grid_group grid = cg::this_grid();
    for (auto i = grid.thread_rank(); i < n; i += grid.size())
        y[i] = 3 * x[i] + (int)grid.block_rank();
}

// a tile's sync under a branch some tiles take: a GPU's warp barrier of the tile's lanes
extern "C" __global__ void tile_scan(int *y, const int *x)
{
    auto tile = cg::tiled_partition<2>(cg::this_thread_block());
    __shared__ int s[8];
    int v = x[threadIdx.x];
    if (v > 0) {
        s[threadIdx.x] = v;
        tile.sync();
        v += tile.thread_rank() ? s[threadIdx.x - 1] : 0;
    }
    y[threadIdx.x] = v;
}

extern "C" __global__ void pairs(int *y, const int *x)
{
    auto tile = cg::tiled_partition<2>(cg::this_thread_block());
    int v = x[threadIdx.x];
    y[threadIdx.x] = tile.shfl_down(v, 1) + 100 * tile.ballot(v > 2) + 1000 * tile.any(v == 0)
                     + 10000 * cg::reduce(tile, v, cg::greater<int>()) + 1000000 * tile.all(v >= 0);
}
"""


def test_a_block_sum_through_tiles_and_reduce():
    dev = Device()
    x, out = dev.alloc(24), dev.alloc(2)
    values = np.random.default_rng(3).integers(-1000, 1000, 23)
    dev.write(x, values)
    dev.launch(dev.load_kernel(GROUPS, "block_sum"), threads=8, blocks=2, args=[out, x, 23])
    assert dev.read(out, 2).tolist() == [values.sum()] * 2


def test_a_grid_stride_loop_over_this_grid():
    dev = Device()
    x, y = dev.alloc(20), dev.alloc(20)
    values = np.arange(20) * 7 - 30
    dev.write(x, values)
    dev.launch(dev.load_kernel(GROUPS, "grid_scale"), threads=4, blocks=(2, 1), args=[y, x, 19])
    block = (np.arange(19) % 8) // 4                   # 8 threads in the grid: element i is thread i % 8's
    assert dev.read(y, 19).tolist() == (3 * values[:19] + block).tolist()


def test_a_tiles_shuffles_votes_and_reduce():
    dev = Device()
    x, y = dev.alloc(4), dev.alloc(4)
    v = np.array([3, 0, 5, 1])
    dev.write(x, v)
    dev.launch(dev.load_kernel(GROUPS, "pairs"), threads=4, args=[y, x])
    want = []
    for lane in range(4):
        first = lane // 2 * 2
        tile = v[first:first + 2]
        down = v[lane + 1] if lane % 2 == 0 else v[lane]            # past the tile: the lane's own value
        ballot = sum(1 << k for k in range(2) if tile[k] > 2)
        want.append(down + 100 * ballot + 1000 * int((tile == 0).any()) + 10000 * tile.max()
                    + 1000000 * int((tile >= 0).all()))
    assert dev.read(y, 4).tolist() == want


def test_a_tiles_sync_under_a_branch_is_free():
    """tile.sync() of a tile of 2 inside a branch that some of the 4 tiles take (each tile whole, as CUDA asks): the
    tile's lanes are in one of the machine's warps, so it costs nothing (no barrier of the block's warps)."""
    dev = Device()
    x, y = dev.alloc(8), dev.alloc(8)
    v = np.array([3, 4, -1, -2, 5, 6, -7, -8])       # tiles 0 and 2 take the branch, 1 and 3 do not
    dev.write(x, v)
    kernel = dev.load_kernel(GROUPS, "tile_scan")
    dev.launch(kernel, threads=8, args=[y, x])
    assert not kernel.program((y, x), 8).parks
    want = [v[t] + (v[t - 1] if t % 2 and v[t] > 0 else 0) for t in range(8)]
    assert dev.read(y, 8).tolist() == want


@pytest.mark.parametrize("body, named", [
    ("auto t = cg::tiled_partition<32>(cg::this_thread_block()); y[0] = t.thread_rank();",
     r"tiled_partition<N>: the machine's warp is 4 lanes \(warpSize\)"),
    ("cg::this_grid().sync();", r"this_grid\(\)\.sync\(\): the machine runs a grid's blocks one after another"),
])
def test_what_the_machine_cannot_be_is_refused_when_compiled(body, named):
    source = ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
              f'extern "C" __global__ void k(int *y) {{ {body} }}\n')
    with pytest.raises(CompileError, match=named):
        Device().load_kernel(source, "k")
