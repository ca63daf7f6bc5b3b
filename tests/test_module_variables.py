"""__device__ and __constant__ variables: module data placed in device memory when a kernel that names it loads,
written with the compiler's initial bytes, shared by the module's kernels and read and written by the host through
``Kernel.get_global`` (cudaMemcpyToSymbol's place). References: numpy float32 and Python integers."""
import numpy as np
import pytest

from qwengpu import toolchain
from qwengpu.device import Device, Kernel
from qwengpu.isa import MachineError
from qwengpu.lowering import lower
from qwengpu.ptx import PTXError, parse

needs_nvrtc = pytest.mark.skipif(not toolchain.nvrtc_available(), reason="NVRTC (nvidia-cuda-nvrtc) is not loadable")

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"

SOURCE = r"""
__constant__ float mask[3] = {0.25f, 0.5f, 0.25f};
__constant__ int coef[4];
__device__ unsigned positives;
__device__ int table[5] = {1, 2, 3, 4, 5};
__device__ int total = 7;

extern "C" __global__ void blur(float *y, const float *x, int n) {     // the textbook __constant__ stencil
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n - 1) y[i] = mask[0] * x[i - 1] + mask[1] * x[i] + mask[2] * x[i + 1];
}
extern "C" __global__ void lookup(int *y, const int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] > 0) atomicAdd(&positives, 1u);
    if (i < n) y[i] = table[x[i] & 3] * coef[i & 3] + total;
}
extern "C" __global__ void bump(int k) {
    if (threadIdx.x == 0) total += k;
    table[threadIdx.x] += 1;
}
"""


@needs_nvrtc
def test_a_constant_mask_initialised_by_the_compiler():
    """__constant__ float mask[3] = {...}: the blur over a grid with its edges untouched, bit for bit as numpy
    float32 computes it in the kernel's order."""
    dev = Device()
    blur = dev.load_kernel(SOURCE, "blur")
    xs = np.float32([1.5, -2, 4, 8.125, 16, 3, 5e-3, 7])
    x, y = dev.alloc(8), dev.alloc(8)
    dev.write(x, xs.view(np.int32))
    dev.write(y, np.full(8, 99, np.int32))
    dev.launch(blur, threads=4, blocks=2, args=[y, x, 8])
    m = np.float32([0.25, 0.5, 0.25])
    want = np.full(8, 99, np.int32).view(np.float32)        # the edges keep their words
    for i in range(1, 7):
        want[i] = (m[0] * xs[i - 1] + m[1] * xs[i]) + m[2] * xs[i + 1]
    np.testing.assert_array_equal(dev.read(y, 8), want.view(np.int32))
    np.testing.assert_array_equal(dev.read(blur.get_global("mask"), 3), m.view(np.int32))


@needs_nvrtc
def test_kernels_of_one_module_share_their_variables_across_launches():
    """lookup and bump name the same table and total: one place each, written once with its initial bytes (a
    second load_kernel does not write them again); an atomicAdd counter starts at 0 and counts over two launches;
    the host writes a __constant__ array (cudaMemcpyToSymbol) before the launch."""
    dev = Device()
    lookup = dev.load_kernel(SOURCE, "lookup")
    bump = dev.load_kernel(SOURCE, "bump")
    assert sorted(lookup.variables) == ["coef", "positives", "table", "total"]
    assert sorted(bump.variables) == ["table", "total"]
    assert all(bump.get_global(name) == lookup.get_global(name) for name in bump.variables)
    coef = [3, -1, 4, 1]
    dev.write(lookup.get_global("coef"), coef)
    table, total, positives = [1, 2, 3, 4, 5], 7, 0
    xs = np.array([5, -1, 2, 7, 0, 3, -4, 9], np.int32)
    x, y = dev.alloc(8), dev.alloc(8)
    dev.write(x, xs)
    for k in (10, -3):
        dev.launch(lookup, threads=4, blocks=2, args=[y, x, 8])
        np.testing.assert_array_equal(dev.read(y, 8), [table[v & 3] * coef[i & 3] + total for i, v in enumerate(xs)])
        positives += int((xs > 0).sum())
        assert dev.read(lookup.get_global("positives"), 1)[0] == positives
        dev.launch(bump, threads=5, args=[k])
        table, total = [v + 1 for v in table], total + k
        again = dev.load_kernel(SOURCE, "bump")         # the module's words are not written again at a reload
        assert again.variables == bump.variables
        np.testing.assert_array_equal(dev.read(bump.get_global("table"), 5), table)
        assert dev.read(bump.get_global("total"), 1)[0] == total


@needs_nvrtc
def test_variables_take_allocations_and_a_module_that_does_not_fit_is_refused_untouched():
    """A variable's words are an allocation (alloc does not give them out); when the module's variables do not fit,
    load_kernel names them and leaves the allocations as they were."""
    dev = Device()
    lookup = dev.load_kernel(SOURCE, "lookup")
    placed = {lookup.get_global(name) for name in lookup.variables}
    free = dev.alloc(4)
    assert all(not free <= a < free + 4 for a in placed)
    crowded = Device()
    crowded.alloc(120)
    before = dict(crowded._allocations)
    with pytest.raises(MachineError, match=r"kernel lookup: its __device__ / __constant__ variables \(.*table 5"):
        crowded.load_kernel(SOURCE, "lookup")
    assert crowded._allocations == before
    with pytest.raises(MachineError, match="names no __device__ or __constant__ variable 'mask'.*coef, positives"):
        lookup.get_global("mask")


def test_initializers_are_read_as_the_type_s_little_endian_bytes():
    """Byte lists with trailing zeros left out, scalars, negative integers, float bit patterns, unsized arrays;
    an address or too many values are refused naming the variable."""
    text = HEADER + (".const .align 4 .b8 m[12] = {0, 0, 128, 62, 0, 0, 0, 63};\n"
                     ".global .align 4 .u32 total = 7;\n"
                     ".global .align 4 .s32 neg[3] = {-5, 2};\n"
                     ".global .align 4 .f32 half = 0f3F000000;\n"
                     ".global .align 2 .u16 h[] = {1, 65535};\n"
                     ".global .align 4 .u32 zero;\n")
    got = parse(text).variables
    assert got["m"].initial == np.float32([0.25, 0.5, 0]).tobytes() and got["m"].space == "const"
    assert got["total"].initial == np.uint32([7]).tobytes() and got["total"].space == "global"
    assert got["neg"].initial == np.int32([-5, 2, 0]).tobytes()
    assert got["half"].initial == np.float32([0.5]).tobytes()
    assert got["h"].initial == np.uint16([1, 65535]).tobytes() and got["h"].words == 1
    assert got["zero"].initial == bytes(4)
    for bad, why in ((".global .align 8 .u64 p = generic(zero);", "generic.zero. of p is not a number"),
                     (".global .align 4 .u32 a[2] = {1, 2, 3};", "a has 3 initial values for 2 elements"),
                     (".global .align 1 .u8 b = 256;", "256 of b does not fit .u8"),
                     (".global .align 4 .f32 f = 1.5;", "1.5 of f is not a .f32 bit pattern")):
        with pytest.raises(PTXError, match=why):
            parse(HEADER + ".global .align 4 .u32 zero;\n" + bad + "\n")


def test_lowering_a_kernel_whose_variables_have_no_place_is_refused():
    """lower() without the words the device gave the variables names them (Device.load_kernel places them)."""
    text = HEADER + (".global .align 4 .u32 total = 7;\n"
                     ".visible .entry k(.param .u64 k_param_0)\n{\n.reg .b32 %r<3>;\n.reg .b64 %rd<3>;\n"
                     "ld.param.u64 %rd1, [k_param_0];\ncvta.to.global.u64 %rd2, %rd1;\n"
                     "ld.global.u32 %r1, [total];\nst.global.u32 [%rd2], %r1;\nret;\n}\n")
    kernel = parse(text).kernels["k"]
    with pytest.raises(MachineError, match="uses the module variables total, which have no words"):
        lower(kernel, [0], threads=4)
    dev = Device()
    dev.alloc(10)
    dev.write(9, [41])
    y = dev.alloc(1)
    dev.launch(Kernel("k", kernel, text, variables={"total": 9}), threads=1, args=[y])      # placed by hand
    assert dev.read(y, 1)[0] == 41


@needs_nvrtc
def test_the_circuit_reads_and_writes_variables_as_the_interpreter_does():
    """bump on the compiled circuit: the same words as on the interpreter."""
    words = {}
    for backend in ("interpreter", "circuit"):
        dev = Device(backend=backend)
        bump = dev.load_kernel(SOURCE, "bump")
        dev.launch(bump, threads=4, args=[5])
        words[backend] = (list(dev.read(bump.get_global("table"), 5)), int(dev.read(bump.get_global("total"), 1)[0]))
    assert words["circuit"] == words["interpreter"] == ([2, 3, 4, 5, 5], 12)
