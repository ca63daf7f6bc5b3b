// The bit and high-product intrinsics, lowered to short sequences of the machine's ALU ops (no new circuit layers):
// mul.hi from 16-bit partial products, popc by SWAR sums, clz by smearing then counting, brev by swapping fields.
// Checked against Python's integers on edge words on the interpreter (tests/test_kernels.py).

// The high word of a 32 x 32 product, unsigned and signed, by a register.
extern "C" __global__ void umulhi(int *out, const int *x, const int *y) {
    int i = threadIdx.x;
    out[i] = __umulhi((unsigned)x[i], (unsigned)y[i]);
}

extern "C" __global__ void mulhi(int *out, const int *x, const int *y) {
    int i = threadIdx.x;
    out[i] = __mulhi(x[i], y[i]);
}

// Division by constants: NVRTC multiplies by a magic number and keeps the high word (mul.hi.s32, and
// mul.wide.u32 + shr.u64 for unsigned).
extern "C" __global__ void udiv7(int *out, const int *x) {
    int i = threadIdx.x;
    out[i] = (int)((unsigned)x[i] / 7u);
}

// The dividend redefined by a loop (a register with several definitions: the high word is recomputed where the
// factor still holds, in the product's basic block).
extern "C" __global__ void udiv10loop(int *out, const int *x) {
    int i = threadIdx.x;
    unsigned v = x[i];
#pragma unroll 1
    for (int k = 0; k < 2; k++) v = v / 10u + v;
    out[i] = (int)v;
}

extern "C" __global__ void div10(int *out, const int *x) {
    int i = threadIdx.x;
    out[i] = x[i] / 10;
}

extern "C" __global__ void remm13(int *out, const int *x) {
    int i = threadIdx.x;
    out[i] = x[i] % -13;
}

extern "C" __global__ void popc(int *out, const int *x) {
    int i = threadIdx.x;
    out[i] = __popc(x[i]);
}

extern "C" __global__ void clz(int *out, const int *x) {
    int i = threadIdx.x;
    out[i] = __clz(x[i]);
}

extern "C" __global__ void brev(int *out, const int *x) {
    int i = threadIdx.x;
    out[i] = (int)__brev((unsigned)x[i]);
}

// The lowest set bit, counted from 1 (0 for 0): NVRTC writes brev then bfind.shiftamt; the lowering counts the
// trailing zeros of the brev's source instead of reversing the word.
extern "C" __global__ void lowest_bit(int *out, const int *x) {
    int i = threadIdx.x;
    out[i] = __ffs(x[i]);
}

// bfind as PTX writes it: the highest set bit (.u32), the highest bit that differs from the sign (.s32), and with
// .shiftamt the left shift that brings it to the top; 0xffffffff where there is none. mode is a launch constant.
extern "C" __global__ void bfind(int *out, const int *x, int mode) {
    int i = threadIdx.x;
    unsigned r, v = x[i];
    if (mode == 0)
        asm("bfind.u32 %0, %1;" : "=r"(r) : "r"(v));
    else if (mode == 1)
        asm("bfind.s32 %0, %1;" : "=r"(r) : "r"(v));
    else if (mode == 2)
        asm("bfind.shiftamt.u32 %0, %1;" : "=r"(r) : "r"(v));
    else
        asm("bfind.shiftamt.s32 %0, %1;" : "=r"(r) : "r"(v));
    out[i] = (int)r;
}

// |x - y| + 7, unsigned (__usad) and signed (__sad).
extern "C" __global__ void sad(int *out, const int *x, const int *y) {
    int i = threadIdx.x;
    out[i] = (int)__usad((unsigned)x[i], (unsigned)y[i], 7u);
    out[16 + i] = (int)__sad(x[i], y[i], 7u);
}
