"""One QwenGPU on its own: compile CUDA, run it on the reference interpreter, count what the model wrote.

``python -m qccl_bench.machine_demo`` (the first half of ``make demo``): vector add, then the qccl prim kernel in its step
modes, each against numpy. Every figure is measured from the device's token stream.
"""
from __future__ import annotations

import time

import numpy as np

from qwengpu import Device

RECV, SEND, LOCAL, SPLIT, COPY = 1, 2, 4, 8, 16
MODES = [("send", LOCAL | SEND), ("recvReduceSend", RECV | LOCAL | SEND),
         ("recvReduceCopySend", RECV | LOCAL | COPY | SEND), ("recvCopySend", RECV | COPY | SEND),
         ("recvReduceCopy", RECV | LOCAL | COPY), ("recv", RECV | COPY), ("localCopy", LOCAL | COPY)]


def row(name: str, dev: Device, before: dict, blocks: int, seconds: float, same: bool) -> str:
    written = dev.stats["tokens_written"] - before["tokens_written"]
    records = dev.stats["records"] - before["records"]
    verdict = "identical" if same else "DIFFERS"
    return f"| {name:<24} | {blocks:>6} | {records:>7} | {written:>14} | {seconds * 1e3:>7.1f} ms | {verdict:<9} |"


def header() -> str:
    return ("| kernel                   | blocks | records | tokens written | wall time  | vs numpy  |\n"
            "|--------------------------|--------|---------|----------------|------------|-----------|")


def vadd_rows(rng) -> list[str]:
    rows = []
    for threads in (4, 16):
        dev = Device()
        a, b, c = dev.alloc(16), dev.alloc(16), dev.alloc(16)
        x = rng.integers(-2**31, 2**31, 16, dtype=np.int64).astype(np.int32)
        y = rng.integers(-2**31, 2**31, 16, dtype=np.int64).astype(np.int32)
        dev.write(a, x)
        dev.write(b, y)
        kernel = dev.load_kernel("qwengpu/kernels/vadd.cu", "vadd")
        before, start = dict(dev.stats), time.perf_counter()
        dev.launch(kernel, threads=threads, args=[a, b, c, threads])
        seconds = time.perf_counter() - start
        with np.errstate(over="ignore"):
            want = (x + y)[:threads]
        same = np.array_equal(dev.read(c, threads), want)
        blocks = len(kernel.program((a, b, c, threads), threads).blocks)
        rows.append(row(f"vadd, {threads} threads", dev, before, blocks, seconds, same))
    return rows


def prim_rows(rng) -> list[str]:
    rows = []
    for name, mode in MODES:
        dev = Device()
        rtail, rhead, stail, shead = (dev.alloc(1) for _ in range(4))
        rslot, x, y, sslot = (dev.alloc(4) for _ in range(4))
        incoming = rng.integers(-1000, 1000, 4).astype(np.int32)
        local = rng.integers(-1000, 1000, 4).astype(np.int32)
        dev.write(rtail, np.array([1], dtype=np.int32))    # one chunk has arrived
        dev.write(rhead, np.array([1], dtype=np.int32))    # the next rank has a free slot
        dev.write(rslot, incoming)
        dev.write(x, local)
        kernel = dev.load_kernel("qccl/kernels/prim.cu", "prim")
        args = [mode, 4, rtail, 1, rhead, 1, rslot, x, y, sslot, stail, 1, shead, 1, 1]
        before, start = dict(dev.stats), time.perf_counter()
        dev.launch(kernel, threads=4, args=args)
        seconds = time.perf_counter() - start
        # numpy's view of the step: what reaches the next rank and what stays in y
        value = (incoming if mode & RECV else 0) + (local if mode & LOCAL else 0)
        same = True
        if mode & SEND:
            same &= np.array_equal(dev.read(sslot, 4), value) and dev.read(stail, 1)[0] == 1
        if mode & COPY:
            same &= np.array_equal(dev.read(y, 4), value)
        if mode & RECV:
            same &= dev.read(shead, 1)[0] == 1
        blocks = len(kernel.program(tuple(args), 4).blocks)
        rows.append(row(f"prim {name}", dev, before, blocks, seconds, bool(same)))
    return rows


def main() -> int:
    rng = np.random.default_rng(2026)
    rows = vadd_rows(rng) + prim_rows(rng)
    print("QwenGPU (reference interpreter): one launch each, 4 words per prim step\n")
    print(header())
    print("\n".join(rows))
    print("\nrecords: one per block a warp executed (EXEC + 2 VALs per lane + 3 tokens per store);"
          " tokens written: each a forward pass of the model.\n")
    return 0 if all("identical" in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
