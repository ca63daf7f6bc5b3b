"""The circuit compiler: the QwenGPU machine as the weights of a stack of Qwen3.5 linear-attention decoder layers.

``compile_circuit`` is a row of stages, each a module with one job. A stage takes the layers (it picks its own out
of qwengpu.circuit.plan, the one place that says which layer holds what), the residual stream (named one-hot groups,
qwengpu.circuit.basis) and the groups it reads, as values; it places heads and units and returns the groups it
creates for the stages after it:

=============== ========================================================= ==================================
stage           reads                                                     creates
=============== ========================================================= ==================================
vocabulary      (the token fed)                                           Tokens: family, nibbles, out slots
control         Tokens                                                    Control: distances, block, lanes,
                                                                          warp, Rom (the current ROM row)
registers       Tokens, Control                                           Registers: R[a], R[b], R[s],
                                                                          R[dst], predicate, op_class
arithmetic      Control, Registers                                        Operands: A, B, address, active
(operands)
memory          Tokens, Control, Operands                                 (A replaced by a loaded word)
arithmetic      Rom, op_class, Operands                                   X
(alu)
multiply        op_class, Operands, X                                     (X for mul)
divide          op_class, Operands, X                                     (X for div / rem)
records         Tokens, Control, Registers, Operands, X                   (the tokens the model writes)
=============== ========================================================= ==================================

Groups a stage is done with (scratch digits, partial products) go back to the residual once the layers have moved
them to their defaults, so a later group can take their dimensions (``Residual.free``); the order of the stages and
of those frees fixes every dimension, so it is part of the compiled weights (tests/test_compiler_stages.py pins
them by digest).

The result is a ``Circuit``: the residual's groups, the sparse layers and the vocabulary maps, which
``qwengpu.circuit.exact`` evaluates exactly and ``qwengpu.circuit.model`` turns into a transformers state dict.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import arithmetic, control, divide, memory, multiply, plan, records, registers, vocabulary
from .basis import CircuitError, Residual
from .layers import QWEN35_2B, Layer, Width
from .ops import DIVISORS, SUPPORTED_OPS
from .vocabulary import Tokens


@dataclass(eq=False)
class Circuit:
    """A compiled QwenGPU: the residual's groups, the layers, and how tokens enter and leave the stream."""
    width: Width
    residual: Residual
    tokens: Tokens
    layers: list[Layer] = field(default_factory=list)
    supported_ops: tuple[str, ...] = SUPPORTED_OPS
    atomics: bool = True
    divisors: tuple[int, ...] = tuple(range(1, DIVISORS + 1))     # the immediates a div / rem may divide by

    def embedding(self) -> np.ndarray:
        """(vocab, hidden) embedding: every row a residual vector with mean(x^2) = 64."""
        return vocabulary.embedding(self.residual, self.tokens)

    def output_head(self) -> dict:
        """The lm_head as {(token, dim): weight}: LOGIT on each output slot the token is spelled with."""
        return vocabulary.output_head(self.tokens)


def compile_circuit(width: Width = QWEN35_2B) -> Circuit:
    """Compile the machine into a Circuit of the given width (Qwen3.5-2B's by default)."""
    if width.head_dim != 128:
        raise CircuitError(f"head_dim {width.head_dim}: the layout needs 128 (one state row per memory word)")
    residual = Residual(width.hidden)
    layers = [Layer(i, width, residual, purpose) for i, purpose in enumerate(plan.purposes())]

    tokens = vocabulary.build(residual)
    ctl = control.build(layers, residual, tokens)
    regs = registers.build(layers, residual, tokens, ctl)
    operands, operand_digits = arithmetic.operands(layers, residual, ctl, regs)
    memory.build(layers, residual, tokens, ctl, operands)
    free(residual, operand_digits)              # cleared in the last OPERANDS layer, the memory layer
    x = arithmetic.alu(layers, residual, ctl.rom, regs.op_class, operands)
    products = multiply.build(layers, residual, regs.op_class, operands, x)
    quotients = divide.build(layers, residual, regs.op_class, operands, x)
    free(residual, products + quotients)        # cleared in the last MULTIPLY and DIVIDE layers
    records.build(layers, residual, tokens, ctl, regs, operands, x)

    residual.seal()
    return Circuit(width, residual, tokens, layers)


def free(residual: Residual, groups) -> None:
    for group in groups:
        residual.free(group)
