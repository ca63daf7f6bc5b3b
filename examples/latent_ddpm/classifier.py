"""The judge of the samples: an MNIST classifier (784 -> 256 -> 10 MLP, torch on the CPU). A sample is *recognised*
when the classifier gives one digit a probability of at least ``THRESHOLD``.

>>> import numpy as np
>>> clf = train_classifier(np.zeros((20, 784)), np.arange(20) % 10, epochs=1, seed=0)
>>> probabilities(clf, np.zeros((3, 784))).shape
(3, 10)
"""
from __future__ import annotations

import numpy as np

THRESHOLD = 0.9


def train_classifier(images: np.ndarray, labels: np.ndarray, epochs: int = 3, seed: int = 0, batch: int = 128):
    import torch
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    x = torch.tensor(np.asarray(images).reshape(len(images), -1), dtype=torch.float32)
    y = torch.tensor(np.asarray(labels), dtype=torch.long)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), batch):
            idx = perm[i:i + batch]
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net.eval()


def probabilities(net, images: np.ndarray) -> np.ndarray:
    import torch
    with torch.no_grad():
        logits = net(torch.tensor(np.asarray(images).reshape(len(images), -1), dtype=torch.float32))
        return torch.softmax(logits, dim=1).numpy().astype(np.float64)


def accuracy(net, images, labels) -> float:
    return float((probabilities(net, images).argmax(1) == np.asarray(labels)).mean())


def recognised(net, images: np.ndarray, threshold: float = THRESHOLD) -> float:
    """The share of images to which the classifier gives some digit probability >= threshold."""
    return float((probabilities(net, images).max(1) >= threshold).mean())
