"""CUDA's math functions built of correctly rounded operations run: each is the GPU's own sequence of IEEE adds,
multiplies, fmas, divisions and conversions, which the machine computes bit for bit. Checked here against the
correctly rounded value (numpy's float64, rounded once) within the maximum ulp error CUDA documents for it (CUDA C
Programming Guide, the mathematical functions' appendix), with the special values as C says; and where a GPU is lent,
bit for bit against the GPU's own result (bench/gpu_check.sh). Those built on the GPU's approximate units (expf:
ex2.approx) are refused naming the approximation."""
from __future__ import annotations

import numpy as np
import pytest

from float_runs import in_fours, ulps
from qwengpu import Device, MachineError, toolchain

pytestmark = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

# name: (CUDA's call, numpy's float64 reference, CUDA's documented maximum ulp error, arguments)
FUNCTIONS = {
    "logf": ("logf(x[i])", np.log, 1, [0.5, 1.0, 3.0, 1e-38, 1e-45, 7e37, 0.999, 1.001]),
    "log2f": ("log2f(x[i])", np.log2, 1, [0.5, 8.0, 3.0, 1e-40, 1e30, 0.7, 1.25, 1000.0]),
    "cosf": ("cosf(x[i])", np.cos, 2, [0.0, 0.5, -1.25, 3.0, 1e-20, 1000.0, -7777.0, 1.5707964]),
    "atan2f": ("atan2f(x[i], 1.5f)", lambda v: np.arctan2(v, 1.5), 3, [0.0, -0.0, 1.5, -3.0, 1e-30, 1e30, 0.25, -7.5]),
}


def source(call: str) -> str:
    return f'extern "C" __global__ void k(float *y, const float *x)\n{{\n    int i = threadIdx.x;\n    y[i] = {call};\n}}\n'


def on_the_machine(call: str, values: np.ndarray) -> np.ndarray:
    dev = Device()
    return in_fours(dev, dev.load_kernel(source(call), "k"), dev.alloc(4), dev.alloc(4), values)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_math_function_is_within_cudas_documented_error(name):
    call, reference, bound, values = FUNCTIONS[name]
    values = np.array(values + [np.inf, np.nan, -np.inf, -1.0], np.float32)
    got = on_the_machine(call, values)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = reference(values.astype(np.float64))
    finite = np.isfinite(want)
    assert ulps(got[finite], want[finite]).max() <= bound, (values, got, want)
    # NaN where C's function is NaN (log of a negative number, cos of an infinity), infinities where it is one
    assert (np.isnan(got) == np.isnan(want)).all() and (got[np.isinf(want)] == want[np.isinf(want)]).all()


def test_sincosf_writes_both_within_cudas_documented_error():
    source = ('extern "C" __global__ void k(float *s, float *c, const float *x)\n'
              '{\n    sincosf(x[threadIdx.x], &s[threadIdx.x], &c[threadIdx.x]);\n}\n')
    values = np.array([0.5, -1.25, 1000.0, 3e4], np.float32)
    dev = Device()
    s, c, x = dev.alloc(4), dev.alloc(4), dev.alloc(4)
    dev.write(x, values.view(np.int32))
    dev.launch(dev.load_kernel(source, "k"), threads=4, args=[s, c, x])
    for got, reference in ((s, np.sin), (c, np.cos)):
        got = dev.read(got, 4).astype(np.int32).view(np.float32)
        assert ulps(got, reference(values.astype(np.float64))).max() <= 2, got


def test_a_function_of_the_approximate_units_is_refused_naming_it():
    dev = Device()
    with pytest.raises(MachineError, match=r"ex2\.approx is the GPU's own hardware approximation.* expf.*\n  from "
                                           r"kernel\.cu line 4: y\[i\] = expf\(x\[i\]\);"):
        dev.launch(dev.load_kernel(source("expf(x[i])"), "k"), threads=4, args=[dev.alloc(4), dev.alloc(4)])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_on_a_gpu_a_math_function_equals_cudas_bit_for_bit(name, cuda_gpu):
    cupy = cuda_gpu
    call = FUNCTIONS[name][0]
    rng = np.random.default_rng(5)
    values = np.concatenate([rng.uniform(-10, 10, 12), rng.uniform(0, 1e4, 4)]).astype(np.float32)
    y = cupy.zeros(len(values), cupy.float32)
    module = cupy.RawModule(code=source(call), options=("--std=c++17",))
    module.get_function("k")((1,), (len(values),), (y, cupy.asarray(values)))
    assert on_the_machine(call, values).view(np.int32).tolist() == cupy.asnumpy(y).view(np.int32).tolist()
