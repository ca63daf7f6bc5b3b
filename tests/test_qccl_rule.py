"""The rule: the host never computes a payload value. If the machine's adder is swapped for XOR, a qccl "sum" becomes
an XOR-reduction, bit for bit: every number came out of the devices, none from Python."""
from __future__ import annotations

from functools import reduce

import numpy as np
import pytest

import qccl
from qccl.transport import Launch, Read, Write
from qwengpu import isa


@pytest.mark.parametrize("kind,algo", [("allreduce", "ring"), ("allreduce", "multicast"), ("reduce_scatter", "ring"),
                                       ("reduce", "ring")])
def test_sums_come_from_the_machine(monkeypatch, kind, algo):
    monkeypatch.setitem(isa.OPS, "add", (isa.OPS["add"][0], lambda a, b: a ^ b))
    n, count = 4, 37
    comms = qccl.Communicator.init_all(n)
    rng = np.random.default_rng(9)
    x = [rng.integers(-2**31, 2**31, count * n, dtype=np.int64).astype(np.int32) for _ in range(n)]
    size = count if kind == "reduce_scatter" else count * n
    y = [np.zeros(size, np.int32) for _ in range(n)]
    with qccl.group():
        for c in comms:
            if kind == "allreduce":
                c.allreduce(x[c.rank], y[c.rank], qccl.SUM, algo=algo)
            elif kind == "reduce_scatter":
                c.reduce_scatter(x[c.rank], y[c.rank], qccl.SUM)
            else:
                c.reduce(x[c.rank], y[c.rank], qccl.SUM, root=2)
    xor = reduce(np.bitwise_xor, x)
    want = {"allreduce": [xor] * n, "reduce_scatter": [xor[r * count:(r + 1) * count] for r in range(n)],
            "reduce": [y[0], y[1], xor, y[3]]}[kind]
    assert all(np.array_equal(v, w) for v, w in zip(y, want))
    assert not np.array_equal(xor, np.sum(np.stack(x), axis=0, dtype=np.int32))
    assert kind != "reduce" or not y[0].any(), "a non-root's output is not touched"


def test_host_ops_only_copy_words_and_launch():
    """A schedule is made of word copies and launches; a copy moves the words it names, unchanged."""
    comms = qccl.Communicator.init_all(3)
    seen = []
    world = comms[0].world
    orig = world.engine.submit

    def spy(rank, ops):
        seen.extend(ops)
        orig(rank, ops)

    world.engine.submit = spy
    x = [np.arange(10, dtype=np.int32) * (r + 1) for r in range(3)]
    y = [np.zeros(10, np.int32) for _ in range(3)]
    with qccl.group():
        for c in comms:
            c.allreduce(x[c.rank], y[c.rank], "prod")
    assert seen and {type(op) for op in seen} <= {Write, Read, Launch}
    assert all(op.count <= 8 for op in seen if isinstance(op, (Write, Read)))
    assert all(y[0].tolist() == [int(v) for v in np.prod(np.stack(x), axis=0, dtype=np.int32)] for _ in [0])


def test_payload_words_are_only_copied_in_the_source():
    """Static check: in qccl and the transports, a buffer's words are touched only by the two copies of the host."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    allowed = [re.compile(r"dev\.write\([^,]+, op\.source\.words\[op\.start:op\.start \+ op\.count\]\)"),
               re.compile(r"op\.dest\.words\[op\.start:op\.start \+ op\.count\] = dev\.read\(op\.address, op\.count\)"),
               re.compile(r'^\s*"""')]
    uses = []
    for path in list((root / "qccl").rglob("*.py")) + list((root / "transports").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if ".words" in line and "def words" not in line and "return self.array.view" not in line:
                if not any(p.search(line) for p in allowed):
                    uses.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert not uses, "payload words touched outside the host's copies:\n" + "\n".join(uses)
