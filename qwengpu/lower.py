"""The lowering's former single module; the stages now live in the package qwengpu.lowering (one module each).

Kept so that ``from qwengpu.lower import Program, lower`` in older code still works; new code imports
qwengpu.lowering.
"""
from .lowering import Program, lower

__all__ = ["Program", "lower"]
