"""The model backend fast on a GPU: bf16, transformers' torch path, a static cache with the decode step captured as a
CUDA graph, ranks batched (batch dimension = rank). Skips cleanly without a GPU.

    python -m qccl_bench.model_gpu                         # on CUDA: every check and figure below
    python -m qccl_bench.model_gpu --checkpoint merged-2b  # the seed's table on a merged checkpoint
    python -m qccl_bench.model_gpu --device cpu --steps 4 --ranks 1,2 --no-table   # the same code on the CPU, short
    python -m qccl_bench.model_gpu --compile               # decode figures with the step compiled by torch.compile too
    python -m qccl_bench.model_gpu --checkpoint merged-2b --ranks none --collectives allreduce   # one row of the table

What it prints:
1. which Gated DeltaNet implementation runs (transformers' torch functions, or the flash-linear-attention /
   causal-conv1d kernels when those packages import) and that it is exact: the per-layer deviation of the bf16 model
   from the exact circuit on the vadd stream, decode path and chunked-verify paths (must be 0 everywhere), and the
   rule's margin (qwengpu.circuit.report.rule_margin: its nonzero bf16 outputs must be its float64 values rounded
   to nearest even);
2. decode tokens per second per rank with 1, 4 and 8 ranks batched: each rank's recorded AllReduce stream fed one
   token per step through the captured graph, every model-written token checked against the recording;
3. the seed's table: wall time of the six collectives on 4 ranks x 16 words over QLink on the bf16 model (ranks
   batched, one forward per prediction: the tokens fed between two predictions go in as one run; a merged model's
   too), checked against numpy.
"""
from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np


def fla_missing() -> str:
    """'' when flash-linear-attention's Gated DeltaNet kernels import here (transformers then runs them: its
    ``use_kernel_func_from_hub_with_fallback`` takes ``fla.ops.gated_delta_rule`` when that imports), else why not."""
    try:
        importlib.import_module("fla.ops.gated_delta_rule")
    except Exception as error:      # noqa: BLE001  (ImportError, or fla's own refusal of this platform)
        return f"{type(error).__name__}: {error}"
    return ""


def gdn_implementation() -> str:
    """Which Gated DeltaNet kernels transformers will use here."""
    fla = not fla_missing()
    conv = importlib.util.find_spec("causal_conv1d") is not None
    if not fla and not conv:
        return ("transformers' torch reference path (torch_recurrent_gated_delta_rule for decode, "
                "torch_chunk_gated_delta_rule for chunks; causal_conv1d_update / causal_conv1d_fn in torch): "
                "flash-linear-attention and causal-conv1d are not installed")
    version = ""
    if fla:
        import importlib.metadata as metadata
        try:
            version = f" {metadata.version('fla-core')}"
        except metadata.PackageNotFoundError:
            pass
    return (f"flash-linear-attention{version} {'installed' if fla else 'absent'} (fused_recurrent_gated_delta_rule "
            f"for decode, chunk_gated_delta_rule for chunks), causal-conv1d {'installed' if conv else 'absent'}: "
            "transformers uses their kernels where present")


class Decoder:
    """A batched decode step of a model backend's model: ``step(ids)`` feeds one token per row and returns the
    logits. On CUDA the step is captured once as a CUDA graph over a static cache (inputs copied into fixed
    tensors, the graph replayed); elsewhere it runs eagerly.

    A merged model's full-attention layers hold ``max_len`` static keys (qwengpu.circuit.model.new_cache), so its
    step has fixed shapes too: the step unmasks its own position in a static mask (an additive mask of bf16's
    minimum over the unwritten keys, so they get weight exactly 0) before the forward, inside the graph. Only the
    base's layers attend, and they cannot move a GPU token's argmax (the margin argument); every model-written
    token is checked by decode_rate anyway."""

    def __init__(self, model, batch: int, device: str, graph: bool = True, compile: bool = False,
                 max_len: int | None = None):
        import torch
        from qwengpu.circuit.model import new_cache
        self.torch, self.model = torch, model
        full = "full_attention" in model.config.layer_types
        if full and max_len is None:
            raise ValueError("a model with full-attention layers needs max_len: the static keys' length")
        self.mask = None
        if full:
            self.lowest = torch.finfo(next(model.parameters()).dtype).min
            self.mask = torch.full((batch, 1, 1, max_len), self.lowest, dtype=next(model.parameters()).dtype,
                                   device=device)
        self.masks = {"full_attention": self.mask, "linear_attention": None}
        self.max_len, self.fed = max_len if full else None, 0
        if compile:
            # inductor fuses the Gated DeltaNet step's many small kernels; it rounds each fused intermediate to bf16
            # as eager does (emulate_precision_casts), and decode_rate checks every model-written token anyway
            import torch._inductor.config as inductor
            inductor.emulate_precision_casts = True
            self._step = torch.compile(self._step, dynamic=False)
        self.cache = new_cache(model, batch=batch, device=device, max_len=max_len if full else None)
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.graph = None
        self.mode = "eager"
        if graph and device.startswith("cuda"):
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):         # warm-up runs, as CUDA graph capture requires
                for _ in range(2):
                    self._step()
            torch.cuda.current_stream().wait_stream(stream)
            self._zero()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.logits = self._step()
            self._zero()
            self.mode = "CUDA graph"
        self.mode += " + torch.compile" if compile else ""

    def _zero(self) -> None:
        for kind, layer in zip(self.model.config.layer_types, self.cache.layers):
            if kind == "full_attention":
                layer.keys.zero_()
                layer.values.zero_()
                layer.cumulative_length.zero_()
            else:
                layer.conv_states[0].zero_()
                layer.recurrent_states[0].zero_()
        self.positions.zero_()
        if self.mask is not None:
            self.mask.fill_(self.lowest)

    def _step(self):
        with self.torch.no_grad():
            if self.mask is not None:       # every row is at one position: its key is the one unmasked now
                self.mask.index_fill_(-1, self.positions[0], 0)
            out = self.model(input_ids=self.ids, past_key_values=self.cache, position_ids=self.positions,
                             use_cache=True, attention_mask=self.masks)
        return out.logits[:, -1]

    def step(self, ids):
        if self.fed == self.max_len:
            raise ValueError(f"step {self.fed + 1}: the static keys hold max_len = {self.max_len} positions")
        self.fed += 1
        self.ids.copy_(ids)
        if self.graph is not None:
            self.graph.replay()
            logits = self.logits
        else:
            logits = self._step()
        self.positions += 1
        return logits


def decode_rate(model, streams: list, steps: int, device: str, offset: int = 0,
                compile: bool = False) -> tuple[float, int, str]:
    """Teacher-forced batched decode of ``streams`` (one per rank) for ``steps`` steps: (tokens per second per rank,
    mismatches at model-written positions, graph or eager). With ``compile`` the step is compiled by torch.compile;
    the first two steps, where compilation happens, are checked but not timed."""
    import torch

    from qwengpu import tokens as T
    from qwengpu.circuit.verify import _predicted_at
    steps = min(steps, min(len(s) for s in streams))
    decoder = Decoder(model, len(streams), device, compile=compile, max_len=steps)
    untimed = 2 if compile else 0
    if steps <= untimed:
        raise ValueError(f"{steps} decode steps: a compiled step needs more than its {untimed} untimed ones")
    predicted = []
    for position in range(steps):
        if position == untimed:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            started = time.perf_counter()
        ids = torch.tensor([[offset + s[position].id] for s in streams], device=device)
        predicted.append((decoder.step(ids).argmax(-1) - offset).tolist())
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    mismatches = 0
    for rank, stream in enumerate(streams):
        for position in range(1, steps):
            token = stream[position]
            if token.origin == T.MODEL:
                expected = token.written if token.written is not None else token.id
                mismatches += predicted[_predicted_at(stream, position)][rank] != expected
    return (steps - untimed) / seconds, mismatches, decoder.mode


COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "sendrecv")


def seed_table(backend_options: dict, nranks: int = 4, count: int = 16, collectives=COLLECTIVES):
    """The collectives (the seed's six by default) on ``nranks`` x ``count`` words over QLink on the model backend,
    timed and checked: one table row each, yielded as it is done."""
    import qccl
    rng = np.random.default_rng(0)
    send = [rng.integers(-2**20, 2**20, count).astype(np.int32) for _ in range(nranks)]
    total = np.sum(np.array(send, dtype=np.int64), axis=0).astype(np.int32)
    part = count // nranks
    for name in collectives:
        comms = qccl.Communicator.init_all(nranks, transport="qlink",
                                           config={"backend": "model", "backend_options": backend_options})
        recv = [np.zeros(count * (nranks if name == "allgather" else 1), np.int32) for _ in range(nranks)]
        small = [np.zeros(part, np.int32) for _ in range(nranks)]
        started = time.perf_counter()
        with qccl.group():
            for c in comms:
                r = c.rank
                if name == "allreduce":
                    c.allreduce(send[r], recv[r], op="sum")
                elif name == "broadcast":
                    c.broadcast(send[r], recv[r], root=0)
                elif name == "reduce":
                    c.reduce(send[r], recv[r], op="sum", root=0)
                elif name == "allgather":
                    c.allgather(send[r], recv[r])
                elif name == "reduce_scatter":
                    c.reduce_scatter(send[r], small[r], op="sum")
                else:
                    c.send(send[r], (r + 1) % nranks)
                    c.recv(recv[r], (r - 1) % nranks)
        seconds = time.perf_counter() - started
        expect = {"allreduce": [total] * nranks, "broadcast": [send[0]] * nranks,
                  "allgather": [np.concatenate(send)] * nranks,
                  "sendrecv": [send[(r - 1) % nranks] for r in range(nranks)]}
        got = small if name == "reduce_scatter" else recv
        if name == "reduce_scatter":
            expect[name] = [total[r * part:(r + 1) * part] for r in range(nranks)]
        ok = np.array_equal(recv[0], total) if name == "reduce" else all(
            np.array_equal(g, e) for g, e in zip(got, expect[name]))
        written = [c.stats["tokens_written"] for c in comms]
        for c in comms:
            c.destroy()
        yield f"| {name:<14} | {seconds:>8.1f} s | {max(written):>6} | {'ok' if ok else 'WRONG':<5} |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qccl_bench.model_gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--checkpoint", default=None, help="a merged (or compiled) checkpoint; default: compile")
    parser.add_argument("--ranks", default="1,4,8", help="ranks batched per measurement; none: no decode figures")
    parser.add_argument("--steps", type=int, default=400, help="decode steps per measurement")
    parser.add_argument("--no-table", action="store_true", help="skip the seed's table")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES),
                        help="the seed's table's rows, comma-separated (default: all six)")
    parser.add_argument("--no-report", action="store_true", help="skip the per-layer exactness report")
    parser.add_argument("--compile", action="store_true",
                        help="also time the decode step compiled by torch.compile (inductor) for each batch")
    parser.add_argument("--fla", action="store_true",
                        help="require flash-linear-attention's kernels (refused, naming why, when they do not import)")
    args = parser.parse_args(argv)
    why = fla_missing() if args.fla else ""
    if why:
        parser.error(f"--fla: flash-linear-attention's kernels do not import here ({why})")
    collectives = args.collectives.split(",")
    unknown = sorted(set(collectives) - set(COLLECTIVES))
    if unknown:
        parser.error(f"--collectives {','.join(unknown)}: not among {', '.join(COLLECTIVES)}")
    import torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("model_gpu: skipped, no CUDA device here (run with --device cpu for the CPU path)")
        return 0
    from qwengpu.circuit.model import ModelBackend
    from qwengpu.circuit.report import chunk_deviation, deviation, rule_margin
    from qwengpu.circuit.suite import vadd_stream

    from .verify_speed import record_allreduce
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(f"device: {name}, torch {torch.__version__}, bf16")
    print(f"Gated DeltaNet: {gdn_implementation()}", flush=True)
    shared = ModelBackend(checkpoint=args.checkpoint, dtype="bfloat16", device=args.device)
    failures = 0
    if not args.no_report:
        stream = vadd_stream()
        for label in ("decode", "recurrent", "chunked"):
            backend = ModelBackend(dtype="bfloat16", device=args.device, trace=True)
            report = (deviation(backend, stream, "vadd") if label == "decode" else
                      chunk_deviation(backend, stream, "vadd", label, 64))
            worst = max(report.layers)
            failures += report.mismatches
            print(f"  {label:<9} path: max deviation from the exact circuit over all layers {worst:g}, "
                  f"{report.mismatches} mismatches, min margin {report.min_margin:g}", flush=True)
            del backend
        # the rule's own outputs (fla's chunked kernel where it imports) against the rule in float64
        margin = rule_margin(ModelBackend(dtype="bfloat16", device=args.device), stream, "rule margin, vadd")
        failures += not margin.rounded
        print(f"  {margin.table().splitlines()[0]}", flush=True)
    batches = [] if args.ranks == "none" else [int(r) for r in args.ranks.split(",")]
    if batches:
        print("| ranks batched | decode step                 | tokens/s per rank | tokens/s all ranks | mismatches |")
        print("|---------------|-----------------------------|-------------------|--------------------|------------|")
    for ranks in batches:
        streams = list(record_allreduce(max(ranks, 2), 16).values())[:ranks]
        for compile in (False, True) if args.compile else (False,):
            try:
                rate, mismatches, mode = decode_rate(shared.model, streams, args.steps, args.device, shared.offset,
                                                     compile)
            except Exception as error:      # a lease is short: one failed measurement must not cost the others
                failures += 1
                print(f"| {ranks:>13} | {'torch.compile' if compile else 'plain'} step failed: "
                      f"{type(error).__name__}: {error}", flush=True)
                continue
            failures += mismatches
            print(f"| {ranks:>13} | {mode:<27} | {rate:>17.1f} | {rate * ranks:>18.1f} | {mismatches:>10} |",
                  flush=True)
    if not args.no_table:
        options = {"dtype": "bfloat16", "device": args.device}
        if args.checkpoint:
            options["checkpoint"] = args.checkpoint
        print("seed's table, 4 ranks x 16 words on the bf16 model over QLink:")
        print("| collective     |       wall | tokens | check |")
        for row in seed_table(options, collectives=collectives):
            failures += "WRONG" in row
            print(row, flush=True)
    print(f"failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
