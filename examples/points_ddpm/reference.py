"""The same split denoiser in float64: trained on the same draws (x0, t, eps as floats), the same schedule, the same
initial parameters (Q8 / 256) and learning rate 2^-L. It is the bound the fixed-point model is compared with; it never
produces a result of the QwenGPU run.

>>> from examples.points_ddpm.fixed import schedule
>>> w1, w2 = np.zeros((4, 4, 8)), np.zeros((4, 9, 2))
>>> float(abs(FloatDenoiser(w1, w2).predict(np.zeros((3, 2)), 5, schedule(20))).max())
0.0
"""
from __future__ import annotations

import numpy as np

from .fixed import Schedule


class FloatDenoiser:
    def __init__(self, w1: np.ndarray, w2: np.ndarray):
        self.w1, self.w2 = np.asarray(w1, np.float64).copy(), np.asarray(w2, np.float64).copy()

    @classmethod
    def from_q8(cls, w1, w2) -> "FloatDenoiser":
        return cls(np.asarray(w1) / 256.0, np.asarray(w2) / 256.0)

    def _forward(self, x, t, sch: Schedule):
        n = x.shape[0]
        u = np.concatenate([x, np.full((n, 1), t / sch.T)], axis=1)
        nin = u.shape[1]
        z = np.einsum("ni,rik->rnk", u, self.w1[:, :nin]) + self.w1[:, nin][:, None, :]
        h = np.maximum(z, 0)
        hr = self.w2.shape[1] - 1
        return u, z, h, np.einsum("rnk,rkj->nj", h, self.w2[:, :hr]) + self.w2[:, hr].sum(0)

    def predict(self, x, t: int, sch: Schedule) -> np.ndarray:
        return self._forward(np.asarray(x, np.float64), t, sch)[3]

    def train_step(self, x0, t: int, eps, sch: Schedule, L: int) -> float:
        """One SGD step on 1/2 |prediction - eps|^2; returns that loss."""
        xt = np.sqrt(sch.abar[t]) * x0 + np.sqrt(1 - sch.abar[t]) * eps
        u, z, h, y = self._forward(xt[None], t, sch)
        e = y[0] - eps
        lr = 2.0 ** -L
        hr, nin = self.w2.shape[1] - 1, u.shape[1]
        d = np.where(z[:, 0] > 0, self.w2[:, :hr] @ e, 0.0)          # (R, Hr), with the old W2
        self.w2[:, :hr] -= lr * h[:, 0][:, :, None] * e[None, None, :]
        self.w2[:, hr] -= lr * e[None, :]
        self.w1[:, :nin] -= lr * u[0][None, :, None] * d[:, None, :]
        self.w1[:, nin] -= lr * d
        return 0.5 * float(e @ e)

    def sample(self, sch: Schedule, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        for t in range(sch.T, 0, -1):
            c1, c2 = sch.ddim_float(t)
            x = c1 * x + c2 * self.predict(x, t, sch)
        return x
