"""The merge at full size: a random base with Qwen3.5-2B's whole text config, merged, then the kernel suite on it.
Not CI (a 2B-shaped base is 4.5 GB of bf16 weights; the merged model about 8 GB; 8 minutes and a 20 GB peak on a
2-core CPU).

    python -m qccl_bench.merge_full /tmp/full                  # base + merge + kernel suite (chunked verify) + text
    python -m qccl_bench.merge_full /tmp/full --base /models/Qwen3.5-2B      # a real checkpoint instead
    python -m qccl_bench.merge_full /tmp/full --layers 4 --vocab 4096        # a smaller random base
    python -m qccl_bench.merge_full /tmp/full --greedy                       # decode each stream token by token too

Then "beyond the seed": how far the compiled layers move the base's next-token predictions on random text
(positions whose argmax over the base's vocabulary changes, and the mean KL divergence of the base's softmax), and
whether greedy text continuations stay the base's.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

# Qwen3.5-2B's text config (reference/qwen35.md): 24 layers, [GDN, GDN, GDN, full attention] x 6.
FULL = dict(layer_types=["linear_attention"] * 3 + ["full_attention"], vocab_size=248320, rope_theta=1e7,
            partial_rotary_factor=0.25)


def text_drift(base_dir: Path, merged_dir: Path, positions: int = 64, sequences: int = 2, continue_for: int = 8,
               seed: int = 0) -> dict:
    """Base vs merged on random base-token text: positions whose argmax over the base's vocabulary changes, the mean
    KL(base || merged) over it, positions where a GPU token would beat every base token, and how many greedy
    continuation tokens (over the base's vocabulary) agree."""
    import torch
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16).eval()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.bfloat16).eval()
    vocab = base.config.vocab_size
    generator = torch.Generator().manual_seed(seed)
    changed = total = gpu_wins = same_continuation = 0
    kl = 0.0
    with torch.no_grad():
        for _ in range(sequences):
            ids = torch.randint(0, vocab, (1, positions), generator=generator)
            a = base(input_ids=ids).logits[0].float()
            full = merged(input_ids=ids).logits[0].float()
            b = full[:, :vocab]
            changed += int((a.argmax(-1) != b.argmax(-1)).sum())
            gpu_wins += int((full[:, vocab:].max(-1).values > b.max(-1).values).sum())
            total += positions
            kl += float(torch.nn.functional.kl_div(b.log_softmax(-1), a.log_softmax(-1), log_target=True,
                                                   reduction="sum")) / positions
            x, y = ids, ids
            for _ in range(continue_for):
                na = base(input_ids=x).logits[0, -1].argmax()
                nb = merged(input_ids=y).logits[0, -1, :vocab].argmax()
                x, y = torch.cat([x, na.view(1, 1)], 1), torch.cat([y, nb.view(1, 1)], 1)
            same_continuation += int((x[0, positions:] == y[0, positions:]).sum())
    return {"positions": total, "argmax_changed": changed, "mean_kl": kl / sequences, "gpu_token_wins": gpu_wins,
            "continuation_tokens_equal": same_continuation, "continuation_tokens": sequences * continue_for}


def main(argv=None) -> int:
    from qwengpu.circuit.model import ModelBackend
    from qwengpu.circuit.suite import kernel_streams
    from qwengpu.circuit.verify import verify, verify_chunked
    from qwengpu.merge import VOCAB_FILE, merge, random_base
    parser = argparse.ArgumentParser(prog="python -m qccl_bench.merge_full", description=__doc__.splitlines()[0])
    parser.add_argument("work", help="a directory for the base and the merged checkpoint")
    parser.add_argument("--base", default=None, help="a Qwen3.5 checkpoint directory (default: a random 2B-shaped one)")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--vocab", type=int, default=FULL["vocab_size"])
    parser.add_argument("--scale", type=float, default=1.0, help="scale the random base's output projections")
    parser.add_argument("--embedding-mean", type=float, default=0.0,
                        help="added to the random base's embedding entries (rows sharing a direction, as trained ones)")
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--greedy", action="store_true", help="also decode every stream token by token")
    parser.add_argument("--no-text", action="store_true", help="skip the base-text drift measurement")
    args = parser.parse_args(argv)
    work = Path(args.work)
    started = time.perf_counter()
    base = Path(args.base) if args.base else None
    if base is None:
        types = (FULL["layer_types"] * args.layers)[:args.layers]
        base = random_base(work / "base", layer_types=types, vocab_size=args.vocab, scale=args.scale,
                           embedding_mean=args.embedding_mean,
                           rope_theta=FULL["rope_theta"], partial_rotary_factor=FULL["partial_rotary_factor"])
        print(f"random base: {args.layers} layers, vocabulary {args.vocab} ({time.perf_counter() - started:.0f} s)",
              flush=True)
    started = time.perf_counter()
    margin = merge(base, work / "merged")
    print(f"merged in {time.perf_counter() - started:.0f} s: {json.dumps(margin.__dict__)}", flush=True)
    gate = json.loads((work / "merged" / VOCAB_FILE).read_text())["gate"]
    print(f"gate: {len(gate.pop('dims'))} dimensions, {json.dumps(gate)}", flush=True)
    backend = ModelBackend(checkpoint=work / "merged", device=args.device)
    mismatches = 0
    print(f"{'stream':<32} {'positions':>9} {'compared':>9} {'mismatches':>10} {'positions/s':>12}")
    for name, stream in kernel_streams():
        state = backend.snapshot()
        result = verify_chunked(backend, stream, args.chunk)
        backend.restore(state)
        if args.greedy:
            greedy = verify(backend, stream)
            backend.restore(state)
            mismatches += len(greedy.mismatches)
        mismatches += len(result.mismatches)
        print(f"{name:<32} {result.fed:>9} {result.compared:>9} {len(result.mismatches):>10} "
              f"{result.positions_per_second:>12.1f}", flush=True)
    print(f"kernel suite on the merged model: {mismatches} mismatches", flush=True)
    if not args.no_text:
        del backend
        print(f"base text through the merged model: {json.dumps(text_drift(base, work / 'merged'))}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
