// Ordinary CUDA as people write it, for the machine's kernel suite (qwengpu/circuit/suite.py) and the writer's guide
// (qwengpu/KERNELS.md). Each kernel is checked against numpy on the interpreter (tests/test_kernels.py); the circuit
// and the bf16 model must write the interpreter's tokens on them (make verify).

// The grid-stride loop: each thread walks i, i + blockDim.x, ...; lanes leave at different trips (a ragged tail).
extern "C" __global__ void saxpy(int *y, const int *x, int a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}

// abs, min, max and an unsigned compare, one result word each.
extern "C" __global__ void absminmax(int *out, const int *x, unsigned limit, int n) {
    int i = threadIdx.x;
    if (i < n) {
        int v = x[i];
        out[i] = v < 0 ? -v : v;
        out[n + i] = min(v, 3) + max(v, -2);
        out[2 * n + i] = (unsigned)v > limit;
    }
}

// A histogram of x & 3 by atomics at computed addresses.
extern "C" __global__ void histogram(int *h, const int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&h[x[i] & 3], 1);
}

// Division by a value the machine only knows at run time (a software long division).
extern "C" __global__ void divide(int *q, const int *x, const int *d, int n) {
    int i = threadIdx.x;
    if (i < n) q[i] = x[i] / d[i];
}

// A 2-d grid of 2-d blocks, as matrix code indexes: row from the y dimension, column from x (launched with
// threads=(TX, TY), blocks=(BX, BY)); rows and cols bound the matrix.
extern "C" __global__ void matrix_add(int *c, const int *a, const int *b, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols)
        c[row * cols + col] = a[row * cols + col] + b[row * cols + col];
}

// Every index CUDA gives a thread of a 3-d block in a 3-d grid, packed in one word: x | y << 4 | z << 8 of the
// thread, of its block at 12, 16, 20, and the sizes' sum at 24. out[] is indexed by the linear thread id.
extern "C" __global__ void indices3d(int *out)
{
    int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    int n = blockDim.x * blockDim.y * blockDim.z;
    out[b * n + t] = threadIdx.x | threadIdx.y << 4 | threadIdx.z << 8 | blockIdx.x << 12 | blockIdx.y << 16 |
                     blockIdx.z << 20 | (blockDim.x + blockDim.y + blockDim.z + gridDim.x + gridDim.y + gridDim.z) << 24;
}
