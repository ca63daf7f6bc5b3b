"""QwenGPU: a 4-lane SIMT GPU that runs CUDA kernels by writing tokens, and its driver.

    from qwengpu import Device
    dev = Device(backend="interpreter")
"""
from .device import Device, Kernel, Packet, Record
from .interpreter import Interpreter, Wait
from .isa import MachineError
from .lower import Program

__all__ = ["Device", "Kernel", "Packet", "Record", "Interpreter", "Wait", "MachineError", "Program"]
