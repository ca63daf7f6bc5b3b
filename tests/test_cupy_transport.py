"""The CuPy transport. Without a GPU: its sources compile with NVRTC for every dtype, its parameter table matches the
kernels, and its host logic (set-up order, pointers, multicast copies, the submission order that guarantees progress
with several ranks on one GPU) runs against a recording GPU double that executes each launch as prim.cu / mcast.cu
define it and fails if a launch could spin on a flag not yet posted. With CuPy and a GPU: the collectives for every
dtype and op against numpy. Those skip here, with the reason."""
from __future__ import annotations

import re

import numpy as np
import pytest

import qccl
from qccl.transport import MCAST, PARAMS, PRIM
from qwengpu.toolchain import compile_cuda, nvrtc_available
from qccl_transports.cupy import kernels as K
from qccl_transports.cupy import world as W

BASE = 1 << 32          # the double's allocations live at BASE * k, so any pointer names one allocation
# bfloat16 to the double: numpy has no such dtype, so its kernels compute it in float32 (FakeGpu._element)
BF16 = np.dtype([("bfloat16", np.uint16)])


class FakeGpu:
    """A GPU double: memory is numpy bytes, copies run when enqueued, launches run when enqueued with prim.cu's and
    mcast.cu's semantics. Enqueue order is a legal execution order of the real device; a launch whose flag is not
    posted yet would spin, and here it raises instead (the submission order promises it never happens)."""

    def __init__(self, devices=1):
        self.devices, self.mem, self.log = devices, {}, []

    def errors(self):
        return (RuntimeError,)

    def device_count(self):
        return self.devices

    def enable_peer(self, d, p):
        self.log.append(("peer", d, p))
        return True

    def alloc(self, dev, nbytes):
        base = BASE * (len(self.mem) + 1)
        self.mem[base] = np.zeros(nbytes, np.uint8)
        self.log.append(("alloc", nbytes))
        return base

    def pinned(self, nbytes):
        self.log.append(("pin", nbytes))
        return np.zeros(nbytes, np.uint8)

    def stream(self, dev):
        return object()

    def _at(self, ptr, nbytes):
        base = ptr // BASE * BASE
        off = ptr - base
        arr = self.mem[base]
        assert 0 <= off and off + nbytes <= len(arr), f"access outside an allocation: {ptr:#x}+{nbytes}"
        return arr[off:off + nbytes]

    def h2d(self, dst, host, stream):
        self._at(dst, host.nbytes)[:] = host

    def d2h(self, host, src, stream):
        host[:] = self._at(src, host.nbytes)

    def function(self, dev, code, name):
        self.log.append(("load", name))
        return name

    @staticmethod
    def pointer(p):
        return ("ptr", int(p))

    @staticmethod
    def value(v):
        return int(np.uint32(v & 0xFFFFFFFF).view(np.int32))

    def event(self, dev, stream):
        return True

    @staticmethod
    def done(ev):
        return True

    @staticmethod
    def wait(ev):
        pass

    # -- the kernels, as the .cu files define them ------------------------------------------------------------------
    def _flag(self, p):
        return int(self._at(p[1], 4).view(np.int32)[0])

    def _setflag(self, p, v):
        self._at(p[1], 4).view(np.int32)[0] = v

    def launch(self, dev, fn, threads, args, stream):
        self.log.append(("launch", fn))
        kind, _, dt = fn.partition("_")
        dt = BF16 if dt == "bfloat16" else np.dtype(dt or "int32")
        if kind == "prim":
            self._prim(dt, threads, *args)
        else:
            self._mcast(dt, threads, *args)

    def _prim(self, dt, threads, mode, n, rtail, rwait, rhead, swait, rslot, x, y, sslot, stail, spost, shead, rpost,
              div):
        if mode & 2048:
            if mode & 2 and spost > 0:
                self._setflag(stail, spost)
            if mode & 1 and rpost > 0:
                self._setflag(shead, rpost)
            return
        if not mode & 1024:
            assert not mode & 1 or self._flag(rtail) >= rwait, "a receive launched before its tail was posted"
            assert not (mode & 2 and swait > 0) or self._flag(rhead) >= swait, "a send launched before its head"
        if mode & (2 | 16):
            sz = dt.itemsize
            if dt == np.int32 and mode & 256:
                dt = np.dtype(np.uint32)
            load, store = self._element(dt, sz)
            dt = np.dtype(np.float32) if dt is BF16 else dt         # the type the arithmetic runs in
            for i in range(min(n, threads)):
                r = load(rslot[1] + i * sz) if mode & 1 else dt.type(0)
                v = load(x[1] + i * sz) if mode & 4 else dt.type(0)
                if not mode & 8 and mode & 1:
                    op = (mode >> 5) & 7
                    with np.errstate(over="ignore"):
                        v = r if not mode & 4 else (v + r, v * r, max(v, r), min(v, r))[op]
                if mode & 512:
                    v = dt.type(int(v) // div if dt.kind in "iu" and v >= 0 else
                                -(-int(v) // div) if dt.kind in "iu" else v / div)
                if mode & 16:
                    store(y[1] + i * sz, r if mode & 8 else v)
                if mode & 2:
                    store(sslot[1] + i * sz, v)
        if mode & 2 and spost > 0:
            self._setflag(stail, spost)
        if mode & 1 and rpost > 0:
            self._setflag(shead, rpost)

    def _element(self, dt, sz):
        """Load and store one element. bfloat16 (numpy has none) is computed in float32, which holds every bfloat16
        exactly, and rounded back to nearest even as the kernels' __float2bfloat16 does (no NaN in these tests)."""
        if dt is not BF16:
            def store(p, v):
                self._at(p, sz).view(dt)[0] = v
            return (lambda p: self._at(p, sz).view(dt)[0]), store

        def store(p, v):
            bits = int(np.float32(v).view(np.uint32))
            self._at(p, 2).view(np.uint16)[0] = (bits + 0x7FFF + (bits >> 16 & 1)) >> 16
        return (lambda p: (np.uint32(self._at(p, 2).view(np.uint16)[0]) << 16).view(np.float32)), store

    def _mcast(self, dt, threads, mode, x, win, flag, seq, flags, mask, wait):
        def ready():
            return all(self._at(flags[1] + 4 * b, 4).view(np.int32)[0] >= wait for b in range(8) if mask >> b & 1)
        assert not mode & 1 or ready(), "a multicast store launched before the peers' flags"
        if mode & 2:
            sz = dt.itemsize
            self._at(win[1], sz * threads)[:] = self._at(x[1], sz * threads)
        if mode & 4:
            self._setflag(flag, seq)
        assert not mode & 8 or ready(), "a multicast wait launched before the peers' posts"


@pytest.fixture
def fake(monkeypatch):
    gpu = FakeGpu()
    monkeypatch.setattr(W, "CupyGpu", lambda: gpu)
    return gpu


def _inputs(n, count, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(-3, 4, count).astype(dtype) for _ in range(n)]   # small: exact in every dtype, any order


def _run(comms, kind, dtype, op="sum", count=9, root=0, algo=None, seed=0):
    """Run one collective on every rank; (outputs, numpy's answer). bfloat16, which numpy lacks, runs on torch
    tensors; numpy answers in float32 (exact for these small values) and both sides come back as their bits."""
    n = len(comms)
    bf16 = str(dtype) == "bfloat16"
    if bf16:
        torch = pytest.importorskip("torch")
        dtype = np.dtype(np.float32)
    per = count * n if kind == "reduce_scatter" else count
    x = _inputs(n, per, dtype, seed)
    size = {"allgather": count * n}.get(kind, count)
    y = [np.full(size, 77, dtype) for _ in range(n)]
    xs, y = ([torch.from_numpy(a).bfloat16() for a in x], [torch.from_numpy(a).bfloat16() for a in y]) if bf16 \
        else (x, y)
    with qccl.group():
        for c in comms:
            r = c.rank
            if kind == "allreduce":
                c.allreduce(xs[r], y[r], op, algo=algo)
            elif kind == "reduce":
                c.reduce(xs[r], y[r], op, root)
            elif kind == "broadcast":
                c.broadcast(xs[r], y[r], root, algo=algo)
            elif kind == "allgather":
                c.allgather(xs[r], y[r], algo=algo)
            elif kind == "reduce_scatter":
                c.reduce_scatter(xs[r], y[r], op)
            else:
                c.send(xs[r], (r + 1) % n)
                c.recv(y[r], (r - 1) % n)
    red = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}[op](np.stack(x), axis=0).astype(dtype)
    want = {"allreduce": [red] * n, "broadcast": [x[root]] * n, "allgather": [np.concatenate(x)] * n,
            "reduce_scatter": [red[r * count:(r + 1) * count] for r in range(n)],
            "reduce": [red if r == root else np.full(count, 77, dtype) for r in range(n)],
            "sendrecv": [x[(r - 1) % n] for r in range(n)]}[kind]
    if bf16:
        def bits(a):
            return (a if isinstance(a, torch.Tensor) else torch.from_numpy(a).bfloat16()).view(torch.int16).numpy()
        return [bits(a) for a in y], [bits(a) for a in want]
    return y, want


def test_found_through_its_entry_point_without_importing_cupy():
    assert dict(qccl.plugin_manager().list_name_plugin())["cupy"].__name__ == "qccl_transports.cupy.plugin"
    t = qccl.get_transport("cupy")
    assert t.dtypes == ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
                        "bfloat16")


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (nvidia-cuda-nvrtc) is not installed")
def test_every_dtype_compiles_with_nvrtc():
    entries, compiled = set(), {}
    for kernel, dtype, entry in K.every_source():
        code, name = K.source(kernel, dtype)
        assert name == entry
        if code not in compiled:            # one compile per source: the template holds every instantiation
            compiled[code] = set(re.findall(r"\.entry (\w+)", compile_cuda(code, f"{name}.cu")))
        entries |= compiled[code]
    want = {f"{k}_{d}" for k in ("prim", "mcast") for d in K.DTYPES if d not in K.SAME_AS_QLINK} | {"prim", "mcast"}
    assert want <= entries


def test_parameter_table_matches_the_kernels():
    for kernel in (PRIM, MCAST):
        text = kernel.source.read_text()
        sig = re.search(rf"void {kernel.name}\((.*?)\)", text, re.S).group(1)
        roles = []
        for p in (s.strip() for s in sig.split(",")):
            if "*" not in p:
                roles.append("value")
            elif p.startswith("volatile"):
                name = p.split("*")[-1].strip()
                loads = re.search(rf"while \(\*?{name}\b|{name}\[", text) and not re.search(rf"\*{name} = ", text)
                roles.append("flag_load" if loads else "flag_store")
            else:
                roles.append("data_load" if p.startswith("const") else "data_store")
        assert tuple(roles) == PARAMS[kernel.name], kernel.name


def test_setup_loads_and_pins_before_any_launch(fake):
    comms = qccl.Communicator.init_all(3, transport="cupy")
    y, want = _run(comms, "allreduce", np.int32)
    assert all(np.array_equal(a, b) for a, b in zip(y, want))
    kinds = [e[0] for e in fake.log]
    first = kinds.index("launch")
    assert kinds.count("load") == len(K.every_source()) and max(i for i, k in enumerate(kinds) if k == "load") < first
    assert max(i for i, k in enumerate(kinds) if k in ("pin", "alloc")) < first
    log = comms[0].world.events_log
    assert [e[0] for e in log[:log.index(("modules",)) + 1]].count("launch") == 0


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int8, np.uint8, np.int64, np.float16, np.float32,
                                   np.float64, "bfloat16"])
def test_collectives_through_the_double(fake, dtype):
    for n in (2, 3):
        comms = qccl.Communicator.init_all(n, transport="cupy")
        for i, kind in enumerate(("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "sendrecv")):
            for op in (("sum", "max") if kind in ("allreduce", "reduce_scatter", "reduce") else ("sum",)):
                y, want = _run(comms, kind, dtype, op, count=5 + i, root=i % n, seed=i)
                assert all(np.array_equal(a, b) for a, b in zip(y, want)), (dtype, n, kind, op)


def test_multicast_windows_through_the_double(fake):
    comms = qccl.Communicator.init_all(4, transport="cupy")
    for kind in ("allreduce", "allgather", "broadcast"):
        y, want = _run(comms, kind, np.float32, count=11, root=2, algo="multicast", seed=3)
        assert all(np.array_equal(a, b) for a, b in zip(y, want)), kind


def test_an_impossible_schedule_is_refused_before_launching(fake):
    comms = qccl.Communicator.init_all(4, transport="cupy", config={"fifo_slots": 1})
    x = [np.arange(16, dtype=np.int32) for _ in range(4)]
    y = [np.zeros(16, np.int32) for _ in range(4)]
    with pytest.raises(qccl.DeadlockError) as e:
        with qccl.group():
            for c in comms:
                c.allreduce(x[c.rank], y[c.rank])
    assert "found before launching" in str(e.value) and set(e.value.waits) == {0, 1, 2, 3}
    assert all(w.address is not None and w.value < w.expected for w in e.value.waits.values())
    assert not any(k == "launch" for k, *_ in fake.log), "nothing was launched"


def test_without_cupy_the_transport_says_what_is_missing():
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here: the refusal is for machines without it")
    except ImportError:
        pass
    with pytest.raises(qccl.SystemError, match="needs CuPy"):
        qccl.Communicator.init_all(2, transport="cupy")


@pytest.mark.parametrize("dtype", K.DTYPES)
def test_on_a_gpu_every_dtype_and_op(dtype, cuda_gpu):
    comms = qccl.Communicator.init_all(2, transport="cupy")
    ops = ("sum", "prod", "max", "min")
    for i, kind in enumerate(("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "sendrecv")):
        for op in (ops if kind in ("allreduce", "reduce_scatter", "reduce") else ("sum",)):
            for algo in (("ring", "multicast") if kind in ("allreduce", "allgather", "broadcast") else (None,)):
                y, want = _run(comms, kind, dtype, op, count=37, root=i % 2, algo=algo, seed=i)
                assert all(np.array_equal(a, b) for a, b in zip(y, want)), (dtype, kind, op, algo)


def test_the_nccl_comparison_runs_or_skips_with_the_reason(tmp_path):
    pytest.importorskip("torch")            # bfloat16 travels as torch tensors
    from qccl_bench import nccl_compare
    path = tmp_path / "cmp.json"
    rc = nccl_compare.main(["--ranks", "2", "--count", "4", "--qlink-count", "3", "--dtypes", "int32,bfloat16",
                            "--ops", "sum,prod,max", "--json", str(path)])
    import json
    doc = json.loads(path.read_text())
    assert rc == 0
    rows = doc["rows"]
    qlink = {(r["collective"], r["dtype"], r["op"]): r["result"] for r in rows if r["backend"] == "qlink"}
    ops = {"allreduce": ("sum", "prod", "max"), "reduce_scatter": ("sum", "prod", "max"),
           "reduce": ("sum", "prod", "max")}
    assert set(qlink) == {(kind, dtype, op) for kind in nccl_compare.KINDS for dtype in ("int32", "bfloat16")
                          for op in ops.get(kind, ("-",))}
    # every run QLink makes is bit for bit numpy's (bfloat16: float32 rounded to nearest even); prod on a float is
    # QLink's own refusal, reported as a skip that names it
    for (kind, dtype, op), result in qlink.items():
        if dtype == "bfloat16" and op == "prod":
            assert result.startswith("skipped: op prod on bfloat16"), result
        else:
            assert result == "identical", (kind, dtype, op, result)
    if doc["gpu"] != "yes":
        assert all(r["result"].startswith("skipped: ") for r in rows if r["backend"] in ("nccl", "cupy"))


def test_the_nccl_comparison_refuses_an_unknown_dtype_or_op(capsys):
    from qccl_bench import nccl_compare
    for option, value in (("--dtypes", "int32,float128"), ("--ops", "sum,avg")):
        with pytest.raises(SystemExit):
            nccl_compare.main([option, value, "--backends", "qlink"])
        assert f"{option} {value.split(',')[1]}: not among" in capsys.readouterr().err


def test_the_nccl_comparisons_bfloat16_reference_rounds_to_nearest_even():
    torch = pytest.importorskip("torch")
    from qccl_bench import nccl_compare
    # 1 + 2^-8 lies halfway between bfloat16's 1 and 1 + 2^-7: even is 1; 1 + 3 * 2^-8 rounds up to 1 + 2^-6
    x = [nccl_compare.host(np.array([1.0, 1.0], np.float32), "bfloat16"),
         nccl_compare.host(np.array([2.0 ** -8, 3 * 2.0 ** -8], np.float32), "bfloat16")]
    red = nccl_compare.numpy_result("allreduce", x, 2)[0]
    assert red.dtype == torch.bfloat16 and red.tolist() == [1.0, 1.0 + 2.0 ** -6]
    assert not nccl_compare.same(red, nccl_compare.host(np.array([1.0 + 2.0 ** -7, 1.0 + 2.0 ** -6]), "bfloat16"))


class QueuedGpu(FakeGpu):
    """The double with streams: work runs in stream order, a launch only once the flags it spins on are set (as a
    spinning kernel would finish only then), so a wrong submission order really hangs."""

    def __init__(self):
        super().__init__()
        self.queues = []

    def stream(self, dev):
        self.queues.append([[], 0])         # ops, how many ran
        return len(self.queues) - 1

    def h2d(self, dst, host, stream):
        data = host.copy()
        self.queues[stream][0].append(lambda: FakeGpu.h2d(self, dst, data, stream) or True)

    def d2h(self, host, src, stream):
        self.queues[stream][0].append(lambda: FakeGpu.d2h(self, host, src, stream) or True)

    def launch(self, dev, fn, threads, args, stream):
        def run():
            try:
                FakeGpu.launch(self, dev, fn, threads, args, stream)
                return True
            except AssertionError:          # its flag is not there yet: it spins
                self.log.pop()
                return False
        self.queues[stream][0].append(run)

    def _progress(self):
        moved = True
        while moved:
            moved = False
            for q in self.queues:
                while q[1] < len(q[0]) and q[0][q[1]]():
                    q[1] += 1
                    moved = True

    def event(self, dev, stream):
        return stream, len(self.queues[stream][0])

    def done(self, ev):
        self._progress()
        return self.queues[ev[0]][1] >= ev[1]

    def wait(self, ev):
        assert self.done(ev), "a host wait on work that cannot finish"


def test_the_watchdog_names_who_waits_for_what(monkeypatch):
    """Submitted in program order instead of the safe order, a one-slot ring really hangs on the double; the
    watchdog reads the flags back and names each rank's kernel, flag, value and awaited value."""
    gpu = QueuedGpu()
    monkeypatch.setattr(W, "CupyGpu", lambda: gpu)

    def program_order(self, may_wait=True):
        out = [(r, op) for r, ops in self.pending.items() for op in ops]
        for ops in self.pending.values():
            ops.clear()
        return out
    monkeypatch.setattr(W.Orderer, "take", program_order)
    comms = qccl.Communicator.init_all(3, transport="cupy", config={"fifo_slots": 1,
                                                                    "transport_options": {"timeout": 0.3}})
    x = [np.arange(16, dtype=np.int32) for _ in range(3)]
    y = [np.zeros(16, np.int32) for _ in range(3)]
    with pytest.raises(qccl.DeadlockError, match="GPU watchdog") as e:
        with qccl.group():
            for c in comms:
                c.allreduce(x[c.rank], y[c.rank])
    text = str(e.value)
    assert set(e.value.waits) == {0, 1, 2}
    for r, w in e.value.waits.items():
        assert f"rank {r}: kernel prim spins on address" in text
        assert w.flag in ("ring.head", "ring.tail") and w.value < w.expected


def test_the_safe_order_finishes_on_the_queued_double(monkeypatch):
    gpu = QueuedGpu()
    monkeypatch.setattr(W, "CupyGpu", lambda: gpu)
    comms = qccl.Communicator.init_all(4, transport="cupy")
    for kind, algo in (("allreduce", None), ("allreduce", "multicast"), ("sendrecv", None)):
        y, want = _run(comms, kind, np.int64, count=13, algo=algo, seed=5)
        assert all(np.array_equal(a, b) for a, b in zip(y, want)), kind


def _float_sums_agree(dtype: str, n: int, kind: str, algo) -> None:
    """Random floats, not small integers: rounding makes the order of the adds visible. The CuPy transport runs
    qccl's one schedule with the float chunking of devices without floating point (qccl.schedule.Scheduler.per), so
    every element is added in the order the QwenGPUs add it (the threads transport: fprim on the interpreter), and
    the bits must agree."""
    torch = pytest.importorskip("torch")
    count = 37
    tdt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(3)
    per = count * n if kind == "reduce_scatter" else count
    xs = [(torch.randn(per, generator=gen) * 100).to(tdt) for _ in range(n)]
    out = {}
    for transport in ("cupy", "threads"):
        comms = qccl.Communicator.init_all(n, transport=transport)
        ys = [torch.zeros(count, dtype=tdt) for _ in range(n)]
        with qccl.group():
            for c in comms:
                if kind == "allreduce":
                    c.allreduce(xs[c.rank], ys[c.rank], "sum", algo=algo)
                elif kind == "reduce":
                    c.reduce(xs[c.rank], ys[c.rank], "sum", 1)
                else:
                    c.reduce_scatter(xs[c.rank], ys[c.rank], "sum")
        out[transport] = ys
        for c in comms:
            c.destroy()
    exact = sum(x.double() for x in xs)         # a sanity bound: the ring's sum is close to the exact one
    for r in range(n) if kind != "reduce" else (1,):
        a, b = out["cupy"][r], out["threads"][r]
        bits = torch.int16 if a.element_size() == 2 else torch.int32
        assert torch.equal(a.view(bits), b.view(bits)), (dtype, kind, algo, r)
        want = exact[r * count:(r + 1) * count] if kind == "reduce_scatter" else exact
        assert torch.allclose(a.double(), want, rtol=0.05, atol=1.0)


CASES = [(4, "allreduce", "ring"), (3, "allreduce", "multicast"), (4, "allreduce", "multicast"),
         (3, "reduce_scatter", None), (4, "reduce", None)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("n,kind,algo", CASES)
def test_float_sums_equal_the_qwengpus_bit_for_bit_on_the_double(fake, dtype, n, kind, algo):
    _float_sums_agree(dtype, n, kind, algo)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("n,kind,algo", CASES)
def test_on_a_gpu_float_sums_equal_the_qwengpus_bit_for_bit(dtype, n, kind, algo, cuda_gpu):
    _float_sums_agree(dtype, n, kind, algo)
