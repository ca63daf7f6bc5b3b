/* qwengpu's stand-in for <device_launch_parameters.h> under NVRTC: threadIdx, __syncthreads, atomics and the rest of the
 * device side are its built-ins; the host side (cudaMalloc, <<<...>>>) is qwengpu.Device's (alloc, write, launch). */
#pragma once
