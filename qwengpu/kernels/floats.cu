// float on the QwenGPU without float arithmetic (qwengpu/lowering/floats.py): the machine has no floating point, but
// moving, comparing, ordering and changing the sign of a float32 are integer work. tests/test_floats.py holds each
// kernel against numpy's IEEE float32 on edge values (zeros, subnormals, infinities, NaNs). Arithmetic that rounds
// (+, *, /, conversions) is refused by name.
#define FULL 0xffffffffu

// The first kernel of many a network: y = max(x, 0), in bounds.
extern "C" __global__ void relu(float *y, const float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// Clamp to [lo, hi], float launch arguments.
extern "C" __global__ void clamp(float *y, const float *x, float lo, float hi)
{
    int i = threadIdx.x;
    y[i] = fminf(fmaxf(x[i], lo), hi);
}

// fmaxf / fminf of two arrays (mode 0: max, 1: min; a launch constant, so one of them is lowered).
extern "C" __global__ void minmax(float *y, const float *a, const float *b, int mode)
{
    int i = threadIdx.x;
    y[i] = mode == 0 ? fmaxf(a[i], b[i]) : fminf(a[i], b[i]);
}

// One comparison of a[i] with b[i] as C writes them (mode 0..9), 1 or 0.
extern "C" __global__ void compare(int *out, const float *a, const float *b, int mode)
{
    int i = threadIdx.x;
    float x = a[i], z = b[i];
    bool r;
    switch (mode) {
    case 0: r = x < z; break;
    case 1: r = x <= z; break;
    case 2: r = x > z; break;
    case 3: r = x >= z; break;
    case 4: r = x == z; break;
    case 5: r = x != z; break;
    case 6: r = !(x < z); break;
    case 7: r = !(x >= z); break;
    case 8: r = isnan(x) || isnan(z); break;
    default: r = !isnan(x) && !isnan(z); break;
    }
    out[i] = r;
}

// Classes of a float: isnan, isinf, isfinite, signbit, and whether it is a normal number (five bits a word; NVRTC
// has no isnormal without the CUDA headers: FLT_MIN <= |v| <= FLT_MAX).
extern "C" __global__ void classify(int *out, const float *x)
{
    int i = threadIdx.x;
    float v = x[i];
    out[i] = (isnan(v) ? 1 : 0) | (isinf(v) ? 2 : 0) | (isfinite(v) ? 4 : 0) | (signbit(v) ? 8 : 0) |
             (fabsf(v) >= 1.17549435e-38f && fabsf(v) <= 3.40282347e38f ? 16 : 0);
}

// The sign operations: -x, fabsf(x), copysignf(x, s) (mode 0, 1, 2).
extern "C" __global__ void sign_ops(float *y, const float *x, const float *s, int mode)
{
    int i = threadIdx.x;
    y[i] = mode == 0 ? -x[i] : mode == 1 ? fabsf(x[i]) : copysignf(x[i], s[i]);
}

// Count the elements above a threshold (a float argument), with an integer atomic.
extern "C" __global__ void count_above(int *count, const float *x, float threshold)
{
    if (x[threadIdx.x] > threshold)
        atomicAdd(count, 1);
}

// Each warp's largest element, NaNs ignored (fmaxf), by shuffles; in lane 0, at y[warp].
extern "C" __global__ void warp_max(float *y, const float *x)
{
    float v = x[threadIdx.x];
    for (int offset = warpSize / 2; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_down_sync(FULL, v, offset));
    if (threadIdx.x % warpSize == 0)
        y[threadIdx.x / warpSize] = v;
}

// Each thread's row: the index of its largest element (the first of equals; a NaN never wins), over cols columns.
// NVRTC unrolls this loop four times over, which no 32-block ROM holds: `#pragma unroll 1` keeps one body.
extern "C" __global__ void row_argmax(int *out, const float *x, int cols)
{
    const float *row = x + threadIdx.x * cols;
    float best = row[0];
    int at = 0;
#pragma unroll 1
    for (int j = 1; j < cols; j++) {
        float v = row[j];
        if (v > best) {
            best = v;
            at = j;
        }
    }
    out[threadIdx.x] = at;
}

// float4 loads and stores: a copy of four floats a thread.
extern "C" __global__ void copy4(float4 *y, const float4 *x)
{
    y[threadIdx.x] = x[threadIdx.x];
}

// The conversions that are bit work (mode 0..4): truncf, floorf, ceilf, and (int) / (unsigned) of a float (toward
// zero, saturated, a NaN gives 0: PTX's cvt.rzi).
extern "C" __global__ void to_integer(int *out, const float *x, int mode)
{
    int i = threadIdx.x;
    float v = x[i];
    if (mode == 0)
        out[i] = __float_as_int(truncf(v));
    else if (mode == 1)
        out[i] = __float_as_int(floorf(v));
    else if (mode == 2)
        out[i] = __float_as_int(ceilf(v));
    else if (mode == 3)
        out[i] = (int)v;
    else
        out[i] = (int)(unsigned)v;
}
