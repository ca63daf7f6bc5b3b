// __shared__ memory and __syncthreads() across the warps of a block (qwengpu/lowering/barriers.py): each kernel is
// checked against numpy on the interpreter (tests/test_shared_memory.py), and the circuit and the bf16 model must
// write the interpreter's tokens on them. The same source runs on an NVIDIA GPU.

// Every thread puts its word in shared memory; after the barrier thread 0 adds the block's words (two warps of 4
// lanes: warp 1's words are read by warp 0 only after warp 1 has stored them).
extern "C" __global__ void block_sum(int *out, const int *x) {
    __shared__ int s[8];
    int i = threadIdx.x;
    s[i] = x[blockIdx.x * blockDim.x + i];
    __syncthreads();
    if (i == 0) {
        int t = 0;
        for (int j = 0; j < blockDim.x; j++) t += s[j];
        out[blockIdx.x] = t;
    }
}

// The textbook tree reduction: a barrier in a loop, one partial sum per block (n may end inside a block).
extern "C" __global__ void tree_sum(int *out, const int *x, int n) {
    __shared__ int s[16];
    int i = threadIdx.x, g = blockIdx.x * blockDim.x + threadIdx.x;
    s[i] = g < n ? x[g] : 0;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (i < stride) s[i] += s[i + stride];
        __syncthreads();
    }
    if (i == 0) out[blockIdx.x] = s[0];
}

// Each thread reads the word another warp wrote: a reversal through shared memory, plus a value kept in a register
// across the barrier (x[i] * 3 is computed before it and used after it).
extern "C" __global__ void reverse(int *out, const int *x) {
    __shared__ int s[8];
    int i = threadIdx.x;
    int v = x[i] * 3;
    s[i] = v;
    __syncthreads();
    out[i] = s[blockDim.x - 1 - i] - v;
}

// A histogram in shared memory: zeroed by the first threads, counted with shared atomics, written out after the
// last barrier.
extern "C" __global__ void shared_histogram(int *h, const int *x, int n) {
    __shared__ int bins[4];
    int i = threadIdx.x;
    if (i < 4) bins[i] = 0;
    __syncthreads();
    if (i < n) atomicAdd(&bins[x[i] & 3], 1);
    __syncthreads();
    if (i < 4) h[i] = bins[i];
}

// A barrier in a loop whose trip count the machine reads from memory (the same on every thread): each round every
// thread takes its right neighbour's word, so x comes out rotated left by max(*rounds, 1).
extern "C" __global__ void rotate(int *out, const int *x, const int *rounds) {
    __shared__ int s[16];
    int i = threadIdx.x, r = 0;
    s[i] = x[i];
    __syncthreads();
    do {
        int v = s[(i + 1) % blockDim.x];
        __syncthreads();
        s[i] = v;
        __syncthreads();
    } while (++r < *rounds);
    out[i] = s[i];
}

// A barrier in a loop the lowering runs SIMT style (NVRTC guards it with *rounds >= 1, so the loop is entered under
// a lane mask and repeats on the 'any' branch): each round every thread adds i + 1 to a word that moves with the
// round.
extern "C" __global__ void spread(int *out, const int *x, const int *rounds) {
    __shared__ int s[8];
    int i = threadIdx.x;
    s[i] = x[i];
    __syncthreads();
    for (int r = 0; r < *rounds; r++) {
        atomicAdd(&s[(i + r) & 7], i + 1);
        __syncthreads();
    }
    out[i] = s[i];
}
