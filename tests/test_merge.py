"""python -m qwengpu.merge: the compiled layers in front of a random Qwen3.5 base at the 2B widths (a linear-attention
and a full-attention layer, tied embeddings, saved with save_pretrained); the merged checkpoint loads with
from_pretrained and writes the interpreter's tokens in bf16, a base with large activations too.

The streams are verified in chunked passes (one forward for many positions) so that CI pays a few forwards; the
whole kernel suite on a merged 2B-shaped model is qccl_bench.merge_full."""
import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3_5ForCausalLM

from qwengpu import Device, MachineError
from qwengpu import tokens as T
from qwengpu.circuit import model as circuit_model
from qwengpu.circuit.batched import Rendezvous, run_windows
from qwengpu.circuit.model import ModelBackend
from qwengpu.circuit.verify import verify_chunked
from qwengpu.merge import VOCAB_FILE, main, merge, random_base

LARGE = 2.0 ** 12           # the large-activation base: every output projection scaled by this
MEAN = 0.02                 # the CI base's embedding rows share a direction (transformers' init spread is 0.02)


def short_stream():
    """Host copies in and out (the model writes every word it is asked for) and a vadd launch on one warp."""
    dev = Device()
    dev.write(0, [123456789, -1, 0, 77])
    dev.write(4, [5, -2**31, 65535, -9])
    dev.launch(dev.load_kernel("qwengpu/kernels/vadd.cu", "vadd"), threads=4, args=[0, 4, 8, 4])
    dev.read(8, 4)
    return dev.tokens


@pytest.fixture(scope="module")
def stream():
    return short_stream()


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    base = random_base(root / "base", embedding_mean=MEAN)
    main([str(base), str(root / "merged")])          # the command line
    return base, root / "merged"


@pytest.fixture(scope="module")
def loaded(merged):
    """The base and the merged checkpoint through from_pretrained, in bf16."""
    base = AutoModelForCausalLM.from_pretrained(merged[0], dtype=torch.bfloat16).eval()
    model = AutoModelForCausalLM.from_pretrained(merged[1], dtype=torch.bfloat16).eval()
    yield base, model
    del base, model


@pytest.fixture(scope="module")
def merged_large(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge_large")
    base = random_base(root / "base", scale=LARGE, seed=1)
    margin = merge(base, root / "merged")
    return base, root / "merged", margin


def test_refuses_a_base_whose_widths_do_not_match(tmp_path):
    good = {"model_type": "qwen3_5_text", "hidden_size": 2048, "intermediate_size": 6144,
            "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "hidden_act": "silu", "rms_norm_eps": 1e-6,
            "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}
    for field, value, need in (("hidden_size", 1024, "2048"), ("linear_num_value_heads", 32, "16"),
                               ("intermediate_size", 8192, "6144"), ("linear_conv_kernel_dim", 3, "4")):
        (tmp_path / "config.json").write_text(json.dumps({**good, field: value}))
        with pytest.raises(MachineError, match=rf"{field} = {value}: the compiled layers need {need}"):
            merge(tmp_path, tmp_path / "out")
    (tmp_path / "config.json").write_text(json.dumps({**good, "model_type": "llama"}))
    with pytest.raises(MachineError, match="model_type 'llama'"):
        merge(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()          # refused before anything is written


def test_merged_checkpoint_loads_with_the_base_layers_behind_the_compiled_ones(merged, loaded):
    base_dir, out = merged
    description = json.loads((out / VOCAB_FILE).read_text())
    assert VOCAB_FILE == circuit_model.VOCAB_FILE
    base, model = loaded
    assert isinstance(model, Qwen3_5ForCausalLM)
    compiled = description["compiled_layers"]
    assert description["offset"] == base.config.vocab_size
    assert model.config.vocab_size == base.config.vocab_size + T.VOCAB_SIZE
    assert model.config.layer_types == ["linear_attention"] * (compiled + 1) + list(base.config.layer_types)
    assert "full_attention" in model.config.layer_types
    theirs = base.state_dict()
    mine = model.state_dict()
    for name, tensor in theirs.items():
        if name.startswith("model.layers."):
            index, rest = name[len("model.layers."):].split(".", 1)
            assert torch.equal(mine[f"model.layers.{int(index) + compiled + 1}.{rest}"], tensor), name
    offset = description["offset"]
    assert torch.equal(mine["model.embed_tokens.weight"][:offset], theirs["model.embed_tokens.weight"])
    assert torch.equal(mine["lm_head.weight"][:offset], theirs["model.embed_tokens.weight"])   # the base's tied head
    assert torch.equal(mine["model.norm.weight"], theirs["model.norm.weight"])
    assert description["gate"]["rows_moved"] == 0 and len(description["gate"]["dims"]) > 0   # rows share a direction


def base_text(vocab: int, positions: int, seed: int):
    return torch.randint(0, vocab, (1, positions), generator=torch.Generator().manual_seed(seed))


def test_base_text_passes_the_compiled_layers_untouched(merged, loaded):
    """The gate: at a base token's position every compiled unit and GDN head (and the bridge) adds exactly 0, so the
    base's first layer sees its own embedding row and the merged model computes the base's hidden states bit for bit;
    generate() (which leaves the GPU's ids out) continues base text greedily as the base does."""
    base, model = loaded
    description = json.loads((merged[1] / VOCAB_FILE).read_text())
    offset, first = description["offset"], description["base_layers"][0]
    ids = base_text(offset, 24, seed=3)
    with torch.no_grad():
        mine = model(input_ids=ids, output_hidden_states=True)
        theirs = base(input_ids=ids, output_hidden_states=True)
        assert torch.equal(mine.hidden_states[first], theirs.hidden_states[0])
        assert torch.equal(mine.hidden_states[-1], theirs.hidden_states[-1])
        # the GPU's output rows still outscore the base's tokens at base positions: generate() must leave them out
        assert bool((mine.logits[0, :, offset:].max(-1).values > mine.logits[0, :, :offset].max(-1).values).any())
        mine = model.generate(ids, max_new_tokens=6, do_sample=False)       # the GPU's ids suppressed
        theirs = base.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(mine, theirs)


def test_merged_device_decodes_the_interpreters_tokens(merged):
    """Device(backend="model", checkpoint=...) decodes greedily token by token (the base's layers included)."""
    words = np.array([-123456789, 65536, 7], dtype=np.int32)
    dev = Device(backend="model", checkpoint=str(merged[1]), dtype="bfloat16", device="cpu")
    dev.write(20, words)
    np.testing.assert_array_equal(dev.read(20, 3), words)
    del dev
    circuit_model._shared_checkpoint.cache_clear()          # the next tests load private copies


@pytest.fixture(scope="module")
def merged_backend(merged):
    """A private copy of the merged model (trace=True: not the shared one, so it is freed after this module)."""
    return ModelBackend(checkpoint=merged[1], trace=True)


def test_merged_model_verifies_the_stream_in_chunked_passes(merged_backend, stream):
    merged_backend._reset()
    result = verify_chunked(merged_backend, stream, chunk=128)
    assert result.compared == sum(t.origin == T.MODEL for t in stream[1:]) > 30
    assert result.mismatches == [], str(result)


def test_large_activation_base_keeps_every_argmax(merged_large, stream):
    base_dir, out, margin = merged_large
    assert margin.base_bound > 1000 and margin.amplitude > LARGE * 8       # the bridge grew with the base's bound
    backend = ModelBackend(checkpoint=out, trace=True)          # a private copy of the model: edited below
    result = verify_chunked(backend, stream, chunk=128)
    assert result.compared > 30 and result.mismatches == [], str(result)
    # The negative control of the margin argument: zero the bridge's amplitude and the base's layers win.
    backend._reset()
    bridge = json.loads((out / VOCAB_FILE).read_text())["bridge_layer"]
    with torch.no_grad():
        backend.model.model.layers[bridge].mlp.down_proj.weight.zero_()
    result = verify_chunked(backend, stream, chunk=128)
    assert result.mismatches, "the large base should move argmaxes once the bridge is gone"


def ranks_at_different_positions(checkpoint, run):
    """(alone, rows) for three ranks 5, 1 and 0 tokens in: per rank a backend fed its tokens and then ``run`` one by
    one, and a backend fed its tokens only (a row for forward_batch to feed ``run``)."""
    alone, rows = [], []
    for prefix in ([T.MEM(3), 9, T.MEM(4), 11, T.MEM(5)], [T.MEM(6)], []):
        backend, row = ModelBackend(checkpoint=checkpoint), ModelBackend(checkpoint=checkpoint)
        for token in prefix:
            backend.feed(token)
            row.feed(token)
        for token in run:
            backend.feed(token)
        alone.append(backend)
        rows.append(row)
    return alone, rows


@pytest.mark.parametrize("run", [[T.MEM(7)], [T.MEM(7), 13, T.READ(2)]], ids=["token", "run"])
def test_batched_ranks_at_different_positions_predict_what_they_predict_alone(merged_large, run):
    """Three ranks 5, 1 and 0 tokens in, each fed a token or a run of three in one forward (full-attention keys of
    the shorter rows padded and masked, causal within the run), with large activations in the base's layers: every
    rank predicts the GPU token it predicts fed token by token, and the compiled layers' states are bit for bit its
    own. The base's layers are not compared bit for bit: a batch of three is not a batch of one to the CPU's matrix
    kernels, nor a run a token (their last bits differ on some CPUs), which the margin argument allows."""
    alone, rows = ranks_at_different_positions(merged_large[1], run)
    ModelBackend.forward_batch(rows, [run] * 3)
    for backend, row in zip(alone, rows):
        assert row.position == backend.position
        assert row.predict() == backend.predict()
        for index in range(row.compiled_layers):
            mine, theirs = row.cache.layers[index], backend.cache.layers[index]
            assert torch.equal(mine.recurrent_states[0], theirs.recurrent_states[0])
            assert torch.equal(mine.conv_states[0], theirs.conv_states[0])
        for mine, theirs in zip(row.cache.layers, backend.cache.layers):
            if getattr(theirs, "keys", None) is not None:
                assert mine.keys.shape == theirs.keys.shape


def test_batched_rows_padding_is_masked_exactly(merged_large, monkeypatch):
    """The same batch twice, its padding zeros once and large random values once: every row's logits and keys are
    bit for bit the same (same shapes, so the same kernels; the mask gives the padding exact zero weights), so no
    rank sees another's length. Unmasked, the random padding moves the logits."""
    real = circuit_model._left_padded
    rng = torch.Generator().manual_seed(3)

    def noisy(layers, lengths):
        keys, values = real(layers, lengths)
        for i, length in enumerate(lengths):
            pad = max(lengths) - length
            keys[i, :, :pad] = 1e3 * torch.randn(keys[i, :, :pad].shape, generator=rng).to(keys.dtype)
            values[i, :, :pad] = 1e3 * torch.randn(values[i, :, :pad].shape, generator=rng).to(values.dtype)
        return keys, values

    def batch(padding, masked=True):
        rows = ranks_at_different_positions(merged_large[1], [])[1]
        with monkeypatch.context() as patch:
            patch.setattr(circuit_model, "_left_padded", padding)
            if not masked:      # the model given no mask: every padded key counts
                forward = rows[0].model.forward
                patch.setattr(rows[0].model, "forward", lambda *args, attention_mask, **kwargs: forward(
                    *args, attention_mask={"full_attention": None, "linear_attention": None}, **kwargs))
            ModelBackend.forward_batch(rows, [[T.MEM(7)]] * 3)
        return rows
    zeros, noise = batch(real), batch(noisy)
    for clean, dirty in zip(zeros, noise):
        assert torch.equal(clean._logits, dirty._logits), clean.position
        for mine, theirs in zip(clean.cache.layers, dirty.cache.layers):
            if getattr(theirs, "keys", None) is not None:
                assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)
    unmasked = batch(noisy, masked=False)
    assert not torch.equal(unmasked[2]._logits, zeros[2]._logits)   # 5 keys of padding before its 1


def test_merged_ranks_batch_into_the_interpreters_streams(merged_large):
    """Ranks of a merged model at different positions (rank r first writes 2r words alone and reads one back)
    run their next window batched (qwengpu.circuit.batched, as QLink's lockstep runs it): one forward of the three
    per prediction (the tokens fed in between go as one run), and each rank writes the interpreter's tokens."""
    rng = np.random.default_rng(7)
    prefix = [rng.integers(-2**31, 2**31, 2 * rank).astype(np.int32) for rank in range(3)]
    words = [rng.integers(-2**31, 2**31, 3).astype(np.int32) for _ in range(3)]

    def prepare(dev, rank):
        if rank:
            dev.write(0, prefix[rank])
        dev.read(0, 1)

    def window(dev, rank):
        dev.write(40, words[rank])
        return dev.read(40, 3)
    reference, predictions = [], []
    for rank in range(3):
        dev = Device()
        prepare(dev, rank)
        before = len(dev.tokens)
        window(dev, rank)
        reference.append([t.id for t in dev.tokens])
        predictions.append(sum(t.origin == T.MODEL for t in list(dev.tokens)[before:]))
    devices = {rank: Device(backend="model", checkpoint=str(merged_large[1])) for rank in range(3)}
    for rank, dev in devices.items():
        prepare(dev, rank)
    rendezvous = Rendezvous()
    outcomes = run_windows(devices, [0, 1, 2], lambda rank: window(devices[rank], rank), rendezvous=rendezvous)
    for rank in range(3):
        np.testing.assert_array_equal(outcomes[rank], words[rank])
    assert [[t.id for t in devices[rank].tokens] for rank in range(3)] == reference
    assert set(rendezvous.batch_sizes) == {3} and rendezvous.forwards == predictions[0] == predictions[2]
    del devices
    circuit_model._shared_checkpoint.cache_clear()


def test_a_static_decode_step_writes_the_dynamic_caches_keys_and_ignores_the_unwritten_ones(merged_large, stream):
    """qccl_bench.model_gpu's decode step on a merged model (static keys, as a CUDA graph or torch.compile needs):
    fed the stream token by token, every full-attention key it writes is bit for bit the one a model backend's
    dynamic cache holds, it predicts what the backend predicts, and random values in the keys not yet written change
    no logit's bit (they are masked to weight 0; unmasked, they move the logits)."""
    from qccl_bench.model_gpu import Decoder
    backend = ModelBackend(checkpoint=merged_large[1])
    model, offset, n = backend.model, backend.offset, 12
    ids = [t.id for t in stream[:n]]
    full = [i for i, kind in enumerate(backend.layer_types) if kind == "full_attention"]
    rng = torch.Generator().manual_seed(5)

    def decode(noise=False, masked=True):
        decoder = Decoder(model, 1, "cpu", max_len=n)
        for i in full if noise else ():
            layer = decoder.cache.layers[i]
            layer.keys.copy_(1e3 * torch.randn(layer.keys.shape, generator=rng))
            layer.values.copy_(1e3 * torch.randn(layer.values.shape, generator=rng))
        if not masked:
            decoder.mask.zero_()
        logits = [decoder.step(torch.tensor([[offset + token]])).float().clone() for token in ids]
        return decoder, logits
    decoder, static = decode()
    with pytest.raises(ValueError, match=f"step {n + 1}: the static keys hold max_len = {n} positions"):
        decoder.step(torch.tensor([[offset + ids[0]]]))
    for position, token in enumerate(ids):
        backend.feed(token)
        assert int(static[position].argmax()) == int(backend._logits.argmax()), position
    for i in full:
        assert torch.equal(decoder.cache.layers[i].keys[:, :, :n], backend.cache.layers[i].keys)
        assert torch.equal(decoder.cache.layers[i].values[:, :, :n], backend.cache.layers[i].values)
    _, noisy = decode(noise=True)
    assert all(torch.equal(a, b) for a, b in zip(static, noisy))
    _, unmasked = decode(noise=True, masked=False)
    assert not torch.equal(unmasked[0], static[0])


def test_gpu_benchmark_compiles_a_merged_models_step(merged):
    """qccl_bench.model_gpu --compile on a merged model, on the CPU path: its static keys give the step fixed shapes,
    so torch.compile (inductor) compiles it once and every model-written token of each rank's stream is the
    recording's, as in the eager step beside it."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-m", "qccl_bench.model_gpu", "--device", "cpu", "--checkpoint",
                             str(merged[1]), "--no-report", "--no-table", "--ranks", "2", "--steps", "5", "--compile"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split("|") for line in result.stdout.splitlines() if line.startswith("|") and "eager" in line]
    assert [row[2].strip() for row in rows] == ["eager", "eager + torch.compile"]
    assert [row[5].strip() for row in rows] == ["0", "0"] and "failures: 0" in result.stdout


def test_a_base_token_argmax_is_a_machine_error(merged_backend):
    backend = merged_backend
    backend._reset()
    backend.feed(T.READ(3))
    backend._logits = torch.zeros_like(backend._logits)
    backend._logits[5] = 1.0                       # a base token wins
    with pytest.raises(MachineError, match="vocabulary id 5, not one of the GPU's tokens"):
        backend.predict()



def test_rows_that_read_too_little_on_the_gate_move_on_its_dimensions_only(merged_large):
    """The large base's rows are drawn around 0 (no shared direction): the merge moves those that read too little on
    the gate, on the gate's dimensions only, and the compiled layers still add exactly 0 at their positions."""
    base_dir, out, _ = merged_large
    description = json.loads((out / VOCAB_FILE).read_text())
    gate, offset, first = description["gate"], description["offset"], description["base_layers"][0]
    assert 0 < gate["rows_moved"] < gate["rows"] == offset
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16).model.embed_tokens.weight
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).eval()
    rows = model.model.embed_tokens.weight[:offset]
    moved = (rows != base).any(dim=1)
    assert int(moved.sum()) == gate["rows_moved"]
    others = torch.ones(rows.shape[1], dtype=torch.bool)
    others[gate["dims"]] = False
    assert torch.equal(rows[:, others], base[:, others])
    ids = torch.cat([moved.nonzero()[:8, 0], (~moved).nonzero()[:8, 0]]).view(1, -1)
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids, output_hidden_states=True).hidden_states[first][0], rows[ids[0]])
