/* qwengpu's stand-in for <float.h> under NVRTC: IEEE binary32 and binary64, as on the host. */
#pragma once
#define FLT_RADIX 2
#define FLT_MANT_DIG 24
#define FLT_DIG 6
#define FLT_MIN_EXP (-125)
#define FLT_MAX_EXP 128
#define FLT_MAX 3.40282347e+38F
#define FLT_MIN 1.17549435e-38F
#define FLT_TRUE_MIN 1.40129846e-45F
#define FLT_EPSILON 1.19209290e-07F
#define DBL_MANT_DIG 53
#define DBL_DIG 15
#define DBL_MAX 1.7976931348623157e+308
#define DBL_MIN 2.2250738585072014e-308
#define DBL_EPSILON 2.2204460492503131e-16
