"""Across processes: one rank per process over a gloo group, started by ``python -m qccl.launch``. Results equal
numpy and torch.distributed's gloo, and every rank's token stream equals the one-process run of the same calls."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


# (ranks, records per exchange, cases): "basic" is ten calls; "wide" every collective, op, dtype, place, algorithm and
# every root / peer for that many ranks, counts 0..100; "wide+big" adds an AllReduce of 1000 words (qccl_bench.dist_check)
RUNS = [(1, 1, "wide"), (2, 1, "wide+big"), (3, 4, "wide"), (4, 1, "basic"), (8, 8, "wide")]


@pytest.mark.parametrize("n,burst,cases", RUNS, ids=[f"{n}ranks-burst{b}-{c}" for n, b, c in RUNS])
def test_processes_match_numpy_gloo_and_one_process(tmp_path, n, burst, cases):
    from qccl_bench.dist_check import in_process
    out = tmp_path / "rank"
    r = subprocess.run([sys.executable, "-m", "qccl.launch", "-n", str(n), "--timeout", "240", "-m", "qccl_bench.dist_check",
                        "--json", str(out), "--burst", str(burst), "--cases", cases], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    reports = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(n)]
    for rep in reports:
        assert all(c["numpy"] for c in rep["cases"]), rep["cases"]
        assert all(c["gloo"] is not False for c in rep["cases"]), rep["cases"]
        assert n == 1 or any(c["gloo"] for c in rep["cases"])
    local = in_process(n, burst, cases)
    assert local["ok"]
    assert [rep["tokens"] for rep in reports] == local["tokens"], "the same token streams either way"


def test_launcher_reports_a_failing_rank(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    r = subprocess.run([sys.executable, "-m", "qccl.launch", "-n", "2", str(script)], cwd=ROOT, timeout=60)
    assert r.returncode == 3
