"""The data loader's fixed encoders: each image becomes 32 Q8 features (the last real one is a constant 1.0, the
bias), rank r holding features 8r..8r+7. Computed once per data set in float64, before training; the machines only
ever see the Q8 integers.

- ``pool``: the central 20x20 pixels average-pooled to 5x5 (25 features), the bias, six zeros.
- ``pca``: the top 31 principal components of the training images, whitened (unit variance on the training set),
  each component's sign fixed so that its largest-magnitude loading is positive (any eigensolver then gives the same
  encoder), and the bias.

    >>> enc = fit("pool", images); enc(images[:2]).shape
    (2, 32)
"""
from __future__ import annotations

import numpy as np

import qccl
from examples.data import q8

FEATURES = 32
VARIANTS = ("pool", "pca")


def pool(images: np.ndarray) -> np.ndarray:
    centre = images[:, 4:24, 4:24].reshape(len(images), 5, 4, 5, 4).mean(axis=(2, 4)).reshape(len(images), 25)
    return np.concatenate([centre, np.ones((len(images), 1)), np.zeros((len(images), 6))], axis=1)


def fit(variant: str, train_images: np.ndarray):
    """-> encode(images) giving float64 features (n, 32); ``q8(encode(x))`` is what the host copies in."""
    if variant == "pool":
        return pool
    if variant != "pca":
        raise qccl.InvalidArgument(f"feature variant {variant!r}: the variants are {', '.join(VARIANTS)}")
    flat = train_images.reshape(len(train_images), -1)
    mean = flat.mean(axis=0)
    cov = np.cov(flat - mean, rowvar=False)
    values, vectors = np.linalg.eigh(cov)
    top = np.argsort(values)[::-1][:FEATURES - 1]
    values, vectors = values[top], vectors[:, top]
    signs = np.sign(vectors[np.abs(vectors).argmax(axis=0), np.arange(vectors.shape[1])])
    vectors = vectors * signs

    def encode(images: np.ndarray) -> np.ndarray:
        z = (images.reshape(len(images), -1) - mean) @ vectors / np.sqrt(values)
        return np.concatenate([z, np.ones((len(images), 1))], axis=1)
    return encode


def encode_q8(variant: str, train_images: np.ndarray, *sets) -> list[np.ndarray]:
    encode = fit(variant, train_images)
    return [q8(encode(s)) for s in sets]
