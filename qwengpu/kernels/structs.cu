// Structs passed by value (the kernel's launch arguments gathered in one struct, as many CUDA codes do): the
// parameter is the struct's bytes (.param .align 8 .b8 k_param_0[24]), its fields read at their offsets, its
// pointer fields device addresses. Launched with the struct's bytes: a ctypes.Structure with the same fields, or a
// numpy record (qwengpu.device.Kernel.arguments). tests/test_kernels.py checks them against numpy.

struct Scale {
    int *y;
    const int *x;
    int n;
    int factor;
};

// y[i] = x[i] * factor for i < n: two pointer fields, two ints (NVRTC reads those two with one ld.param.v2).
extern "C" __global__ void scale(Scale a)
{
    int i = threadIdx.x;
    if (i < a.n)
        a.y[i] = a.x[i] * a.factor;
}

struct Mixed {
    short s;
    signed char c;
    int v;
    unsigned char u;
};

// Narrow fields, signed and unsigned, with the padding C puts between them.
extern "C" __global__ void mixed(int *out, Mixed m)
{
    out[threadIdx.x] = m.s * (int)threadIdx.x + m.c + m.v + m.u;
}

struct Window {
    int offset;
    const int *data;
};

// A struct beside scalar arguments, its pointer after an int (so at byte 8).
extern "C" __global__ void window_sum(int *out, Window w, int count)
{
    int total = 0;
    for (int k = 0; k < count; k++)
        total += w.data[w.offset + k + (int)threadIdx.x];
    out[threadIdx.x] = total;
}
