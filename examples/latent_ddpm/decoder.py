"""The decoder, latent (8) -> 128 -> 784 pixels, a torch MLP trained on the CPU on (encoded image, image) pairs.
It never runs on the QwenGPUs; the page (web/) runs the same weights in JavaScript.

>>> import numpy as np
>>> dec = train_decoder(np.zeros((16, 8)), np.zeros((16, 784)), epochs=1, seed=0)
>>> decode(dec, np.zeros((2, 8))).shape
(2, 784)
"""
from __future__ import annotations

import numpy as np


def _torch():
    import torch
    return torch


def make(latent: int = 8, hidden: int = 128, pixels: int = 784):
    torch = _torch()
    return torch.nn.Sequential(torch.nn.Linear(latent, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, pixels),
                               torch.nn.Sigmoid())


def train_decoder(z: np.ndarray, images: np.ndarray, epochs: int = 4, seed: int = 0, batch: int = 128):
    """Fit the MLP to map latents to images (binary cross-entropy on pixels in [0, 1]) with Adam."""
    torch = _torch()
    torch.manual_seed(seed)
    net = make(z.shape[1], 128, images.reshape(len(images), -1).shape[1])
    zt = torch.tensor(np.asarray(z), dtype=torch.float32)
    xt = torch.tensor(np.asarray(images).reshape(len(images), -1), dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(zt), generator=gen)
        for i in range(0, len(zt), batch):
            idx = perm[i:i + batch]
            loss = torch.nn.functional.binary_cross_entropy(net(zt[idx]), xt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net.eval()


def decode(net, z: np.ndarray) -> np.ndarray:
    torch = _torch()
    with torch.no_grad():
        return net(torch.tensor(np.asarray(z), dtype=torch.float32)).numpy().astype(np.float64)


def weights(net) -> dict:
    """The decoder's arrays (float32), named for the page: W1 (8, 128), b1, W2 (128, 784), b2."""
    l1, l2 = net[0], net[2]
    return {"W1": l1.weight.detach().numpy().T.copy(), "b1": l1.bias.detach().numpy().copy(),
            "W2": l2.weight.detach().numpy().T.copy(), "b2": l2.bias.detach().numpy().copy()}
