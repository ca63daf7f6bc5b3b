"""torch float32 on backend "qccl": DistributedDataParallel trains a small model (qccl_bench.ddp_float) under torchrun,
every gradient AllReduce a float32 sum on the QwenGPUs, and ends with the parameters of the same run on gloo (up to
float32 rounding: gloo adds in its own order; on 2 ranks a sum has one order, so the parameters are equal bit for bit).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


def train(tmp_path, n: int, backend: str, steps: int = 4) -> list[dict]:
    out = tmp_path / backend
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
           "--log-dir", str(tmp_path / f"torchrun-{backend}"),       # not a new /tmp directory a run
           "-m", "qccl_bench.ddp_float", "--backend", backend, "--steps", str(steps), "--json", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(n)]


@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.slow)])     # 3 ranks: make verify
def test_ddp_float32_on_qccl_equals_gloo(tmp_path, n):
    q, g = train(tmp_path, n, "qccl"), train(tmp_path, n, "gloo")
    first = np.array(q[0]["params"], np.float32)
    for rank in range(n):
        pq, pg = np.array(q[rank]["params"], np.float32), np.array(g[rank]["params"], np.float32)
        assert np.array_equal(pq, first), "every replica holds the same parameters"
        np.testing.assert_allclose(pq, pg, rtol=1e-5, atol=1e-6)
        if n == 2:
            assert np.array_equal(pq.view(np.uint32), pg.view(np.uint32))
        np.testing.assert_allclose(q[rank]["losses"], g[rank]["losses"], rtol=1e-5)
    # the run trained: the loss went down on every rank
    assert all(r["losses"][-1] < r["losses"][0] for r in q)
    # ranks had different batches, so gradients were really mixed: a model trained on rank 0's data alone differs
    assert not np.allclose(first, np.array(_alone(), np.float32))


def _alone() -> list[float]:
    """The same training, one process, rank 0's batches only (no reduction)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100)
    for _ in range(4):
        x = torch.randn(8, 3, generator=g)
        y = (x.sum(1, keepdim=True) > 0).float()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
