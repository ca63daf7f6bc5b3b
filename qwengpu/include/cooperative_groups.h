/* qwengpu's stand-in for CUDA's <cooperative_groups.h> under NVRTC (which ships none): the groups a kernel names
 * for its own block and grid, and tiles of a warp, written with the built-ins they stand for.
 *
 *   this_thread_block()      thread_rank(), size() / num_threads(), sync() (__syncthreads), group_index(),
 *                            thread_index(), group_dim() / dim_threads()
 *   this_grid()              thread_rank(), size() / num_threads(), block_rank(), num_blocks() (unsigned long
 *                            long, as CUDA's): grid-stride loops. No sync(): the machine runs a grid's blocks one
 *                            after another, so no block can wait for a later one (refused when compiled, saying so).
 *   tiled_partition<N>(g)    a thread_block_tile<N>: thread_rank(), size(), meta_group_rank() / _size(), sync(),
 *                            shfl / shfl_down / shfl_up / shfl_xor, any / all / ballot: a warp's built-ins with
 *                            width N. The machine's warp is 4 lanes (warpSize), so N is 1, 2 or 4: a tile of 32 is
 *                            refused when compiled (a GPU's tile of 32 is one warp; here it would span 8, whose
 *                            lanes no shuffle reaches). Write tiles of 4, or loop over warpSize.
 *   reduce(tile, v, op)      <cooperative_groups/reduce.h>: plus, less, greater, bit_and, bit_or, bit_xor.
 */
#pragma once

namespace cooperative_groups {

struct thread_block {
    __device__ unsigned int thread_rank() const
    {
        return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    }
    __device__ unsigned int size() const { return blockDim.x * blockDim.y * blockDim.z; }
    __device__ unsigned int num_threads() const { return size(); }
    __device__ void sync() const { __syncthreads(); }
    __device__ dim3 group_index() const { return blockIdx; }
    __device__ dim3 thread_index() const { return threadIdx; }
    __device__ dim3 group_dim() const { return blockDim; }
    __device__ dim3 dim_threads() const { return blockDim; }
};

__device__ inline thread_block this_thread_block() { return thread_block(); }

template <typename Never> struct qwengpu_refused { static const bool value = false; };

// Ranks and sizes are unsigned long long, as CUDA's: a grid-stride loop's counter (`for (auto i =
// grid.thread_rank(); i < n; i += grid.size())`) is a 64-bit loop counter, which the lowering keeps in one word.
struct grid_group {
    __device__ unsigned long long block_rank() const
    {
        return (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    }
    __device__ unsigned long long num_blocks() const { return gridDim.x * gridDim.y * gridDim.z; }
    __device__ unsigned long long thread_rank() const
    {
        return block_rank() * (blockDim.x * blockDim.y * blockDim.z) + this_thread_block().thread_rank();
    }
    __device__ unsigned long long size() const { return num_blocks() * (blockDim.x * blockDim.y * blockDim.z); }
    __device__ unsigned long long num_threads() const { return size(); }
    __device__ bool is_valid() const { return true; }
    template <typename Never = void> __device__ void sync() const
    {
        static_assert(qwengpu_refused<Never>::value,
                      "this_grid().sync(): the machine runs a grid's blocks one after another, so a block cannot "
                      "wait for a later one; end the kernel there and launch a second one for what follows");
    }
};

__device__ inline grid_group this_grid() { return grid_group(); }

template <unsigned int N> struct thread_block_tile {
    static_assert(N == 1 || N == 2 || N == 4,
                  "tiled_partition<N>: the machine's warp is 4 lanes (warpSize), and a tile's shuffles stay inside "
                  "a warp, so N is 1, 2 or 4; a GPU's tile of 32 is one warp, here it would span 8 (write tiles of "
                  "4, or loop over warpSize)");
    __device__ unsigned int thread_rank() const { return this_thread_block().thread_rank() % N; }
    __device__ unsigned int size() const { return N; }
    __device__ unsigned int num_threads() const { return N; }
    __device__ unsigned int meta_group_rank() const { return this_thread_block().thread_rank() / N; }
    __device__ unsigned int meta_group_size() const { return (this_thread_block().size() + N - 1) / N; }
    // a tile lies in one of the machine's 4-lane warps (whose lanes run in step): a sync of that warp's lanes is
    // free, where __syncwarp() of all 32 would be a barrier of the block's warps (qwengpu.lowering.emit)
    __device__ void sync() const { __syncwarp(0xfu); }
    template <typename T> __device__ T shfl(T v, unsigned int rank) const
    {
        return __shfl_sync(0xffffffffu, v, rank, N);
    }
    template <typename T> __device__ T shfl_down(T v, unsigned int delta) const
    {
        return __shfl_down_sync(0xffffffffu, v, delta, N);
    }
    template <typename T> __device__ T shfl_up(T v, unsigned int delta) const
    {
        return __shfl_up_sync(0xffffffffu, v, delta, N);
    }
    template <typename T> __device__ T shfl_xor(T v, unsigned int mask) const
    {
        return __shfl_xor_sync(0xffffffffu, v, mask, N);
    }
    // The tile's lanes' bits, from bit 0 (a warp's ballot shifted down to the tile's first lane).
    __device__ unsigned int ballot(int predicate) const
    {
        unsigned int first = (this_thread_block().thread_rank() % warpSize) / N * N;
        return (__ballot_sync(0xffffffffu, predicate) >> first) & ((1u << N) - 1u);
    }
    __device__ bool any(int predicate) const { return ballot(predicate) != 0; }
    __device__ bool all(int predicate) const { return ballot(predicate) == (1u << N) - 1u; }
};

template <unsigned int N, typename Parent> __device__ thread_block_tile<N> tiled_partition(const Parent &)
{
    return thread_block_tile<N>();
}

}  // namespace cooperative_groups

#include "cooperative_groups/reduce.h"
