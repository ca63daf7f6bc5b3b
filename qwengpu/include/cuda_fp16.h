/* qwengpu's stand-in for <cuda_fp16.h> under NVRTC: __half (and half), as qwengpu_halves.h says. */
#pragma once
#include <math.h>
#include "qwengpu_halves.h"
QWENGPU_HALF_TYPE(__half, __half_raw, "f16", __float2half_rn, __half2float)
typedef __half half;
QWENGPU_HALF2_TYPE(__half2, __half, __floats2half2_rn, __half22float2, __low2half, __high2half, __float2half_rn,
                   __half2float)
typedef __half2 half2;
static __device__ __forceinline__ __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static __device__ __forceinline__ __half2 __half2half2(__half a) { return __half2(a, a); }
static __device__ __forceinline__ __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
static __device__ __forceinline__ float __low2float(__half2 h) { return __half2float(h.x); }
static __device__ __forceinline__ float __high2float(__half2 h) { return __half2float(h.y); }
static __device__ __forceinline__ __half __float2half(float f) { return __float2half_rn(f); }
static __device__ __forceinline__ unsigned short __half_as_ushort(__half h) { return h.__x; }
static __device__ __forceinline__ short __half_as_short(__half h) { return (short)h.__x; }
static __device__ __forceinline__ __half __ushort_as_half(unsigned short u) { __half_raw r; r.x = u; return __half(r); }
static __device__ __forceinline__ __half __short_as_half(short s) { return __ushort_as_half((unsigned short)s); }
static __device__ __forceinline__ int __half2int_rz(__half h) { return (int)__half2float(h); }
static __device__ __forceinline__ int __half2int_rn(__half h) { return __float2int_rn(__half2float(h)); }
static __device__ __forceinline__ __half __int2half_rn(int i) { return __float2half_rn((float)i); }
