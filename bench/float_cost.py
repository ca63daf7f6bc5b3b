"""What a float reduction costs on QwenGPUs, beside int32: tokens the model writes per element.

``python -m qccl_bench.float_cost [--ranks 4] [--count 64] [--json OUT]``

Two figures per dtype and op, on the interpreter (a token is a token on every backend: the circuit and the model
write the same stream):
  combine   one reduce step's combine of a 4-word chunk on one device (int32: prim's recvReduceSend data launch;
            floats: fprim's phases), tokens per element;
  allreduce a whole ring AllReduce of ``count`` elements on ``ranks`` QLink ranks (flag waits, copies and posts
            included), tokens written per rank per element, with the ratio to int32's.
bfloat16 / float16 pack two elements in a word: per element they cost half of what a word costs.
"""
from __future__ import annotations

import argparse
import json

import numpy as np

import qccl
from qccl.schedule import (COPY, FMT_SHIFT, FP_ALIGN, FP_FINAL, FP_MERGE, FP_MINMAX, FP_ROUND, FP_SIGN, HI, LOCAL,
                           NOWAIT, OP_SHIFT, PHASE_SHIFT, RECV, SEND)
from qccl.transport import FPRIM, PRIM
from qwengpu import Device

CASES = [("int32", "sum"), ("float32", "sum"), ("float32", "max"), ("bfloat16", "sum"), ("bfloat16", "max"),
         ("float16", "sum")]
OPS = {"sum": 0, "max": 2, "min": 3}
FMT = {"float32": 0, "bfloat16": 1, "float16": 2}


def combine_tokens(dtype: str, op: str) -> float:
    """Tokens written per element by one step's combine of 4 words (no flag waits: they are already there)."""
    dev = Device()
    rng = np.random.default_rng(0)
    words = rng.integers(0, 2**30, 8).astype(np.int32)      # ordinary positive floats / ints
    dev.write(0, words[:4])
    dev.write(8, words[4:])
    before = dev.stats["tokens_written"]
    if dtype == "int32":
        k = dev.load_kernel(str(PRIM.source), "prim")
        mode = RECV | SEND | LOCAL | (OPS[op] << OP_SHIFT)
        dev.launch(k, 4, [mode | NOWAIT, 4, 0, 0, 0, 0, 0, 8, 16, 40, 0, 0, 0, 0, 1])
        return (dev.stats["tokens_written"] - before) / 4
    k = dev.load_kernel(str(FPRIM.source), "fprim")
    fmt = FMT[dtype]
    phases = (FP_ALIGN, FP_ROUND, FP_SIGN, FP_FINAL) if op == "sum" else (FP_MINMAX,)
    launches = [(p, 0) for p in phases] if fmt == 0 else [(p, h) for h in (0, HI) for p in phases + (FP_MERGE,)]
    for phase, half in launches:
        mode = RECV | SEND | LOCAL | (OPS[op] << OP_SHIFT) | (fmt << FMT_SHIFT) | (phase << PHASE_SHIFT) | half
        dev.launch(k, 4, [mode | NOWAIT, 4, 0, 0, 0, 0, 0, 8, 16, 40, 0, 0, 0, 0, 12])
    return (dev.stats["tokens_written"] - before) / (4 if fmt == 0 else 8)


def allreduce_tokens(dtype: str, op: str, ranks: int, count: int) -> float:
    """Tokens written per rank per element by a ring AllReduce of ``count`` elements."""
    rng = np.random.default_rng(1)
    comms = qccl.Communicator.init_all(ranks)
    if dtype == "bfloat16":
        import torch
        xs = [torch.randn(count).to(torch.bfloat16) for _ in range(ranks)]
        outs = [torch.zeros_like(x) for x in xs]
    else:
        xs = [(rng.integers(-9, 9, count) if dtype == "int32" else rng.standard_normal(count)).astype(dtype)
              for _ in range(ranks)]
        outs = [np.zeros_like(x) for x in xs]
    before = [c.stats["tokens_written"] for c in comms]
    with qccl.group():
        for r in range(ranks):
            comms[r].allreduce(xs[r], outs[r], op, algo="ring")
    spent = [c.stats["tokens_written"] - b for c, b in zip(comms, before)]
    return float(np.mean(spent)) / count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    for dtype, op in CASES:
        rows.append({"dtype": dtype, "op": op, "combine_tokens_per_element": combine_tokens(dtype, op),
                     "allreduce_tokens_per_element": allreduce_tokens(dtype, op, a.ranks, a.count)})
    base = next(r for r in rows if r["dtype"] == "int32")
    print(f"QLink on the interpreter: tokens the model writes per element ({a.ranks} ranks, AllReduce of "
          f"{a.count} elements, ring)")
    print(f"{'dtype':<10}{'op':<5}{'combine/elt':>13}{'allreduce/elt/rank':>20}{'x int32':>9}")
    for r in rows:
        r["ratio_to_int32"] = r["allreduce_tokens_per_element"] / base["allreduce_tokens_per_element"]
        print(f"{r['dtype']:<10}{r['op']:<5}{r['combine_tokens_per_element']:>13.1f}"
              f"{r['allreduce_tokens_per_element']:>20.1f}{r['ratio_to_int32']:>9.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": a.ranks, "count": a.count, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
