"""qccl-perf: its JSON held against properties derived independently (numpy results, nccl-tests' bus factors, the
communicators' own token counts), a real wrong value making it fail, and one process per rank with gloo beside."""
from __future__ import annotations

import json

import numpy as np
import pytest

from qccl_bench import perf
from qccl_bench.harness import run
from qwengpu import isa

N = 3
FACTOR = {"all_reduce": 2 * (N - 1) / N, "all_gather": (N - 1) / N, "reduce_scatter": (N - 1) / N,
          "alltoall": (N - 1) / N, "broadcast": 1.0, "reduce": 1.0, "sendrecv": 1.0}


def _perf(tmp_path, *args):
    path = tmp_path / "out.json"
    rc = perf.main([*args, "-J", str(path), "-q"])
    return rc, json.loads(path.read_text())


def test_every_collective(tmp_path, capsys):
    rc, doc = _perf(tmp_path, "all", "-b", "16", "-e", "32", "-g", str(N), "--seed", "5")
    text = capsys.readouterr().out
    assert rc == 0 and doc["out_of_bounds"] == 0 and "# Out of bounds values : 0 OK" in text
    assert doc["nranks"] == N and sorted(doc["collectives"]) == sorted(FACTOR)
    rows = doc["results"]
    halves = []
    for row in rows:
        name = row["collective"]
        assert row["size"] == row["count"] * 4 and row["type"] == "int32"
        per_rank = name in ("all_gather", "reduce_scatter", "alltoall")
        assert row["count"] == ((row["size"] // 4) // N * N if per_rank else row["size"] // 4)
        assert row["count"] in ((16 // 4 // N * N, 32 // 4 // N * N) if per_rank else (4, 8))
        assert row["root"] == (0 if name in ("broadcast", "reduce") else -1)
        assert row["redop"] == ("sum" if name in ("all_reduce", "reduce_scatter", "reduce") else "none")
        assert (row["in_place"] is None) == (name in ("sendrecv", "alltoall"))
        for h in (row["out_of_place"], row["in_place"]):
            if h is None:
                continue
            halves.append(h)
            assert h["nwrong"] == 0 and h["time"] > 0 and h["tokens_per_rank"] > 0 and h["launches_per_rank"] >= 1
            assert h["alg_bw"] == pytest.approx(row["size"] / (h["time"] * 1e3), rel=1e-9)   # GB/s from B and us
            assert h["bus_bw"] == pytest.approx(h["alg_bw"] * FACTOR[name], rel=1e-9)
    assert doc["average_bus_bandwidth"] == pytest.approx(np.mean([h["bus_bw"] for h in halves]), rel=1e-9)
    for line in ("# all_reduce", "#wrong", "busbw", "tokens", "# Avg bus bandwidth"):
        assert line in text


def test_tokens_are_the_communicators_counts(tmp_path):
    """The first call on fresh communicators: the same call through the harness counts the same tokens per rank."""
    for name, kind in (("all_reduce", "allreduce"), ("all_gather", "allgather")):
        rc, doc = _perf(tmp_path, name, "-b", "24", "-e", "24", "-g", str(N), "--seed", "5")
        ref = run(N, kind, 6 if kind == "allreduce" else 2, seed=5)
        h = doc["results"][0]["out_of_place"]
        assert rc == 0 and (h["tokens_per_rank"], h["launches_per_rank"]) == (max(ref.tokens), max(ref.launches))


def test_all_ops_types_roots(tmp_path):
    rc, doc = _perf(tmp_path, "reduce", "broadcast", "-b", "8", "-e", "8", "-g", str(N), "-o", "all", "-d", "all",
                    "-r", "all", "--algo", "auto")
    assert rc == 0 and doc["algo"] == "auto"
    reduce_rows = [(r["type"], r["redop"], r["root"]) for r in doc["results"] if r["collective"] == "reduce"]
    assert sorted(reduce_rows) == sorted((t, o, root) for t in ("int32", "uint32")
                                         for o in ("sum", "prod", "max", "min", "avg") for root in range(N))
    bcast = [(r["type"], r["root"]) for r in doc["results"] if r["collective"] == "broadcast"]
    assert sorted(bcast) == sorted((t, root) for t in ("int32", "uint32") for root in range(N))


def test_a_row_names_the_algorithm_its_calls_ran(tmp_path, capsys):
    """A row ends with the algorithm its calls ran: the one the benchmark names, or under auto the tuner's choice,
    which writes no more tokens than either algorithm named; sendrecv has none."""
    tokens = {}
    for algo in ("ring", "multicast", "auto"):
        rc, doc = _perf(tmp_path, "all_reduce", "-b", "64", "-e", "64", "-g", str(N), "--algo", algo)
        halves = [doc["results"][0][h] for h in ("out_of_place", "in_place")]
        assert rc == 0 and all(h["algo"] == halves[0]["algo"] for h in halves)
        chosen = halves[0]["algo"]
        assert f"algo {chosen}" in capsys.readouterr().out.splitlines()[-4]
        assert chosen.split(":")[0] == algo if algo != "auto" else chosen.split(":")[0] in ("ring", "multicast")
        tokens[algo] = halves[0]["tokens_per_rank"]
    assert tokens["auto"] <= min(tokens["ring"], tokens["multicast"])
    rc, doc = _perf(tmp_path, "sendrecv", "-b", "16", "-e", "16", "-g", str(N))
    assert rc == 0 and "algo" not in doc["results"][0]["out_of_place"]


def test_a_wrong_value_fails_the_run(tmp_path, monkeypatch, capsys):
    """The machine's adder swapped for XOR: the devices really produce other numbers, and the benchmark says so."""
    monkeypatch.setitem(isa.OPS, "add", (isa.OPS["add"][0], lambda a, b: a ^ b))
    rc, doc = _perf(tmp_path, "all_reduce", "-b", "16", "-e", "16", "-g", str(N))
    assert rc == 1 and doc["out_of_bounds"] > 0
    assert doc["results"][0]["out_of_place"]["nwrong"] > 0
    assert "FAILED" in capsys.readouterr().out


def test_bad_arguments_name_the_value():
    with pytest.raises(SystemExit, match="datatype 'float64' is not supported by transport qlink"):
        perf.main(["all_reduce", "-d", "float64"])
    with pytest.raises(SystemExit, match="unknown collective 'all_things'"):
        perf.main(["all_things"])
    with pytest.raises(SystemExit, match="root 5 is outside 0..1"):
        perf.main(["broadcast", "-g", "2", "-r", "5"])


def test_one_process_per_rank_with_gloo(tmp_path):
    pytest.importorskip("torch.distributed")
    path = tmp_path / "procs.json"
    rc = perf.main(["all_reduce", "-b", "16", "-e", "16", "-g", "2", "--vs", "gloo", "-J", str(path),
                    "-q", "--timeout", "300"])
    doc = json.loads(path.read_text())
    assert rc == 0 and doc["processes"] == 2 and doc["out_of_bounds"] == 0
    for row in doc["results"]:
        assert row["out_of_place"]["gloo_time"] > 0 and row["out_of_place"]["tokens_per_rank"] > 0
    ar = doc["results"][0]
    assert ar["out_of_place"]["tokens_per_rank"] == max(run(2, "allreduce", 4, seed=0).tokens)
