"""The numpy replay of mnist_tp's integer arithmetic (written from linear.cu's header, vectorised).

A step with features x (32 Q8 ints, rank r holds x[8r:8r+8]), label y and weights W[r] (8 x 10 per rank):
  partial_r[c] = rshift(sum_f W[r][f, c] x_r[f], 8), rank 0 starting from -t[c]
  e[c]         = sum_r partial_r[c]                         (the AllReduce)
  g[c]         = e[c] (least squares) or, one-vs-rest squared hinge, min(e[c], 0) for c == y and max(e[c], 0) else
  W[r][f, c]  -= rshift(x_r[f] g[c], 8 + LR_SHIFT)
Targets: least squares t = 256 for the label, 0 else; hinge t = +256 / -256.

    >>> W = np.zeros((4, 8, 10), np.int64); W = step(W, np.full(32, 256), 3, "pool")[0]; W.shape
    (4, 8, 10)
"""
from __future__ import annotations

import numpy as np

CLASSES, PER_RANK, RANKS = 10, 8, 4
LR_SHIFT = {"pool": 6, "pca": 7}        # update shift beyond the Q8 product's 8 bits, chosen on replays (README)


def wrap(x):
    return ((np.asarray(x, dtype=np.int64) + 2**31) % 2**32) - 2**31


def rshift(v, m: int):
    return wrap(wrap(v + (1 << (m - 1))) >> m)


def loss_kind(variant: str) -> str:
    return "least squares" if variant == "pool" else "squared hinge"


def targets(label: int, variant: str) -> np.ndarray:
    """What rank 0's loader writes into the logit words before the forward: -t."""
    t = np.zeros(CLASSES, np.int64) if variant == "pool" else np.full(CLASSES, -256, np.int64)
    t[label] = 256
    return -t


def partials(W, x):
    """(RANKS, CLASSES): each rank's rshift(sum_f W x, 8)."""
    xr = np.asarray(x, np.int64).reshape(RANKS, PER_RANK)
    return rshift(wrap((np.asarray(W, np.int64) * xr[:, :, None]).sum(axis=1)), 8)


def step(W, x, label: int, variant: str):
    """One training step; -> (new W, e, partials with rank 0's target)."""
    part = partials(W, x)
    part[0] = wrap(part[0] + targets(label, variant))
    e = wrap(part.sum(axis=0))
    if variant == "pool":
        g = e
    else:
        g = np.maximum(e, 0)
        g[label] = min(e[label], 0)
    xr = np.asarray(x, np.int64).reshape(RANKS, PER_RANK)
    W = wrap(W - rshift(wrap(xr[:, :, None] * g[None, None, :]), 8 + LR_SHIFT[variant]))
    return W, e, part


def loss_value(e, label: int, variant: str) -> float:
    """The step's loss from the replay's error words (for progress bars and curves), in units of 1.0."""
    e = np.asarray(e, np.float64) / 256
    if variant == "pool":
        return float((e ** 2).sum() / 2)
    g = np.maximum(e, 0)
    g[label] = min(e[label], 0)
    return float((g ** 2).sum())


def predict(W, X):
    """Class scores of images X (n, 32) with the stacked weights (for test accuracy, from the machines' weights)."""
    return np.asarray(X, np.int64) @ np.asarray(W, np.int64).reshape(RANKS * PER_RANK, CLASSES)
