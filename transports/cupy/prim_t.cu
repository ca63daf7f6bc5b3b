// qccl's two primitives for every NCCL dtype on NVIDIA GPUs: the modes and the flag protocol of
// qccl/kernels/prim.cu and mcast.cu, with the payload type a template parameter (one source, instantiated at the end
// for int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16). Flags stay int words.
// The transport launches qccl's own prim.cu and mcast.cu for int32 and uint32 (the same sources as QLink runs); these
// instantiations carry every other dtype, and int32 / uint32 too so the two can be compared on a GPU.
// No CUDA header is needed: half and bfloat16 convert through PTX cvt and integer bit operations.
#define RECV  1
#define SEND  2
#define LOCAL 4
#define SPLIT 8
#define COPY  16
#define OP_SHIFT 5
#define OP_SUM  0
#define OP_PROD 1
#define OP_MAX  2
#define OP_MIN  3
#define DIV      512
#define NOWAIT  1024
#define POST    2048
#define MC_PRE_WAIT 1
#define MC_STORE    2
#define MC_POST     4
#define MC_WAIT     8

// Arithmetic per dtype: S is the stored type, C the type the op computes in; to / from convert.
template <typename S> struct Exact {                 // integers and IEEE float / double: compute in S itself
    typedef S C;
    __device__ static C to(S s) { return s; }
    __device__ static S from(C c) { return c; }
};
template <typename S, typename U> struct Wrap {      // signed integers: + and * wrap (computed unsigned, no UB)
    typedef S C;
    __device__ static C to(S s) { return s; }
    __device__ static S from(C c) { return c; }
    __device__ static C add(C a, C b) { return (C)((U)a + (U)b); }
    __device__ static C mul(C a, C b) { return (C)((U)a * (U)b); }
};
struct Half {                                         // IEEE binary16: each op in float, rounded to nearest even
    typedef float C;
    __device__ static C to(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
    __device__ static unsigned short from(C f) {
        unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
    }
};
struct BF16 {                                         // bfloat16: the top half of a float, rounded to nearest even
    typedef float C;
    __device__ static C to(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
    __device__ static unsigned short from(C f) {
        unsigned u = __float_as_uint(f);
        if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (unsigned short)((u >> 16) | 0x0040u);
        u += 0x7fffu + ((u >> 16) & 1u);
        return (unsigned short)(u >> 16);
    }
};

// + and *: plain for Exact, Half, BF16; a Wrap type's go through its unsigned type
template <class A> __device__ __forceinline__ typename A::C add_(typename A::C a, typename A::C b) { return a + b; }
template <class A> __device__ __forceinline__ typename A::C mul_(typename A::C a, typename A::C b) { return a * b; }
#define WRAP_OPS(S, U) \
    template <> __device__ __forceinline__ S add_<Wrap<S, U> >(S a, S b) { return Wrap<S, U>::add(a, b); } \
    template <> __device__ __forceinline__ S mul_<Wrap<S, U> >(S a, S b) { return Wrap<S, U>::mul(a, b); }
WRAP_OPS(signed char, unsigned char)
WRAP_OPS(int, unsigned)
WRAP_OPS(long long, unsigned long long)
typedef Wrap<signed char, unsigned char> WrapI8;
typedef Wrap<int, unsigned> WrapI32;
typedef Wrap<long long, unsigned long long> WrapI64;

template <typename S, class A>
__device__ void prim_body(int mode, int n, volatile int *rtail, int rwait, volatile int *rhead, int swait,
                          const S *rslot, const S *x, S *y, S *sslot, volatile int *stail, int spost,
                          volatile int *shead, int rpost, int divisor)
{
    typedef typename A::C C;
    int i = threadIdx.x;
    if (mode & POST) {
        if ((mode & SEND) && spost > 0) *stail = spost;
        if ((mode & RECV) && rpost > 0) *shead = rpost;
        return;
    }
    if (!(mode & NOWAIT)) {
        if (mode & RECV)
            while (*rtail < rwait) {}
        if ((mode & SEND) && swait > 0)
            while (*rhead < swait) {}
        __threadfence();        // acquire: the slot's data is read after the flag that announced it
    }
    if ((mode & (SEND | COPY)) && i < n) {
        S rs = 0, vs = 0;
        if (mode & RECV) rs = ((volatile const S *)rslot)[i];     // a peer's store: never a cached copy
        if (mode & LOCAL) vs = x[i];
        C r = A::to(rs), v = A::to(vs);
        if (!(mode & SPLIT) && (mode & RECV)) {
            int op = (mode >> OP_SHIFT) & 7;
            if (!(mode & LOCAL)) v = r;
            else if (op == OP_SUM) v = add_<A>(v, r);
            else if (op == OP_PROD) v = mul_<A>(v, r);
            else if (op == OP_MAX) v = v > r ? v : r;
            else v = v < r ? v : r;
        }
        if (mode & DIV) v = v / (C)divisor;
        S out = A::from(v);
        if (mode & COPY) y[i] = (mode & SPLIT) ? rs : out;
        if (mode & SEND) sslot[i] = out;
    }
    __threadfence_system();
    __syncthreads();
    if (i != 0) return;
    if ((mode & SEND) && spost > 0) *stail = spost;
    if ((mode & RECV) && rpost > 0) *shead = rpost;
}

__device__ __forceinline__ void wait_flags(volatile int *flags, int mask, int wait)
{
    for (int b = 0; b < 8; b++)
        if (mask & (1 << b))
            while (flags[b] < wait) {}
}

template <typename S>
__device__ void mcast_body(int mode, const S *x, S *win, volatile int *flag, int seq, volatile int *flags, int mask,
                           int wait)
{
    int i = threadIdx.x;
    if (mode & MC_PRE_WAIT) {
        wait_flags(flags, mask, wait);
        __threadfence();
    }
    if (mode & MC_STORE) win[i] = x[i];
    __threadfence_system();
    if (mode & MC_POST) *flag = seq;
    if (mode & MC_WAIT) wait_flags(flags, mask, wait);
}

#define INSTANTIATE(NAME, S, A) \
extern "C" __global__ void prim_##NAME(int mode, int n, volatile int *rtail, int rwait, volatile int *rhead, \
        int swait, const S *rslot, const S *x, S *y, S *sslot, volatile int *stail, int spost, volatile int *shead, \
        int rpost, int divisor) \
{ prim_body<S, A>(mode, n, rtail, rwait, rhead, swait, rslot, x, y, sslot, stail, spost, shead, rpost, divisor); } \
extern "C" __global__ void mcast_##NAME(int mode, const S *x, S *win, volatile int *flag, int seq, \
        volatile int *flags, int mask, int wait) \
{ mcast_body<S>(mode, x, win, flag, seq, flags, mask, wait); }

INSTANTIATE(int8, signed char, WrapI8)
INSTANTIATE(uint8, unsigned char, Exact<unsigned char>)
INSTANTIATE(int32, int, WrapI32)
INSTANTIATE(uint32, unsigned, Exact<unsigned>)
INSTANTIATE(int64, long long, WrapI64)
INSTANTIATE(uint64, unsigned long long, Exact<unsigned long long>)
INSTANTIATE(float16, unsigned short, Half)
INSTANTIATE(float32, float, Exact<float>)
INSTANTIATE(float64, double, Exact<double>)
INSTANTIATE(bfloat16, unsigned short, BF16)
