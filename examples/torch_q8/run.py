"""A 2-8-1 ReLU MLP (32 Q8 parameters) learns XOR, data parallel over torch.distributed's "qccl" backend.

    torchrun --standalone --nproc-per-node 4 -m examples.torch_q8 --steps 30     (from the repository root)

Every process is one rank with two QwenGPUs: the communicator's (inside the "qccl" process group) and a compute one.
A step: the host copies the rank's two half-batches into the compute QwenGPU, whose CUDA kernels (examples/xor_ddp's
xor.cu) run the forward, the loss and the backward; the 32 gradient words come back as an int32 torch tensor;
``dist.all_reduce`` sums them on the QwenGPUs over QLink; the sums go back in and the SGD kernel updates the
parameters. Rank 0's initial parameters reach every rank through ``dist.broadcast``. The host only copies words: every
number comes out of the machines, and xor_ddp's numpy replay checks the gradients, loss and parameters of every step.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import torch.distributed as dist

import qccl.torch  # noqa: F401  (registers the "qccl" backend)
from examples.xor_ddp import replay as R
from examples.xor_ddp.run import BATCH, DATASET, HALF, KERNELS, PARAMS
from qwengpu import Device


class Replica:
    """This rank's compute QwenGPU: parameters, gradients, a half-batch and the loss word, and xor.cu's kernels."""

    def __init__(self, backend: str):
        self.dev = Device(backend=backend)
        self.p, self.g = self.dev.alloc(PARAMS), self.dev.alloc(PARAMS)
        self.b, self.loss = self.dev.alloc(3 * HALF), self.dev.alloc(1)
        self.k = {name: self.dev.load_kernel(str(k.source), k.name) for name, k in KERNELS.items()}

    def set_params(self, words: torch.Tensor) -> None:
        self.dev.write(self.p, words.numpy())

    def params(self) -> np.ndarray:
        return np.asarray(self.dev.read(self.p, PARAMS), np.int32)

    def gradients(self, points: np.ndarray) -> tuple[torch.Tensor, int]:
        """Forward, loss and backward of two half-batches; -> (32 gradient words, loss word), read from the machine."""
        d = self.dev
        d.write(self.g, np.zeros(PARAMS, np.int32))
        d.write(self.loss, np.zeros(1, np.int32))
        for half in (points[:HALF], points[HALF:]):
            d.write(self.b, np.concatenate([R.X[half, 0], R.X[half, 1], -R.T[half]]).astype(np.int32))
            d.launch(self.k["xor_forward"], 8, [self.p, self.b, HALF])
            d.launch(self.k["xor_loss"], HALF, [self.b, self.loss])
            d.launch(self.k["xor_backward"], HALF, [self.p, self.b, self.g])
        grads = torch.from_numpy(np.asarray(d.read(self.g, PARAMS), np.int32).copy())
        return grads, int(d.read(self.loss, 1)[0])

    def sgd(self, summed: torch.Tensor) -> None:
        self.dev.write(self.g, summed.numpy())
        self.dev.launch(self.k["xor_sgd"], PARAMS, [self.p, self.g])

    def correct(self) -> int:
        """XOR points the machine classifies right (its own count word)."""
        every = np.arange(4)
        self.dev.write(self.b, np.concatenate([R.X[every, 0], R.X[every, 1], -R.T[every]]).astype(np.int32))
        self.dev.write(self.loss, np.zeros(1, np.int32))
        self.dev.launch(self.k["xor_forward"], 8, [self.p, self.b, HALF])
        self.dev.launch(self.k["xor_correct"], HALF, [self.b, self.loss])
        return int(self.dev.read(self.loss, 1)[0])


def minibatch(seed: int, step: int, rank: int, nranks: int) -> np.ndarray:
    """The rank's BATCH sample indices for this step, drawn from its shard of the data set."""
    points = np.random.default_rng(seed).integers(0, 4, DATASET)
    shard = points[rank * DATASET // nranks:(rank + 1) * DATASET // nranks]
    return shard[np.random.default_rng([seed, step, rank]).choice(len(shard), BATCH, replace=False)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="interpreter", help="the compute QwenGPU's qwengpu backend")
    a = ap.parse_args(argv)
    dist.init_process_group("qccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    replica = Replica(a.backend)
    params = torch.from_numpy(R.init_params(a.seed).astype(np.int32)) if rank == 0 else \
        torch.zeros(PARAMS, dtype=torch.int32)
    dist.broadcast(params, 0)                           # DDP's first step: every replica starts from rank 0's
    replica.set_params(params)
    want = R.init_params(a.seed)                        # the replay (a check, never the path of a value)
    for step in range(a.steps):
        grads, loss = replica.gradients(minibatch(a.seed, step, rank, n))
        summed = grads.clone()
        dist.all_reduce(summed)                         # summed by the QwenGPUs over QLink
        replica.sgd(summed)
        # the replay of every rank's step: gradients, the sum, the parameters after SGD
        per_rank = [R.wrap(sum(R.gradients(want, R.X[h], R.T[h]) for h in (b[:HALF], b[HALF:])))
                    for b in (minibatch(a.seed, step, r, n) for r in range(n))]
        want = R.step(want, R.wrap(sum(per_rank)))
        if not (np.array_equal(grads.numpy(), per_rank[rank]) and np.array_equal(replica.params(), want)):
            print(f"rank {rank}: step {step} differs from the replay", file=sys.stderr, flush=True)
            return 1
        if rank == 0 and (step % 10 == 0 or step == a.steps - 1):
            print(f"step {step}: loss word (Q8, rank 0's batch) {loss}", flush=True)
    correct = replica.correct()
    if rank == 0:
        print(f"{a.steps} steps on {n} ranks, every step equal to the replay on every rank; XOR points right: "
              f"{correct}/4", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
