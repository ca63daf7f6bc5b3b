"""Helpers of the float kernel tests (test_paths, test_math_library): a kernel ``k(float *y, const float *x)`` of
one value a thread run over any number of values, four threads a launch, and the distance of a result from a
reference in float32 units in the last place."""
from __future__ import annotations

import numpy as np


def in_fours(dev, kernel, y: int, x: int, values: np.ndarray) -> np.ndarray:
    """``kernel`` launched on 4 threads for each four of ``values`` (float32; x and y hold 4 words each): y, in
    order."""
    out = []
    for start in range(0, len(values), 4):
        dev.write(x, np.resize(np.asarray(values[start:start + 4], np.float32), 4).view(np.int32))
        dev.launch(kernel, threads=4, args=[y, x])
        out.append(dev.read(y, 4).astype(np.int32).view(np.float32))
    return np.concatenate(out)[:len(values)]


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The distance in float32 units in the last place (of the float64 reference rounded to float32)."""
    def key(v):
        bits = v.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
    return np.abs(key(got) - key(want.astype(np.float32)))
