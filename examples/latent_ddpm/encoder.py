"""The latent encoder: the top K principal components of the training images, whitened.

Principal directions are defined only up to sign, and each linear-algebra library picks its own; the convention here
fixes it (each direction's largest-magnitude entry is positive, the first such entry on a tie), so numpy, scipy or
torch give the same encoder and the Q8 latents the replay and the QwenGPUs read are the same integers.

>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(200, 6)) @ rng.normal(size=(6, 6))
>>> enc = Encoder.fit(x, 3)
>>> z = enc.encode(x)
>>> np.allclose(z.mean(0), 0), np.allclose(z.std(0), 1)
(True, True)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def fix_signs(vectors: np.ndarray) -> np.ndarray:
    """Columns flipped so that each column's largest-magnitude entry is positive (the first one, on a tie)."""
    v = np.array(vectors, dtype=np.float64)
    idx = np.argmax(np.abs(v), axis=0)
    signs = np.sign(v[idx, np.arange(v.shape[1])])
    signs[signs == 0] = 1.0
    return v * signs


@dataclass(frozen=True)
class Encoder:
    mean: np.ndarray        # (P,)
    components: np.ndarray  # (P, K), unit columns, signs fixed
    scale: np.ndarray       # (K,) the standard deviation along each component

    @classmethod
    def fit(cls, images: np.ndarray, k: int = 8) -> "Encoder":
        """PCA of the rows of ``images`` (n, P) through the covariance's eigendecomposition (numpy.linalg.eigh)."""
        x = np.asarray(images, np.float64).reshape(len(images), -1)
        if not 1 <= k <= x.shape[1]:
            raise ValueError(f"k={k} components: 1..{x.shape[1]} for {x.shape[1]} numbers per image")
        mean = x.mean(0)
        cov = (x - mean).T @ (x - mean) / len(x)
        vals, vecs = np.linalg.eigh(cov)
        order = np.argsort(vals)[::-1][:k]
        return cls(mean, fix_signs(vecs[:, order]), np.sqrt(vals[order]))

    def encode(self, images: np.ndarray) -> np.ndarray:
        x = np.asarray(images, np.float64).reshape(len(images), -1)
        return (x - self.mean) @ self.components / self.scale

    def decode_linear(self, z: np.ndarray) -> np.ndarray:
        """The PCA reconstruction (for comparison with the MLP decoder)."""
        return self.mean + (np.asarray(z) * self.scale) @ self.components.T
