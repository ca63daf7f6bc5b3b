"""printf in kernels (qwengpu/lowering/console.py, Device._console): what the machine stores to the console word,
formatted by the host, against the same printf calls compiled by gcc as C and run warp by warp, each call on a
warp's lanes in lane order, as the lanes run in step. Across warps CUDA promises no order, and a program longer than
the ROM runs its warps overlay by overlay: there the lines are compared as a whole and thread by thread."""
import shutil
import subprocess

import numpy as np
import pytest

from qwengpu import toolchain
from qwengpu.device import Device
from qwengpu.isa import MachineError
from qwengpu.ptx import PTXError

pytestmark = [pytest.mark.skipif(not toolchain.nvrtc_available(), reason="NVRTC (nvidia-cuda-nvrtc) is not loadable"),
              pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc (the reference printf) is absent")]

# Each call: its format and its arguments as C expressions of the thread index t (an int), n and f (a float).
CALLS = [
    ('"thread %d of %u: %f %x|%5.2e|%-4d|%c|%hhd|%hu%%\\n"',
     "t, (unsigned)n, f * t, n - 7 * t, f, -7, 'A' + t, 300 + t, -1"),
    ('"%d: %+08.3f %g %G %e %.0f %10.4g|\\n"',
     "t, f - t, 1.0f / (t + 3), -f * 1e20f, f * 1e-40f, f + 0.5f, f * 12345.678f"),
    ('"%d: [%*d] [%-*.*f] %o %X %i\\n"', "t, t + 2, -t, 9, t, f, t * 8 + 1, 0xBEEF0 + t, -2147483647 - 1 + t"),
    ('"%d: %s|%-6s|%.2s|%5s|%s\\n"',
     't, "literal", t > 2 ? "big" : "small", "abcdef", t % 2 ? "odd" : "even", t < 1 ? "0" : t < 3 ? "1-2" : "3+"'),
    ('"no arguments\\n"', ""),
]


def _kernel(calls) -> str:
    body = "\n".join(f"    printf({fmt}{', ' + args if args else ''});" for fmt, args in calls)
    return ('#include <cstdio>\n'
            'extern "C" __global__ void show(int n, float f) {\n'
            '    int t = threadIdx.x;\n'
            '    if (t < n) {\n' + body + '\n    }\n}\n')


def _reference(calls, threads: int, n: int, f: float, tmp_path) -> str:
    """The calls compiled by gcc and run warp by warp, each call on the warp's threads in order."""
    lines = "\n".join(f"            if (t < n) printf({fmt}{', ' + args if args else ''});" for fmt, args in calls)
    loops = "\n".join(f"        for (int t = w; t < w + 4 && t < {threads}; t++) {{\n{line}\n        }}"
                      for line in lines.splitlines())
    source = tmp_path / "reference.c"
    source.write_text(f"#include <stdio.h>\nint main(void) {{\n    int n = {n}; float f = {f!r}f;\n"
                      f"    for (int w = 0; w < {threads}; w += 4) {{\n{loops}\n    }}\n    return 0;\n}}\n")
    binary = tmp_path / "reference"
    subprocess.run(["gcc", "-O0", "-ffp-contract=off", "-o", str(binary), str(source)], check=True, timeout=120)
    return subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("f", [1.5, -0.0, 3.4e38, 1e-42])
def test_printf_of_ints_and_floats_as_gcc_prints_them(f, tmp_path, capsys):
    """Conversions, flags, widths, precisions (``*`` too), h / hh, %c, %%, %s of string literals (chosen by the
    machine: ``t > 2 ? "big" : "small"``), a call without arguments, two warps and a thread that does not print;
    what the device prints is also on standard output."""
    dev = Device()
    kernel = dev.load_kernel(_kernel(CALLS), "show")
    assert kernel.variables == {}                   # the format strings take no words of device memory
    dev.launch(kernel, threads=7, args=[6, f])
    want = _reference(CALLS, 7, 6, f, tmp_path).splitlines(keepends=True)
    assert sorted(dev.printed) == sorted(want)
    for t in range(6):                                                  # each thread's lines in program order
        assert _of_thread(dev.printed, t) == _of_thread(want, t)
    assert capsys.readouterr().out == "".join(dev.printed)


# 64-bit arguments (l, ll, z, j, t): words extended (signed and unsigned), a product of words (mul.wide), sums of a
# thread index extended
CALLS64 = [
    ('"%d: %ld %lu %lld|%llu %lx %lX %lo|%zu %jd %td|%+ld %08lx %-12lu|\\n"',
     "t, (long)(n - 9 * t), (unsigned long)(n - 9 * t), (long long)(t - n) * 1000003, "
     "(unsigned long long)(unsigned)(n - 2 * t), (unsigned long)(unsigned)(n * 7919 * t), (long)(n * t), "
     "(unsigned long)t, (size_t)n, (long)(t - 2), (long)(t - n), (long)t, (unsigned long)(unsigned)(-t), "
     "(unsigned long)(t * 3)"),
    ('"%d: %ld %lld\\n"', "t, (long)t - 2, (long long)t * 1000000 - 3000000"),
]


def test_printf_of_64_bit_values_as_gcc_prints_them(tmp_path):
    """%ld, %lu, %lld, %llx, %zu, %jd, %td with flags and widths: each 64-bit argument stored as its low word and
    its high word, which the machine computes (>> 32 of a word extended, of a product of words)."""
    dev = Device()
    dev.launch(dev.load_kernel(_kernel(CALLS64), "show"), threads=7, args=[6, 1.5])
    want = _reference(CALLS64, 7, 6, 1.5, tmp_path).splitlines(keepends=True)
    assert sorted(dev.printed) == sorted(want) and len(want) == 12


def test_printf_of_a_size_t_loop_counter():
    """A grid-stride loop's size_t counter (qwengpu.lowering.counters) printed with %zu and %lu."""
    source = ('#include <cstdio>\n'
              'extern "C" __global__ void k(size_t n) {\n'
              '    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n'
              '        printf("%zu of %lu\\n", i, n);\n}\n')
    dev = Device()
    dev.launch(dev.load_kernel(source, "k"), threads=4, blocks=2, args=[13])
    assert sorted(dev.printed) == sorted(f"{i} of 13\n" for i in range(13))


def _of_thread(lines: list[str], t: int) -> list[str]:
    return [line for line in lines if line.startswith((f"thread {t} ", f"{t}: "))]


def test_printf_in_a_loop_under_divergent_branches_returns_its_argument_count(tmp_path):
    """printf in a uniform loop, on the lanes a divergent test picks; its result is the number of its arguments."""
    source = ('extern "C" __global__ void k(int *y, int n) {\n'
              '    int t = threadIdx.x;\n'
              '    for (int i = 0; i < n; i++)\n'
              '        if ((t + i) % 3 == 0) y[t] = printf("t%d i%d %u\\n", t, i, t * i);\n}\n')
    dev = Device()
    y = dev.alloc(8)
    dev.write(y, [-1] * 8)
    dev.launch(dev.load_kernel(source, "k"), threads=8, args=[y, 4])
    c = tmp_path / "loop.c"
    c.write_text('#include <stdio.h>\nint main(void) {\n    for (int w = 0; w < 8; w += 4)\n'
                 '        for (int i = 0; i < 4; i++)\n            for (int t = w; t < w + 4; t++)\n'
                 '                if ((t + i) % 3 == 0) printf("t%d i%d %u\\n", t, i, t * i);\n    return 0;\n}\n')
    subprocess.run(["gcc", "-o", str(tmp_path / "loop"), str(c)], check=True, timeout=120)
    want = subprocess.run([str(tmp_path / "loop")], check=True, capture_output=True, text=True).stdout
    want = want.splitlines(keepends=True)
    assert sorted(dev.printed) == sorted(want)
    for t in range(8):
        assert [line for line in dev.printed if line.startswith(f"t{t} ")] == \
            [line for line in want if line.startswith(f"t{t} ")]
    np.testing.assert_array_equal(dev.read(y, 8), [3 if any((t + i) % 3 == 0 for i in range(4)) else -1
                                                   for t in range(8)])


def test_the_circuit_prints_what_the_interpreter_prints(capsys):
    """The console words come out of the compiled circuit's records as out of the interpreter's."""
    source = 'extern "C" __global__ void k(int n) { printf("%d:%x\\n", threadIdx.x, n * threadIdx.x); }'
    printed = {}
    for backend in ("interpreter", "circuit"):
        dev = Device(backend=backend)
        dev.launch(dev.load_kernel(source, "k"), threads=3, args=[0x51])
        printed[backend] = dev.printed
    assert printed["circuit"] == printed["interpreter"] == ["0:0\n", "1:51\n", "2:a2\n"]


def test_a_64_bit_argument_whose_high_word_only_a_pair_holds_prints():
    """``(unsigned long)n << (20 * t)``: the lowering holds no high word of a shift by a register in one word, so the
    value is kept as a pair of words (qwengpu.lowering.pairs), and printf's ``>> 32`` reads its high word."""
    dev = Device()
    kernel = 'extern "C" __global__ void k(int n) { printf("%lu %ld\\n", (unsigned long)n << (20 * threadIdx.x), ' \
             '(long)n * n * n * n); }'
    dev.launch(dev.load_kernel(kernel, "k"), threads=4, args=[-3000])
    n = -3000
    assert dev.printed == [f"{(n << (20 * t)) % 2**64} {n ** 4}\n" for t in range(4)]


def test_printf_of_doubles_as_gcc_prints_them(tmp_path):
    """%f, %.17g, %e, %g and a width of doubles the machine computes (qwengpu.lowering.doubles: each stored as its
    two words) and of a double literal, beside a float promoted; gcc's printf of the same expressions."""
    calls = [('"%d: %f %.17g %e %10.3f|%g %f\\n"',
              "t, (double)f * 0.1, (double)f * 0.1 + t, -1e-300 * t, (double)n * 1.25, 1.5, f")]
    dev = Device()
    kernel = ('#include <cstdio>\nextern "C" __global__ void show(int n, float f) {\n    int t = threadIdx.x;\n'
              f'    printf({calls[0][0]}, {calls[0][1]});\n}}\n')
    dev.launch(dev.load_kernel(kernel, "show"), threads=2, args=[2, 0.7])
    assert dev.printed == _reference(calls, 2, 2, 0.7, tmp_path).splitlines(keepends=True)


@pytest.mark.parametrize("call, named", [
    ('printf("%lc\\n", n)', r"%lc \(a wide character\) is not supported"),
    ('printf("%p\\n", &n)', r"%p \(a pointer\) is not supported"),
    ('printf("%Lf\\n", (long double)n)', r"%Lf \(a long double\) is not supported"),
])
def test_what_printf_cannot_print_is_refused_by_name(call, named):
    dev = Device()
    kernel = f'extern "C" __global__ void k(int n) {{ {call}; }}'
    with pytest.raises(MachineError, match=named):
        dev.launch(dev.load_kernel(kernel, "k"), threads=1, args=[3])


def test_other_calls_are_refused_naming_the_function():
    """A function the module only declares (the device heap's malloc); a module's own functions are inlined
    (tests/test_inline.py)."""
    with pytest.raises(PTXError, match=r"function calls are not supported: malloc"):
        Device().load_kernel('extern "C" __global__ void k(int *y) { int *p = (int *)malloc(8); p[0] = y[1]; '
                             'y[0] = p[0]; }', "k")


ASSERTING = ('#include <cassert>\n'
             'extern "C" __global__ void check(int *y) {\n'
             '    int i = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;\n'
             '    assert(y[i] != 5);\n'
             '    y[i] += 1;\n'
             '}\n')


def test_a_failing_assert_stops_the_launch_naming_each_failing_thread(capsys):
    """assert: where the condition holds the kernel runs on; where it fails on some thread, the launch raises
    CUDA's device-side assert with CUDA's message (file, line, function, the block and thread indices, which the
    machine stores) for each failing lane of the warp, and memory is left as before the launch."""
    dev = Device()
    kernel = dev.load_kernel(ASSERTING, "check")
    y = dev.alloc(16)
    values = np.arange(10, 26)
    dev.write(y, values)
    dev.launch(kernel, threads=(4, 2), blocks=2, args=[y])
    np.testing.assert_array_equal(dev.read(y, 16), values + 1)
    values[[13, 15]] = 5                            # block 1, threads (1, 1) and (3, 1): one warp
    dev.write(y, values)
    with pytest.raises(MachineError, match=r"device-side assert triggered \(cudaErrorAssert\): kernel.cu:4: void "
                                           r"check\(int \*\): block: \[1,0,0\], thread: \[1,1,0\] Assertion "
                                           r"`y\[i\] != 5` failed\."):
        dev.launch(kernel, threads=(4, 2), blocks=2, args=[y])
    assert dev.printed == [f"kernel.cu:4: void check(int *): block: [1,0,0], thread: [{t},1,0] Assertion `y[i] != 5` "
                           "failed.\n" for t in (1, 3)]
    assert capsys.readouterr().out == "".join(dev.printed)
    np.testing.assert_array_equal(dev.read(y, 16), values)


TRAPPING = ('extern "C" __global__ void guard(int *y, int bad) {\n'
            '    if (y[threadIdx.x] == bad) __trap();\n'
            '    y[threadIdx.x] *= 2;\n'
            '}\n')


def test_a_trap_stops_the_launch_naming_the_thread(capsys):
    """__trap() (PTX's trap) aborts a GPU's kernel: the launch raises naming the block and thread that trapped, and
    memory is left as before it; where no thread traps the kernel runs on."""
    dev = Device()
    kernel = dev.load_kernel(TRAPPING, "guard")
    dev.write(0, [3, 4, 5, 6, 7, 8])
    dev.launch(kernel, threads=6, args=[0, 99])
    np.testing.assert_array_equal(dev.read(0, 6), [6, 8, 10, 12, 14, 16])
    with pytest.raises(MachineError, match=r"kernel guard: the launch aborted at a trap: block: \[0,0,0\], thread: "
                                           r"\[5,0,0\] executed trap \(__trap\(\)\)"):
        dev.launch(kernel, threads=6, args=[0, 16])
    assert dev.printed == ["block: [0,0,0], thread: [5,0,0] executed trap (__trap())\n"]
    assert capsys.readouterr().out == "".join(dev.printed)
    np.testing.assert_array_equal(dev.read(0, 6), [6, 8, 10, 12, 14, 16])


def test_an_argument_written_again_before_the_call_is_refused():
    """The console stores read an argument's register at the call: one written again after its store into the
    buffer (hand-edited PTX; NVRTC does not do it) would print the later value, so it is refused."""
    ptx = toolchain.compile_cuda('extern "C" __global__ void k(int n) { printf("%d\\n", n * 3); }')
    assert "\tst.local.u32 \t[%rd2], %r2;\n" in ptx
    edited = ptx.replace("\tst.local.u32 \t[%rd2], %r2;\n", "\tst.local.u32 \t[%rd2], %r2;\n\tadd.s32 %r2, %r2, 1;\n")
    dev = Device()
    dev.launch(dev.load_kernel(ptx, "k"), threads=1, args=[5])
    assert dev.printed == ["15\n"]
    with pytest.raises(MachineError, match=r"argument %r2 is written again between its store into the buffer"):
        dev.load_kernel(edited, "k")
