"""qwengpu/kernels/farith.cu, float arithmetic as people first write it, against numpy's IEEE float32 (round to
nearest even, subnormals, infinities; a NaN result is the canonical 0x7fffffff, as an NVIDIA GPU writes it): the
element-wise add over a two-block grid with a ragged tail, subtract and multiply, saxpy in a grid-stride loop
(the multiply and the add rounded apart: the toolchain compiles without fused multiply-adds), a row sum in a loop
whose body is longer than the ROM; and the circuit writing the interpreter's tokens for a float add."""
import numpy as np
import pytest

from qwengpu.device import Device

FARITH = "qwengpu/kernels/farith.cu"
U32 = np.uint32
CANONICAL_NAN = 0x7FFFFFFF
# zeros, the smallest and largest subnormals, the smallest normal, one, the largest float, infinity, a NaN
EDGE = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x3F800000, 0x7F7FFFFF, 0xFF800000,
                 0x7FC00001, 0xBF800000, 0x7F800000, 0x00400000, 0xFF7FFFFF], dtype=U32)


def expected(values: np.ndarray) -> np.ndarray:
    """numpy's float32 result as the machine writes it: a NaN is the canonical one."""
    bits = values.astype(np.float32).view(U32).copy()
    bits[np.isnan(values)] = CANONICAL_NAN
    return bits


def floats(rng, n: int) -> np.ndarray:
    """Floats of every scale, signs and a few edge values."""
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-140, 120, n)).astype(np.float32)
    x[: min(n, len(EDGE))] = EDGE[: min(n, len(EDGE))].view(np.float32)
    return x


def test_vadd_over_a_grid_with_a_ragged_tail():
    rng = np.random.default_rng(1)
    a, b = floats(rng, 13), floats(rng, 13)[::-1].copy()
    dev = Device()
    c, pa, pb = dev.alloc(16), dev.alloc(13), dev.alloc(13)
    dev.write(c, np.full(16, 7, dtype=np.int64))
    dev.write(pa, a)
    dev.write(pb, b)
    with np.errstate(all="ignore"):
        want = expected(a + b)
    dev.launch(dev.load_kernel(FARITH, "vadd"), threads=8, blocks=2, args=[c, pa, pb, 13])
    got = dev.read(c, 16).view(U32)
    np.testing.assert_array_equal(got[:13], want)
    assert list(got[13:]) == [7, 7, 7]              # past n: untouched


@pytest.mark.parametrize("mode, op", [(0, np.subtract), (1, np.multiply)])
def test_subtract_and_multiply(mode, op):
    rng = np.random.default_rng(2 + mode)
    a, b = floats(rng, 8), floats(rng, 8)
    b[:4] = a[:4]                                    # x - x = +0, x * x
    dev = Device()
    c, pa, pb = dev.alloc(8), dev.alloc(8), dev.alloc(8)
    dev.write(pa, a)
    dev.write(pb, b)
    dev.launch(dev.load_kernel(FARITH, "vsub_vmul"), threads=8, args=[c, pa, pb, mode])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(dev.read(c, 8).view(U32), expected(op(a, b)))


def test_saxpy_rounds_the_multiply_and_the_add_apart():
    """y = a * x + y in a grid-stride loop (2 blocks of 4 threads over 11 elements: lanes leave at different trips).
    The numbers are chosen so a fused multiply-add would round differently: a * x + y with y = -(a * x) rounded is
    the rounding error of the product under fma and exactly 0 here."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(11)).astype(np.float32)
    a = np.float32(1.1)
    y = floats(rng, 11)
    y[:4] = -(a * x[:4])
    dev = Device()
    py, px = dev.alloc(11), dev.alloc(11)
    dev.write(py, y)
    dev.write(px, x)
    dev.launch(dev.load_kernel(FARITH, "saxpy"), threads=4, blocks=2, args=[py, px, float(a), 11])
    with np.errstate(all="ignore"):
        want = expected(a * x + y)
    np.testing.assert_array_equal(dev.read(py, 11).view(U32), want)
    assert not dev.read(py, 4).any()                 # the fma's nonzero rounding errors would show here


def test_row_sum_adds_in_order_around_the_overlays():
    rng = np.random.default_rng(5)
    cols = 3
    x = (rng.standard_normal(4 * cols) * 1e3).astype(np.float32)
    x[0], x[1] = np.float32(1e8), np.float32(-1e8)   # order matters: (1e8 + -1e8) + x2
    dev = Device()
    out, px = dev.alloc(4), dev.alloc(4 * cols)
    dev.write(px, x)
    dev.launch(dev.load_kernel(FARITH, "row_sum"), threads=4, args=[out, px, cols])
    want = np.zeros(4, dtype=np.float32)
    for j in range(cols):
        want = want + x.reshape(4, cols)[:, j]
    np.testing.assert_array_equal(dev.read(out, 4).view(U32), want.view(U32))


def test_the_circuit_writes_the_interpreters_tokens_for_a_float_add():
    a = EDGE[[0, 2, 5, 8]].view(np.float32)
    b = EDGE[[1, 3, 9, 5]].view(np.float32)

    def run(backend):
        dev = Device(backend=backend)
        c, pa, pb = dev.alloc(4), dev.alloc(4), dev.alloc(4)
        dev.write(pa, a)
        dev.write(pb, b)
        dev.launch(dev.load_kernel(FARITH, "vadd"), threads=4, args=[c, pa, pb, 4])
        return dev.read(c, 4).view(U32), [(t.id, t.origin) for t in dev.tokens]
    (values, circuit), (ref_values, interpreter) = run("circuit"), run("interpreter")
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(values, expected(a + b))
    np.testing.assert_array_equal(values, ref_values)
    assert circuit == interpreter


def sequential_sum(values) -> np.float32:
    """float32 adds one after another, from 0.0f."""
    total = np.float32(0.0)
    for v in values:
        total = np.float32(total + np.float32(v))
    return total


def test_the_textbook_matmul_over_a_2d_grid():
    rng = np.random.default_rng(6)
    n = 3
    a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    dev = Device()
    pa, pb, pc = dev.alloc(n * n), dev.alloc(n * n), dev.alloc(n * n)
    dev.write(pa, a.ravel())
    dev.write(pb, b.ravel())
    dev.launch(dev.load_kernel(FARITH, "matmul"), threads=(2, 2), blocks=(2, 2), args=[pa, pb, pc, n])
    want = np.array([[sequential_sum(a[r, k] * b[k, c] for k in range(n)) for c in range(n)] for r in range(n)])
    np.testing.assert_array_equal(dev.read(pc, n * n).view(np.float32).reshape(n, n), want)


def test_the_textbook_block_reduction_in_shared_memory():
    """Two blocks of 8 threads (two warps each): the tree's adds in its order, __syncthreads between steps."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(16) * 10.0 ** rng.integers(-3, 4, 16)).astype(np.float32)
    dev = Device()
    pi, po = dev.alloc(16), dev.alloc(2)
    dev.write(pi, x)
    dev.launch(dev.load_kernel(FARITH, "block_sum"), threads=8, blocks=2, args=[pi, po])
    want = []
    for block in range(2):
        s = list(x[8 * block:8 * block + 8])
        stride = 4
        while stride:
            s[:stride] = [np.float32(s[t] + s[t + stride]) for t in range(stride)]
            stride //= 2
        want.append(s[0])
    np.testing.assert_array_equal(dev.read(po, 2).view(np.float32), np.array(want, dtype=np.float32))


def test_a_stencil_with_literal_weights():
    rng = np.random.default_rng(8)
    x = rng.standard_normal(8).astype(np.float32)
    dev = Device()
    pi, po = dev.alloc(8), dev.alloc(8)
    dev.write(pi, x)
    dev.launch(dev.load_kernel(FARITH, "stencil"), threads=4, blocks=2, args=[pi, po, 8])
    q, h = np.float32(0.25), np.float32(0.5)
    want = np.zeros(8, dtype=np.float32)
    want[1:7] = (q * x[:6] + h * x[1:7]) + q * x[2:]
    np.testing.assert_array_equal(dev.read(po, 8).view(np.float32), want)


def test_a_dot_product_with_atomic_add():
    """atomicAdd on global memory: the products added in thread order (lanes in order, warps in order)."""
    rng = np.random.default_rng(9)
    x, y = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    dev = Device()
    pr, px, py = dev.alloc(1), dev.alloc(6), dev.alloc(6)
    dev.write(px, x)
    dev.write(py, y)
    dev.launch(dev.load_kernel(FARITH, "dot"), threads=4, blocks=2, args=[pr, px, py, 6])
    assert dev.read(pr, 1).view(np.float32)[0] == sequential_sum(x * y)
