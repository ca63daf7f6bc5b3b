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


class _Columns:
    """A sparse matrix kept by column, times a vector through the vector's nonzero entries only. The residual is
    one-hot in every group, so a product reads a small share of a layer's weights. Each output is the sum of its
    row's terms in column order from 0.0, as scipy's row-wise product sums them; the terms left out are zeros.

    >>> m = _Columns(sparse.csr_matrix(np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 4.0]])))
    >>> m @ np.array([0.0, 10.0, 0.5])
    array([20., 32.])
    """

    def __init__(self, matrix):
        matrix = sparse.csc_matrix(matrix)
        matrix.sort_indices()
        self.shape = matrix.shape
        self._starts, self._rows, self._values = matrix.indptr, matrix.indices, matrix.data

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        columns = x.nonzero()[0]
        starts = self._starts[columns]
        counts = self._starts[columns + 1] - starts
        ends = counts.cumsum()
        # the positions of those columns' entries: the run of each column, end to end
        entries = np.arange(ends[-1] if len(ends) else 0) + np.repeat(starts - ends + counts, counts)
        return np.bincount(self._rows[entries], weights=self._values[entries] * np.repeat(x[columns], counts),
                           minlength=self.shape[0])


def _product(matrix):
    """The matrix in the form whose product with a residual costs least: by column (_Columns) when it is large, so
    the residual's zeros skip most of it; scipy's row-wise CSR when it is small, as its product is then mostly the
    call. Both sum each row's terms in column order from 0.0: the same bits either way."""
    if matrix.nnz > 20_000:
        return _Columns(matrix)
    matrix = sparse.csr_matrix(matrix)
    matrix.sort_indices()
    return matrix


class _Compiled:
    """A layer's weights as sparse matrices, cut to the heads and MLP units it uses (a head past them has all-zero
    weights, so its output is exactly zero, and a unit whose gate row is empty adds exactly zero: leaving them out
    changes no value and saves most of the work). The matrices that read the normed residual are stacked, so a layer
    is one sparse product per block: the evaluation is Python-bound, and a product's cost is mostly its call."""

    def __init__(self, layer):
        w = layer.width
        h, vd = w.hidden, w.key_dim
        self.index, self.purpose, self.heads = layer.index, layer.purpose, list(layer.heads)
        used = len(self.heads) * w.head_dim
        channels = np.concatenate([np.arange(part * vd, part * vd + used) for part in range(3)])
        self.conv = np.zeros((w.conv_dim, w.conv))
        for channel, taps in layer.conv.items():
            self.conv[channel] = taps
        self.conv = self.conv[channels]
        # qkv | z | b | a: one product gives the mixer every value it reads from the residual
        self.reads = _product(sparse.vstack([_csr(layer.qkv, (w.conv_dim, h))[channels],
                                             _csr(layer.z, (vd, h))[:used], _csr(layer.b, (w.heads, h)),
                                             _csr(layer.a, (w.heads, h))]))
        self.out = _product(_csr(layer.out, (h, vd))[:, :used])
        self.used = used
        gate, up = _csr(layer.gate, (w.intermediate, h)), _csr(layer.up, (w.intermediate, h))
        self.units = np.flatnonzero(np.diff(gate.indptr))      # silu(0) * up = 0: an empty gate row adds nothing
        self.gate_up = _product(sparse.vstack([gate[self.units], up[self.units]]))
        self.down = _product(_csr(layer.down, (h, w.intermediate))[:, self.units])
        self.decaying = [(head, layer.a_log[head]) for head in range(len(layer.heads))
                         if layer.a_log.get(head, -np.inf) != -np.inf]       # A_log -inf: the state never decays


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
        constant = self._ballast != 0
        constant[self._groups[0]] = False
        self._constant = np.flatnonzero(constant)
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
        gate_up, units = layer.gate_up @ xn, len(layer.units)
        x = x + layer.down @ (_silu(gate_up[:units], "MLP gate", layer.units) * gate_up[units:])
        self._check(x, "after the MLP")
        return x

    def _mixer(self, layer: _Compiled, conv: np.ndarray, states: np.ndarray, xn: np.ndarray) -> np.ndarray:
        """The Gated DeltaNet heads' output (before out_proj), on the channels of the heads the layer uses; every
        head at once (``states``: head x key x value). The circuit's values are dyadic with few significant bits, so
        every sum here is exact in float64 whatever its order, and a head's terms that are zeros may be left out."""
        used, heads, d = layer.used, len(layer.heads), self.width.head_dim
        reads = layer.reads @ xn
        raw, z, beta, a = (reads[:3 * used], reads[3 * used:4 * used], reads[4 * used:4 * used + self.width.heads],
                           reads[4 * used + self.width.heads:])
        window = np.concatenate([conv, raw[:, None]], axis=1)
        conv[:] = window[:, 1:]
        mixed = _silu((window * layer.conv).sum(axis=1), "conv SiLU").reshape(3, heads, d)
        q, k, v = mixed
        beta = _sigmoid(beta, "beta")[:heads, None]
        z = _silu(z, "output gate").reshape(heads, d)
        k = _dyadic(_l2norm(k), "k")
        for head, a_log in layer.decaying:
            decay = _decay(a[head], a_log)
            if decay != 1.0:
                states[head] *= decay
        # k and q are one- or two-hot: a token reads and writes only the state rows of their nonzero entries, so
        # the products run over those rows (the other terms are zeros, which change no sum)
        keys = np.nonzero(k)
        delta = (v - _rows(states, k, keys)) * beta
        states[keys] += k[keys][:, None] * delta[keys[0]]
        # l2norm(q) / sqrt(dk) as one division, so a two-hot q reads exactly; a q that meets only empty rows
        # reads exactly zero whatever its scale
        read = _rows(states, q, np.nonzero(q))
        reading = read.any(axis=1)
        o = read.copy()
        if reading.any():
            scale = np.sqrt(np.einsum("hk,hk->h", q[reading], q[reading]) * d)
            o[reading] = _dyadic(read[reading] / scale[:, None], "head read")
        return (_gated_norm(o, "head output") * z).reshape(-1)

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
        if not (((values == 0.0) | (values == HOT)).all() and (np.add.reduceat(values, starts) == HOT).all()):
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
    head = _product(_csr(circuit.output_head(), (T.VOCAB_SIZE, circuit.width.hidden)))
    unique = {(g.start, g.size): g for g in circuit.residual.groups.values()}
    groups = [unique[key] for key in sorted(unique)]
    dims = np.concatenate([np.arange(g.start, g.start + g.size) for g in groups])
    starts = np.cumsum([0] + [g.size for g in groups[:-1]])
    return circuit, layers, embedding, head, (dims, starts, groups)


def _silu(x: np.ndarray, what: str, index: np.ndarray | None = None) -> np.ndarray:
    """``index``: the unit each entry of ``x`` stands for, when ``x`` is a layer's used units only."""
    bad = (x != 0) & (x < SILU_ON) & (x > OFF)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CircuitError(f"{what}: SiLU argument {x[i]} at index {i if index is None else int(index[i])} "
                           f"is not saturated (>= {SILU_ON} or <= {OFF})")
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
        raise CircuitError(f"{what}: values are not dyadic ({x[scaled != np.round(scaled)][:3]})")
    return x


def _rows(states: np.ndarray, x: np.ndarray, nonzero) -> np.ndarray:
    """Each head's ``state.T @ x`` (head x key x value, head x key) over ``nonzero``, ``np.nonzero(x)``."""
    head, row = nonzero
    out = np.zeros((states.shape[0], states.shape[2]))
    np.add.at(out, head, x[head, row, None] * states[head, row])
    return out


def _l2norm(x: np.ndarray) -> np.ndarray:
    """Each head's row over its Euclidean norm (a row of zeros stays zero)."""
    total = np.einsum("hk,hk->h", x, x)
    return x / np.sqrt(np.where(total == 0, 1.0, total))[:, None]


def _gated_norm(o: np.ndarray, what: str) -> np.ndarray:
    """Each head's row over its root mean square (a row of zeros stays zero)."""
    mean = np.einsum("hv,hv->h", o, o) / o.shape[1]
    return _dyadic(o / np.sqrt(np.where(mean == 0, 1.0, mean))[:, None], f"{what} norm")
