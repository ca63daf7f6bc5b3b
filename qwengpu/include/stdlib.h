/* qwengpu's stand-in for <stdlib.h> under NVRTC: abs and the other device functions are its
 * built-ins. */
#pragma once
