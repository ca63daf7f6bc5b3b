"""Lowered programs per argument shape (qwengpu.specialize): a program reused for new arguments must be the program
the lowering writes for them. The reference is the plain lowering (qwengpu.lowering.lower), run on every launch."""
import dataclasses

import numpy as np
import pytest

import qccl
from qwengpu import Device
from qwengpu import device as D
from qwengpu.lowering import lower
from qwengpu.specialize import Specializer, Traced, evaluate

BRANCHY = r'''extern "C" __global__ void k(int *out, const int *x, int mode, int n, int v, unsigned s) {
  int i = threadIdx.x;
  int r = x[i];
  if (mode & 1) r = r + v;
  if (mode & 2) r = r * v;
  if ((mode & 4) && v > 3) r = r ^ (int)(s >> 3);
  if (i < n) out[i] = (mode & 8) ? r - (int)s : r;
}'''


def same(a, b) -> bool:
    return all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a))


def test_traced_arithmetic_replays_exactly():
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b = (int(v) for v in rng.integers(-2**40, 2**40, 2))
        x, y = Traced(a, ("arg", 0)), Traced(b, ("arg", 1))
        for value in (x + y, x - 7, 3 * y, (x & 0xFFFF) | (y << 3), x ^ y, -x, ~y, x >> 5, (x * y) % 1000,
                      abs(x) // 9, 1 - x):
            assert isinstance(value, Traced)
            assert evaluate(value.expr, (a, b)) == int.__int__(value)


def test_a_reused_program_is_the_lowering_of_its_arguments():
    dev = Device()
    kernel = dev.load_kernel(BRANCHY, "k")
    spec = Specializer(kernel.ptx)
    rng = np.random.default_rng(1)
    for _ in range(400):
        mode, n, v = int(rng.integers(0, 16)), int(rng.integers(0, 5)), int(rng.integers(-6, 9))
        s = int(rng.integers(0, 2**32))
        args = (64, 80, mode, n, v, s)
        threads = int(rng.choice([1, 3, 4]))
        assert same(spec.program(args, threads), lower(kernel.ptx, list(args), threads))
    # a launch that changes only values the lowering decides nothing new on (s, here) reuses a program
    spec = Specializer(kernel.ptx)
    for _ in range(100):
        args = (64, 80, 15, 4, int(rng.integers(4, 9)), int(rng.integers(2**10, 2**32)))
        assert same(spec.program(args, 4), lower(kernel.ptx, list(args), 4))
    assert spec.lowered <= 10


def test_recorded_decisions_hold_no_traced_int():
    """A template keys its decisions as they were recorded: each must be plain values, or a later comparison of
    two decisions would itself record decisions (and keep the traced lowering alive)."""
    def traced_inside(x):
        return isinstance(x, Traced) or isinstance(x, tuple) and any(traced_inside(v) for v in x)

    dev = Device()
    spec = Specializer(dev.load_kernel(BRANCHY, "k").ptx)
    for mode in range(16):
        spec.program((64, 80, mode, 3, 5, 2**31 + 9), 4)
    decisions = [d for templates in spec.templates.values() for t in templates for d in t.decisions]
    assert len(decisions) > 16
    assert not any(traced_inside(d) for d in decisions)


def test_qccl_launches_lower_once_per_shape_and_equal_the_plain_lowering(monkeypatch):
    """Every launch of a few int and float collectives on 4 ranks, replayed through a fresh Specializer per kernel:
    each program equals the plain lowering of the same arguments, and the second pass lowers nothing."""
    calls = []
    program = D.Kernel.program

    def record(self, args, threads, block=0, blocks=1, shared=0):
        calls.append((self.name, self.ptx, tuple(args), threads, block, blocks, shared))
        return program(self, args, threads, block, blocks, shared)

    monkeypatch.setattr(D.Kernel, "program", record)
    comms = qccl.Communicator.init_all(4)
    rng = np.random.default_rng(2)
    for dtype in (np.int32, np.float32):
        for kind in ("allreduce", "reduce_scatter", "allgather"):
            x = [rng.integers(-50, 50, 8).astype(dtype) for _ in range(4)]
            y = [np.zeros({"allreduce": 8, "reduce_scatter": 2, "allgather": 32}[kind], dtype) for _ in range(4)]
            with qccl.group():
                for c in comms:
                    getattr(c, kind)(x[c.rank], y[c.rank], *(["sum"] if kind != "allgather" else []))
    monkeypatch.undo()
    assert len(calls) > 100
    specs = {}
    for name, ptx, args, threads, block, blocks, shared in calls:
        spec = specs.setdefault(name, Specializer(ptx))
        got = spec.program(args, threads, block, blocks, shared)
        assert same(got, lower(ptx, list(args), threads, block=block, blocks=blocks, shared=shared)), (name, args)
    lowered = {name: spec.lowered for name, spec in specs.items()}
    assert set(lowered) >= {"prim", "fprim"}
    for name, ptx, args, threads, block, blocks, shared in calls:
        specs[name].program(args, threads, block, blocks, shared)
    assert {name: spec.lowered for name, spec in specs.items()} == lowered
    assert sum(lowered.values()) < len(calls) / 4


@pytest.mark.parametrize("value", [0, 1, -1, 2**31 - 1, -2**31, 2**32 - 1])
def test_edge_values_take_their_own_decisions(value):
    dev = Device()
    kernel = dev.load_kernel(BRANCHY, "k")
    spec = Specializer(kernel.ptx)
    for mode in (1, 2, 5, 15):
        for v in (value, 4) if -2**31 <= value < 2**31 else (4,):
            args = (64, 80, mode, 4, v, value & 0xFFFFFFFF)
            assert same(spec.program(args, 4), lower(kernel.ptx, list(args), 4))


def test_a_long_chain_of_arithmetic_on_arguments_is_checked_without_nesting():
    """A float add and subtract of converted arguments: the integer ops the lowering decides on are a chain of
    hundreds of traced operations; the checks once nested them past Python's parser (the fuzzer's --arith seed 7).
    Each launch's result is numpy's float32."""
    source = ('extern "C" __global__ void k(int *out, int s0, int s1) { '
              'out[threadIdx.x] = __float_as_int(((float)s0 + 1.0f) - (float)s1); }')
    dev = Device()
    dev.alloc(4, at=0)
    kernel = dev.load_kernel(source, "k")
    for s0, s1 in ((735548331, 2134576876), (1, 2), (735548331, 2134576876), (-5, 7)):
        dev.launch(kernel, threads=4, args=[0, s0, s1])
        want = ((np.float32(s0) + np.float32(1.0)) - np.float32(s1)).view(np.uint32)
        assert (dev.read(0, 4).view(np.uint32) == want).all()


@pytest.mark.parametrize("body, reference", [
    ("1.0f / __int_as_float(s1)", lambda a0, a1, s1: np.float32(1.0) / a1),
    ("sqrtf(__int_as_float(s1))", lambda a0, a1, s1: np.sqrt(a1)),
    ("__int_as_float(s0) / (float)(s1 & 0x01ffffff)", lambda a0, a1, s1: a0 / np.float32(s1 & 0x01FFFFFF)),
])
def test_a_division_of_arguments_is_traced_in_time(body, reference):
    """A division or square root of launch arguments alone: hundreds of decisions on expressions that share their
    subexpressions. Hashing them, or evaluating them as trees, took exponential time (the fuzzer's --arith hung)."""
    source = ('extern "C" __global__ void k(int *out, int s0, int s1) { '
              f'out[threadIdx.x] = __float_as_int({body}); }}')
    dev = Device()
    dev.alloc(4, at=0)
    kernel = dev.load_kernel(source, "k")
    for s0, s1 in ((444113668, 319671104), (444113669, 319671107)):
        dev.launch(kernel, threads=4, args=[0, s0, s1])
        a0, a1 = np.array([s0, s1], dtype=np.int32).view(np.float32)
        assert (dev.read(0, 4).view(np.uint32) == np.float32(reference(a0, a1, s1)).view(np.uint32)).all()
