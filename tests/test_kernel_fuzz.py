"""A short share of the differential fuzzer (bench/kernel_fuzz.py): random integer CUDA kernels, NVRTC -> PTX ->
machine blocks -> interpreter, against the same body compiled by the host's gcc as sequential C per thread.

The full run (10,000 programs) is ``python -m qccl_bench.kernel_fuzz --programs 10000``.
"""
from __future__ import annotations

import shutil

import pytest

from qwengpu.toolchain import nvrtc_available

pytestmark = [
    pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (nvidia-cuda-nvrtc wheel) is not installed"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="the host C compiler gcc is not installed"),
]


def test_random_kernels_match_the_host_c_compiler():
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(60, seed=9, batch=60)
    assert report["tried"] == 60
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["ran"] >= 36, report["refused"]      # most programs run; refusals name a limit


def test_the_reference_catches_a_wrong_machine_result():
    """The check can fail: a C reference for a different body disagrees with the machine on some program."""
    import numpy as np
    from qccl_bench.kernel_fuzz import Case, c_reference, run_machine
    import tempfile
    case = Case("out[tid] = (int)(tid * 3u + (unsigned)s0);", 4, 5, 0, [0] * 8, [0] * 4)
    wrong = Case("out[tid] = (int)(tid * 3u + (unsigned)s0 + 1u);", 4, 5, 0, [0] * 8, [0] * 4)
    with tempfile.TemporaryDirectory() as d:
        right_c, wrong_c = c_reference([case, wrong], d)
    got = run_machine(case)
    assert got == right_c == list(np.arange(4) * 3 + 5)
    assert got != wrong_c


def test_narrow_loads_and_every_atomic_match_the_host_c_compiler():
    """--narrow (bytes and halfwords of x at computed indices) and --atomics (all ten atomics in block programs, old
    values kept) on a short share; seed 3 found a loaded word used as a byte index taken for a word address."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(60, seed=3, batch=60, shared=0.5, narrow=True, atomics=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body or case.phases}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["ran"] >= 30, report["refused"]
    assert set(report["refused"]) <= {"blocks; the ROM holds", "registers per lane"}, report["refused"]



def test_float_comparisons_classes_and_bits_match_the_host_c_compiler():
    """--floats: words read as float32, edge literals (-0.0f, infinities, NaNs, subnormals), negation, fabsf,
    copysignf, fmaxf, fminf and ?:, compared, classified or read back, against gcc's IEEE float32."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(80, seed=4, batch=80, floats=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["ran"] >= 60, report["refused"]


def test_64_bit_expressions_match_the_host_c_compiler():
    """--wide: unsigned long long arithmetic on widened words (zero- and sign-extended: seed 8 found a negative
    argument widened as if it were unsigned), read back as its low word, a shifted word or a comparison. Most of
    what depends on the high word is refused; what runs must equal gcc. Seed 15's 80 programs hold one that the
    zero-extended argument got wrong."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(80, seed=15, batch=80, wide=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["ran"] >= 50, report["refused"]


def test_64_bit_values_loaded_as_pairs_match_the_host_c_compiler():
    """--pairs: x's words read two at a time as unsigned long long / long long (qwengpu.lowering.pairs keeps them,
    and what is computed from them, as pairs of words) in --wide's expressions, and (float) of them, against gcc.
    Seed 38's 120 programs hold one whose 64-bit register is also written by a 32-bit load on another path (the
    first version of the stage read a second word there)."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(120, seed=38, batch=120, pairs=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["ran"] >= 110 and report["features"]["64-bit load"] >= 60 and \
        report["features"]["(float) of 64 bits"] >= 20, (report["refused"], report["features"])


def test_64_bit_atomics_and_bit_counts_match_the_host_c_compiler():
    """--bits --atomics: __popcll, __clzll, __ffsll and __brevll of 64-bit expressions, and in block programs
    64-bit atomics (add, and, or, xor, exch, cas, min / max signed and unsigned) on shared words, their old values
    kept, against gcc running the threads in order (the machine's lane order). Seed 43's 60 programs fail with an
    add's carry into the high word dropped, or with a clz of a nonzero high word off by one (the unit tests in
    test_pairs.py check each atomic and count on its own)."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(60, seed=43, batch=60, shared=1.0, atomics=True, bits=True)
    assert report["mismatches"] == [], "\n".join(f"{case.phases}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["ran"] >= 55 and report["features"]["64-bit atomic"] >= 25 and \
        report["features"]["64-bit bit count"] >= 20, (report["refused"], report["features"])


def test_double_expressions_match_the_host_c_compiler():
    """--doubles: a double expression at the end of half the programs (x's words as doubles of any bits, (double)
    of ints, unsigneds and floats, + - * / sqrt, PTX's min / max, floor, -, fabs), read back as its bits, (float) of
    it, a compare or (int) of it, against gcc's IEEE binary64."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(30, seed=51, batch=30, doubles=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    features = report["features"]
    assert report["ran"] >= 26 and features["dadd"] + features["dsub"] + features["dmul"] >= 5 and \
        features["ddiv"] + features["dsqrt"] >= 3, (report["refused"], features)


def test_simd_and_dpx_intrinsics_match_the_host_c_compiler():
    """--simd: CUDA's SIMD and DPX intrinsics, __dp4a / __dp2a, funnel shifts and __byte_perm inside random
    expressions, against gcc compiling C definitions of them from the CUDA Math API's descriptions."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(60, seed=61, batch=60, simd=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    features = report["features"]
    assert report["ran"] >= 55 and min(features["SIMD"], features["DPX"], features["dot product"],
                                       features["funnel shift / byte permute"]) >= 8, (report["refused"], features)


def test_float_conversions_to_64_bits_match_the_host_c_compiler():
    """--floats --wide: (long long)x, llrintf(x) and (unsigned long long)x of floats clamped into range (C leaves
    the rest undefined), read back as their low word, beside 64-bit expressions; seed 21's 60 programs hold 22
    such conversions that run."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(60, seed=21, batch=60, floats=True, wide=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["ran"] >= 45 and report["features"]["cvt.to64"] >= 15, (report["refused"], report["features"])


def test_float_arithmetic_and_conversions_match_the_host_c_compiler():
    """--floats --arith: float32 a + b, a - b, a * b, a / b, 1.0f / a and sqrtf(a) (correctly rounded to nearest even,
    subnormals in and out, overflow to infinity, x / 0, 0 / 0, roots of exact squares and their neighbours) of words
    in windows of exponents, edge literals (-0.0f, 1e-45f, 3.4e38f, infinities) and (float) of int and unsigned
    expressions, against gcc's IEEE float32 (SSE divss / sqrtss, no contraction, no errno); a NaN result is made the
    canonical NaN on both sides. Seed 8's 40 programs hold + - * and both conversions in over 15 programs that run,
    a division in 12, a reciprocal and a square root in 7 each. Each program runs in a forked child with a time
    limit, so a lowering that hangs fails the test instead of hanging it."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(40, seed=8, batch=40, floats=True, arith=True, time_limit=60)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["ran"] >= 35, report["refused"]
    assert set(report["refused"]) <= {"blocks; the ROM holds", "registers per lane", "words of block memory",
                                      "overlaps them"}, report["refused"]
    for feature in ("fadd", "fsub", "fmul", "cvt.s32", "cvt.u32"):
        assert report["features"][feature] >= 15, report["features"]
    assert report["features"]["fdiv"] >= 10, report["features"]
    for feature in ("frcp", "fsqrt"):
        assert report["features"][feature] >= 5, report["features"]


def test_float_atomic_adds_in_block_programs_match_the_host_c_compiler():
    """--arith --atomics: a float atomicAdd on a shared word (any bits) in the atomics phase of block programs of 5
    to 8 threads, its old value kept: the machine's compare-and-swap loop is cut into overlays, at whose ends the two
    warps take turns, and still adds in thread order (both come to it after the barrier), the C reference's, in
    float32 with subnormals kept and a NaN sum the canonical NaN. Seed 113's 30 programs run 7 such atomics."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(30, seed=113, batch=30, shared=1.0, atomics=True, floats=True, arith=True, time_limit=60)
    assert report["mismatches"] == [], "\n".join(f"{case.phases}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["features"]["float atomicAdd"] >= 7, report["features"]


def test_fused_multiply_adds_match_glibc():
    """--fma: fmaf(a, b, c) among the float expressions above, one rounding of the exact a * b + c, against glibc's
    fmaf (exact); seed 71's 20 programs hold an fmaf in over 5 that run."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(20, seed=71, batch=20, floats=True, arith=True, fma=True, time_limit=60)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["ran"] >= 18, report["refused"]
    assert report["features"]["ffma"] >= 5, report["features"]


def test_calls_of_noinline_functions_match_the_host_c_compiler():
    """--calls: expressions call __noinline__ functions (loops, early returns, calls of their own, pointer
    parameters); NVRTC keeps the call in many of them, and qwengpu.inline inlines it; gcc calls them."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(60, seed=103, batch=60, calls=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["ran"] >= 55, report["refused"]
    assert report["features"]["call kept"] >= 12 and report["features"]["nested call"] >= 10, report["features"]


def test_64_bit_loop_counters_match_the_host_c_compiler():
    """--counters: loops over an unsigned long long counter (steps of 2^30 or more, whose last sum passes
    2^32 - 1, or of 1 to 4), the counter read in the body; the machine's saturating step must end each loop where
    gcc's 64-bit one ends, and what it cannot answer (the counter after its loop, i <= a bound it cannot fix) is
    refused."""
    from qccl_bench.kernel_fuzz import fuzz
    report = fuzz(60, seed=4, batch=60, counters=True)
    assert report["mismatches"] == [], "\n".join(f"{case.body}\n machine {got}\n C {want}"
                                                 for case, got, want in report["mismatches"])
    assert report["internal_errors"] == [], report["internal_errors"]
    assert report["features"]["counter loop"] >= 12, report["features"]
    assert report["ran"] >= 40, report["refused"]
