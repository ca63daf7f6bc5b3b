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
