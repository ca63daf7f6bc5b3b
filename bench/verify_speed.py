"""Verify mode at the model's speed: a recorded 4-rank AllReduce stream checked in chunked passes, against greedy
decoding (one forward per token) on the same stream.

    python -m qccl_bench.verify_speed                          # compiled bf16 model, 4 ranks x 16 words, rank 0
    python -m qccl_bench.verify_speed --ranks-checked 4 --chunk 256
    python -m qccl_bench.verify_speed --checkpoint merged-2b   # a merged checkpoint (python -m qwengpu.merge)
    python -m qccl_bench.verify_speed --greedy-tokens 0        # skip the greedy timing

The interpreter records the run over QLink (the reference drives, real packets move); each rank's stream is then
fed to the model ``--chunk`` positions per forward and every model-written token is checked. Greedy decoding's rate
is measured on the first ``--greedy-tokens`` positions of rank 0's stream (a forward each, as a decoding model
pays). Both rates are positions per second of the same stream on the same model.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def record_allreduce(nranks: int = 4, count: int = 16, seed: int = 0) -> dict:
    """rank -> token stream of one AllReduce over QLink, recorded by interpreter devices, checked against numpy."""
    import qccl
    comms = qccl.Communicator.init_all(nranks, transport="qlink", config={"backend_options": {"token_log": None}})
    rng = np.random.default_rng(seed)
    send = [rng.integers(-2**31, 2**31, count).astype(np.int32) for _ in range(nranks)]
    recv = [np.zeros(count, np.int32) for _ in range(nranks)]
    with qccl.group():
        for c in comms:
            c.allreduce(send[c.rank], recv[c.rank], op="sum")
    expect = np.sum(np.array(send, dtype=np.int64), axis=0).astype(np.int32)
    if not all(np.array_equal(r, expect) for r in recv):
        raise SystemExit("the recorded AllReduce differs from numpy")
    devices = comms[0].world.devices
    streams = {rank: list(devices[rank].tokens) for rank in sorted(devices)}
    for c in comms:
        c.destroy()
    return streams


def main(argv=None) -> int:
    from qwengpu.circuit.model import ModelBackend
    from qwengpu.circuit.verify import verify, verify_ranks
    parser = argparse.ArgumentParser(prog="python -m qccl_bench.verify_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="a compiled or merged checkpoint (default: compile)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--path", default="chunked", choices=("chunked", "recurrent"))
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--ranks-checked", type=int, default=1, help="how many ranks' streams to verify")
    parser.add_argument("--greedy-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    streams = record_allreduce(args.ranks, args.count)
    print(f"recorded AllReduce {args.ranks} ranks x {args.count} words: "
          f"{', '.join(str(len(s)) for s in streams.values())} positions per rank", flush=True)

    def make(rank):
        return ModelBackend(checkpoint=args.checkpoint, dtype=args.dtype, device=args.device)
    checked = {r: streams[r] for r in list(streams)[:args.ranks_checked]}
    results = verify_ranks(checked, make, args.chunk, args.path)
    mismatches = 0
    for rank, result in results.items():
        mismatches += len(result.mismatches)
        print(f"rank {rank}: chunked verify ({args.path} rule, {args.chunk} per forward): {result.fed} positions, "
              f"{result.compared} model tokens, {len(result.mismatches)} mismatches, min margin "
              f"{result.min_margin:g}, {result.positions_per_second:.2f} positions/s", flush=True)
    if args.greedy_tokens:
        stream = streams[0][:args.greedy_tokens]
        backend = make(0)
        started = time.perf_counter()
        greedy = verify(backend, stream)
        rate = len(stream) / (time.perf_counter() - started)
        mismatches += len(greedy.mismatches)
        chunked = results[min(results)].positions_per_second
        print(f"greedy decoding, rank 0's first {len(stream)} positions: {rate:.2f} tokens/s "
              f"({len(greedy.mismatches)} mismatches); chunked verify is {chunked / rate:.1f}x faster per position")
    print(f"mismatches: {mismatches}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
