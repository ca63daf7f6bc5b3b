"""The numpy replay of the XOR MLP's integer arithmetic (the reference the machines are checked against).

Written from the formulas in xor.cu's header, vectorised over samples and hidden units; int64 arithmetic wrapped to
int32 after every operation that a 32-bit GPU would wrap. Sums of atomicAdd terms do not depend on the order the lanes
add them (integer addition mod 2^32 is associative), so a vectorised sum is the exact reference.

    >>> p = init_params(0); g = gradients(p, X[:4], T[:4]); step(p, g).shape
    (32,)
"""
from __future__ import annotations

import numpy as np

H = 8
X = np.array([[0, 0], [0, 256], [256, 0], [256, 256]], dtype=np.int64)     # the four XOR points in Q8
T = np.array([0, 256, 256, 0], dtype=np.int64)                              # XOR-true is 1.0


def wrap(x):
    """int32 wrap-around of an int64 array."""
    return ((np.asarray(x, dtype=np.int64) + 2**31) % 2**32) - 2**31


def rshift(v, m: int):
    """Round-to-nearest arithmetic shift: (v + 2^(m-1)) >> m."""
    return wrap(wrap(v + (1 << (m - 1))) >> m)


def unpack(p):
    p = np.asarray(p, dtype=np.int64)
    return p[0:H], p[H:2 * H], p[2 * H:3 * H], p[3 * H:4 * H]          # W1[:,0], W1[:,1], b1, W2


def init_params(seed: int) -> np.ndarray:
    """Rank 0's initial parameters (Q8): W1 ~ N(0, 1), b1 = 0.1, W2 ~ N(0, 1/2), from a seeded generator."""
    rng = np.random.default_rng(seed)
    w1 = np.round(rng.normal(0, 1, (2, H)) * 256)
    b1 = np.full(H, 26)
    w2 = np.round(rng.normal(0, 0.5, H) * 256)
    return np.concatenate([w1[0], w1[1], b1, w2]).astype(np.int64)


def hidden(p, x):
    """z[s, k] and h[s, k] for samples x[s] = (x0, x1)."""
    w0, w1, b1, _ = unpack(p)
    z = wrap(rshift(wrap(wrap(np.outer(x[:, 0], w0)) + wrap(np.outer(x[:, 1], w1))), 8) + b1)
    return z, np.maximum(z, 0)


def outputs(p, x):
    """y[s] = sum_k rshift(W2[k] h[s, k], 8)."""
    _, _, _, w2 = unpack(p)
    _, h = hidden(p, x)
    return wrap(rshift(wrap(h * w2), 8).sum(axis=1))


def errors(p, x, t):
    """e[s] = y[s] - t[s]: what the machine's forward leaves in the error words (they start at -t)."""
    return wrap(outputs(p, x) - t)


def gradients(p, x, t):
    """The 32 gradient words the backward kernel accumulates over the samples (same layout as p)."""
    _, _, _, w2 = unpack(p)
    e = errors(p, x, t)[:, None]
    _, h = hidden(p, x)
    dw2 = rshift(wrap(e * h), 8)
    d = rshift(wrap(wrap(e * w2) * np.minimum(h, 1)), 8)
    dw0 = rshift(wrap(d * x[:, 0:1]), 8)
    dw1 = rshift(wrap(d * x[:, 1:2]), 8)
    return wrap(np.concatenate([dw0.sum(0), dw1.sum(0), d.sum(0), dw2.sum(0)]))


def loss(p, x, t) -> int:
    """sum_s (uint32)(e e + 256) >> 9."""
    e = errors(p, x, t)
    sq = (wrap(e * e) + 256) % 2**32
    return int(wrap((sq >> 9).sum()))


def correct(p, x, t) -> int:
    e = errors(p, x, t)
    return int(((e > -128) & (e <= 128)).sum())


def step(p, g):
    """SGD: p - rshift(g, 6)."""
    return wrap(np.asarray(p, dtype=np.int64) - rshift(g, 6))
