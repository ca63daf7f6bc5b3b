// Thread-local arrays and vector accesses on the QwenGPU: an array a thread indexes at run time lives in .local
// memory (each thread's own words in the block's memory, qwengpu/lowering/__init__.py local_layout), and NVRTC
// writes aligned neighbours as one .v2 / .v4 access, which the parser splits into word accesses (qwengpu/ptx.py).
// Checked against numpy in tests/test_kernels.py.

// A per-thread table filled from x, then updated and read at indices the data chooses.
extern "C" __global__ void local_lookup(int *out, const int *x, int n)
{
    int t = threadIdx.x, table[5];
    for (int i = 0; i < 5; i++)
        table[i] = x[i] * (t + 1);
#pragma unroll 1
    for (int i = 0; i < n; i++)
        table[x[t + i] & 3] += i + 1;
    out[t] = table[x[t + 1] & 3] - table[4];
}

// int4 copies: one .v4 load and one .v4 store per thread (four words each).
extern "C" __global__ void copy4(int4 *out, const int4 *x)
{
    int4 v = x[threadIdx.x];
    v.y += v.x;
    v.w -= 1;
    out[threadIdx.x] = v;
}
