"""The machine's contracts: ROM encoding, the token grammar, limits as errors, atomics, step == whole launch."""
import random

import numpy as np
import pytest

from qwengpu import Device, MachineError
from qwengpu import tokens as T
from qwengpu.isa import EXIT, NONE, OPS, ROM_BLOCKS, TID, Block, Operand, alu, decode_block, encode_block

VADD = "qwengpu/kernels/vadd.cu"


def random_block(rng: random.Random) -> Block:
    def operand():
        return Operand(rng.choice([NONE, TID, rng.randrange(15)]), rng.randrange(1 << 32))
    store = rng.random() < 0.5
    load = rng.random() < 0.5
    return Block(op=rng.choice(sorted(OPS)), a=operand(), b=operand(), dst=rng.choice([NONE, rng.randrange(15)]),
                 load=load, store=rng.choice([NONE, TID, rng.randrange(15)]), store_imm=rng.randrange(1 << 32),
                 store_enable=store, atomic=store and load and rng.random() < 0.5,
                 pred=rng.choice([NONE, rng.randrange(15)]), pred_negate=rng.random() < 0.5,
                 branch=rng.choice(["none", "always", "nonzero", "zero"]),
                 target=rng.choice([EXIT, rng.randrange(ROM_BLOCKS)]))


def test_rom_rows_round_trip():
    rng = random.Random(7)
    for _ in range(500):
        block = random_block(rng)
        words = encode_block(block)
        assert all(0 <= w < 65536 for w in words)
        assert decode_block(words) == block


def test_alu_matches_numpy_int32():
    rng = np.random.default_rng(3)
    a = rng.integers(-2**31, 2**31, 200, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, 200, dtype=np.int64).astype(np.int32)
    checks = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "xor": np.bitwise_xor,
              "min_s": np.minimum, "max_s": np.maximum}
    with np.errstate(over="ignore"):
        for op, fn in checks.items():
            want = fn(a, b).astype(np.int32).view(np.uint32)
            got = [alu(op, int(x) & 0xFFFFFFFF, int(y) & 0xFFFFFFFF) for x, y in zip(a, b)]
            assert got == [int(w) for w in want], op
    assert alu("div_s", (-7) & 0xFFFFFFFF, 2) == (-3) & 0xFFFFFFFF      # C truncates toward zero
    assert alu("rem_s", (-7) & 0xFFFFFFFF, 2) == (-1) & 0xFFFFFFFF
    assert alu("shr_s", 0x80000000, 4) == 0xF8000000


def test_token_families_are_contiguous_and_named():
    for family, make, count in (("VAL", T.VAL, 65536), ("MEM", T.MEM, 128), ("READ", T.READ, 128),
                                ("EXEC", T.EXEC, 32), ("ROM", T.ROM, 32)):
        for arg in (0, count - 1):
            token = make(arg)
            assert T.kind(token) == family and T.argument(token) == arg
        with pytest.raises(ValueError, match=str(count - 1)):
            make(count)
    assert T.kind(T.END) == "END" and T.VOCAB_SIZE == T.END + 1
    assert T.name(T.MEM(5)) == "gpu_mem 5"


def device_with(words: dict[int, np.ndarray]) -> Device:
    dev = Device()
    for address, data in words.items():
        dev.alloc(len(data), at=address)
        dev.write(address, data)
    return dev


def test_host_write_is_write_records_and_read_is_model_written():
    dev = Device()
    a = dev.alloc(3)
    dev.write(a, np.array([1, -1, 70000], dtype=np.int32))
    fed = [t.id for t in dev.tokens]
    assert fed == T.write_record(a, 1) + T.write_record(a + 1, 0xFFFFFFFF) + T.write_record(a + 2, 70000)
    assert all(t.origin == T.HOST for t in dev.tokens)
    assert dev.read(a, 3).tolist() == [1, -1, 70000]
    assert [t.origin for t in dev.tokens[9:]] == [T.HOST, T.MODEL, T.MODEL] * 3
    assert dev.stats["tokens_written"] == 6


def test_record_grammar_of_a_launch():
    dev = device_with({0: np.arange(4), 4: np.full(4, 10)})
    kernel = dev.load_kernel(VADD, "vadd")
    start = len(dev.tokens)
    dev.launch(kernel, threads=4, args=[0, 4, 8, 4])
    stream = dev.tokens[start:]
    warp = [i for i, t in enumerate(stream) if t.id == T.WARP][0]
    assert all(t.origin == T.HOST for t in stream[:warp + 3])
    body = stream[warp + 3:]
    assert all(t.origin == T.MODEL for t in body) and body[-1].id == T.END
    records = [i for i, t in enumerate(body) if T.kind(t.id) == "EXEC"]
    assert len(records) == dev.stats["records"]
    for i in records:                                  # EXEC then two VALs per lane
        assert [T.kind(t.id) for t in body[i + 1:i + 9]] == ["VAL"] * 8
    stores = [t for t in body if T.kind(t.id) == "MEM"]
    assert [T.argument(t.id) for t in stores] == [8, 9, 10, 11]
    assert dev.read(8, 4).tolist() == [10, 11, 12, 13]


def test_atomics_from_every_lane_all_count():
    source = r'''
    extern "C" __global__ void total(const int *x, int *sum) { atomicAdd(sum, x[threadIdx.x]); }
    '''
    data = np.array([5, -3, 1 << 30, 7, 11, 1 << 30, -100, 2], dtype=np.int32)
    dev = device_with({0: data, 8: np.array([1], dtype=np.int32)})
    dev.launch(dev.load_kernel(source, "total"), threads=8, args=[0, 8])
    with np.errstate(over="ignore"):
        assert dev.read(8, 1)[0] == np.int32(1) + data.sum(dtype=np.int32)


def test_atomic_returns_the_old_value_lane_by_lane():
    source = r'''
    extern "C" __global__ void ticket(int *counter, int *out) { out[threadIdx.x] = atomicAdd(counter, 2); }
    '''
    dev = device_with({0: np.array([100], dtype=np.int32), 1: np.zeros(4, dtype=np.int32)})
    dev.launch(dev.load_kernel(source, "ticket"), threads=4, args=[0, 1])
    assert dev.read(1, 4).tolist() == [100, 102, 104, 106]
    assert dev.read(0, 1).tolist() == [108]


def test_steps_give_the_same_tokens_as_a_whole_launch():
    runs = []
    for by_steps in (False, True):
        dev = device_with({0: np.arange(8), 8: np.arange(8) * 3})
        kernel = dev.load_kernel(VADD, "vadd")
        if by_steps:
            dev.start(kernel, 8, [0, 8, 16, 7])
            while dev.busy:
                dev.step()
        else:
            dev.launch(kernel, threads=8, args=[0, 8, 16, 7])
        runs.append((dev.tokens, dev.read(16, 8).tolist()))
    assert runs[0] == runs[1]
    assert runs[0][1] == [0, 4, 8, 12, 16, 20, 24, 0]


def test_uniform_spin_loop_is_released_by_a_write_between_records():
    dev = device_with({0: np.zeros(1, dtype=np.int32), 1: np.zeros(4, dtype=np.int32)})
    kernel = dev.load_kernel("qwengpu/kernels/spin.cu", "spin")
    dev.start(kernel, 4, [0, 3, 1, 40])
    for _ in range(5):
        record = dev.step()
        assert record.wait is not None and record.wait.address == 0 and record.wait.expected == 3
    dev.write(0, np.array([3], dtype=np.int32))      # lands at the record boundary
    while dev.busy:
        dev.step()
    assert dev.read(1, 4).tolist() == [40 + i for i in range(4)]


def snapshot(dev: Device):
    return list(dev.tokens), dict(dev.stats), dev.read(0, 127).tolist(), list(dev.tokens)


def test_an_address_outside_memory_is_an_error_and_changes_nothing():
    dev = device_with({0: np.arange(8), 8: np.arange(8), 120: np.zeros(7, dtype=np.int32)})
    kernel = dev.load_kernel(VADD, "vadd")
    tokens, memory = list(dev.tokens), [int(v) for v in dev.backend.memory]
    with pytest.raises(MachineError, match=r"address 12[7-9].*outside 0\.\.126"):
        dev.launch(kernel, threads=8, args=[0, 8, 120, 8])
    assert dev.tokens == tokens and dev.backend.memory == memory and not dev.busy
    dev.launch(kernel, threads=8, args=[0, 8, 16, 8])   # the device still works
    assert dev.read(16, 8).tolist() == [2 * i for i in range(8)]


def test_launch_argument_errors():
    dev = Device()
    kernel = dev.load_kernel(VADD, "vadd")
    with pytest.raises(MachineError, match="takes 4 arguments"):
        dev.launch(kernel, threads=4, args=[0, 4, 8])
    with pytest.raises(MachineError, match="pointer 200"):
        dev.launch(kernel, threads=4, args=[0, 4, 200, 4])
    with pytest.raises(MachineError, match="must be an integer"):
        dev.launch(kernel, threads=4, args=[0, 4, 8, 1.5])
    with pytest.raises(MachineError, match="threads=0"):
        dev.launch(kernel, threads=0, args=[0, 4, 8, 4])
    with pytest.raises(MachineError, match="not in the module"):
        dev.load_kernel(VADD, "vsub")
    assert dev.tokens == [] and dev.stats["launches"] == 0


def test_a_call_with_the_wrong_arguments_is_named_before_the_kernel_is_lowered():
    """The count and the types are checked first, by the kernel's source name (not the compiler's _Z12scale...),
    before anything is lowered or fed; a double parameter takes a Python float (its float64 bits)."""
    dev = Device()
    source = "__global__ void scale(double *x, double a, int n) { if (threadIdx.x < n) x[threadIdx.x] *= a; }"
    kernel = dev.load_kernel(source, "scale")
    with pytest.raises(MachineError, match=r"kernel scale takes 3 arguments \(a pointer or a 64-bit integer, "
                                           r"double, a 32-bit integer\), got 2"):
        dev.launch(kernel, threads=4, args=[0, 2.0])
    with pytest.raises(MachineError, match=r"kernel scale argument 2 \(double\) must be a number, got None"):
        dev.launch(kernel, threads=4, args=[0, None, 4])
    assert dev.tokens == [] and kernel.lowerings == 0
    x = dev.alloc(4)
    dev.write(x, np.array([1.5, -3.0]))
    dev.launch(kernel, threads=2, args=[x, 0.1, 2])
    assert dev.read(x, 4).view(np.float64).tolist() == [1.5 * 0.1, -3.0 * 0.1]


def test_an_array_of_several_dimensions_is_written_in_c_order():
    """As cudaMemcpy copies a C-contiguous array: a matrix's rows one after another; a transposed view is copied
    as the matrix it shows."""
    dev = Device()
    m = np.arange(6, dtype=np.int32).reshape(2, 3) - 2
    p = dev.alloc(6)
    dev.write(p, m)
    assert dev.read(p, 6).tolist() == [-2, -1, 0, 1, 2, 3]
    dev.write(p, m.T)
    assert dev.read(p, 6).tolist() == [-2, 1, -1, 2, 0, 3]
    f = np.float32([[1.5, -0.0], [np.inf, 3.25]])
    dev.write(p, f)
    assert dev.read(p, 4).view(np.float32).tobytes() == f.tobytes()
    with pytest.raises(MachineError, match=r"integer or float32 array, got shape \(\) dtype int64"):
        dev.write(p, np.int64(3))


def test_memory_limits():
    dev = Device()
    with pytest.raises(MachineError, match=r"1\.\.127"):
        dev.alloc(128)
    a = dev.alloc(127)
    assert a == 0
    with pytest.raises(MachineError, match="out of device memory"):
        dev.alloc(1)
    with pytest.raises(MachineError, match="outside device memory"):
        dev.write(126, np.zeros(2, dtype=np.int32))
    with pytest.raises(MachineError, match="overlaps"):
        Device().alloc(4, at=2) and None or _overlap()


def _overlap():
    dev = Device()
    dev.alloc(4, at=2)
    dev.alloc(4, at=4)


def test_a_chain_longer_than_the_rom_runs_as_overlays():
    """24 multiply-xor steps are more blocks than the ROM holds: the lowering cuts them into overlays
    (tests/test_overlays.py); the result is Python's."""
    body = "".join(f"v = (v * x[{i}]) ^ x[{i + 1}];\n" for i in range(24))
    source = f'extern "C" __global__ void long_chain(volatile int *x, int *y) {{ int v = x[0];\n{body} y[0] = v; }}'
    dev = Device()
    kernel = dev.load_kernel(source, "long_chain")
    x = [(7919 * i + 3) % 1000 - 500 for i in range(25)]
    dev.write(0, x)
    dev.launch(kernel, threads=1, args=[0, 100])
    v = x[0]
    for i in range(24):
        v = ((v * x[i]) ^ x[i + 1]) & 0xFFFFFFFF
    assert int(dev.read(100, 1)[0]) & 0xFFFFFFFF == v
    assert len(kernel.program(kernel.arguments([0, 100]), 1).overlays) > 1


def test_more_values_live_than_registers_run_as_overlays():
    """Sixteen values all live at once (each is read twice, so no load can be packed into its reader) are more than
    the 15 registers: a cut keeps them in block memory, and each is loaded back where it is first used."""
    loads = "".join(f"int v{i} = x[{i}];\n" for i in range(16))
    mix = "".join(f"y[{i}] = v{i} ^ v{(i + 1) % 16};\n" for i in range(16))
    source = f'extern "C" __global__ void wide(volatile int *x, int *y) {{ {loads} {mix} }}'
    dev = Device()
    kernel = dev.load_kernel(source, "wide")
    x = [(2654435761 * (i + 1)) % (1 << 31) for i in range(16)]
    dev.write(0, x)
    dev.launch(kernel, threads=1, args=[0, 40])
    assert [int(v) for v in dev.read(40, 16)] == [x[i] ^ x[(i + 1) % 16] for i in range(16)]
    assert kernel.program(kernel.arguments([0, 40]), 1).overlays


def test_unsupported_instruction_names_its_text_and_line():
    source = 'extern "C" __global__ void scale(float *x) { x[threadIdx.x] = rsqrtf(x[threadIdx.x]); }'
    dev = Device()
    with pytest.raises(MachineError, match=r"line \d+.*rsqrt\.approx\.f32"):
        dev.launch(dev.load_kernel(source, "scale"), threads=4, args=[0])
    source = ('extern "C" __global__ void field(int *x) { int r; asm("bfe.u32 %0, %1, %2, 8;" : "=r"(r) : '
              '"r"(x[0]), "r"(x[threadIdx.x])); x[threadIdx.x] = r; }')   # (funnel shifts and byte permutes by a
    dev = Device()                                                      # register are lowered now: test_kernels)
    kernel = dev.load_kernel(source, "field")
    with pytest.raises(MachineError, match=r"unsupported PTX instruction at line \d+ \(bfe with a position or length "
                                           r"held in a register\): bfe\.u32"):
        dev.launch(kernel, threads=4, args=[0])


def test_an_integer_instruction_that_saturates_is_refused_as_integer_work():
    """add.sat.s32 is integer arithmetic: its refusal says so, not that the machine has no floating point."""
    source = ('extern "C" __global__ void clamp(int *x) { int r; asm("add.sat.s32 %0, %1, %2;" : "=r"(r) : '
              '"r"(x[threadIdx.x]), "r"(x[4])); x[threadIdx.x] = r; }')
    dev = Device()
    kernel = dev.load_kernel(source, "clamp")
    with pytest.raises(MachineError, match=r"\(an integer instruction that saturates \(\.sat\) is not built\): "
                                           r"add\.sat\.s32") as error:
        dev.launch(kernel, threads=4, args=[0])
    assert "floating point" not in str(error.value)


@pytest.mark.parametrize("threads", [4, 7])
def test_divergent_loop_runs_simt_style(threads):
    """A trip count that differs per lane: the loop repeats while any lane continues, the others masked off."""
    source = r'''extern "C" __global__ void tri(int *y) {
        int s = 0;
        for (int j = 0; j < threadIdx.x; j++) s += j;
        y[threadIdx.x] = s; }'''
    dev = Device()
    kernel = dev.load_kernel(source, "tri")
    dev.launch(kernel, threads=threads, args=[0])
    t = np.arange(threads)
    np.testing.assert_array_equal(dev.read(0, threads), t * (t - 1) // 2)
    assert any(b.branch == "any" for b in kernel.program((0,), threads).blocks)


def test_barrier_of_one_warp_is_free_and_of_two_warps_parks():
    """prim's __syncthreads: nothing in a block of one warp (qccl's programs); with two warps each warp parks there
    once (tests/test_shared_memory.py checks what that means against numpy)."""
    dev = Device()
    kernel = dev.load_kernel("qccl/kernels/prim.cu", "prim")
    args = (4 | 16, 4, 100, 0, 101, 0, 10, 20, 30, 40, 102, 0, 103, 0, 1)
    one, two = kernel.program(args, 4), kernel.program(args, 8)
    assert not one.parks and one.reserved == (0, 0)
    assert len(two.parks) == 1 and two.cleared[1] == 8
    dev.launch(kernel, threads=8, args=list(args))
    assert dev.launch_records[-1] > 2 * len(one.blocks)


def test_a_kernel_that_never_finishes_is_reported():
    dev = device_with({0: np.zeros(1, dtype=np.int32), 1: np.zeros(4, dtype=np.int32)})
    kernel = dev.load_kernel("qwengpu/kernels/spin.cu", "spin")
    tokens = list(dev.tokens)
    with pytest.raises(MachineError, match=r"still running after 50 records; it spins on address 0 \(value 0"):
        dev.launch(kernel, threads=4, args=[0, 1, 1, 0], max_records=50)
    assert dev.tokens == tokens and not dev.busy
