"""The compiled circuit evaluated exactly: it must predict every token the interpreter's model wrote."""
import numpy as np
import pytest

import qccl
from qwengpu import Device, MachineError
from qwengpu.circuit.basis import MEAN_SQUARE, CircuitError
from qwengpu.circuit.compiler import compile_circuit
from qwengpu.circuit.exact import CircuitBackend, compiled
from qwengpu.circuit.layers import QWEN35_2B
from qwengpu.circuit.suite import KERNELS, kernel_streams
from qwengpu.circuit.verify import verify

STREAMS = dict(kernel_streams(fuzz_seeds=0, idioms=False))     # the long idiom streams: make verify


@pytest.fixture(scope="module")
def circuit_backend():
    return CircuitBackend()


def test_the_stack_has_qwen35_2b_widths():
    circuit = compiled(QWEN35_2B)
    w = circuit.width
    assert (w.hidden, w.heads, w.head_dim, w.intermediate, w.conv) == (2048, 16, 128, 6144, 4)
    assert circuit.residual.used <= w.hidden
    for layer in circuit.layers:
        assert len(layer.heads) <= w.heads and len(layer.units) <= w.intermediate


def test_every_embedding_row_has_the_design_norm():
    table = compiled(QWEN35_2B).embedding().astype(np.float64)
    assert (np.einsum("ij,ij->i", table, table) / table.shape[1] == MEAN_SQUARE).all()


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_circuit_predicts_every_model_token(circuit_backend, name):
    state = circuit_backend.snapshot()
    result = verify(circuit_backend, STREAMS[name])
    circuit_backend.restore(state)
    assert result.compared > 0
    assert result.mismatches == [], str(result)
    assert result.min_margin >= 8


def test_circuit_device_writes_the_interpreters_tokens():
    def run(backend):
        dev = Device(backend=backend)
        a, b, c = dev.alloc(4), dev.alloc(4), dev.alloc(4)
        dev.write(a, [1, -2, 2**31 - 1, 7])
        dev.write(b, [10, 20, 1, -7])
        dev.launch(dev.load_kernel(KERNELS / "vadd.cu", "vadd"), threads=4, args=[a, b, c, 3])
        return dev.read(c, 4), [(t.id, t.origin) for t in dev.tokens]

    (values, tokens), (ref_values, ref_tokens) = run("circuit"), run("interpreter")
    np.testing.assert_array_equal(values, [11, 18, -2**31, 0])
    np.testing.assert_array_equal(values, ref_values)
    assert tokens == ref_tokens


def test_allreduce_over_qlink_on_the_circuit():
    rng = np.random.default_rng(3)
    send = [rng.integers(-2**31, 2**31, 4).astype(np.int32) for _ in range(2)]
    results = {}
    for backend in ("circuit", "interpreter"):
        comms = qccl.Communicator.init_all(2, transport="qlink", config={"backend": backend})
        recv = [np.zeros(4, np.int32) for _ in range(2)]
        with qccl.group():
            for c in comms:
                c.allreduce(send[c.rank], recv[c.rank], op="sum")
        results[backend] = (recv, [[t.id for t in d.tokens] for d in comms[0].world.devices.values()])
    expect = (send[0].astype(np.int64) + send[1]).astype(np.int32)     # int32 wrap-around, as on a GPU
    for r in results["circuit"][0]:
        np.testing.assert_array_equal(r, expect)
    assert results["circuit"][1] == results["interpreter"][1]


def test_a_broken_invariant_is_reported_at_its_layer():
    circuit = compile_circuit(QWEN35_2B)
    layer = circuit.layers[9]
    unit = next(u for (u, dim) in layer.gate if dim == 0)
    layer.gate[unit, 0] += 100.0             # this unit's gate no longer sits in saturation when it should be off
    backend = CircuitBackend(circuit=circuit)
    with pytest.raises(CircuitError, match=r"layer 9 \(ALU: digits"):
        verify(backend, STREAMS["vadd"])


def _one_op_kernel(op: str, operands: list, dst_base: int):
    """A kernel of one warp pair: r0 = mem[tid], then X = op(r0, B) stored at dst_base + 8 k + tid for each B."""
    from qwengpu.device import Kernel
    from qwengpu.isa import EXIT, TID, Block, Operand
    from qwengpu.lowering import Program
    blocks = [Block(op="a", a=Operand(TID), load=True, dst=0)]
    blocks += [Block(op=op, a=Operand(0), b=b, store=TID, store_imm=dst_base + 8 * k, store_enable=True)
               for k, b in enumerate(operands)]
    blocks.append(Block(op="a", branch="always", target=EXIT))
    return Kernel.from_program(Program(op, blocks, 1, False, []))


def _c_semantics(op: str, a: int, b: int) -> int:
    """The op on int32 / uint32 words as C on a GPU computes it (an independent reference for the ISA table)."""
    sa, ua = int(np.int32(a)), a & 0xFFFFFFFF
    if op == "mul":
        return (ua * (b & 0xFFFFFFFF)) & 0xFFFFFFFF
    q = abs(sa) // b * (1 if sa >= 0 else -1)               # C truncates toward zero
    return {"div_u": ua // b, "rem_u": ua % b, "div_s": q, "rem_s": sa - q * b}[op] & 0xFFFFFFFF


EDGE_WORDS = [0, 7, -1, -8, 2**31 - 1, -2**31, 123456789, -987654321]


@pytest.mark.parametrize("op", ["mul", "div_u", "div_s", "rem_u", "rem_s"])
def test_mul_and_division_on_edge_words(circuit_backend, op):
    from qwengpu.isa import NONE, Operand
    operands = [Operand(NONE, d) for d in range(1, 9)] if op != "mul" else \
        [Operand(NONE, w) for w in (3, -1, 0x10001, 2**31 - 1, -2**31, 255, 0x12345678, 16)]
    dev = Device()
    dev.write(0, EDGE_WORDS)
    dev.launch(_one_op_kernel(op, operands, 60), threads=8, args=[])
    got = dev.read(60, 64).astype(np.int64) & 0xFFFFFFFF
    np.testing.assert_array_equal(got, [_c_semantics(op, w, b.imm) for b in operands for w in EDGE_WORDS])
    state = circuit_backend.snapshot()
    result = verify(circuit_backend, dev.tokens)
    circuit_backend.restore(state)
    assert result.compared > 100 and result.mismatches == [], str(result)


@pytest.mark.parametrize("divisor", ["r1", 9, 0])
def test_a_division_outside_the_circuit_is_refused_before_it_starts(divisor):
    from qwengpu.isa import NONE, Operand
    dev = Device(backend="circuit")
    dev.write(0, [5])
    before = list(dev.tokens)
    b = Operand(1) if divisor == "r1" else Operand(NONE, divisor)
    with pytest.raises(MachineError, match=r"divides only by an immediate 1\.\.8, not by "):
        dev.launch(_one_op_kernel("div_s", [b], 60), threads=8, args=[])
    assert dev.tokens == before and not dev.busy
    np.testing.assert_array_equal(dev.read(0, 1), [5])


@pytest.mark.parametrize("seed", range(2))
def test_random_programs_over_every_compiled_op(circuit_backend, seed):
    from qwengpu.circuit.ops import SUPPORTED_OPS
    from qwengpu.circuit.fuzz import random_stream
    state = circuit_backend.snapshot()
    result = verify(circuit_backend, random_stream(100 + seed, SUPPORTED_OPS))
    circuit_backend.restore(state)
    assert result.compared > 500 and result.mismatches == [], str(result)


def test_a_deadlock_on_the_circuit_backend_is_detected():
    # Only tokens come out of the circuit: the device knows a spin loop by its block and the EXEC the model wrote.
    comms = qccl.Communicator.init_all(2, config={"fifo_slots": 1, "backend": "circuit"})
    x = [np.arange(4, dtype=np.int32) for _ in range(2)]
    y = [np.zeros(4, np.int32) for _ in range(2)]
    with pytest.raises(qccl.DeadlockError) as e:
        with qccl.group():
            for c in comms:
                c.allreduce(x[c.rank], y[c.rank], algo="ring")      # the default (auto) runs multicast here
    head = comms[0].heap.ring.head
    assert set(e.value.waits) == {0, 1}
    assert all(w.kernel == "prim" and w.address == head and w.value is None for w in e.value.waits.values())
    assert "value unknown" in str(e.value)


def test_atomic_lanes_see_the_stores_of_the_lanes_before_them(circuit_backend):
    from qwengpu.circuit.fuzz import DATA, program_stream
    from qwengpu.isa import EXIT, NONE, TID, Block, Operand
    shared = Operand(NONE, DATA + 3)
    own = Operand(TID, DATA + 10)
    program = [
        Block(op="b", b=Operand(TID, 1), dst=0),                                     # r0 = tid + 1
        Block(op="and", a=Operand(TID), b=Operand(NONE, 1), dst=1),                  # r1 = tid & 1
        Block(op="add", a=shared, load=True, b=Operand(0), store=NONE, store_imm=shared.imm, store_enable=True,
              atomic=True),                                                           # all lanes add into one word
        Block(op="add", a=own, load=True, b=Operand(NONE, 7), store=TID, store_imm=own.imm, store_enable=True,
              atomic=True, pred=1),                                                   # odd lanes, each its own word
        Block(op="sub", a=shared, load=True, b=Operand(1), store=NONE, store_imm=shared.imm, store_enable=True,
              atomic=True, pred=1, pred_negate=True, branch="always", target=EXIT),   # even lanes subtract
    ]
    from qwengpu.lowering import Program
    stream = program_stream(Program("atomics", program, 2, False, []), threads=7, data=np.arange(DATA))
    state = circuit_backend.snapshot()
    result = verify(circuit_backend, stream)
    circuit_backend.restore(state)
    assert result.compared > 100 and result.mismatches == [], str(result)


def test_simt_loop_on_the_circuit(circuit_backend):
    """The 'any' branch: a loop whose lanes leave at different trips, token for token with the interpreter."""
    from qwengpu.circuit.suite import simt_loop_stream
    stream = simt_loop_stream()
    state = circuit_backend.snapshot()
    result = verify(circuit_backend, stream)
    circuit_backend.restore(state)
    assert result.compared > 50 and result.mismatches == [], str(result)


def test_grid_stride_saxpy_on_the_circuit(circuit_backend):
    """idioms.cu's saxpy (a divergent loop from NVRTC's PTX); the rest of the idiom streams run in make verify."""
    from qwengpu.circuit.suite import idiom_streams
    (_, stream), = idiom_streams(short=True)
    state = circuit_backend.snapshot()
    result = verify(circuit_backend, stream)
    circuit_backend.restore(state)
    assert result.compared > 100 and result.mismatches == [], str(result)


def test_simt_loop_on_the_bf16_model():
    """The CI share of the bf16 model on the 'any' branch (chunked teacher-forced verify: many positions per
    forward); the idiom streams (saxpy, histogram, division, ...) on the model are make verify's."""
    from qwengpu.circuit.model import ModelBackend
    from qwengpu.circuit.suite import simt_loop_stream
    from qwengpu.circuit.verify import verify_chunked
    stream = simt_loop_stream()
    result = verify_chunked(ModelBackend(dtype="bfloat16"), stream, chunk=192)
    assert result.compared > 50 and result.mismatches == [], str(result)
    assert result.min_margin >= 8
