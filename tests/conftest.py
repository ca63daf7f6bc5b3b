"""Fixtures shared by the test modules."""
from __future__ import annotations

import pytest


@pytest.fixture
def cuda_gpu():
    """CuPy with a CUDA device to run on; the test skips, saying which is missing, without one (CI has no GPU: the
    device tests run where one is lent, through bench/gpu_check.sh)."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed (pip install cupy-cuda12x): no GPU test here")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as e:      # noqa: BLE001
        pytest.skip(f"no CUDA device: {e}")
    return cupy
