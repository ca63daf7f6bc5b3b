"""The compiler's stages: the compiled weights are pinned byte for byte, the layer plan is written once, the stages
pass groups as values, and no stage imports the compiler.

WEIGHTS_DIGEST was recorded at commit 9e62e3b, before the compiler was refactored into named stages (issue 13,
section 5), with ``python tests/test_compiler_stages.py``. The digest is computed here from the circuit's sparse
layers with its own dense layout (transformers' parameter names, shapes and float32 bytes, as
``qwengpu.circuit.model.state_dict`` lays them out; a test checks the two agree at a small width), so it does not
depend on the code it pins. Any change to any weight, to a parameter's shape or to the order of heads and units
changes it.
"""
from __future__ import annotations

import hashlib

import numpy as np

from qwengpu import tokens as T

WEIGHTS_DIGEST = "73821ad862c286a9e49d48361d1d9c9db4393cb07fa25194c3b304ae485aba27"   # commit 9e62e3b


def weight_tensors(circuit):
    """(name, float32 array) for every parameter of the compiled model, one at a time (full width: about 5.8 GB
    in all, so never all at once)."""
    w = circuit.width
    h, vd, heads = w.hidden, w.key_dim, w.heads

    def fill(entries, shape):
        out = np.zeros(shape, np.float32)
        if entries:
            keys = np.array(list(entries.keys()), dtype=np.int64)
            out[keys[:, 0], keys[:, 1]] = np.array(list(entries.values()), dtype=np.float32)
        return out

    yield "model.embed_tokens.weight", np.asarray(circuit.embedding(), np.float32)
    yield "model.norm.weight", np.zeros(h, np.float32)
    yield "lm_head.weight", fill(circuit.output_head(), (T.VOCAB_SIZE, h))
    for layer in circuit.layers:
        p = f"model.layers.{layer.index}."
        conv = np.zeros((w.conv_dim, 1, w.conv), np.float32)
        for channel, taps in layer.conv.items():
            conv[channel, 0] = taps
        a_log = np.full(heads, -np.inf, np.float32)
        for head, value in layer.a_log.items():
            a_log[head] = value
        yield p + "linear_attn.in_proj_qkv.weight", fill(layer.qkv, (w.conv_dim, h))
        yield p + "linear_attn.conv1d.weight", conv
        yield p + "linear_attn.in_proj_z.weight", fill(layer.z, (vd, h))
        yield p + "linear_attn.in_proj_b.weight", fill(layer.b, (heads, h))
        yield p + "linear_attn.in_proj_a.weight", fill(layer.a, (heads, h))
        yield p + "linear_attn.A_log", a_log
        yield p + "linear_attn.dt_bias", np.zeros(heads, np.float32)
        yield p + "linear_attn.norm.weight", np.ones(w.head_dim, np.float32)
        yield p + "linear_attn.out_proj.weight", fill(layer.out, (h, vd))
        yield p + "mlp.gate_proj.weight", fill(layer.gate, (w.intermediate, h))
        yield p + "mlp.up_proj.weight", fill(layer.up, (w.intermediate, h))
        yield p + "mlp.down_proj.weight", fill(layer.down, (h, w.intermediate))
        yield p + "input_layernorm.weight", np.zeros(h, np.float32)
        yield p + "post_attention_layernorm.weight", np.zeros(h, np.float32)


def weights_digest(circuit) -> str:
    """sha256 over every parameter's name, shape, dtype and bytes, in state-dict order."""
    digest = hashlib.sha256()
    for name, array in weight_tensors(circuit):
        array = np.ascontiguousarray(array)
        digest.update(f"{name}|{array.shape}|{array.dtype}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def test_compiled_weights_are_the_recorded_ones():
    from qwengpu.circuit.exact import compiled
    from qwengpu.circuit.layers import QWEN35_2B
    assert weights_digest(compiled(QWEN35_2B)) == WEIGHTS_DIGEST


def test_the_digest_reads_the_state_dicts_layout():
    """weight_tensors lays the weights out as the model backend's state dict does (names, order, shapes, bytes);
    checked on the first and last layers (the whole float32 state dict is 5.8 GB)."""
    import dataclasses

    from qwengpu.circuit.exact import compiled
    from qwengpu.circuit.layers import QWEN35_2B
    from qwengpu.circuit.model import state_dict
    circuit = compiled(QWEN35_2B)
    part = dataclasses.replace(circuit, layers=[circuit.layers[0], circuit.layers[-1]])
    expected = state_dict(part, "float32")
    mine = list(weight_tensors(part))
    assert [name for name, _ in mine] == list(expected)
    for name, array in mine:
        tensor = expected.pop(name)
        assert tuple(tensor.shape) == array.shape and tensor.numpy().tobytes() == array.tobytes(), name


STAGES = ("vocabulary", "control", "registers", "arithmetic", "memory", "multiply", "divide", "records")


def test_every_layer_is_named_by_the_plan():
    from qwengpu.circuit import plan
    from qwengpu.circuit.exact import compiled
    from qwengpu.circuit.layers import QWEN35_2B
    circuit = compiled(QWEN35_2B)
    assert len(circuit.layers) == plan.LAYERS == 25
    assert [layer.purpose for layer in circuit.layers] == plan.purposes()
    assert {part.stage for part in plan.PARTS} <= set(STAGES)
    held = sorted({i for part in plan.PARTS for i in part.layers})
    assert held == list(range(plan.LAYERS))
    for part in plan.PARTS:         # a part's layers are consecutive: a stage's data flows up the stack
        assert list(part.layers) == list(range(part.layers[0], part.layers[-1] + 1)), part


def test_the_stages_read_groups_as_values_not_by_name(monkeypatch):
    """Compiling never looks a group up by its name: every stage reads the groups handed to it."""
    from qwengpu.circuit.basis import Residual
    from qwengpu.circuit.compiler import compile_circuit

    def by_name(self, name):
        raise AssertionError(f"a stage looked up the group {name!r} by name")
    monkeypatch.setattr(Residual, "__getitem__", by_name)
    circuit = compile_circuit()
    assert circuit.residual.used <= circuit.width.hidden


def test_no_stage_imports_the_compiler():
    """compiler.py imports the stages; the stages (and the modules they share) never import compiler.py, neither by
    their import lines nor at run time."""
    import ast
    import importlib
    import subprocess
    import sys
    shared = ("plan", "ops", "basis", "layers")
    for name in STAGES + shared:
        module = importlib.import_module(f"qwengpu.circuit.{name}")
        tree = ast.parse(open(module.__file__).read())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
                imported.update(f"{node.module or ''}.{a.name}".lstrip(".") for a in node.names)
        assert not any(i == "compiler" or i.endswith(".compiler") for i in imported), (name, sorted(imported))
    imports = "; ".join(f"import qwengpu.circuit.{name}" for name in STAGES + shared)
    check = f"import sys; {imports}; assert 'qwengpu.circuit.compiler' not in sys.modules"
    subprocess.run([sys.executable, "-c", check], check=True)


if __name__ == "__main__":
    import time

    from qwengpu.circuit.compiler import compile_circuit
    start = time.time()
    print(weights_digest(compile_circuit()), f"({time.time() - start:.1f} s)")
