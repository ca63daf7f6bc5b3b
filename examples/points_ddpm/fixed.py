"""Q8 fixed point and the diffusion schedule as integers: the one definition both diffusion runs, their kernels'
launch arguments, the numpy replay and the web page use.

Q8: 1.0 = 256. ``rshift(v, m) = (v + 2^(m-1)) >> m``, an arithmetic shift, ties toward +infinity (as the kernels).

The schedule is DDPM's variance-preserving one with T noise levels and linear betas. Its integers are
*constants of the program*, computed once from float64 and rounded, like any hyperparameter:

    A[t] = round(256 sqrt(abar_t))          x_t = rshift(A[t] x_0 + S[t] eps, 8)
    S[t] = round(256 sqrt(1 - abar_t))
    F[t] = round(256 t / T)                 the noise-level input of the denoiser
    C1[t], C2[t]                            DDIM (eta = 0) from t to t - 1: x_{t-1} = rshift(C1[t] x_t + C2[t] e, 8)

>>> s = schedule(20)
>>> int(s.A[0]), int(s.S[0]), len(s.A)
(256, 0, 21)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ONE = 256           # Q8
INT32 = (-(1 << 31), (1 << 31) - 1)


def rshift(v, m: int):
    """Round-to-nearest arithmetic right shift of int64 numpy values (or a Python int) by ``m`` >= 1 bits.

    >>> int(rshift(384, 8)), int(rshift(-384, 8)), int(rshift(383, 8))
    (2, -1, 1)
    """
    if m < 1:
        raise ValueError(f"rshift by m={m}: the shift must be at least 1 bit")
    return (v + (1 << (m - 1))) >> m


def check_int32(v, what: str):
    """The kernels compute in int32 and would wrap; the replay computes in int64 and refuses to leave int32's range
    instead, so a difference can never hide behind a wrap-around."""
    a = np.asarray(v)
    if a.size and (a.min() < INT32[0] or a.max() > INT32[1]):
        raise OverflowError(f"{what}: value {int(a.min()) if a.min() < INT32[0] else int(a.max())} leaves int32")
    return v


def q8(x) -> np.ndarray:
    """Float values to Q8 integers (round half to even, numpy's rounding), as int64."""
    return np.rint(np.asarray(x, dtype=np.float64) * ONE).astype(np.int64)


@dataclass(frozen=True)
class Schedule:
    T: int
    abar: np.ndarray        # float64, abar[0] = 1
    A: np.ndarray           # int64 Q8, index t = 0..T
    S: np.ndarray
    F: np.ndarray
    C1: np.ndarray          # index t = 1..T (C1[0] unused, 0)
    C2: np.ndarray

    def ddim_float(self, t: int) -> tuple[float, float]:
        """The float64 DDIM coefficients from t to t - 1 (the float reference uses these)."""
        a_t, a_p = self.abar[t], self.abar[t - 1]
        c1 = np.sqrt(a_p / a_t)
        return c1, np.sqrt(1 - a_p) - c1 * np.sqrt(1 - a_t)


def schedule(T: int = 20, beta_start: float = 1e-3, beta_end: float = 0.35) -> Schedule:
    """The T-level schedule (linear betas). ``T`` 1..64."""
    if not 1 <= T <= 64:
        raise ValueError(f"T={T}: the schedule has 1..64 noise levels")
    betas = np.linspace(beta_start, beta_end, T, dtype=np.float64)
    abar = np.concatenate([[1.0], np.cumprod(1.0 - betas)])
    A, S = q8(np.sqrt(abar)), q8(np.sqrt(1.0 - abar))
    F = np.rint(np.arange(T + 1) * ONE / T).astype(np.int64)
    C1, C2 = np.zeros(T + 1, np.int64), np.zeros(T + 1, np.int64)
    for t in range(1, T + 1):
        c1 = np.sqrt(abar[t - 1] / abar[t])
        C1[t] = q8(c1)
        C2[t] = q8(np.sqrt(1.0 - abar[t - 1]) - c1 * np.sqrt(1.0 - abar[t]))
    return Schedule(T, abar, A, S, F, C1, C2)
