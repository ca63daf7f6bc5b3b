/* qwengpu's stand-in for <assert.h> under NVRTC: assert is its built-in (the machine refuses the
 * call to __assertfail). */
#pragma once
