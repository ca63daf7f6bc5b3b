"""Each lowering stage on hand-written PTX: basic blocks, the transfer function, propagation, addresses, predicates,
the emitted sequences (run on the interpreter against PTX semantics folded on constants), fusion, allocation."""
from __future__ import annotations

import importlib
import itertools
import re

import numpy as np
import pytest

from qwengpu import Device
from qwengpu.isa import MachineError, alu
from qwengpu.lowering import Program, bind_arguments
from qwengpu.lowering.cfg import basic_blocks
from qwengpu.lowering.emit import TWO_ATOMS
from qwengpu.lowering.mop import MOp
from qwengpu.lowering.pointers import address_registers
from qwengpu.lowering.predicates import Predicate
from qwengpu.lowering.regalloc import allocate
from qwengpu.lowering.semantics import fold
from qwengpu.lowering.transfer import make_reader, step
from qwengpu.lowering.values import DYNAMIC, Affine, Const, Context
from qwengpu.ptx import parse

fuse = importlib.import_module("qwengpu.lowering.fuse").fuse
propagate = importlib.import_module("qwengpu.lowering.propagate").propagate

HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"


def launchable(body: str) -> str:
    """PTX text of a kernel k(u64, u32) around ``body``, for a Device to load."""
    return HEADER + (".visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)\n{\n"
                     ".reg .pred %p<8>; .reg .b32 %r<16>; .reg .b64 %rd<16>;\n" + body + "\n}\n")


def kernel(body: str, params: str = ".param .u64 k_param_0, .param .u32 k_param_1", regs: str = "") -> object:
    decls = regs or ".reg .pred %p<8>; .reg .b16 %rs<8>; .reg .b32 %r<16>; .reg .b64 %rd<16>;"
    return parse(HEADER + f".visible .entry k({params})\n{{\n{decls}\n{body}\n}}\n").kernels["k"]


LOOP = """
    ld.param.u32 %r1, [k_param_1];
    mov.u32 %r2, 0;
$L_head:
    add.s32 %r2, %r2, 1;
    setp.lt.s32 %p1, %r2, %r1;
    @%p1 bra $L_head;
    ret;
"""


def test_basic_blocks_and_successors():
    blocks = basic_blocks(kernel(LOOP))
    assert [b.successors for b in blocks] == [[1], [1, 2], []]
    assert blocks[1].labels == ["$L_head"]


def test_transfer_of_a_guard_that_is_constant_false_leaves_the_state():
    k = kernel("ld.param.u32 %r1, [k_param_1];\nsetp.ne.s32 %p1, %r1, 0;\n@%p1 mov.u32 %r2, 5;\nret;")
    context = Context(bind_arguments(k, [0, 0]), 4)
    state = {"%r2": DYNAMIC}
    read = make_reader(state, context)
    for inst in k.body[:-1]:
        step(inst, state, read, context)
    assert state["%r2"] == DYNAMIC and state["%p1"] == Const(0)
    context = Context(bind_arguments(k, [0, 1]), 4)
    state = {"%r2": DYNAMIC}
    read = make_reader(state, context)
    for inst in k.body[:-1]:
        step(inst, state, read, context)
    assert state["%r2"] == Const(5)


def test_transfer_joins_under_a_lane_guard_and_tracks_thread_indices():
    k = kernel("mov.u32 %r1, %tid.x;\nshl.b32 %r2, %r1, 2;\nadd.s32 %r3, %r2, 8;\n"
               "setp.eq.s32 %p1, %r1, 1;\n@%p1 mov.u32 %r3, 0;\nret;")
    context = Context({"k_param_0": Const(0), "k_param_1": Const(0)}, 4)
    state = {}
    read = make_reader(state, context)
    for inst in k.body[:3]:
        step(inst, state, read, context)
    assert state["%r3"] == Affine(4, 8)
    for inst in k.body[3:5]:
        step(inst, state, read, context)
    assert state["%p1"] == DYNAMIC and state["%r3"] == DYNAMIC


def test_propagation_folds_launch_arguments_through_the_loop():
    k = kernel(LOOP)
    entry = propagate(k, basic_blocks(k), Context(bind_arguments(k, [0, 3]), 4))
    assert entry[1]["%r1"] == Const(3) and entry[1]["%r2"] == DYNAMIC


def test_addresses_are_decided_by_use_not_by_multiplier():
    k = kernel("""
    ld.param.u64 %rd1, [k_param_0];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    mul.wide.u32 %rd4, %r1, 8192;
    cvt.u32.u64 %r2, %rd4;
    st.global.u32 [%rd3], %r2;
    ret;""")
    assert address_registers(k.body) == {"%rd1", "%rd2", "%rd3"}


def test_predicates_simplify_exactly():
    p, c = Predicate.atom("%p1"), Predicate.atom("%p2")
    assert (p & c) | (p & ~c) == p
    assert (p | ~p).always and (p & ~p).never


@pytest.mark.parametrize("rows", sorted(TWO_ATOMS, key=sorted))
def test_every_two_atom_predicate_is_one_machine_op(rows):
    op, negated = TWO_ATOMS[rows]
    for a, b in itertools.product((False, True), repeat=2):
        assert ((alu(op, int(a), int(b)) != 0) != negated) == ((a, b) in rows)


def test_fusion_packs_a_value_into_its_store_and_a_load_into_its_use():
    mops = fuse([MOp("add", ("tid", 0), (None, 1), "%r2"), MOp("a", ("%r2", 0), store=("tid", 0))])
    assert len(mops) == 1 and mops[0].store == ("tid", 0) and mops[0].a == ("tid", 1) and mops[0].dst is None
    mops = fuse([MOp("a", ("tid", 4), load=True, dst="%r1"), MOp("add", ("%r1", 0), (None, 1), "%r2"),
                 MOp("mul", ("%r2", 0), (None, 3), "%r3"), MOp("a", ("%r3", 0), store=("tid", 0))])
    assert len(mops) == 2 and mops[0].load and mops[0].a == ("tid", 4) and mops[-1].store == ("tid", 0)


def test_allocation_refuses_more_registers_than_the_machine_has():
    mops = [MOp("add", ("tid", 0), (None, i), f"%v{i}") for i in range(16)]
    mops.append(MOp("add", (mops[0].dst, 0), (mops[1].dst, 0), "%s0"))
    for i in range(2, 16):
        mops.append(MOp("add", (f"%s{i - 2}", 0), (f"%v{i}", 0), f"%s{i - 1}"))
    mops.append(MOp("a", ("%s14", 0), store=("tid", 0)))
    with pytest.raises(MachineError, match="registers per lane; the machine has 15"):
        allocate("k", mops, False)
    program = allocate("k", mops[:1] + [MOp("a", ("%v0", 0), store=("tid", 0))], False)
    assert isinstance(program, Program) and program.registers == 1


# Instruction sequences run on the machine against PTX's meaning folded on constants (semantics.fold): two
# independent definitions of each instruction.
SEQUENCES = [
    ("bfe.u32 %r3, %r2, 5, 9;", "b32"), ("bfe.s32 %r3, %r2, 20, 8;", "b32"), ("bfi.b32 %r3, %r2, %r4, 8, 12;", "b32"),
    ("prmt.b32 %r3, %r2, %r4, 0x7531;", "b32"), ("prmt.b32 %r3, %r2, %r4, 0x8F40;", "b32"),
    ("prmt.b32 %r3, %r2, %r4, %r5;", "b32"), ("prmt.b32 %r3, %r5, %r2, %r4;", "b32"),
    ("shf.l.wrap.b32 %r3, %r2, %r4, 7;", "b32"), ("shf.r.clamp.b32 %r3, %r2, %r4, 12;", "b32"),
    ("shf.l.wrap.b32 %r3, %r2, %r4, %r4;", "b32"), ("shf.r.clamp.b32 %r3, %r2, %r4, %r2;", "b32"),
    ("lop3.b32 %r3, %r2, %r4, %r5, 0xB2;", "b32"), ("lop3.b32 %r3, %r2, %r4, %r5, 0xE8;", "b32"),
    ("lop3.b32 %r3, %r2, %r4, %r5, 0x96;", "b32"), ("lop3.b32 %r3, %r2, %r4, %r5, 0xFF;", "b32"),
    ("lop3.b32 %r3, %r2, %r4, %r5, 0xCC;", "b32"), ("lop3.b32 %r3, %r2, %r4, %r5, 0x01;", "b32"),
    ("add.u16x2 %r3, %r2, %r4;", "b32"), ("sub.s16x2 %r3, %r2, %r4;", "b32"), ("max.s16x2 %r3, %r2, %r4;", "b32"),
    ("min.u16x2 %r3, %r2, %r4;", "b32"), ("max.s32.relu %r3, %r2, %r4;", "b32"), ("min.relu.s32 %r3, %r2, %r4;", "b32"),
    ("dp4a.s32.u32 %r3, %r2, %r4, %r5;", "b32"), ("dp4a.u32.u32 %r3, %r2, %r4, %r5;", "b32"),
    ("dp2a.hi.s32.s32 %r3, %r2, %r4, %r5;", "b32"), ("dp2a.lo.u32.s32 %r3, %r2, %r4, %r5;", "b32"),
    ("max.s16x2.relu %r3, %r2, %r4;", "b32"), ("min.relu.s16x2 %r3, %r2, %r4;", "b32"),
    ("vabsdiff4.s32.s32.s32 %r3, %r2, %r4, %r5;", "b32"),
    ("vabsdiff4.u32.u32.u32.add %r3, %r2, %r4, %r5;", "b32"), ("vabsdiff2.s32.s32.s32.add %r3, %r2, %r4, %r5;", "b32"),
    ("vabsdiff2.u32.u32.u32 %r3, %r2, %r4, %r5;", "b32"),
    ("abs.s32 %r3, %r2;", "b32"), ("cnot.b32 %r3, %r2;", "b32"), ("neg.s32 %r3, %r2;", "b32"),
    ("slct.s32.s32 %r3, %r2, %r4, %r2;", "b32"), ("min.s32 %r3, %r2, %r4;", "b32"), ("max.u32 %r3, %r2, %r4;", "b32"),
    ("div.s32 %r3, %r2, %r4;", "b32"), ("rem.u32 %r3, %r2, %r4;", "b32"), ("mul.lo.s32 %r3, %r2, %r4;", "b32"),
    ("shr.s32 %r3, %r2, %r4;", "b32"), ("mad.lo.s32 %r3, %r2, %r4, %r2;", "b32"),
]


@pytest.mark.parametrize("text,typ", SEQUENCES)
def test_emitted_sequence_matches_ptx_semantics(text, typ):
    body = f"""
    ld.param.u64 %rd1, [k_param_0];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.u32 %r2, [%rd3];
    ld.global.u32 %r4, [%rd3+32];
    ld.global.u32 %r5, [%rd3+96];
    {text}
    st.global.u32 [%rd3+64], %r3;
    ret;"""
    k_text = launchable(body)
    inst = [i for i in kernel(body).body if getattr(i, "text", "").startswith(text.split()[0])][0]
    rng = np.random.default_rng(len(text))
    a = rng.integers(0, 1 << 32, 8, dtype=np.uint64)
    b = rng.integers(0, 1 << 32, 8, dtype=np.uint64)
    a[:4] = [0, 0x80000000, 0xFFFFFFFF, 17]
    b[:4] = [3, 0xFFFFFFFF, 0, 1 << 31]
    dev = Device()
    dev.write(0, a.astype(np.int64))
    dev.write(8, b.astype(np.int64))
    c = a ^ b.view(np.uint64) >> np.uint64(3)
    dev.write(24, c.astype(np.int64))
    dev.launch(dev.load_kernel(k_text, "k"), threads=8, args=[0, 0])
    got = dev.read(16, 8).view(np.uint32)
    values = {"%r2": a, "%r4": b, "%r5": c}
    for lane in range(8):
        sources = [values[o.name][lane] if hasattr(o, "name") else o.value for o in inst.operands[1:]]
        assert int(got[lane]) == fold(inst, [int(v) for v in sources]), (lane, a[lane], b[lane])


@pytest.mark.parametrize("text, why", [
    ("add.s32.bogus %r3, %r2, %r4;", "the modifier .bogus of add is not built"),
    ("min.u32.relu %r3, %r2, %r4;", ".relu is built on min / max .s32 and .s16x2"),
    ("add.sat.s32 %r3, %r2, %r4;", "an integer instruction that saturates (.sat) is not built"),
    ("add.u8x4 %r3, %r2, %r4;", "add / sub / min / max .u16x2 / .s16x2 run"),
])
def test_a_modifier_the_lowering_does_not_read_is_refused_not_ignored(text, why):
    """An arithmetic instruction with a modifier none of the builders reads is refused naming it, before the
    launch, rather than run as the plain instruction."""
    body = f"""
    ld.param.u64 %rd1, [k_param_0];
    ld.global.u32 %r2, [%rd1];
    ld.global.u32 %r4, [%rd1+4];
    {text}
    st.global.u32 [%rd1+8], %r3;
    ret;"""
    k_text = launchable(body)
    dev = Device()
    dev.write(0, [5, 6, 7])
    with pytest.raises(MachineError, match=re.escape(why)):
        dev.launch(dev.load_kernel(k_text, "k"), threads=1, args=[0, 0])
    np.testing.assert_array_equal(dev.read(0, 3), [5, 6, 7])


def test_the_overlay_cutter_keeps_a_warp_instruction_whole():
    """No cut between two ops of one warp instruction (``MOp.whole``, from its first op to its last): the block's
    other warps run an overlay before a warp goes on, and would write the exchange words in between. Elsewhere cuts
    stay allowed."""
    from qwengpu.lowering.overlays import _Cutter
    mops = [MOp("add", ("tid", 0), (None, 1), "%v"),
            MOp("a", ("tid", 0), dst="%old", load=True),
            MOp("a", ("%v", 0), store=("tid", 0)),
            MOp("add", ("%v", 0), (None, 2), "%w"),
            MOp("a", ("%w", 0), store=(None, 124), whole=1),                   # 4: a shuffle's store ...
            MOp("ne", ("tid", 0), (None, 9), "%p"),
            MOp("a", (None, 125), dst="%y", load=True, whole=1),              # 6: ... and its load
            MOp("add", ("%old", 0), ("%y", 0), "%z"),
            MOp("a", ("%z", 0), store=("tid", 8))]
    assert _Cutter(mops, 8).uncut == {5, 6}


def test_every_lop3_truth_table_has_a_recipe_that_computes_it():
    """lop3's 256 functions of three bits: each recipe (lowering.bits) evaluated on the inputs' truth tables gives
    its own table, in at most 5 ops of and / or / xor / not (the machine's ops; no and-not)."""
    from qwengpu.lowering.bits import LOGIC_A, LOGIC_B, LOGIC_C, logic_recipe

    def value(function):
        recipe = logic_recipe(function)
        if recipe is None:
            return function, 0
        if recipe == ("input",):
            assert function in (LOGIC_A, LOGIC_B, LOGIC_C)
            return function, 0
        if recipe[0] == "not":
            table, ops = value(recipe[1])
            return table ^ 0xFF, ops + 1
        (x, n), (y, m) = value(recipe[1]), value(recipe[2])
        return {"and": x & y, "or": x | y, "xor": x ^ y}[recipe[0]], n + m + 1
    costs = []
    for function in range(256):
        table, ops = value(function)
        assert table == function, hex(function)
        costs.append(ops)
    assert max(costs) <= 5 and costs[0xE8] <= 4 and costs[0x96] == 2


# ------------------------------------------------------------------------------------------------ barriers

def test_barrier_keeps_only_registers_written_before_and_read_after_on_lanes_that_see_them():
    from qwengpu.lowering.barriers import kept_registers
    mops = [MOp("ne", ("tid", 0), (None, 0), "%p"),
            MOp("add", ("tid", 0), (None, 1), "%v"),                     # read after the barrier: kept
            MOp("a", ("tid", 0), dst="%w", pred=("%p", False)),
            MOp("a", ("%w", 0), store=("tid", 32), pred=("%p", False)),
            MOp(barrier=True),
            MOp("add", ("tid", 0), (None, 7), "%w", pred=("%p", False)),  # rewritten under the same mask ...
            MOp("a", ("%w", 0), store=("tid", 8), pred=("%p", False)),   # ... and read only there: not kept
            MOp("a", ("%v", 0), (None, 0), store=("tid", 16)),
            MOp("a", ("%never", 0), store=("tid", 24))]                  # never written: 0, as after the restart
    (kept,) = kept_registers(mops).values()
    assert kept == ["%p", "%v"]
    mops[6].pred = None                     # lanes where %p is 0 store %w's value from before the barrier
    (kept,) = kept_registers(mops).values()
    assert kept == ["%p", "%v", "%w"]
    del mops[5:7]
    (kept,) = kept_registers(mops).values()
    assert kept == ["%v"]


def test_barrier_expansion_parks_stores_restores_and_dispatches():
    from qwengpu.lowering.barriers import expand
    mops = [MOp("add", ("tid", 0), (None, 1), "%v"), MOp(barrier=True), MOp("a", ("%v", 0), store=("tid", 0)),
            MOp(barrier=True), MOp("a", ("tid", 0), store=("tid", 8))]
    out, slots = expand(mops, threads=8, base=100)
    assert slots == 2
    dispatch = out[:2]
    assert [(m.op, m.a, m.b, m.load, m.branch, m.restore) for m in dispatch] == [
        ("eq", ("tid", 100), (None, 1), True, "nonzero", True), ("eq", ("tid", 100), (None, 2), True, "nonzero", True)]
    parks = [i for i, m in enumerate(out) if m.parks]
    assert [(out[i].a, out[i].store, out[i].branch) for i in parks] == [((None, 1), ("tid", 100), "always"),
                                                                        ((None, 2), ("tid", 100), "always")]
    assert out[parks[0] - 1].a == ("%v", 0) and out[parks[0] - 1].store == ("tid", 108)      # %v kept in slot 1
    first_resume = out[dispatch[0].target_index]
    assert first_resume.restore and first_resume.a == ("tid", 108) and first_resume.dst == "%v"
    assert dispatch[1].target_index == parks[1] + 1                   # nothing is kept across the second barrier
    program = allocate("k", fuse(out), True)
    assert len(program.parks) == 2
    assert all(program.blocks[i].branch == "always" for i in program.parks)


# A loop with two backward branches to its start (a `continue`, then the loop's own latch), as nvcc writes loops with
# continue or a nested loop's exit: out[t] = sum of the odd j in 1 .. 2t+2 = (t+1)^2, a count that differs by lane.
TWO_LATCHES = """
.version 8.0
.target sm_52
.address_size 64
.visible .entry odd_sum(.param .u64 out) {
  .reg .b32 %r<6>; .reg .b64 %rd<4>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, 0;
  mov.u32 %r3, 0;
  shl.b32 %r5, %r1, 1;
  add.s32 %r5, %r5, 3;
$L_head:
  add.s32 %r3, %r3, 1;
  setp.ge.u32 %p3, %r3, %r5;
  @%p3 bra $L_done;
  and.b32 %r4, %r3, 1;
  setp.eq.s32 %p1, %r4, 0;
  @%p1 bra $L_head;
  add.s32 %r2, %r2, %r3;
  bra.uni $L_head;
$L_done:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r2;
  ret;
}
"""


def test_a_loop_with_two_latches_gets_one_and_runs_as_written():
    from qwengpu.lowering.cfg import merge_latches
    from qwengpu.ptx import Instruction, Label
    kernel = parse(TWO_LATCHES).kernels["odd_sum"]
    merged = merge_latches(kernel)
    assert merged is not kernel and len(kernel.body) < len(merged.body)
    backward = [(i, x.operands[0].name) for i, x in enumerate(merged.body)
                if isinstance(x, Instruction) and x.base == "bra"
                and any(isinstance(y, Label) and y.name == x.operands[0].name for y in merged.body[:i])]
    assert [name for _, name in backward] == ["$L_head"], "one backward branch is left, from the new latch"
    assert merge_latches(merged) is merged
    for threads in (4, 8):
        dev = Device()
        dev.launch(dev.load_kernel(TWO_LATCHES, "odd_sum"), threads, [0])
        want = [sum(j for j in range(1, 2 * t + 3) if j % 2) for t in range(threads)]     # the loop, run in Python
        assert dev.read(0, threads).tolist() == want


# nvcc's shape (from fuzz program 208 of seed 2026, trimmed): the block every path ends in (the store) is placed
# before the loop that reaches it, so three branches go back to it without being a loop, and they overlapped the
# real loop ("loops overlap without nesting").
EXIT_FIRST = HEADER + """
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1, .param .u32 k_param_2)
{
  .reg .pred %p<8>; .reg .b32 %r<40>; .reg .b64 %rd<20>;
  ld.param.u64 %rd2, [k_param_0];
  ld.param.u64 %rd3, [k_param_1];
  ld.param.u32 %r10, [k_param_2];
  cvta.to.global.u64 %rd1, %rd3;
  mov.u32 %r1, %tid.x;
  and.b32 %r12, %r1, 1;
  setp.ne.s32 %p1, %r12, 0;
  mov.u32 %r37, %r1;
  @%p1 bra $L__BB0_6;
  bra.uni $L__BB0_1;
$L__BB0_6:
  cvta.to.global.u64 %rd15, %rd2;
  mul.wide.u32 %rd16, %r1, 4;
  add.s64 %rd17, %rd15, %rd16;
  mov.u32 %r32, 93;
  sub.s32 %r33, %r32, %r37;
  st.global.u32 [%rd17], %r33;
  ret;
$L__BB0_1:
  add.s32 %r14, %r1, 1;
  and.b32 %r13, %r14, 7;
  mul.wide.u32 %rd4, %r13, 4;
  add.s64 %rd6, %rd1, %rd4;
  ld.global.u32 %r15, [%rd6];
  and.b32 %r35, %r15, 7;
  setp.eq.s32 %p2, %r35, 0;
  mov.u32 %r37, %r1;
  @%p2 bra $L__BB0_6;
  and.b32 %r19, %r10, 5;
  setp.eq.s32 %p3, %r19, 4;
  @%p3 bra $L__BB0_5;
  bra.uni $L__BB0_3;
$L__BB0_5:
  and.b32 %r25, %r1, 7;
  mul.wide.u32 %rd12, %r25, 4;
  add.s64 %rd14, %rd1, %rd12;
  ld.global.u32 %r26, [%rd14];
  mad.lo.s32 %r37, %r1, 3, %r26;
  bra.uni $L__BB0_6;
$L__BB0_3:
  mov.u32 %r37, %r1;
$L__BB0_4:
  and.b32 %r20, %r37, 7;
  mul.wide.u32 %rd9, %r20, 4;
  add.s64 %rd11, %rd1, %rd9;
  ld.global.u32 %r21, [%rd11];
  mad.lo.s32 %r37, %r37, 3, %r21;
  add.s32 %r35, %r35, -1;
  setp.eq.s32 %p6, %r35, 0;
  @%p6 bra $L__BB0_6;
  bra.uni $L__BB0_4;
}
"""


def _exit_first_in_python(tid: int, x: list[int], s0: int) -> int:
    """The PTX above, read as C."""
    v = tid
    if not tid & 1:
        j = x[(tid + 1) & 7] & 7
        if j:
            if s0 & 5 == 4:
                v = (tid * 3 + x[tid & 7]) & 0xFFFFFFFF
            else:
                while j:
                    v = (v * 3 + x[v & 7]) & 0xFFFFFFFF
                    j -= 1
    return (93 - v) & 0xFFFFFFFF


def test_layout_puts_a_shared_exit_after_the_loop_that_reaches_it():
    from qwengpu.lowering.cfg import layout
    from qwengpu.ptx import Instruction, Label
    k = parse(EXIT_FIRST).kernels["k"]
    laid = layout(k)
    assert laid is not k
    at = {x.name: i for i, x in enumerate(laid.body) if isinstance(x, Label)}
    backward = [x.operands[0].name for i, x in enumerate(laid.body)
                if isinstance(x, Instruction) and x.base == "bra" and at[x.operands[0].name] < i]
    assert backward == ["$L__BB0_4"], "the loop's latch is the only branch back"
    assert layout(laid) is laid, "a body in order is kept"
    rng = np.random.default_rng(5)
    for s0 in (0, 4, 12):
        for threads in (4, 6):
            x = [int(v) for v in rng.integers(0, 1 << 31, 8)]
            x[1], x[3] = 5, 7                  # lanes 0 and 2 loop 5 and 7 times (their j), lane 4 zero times
            dev = Device()
            dev.write(16, np.array(x, dtype=np.int64))
            dev.launch(dev.load_kernel(EXIT_FIRST, "k"), threads, [0, 16, s0])
            want = [_exit_first_in_python(t, x, s0) for t in range(threads)]
            assert (dev.read(0, threads).astype(np.int64) & 0xFFFFFFFF).tolist() == want, (s0, threads)


def test_layout_keeps_a_body_already_in_order():
    from qwengpu.lowering.cfg import layout
    k = kernel(LOOP)
    assert layout(k) is k


def test_cuda_13_atomic_helper_declaration_is_skipped_unless_used():
    """CUDA 13's atomicExch / atomicCAS declare an unused module-scope byte; a kernel that names it is refused."""
    from qwengpu.ptx import PTXError
    helper = ".global .align 1 .u8 _ZN26__nv_atomic_triv_cp_helperIiE5__valE;\n"
    unused = HEADER + helper + ".visible .entry k(.param .u64 k_param_0)\n{\n.reg .b64 %rd<3>;\nret;\n}\n"
    assert "k" in parse(unused).kernels
    used = HEADER + helper + (".visible .entry k(.param .u64 k_param_0)\n{\n.reg .b64 %rd<3>;\n"
                              "mov.u64 %rd1, _ZN26__nv_atomic_triv_cp_helperIiE5__valE;\nret;\n}\n")
    with pytest.raises(PTXError, match=r"_ZN26__nv_atomic_triv_cp_helperIiE5__valE"):
        parse(used)
    loaded = used.replace("mov.u64 %rd1, _ZN26__nv_atomic_triv_cp_helperIiE5__valE;",
                          "ld.global.u8 %rd1, [_ZN26__nv_atomic_triv_cp_helperIiE5__valE];")
    with pytest.raises(PTXError, match=r"line 8: unknown symbol _ZN26__nv_atomic_triv_cp_helperIiE5__valE"):
        parse(loaded)


# nvcc's other shape (fuzz program 3055 of seed 2026, trimmed): one side of an if inside a loop is placed before the
# loop's start and falls through into it, so the loop has a backward branch to that block and one to its start, and
# the two spans interleave.
ELSE_BEFORE_HEAD = HEADER + """
.visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)
{
  .reg .pred %p<4>; .reg .b32 %r<10>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r2, [%rd4];
  and.b32 %r3, %r2, 7;
  mov.u32 %r4, %r1;
  mov.u32 %r5, 0;
  setp.eq.s32 %p1, %r3, 0;
  @%p1 bra $L_done;
  bra.uni $L_head;
$L_else:
  mad.lo.s32 %r4, %r4, 3, 1;
$L_head:
  setp.eq.s32 %p2, %r3, 0;
  @%p2 bra $L_done;
  add.s32 %r3, %r3, -1;
  xor.b32 %r6, %r4, %r3;
  and.b32 %r7, %r6, 1;
  setp.eq.s32 %p3, %r7, 0;
  @%p3 bra $L_else;
  add.s32 %r5, %r5, %r4;
  bra.uni $L_head;
$L_done:
  mad.lo.s32 %r8, %r5, 7, %r4;
  add.s64 %rd5, %rd1, %rd3;
  st.global.u32 [%rd5], %r8;
  ret;
}
"""


def _else_before_head_in_python(t: int, x: list[int]) -> int:
    """The PTX above, read as C: n = x[t] & 7; while (n) { n--; if ((v0 ^ n) & 1) v3 += v0; else v0 = v0*3+1; }"""
    n, v0, v3 = x[t] & 7, t, 0
    while n:
        n -= 1
        if (v0 ^ n) & 1:
            v3 = (v3 + v0) & 0xFFFFFFFF
        else:
            v0 = (v0 * 3 + 1) & 0xFFFFFFFF
    return (v3 * 7 + v0) & 0xFFFFFFFF


@pytest.mark.parametrize("threads", [3, 4, 8])
def test_layout_of_a_loop_whose_else_side_is_placed_before_its_start(threads):
    from qwengpu.lowering.cfg import layout
    k = parse(ELSE_BEFORE_HEAD).kernels["k"]
    assert layout(k) is not k
    x = [5, 7, 0, 3, 6, 1, 7, 2]
    dev = Device()
    dev.write(16, np.array(x))
    dev.launch(dev.load_kernel(ELSE_BEFORE_HEAD, "k"), threads, [0, 16])
    want = [_else_before_head_in_python(t, x) for t in range(threads)]
    assert (dev.read(0, threads).astype(np.int64) & 0xFFFFFFFF).tolist() == want
