"""DistributedDataParallel trains a small float32 model on one backend; each rank writes its final parameters:
``torchrun --standalone --nproc-per-node 2 -m qccl_bench.ddp_float --backend qccl --json OUT``.

On "qccl" every gradient AllReduce runs on the QwenGPUs (float32 sum by qccl/kernels/fprim.cu, software floating
point); on "gloo" the same program is the reference. Every rank trains on its own seeded batch, so the reduced
gradients really mix the ranks' values. tests/test_torch_float.py holds the two runs against each other.
"""
from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="qccl", choices=("qccl", "gloo"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    if a.backend == "qccl":
        import qccl.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(a.steps):
        x = torch.randn(8, 3, generator=g)
        y = (x.sum(1, keepdim=True) > 0).float()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    with open(f"{a.json}.{rank}", "w") as f:
        json.dump({"params": params.tolist(), "losses": losses, "world": n, "pid": os.getpid()}, f)
    dist.destroy_process_group()
    if a.backend == "gloo":
        from qccl_bench.torch_check import end_reference_run
        end_reference_run(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
