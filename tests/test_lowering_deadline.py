"""A lowering has a deadline (qwengpu.lowering.deadline): a program whose passes would run for hours stops with an
error naming the kernel, the stage and the setting, before anything runs on the machine."""
from __future__ import annotations

import numpy as np
import pytest

from qwengpu import Device, MachineError, toolchain
from qwengpu.lowering.deadline import SETTING, LoweringTimeout

needs_nvrtc = pytest.mark.skipif(not toolchain.nvrtc_available(),
                                 reason="NVRTC (libnvrtc.so.13 from nvidia-cuda-nvrtc==13.0.88) cannot be loaded")

# CUDA's double sin: fmas and a carry chain the machine builds, if-converted around its reduction's loop; its
# lowering takes about 25 s on 2 cores, far past the 3 s the test allows
SINE = ('#include <math.h>\nextern "C" __global__ void sines(double *y, const double *x)\n'
        '{\n    int i = threadIdx.x;\n    y[i] = sin(x[i]);\n}\n')
ADD = 'extern "C" __global__ void add(int *y)\n{\n    y[threadIdx.x] += 1;\n}\n'


@needs_nvrtc
def test_a_lowering_past_its_deadline_stops_naming_it_and_runs_nothing(monkeypatch):
    monkeypatch.setenv(SETTING, "3")
    dev = Device()
    y, x = dev.alloc(4), dev.alloc(4)
    dev.write(x, np.array([0.5, -3.25]))
    dev.write(y, np.arange(4))
    kernel = dev.load_kernel(SINE, "sines")        # (its tables of constants written to the device)
    tokens = len(dev.tokens)
    with pytest.raises(LoweringTimeout, match=rf"kernel sines: lowering stopped after 3 s, in .*lane predicates.*{SETTING} "
                                              r"sets the limit in seconds \(0: none\)"):
        dev.launch(kernel, threads=2, args=[y, x])
    assert len(dev.tokens) == tokens and dev.read(y, 4).tolist() == [0, 1, 2, 3]


@needs_nvrtc
@pytest.mark.parametrize("setting", ["soon", "-1"])
def test_a_deadline_that_is_no_number_of_seconds_is_refused(monkeypatch, setting):
    monkeypatch.setenv(SETTING, setting)
    dev = Device()
    with pytest.raises(MachineError, match=rf"{SETTING}='{setting}' is "):
        dev.launch(dev.load_kernel(ADD, "add"), threads=4, args=[dev.alloc(4)])


@needs_nvrtc
def test_no_deadline_with_zero(monkeypatch):
    monkeypatch.setenv(SETTING, "0")
    dev = Device()
    y = dev.alloc(4)
    dev.launch(dev.load_kernel(ADD, "add"), threads=4, args=[y])
    assert dev.read(y, 4).tolist() == [1, 1, 1, 1]
