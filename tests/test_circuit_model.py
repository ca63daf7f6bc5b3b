"""The compiled circuit inside transformers' Qwen3.5 (bf16 on CPU): the same tokens as the interpreter, exactly.

CI's share is one short stream (loads, add, mul, div / rem, stores: about 300 tokens, one forward each);
`make verify` replays the whole suite."""
import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3_5ForCausalLM

from qwengpu import Device, MachineError
from qwengpu.circuit.exact import CircuitBackend
from qwengpu.circuit.model import VOCAB_FILE, ModelBackend, save_checkpoint
from qwengpu.circuit.report import chunk_deviation, deviation, exact_residuals, float64_rule, rule_margin
from qwengpu.circuit.verify import verify
from qwengpu.device import Kernel
from qwengpu.isa import EXIT, NONE, TID, Block, Operand
from qwengpu.lower import Program


def arithmetic_stream():
    """One warp: A = mem[tid], then A + B, A * B, (A * A) / 7 (signed), A % 6 (signed), A / 3 (unsigned), stored."""
    dev = Device()
    dev.write(0, [-123456789, 77, 2**31 - 1, -6])
    dev.write(4, [10, -3, 65537, -2**31])
    blocks = [Block(op="a", a=Operand(TID), load=True, dst=0),
              Block(op="a", a=Operand(TID, 4), load=True, dst=1),
              Block(op="add", a=Operand(0), b=Operand(1), store=TID, store_imm=8, store_enable=True),
              Block(op="mul", a=Operand(0), b=Operand(1), store=TID, store_imm=12, store_enable=True),
              Block(op="mul", a=Operand(0), b=Operand(0), dst=2),
              Block(op="div_s", a=Operand(2), b=Operand(NONE, 7), store=TID, store_imm=16, store_enable=True),
              Block(op="rem_s", a=Operand(0), b=Operand(NONE, 6), store=TID, store_imm=20, store_enable=True),
              Block(op="div_u", a=Operand(0), b=Operand(NONE, 3), store=TID, store_imm=24, store_enable=True,
                    branch="always", target=EXIT)]
    kernel = Kernel.from_program(Program("arithmetic", blocks, 3, False, []))
    dev.launch(kernel, threads=4, args=[])
    dev.read(8, 20)
    return dev.tokens


@pytest.fixture(scope="module")
def bf16():
    return ModelBackend(dtype="bfloat16", trace=True)


def test_the_model_is_transformers_qwen35_with_linear_attention_layers(bf16):
    model = bf16.model
    assert isinstance(model, Qwen3_5ForCausalLM)
    config = model.config
    assert set(config.layer_types) == {"linear_attention"}
    assert (config.hidden_size, config.intermediate_size, config.linear_num_key_heads, config.linear_num_value_heads,
            config.linear_key_head_dim, config.linear_value_head_dim, config.linear_conv_kernel_dim) == \
        (2048, 6144, 16, 16, 128, 128, 4)
    assert type(model.model.layers[0]).__name__ == "Qwen3_5DecoderLayer"
    assert next(model.parameters()).dtype == torch.bfloat16


@pytest.fixture(scope="module")
def arithmetic():
    """The arithmetic stream and the exact circuit's residual after every layer at each of its positions."""
    stream = arithmetic_stream()
    return stream, exact_residuals(stream, CircuitBackend(trace=True))


def test_bf16_model_follows_the_circuit_exactly_at_every_layer(bf16, arithmetic):
    stream, exact = arithmetic
    state = bf16.snapshot()
    report = deviation(bf16, stream, "arithmetic in bf16", exact=exact)
    bf16.restore(state)
    assert report.compared == sum(t.origin == "model" for t in stream[1:])
    assert report.mismatches == 0, report.table()
    assert report.layers == [0.0] * len(report.layers), report.table()
    assert report.min_margin >= 8


def test_bf16_model_is_exact_on_the_chunked_gdn_path_at_every_layer(bf16, arithmetic):
    """Chunked verify's forward (transformers' torch_chunk_gated_delta_rule, many positions at once, continued
    across forwards through the cache) leaves every layer of every position exactly on the circuit."""
    stream, exact = arithmetic
    state = bf16.snapshot()
    bf16._reset()
    report = chunk_deviation(bf16, stream, "arithmetic in bf16", "chunked", chunk=160, exact=exact)
    bf16.restore(state)
    assert report.compared == sum(t.origin == "model" for t in stream[1:])
    assert report.mismatches == 0, report.table()
    assert report.layers == [0.0] * len(report.layers), report.table()


def test_the_float64_rule_is_transformers_rule():
    """float64_rule, the reference of rule_margin, against transformers' own recurrent rule in float32 on random
    inputs (grouped value heads, a starting state): equal to float32's precision."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen
    torch.manual_seed(0)
    query, key = torch.randn(2, 5, 2, 8), torch.randn(2, 5, 2, 8)
    value, g, beta = torch.randn(2, 5, 4, 8), -torch.rand(2, 5, 4), torch.rand(2, 5, 4)
    state = torch.randn(2, 4, 8, 8)
    rule = getattr(qwen.torch_recurrent_gated_delta_rule, "__wrapped__", qwen.torch_recurrent_gated_delta_rule)
    out, _ = rule(query, key, value, g=g, beta=beta, initial_state=state, output_final_state=True,
                  use_qk_l2norm_in_kernel=True)
    real = float64_rule(query, key, value, g, beta, state)
    assert real.dtype == torch.float64 and real.shape == out.shape
    assert torch.allclose(real, out.double(), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(real, float64_rule(query, key, value, g, beta), rtol=1e-3, atol=1e-3)


def test_the_rules_bf16_outputs_lie_far_from_a_rounding_boundary(bf16, arithmetic):
    """Every nonzero output of the Gated DeltaNet rule in the bf16 model is the rule's float64 value rounded to
    nearest even, and lies within a millionth of a bf16 ulp of it: another fp32 implementation (flash-linear-
    attention's kernels, a GPU's approximate square roots) that errs by less than about half an ulp and rounds to
    nearest even writes the same bf16 outputs. Where the model writes 0, the float64 value is smaller than the L2
    norm's epsilon (1e-6): a residue of the epsilon, which the float32 rule rounds away."""
    stream, _ = arithmetic
    state = bf16.snapshot()
    bf16._reset()
    report = rule_margin(bf16, stream, "arithmetic", chunk=160)
    bf16.restore(state)
    assert len(report.layers) == 25 and report.outputs > 0
    assert report.rounded, report.table()
    assert max(report.layers) < 1e-6, report.table()
    assert max(report.zeros) < 1e-6, report.table()


def test_model_device_runs_host_copies(bf16):
    dev = Device(backend="model", dtype="bfloat16")
    words = np.array([0, 1, -1, 123456789, -2**31], dtype=np.int32)
    dev.write(40, words)
    np.testing.assert_array_equal(dev.read(40, 5), words)
    np.testing.assert_array_equal(dev.read(45, 1), [0])      # never written: the model reads zero


def test_a_run_leaves_what_its_tokens_fed_one_by_one_leave():
    """The device gives the model the tokens fed between two predictions as one run (ModelBackend.feed_run, one
    forward on transformers' chunked rule): at every prediction of a host copy's stream, every layer's states and
    the logits are bit for bit those of the same tokens fed one by one."""
    dev = Device()
    dev.write(40, [0, 1, -1, 123456789, -2**31])
    dev.read(40, 5)
    dev.write(3, [77])
    dev.read(3, 1)
    one, runs, run = ModelBackend(), ModelBackend(), []
    for token in dev.tokens:
        if token.origin == "model" and run:         # a prediction: what was fed since the last one is a run
            runs.feed_run(run)
            run = []
            assert torch.equal(runs._logits, one._logits) and runs.position == one.position
            for mine, theirs in zip(runs.cache.layers, one.cache.layers):
                assert torch.equal(mine.recurrent_states[0], theirs.recurrent_states[0])
                assert torch.equal(mine.conv_states[0], theirs.conv_states[0])
        one.feed(token.id)
        run.append(token.id)
    with pytest.raises(MachineError, match="empty run"):
        runs.feed_run([])


def test_checkpoint_round_trips_through_from_pretrained(bf16, tmp_path):
    directory = save_checkpoint(tmp_path / "qwengpu", model=bf16.model)
    assert (directory / "config.json").exists() and any(directory.glob("*.safetensors"))
    vocabulary = json.loads((directory / VOCAB_FILE).read_text())
    assert vocabulary["vocab_size"] == bf16.model.config.vocab_size
    loaded = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)
    assert isinstance(loaded, Qwen3_5ForCausalLM)
    for (name, mine), (other, theirs) in zip(bf16.model.state_dict().items(), loaded.state_dict().items()):
        assert name == other and torch.equal(mine, theirs), name
    del loaded
    dev = Device()
    dev.write(7, [123456789, -1, 0])
    dev.read(6, 4)
    result = verify(ModelBackend(checkpoint=directory, dtype="bfloat16"), dev.tokens)
    assert result.compared == 8 and result.mismatches == [], str(result)
