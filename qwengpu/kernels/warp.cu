// Warp-level CUDA on the QwenGPU (qwengpu/lowering/warp.py): shuffles, votes, warp reductions and the lane's special
// registers. The machine's warp is 4 lanes, so warpSize is 4; tests/test_warp.py holds each kernel against a Python
// reading of the PTX ISA's definitions.
#define FULL 0xffffffffu

// The textbook warp sum: each warp's total in its lane 0, written at out[warp].
extern "C" __global__ void warp_sum(int *out, const int *x)
{
    int v = x[threadIdx.x];
    for (int offset = warpSize / 2; offset > 0; offset >>= 1)
        v += __shfl_down_sync(FULL, v, offset);
    if (threadIdx.x % warpSize == 0)
        out[threadIdx.x / warpSize] = v;
}

// Every warp gets the same total: a butterfly (xor) all-reduce.
extern "C" __global__ void warp_allsum(int *out, const int *x)
{
    int v = x[threadIdx.x];
    for (int mask = 1; mask < warpSize; mask <<= 1)
        v += __shfl_xor_sync(FULL, v, mask);
    out[threadIdx.x] = v;
}

// One shuffle as PTX writes it, with its in-range predicate: mode 0 up, 1 down, 2 bfly, 3 idx (a launch constant).
// b is the launch argument b, or with dynamic != 0 each thread's own word bs[tid]; c is PTX's packed clamp and
// segment mask. out[tid] = the value, out[threads + tid] = the predicate (0 / 1).
extern "C" __global__ void shuffle(int *out, const int *x, const int *bs, int mode, int b, int c, int dynamic)
{
    int t = threadIdx.x, v = x[t], bb = dynamic ? bs[t] : b, d, p;
    if (mode == 0)
        asm volatile("{ .reg .pred q; shfl.sync.up.b32 %0|q, %2, %3, %4, -1; selp.u32 %1, 1, 0, q; }"
                     : "=r"(d), "=r"(p) : "r"(v), "r"(bb), "r"(c));
    else if (mode == 1)
        asm volatile("{ .reg .pred q; shfl.sync.down.b32 %0|q, %2, %3, %4, -1; selp.u32 %1, 1, 0, q; }"
                     : "=r"(d), "=r"(p) : "r"(v), "r"(bb), "r"(c));
    else if (mode == 2)
        asm volatile("{ .reg .pred q; shfl.sync.bfly.b32 %0|q, %2, %3, %4, -1; selp.u32 %1, 1, 0, q; }"
                     : "=r"(d), "=r"(p) : "r"(v), "r"(bb), "r"(c));
    else
        asm volatile("{ .reg .pred q; shfl.sync.idx.b32 %0|q, %2, %3, %4, -1; selp.u32 %1, 1, 0, q; }"
                     : "=r"(d), "=r"(p) : "r"(v), "r"(bb), "r"(c));
    out[t] = d;
    out[blockDim.x + t] = p;
}

// Votes of the predicate x[tid] > limit.
extern "C" __global__ void votes(unsigned *out, const int *x, int limit)
{
    int t = threadIdx.x, n = blockDim.x;
    bool q = x[t] > limit;
    out[t] = __ballot_sync(FULL, q);
    out[n + t] = __any_sync(FULL, q);
    out[2 * n + t] = __all_sync(FULL, q);
}

// Whether x[tid] > limit is uniform across the warp (vote.uni, from PTX), and the active mask of the lanes whose
// word is odd (0 on the others).
extern "C" __global__ void uniform_and_active(unsigned *out, const int *x, int limit)
{
    int t = threadIdx.x;
    unsigned q = x[t] > limit, uni;
    asm volatile("{ .reg .pred a, u; setp.ne.u32 a, %1, 0; vote.sync.uni.pred u, a, -1; selp.u32 %0, 1, 0, u; }"
                 : "=r"(uni) : "r"(q));
    out[t] = uni;
    out[blockDim.x + t] = x[t] & 1 ? __activemask() : 0;
}

// The warp reductions of sm_80 (redux.sync).
extern "C" __global__ void reductions(unsigned *out, const int *x)
{
    int t = threadIdx.x, n = blockDim.x, v = x[t];
    out[t] = __reduce_add_sync(FULL, v);
    out[n + t] = __reduce_min_sync(FULL, v);
    out[2 * n + t] = __reduce_max_sync(FULL, (unsigned)v);
    out[3 * n + t] = __reduce_and_sync(FULL, (unsigned)v);
    out[4 * n + t] = __reduce_or_sync(FULL, (unsigned)v);
    out[5 * n + t] = __reduce_xor_sync(FULL, (unsigned)v);
}

// The lane's special registers.
extern "C" __global__ void lanes(unsigned *out)
{
    unsigned t = threadIdx.x, n = blockDim.x, lane, warp, eq, le, lt, ge, gt;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    asm("mov.u32 %0, %%warpid;" : "=r"(warp));
    asm("mov.u32 %0, %%lanemask_eq;" : "=r"(eq));
    asm("mov.u32 %0, %%lanemask_le;" : "=r"(le));
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
    asm("mov.u32 %0, %%lanemask_ge;" : "=r"(ge));
    asm("mov.u32 %0, %%lanemask_gt;" : "=r"(gt));
    out[t] = lane + 16 * warp;
    out[n + t] = eq;
    out[2 * n + t] = le;
    out[3 * n + t] = lt;
    out[4 * n + t] = ge;
    out[5 * n + t] = gt;
}
