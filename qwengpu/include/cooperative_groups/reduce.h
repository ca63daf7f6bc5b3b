/* qwengpu's stand-in for CUDA's <cooperative_groups/reduce.h>: cooperative_groups::reduce over a tile of a warp
 * (every thread of the tile gets the result, as CUDA's), and the operations it takes. */
#pragma once
#include "../cooperative_groups.h"

namespace cooperative_groups {

template <typename T> struct plus { __device__ T operator()(T a, T b) const { return a + b; } };
template <typename T> struct less { __device__ T operator()(T a, T b) const { return a < b ? a : b; } };
template <typename T> struct greater { __device__ T operator()(T a, T b) const { return a < b ? b : a; } };
template <typename T> struct bit_and { __device__ T operator()(T a, T b) const { return a & b; } };
template <typename T> struct bit_or { __device__ T operator()(T a, T b) const { return a | b; } };
template <typename T> struct bit_xor { __device__ T operator()(T a, T b) const { return a ^ b; } };

// A butterfly: after step k each thread holds the op of its 2^k-thread group, so every thread ends with the whole
// tile's. Exact for integers, min and max; a float sum adds in the butterfly's order, which CUDA's own reduce does
// not promise to share.
template <unsigned int N, typename T, typename Op> __device__ T reduce(const thread_block_tile<N> &tile, T v, Op op)
{
    for (unsigned int offset = N / 2; offset > 0; offset /= 2)
        v = op(v, tile.shfl_xor(v, offset));
    return v;
}

}  // namespace cooperative_groups
