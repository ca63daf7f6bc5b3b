/* qwengpu's stand-in for <cuda_runtime.h> under NVRTC: threadIdx, __syncthreads, atomics and the rest of the
 * device side are its built-ins; the host side (cudaMalloc, <<<...>>>) is qwengpu.Device's (alloc, write, launch).
 * nvcc includes <cuda_runtime.h> before every .cu file, and with it the C library headers below, so a kernel file
 * nvcc compiles may use INFINITY, M_PI or INT_MAX without an #include; qwengpu.toolchain pre-includes this file for
 * the same reason. (As under nvcc, FLT_MAX needs <float.h> and uint32_t <stdint.h>.) */
#pragma once
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <assert.h>
