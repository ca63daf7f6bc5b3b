"""The split denoiser's integer arithmetic, replayed in numpy: the reference every QwenGPU step is checked against.

Written from the specification below, vectorised over ranks and hidden units, independently of denoiser.cu (which
loops per thread with atomics); the two must agree bit for bit.

A denoiser of D data numbers: input u = (x_t, F[t]) of nin = D + 1 numbers, H hidden ReLU units in all, D outputs
(the predicted noise). Megatron-style over R ranks, rank r holding Hr = H / R hidden units:

    W1[r]: (nin + 1) x Hr    row nin is the hidden bias
    W2[r]: (Hr + 1) x D      row Hr is this rank's output bias (the model's output bias is the sum over ranks)

Training step (one sample x0, noise level t, noise eps; learning rate 2^-L):
    u     = (rshift(A[t] x0 + S[t] eps, 8), F[t])                                  noise kernel
    z     = rshift(u . W1[:nin], 8) + W1[nin];  h = max(z, 0)                       forward kernel
    p_r   = (-eps if r == 0 else 0) + W2[Hr] + sum_k rshift(W2[k] h_k, 8)
    e     = sum_r p_r  = prediction - eps                                          qccl AllReduce
    d_k   = rshift(sum_j e_j W2[k, j], 8) if z_k > 0 else 0                       backward kernel (old W2)
    W2[k] -= rshift(e h_k, 8 + L);   W2[Hr] -= rshift(e, L)
    W1[i, k] -= rshift(d_k u_i, 8 + L);   W1[nin, k] -= rshift(d_k, L)
Sampling (DDIM, eta = 0), ns samples, t = T..1:
    u = (x, F[t]);  e = sum_r (W2[Hr] + sum_k rshift(W2[k] h_k, 8));  x = rshift(C1[t] x + C2[t] e, 8)

>>> from examples.points_ddpm.fixed import schedule
>>> w1, w2 = init_params(np.random.default_rng(0), D=2, H=32, ranks=4)
>>> w1.shape, w2.shape
((4, 4, 8), (4, 9, 2))
>>> x = sample(w1, w2, schedule(20), np.zeros((8, 2), np.int64))
>>> x.shape
(8, 2)
"""
from __future__ import annotations

import numpy as np

from .fixed import ONE, Schedule, check_int32, rshift


def init_params(rng: np.random.Generator, D: int, H: int, ranks: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Random Q8 parameters (int64 arrays W1 (R, D+2, H/R) and W2 (R, H/R+1, D)): He-scaled weights, zero biases."""
    if H % ranks:
        raise ValueError(f"H={H} hidden units do not split over {ranks} ranks")
    nin, hr = D + 1, H // ranks
    w1 = np.zeros((ranks, nin + 1, hr), np.int64)
    w2 = np.zeros((ranks, hr + 1, D), np.int64)
    w1[:, :nin] = np.rint(rng.normal(0, np.sqrt(2.0 / nin), (ranks, nin, hr)) * ONE)
    w2[:, :hr] = np.rint(rng.normal(0, np.sqrt(1.0 / H), (ranks, hr, D)) * ONE)
    return w1, w2


def noised(x0: np.ndarray, eps: np.ndarray, t, sch: Schedule) -> np.ndarray:
    """x_t = rshift(A[t] x0 + S[t] eps, 8) (t a scalar or one per row)."""
    t = np.asarray(t)
    a, s = sch.A[t], sch.S[t]
    if t.ndim:
        a, s = a[:, None], s[:, None]
    return check_int32(rshift(check_int32(a * x0 + s * eps, "noise"), 8), "x_t")


def inputs(x: np.ndarray, t, sch: Schedule) -> np.ndarray:
    """u = (x, F[t]) per row: (n, D) -> (n, D + 1)."""
    f = np.broadcast_to(sch.F[np.asarray(t)], (x.shape[0],))
    return np.concatenate([x, f[:, None]], axis=1)


def hidden(w1: np.ndarray, u: np.ndarray) -> np.ndarray:
    """z per rank, sample and hidden unit: (R, n, Hr)."""
    nin = u.shape[1]
    acc = check_int32(np.einsum("ni,rik->rnk", u, w1[:, :nin]), "hidden sum")
    return rshift(acc, 8) + w1[:, nin][:, None, :]


def partials(w1, w2, u):
    """Each rank's output before the AllReduce (without rank 0's -eps): (R, n, D), and z."""
    z = hidden(w1, u)
    h = np.maximum(z, 0)
    hr = w2.shape[1] - 1
    terms = check_int32(h[:, :, :, None] * w2[:, None, :hr, :], "output product")    # (R, n, Hr, D)
    return rshift(terms, 8).sum(2) + w2[:, hr][:, None, :], z


def train_step(w1, w2, x0, t: int, eps, sch: Schedule, L: int):
    """One training step on one sample (x0, eps: (D,)); returns new (w1, w2) and what the machine holds after the
    step: the AllReduce's result e (= prediction - eps) and u."""
    u = inputs(noised(x0[None], eps[None], t, sch), t, sch)               # (1, nin)
    p, z = partials(w1, w2, u)
    p[0] -= eps[None]
    e = check_int32(p.sum(0)[0], "AllReduce")                            # (D,)
    h = np.maximum(z[:, 0], 0)                                          # (R, Hr)
    hr, nin = w2.shape[1] - 1, u.shape[1]
    g = check_int32((w2[:, :hr] * e[None, None, :]).sum(2), "backward sum")   # (R, Hr)
    d = np.where(z[:, 0] > 0, rshift(g, 8), 0)
    nw2 = w2.copy()
    nw2[:, :hr] -= rshift(check_int32(h[:, :, None] * e[None, None, :], "dW2"), 8 + L)
    nw2[:, hr] -= rshift(e, L)[None, :]
    nw1 = w1.copy()
    nw1[:, :nin] -= rshift(check_int32(u[0][None, :, None] * d[:, None, :], "dW1"), 8 + L)
    nw1[:, nin] -= rshift(d, L)
    return check_int32(nw1, "W1"), check_int32(nw2, "W2"), e, u[0]


def predict(w1, w2, x, t: int, sch: Schedule) -> np.ndarray:
    """The AllReduce's result in sampling: the predicted noise for each row of x."""
    p, _ = partials(w1, w2, inputs(x, t, sch))
    return check_int32(p.sum(0), "AllReduce")


def ddim_step(x, e, t: int, sch: Schedule) -> np.ndarray:
    return check_int32(rshift(check_int32(sch.C1[t] * x + sch.C2[t] * e, "ddim"), 8), "x")


def sample(w1, w2, sch: Schedule, x: np.ndarray, trace: list | None = None) -> np.ndarray:
    """DDIM from x_T (Q8 (n, D)) to x_0; ``trace`` (a list) receives (t, e, x) after each step."""
    for t in range(sch.T, 0, -1):
        e = predict(w1, w2, x, t, sch)
        x = ddim_step(x, e, t, sch)
        if trace is not None:
            trace.append((t, e, x))
    return x
