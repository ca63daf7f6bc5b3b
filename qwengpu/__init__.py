"""QwenGPU: a 4-lane SIMT GPU that runs CUDA kernels by writing tokens, and its driver.

    from qwengpu import Device
    dev = Device(backend="interpreter")         # the reference
    dev = Device(backend="circuit")             # the compiled Qwen3.5 weights, evaluated exactly
    dev = Device(backend="model", dtype="bfloat16", device="cpu")   # the same weights in transformers
"""
from .device import Device, Kernel, Packet, Record
from .interpreter import Interpreter, Wait
from .isa import MachineError
from .lowering import Program

__all__ = ["Device", "Kernel", "Packet", "Record", "Interpreter", "Wait", "MachineError", "Program"]
