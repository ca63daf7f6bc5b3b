"""The PTX parser: real compiler output (NVRTC, nvcc, clang-19 when present), handwritten forms, and errors."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qwengpu import toolchain
from qwengpu.ptx import Imm, Instruction, Kernel, Label, Mem, Module, Param, PTXError, Reg, parse

ROOT = Path(__file__).resolve().parent.parent
VADD = ('extern "C" __global__ void vadd(const int*a,const int*b,int*c,int n)'
        '{int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) c[i]=a[i]+b[i];}')
CHECKED_IN = sorted(p for d in ("qwengpu/kernels", "qccl/kernels") for p in (ROOT / d).rglob("*.ptx"))
needs_nvrtc = pytest.mark.skipif(not toolchain.nvrtc_available(), reason="NVRTC cannot be loaded")

HEADER = ".version 9.0\n.target sm_90\n.address_size 64\n"

HANDWRITTEN = HEADER + """
/* a block comment
   over three lines */
.visible .entry first(
\t.param .u64 first_param_0,   // pointer
\t.param .b32 first_param_1
)
.maxntid 4, 1, 1
{
\t.reg .pred \t%p<3>;
\t.reg .b32 \t%r<6>;
\t.reg .b64 \t%rd<4>;
\t.pragma "nounroll";
\tld.param.u64 \t%rd1, [first_param_0];
\tld.param.b32 \t%r1, [first_param_1+0];
\tld.global.u32 \t%r2, [%rd1+-8];
\tld.global.u32 \t%r3, [%rd1+4];
\tld.global.u32 \t%r4, [%rd1-12];
\tld.global.u32 \t%r5, [16];
\tsetp.lt.u32 \t%p1, %r1, 0x10;
\t@!%p1 bra.uni \t$L__BB0_2;
\tadd.s32 %r2, %r2, -3; add.s32 %r2, %r2, 010;
$L__BB0_2: st.global.u32 [%rd1], %r2;
\tret;
}

.entry second()
{
\t.reg .pred %p<10>;
\tmembar.sys;
\tbar.sync \t0;
$L__BB1_1:
\t@%p9 bra $L__BB1_1;
}
"""


def _instrs(k: Kernel) -> list[Instruction]:
    return [x for x in k.body if isinstance(x, Instruction)]


def _check_vadd(m: Module) -> None:
    assert isinstance(m, Module) and m.address_size == 64 and m.target == "sm_90"
    k = m.kernels["vadd"]
    assert k.params == [Param("vadd_param_0", "u64"), Param("vadd_param_1", "u64"),
                        Param("vadd_param_2", "u64"), Param("vadd_param_3", "u32")]
    assert k.registers == {"%p": "pred", "%r": "b32", "%rd": "b64"}
    ins = _instrs(k)
    assert ins[0].opcode == "ld.param.u64" and ins[0].operands == (Reg("%rd1"), Mem("vadd_param_0", 0))
    assert ins[0].base == "ld" and ins[0].modifiers == ("param", "u64")
    bra = next(i for i in ins if i.base == "bra")
    assert bra.guard == Reg("%p1") and not bra.guard_negated and bra.operands == (Label("$L__BB0_2"),)
    assert Label("$L__BB0_2") in k.body and ins[-1].opcode == "ret" and ins[-1].operands == ()
    specials = {o.name for i in ins for o in i.operands if isinstance(o, Reg) and "." in o.name}
    assert specials == {"%tid.x", "%ntid.x", "%ctaid.x"}
    st = next(i for i in ins if i.base == "st")
    assert st.opcode == "st.global.u32" and isinstance(st.operands[0], Mem) and st.operands[0].base == Reg("%rd10")


@needs_nvrtc
def test_parse_nvrtc_vadd():
    m = parse(toolchain.compile_cuda(VADD, "vadd.cu"))
    assert m.version == "9.0"
    _check_vadd(m)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_parse_nvcc_vadd(tmp_path):
    cu = tmp_path / "vadd.cu"
    cu.write_text(VADD)
    _check_vadd(parse(toolchain.compile_with_nvcc(cu)))


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 is not on PATH")
def test_parse_clang_output(tmp_path):
    cu = tmp_path / "vadd.cu"
    cu.write_text(VADD)
    m = parse(toolchain.compile_with_clang(cu))
    k = m.kernels["vadd"]
    assert m.version == "7.8" and len(k.params) == 4 and k.params[3].type in ("u32", "b32")
    prim = parse(toolchain.compile_with_clang(ROOT / "qccl/kernels/prim.cu")).kernels["prim"]
    assert len(prim.params) == 15
    # clang-19's own spellings for the address arithmetic and constants
    ops = {i.opcode for i in _instrs(prim)}
    assert {"cvt.u64.u32", "shl.b64", "mul.wide.u32", "mov.b32", "membar.sys", "bar.sync"} <= ops, ops


def test_parse_prim():
    m = parse((ROOT / "qccl/kernels/prim.ptx").read_text())
    k = m.kernels["prim"]
    assert len(k.params) == 15 and [p.name for p in k.params] == [f"prim_param_{i}" for i in range(15)]
    assert [p.type for p in k.params[:5]] == ["u32", "u32", "u64", "u32", "u64"]
    assert k.registers == {"%p": "pred", "%rs": "b16", "%r": "b32", "%rd": "b64"}
    ins = _instrs(k)
    ops = {i.opcode for i in ins}
    assert {"ld.volatile.global.u32", "st.volatile.global.u32", "membar.sys", "bar.sync", "bra.uni",
            "selp.b32", "or.pred", "div.s32", "div.u32"} <= ops
    labels = [x.name for x in k.body if isinstance(x, Label)]
    assert labels and len(labels) == len(set(labels))
    # every branch target is a defined label, every guard a predicate
    for i in ins:
        if i.base == "bra":
            assert i.operands[0].name in labels
        if i.guard is not None:
            assert i.guard.name.startswith("%p")


@pytest.mark.parametrize("ptx", CHECKED_IN, ids=[str(p.relative_to(ROOT)) for p in CHECKED_IN])
def test_checked_in_ptx_parses(ptx):
    m = parse(ptx.read_text())
    assert m.kernels and all(_instrs(k) for k in m.kernels.values())


def test_handwritten_forms():
    m = parse(HANDWRITTEN)
    assert list(m.kernels) == ["first", "second"]
    k = m.kernels["first"]
    assert k.params == [Param("first_param_0", "u64"), Param("first_param_1", "b32")]
    ins = _instrs(k)
    by_text = {i.text: i for i in ins}
    assert by_text["ld.param.b32 %r1, [first_param_1+0]"].operands[1] == Mem("first_param_1", 0)
    assert by_text["ld.global.u32 %r2, [%rd1+-8]"].operands[1] == Mem(Reg("%rd1"), -8)
    assert by_text["ld.global.u32 %r3, [%rd1+4]"].operands[1] == Mem(Reg("%rd1"), 4)
    assert by_text["ld.global.u32 %r4, [%rd1-12]"].operands[1] == Mem(Reg("%rd1"), -12)
    assert by_text["ld.global.u32 %r5, [16]"].operands[1] == Mem(None, 16)
    setp = by_text["setp.lt.u32 %p1, %r1, 0x10"]
    assert setp.operands[2] == Imm(16) and setp.line == 23     # line counting survives the block comment
    bra = by_text["@!%p1 bra.uni $L__BB0_2"]
    assert bra.guard == Reg("%p1") and bra.guard_negated and bra.opcode == "bra.uni"
    assert bra.base == "bra" and bra.modifiers == ("uni",)
    # two statements on one line; octal 010 == 8, as in C
    adds = [i for i in ins if i.base == "add"]
    assert [a.operands[2] for a in adds] == [Imm(-3), Imm(8)] and adds[0].line == adds[1].line == 25
    # a label on the same line as the instruction it labels
    pos = k.body.index(Label("$L__BB0_2"))
    assert k.body[pos + 1].opcode == "st.global.u32" and k.body[pos + 1].line == 26
    s = m.kernels["second"]
    assert s.params == [] and [i.opcode for i in _instrs(s)] == ["membar.sys", "bar.sync", "bra"]
    assert _instrs(s)[1].operands == (Imm(0),)


def test_undeclared_register_in_second_kernel_is_found():
    # "second" uses %p9 without declaring it: registers are per kernel.
    with pytest.raises(PTXError, match=r"line 35: .*%p9 is not declared"):
        parse(HANDWRITTEN.replace("\t.reg .pred %p<10>;\n", ""))


@pytest.mark.parametrize("v", ["7.8", "8.8", "9.0", "9.5"])
def test_accepted_versions(v):
    assert parse(HANDWRITTEN.replace(".version 9.0", f".version {v}")).version == v


def _body(lines: str) -> str:
    """A kernel around ``lines``; the first body line is line 9 of the text."""
    return HEADER + """.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.reg .b32 %r<4>;
\t.reg .b64 %rd<3>;
""" + lines + "\n\tret;\n}\n"


def test_scoped_qualifiers_cache_hints_and_async_copies_read_as_what_they_are():
    """``.shared::cta`` is ``.shared``; the cache hints (``.L1::no_allocate``, ``.L2::128B``, a prefetch's ``.L2``)
    go; ``cp.async`` is its word loads and stores (its commits and waits nothing)."""
    kernel = parse(_body("\tld.shared::cta.u32 %r1, [%r2];\n\tld.global.nc.L1::no_allocate.L2::128B.u32 %r3, [%rd1];"
                         "\n\tprefetch.global.L2 [%rd1];\n\tcp.async.cg.shared.global [%r2+4], [%rd1+8], 8;"
                         "\n\tcp.async.commit_group;\n\tcp.async.wait_group 0;\n\tcp.async.wait_all;")).kernels["k"]
    opcodes = [i.opcode for i in kernel.body if hasattr(i, "opcode")]
    assert opcodes == ["ld.shared.u32", "ld.global.nc.u32", "prefetch.global", "ld.global.b32", "st.shared.b32",
                       "ld.global.b32", "st.shared.b32", "ret"]
    copies = [i for i in kernel.body if getattr(i, "opcode", "").endswith(".b32")]
    assert [(o.offset) for i in copies for o in i.operands if hasattr(o, "offset")] == [8, 4, 12, 8]


@pytest.mark.parametrize("text, line, words", [
    (HEADER.replace("9.0", "6.0"), 1, "6.0"),
    (HEADER.replace("9.0", "9.9"), 1, "9.9"),
    (_body("\tadd.s64 %rd1, {%r1, %r2}, 1;"), 10, "vector operands are supported on ld / st"),
    (_body("\tmov.b64 %rd1, {%r1, %r2, %r3};"), 10, "mov.b64 takes a { } list of two 32-bit parts"),
    (_body("\tld.global.v2.u32 {%r1, %r2, %r3}, [%rd1];"), 10, "v2 takes 2 elements, not 3"),
    (_body("\tatom.global.add.v2.f32 {%f1, %f2}, [%rd1], {%f3, %f4, %f5};"), 10, "v2 takes 2 elements, not 2, 3"),
    (_body("\tatom.global.add.v2.f32 {%f1, %f2}, [%rd1];"), 10, "a vector atom takes a { } list and an address and a "
                                                                "{ } list"),
    (_body("\t.reg .v2 .b32 %v<2>;"), 10, "vector"),
    (_body("\tld.shared::cluster.u32 %r1, [%r2];"), 10, "a cluster's shared memory (.shared::cluster) is not "
                                                        "supported"),
    (_body("\tld.global.L2::cache_hint.u32 %r1, [%rd1], %rd2;"), 10, "a cache policy operand"),
    (_body("\tcp.async.ca.shared.global [%r1], [%rd1], 4, %r2;"), 10, "no source size or cache policy"),
    (_body("\tcp.async.cg.shared.global [%r1], [%rd1], 12;"), 10, "cp.async copies 4, 8 or 16 bytes, not 12"),
    (_body("\t.frobnicate 3;"), 10, "unknown directive .frobnicate"),
    (_body("\t.shared .align 4 .b8 buf[];"), 10, "without a size"),
    (_body("\t.shared .align 4 .b8 buf[16];\n\t.shared .align 4 .b8 buf[8];"), 11, "buf is declared twice"),
    (_body("\t.const .align 4 .b8 table[16];"), 10, ".const"),
    (_body("\t.local .align 4 .b8 stack[16];\n\t.local .align 4 .b8 stack[4];"), 11, "stack is declared twice"),
    (_body("\tmov.u32 %r1, %r9;"), 10, "%r9 is outside %r<4>"),
    (_body("\tmov.u32 %r1, %q1;"), 10, "%q1 is not declared"),
    (_body("\tmov.b32 %r1, 0d3FF0000000000000;"), 10, "float immediate 0d3FF0000000000000 is not supported (a "
                                                       "float64 literal"),
    (_body("\tmov.b32 %r1, 1.5;"), 10, "a decimal float literal"),
    (_body("\tbra.uni $L__nowhere;"), 10, "$L__nowhere is not defined"),
    (_body("\tmov.u32 %r1, 1\n\tmov.u32 %r2, 2;"), 10, "bad integer"),
    (_body("\tld.global.u32 %r1, [other_param_0];"), 10, "unknown symbol other_param_0"),
    (_body("{\n\t.reg .b32 %s<2>;\n\tmov.u32 %s1, 1;\n}\n\tmov.u32 %r1, %s1;"), 14, "%s1 is not declared"),
    (_body("$L__A:\n$L__A:"), 11, "defined twice"),
    (HEADER + "\n.global .align 8 .u64 where = generic(counter);\n", 5, "generic(counter) of where is not a number"),
    (HEADER + "\n.extern .global .align 4 .b32 counter;\n", 5, "module-scope declarations are not supported"),
    (HEADER + "\n.extern .shared .align 4 .b8 smem[4];\n", 5, "not supported"),   # extern arrays have no size
    (HEADER + "\n.visible .entry k(\n\t.param .align 4 .u32 k_param_0[2]\n)\n{\n\tret;\n}\n", 5,
     "scalar parameters and structs passed by value"),
    (HEADER + "\n.visible .entry k()\n{\n\tret;\n", 5, "no closing"),
    (HEADER.replace("64", "32"), 3, ".address_size 32"),
])
def test_errors_name_the_line(text, line, words):
    with pytest.raises(PTXError) as e:
        parse(text)
    msg = str(e.value)
    assert msg.startswith(f"line {line}:") and words in msg, msg


def test_device_functions_beside_a_kernel_are_skipped():
    """NVRTC emits libdevice helpers (``__nv_umin``) as .func bodies even where every use is inlined."""
    text = (HEADER + "\n.func (.param .b32 r) f(.param .b32 a)\n{\n\t.reg .b32 %r<2>;\n\t{\n\tret;\n\t}\n}\n"
            "\n.visible .entry k()\n{\n\tret;\n}\n")
    module = parse(text)
    assert sorted(module.kernels) == ["k"] and [i.opcode for i in module.kernels["k"].body] == ["ret"]


def test_missing_version():
    with pytest.raises(PTXError, match="missing .version"):
        parse(".target sm_90\n.address_size 64\n")


@needs_nvrtc
def test_module_data_outside_the_subset_refuses_only_the_kernels_that_name_it():
    """__device__ variables are kept with their initial bytes, by the kernels that name them; module data the machine
    cannot keep (an address as an initializer) refuses the kernels that name it, and a call that cannot be inlined
    (a recursive function) refuses its kernel, in the lenient parse (what Device.load_kernel uses); the rest load,
    a call of a __noinline__ function among them (inlined). The strict parse raises."""
    source = ('__device__ int counter;\n'
              '__device__ int *where = &counter;\n'
              'extern "C" __global__ void uses(int *y) { y[threadIdx.x] = counter; }\n'
              'extern "C" __global__ void points(int *y) { y[threadIdx.x] = *where; }\n'
              '__noinline__ __device__ int twice(int v) { return 2 * v; }\n'
              '__device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n'
              'extern "C" __global__ void calls(int *y) { y[threadIdx.x] = fib(y[threadIdx.x]); }\n'
              'extern "C" __global__ void inlined(int *y) { y[threadIdx.x] = twice(y[threadIdx.x]); }\n'
              'extern "C" __global__ void plain(int *y) { y[threadIdx.x] = 1; }\n')
    module = parse(toolchain.ptx_for(source), strict=False)
    assert sorted(module.kernels) == ["inlined", "plain", "uses"] and sorted(module.refused) == ["calls", "points"]
    assert module.kernels["uses"].variables == {"counter": module.variables["counter"]}
    assert module.kernels["plain"].variables == {}
    assert "where is module-scope data outside the subset" in str(module.refused["points"])
    assert "generic(counter) of where is not a number" in str(module.refused["points"])
    assert "function calls are not supported: _Z3fibi (it is recursive" in str(module.refused["calls"])
    with pytest.raises(PTXError, match="generic.counter. of where is not a number"):
        parse(toolchain.ptx_for(source))


def test_vector_accesses_are_split_into_word_accesses():
    """ld / st .v2 / .v4 become the scalar accesses they are made of, element k at the address plus k times its
    bytes; ``_`` (no destination) is skipped; a destination that is the address register is loaded last."""
    body = parse(_body("\tld.global.v4.u32 {%r1, %r2, _, %r3}, [%rd1+8];\n"
                       "\tst.shared.v2.u16 [%rd2], {%r1, %r2};\n"
                       "\tld.global.v2.u64 {%rd1, %rd2}, [%rd1];")).kernels["k"].body
    got = [(i.opcode, i.operands) for i in body if isinstance(i, Instruction) and i.base != "ret"]
    assert got == [
        ("ld.global.u32", (Reg("%r1"), Mem(Reg("%rd1"), 8))), ("ld.global.u32", (Reg("%r2"), Mem(Reg("%rd1"), 12))),
        ("ld.global.u32", (Reg("%r3"), Mem(Reg("%rd1"), 20))),
        ("st.shared.u16", (Mem(Reg("%rd2"), 0), Reg("%r1"))), ("st.shared.u16", (Mem(Reg("%rd2"), 2), Reg("%r2"))),
        ("ld.global.u64", (Reg("%rd2"), Mem(Reg("%rd1"), 8))), ("ld.global.u64", (Reg("%rd1"), Mem(Reg("%rd1"), 0)))]


def test_vector_atomics_are_split_into_scalar_atomics():
    """sm_90's atom / red .v2 / .v4 .f32 (CUDA's atomicAdd of a float2 / float4) are atomic element by element: the
    scalar atomics of each element at the address plus 4 k; a ``_`` destination makes that element a red."""
    body = parse(_body("\tatom.global.add.v4.f32 {%r1, _, %r2, %r3}, [%rd1+8], {%r0, %r1, %r2, %r3};\n"
                       "\tred.global.add.v2.f32 [%rd2], {%r1, %r2};")).kernels["k"].body
    got = [(i.opcode, i.operands) for i in body if isinstance(i, Instruction) and i.base != "ret"]
    r, at = Reg, Mem
    assert got == [
        ("atom.global.add.f32", (r("%r1"), at(r("%rd1"), 8), r("%r0"))),
        ("red.global.add.f32", (at(r("%rd1"), 12), r("%r1"))),
        ("atom.global.add.f32", (r("%r2"), at(r("%rd1"), 16), r("%r2"))),
        ("atom.global.add.f32", (r("%r3"), at(r("%rd1"), 20), r("%r3"))),
        ("red.global.add.f32", (at(r("%rd2"), 0), r("%r1"))), ("red.global.add.f32", (at(r("%rd2"), 4), r("%r2")))]
