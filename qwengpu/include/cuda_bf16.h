/* qwengpu's stand-in for <cuda_bf16.h> under NVRTC: __nv_bfloat16 (and nv_bfloat16), as qwengpu_halves.h says. */
#pragma once
#include <math.h>
#include "qwengpu_halves.h"
QWENGPU_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, "bf16", __float2bfloat16_rn, __bfloat162float)
typedef __nv_bfloat16 nv_bfloat16;
QWENGPU_HALF2_TYPE(__nv_bfloat162, __nv_bfloat16, __floats2bfloat162_rn, __bfloat1622float2, __low2bfloat16,
                   __high2bfloat16, __float2bfloat16_rn, __bfloat162float)
typedef __nv_bfloat162 nv_bfloat162;
static __device__ __forceinline__ __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b)
{ return __nv_bfloat162(a, b); }
static __device__ __forceinline__ __nv_bfloat162 __float22bfloat162_rn(float2 f)
{ return __floats2bfloat162_rn(f.x, f.y); }
static __device__ __forceinline__ __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static __device__ __forceinline__ unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static __device__ __forceinline__ short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static __device__ __forceinline__ __nv_bfloat16 __ushort_as_bfloat16(unsigned short u)
{ __nv_bfloat16_raw r; r.x = u; return __nv_bfloat16(r); }
static __device__ __forceinline__ __nv_bfloat16 __short_as_bfloat16(short s)
{ return __ushort_as_bfloat16((unsigned short)s); }
static __device__ __forceinline__ int __bfloat162int_rz(__nv_bfloat16 h) { return (int)__bfloat162float(h); }
static __device__ __forceinline__ __nv_bfloat16 __int2bfloat16_rn(int i) { return __float2bfloat16_rn((float)i); }
