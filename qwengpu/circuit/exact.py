"""The circuit backend: the compiled weights evaluated exactly, one token at a time.

This is transformers' Qwen3.5 decode path (qwengpu/circuit/README.md and shared reference: RMSNorm, in_proj, causal
conv, SiLU, l2norm, gated delta rule, gated RMSNorm, out_proj, SwiGLU) in float64 on sparse weights, with the ideal
nonlinearities: every SiLU, sigmoid and decay must sit in saturation (or at exactly 0), every norm must divide by a
power of two, and every residual group must stay one-hot. A value that breaks one of these raises CircuitError naming
the layer, the part and the value, so a broken invariant is found where it breaks, not at the final token.

Example::

    from qwengpu import Device
    dev = Device(backend="circuit")          # compiles the circuit at Qwen3.5-2B's width (a few seconds)
    dev.write(3, [7]); dev.read(3, 1)        # array([7], dtype=int32), written by the circuit
"""
from __future__ import annotations

import copy
import functools

import numpy as np
from scipy import sparse

from .. import tokens as T
from ..isa import MachineError
from .basis import HOT, MEAN_SQUARE, CircuitError
from .compiler import Circuit, compile_circuit
from .layers import QWEN35_2B, Width

SILU_ON, OFF = 17.0, -104.0         # silu(x) = x (fp32 and bf16) above SILU_ON; silu, sigmoid, softplus = 0 below OFF
SIGMOID_ON = 32.0                   # sigmoid(x) = 1 exactly above this


def _csr(entries: dict, shape) -> sparse.csr_matrix:
    if not entries:
        return sparse.csr_matrix(shape, dtype=np.float64)
    (rows, cols), values = zip(*entries.keys()), list(entries.values())
    return sparse.csr_matrix((values, (rows, cols)), shape=shape, dtype=np.float64)


class _Compiled:
    """A layer's weights as sparse matrices, cut to the heads it uses (a head past them has all-zero weights, so
    its output is exactly zero: leaving it out changes no value and saves most of the work)."""

    def __init__(self, layer):
        w = layer.width
        h, vd = w.hidden, w.key_dim
        self.index, self.purpose, self.heads = layer.index, layer.purpose, list(layer.heads)
        used = len(self.heads) * w.head_dim
        channels = np.concatenate([np.arange(part * vd, part * vd + used) for part in range(3)])
        self.qkv = _csr(layer.qkv, (w.conv_dim, h))[channels]
        self.conv = np.zeros((w.conv_dim, w.conv))
        for channel, taps in layer.conv.items():
            self.conv[channel] = taps
        self.conv = self.conv[channels]
        self.z, self.b, self.a = (_csr(layer.z, (vd, h))[:used], _csr(layer.b, (w.heads, h)),
                                  _csr(layer.a, (w.heads, h)))
        self.out = _csr(layer.out, (h, vd))[:, :used]
        self.used = used
        self.gate, self.up = _csr(layer.gate, (w.intermediate, h)), _csr(layer.up, (w.intermediate, h))
        self.down = _csr(layer.down, (h, w.intermediate))
        self.decays = {head: layer.a_log.get(head, -np.inf) for head in range(len(layer.heads))}


class CircuitBackend:
    """Backend ``circuit``: evaluates the compiled circuit exactly (float64 on dyadic values, ideal nonlinearities)."""

    name = "circuit"

    def __init__(self, circuit: Circuit | None = None, width: Width | None = None, trace: bool = False):
        prepared = _prepare(circuit if circuit is not None else compiled(width or QWEN35_2B))
        self.circuit, self.layers, self.embedding, self.head, self._groups = prepared
        self.width = self.circuit.width
        self.supported_ops = self.circuit.supported_ops
        self.atomics = self.circuit.atomics
        self.divisors = self.circuit.divisors
        self.trace = trace
        self.residuals: list[np.ndarray] = []      # with trace: the residual after each layer, for the last token
        self._ballast = np.array(self.circuit.residual.vector({}), dtype=np.float64)
        self._constant = self._ballast != 0
        self._constant[self._groups[0]] = False
        self._reset()

    def _reset(self) -> None:
        w = self.width
        self._conv = [np.zeros((3 * layer.used, w.conv - 1)) for layer in self.layers]
        self._states = [np.zeros((len(layer.heads), w.head_dim, w.head_dim)) for layer in self.layers]
        self._logits: np.ndarray | None = None
        self.position = 0

    # -- backend interface -------------------------------------------------------------------------------------
    def snapshot(self):
        return copy.deepcopy((self._conv, self._states, self._logits, self.position))

    def restore(self, state) -> None:
        self._conv, self._states, self._logits, self.position = copy.deepcopy(state)

    def predict(self) -> int:
        if self._logits is None:
            raise MachineError("the circuit has been fed nothing yet: there is no prediction")
        return int(np.argmax(self._logits))

    def margin(self) -> float:
        """Top logit minus the runner-up at the current position."""
        top2 = np.partition(self._logits, -2)[-2:]
        return float(top2[1] - top2[0])

    def feed(self, token: int) -> None:
        if not 0 <= token < T.VOCAB_SIZE:
            raise MachineError(f"token {token} is outside the vocabulary of {T.VOCAB_SIZE}")
        x = self.embedding[token].copy()
        self.residuals = []
        for layer, conv, states in zip(self.layers, self._conv, self._states):
            try:
                x = self._layer(layer, conv, states, x)
            except CircuitError as error:
                raise CircuitError(f"position {self.position} ({T.name(token)}), layer {layer.index} "
                                   f"({layer.purpose}): {error}") from None
            if self.trace:
                self.residuals.append(x.copy())
        self._logits = self.head @ self._norm(x, "final norm")
        self.position += 1

    # -- one decoder layer -------------------------------------------------------------------------------------
    def _layer(self, layer: _Compiled, conv: np.ndarray, states: np.ndarray, x: np.ndarray) -> np.ndarray:
        xn = self._norm(x, "input norm")
        if layer.used:
            x = x + layer.out @ self._mixer(layer, conv, states, xn)
            self._check(x, "after the mixer")
        xn = self._norm(x, "post-attention norm")
        x = x + layer.down @ (_silu(layer.gate @ xn, "MLP gate") * (layer.up @ xn))
        self._check(x, "after the MLP")
        return x

    def _mixer(self, layer: _Compiled, conv: np.ndarray, states: np.ndarray, xn: np.ndarray) -> np.ndarray:
        """The Gated DeltaNet heads' output (before out_proj), on the channels of the heads the layer uses."""
        d = self.width.head_dim
        raw = layer.qkv @ xn
        window = np.concatenate([conv, raw[:, None]], axis=1)
        conv[:] = window[:, 1:]
        mixed = _silu((window * layer.conv).sum(axis=1), "conv SiLU")
        used = layer.used
        q, k, v = mixed[:used], mixed[used:2 * used], mixed[2 * used:]
        beta = _sigmoid(layer.b @ xn, "beta")
        a = layer.a @ xn
        z = _silu(layer.z @ xn, "output gate")
        out = np.zeros(used)
        for head in range(len(layer.heads)):
            s = slice(head * d, (head + 1) * d)
            kh, vh = _dyadic(_l2norm(k[s]), "k"), v[s]
            if layer.decays[head] != -np.inf:
                states[head] *= _decay(a[head], layer.decays[head])
            state = states[head]
            delta = (vh - state.T @ kh) * beta[head]
            state += np.outer(kh, delta)
            # l2norm(q) / sqrt(dk) as one division, so a two-hot q reads exactly; a q that meets only empty rows
            # reads exactly zero whatever its scale
            read = state.T @ q[s]
            o = _dyadic(read / np.sqrt(float(q[s] @ q[s]) * d), "head read") if read.any() else read
            out[s] = _gated_norm(o, "head output") * z[s]
        return out

    def _norm(self, x: np.ndarray, what: str) -> np.ndarray:
        mean = float(x @ x) / len(x)
        if mean != MEAN_SQUARE:
            raise CircuitError(f"{what}: mean(x^2) = {mean}, the design holds it at {MEAN_SQUARE}")
        return x / HOT

    def _check(self, x: np.ndarray, where: str) -> None:
        """Every constant dimension unchanged; every group one-hot with value HOT."""
        if not np.array_equal(x[self._constant], self._ballast[self._constant]):
            raise CircuitError(f"{where}: a constant dimension changed")
        dims, starts, groups = self._groups
        values = x[dims]
        if not (np.isin(values, (0.0, HOT)).all() and (np.add.reduceat(values, starts) == HOT).all()):
            for group in groups:
                try:
                    group.slot_of(x)
                except CircuitError as error:
                    raise CircuitError(f"{where}: {error}") from None


@functools.lru_cache(maxsize=4)
def compiled(width: Width) -> Circuit:
    """The circuit of a width, compiled once per process."""
    return compile_circuit(width)


@functools.lru_cache(maxsize=4)
def _prepare(circuit: Circuit):
    """Sparse layers, embedding, output head and the group index of a circuit (shared by its backends)."""
    layers = [_Compiled(layer) for layer in circuit.layers]
    embedding = circuit.embedding().astype(np.float64)
    head = _csr(circuit.output_head(), (T.VOCAB_SIZE, circuit.width.hidden))
    unique = {(g.start, g.size): g for g in circuit.residual.groups.values()}
    groups = [unique[key] for key in sorted(unique)]
    dims = np.concatenate([np.arange(g.start, g.start + g.size) for g in groups])
    starts = np.cumsum([0] + [g.size for g in groups[:-1]])
    return circuit, layers, embedding, head, (dims, starts, groups)


def _silu(x: np.ndarray, what: str) -> np.ndarray:
    bad = (x != 0) & (x < SILU_ON) & (x > OFF)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CircuitError(f"{what}: SiLU argument {x[i]} at index {i} is not saturated (>= {SILU_ON} or <= {OFF})")
    return np.where(x >= SILU_ON, x, 0.0)


def _sigmoid(x: np.ndarray, what: str) -> np.ndarray:
    bad = (x != 0) & (x < SIGMOID_ON) & (x > OFF)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CircuitError(f"{what}: sigmoid argument {x[i]} at head {i} is not 0 or saturated")
    return np.where(x >= SIGMOID_ON, 1.0, np.where(x == 0, 0.5, 0.0))


def _decay(a: float, a_log: float) -> float:
    if a_log != 0.0:
        raise CircuitError(f"decay: A_log {a_log} (the circuit uses 0 or -inf)")
    if a <= OFF:
        return 1.0
    if a >= -OFF:
        return 0.0
    raise CircuitError(f"decay: a = {a} is neither <= {OFF} (keep) nor >= {-OFF} (reset)")


def _dyadic(x: np.ndarray, what: str) -> np.ndarray:
    scaled = x * 2.0 ** 30
    if not np.array_equal(scaled, np.round(scaled)):
        raise CircuitError(f"{what}: values are not dyadic ({x[np.flatnonzero(scaled != np.round(scaled))[:3]]})")
    return x


def _l2norm(x: np.ndarray) -> np.ndarray:
    total = float(x @ x)
    return x if total == 0 else x / np.sqrt(total)


def _gated_norm(o: np.ndarray, what: str) -> np.ndarray:
    mean = float(o @ o) / len(o)
    if mean == 0:
        return o
    return _dyadic(o / np.sqrt(mean), f"{what} norm")
