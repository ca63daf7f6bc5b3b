/* qwengpu's stand-in for <stdio.h> under NVRTC: printf is its built-in (qwengpu.lowering.console runs it: the
 * launch's lines go to standard output and Device.printed). */
#pragma once
