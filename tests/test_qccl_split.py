"""split(color, key) and shrink(exclude_ranks) with one process per rank (python -m qccl.launch): the members meet in
the parent world's store, each process joins its rank of its color's new world (a gloo fabric of its own), and the
new communicators' results equal numpy's; the parent keeps working; a rank that asks for no color gets None, a rank
left out of shrink does not call it, and a member calling the other kind is refused on every rank."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import json, os, sys
import numpy as np
import qccl
n, r = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
comm = qccl.Communicator.init(n, r, qccl.get_unique_id())
out = {}
sub = comm.split(r % 2, -r)                           # evens and odds, ranked by descending parent rank
y = np.zeros(3, np.int32)
sub.allreduce(np.full(3, 10 ** r, np.int32), y)
out["split"] = [sub.rank, sub.nranks, y.tolist()]
part = comm.split(qccl.SPLIT_NOCOLOR if r == n - 1 else 0, r)
if part is None:
    out["nocolor"] = None
else:
    b = np.full(2, r, np.int32)
    part.broadcast(b, b, root=part.nranks - 1)
    out["nocolor"] = [part.rank, part.nranks, b.tolist()]
y2 = np.zeros(2, np.int32)
comm.allreduce(np.full(2, r + 1, np.int32), y2, "max")   # the parent after two splits
out["parent"] = y2.tolist()
try:
    comm.shrink([]) if r == 0 else comm.split(0, r)
except qccl.InvalidUsage as e:
    out["mismatch"] = str(e)
if r != 1:                                            # rank 1 is left out: it does not call shrink
    small = comm.shrink([1])
    z = np.zeros(2 * small.nranks, np.int32)
    small.allgather(np.full(2, r, np.int32), z)
    out["shrink"] = [small.rank, small.nranks, z.tolist()]
json.dump(out, open(sys.argv[1] + f".{r}", "w"))
"""


def test_split_and_shrink_across_processes(tmp_path):
    n = 4
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "qccl.launch", "-n", str(n), "--timeout", "200", str(script), str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=260)
    assert p.returncode == 0, p.stdout + p.stderr
    got = {r: json.loads(Path(f"{out}.{r}").read_text()) for r in range(n)}
    for r in range(n):
        same = [q for q in range(n) if q % 2 == r % 2]
        order = sorted(same, key=lambda q: -q)
        want = np.sum([np.full(3, 10 ** q, np.int32) for q in same], axis=0).tolist()
        assert got[r]["split"] == [order.index(r), len(same), want]
        if r == n - 1:
            assert got[r]["nocolor"] is None
        else:
            assert got[r]["nocolor"] == [r, n - 1, [n - 2, n - 2]]       # root: the last of ranks 0..n-2
        assert got[r]["parent"] == [n, n]
        assert "mismatched calls: communicator-creation call 2" in got[r]["mismatch"]
        assert "shrink over ranks [0, 1, 2, 3] on rank 0" in got[r]["mismatch"] or r == 0
        if r == 1:
            assert "shrink" not in got[r]
        else:
            stay = [q for q in range(n) if q != 1]
            assert got[r]["shrink"] == [stay.index(r), n - 1, np.repeat(stay, 2).tolist()]
