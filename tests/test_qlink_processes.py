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
# eight ranks: the ten basic calls in CI, every case in make verify (a minute on 2 cores)
RUNS = [(1, 1, "wide"), (2, 1, "wide+big"), (3, 4, "wide"), (4, 1, "basic"), (8, 8, "basic"),
        pytest.param(8, 8, "wide", marks=pytest.mark.slow)]


@pytest.mark.parametrize("n,burst,cases", RUNS, ids=[f"{n}ranks-burst{b}-{c}" for n, b, c in
                                                     [(1, 1, "wide"), (2, 1, "wide+big"), (3, 4, "wide"),
                                                      (4, 1, "basic"), (8, 8, "basic"), (8, 8, "wide")]])
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


def test_remote_deadlock_lines_carry_kernel_and_flag_names(tmp_path):
    """A one-slot FIFO deadlocks the ring: every process reports every rank's kernel, flag name, value and awaited
    value, the same lines as the one-process run of the same call."""
    import numpy as np

    import qccl
    script = tmp_path / "deadlock.py"
    # Both ranks share the launcher's stdout: one os.write of under PIPE_BUF bytes is atomic, print's pieces interleave.
    script.write_text("import os, numpy as np, qccl\nrank, n = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])\n"
                      "c = qccl.Communicator.init(n, rank, qccl.get_unique_id(), config={'fifo_slots': 1})\n"
                      "try:\n    c.allreduce(np.arange(16, dtype=np.int32), np.zeros(16, np.int32), algo='ring')\n"
                      "except qccl.DeadlockError as e:\n    os.write(1, f'rank {rank} says {e.message!r}\\n'.encode())\n")
    r = subprocess.run([sys.executable, "-m", "qccl.launch", "-n", "2", "--timeout", "200", str(script)], cwd=ROOT,
                       capture_output=True, text=True, timeout=240)
    comms = qccl.Communicator.init_all(2, config={"fifo_slots": 1})
    with pytest.raises(qccl.DeadlockError) as e:
        with qccl.group():
            for c in comms:
                c.allreduce(np.arange(16, dtype=np.int32), np.zeros(16, np.int32), algo="ring")   # auto: multicast
    local = e.value.message.split("\n")[1:]
    assert all("kernel prim" in line and "(ring.head)" in line for line in local)
    said = [line for line in r.stdout.splitlines() if " says " in line]
    assert len(said) == 2, r.stdout + r.stderr
    for line in said:
        text = eval(line.split(" says ", 1)[1])         # noqa: S307  (the repr the script printed)
        assert text.split("\n")[1:] == local, (text, local)
