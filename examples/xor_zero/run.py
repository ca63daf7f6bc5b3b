"""xor_zero: xor_ddp's network trained as ZeRO-1 on four QwenGPUs, checked against the same replay every step.

    python -m examples.xor_zero --steps 200 --json xor_zero.json --png xor_zero.png

The step's compute is xor_ddp's (the same kernels, xor_ddp/xor.cu). The communication differs: qccl ReduceScatter
gives rank r the summed gradients of parameters 8r..8r+7; the host copies them in and ``xor_sgd`` updates that
quarter only (8 threads, pointers offset by 8r); the host reads the 8 new words back and a qccl AllGather over the
multicast window (``algo="multicast"``: each word is written once and lands in every replica) gives every rank all
32, which the host copies into its parameters. SGD is elementwise, so the parameters equal xor_ddp's bit for bit.

The heap (common.HEAP_ZERO, 58 words): 8-word ring slots, so the ReduceScatter of 32 words is one chunk a step (376
tokens a rank), and 8-word multicast windows, so the AllGather moves 2 words of each rank a round in 4 rounds (324).
Together 700 tokens in qccl calls against xor_ddp's 652 for its AllReduce: not the seed's halving. 16-word windows
(2 rounds, 206 tokens) need a 74-word heap with these slots, which does not fit beside the runs' 65 words.
"""
from __future__ import annotations

import numpy as np

import qccl
from examples import common
from examples.xor_ddp import run as ddp

SHARD = ddp.PARAMS // 4


class ZeroRun(ddp.XorRun):
    """xor_ddp's run with the ZeRO-1 communication step."""

    name = "xor_zero"
    heap = common.HEAP_ZERO     # 8-word ring slots (ReduceScatter) and 8-word multicast windows (AllGather)

    def __init__(self, seed: int = 0, backend: str = "interpreter", nranks: int = 4):
        if nranks != 4:
            raise qccl.InvalidArgument(f"xor_zero shards 32 parameters over 4 ranks, not {nranks}")
        super().__init__(seed, backend, nranks)

    def communicate(self, grads: dict) -> None:
        m, K = self.m, ddp.KERNELS
        shard = {r: np.zeros(SHARD, np.int32) for r in m.ranks}
        with self.collective(), qccl.group():
            for c in m.comms:
                c.reduce_scatter(grads[c.rank], shard[c.rank], op=qccl.SUM, algo="ring")
        updated = {r: np.zeros(SHARD, np.int32) for r in m.ranks}
        m.run({r: [m.write(self.sums + SHARD * r, shard[r]),
                   m.launch(K["xor_sgd"], SHARD, (self.p + SHARD * r, self.sums + SHARD * r), "sgd (own quarter)"),
                   m.read(self.p + SHARD * r, updated[r])] for r in m.ranks})
        gathered = {r: np.zeros(ddp.PARAMS, np.int32) for r in m.ranks}
        with self.collective(), qccl.group():
            for c in m.comms:
                c.allgather(updated[c.rank], gathered[c.rank], algo="multicast")
        m.run({r: [m.write(self.p, gathered[r])] for r in m.ranks})


def main(argv=None) -> dict:
    return ddp.main(argv, run_class=ZeroRun)
