"""CUDA's math functions built of correctly rounded operations run: each is the GPU's own sequence of IEEE adds,
multiplies, fmas, divisions and conversions, which the machine computes bit for bit. Checked here against the
correctly rounded value (numpy's float64, rounded once) within the maximum ulp error CUDA documents for it (CUDA C
Programming Guide, the mathematical functions' appendix), with the special values as C says; and where a GPU is lent,
bit for bit against the GPU's own result (bench/gpu_check.sh). Those built on the GPU's approximate units (expf:
ex2.approx) are refused naming the approximation. The double functions built of fmas (qwengpu.lowering.doubles)
run too: checked against Python's decimal at 400 digits (exp and its kin) and mpmath (sin, cos, sinpi, cospi,
expm1, whose paths branch)."""
from __future__ import annotations

import math
from decimal import Decimal, localcontext

import mpmath
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
    "cosf": ("cosf(x[i])", np.cos, 2, [0.0, 0.5, -1.25, 3.0, 1e-20, 1000.0, -1e30, 1.5707964]),    # (1e30: in 64 bits)
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
    values = np.array([0.5, -1.25, -3e30, 3e4], np.float32)       # (-3e30: the reduction in 64-bit integers)
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


def test_fmodf_is_refused_naming_the_double_fmod_that_gives_its_bits():
    """fmodf starts from rcp.approx, so it is refused; the refusal names (float)fmod((double)x, (double)y), which
    runs and, fmod being exact, gives fmodf's bits: against numpy's float32 fmod (exact too), signs and zeros
    included."""
    dev = Device()
    with pytest.raises(MachineError, match=r"rcp\.approx is the GPU's own.*fmodf and remainderf are exact, so "
                                           r"\(float\)fmod\(\(double\)x, \(double\)y\)"):
        dev.launch(dev.load_kernel(source("fmodf(x[i], 0.75f)"), "k"), threads=4, args=[dev.alloc(4), dev.alloc(4)])
    values = np.array([1.3, -2.9, 0.75, -0.0, 1e30, -1e-40, 0.7499999, 7.0], dtype=np.float32)
    got = on_the_machine("(float)fmod((double)x[i], 0.75)", values)
    np.testing.assert_array_equal(got.view(np.uint32), np.fmod(values, np.float32(0.75)).view(np.uint32))


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


# double functions built of fmas, adds and multiplies (exp's range reduction, its polynomial, the scaling): name:
# (CUDA's call, the value from Python's decimal at 400 digits, CUDA's documented maximum ulp error, arguments)
LN2, LN10 = Decimal(2).ln, Decimal(10).ln
DOUBLES = {
    "exp": ("exp(x[i])", lambda d: d.exp(), 1, [0.5, -3.25, 709.7, -744.0, 1e-300, 20.7, -0.0, 1e-16]),
    "exp2": ("exp2(x[i])", lambda d: (d * LN2()).exp(), 1, [0.5, -3.25, 1023.5, -1074.0, 1e-17, 52.3, 7.0, -1.1]),
    "exp10": ("exp10(x[i])", lambda d: (d * LN10()).exp(), 1, [0.5, -3.25, 308.2, -323.5, 1e-17, 15.3, 2.0, -0.7]),
}
# CI runs exp; make verify the others too (each lowers in 13 to 19 s on 2 cores)
DOUBLE_NAMES = ["exp"] + [pytest.param(name, marks=pytest.mark.slow) for name in DOUBLES if name != "exp"]
SPECIAL = [np.inf, -np.inf, np.nan, 710.0, -746.0, 0.0]


def double_source(call: str) -> str:
    return (f'extern "C" __global__ void k(double *y, const double *x)\n{{\n    int i = threadIdx.x;\n'
            f'    y[i] = {call};\n}}\n')


def doubles_on_the_machine(call: str, values: np.ndarray) -> np.ndarray:
    """Two threads a launch (each keeps about 50 words of overlay state); the kernel is lowered once."""
    dev = Device()
    kernel = dev.load_kernel(double_source(call), "k")
    y, x = dev.alloc(4), dev.alloc(4)
    got = []
    for first in range(0, len(values), 2):
        dev.write(x, values[first:first + 2])
        dev.launch(kernel, threads=2, args=[y, x])
        got.append(dev.read(y, 4).view(np.float64))
    return np.concatenate(got)


@pytest.mark.parametrize("name", DOUBLE_NAMES)
def test_a_double_function_is_within_cudas_documented_error(name):
    """exp, exp2 and exp10 of doubles: CUDA's own sequence (fma.rn.f64 among adds and multiplies), within the 1 ulp
    CUDA documents of the value Python's decimal computes; overflow to infinity, underflow to 0, NaN and the
    infinities as C's exp (numpy's, exact there)."""
    call, reference, bound, values = DOUBLES[name]
    got = doubles_on_the_machine(call, np.array(values + SPECIAL))
    with localcontext() as context:
        context.prec = 400
        for value, result in zip(values, got[:len(values)]):
            exact = reference(Decimal(value))
            error = abs(Decimal(float(result)) - exact) / Decimal(math.ulp(float(exact)))
            assert error <= bound, (name, value, float(result), float(exact), float(error))
    with np.errstate(over="ignore"):
        want = {"exp": np.exp, "exp2": np.exp2, "exp10": lambda v: np.power(10.0, v)}[name](np.array(SPECIAL))
    np.testing.assert_array_equal(got[len(values):], want)       # (NaN where numpy's is NaN)


# double functions whose paths branch (if-converted by the lowering: predicated writes over tens of thousands of
# machine ops), name: (CUDA's call, mpmath's value, CUDA's documented maximum ulp error, arguments, special
# arguments and what C gives for them). sin and cos reduce a huge argument exactly (Payne and Hanek: a loop of
# 64-bit carry chains over a table of 2/pi's bits), so 1e22 and 1e300 take the path a GPU takes for them.
BRANCHING = {
    "sin": ("sin(x[i])", mpmath.sin, 2, [0.5, -3.0, 1e22, 1e300, -2.5e-5],
            {-0.0: -0.0, np.inf: np.nan, np.nan: np.nan, 1e-310: 1e-310}),
    "cos": ("cos(x[i])", mpmath.cos, 2, [0.5, -3.0, 1e6, 1e300, -2.5e-5, 6.283185307179586],
            {-0.0: 1.0, -np.inf: np.nan, np.nan: np.nan}),
    "sinpi": ("sinpi(x[i])", mpmath.sinpi, 2, [0.25, 1e6 + 0.3, 1e-300, -2.5e-5, 3.75],
              {-0.0: -0.0, np.inf: np.nan, 0.5: 1.0}),
    "cospi": ("cospi(x[i])", mpmath.cospi, 2, [0.25, 0.1, 2.6, -7.125, 1e-300],
              {-0.0: 1.0, np.inf: np.nan, 0.5: 0.0}),
    "expm1": ("expm1(x[i])", mpmath.expm1, 1, [0.5, -3.0, 1e-10, 700.0, 0.693, 1e-5],
              {-0.0: -0.0, np.inf: np.inf, -np.inf: -1.0, 710.0: np.inf}),
}
# CI runs sin (it lowers in about 25 s on 2 cores); make verify the others too
BRANCHING_NAMES = ["sin"] + [pytest.param(name, marks=pytest.mark.slow) for name in BRANCHING if name != "sin"]


def one_thread_a_launch(call: str, values) -> np.ndarray:
    """One thread a launch: sin's tables of constants and its overlay state (about 46 words a thread) leave no room
    for a second thread's state in the machine's 127 words."""
    dev = Device()
    kernel = dev.load_kernel(double_source(call), "k")
    y, x = dev.alloc(2), dev.alloc(2)
    got = []
    for value in values:
        dev.write(x, np.array([value], np.float64))
        dev.launch(kernel, threads=1, args=[y, x])
        got.append(dev.read(y, 2).view(np.float64)[0])
    return np.array(got)


@pytest.mark.parametrize("name", BRANCHING_NAMES)
def test_a_branching_double_function_is_within_cudas_documented_error(name):
    """sin, cos, sinpi, cospi and expm1 of doubles: CUDA's own code, whose branches the lowering if-converts, within
    the ulps CUDA documents of mpmath's value at 1,400 bits (enough to reduce 1e300 by pi exactly); zeros with their
    signs, infinities, NaN and overflow as C says."""
    call, reference, bound, values, special = BRANCHING[name]
    got = one_thread_a_launch(call, values + list(special))
    with mpmath.workprec(1400):
        for value, result in zip(values, got):
            exact = reference(mpmath.mpf(value))
            error = abs(mpmath.mpf(float(result)) - exact) / mpmath.mpf(math.ulp(float(exact)))
            assert error <= bound, (name, value, float(result), float(exact), float(error))
    want = np.array(list(special.values()))
    np.testing.assert_array_equal(got[len(values):], want)       # (NaN where C's is NaN)
    assert np.signbit(got[len(values):]).tolist() == np.signbit(want).tolist()     # -0.0 is not +0.0


@pytest.mark.parametrize("name", ["sin", "expm1"])     # (where a GPU is lent: gpu_check.sh's double_library step)
def test_on_a_gpu_a_branching_double_function_equals_cudas_bit_for_bit(name, cuda_gpu):
    cupy = cuda_gpu
    call = BRANCHING[name][0]
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.uniform(-20, 20, 3), [1e22, 1e300, -2.5e-5]])
    y = cupy.zeros(len(values), cupy.float64)
    module = cupy.RawModule(code=double_source(call), options=("--std=c++17", "--fmad=false"))
    module.get_function("k")((1,), (len(values),), (y, cupy.asarray(values)))
    assert one_thread_a_launch(call, values).view(np.uint64).tolist() == cupy.asnumpy(y).view(np.uint64).tolist()


@pytest.mark.parametrize("name", DOUBLES)      # (where a GPU is lent: all three)
def test_on_a_gpu_a_double_function_equals_cudas_bit_for_bit(name, cuda_gpu):
    cupy = cuda_gpu
    call = DOUBLES[name][0]
    rng = np.random.default_rng(6)
    values = np.concatenate([rng.uniform(-20, 20, 6), rng.uniform(-700, 700, 2)])
    y = cupy.zeros(len(values), cupy.float64)
    module = cupy.RawModule(code=double_source(call), options=("--std=c++17", "--fmad=false"))
    module.get_function("k")((1,), (len(values),), (y, cupy.asarray(values)))
    assert doubles_on_the_machine(call, values).view(np.uint64).tolist() == cupy.asnumpy(y).view(np.uint64).tolist()
