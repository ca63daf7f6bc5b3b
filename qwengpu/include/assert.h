/* qwengpu's stand-in for <assert.h> under NVRTC: assert is its built-in (a failed assert writes CUDA's line and
 * stops the launch with its device-side assert error, as a GPU's does). */
#pragma once
