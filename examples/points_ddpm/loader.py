"""The data loader of both diffusion runs: per training step one data vector, a noise level and the noise, drawn
from one seeded generator, as float64 (for the float reference) and as Q8 integers (for the QwenGPUs and the replay).

>>> d = Draws.make(np.random.default_rng(0), np.zeros((5, 2)), steps=3, T=20)
>>> d.x0.shape, d.t.shape, d.eps_q.dtype
((3, 2), (3,), dtype('int64'))
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fixed import q8


@dataclass(frozen=True)
class Draws:
    x0: np.ndarray          # (steps, D) float64 data
    t: np.ndarray           # (steps,) noise levels 1..T
    eps: np.ndarray         # (steps, D) float64 N(0, 1)

    @classmethod
    def make(cls, rng: np.random.Generator, data: np.ndarray, steps: int, T: int) -> "Draws":
        """``steps`` draws: a row of ``data`` (uniformly, with replacement), a level, the noise."""
        idx = rng.integers(0, len(data), steps)
        t = rng.integers(1, T + 1, steps)
        eps = rng.standard_normal((steps, data.shape[1]))
        return cls(np.asarray(data, np.float64)[idx], t, eps)

    @property
    def x0_q(self) -> np.ndarray:
        return q8(self.x0)

    @property
    def eps_q(self) -> np.ndarray:
        return q8(self.eps)
