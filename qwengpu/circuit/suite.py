"""The kernel suite as recorded token streams, and ``make verify``: every stream replayed on circuit and model.

The interpreter records each stream (host copies, launches, peers' packets, reads); the circuit and the model must
predict every token the model wrote in it (qwengpu.circuit.verify).

    python -m qwengpu.circuit.suite                 # circuit and bf16 model on every stream
    python -m qwengpu.circuit.suite --quick         # circuit only
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from ..device import Device

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def memory_stream(seed: int = 0):
    """Host copies in and out: random words at random addresses, a write to the sink, overwrites, unwritten words."""
    rng = np.random.default_rng(seed)
    dev = Device()
    dev.write(0, rng.integers(-2**31, 2**31, 20))
    dev.write(100, rng.integers(-2**31, 2**31, 27))
    dev.write(5, [0, -1, 0x7FFFFFFF, -2**31])
    dev.read(0, 12)
    dev.read(120, 7)
    dev.read(60, 3)
    return dev.tokens


def vadd_stream(seed: int = 1):
    """vadd on two warps with n = 6: a predicate switches off two lanes of the second warp."""
    rng = np.random.default_rng(seed)
    dev = Device()
    a, b, c = dev.alloc(8), dev.alloc(8), dev.alloc(8)
    dev.write(a, rng.integers(-2**31, 2**31, 8))
    dev.write(b, rng.integers(-2**31, 2**31, 8))
    dev.launch(dev.load_kernel(KERNELS / "vadd.cu", "vadd"), threads=8, args=[a, b, c, 6])
    dev.read(c, 8)
    return dev.tokens


def spin_stream():
    """spin on two warps, released by host writes that land between records (first too small, then enough)."""
    dev = Device()
    flag, out = dev.alloc(1), dev.alloc(8)
    dev.write(flag, [0])
    dev.write(out, np.full(8, -7))
    dev.start(dev.load_kernel(KERNELS / "spin.cu", "spin"), 8, [flag, 3, out, 100])
    for writes, steps in (([2], 4), ([3], 3)):
        for _ in range(steps):
            dev.step()
        dev.write(flag, writes)
    while dev.busy:
        dev.step()
    dev.read(out, 8)
    return dev.tokens


def sgd_stream(seed: int = 2):
    """The XOR MLP's SGD step on 13 parameters (four warps): p -= (g + 32) >> 6, in int32."""
    rng = np.random.default_rng(seed)
    dev = Device()
    params, grads = dev.alloc(13), dev.alloc(13)
    dev.write(params, rng.integers(-2**31, 2**31, 13))
    dev.write(grads, rng.integers(-2**31, 2**31, 13))
    dev.launch(dev.load_kernel(KERNELS / "mlp.cu", "sgd"), threads=13, args=[params, grads])
    dev.read(params, 13)
    return dev.tokens


def mlp_streams(seed: int = 3, samples: int = 1):
    """The XOR MLP's forward (the lanes' atomics into the outputs), backward (atomics into the gradients) and loss
    kernels on random Q8 parameters and a minibatch of ``samples`` samples, one stream each."""
    rng = np.random.default_rng(seed)
    streams = []
    for name in ("mlp_forward", "mlp_backward", "mlp_loss"):
        dev = Device()
        params, grads, batch, loss = dev.alloc(32), dev.alloc(32), dev.alloc(32), dev.alloc(1)
        words = rng.integers(-512, 513, 32)
        for block in range(4):                      # sample slots past ``samples`` stay zero
            words[8 * block + samples:8 * block + 8] = 0
        dev.write(params, rng.integers(-512, 513, 32))
        dev.write(batch, words)
        dev.write(grads, rng.integers(-1000, 1000, 32))
        dev.write(loss, [5])
        threads, args, result = {"mlp_forward": (8, [params, batch, samples], (batch, 32)),
                                 "mlp_backward": (samples, [params, batch, grads], (grads, 32)),
                                 "mlp_loss": (samples, [batch, loss], (loss, 1))}[name]
        dev.launch(dev.load_kernel(KERNELS / "mlp.cu", name), threads=threads, args=args)
        dev.read(*result)
        streams.append((name.replace("_", " "), dev.tokens))
    return streams


def collective_streams(nranks: int = 2, count: int = 4, ops=("sum", "max", "prod", "avg"), seed: int = 7,
                       others: bool = True):
    """qccl collectives over QLink (the prim and mcast kernels in their modes): one stream per rank. ``ops``: the
    reductions of alternate AllReduce and Reduce calls (avg divides by the rank count); ``others``: then Broadcast,
    AllGather (ring and multicast), multicast AllReduce, ReduceScatter and a send/recv ring."""
    import qccl
    comms = qccl.Communicator.init_all(nranks, transport="qlink")
    rng = np.random.default_rng(seed)
    send = [rng.integers(-2**31, 2**31, count).astype(np.int32) for _ in range(nranks)]
    recv = [np.zeros(count, np.int32) for _ in range(nranks)]
    gathered = [np.zeros(count * nranks, np.int32) for _ in range(nranks)]
    scattered = [np.zeros(count // nranks, np.int32) for _ in range(nranks)]
    for index, op in enumerate(ops):
        with qccl.group():
            for c in comms:
                if index % 2:
                    c.reduce(send[c.rank], recv[c.rank], op=op, root=1)
                else:
                    c.allreduce(send[c.rank], recv[c.rank], op=op)
    if others:
        with qccl.group():
            for c in comms:
                c.broadcast(send[c.rank], recv[c.rank], root=0)
        with qccl.group():
            for c in comms:
                c.allgather(send[c.rank], gathered[c.rank])
        with qccl.group():
            for c in comms:
                c.allgather(send[c.rank], gathered[c.rank], algo="multicast")     # the mcast kernel
        with qccl.group():
            for c in comms:
                c.allreduce(send[c.rank], recv[c.rank], op="min", algo="multicast")
        with qccl.group():
            for c in comms:
                c.reduce_scatter(send[c.rank], scattered[c.rank], op="min")
        with qccl.group():
            for c in comms:
                c.send(send[c.rank], (c.rank + 1) % nranks)
                c.recv(recv[c.rank], (c.rank - 1) % nranks)
    devices = comms[0].world.devices
    streams = [(f"collectives {nranks} ranks, rank {rank}", list(devices[rank].tokens)) for rank in sorted(devices)]
    for c in comms:
        c.destroy()
    return streams


def simt_loop_stream():
    """A hand-made SIMT loop (the 'any' branch): each lane counts its word down to zero (trips 2, 0, 1, 2), adding
    3 a trip; lanes that are done stay masked off while the others go on."""
    from ..device import Kernel
    from ..isa import EXIT, NONE, TID, Block, Operand
    from ..lowering import Program
    blocks = [
        Block(op="ne", a=Operand(TID), load=True, b=Operand(NONE, 0), dst=1),              # active: x != 0
        Block(op="a", a=Operand(TID), load=True, dst=0),                                    # r0 = x[tid]
        Block(op="sub", a=Operand(0), b=Operand(NONE, 1), dst=0, pred=1),                  # @r1 r0 -= 1
        Block(op="add", a=Operand(2), b=Operand(NONE, 3), dst=2, pred=1),                  # @r1 r2 += 3
        Block(op="ne", a=Operand(0), b=Operand(NONE, 0), dst=1, branch="any", target=2),   # any lane left?
        Block(op="a", a=Operand(2), store=TID, store_imm=4, store_enable=True, branch="always", target=EXIT),
    ]
    dev = Device()
    dev.write(0, [2, 0, 1, 2])
    dev.launch(Kernel.from_program(Program("count down", blocks, 3, False, [])), threads=4, args=[])
    dev.read(4, 4)
    return dev.tokens


def idiom_streams(seed: int = 11, short: bool = False):
    """qwengpu/kernels/idioms.cu, CUDA as people write it: a grid-stride saxpy with a ragged tail on a two-block
    grid (SIMT loop: the 'any' branch), abs / min / max / an unsigned compare, an atomic histogram on computed
    addresses over two blocks, a division by run-time values (software long division). ``short``: the saxpy alone,
    on one block (the share CI replays on the circuit and the bf16 model)."""
    rng = np.random.default_rng(seed)
    runs = [("saxpy", 4, 1 if short else 2, lambda y, x: [y, x, -7, 6 if short else 13], 16)]
    if not short:
        runs += [("absminmax", 4, 1, lambda y, x: [y, x, 5, 4], 12), ("histogram", 4, 2, lambda y, x: [y, x, 7], 4),
                 ("divide", 4, 1, lambda y, x: [y, x, x + 8, 4], 4)]
    streams = []
    for name, threads, blocks, args, count in runs:
        dev = Device()
        out, data = dev.alloc(16), dev.alloc(16)
        dev.write(out, rng.integers(-1000, 1000, 16) if name != "histogram" else np.zeros(16, dtype=np.int64))
        words = rng.integers(-2**20, 2**20, 16)
        words[8:12] = [7, -3, 5, 9]                  # the divisors, never zero
        dev.write(data, words)
        dev.launch(dev.load_kernel(KERNELS / "idioms.cu", name), threads=threads, args=args(out, data),
                   blocks=blocks)
        dev.read(out, count)
        streams.append((f"idioms {name}", dev.tokens))
    return streams


def warp_streams(seed: int = 12):
    """qwengpu/kernels/warp.cu on two warps: the textbook warp sum (shuffles through the exchange words, offsets
    computed in its loop) and the votes (ballot's atomic or, any, all)."""
    rng = np.random.default_rng(seed)
    streams = []
    for name, args, count in (("warp_sum", lambda out, x: [out, x], 2), ("votes", lambda out, x: [out, x, 0], 24)):
        dev = Device()
        out, data = dev.alloc(24), dev.alloc(8)
        dev.write(data, rng.integers(-2**20, 2**20, 8))
        dev.launch(dev.load_kernel(KERNELS / "warp.cu", name), threads=8, args=args(out, data))
        dev.read(out, count)
        streams.append((f"warp {name}", dev.tokens))
    return streams


def float_streams():
    """qwengpu/kernels/floats.cu on edge values (both zeros, a subnormal, infinities, NaNs): fmaxf of two registers
    (the total order, NaN keys moved) and a comparison with a literal, relu (x's bits against a range); and
    farith.cu's vadd, a float add run as overlays."""
    edge = np.array([0x00000000, 0x80000000, 0x7FC00000, 0xFF800000, 0x00000001, 0xBFC00000, 0x7F800000,
                     0x3FC00000], dtype=np.uint32)
    streams = []
    for name, threads, args in (("minmax", 4, lambda out, a: [out, a, a + 4, 0]),
                                ("relu", 8, lambda out, a: [out, a, 8])):
        dev = Device()
        out, data = dev.alloc(8), dev.alloc(8)
        dev.write(data, edge.view(np.float32))
        dev.launch(dev.load_kernel(KERNELS / "floats.cu", name), threads=threads, args=args(out, data))
        dev.read(out, 8)
        streams.append((f"floats {name}", dev.tokens))
    # a float add (integer ops from floats.py) longer than the ROM: three overlays, their rows fed between rounds
    dev = Device()
    out, data = dev.alloc(4), dev.alloc(8)
    dev.write(data, edge.view(np.float32))
    dev.launch(dev.load_kernel(KERNELS / "farith.cu", "vadd"), threads=4, args=[out, data, data + 4, 4])
    dev.read(out, 4)
    streams.append(("farith vadd (overlays)", dev.tokens))
    return streams


def kernel_streams(fuzz_seeds: int = 1, idioms: bool = True):
    """(name, token stream) for every part of the kernel suite the circuit computes, and random programs.
    ``idioms``: with the ordinary-CUDA streams of idiom_streams (long: the division alone is 2,400 tokens),
    warp_streams and float_streams."""
    from .fuzz import random_stream
    from .ops import SUPPORTED_OPS
    return [("memory", memory_stream()), ("vadd", vadd_stream()), ("spin", spin_stream()), ("sgd", sgd_stream()),
            *mlp_streams(), *collective_streams(), *collective_streams(3, 3, ops=("avg",), seed=8, others=False),
            *((("simt loop", simt_loop_stream()), *idiom_streams(), *warp_streams(), *float_streams())
              if idioms else ()),
            *((f"random program {seed}", random_stream(seed, SUPPORTED_OPS)) for seed in range(fuzz_seeds))]


def main(argv=None) -> int:
    from .exact import CircuitBackend
    from .verify import verify
    parser = argparse.ArgumentParser(prog="python -m qwengpu.circuit.suite", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the circuit only (no transformers model)")
    parser.add_argument("--dtype", default="bfloat16", help="the model's dtype (bfloat16 or float32)")
    args = parser.parse_args(argv)
    streams = kernel_streams()
    backends = [("circuit", lambda: CircuitBackend())]
    if not args.quick:
        from .model import ModelBackend
        backends.append((f"model {args.dtype}", lambda: ModelBackend(dtype=args.dtype)))
    total_mismatches = 0
    row = "{:<28} {:<16} {:>7} {:>9} {:>11} {:>9}"
    print(row.format("stream", "backend", "tokens", "compared", "mismatches", "ms/token"))
    for label, make in backends:
        started = time.perf_counter()
        backend = make()
        print(row.format("(build)", label, "", "", "", f"{1000 * (time.perf_counter() - started):.0f}"))
        compared, mismatches, fed, seconds = 0, 0, 0, 0.0
        for name, stream in streams:
            state = backend.snapshot()
            result = verify(backend, stream)
            backend.restore(state)
            compared, mismatches = compared + result.compared, mismatches + len(result.mismatches)
            fed, seconds = fed + result.fed, seconds + result.seconds
            print(row.format(name, label, len(stream), result.compared, len(result.mismatches),
                             f"{1000 * result.seconds_per_token:.1f}"))
            for position, expected, got in result.mismatches[:3]:
                print(f"    position {position}: expected {expected}, got {got}")
        print(row.format("(all streams)", label, fed, compared, mismatches, f"{1000 * seconds / max(fed, 1):.1f}"))
        total_mismatches += mismatches
    print(f"mismatches: {total_mismatches}")
    return 1 if total_mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
