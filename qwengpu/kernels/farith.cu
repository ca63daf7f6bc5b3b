// Float arithmetic as people first write it: the machine has no floating point, so each add, subtract and
// multiply is IEEE float32 from integer ops (qwengpu/lowering/floats.py), rounded to nearest even with subnormals,
// infinities and NaNs as an NVIDIA GPU's float unit treats them, and every program longer than the 32-block ROM runs
// as overlays (qwengpu/lowering/overlays.py). The toolchain compiles without fused multiply-adds (--fmad=false), so
// a * x + y rounds twice, as a numpy float32 replay does. Checked in tests/test_float_arithmetic_kernels.py.

// The first CUDA kernel: c = a + b, element-wise, the tail guarded.
extern "C" __global__ void vadd(float *c, const float *a, const float *b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// c = a - b and c = a * b (mode 0 / 1): one launch argument picks, folded when lowering.
extern "C" __global__ void vsub_vmul(float *c, const float *a, const float *b, int mode)
{
    int i = threadIdx.x;
    c[i] = mode ? a[i] * b[i] : a[i] - b[i];
}

// y = a * x + y over a grid-stride loop (a float launch argument).
extern "C" __global__ void saxpy(float *y, const float *x, float a, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}

// Each thread sums a row of x in order: a loop whose body is an add longer than the ROM.
extern "C" __global__ void row_sum(float *out, const float *x, int cols)
{
    float s = 0.0f;
#pragma unroll 1
    for (int j = 0; j < cols; j++)
        s += x[threadIdx.x * cols + j];
    out[threadIdx.x] = s;
}

// The textbook matrix multiply: C = A B for N x N row-major matrices, a thread an element over a 2-d grid.
extern "C" __global__ void matmul(const float *A, const float *B, float *C, int N)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < N; k++)
            sum += A[row * N + k] * B[k * N + col];
        C[row * N + col] = sum;
    }
}

// The textbook block reduction in shared memory: halve the stride, __syncthreads between the steps.
extern "C" __global__ void block_sum(const float *in, float *out)
{
    __shared__ float s[8];
    unsigned t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride)
            s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = s[0];
}

// A three-point stencil with float literal weights, the ends left alone.
extern "C" __global__ void stencil(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n - 1)
        out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}

// A dot product: each thread's product added into one word with atomicAdd (lanes in order, warps in order).
extern "C" __global__ void dot(float *result, const float *x, const float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        atomicAdd(result, x[i] * y[i]);
}
