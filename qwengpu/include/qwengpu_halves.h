/* qwengpu's half types under NVRTC, shared by its stand-ins for <cuda_fp16.h> (__half) and <cuda_bf16.h>
 * (__nv_bfloat16): CUDA's names for the conversions, arithmetic, comparisons and bit casts.
 *
 * A half is 16 bits. Its conversions are PTX's cvt (.f16 / .bf16 <-> .f32, round to nearest even), which the
 * machine builds from integer operations; its arithmetic is float32's, rounded back to a half: the same bits as the
 * GPU's correctly rounded half arithmetic (float32 holds more than twice a half's digits, so rounding twice is
 * rounding once), NaN results the canonical NaN. A double converts to a half only through float here (the machine
 * has no doubles): __half(double) is deleted, write 1.5f. Pairs (__half2, __nv_bfloat162) compute lane by lane.
 * atomicAdd of a half is a compare-and-swap loop on its 16 bits (atomicCAS of an unsigned short), of a pair one on
 * its word: each half added as __hadd does, no flush to zero (the GPU's atom.add.noftz.f16 / .bf16 / .f16x2 /
 * .bf16x2), returning the value before the add. Not here: fused multiply-adds (__hfma: float32's would round
 * twice) and the approximate functions (hsqrt, hexp, ...). */
#pragma once

#define QWENGPU_HALF_TYPE(T, RAW, KIND, TO_HALF, TO_FLOAT)                                                      \
struct RAW { unsigned short x; };                                                                               \
struct T;                                                                                                       \
static __device__ __forceinline__ T TO_HALF(float f);                                                           \
static __device__ __forceinline__ float TO_FLOAT(T h);                                                          \
struct T {                                                                                                      \
    unsigned short __x;                                                                                         \
    T() = default;                                                                                              \
    __device__ T(const RAW &r) : __x(r.x) {}                                                                    \
    __device__ T(float f) : __x(TO_HALF(f).__x) {}                                                              \
    __device__ T(int i) : __x(TO_HALF((float)i).__x) {}                                                         \
    __device__ T(unsigned i) : __x(TO_HALF((float)i).__x) {}                                                    \
    T(double) = delete;                                                                                         \
    __device__ operator float() const { return TO_FLOAT(*this); }                                               \
    __device__ operator RAW() const { RAW r; r.x = __x; return r; }                                             \
};                                                                                                              \
static __device__ __forceinline__ T TO_HALF(float f)                                                            \
{ RAW r; asm("cvt.rn." KIND ".f32 %0, %1;" : "=h"(r.x) : "f"(f)); return T(r); }                                \
static __device__ __forceinline__ float TO_FLOAT(T h)                                                           \
{ float f; asm("cvt.f32." KIND " %0, %1;" : "=f"(f) : "h"(h.__x)); return f; }                                  \
static __device__ __forceinline__ T __hadd(T a, T b) { return TO_HALF(TO_FLOAT(a) + TO_FLOAT(b)); }             \
static __device__ __forceinline__ T __hsub(T a, T b) { return TO_HALF(TO_FLOAT(a) - TO_FLOAT(b)); }             \
static __device__ __forceinline__ T __hmul(T a, T b) { return TO_HALF(TO_FLOAT(a) * TO_FLOAT(b)); }             \
static __device__ __forceinline__ T __hdiv(T a, T b) { return TO_HALF(TO_FLOAT(a) / TO_FLOAT(b)); }             \
static __device__ __forceinline__ T __hneg(T a) { RAW r; r.x = a.__x ^ 0x8000u; return T(r); }                  \
static __device__ __forceinline__ T __habs(T a) { RAW r; r.x = a.__x & 0x7fffu; return T(r); }                  \
static __device__ __forceinline__ T __hmax(T a, T b) { return TO_HALF(fmaxf(TO_FLOAT(a), TO_FLOAT(b))); }       \
static __device__ __forceinline__ T __hmin(T a, T b) { return TO_HALF(fminf(TO_FLOAT(a), TO_FLOAT(b))); }       \
static __device__ __forceinline__ bool __heq(T a, T b) { return TO_FLOAT(a) == TO_FLOAT(b); }                   \
static __device__ __forceinline__ bool __hne(T a, T b)                                                          \
{ float x = TO_FLOAT(a), y = TO_FLOAT(b); return x < y || x > y; }                                              \
static __device__ __forceinline__ bool __hlt(T a, T b) { return TO_FLOAT(a) < TO_FLOAT(b); }                    \
static __device__ __forceinline__ bool __hle(T a, T b) { return TO_FLOAT(a) <= TO_FLOAT(b); }                   \
static __device__ __forceinline__ bool __hgt(T a, T b) { return TO_FLOAT(a) > TO_FLOAT(b); }                    \
static __device__ __forceinline__ bool __hge(T a, T b) { return TO_FLOAT(a) >= TO_FLOAT(b); }                   \
static __device__ __forceinline__ bool __hneu(T a, T b) { return TO_FLOAT(a) != TO_FLOAT(b); }                  \
static __device__ __forceinline__ bool __hisnan(T a)                                                            \
{ return (a.__x & 0x7fffu) > (KIND[0] == 'f' ? 0x7c00u : 0x7f80u); }                                            \
static __device__ __forceinline__ int __hisinf(T a)                                                             \
{ unsigned inf = KIND[0] == 'f' ? 0x7c00u : 0x7f80u; return a.__x == inf ? 1 : a.__x == (inf | 0x8000u) ? -1 : 0; } \
static __device__ __forceinline__ T operator+(T a, T b) { return __hadd(a, b); }                                \
static __device__ __forceinline__ T operator-(T a, T b) { return __hsub(a, b); }                                \
static __device__ __forceinline__ T operator*(T a, T b) { return __hmul(a, b); }                                \
static __device__ __forceinline__ T operator/(T a, T b) { return __hdiv(a, b); }                                \
static __device__ __forceinline__ T operator-(T a) { return __hneg(a); }                                        \
static __device__ __forceinline__ T operator+(T a) { return a; }                                                \
static __device__ __forceinline__ T &operator+=(T &a, T b) { a = __hadd(a, b); return a; }                      \
static __device__ __forceinline__ T &operator-=(T &a, T b) { a = __hsub(a, b); return a; }                      \
static __device__ __forceinline__ T &operator*=(T &a, T b) { a = __hmul(a, b); return a; }                      \
static __device__ __forceinline__ T &operator/=(T &a, T b) { a = __hdiv(a, b); return a; }                      \
static __device__ __forceinline__ bool operator==(T a, T b) { return __heq(a, b); }                             \
static __device__ __forceinline__ bool operator!=(T a, T b) { return __hneu(a, b); }                            \
static __device__ __forceinline__ bool operator<(T a, T b) { return __hlt(a, b); }                              \
static __device__ __forceinline__ bool operator<=(T a, T b) { return __hle(a, b); }                             \
static __device__ __forceinline__ bool operator>(T a, T b) { return __hgt(a, b); }                              \
static __device__ __forceinline__ bool operator>=(T a, T b) { return __hge(a, b); }                             \
static __device__ __forceinline__ T atomicAdd(T *address, T val)                                                \
{                                                                                                               \
    unsigned short *bits = (unsigned short *)address, old = *bits, assumed;                                     \
    T seen;                                                                                                     \
    do {                                                                                                        \
        assumed = old;                                                                                          \
        seen.__x = assumed;                                                                                     \
        old = atomicCAS(bits, assumed, __hadd(seen, val).__x);                                                  \
    } while (assumed != old);                                                                                   \
    seen.__x = old;                                                                                             \
    return seen;                                                                                                \
}

/* The pair of halves in a word (__half2, __nv_bfloat162): x in the low 16 bits, y in the high, each lane's
 * arithmetic the single half's. */
#define QWENGPU_HALF2_TYPE(T2, T, FROM_FLOATS, TO_FLOAT2, LOW, HIGH, TO_HALF, TO_FLOAT)                         \
struct __align__(4) T2 {                                                                                        \
    T x, y;                                                                                                     \
    T2() = default;                                                                                             \
    __device__ T2(T a, T b) : x(a), y(b) {}                                                                     \
};                                                                                                              \
static __device__ __forceinline__ T2 FROM_FLOATS(float a, float b) { return T2(TO_HALF(a), TO_HALF(b)); }       \
static __device__ __forceinline__ float2 TO_FLOAT2(T2 h) { return make_float2(TO_FLOAT(h.x), TO_FLOAT(h.y)); }  \
static __device__ __forceinline__ T LOW(T2 h) { return h.x; }                                                   \
static __device__ __forceinline__ T HIGH(T2 h) { return h.y; }                                                  \
static __device__ __forceinline__ T2 __hadd2(T2 a, T2 b) { return T2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }     \
static __device__ __forceinline__ T2 __hsub2(T2 a, T2 b) { return T2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }     \
static __device__ __forceinline__ T2 __hmul2(T2 a, T2 b) { return T2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }     \
static __device__ __forceinline__ T2 __h2div(T2 a, T2 b) { return T2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }     \
static __device__ __forceinline__ T2 __hneg2(T2 a) { return T2(__hneg(a.x), __hneg(a.y)); }                     \
static __device__ __forceinline__ T2 __habs2(T2 a) { return T2(__habs(a.x), __habs(a.y)); }                     \
static __device__ __forceinline__ T2 __hmax2(T2 a, T2 b) { return T2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }     \
static __device__ __forceinline__ T2 __hmin2(T2 a, T2 b) { return T2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }     \
static __device__ __forceinline__ T2 operator+(T2 a, T2 b) { return __hadd2(a, b); }                            \
static __device__ __forceinline__ T2 operator-(T2 a, T2 b) { return __hsub2(a, b); }                            \
static __device__ __forceinline__ T2 operator*(T2 a, T2 b) { return __hmul2(a, b); }                            \
static __device__ __forceinline__ T2 operator/(T2 a, T2 b) { return __h2div(a, b); }                            \
static __device__ __forceinline__ T2 operator-(T2 a) { return __hneg2(a); }                                     \
static __device__ __forceinline__ T2 &operator+=(T2 &a, T2 b) { a = __hadd2(a, b); return a; }                  \
static __device__ __forceinline__ T2 &operator*=(T2 &a, T2 b) { a = __hmul2(a, b); return a; }                  \
static __device__ __forceinline__ T2 atomicAdd(T2 *address, T2 val)                                             \
{                                                                                                               \
    unsigned *word = (unsigned *)address, old = *word, assumed;                                                 \
    T2 seen;                                                                                                    \
    do {                                                                                                        \
        assumed = old;                                                                                          \
        seen.x.__x = (unsigned short)assumed;                                                                   \
        seen.y.__x = (unsigned short)(assumed >> 16);                                                           \
        T2 sum = __hadd2(seen, val);                                                                            \
        old = atomicCAS(word, assumed, (unsigned)sum.x.__x | (unsigned)sum.y.__x << 16);                        \
    } while (assumed != old);                                                                                   \
    seen.x.__x = (unsigned short)old;                                                                           \
    seen.y.__x = (unsigned short)(old >> 16);                                                                   \
    return seen;                                                                                                \
}
