"""Exact numpy replays of the kernels in qwengpu/kernels/*.cu (int32 wrap-around, Q8 fixed point, 1.0 = 256).

Every function works on int64 arrays holding int32 values and wraps after each operation, so the result is the int32
the machine computes, bit for bit. Shifts are arithmetic; the round-to-nearest shift is
``rshift(v, m) = (v + 2^(m-1)) >> m`` (ties toward +infinity), exactly as the CUDA code writes it.

The MLP layout (see qwengpu/kernels/mlp.cu):
    params p[32] and grads g[32]: W1[k][0] at k, W1[k][1] at 8 + k, b1[k] at 16 + k, W2[k] at 24 + k (k = 0..7)
    minibatch batch[32]:          x0[s] at s, x1[s] at 8 + s, t[s] at 16 + s, o[s] at 24 + s (s = 0..7)
"""
from __future__ import annotations

import numpy as np

ONE = 256                   # Q8: 1.0
H = 8                       # hidden units
S = 8                       # sample stride of the minibatch arrays (at most 8 samples)
N_PARAMS = 32
LR_SHIFT = 6                # sgd: p -= rshift(g, 6)

# Offsets inside the parameter / gradient array and the minibatch.
W1_0, W1_1, B1, W2 = 0, H, 2 * H, 3 * H
X0, X1, T, O = 0, S, 2 * S, 3 * S


def wrap(x) -> np.ndarray:
    """Reduce to int32 (two's complement wrap-around), returned as int64 so products of two words cannot overflow."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def add(a, b):
    return wrap(np.asarray(a, np.int64) + np.asarray(b, np.int64))


def sub(a, b):
    return wrap(np.asarray(a, np.int64) - np.asarray(b, np.int64))


def mul(a, b):
    # Both operands are int32 values, so the int64 product is exact before the wrap.
    return wrap(wrap(a) * wrap(b))


def sra(a, m: int):
    """Arithmetic right shift of an int32 value."""
    return wrap(a) >> m


def rshift(v, m: int):
    """Round-to-nearest shift: (v + 2^(m-1)) >> m, the add wrapping as on the machine."""
    return sra(add(v, 1 << (m - 1)), m)


def as_int32(x) -> np.ndarray:
    return wrap(x).astype(np.int32)


# ----------------------------------------------------------------------------------------------------------- vadd / spin

def reference_vadd(a, b, n: int | None = None):
    """c[i] = a[i] + b[i] for i < n (int32 wrap)."""
    a, b = wrap(a), wrap(b)
    n = len(a) if n is None else n
    return as_int32(add(a[:n], b[:n]))


def reference_spin(threads: int, v: int):
    """out[i] = v + i for each thread i."""
    return as_int32(add(v, np.arange(threads)))


# ------------------------------------------------------------------------------------------------------------ the MLP

def hidden(p, x0, x1):
    """z[k] and h[k] = relu(z[k]) for every hidden unit k, one sample (x0, x1): arrays of shape (8,)."""
    p = wrap(p)
    z = add(rshift(add(mul(p[W1_0:W1_0 + H], x0), mul(p[W1_1:W1_1 + H], x1)), 8), p[B1:B1 + H])
    return z, np.maximum(z, 0)


def reference_forward(p, batch, ns: int):
    """mlp_forward: o[s] += sum_k rshift(W2[k] h[k], 8) for s < ns (the o words accumulate, as the atomics do)."""
    p, batch = wrap(p), wrap(batch).copy()
    for s in range(ns):
        _, h = hidden(p, batch[X0 + s], batch[X1 + s])
        terms = rshift(mul(p[W2:W2 + H], h), 8)
        o = batch[O + s]
        for term in terms:                      # wrap-around addition commutes: the atomics' order does not matter
            o = add(o, term)
        batch[O + s] = o
    return as_int32(batch)


def reference_backward(p, batch, g, ns: int):
    """mlp_backward: per-sample gradients of L = 1/2 sum (o - t)^2, added into g (the sum the atomics make)."""
    p, batch, g = wrap(p), wrap(batch), wrap(g).copy()
    for s in range(ns):
        x0, x1 = batch[X0 + s], batch[X1 + s]
        e = sub(batch[O + s], batch[T + s])
        z, h = hidden(p, x0, x1)
        mask = np.minimum(h, 1)                             # relu'(z): 1 when z > 0
        d = rshift(mul(mul(e, p[W2:W2 + H]), mask), 8)      # = z > 0 ? rshift(e W2, 8) : 0
        g[W2:W2 + H] = add(g[W2:W2 + H], rshift(mul(e, h), 8))
        g[B1:B1 + H] = add(g[B1:B1 + H], d)
        g[W1_0:W1_0 + H] = add(g[W1_0:W1_0 + H], rshift(mul(d, x0), 8))
        g[W1_1:W1_1 + H] = add(g[W1_1:W1_1 + H], rshift(mul(d, x1), 8))
    return as_int32(g)


def reference_loss(batch, loss: int, ns: int) -> int:
    """mlp_loss: loss += (uint32)(e e + 256) >> 9 (an unsigned shift) for each sample s < ns."""
    batch = wrap(batch)
    total = wrap(loss)
    for s in range(ns):
        e = sub(batch[O + s], batch[T + s])
        sq = int(add(mul(e, e), 256)) & 0xFFFFFFFF
        total = add(total, sq >> 9)
    return int(total)


def reference_sgd(p, g):
    """sgd: p[i] -= rshift(g[i], 6) for every i (one thread per parameter)."""
    p, g = wrap(p), wrap(g)
    n = len(g)
    out = p.copy()
    out[:n] = sub(p[:n], rshift(g, LR_SHIFT))
    return as_int32(out)


# ------------------------------------------------------------------------------------------------------- XOR training

XOR_POINTS = np.array([[0, 0, 0], [0, ONE, ONE], [ONE, 0, ONE], [ONE, ONE, 0]], dtype=np.int64)


def init_params(seed: int = 0):
    """32 Q8 parameters: W1 and W2 uniform in [-256, 256], b1 in [-32, 32] (what rank 0's initializer writes)."""
    rng = np.random.default_rng(seed)
    p = np.zeros(N_PARAMS, dtype=np.int64)
    p[W1_0:B1] = rng.integers(-ONE, ONE + 1, 2 * H)
    p[B1:W2] = rng.integers(-32, 33, H)
    p[W2:] = rng.integers(-ONE, ONE + 1, H)
    return as_int32(p)


def make_batch(points):
    """The 32-word minibatch for up to 8 samples given as rows (x0, x1, t), o = 0 (what the data loader writes)."""
    points = np.asarray(points, dtype=np.int64)
    ns = len(points)
    if not 1 <= ns <= S:
        raise ValueError(f"a minibatch holds 1..{S} samples, got {ns}")
    batch = np.zeros(4 * S, dtype=np.int64)
    batch[X0:X0 + ns] = points[:, 0]
    batch[X1:X1 + ns] = points[:, 1]
    batch[T:T + ns] = points[:, 2]
    return as_int32(batch)


def sample_batch(rng, ns: int = S):
    """ns XOR points drawn with replacement (the data loader)."""
    return make_batch(XOR_POINTS[rng.integers(0, 4, ns)])


def reference_xor_train_step(p, batch, ns: int):
    """One step as the device runs it: o = 0 (loader), forward; g = 0, loss = 0, backward, loss; sgd.

    Returns (new params, the batch after forward, the gradients, the loss word).
    """
    batch = wrap(batch).copy()
    batch[O:O + S] = 0
    batch = reference_forward(p, batch, ns)
    g = reference_backward(p, batch, np.zeros(N_PARAMS, np.int64), ns)
    loss = reference_loss(batch, 0, ns)
    return reference_sgd(p, g), batch, g, loss


def predict(p, points):
    """The network's Q8 outputs for rows (x0, x1[, t])."""
    points = np.asarray(points, dtype=np.int64)
    batch = make_batch(np.c_[points[:, :2], np.zeros(len(points), np.int64)])
    return reference_forward(p, batch, len(points))[O:O + len(points)]
