/* qwengpu's stand-in for <stdio.h> under NVRTC: printf is its built-in (the machine refuses the call:
 * it has no console). */
#pragma once
