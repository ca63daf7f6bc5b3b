"""qccl-perf: nccl-tests' benchmark for qccl, with the token cost beside the time.

    qccl-perf all_reduce -b 4 -e 4K -f 2 -g 4 -o sum -d int32 -r 0 -n 5 -w 1 -c 1 -J out.json
    qccl-perf all -b 16 -e 64 -g 3 -o all -d all -r all            # every collective, op, dtype and root
    qccl-perf all_reduce -g 4 --procs --vs gloo                     # one process per rank; gloo on the same inputs

Collectives: all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv, alltoall (or "all"). The table
has nccl-tests' columns (size and count are totals, as nccl-tests prints them; all_gather, reduce_scatter and
alltoall give each rank count / nranks), out-of-place then in-place time (us, the average of -n iterations after -w
warm-up ones), algbw and busbw (GB/s, nccl-tests' factors: AllReduce 2(n-1)/n; ReduceScatter, AllGather, AlltoAll
(n-1)/n; Broadcast, Reduce, SendRecv 1) and #wrong (elements that differ from numpy's result, over the first -c
iterations, each on fresh seeded inputs), then per half the tokens the busiest rank's model wrote per call and its
launches; a row ends with the algorithm the calls ran (`algo multicast`, `algo ring:4` when a tuner chose 4-word
chunks: what QCCL_DEBUG=INFO prints per call), so an auto-tuned sweep says what the tuner chose at each size. The
footer gives the out-of-bounds count and the average bus bandwidth; the exit status is 1 when any value is wrong. -J
writes nccl-tests' JSON keys plus the token fields and ``algo``.

QwenGPUs are slow (the interpreter writes a few thousand tokens a second), so the defaults are -n 1 -w 0 -c 1 and sizes
4 B .. 64 B; the sizes that matter are the number of words. Progress goes to stderr on sweeps of more than one row.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import qccl
from qccl.hookspecs import COLLECTIVE, hookimpl
from qccl_bench import harness as H
from qccl_bench import reference as R

COLLECTIVES = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
               "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv", "alltoall": "alltoall"}
REDUCING = ("allreduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce")
PER_RANK = ("allgather", "reduce_scatter", "alltoall")      # nccl-tests' size is the total; each rank has 1/n
IN_PLACE = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter")
ALGOS = ("ring", "multicast", "auto")
CHECKED = ("int32", "uint32")     # the dtypes whose inputs and numpy results qccl_bench.reference builds


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw / algbw."""
    if kind == "allreduce":
        return 2 * (n - 1) / n
    if kind in PER_RANK:
        return (n - 1) / n
    return 1.0


def parse_size(text: str) -> int:
    """'4', '4K', '1M', '2G' -> bytes (nccl-tests' suffixes, powers of 1024)."""
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if mult > 1 else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"size {text!r}: a number of bytes with an optional K, M or G")
    return int(digits) * mult


def sizes(lo: int, hi: int, factor: int, increment: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        nxt = s * factor if increment == 0 else s + increment
        if nxt <= s:
            break
        s = nxt
    return out


@dataclass
class Half:
    """One of a row's two halves (out-of-place, in-place)."""
    time: float = 0.0               # us per call
    alg_bw: float = 0.0
    bus_bw: float = 0.0
    nwrong: int = 0
    tokens_per_rank: float = 0.0    # the busiest rank's model-written tokens per call
    tokens_fed_per_rank: float = 0.0
    launches_per_rank: float = 0.0
    gloo_time: float | None = None  # us per call through torch.distributed's gloo (--vs gloo)
    algo: str | None = None         # what the timed calls ran ("multicast", "ring:4"; "ring,multicast" if they varied)

    def json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Row:
    collective: str
    size: int
    count: int
    type: str
    redop: str
    root: int
    out_of_place: Half | None = None
    in_place: Half | None = None
    extra: dict = field(default_factory=dict)


# -- one call on every rank this process drives ------------------------------------------------------------------
def prepare(kind: str, n: int, per: int, dtype, in_place: bool, seed: int) -> H.Buffers:
    """Seeded buffers for every rank (harness.prepare; alltoall's here: rank r's block j goes to rank j)."""
    if kind != "alltoall":
        return H.prepare(n, "sendrecv" if kind == "sendrecv" else kind, per, dtype, in_place, seed)
    sends = R.random_inputs(n, per * n, dtype, seed)
    outs = [np.full(per * n, 0x5EED, dtype) for _ in range(n)]
    return H.Buffers(sends, outs, [s.copy() for s in sends], [o.copy() for o in outs])


def expected(kind: str, b: H.Buffers, op: str, root: int) -> list:
    """numpy's result per rank (the yardstick; never on the payload path)."""
    if kind == "alltoall":
        n = len(b.orig)
        per = len(b.orig[0]) // n
        return [np.concatenate([b.orig[j][r * per:(r + 1) * per] for j in range(n)]) for r in range(n)]
    return H.expect(kind, b, op, root)


def issue(c, kind: str, send, recv, op: str, root: int, algo: str | None) -> None:
    if kind == "alltoall":
        c.alltoall(send, recv)
    else:
        H.issue(c, kind, send, recv, op, root, algo)


def wrong(outs: list, want: list, ranks) -> int:
    """Elements that differ bit for bit (nccl-tests' #wrong)."""
    bad = 0
    for r in ranks:
        a, b = np.asarray(outs[r]), np.asarray(want[r])
        bad += int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32))) if a.shape == b.shape else a.size
    return bad


class AlgoRecorder:
    """A profiler of the benchmark's own: the algorithm each collective of one rank runs, from the call's signature
    (the tuner's choice when the call said auto)."""

    def __init__(self, rank: int):
        self.rank, self.seen = rank, []

    @hookimpl
    def qccl_profiler_mask(self):
        return COLLECTIVE

    @hookimpl
    def qccl_profiler_start(self, event):
        if event.kind == "collective" and event.rank == self.rank and event.algo:
            self.seen.append(event.algo)

    def take(self) -> str | None:
        """The algorithms seen since the last take, comma-separated (None: calls without one, as sendrecv)."""
        seen, self.seen = self.seen, []
        return ",".join(dict.fromkeys(seen)) or None


class Runner:
    """Runs calls on the ranks of this process: all of them (-g in one process) or one (a process per rank)."""

    def __init__(self, args):
        self.args = args
        config = {"backend": args.backend}
        if args.procs_child:
            self.n = int(os.environ["WORLD_SIZE"])
            rank = int(os.environ["RANK"])
            _bench_group(self.n, rank)
            self.comms = [qccl.Communicator.init(self.n, rank, qccl.get_unique_id(), args.transport, config)]
        else:
            self.n = args.ngpus
            self.comms = qccl.Communicator.init_all(self.n, args.transport, config)
        self.ranks = [c.rank for c in self.comms]
        self.dtypes = qccl.get_transport(args.transport).dtypes
        self.algos = AlgoRecorder(self.ranks[0])
        qccl.plugin_manager().register(self.algos)

    def close(self) -> None:
        qccl.plugin_manager().unregister(self.algos)
        for c in self.comms:
            c.destroy()

    def _group(self, kind, b, op, root, algo):
        with qccl.group():
            for c in self.comms:
                issue(c, kind, b.inputs[c.rank], b.outs[c.rank], op, root, algo)
        for c in self.comms:
            c.synchronize()

    def half(self, kind: str, per: int, dtype, op: str, root: int, in_place: bool, size: int) -> Half:
        a = self.args
        h = Half()
        checks = max(a.check, 0)
        iters = max(a.iters, 1)
        b = prepare(kind, self.n, per, dtype, in_place, a.seed)
        for _ in range(a.warmup):
            self._group(kind, b, op, root, a.algo)
        start = [c.stats for c in self.comms]
        self.algos.take()
        elapsed = 0.0
        for i in range(max(iters, checks)):
            if i < checks:
                b = prepare(kind, self.n, per, dtype, in_place, a.seed + i)
            t0 = time.perf_counter()
            self._group(kind, b, op, root, a.algo)
            dt = time.perf_counter() - t0
            if i < iters:
                elapsed += dt
                if i == iters - 1:
                    end = [c.stats for c in self.comms]
                    h.algo = self.algos.take()
            if i < checks:
                h.nwrong += wrong(b.outs, expected(kind, b, op, root), self.ranks)
        per_call = lambda key: max((e[key] - s[key]) / iters for s, e in zip(start, end))   # noqa: E731
        h.tokens_per_rank, h.tokens_fed_per_rank = per_call("tokens_written"), per_call("tokens_fed")
        h.launches_per_rank = per_call("launches")
        h.time = elapsed / iters * 1e6
        if self.args.procs_child:
            h = self._merge(h)
        h.alg_bw = size / (h.time * 1e3) if h.time > 0 else 0.0
        h.bus_bw = h.alg_bw * bus_factor(kind, self.n)
        if a.vs == "gloo":
            h.gloo_time = self._gloo(kind, per, dtype, op, root, in_place)
        return h

    def _merge(self, h: Half) -> Half:
        """One process per rank: the slowest rank's time and tokens, every rank's wrong values (bench bookkeeping
        gathered through gloo, as nccl-tests reduces its error counts across ranks)."""
        import torch.distributed as dist
        got = [None] * self.n
        dist.all_gather_object(got, h.json())
        out = Half(**got[0])
        out.time = max(g["time"] for g in got)
        out.nwrong = sum(g["nwrong"] for g in got)
        for k in ("tokens_per_rank", "tokens_fed_per_rank", "launches_per_rank"):
            setattr(out, k, max(g[k] for g in got))
        return out

    def _gloo(self, kind, per, dtype, op, root, in_place) -> float | None:
        """The same seeded inputs through torch.distributed's gloo (one process per rank only); None where gloo
        lacks the call, the op or the dtype. Also checked against numpy: a gloo mismatch is reported as wrong."""
        if not self.args.procs_child:
            return None
        import torch
        import torch.distributed as dist
        ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
               "min": dist.ReduceOp.MIN}
        if (kind in REDUCING and op not in ops) or np.dtype(dtype) != np.int32 or kind == "sendrecv":
            return None
        r = self.ranks[0]
        b = prepare(kind, self.n, per, dtype, False, self.args.seed)
        x = torch.from_numpy(b.orig[r].copy())
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(max(self.args.iters, 1)):
            if kind == "allreduce":
                y = x.clone()
                dist.all_reduce(y, ops[op])
            elif kind == "broadcast":
                y = x.clone()
                dist.broadcast(y, root)
            elif kind == "reduce":
                y = x.clone()
                dist.reduce(y, root, ops[op])
            elif kind == "allgather":
                y = torch.empty(per * self.n, dtype=x.dtype)
                dist.all_gather_into_tensor(y, x)
            elif kind == "reduce_scatter":
                y = torch.empty(per, dtype=x.dtype)
                dist.reduce_scatter_tensor(y, x, ops[op])
            else:
                y = torch.empty_like(x)
                dist.all_to_all_single(y, x)
        t = (time.perf_counter() - t0) / max(self.args.iters, 1) * 1e6
        got = [None] * self.n
        dist.all_gather_object(got, t)
        return max(got)


def _bench_group(n: int, rank: int) -> None:
    """One process per rank: a gloo group of the benchmark's own (the QLink fabric has its own), on the job's store,
    for the bookkeeping (times, wrong counts) and --vs gloo."""
    from datetime import timedelta

    import torch.distributed as dist
    if dist.is_initialized():
        return
    hosted = os.environ.get("QCCL_STORE") == "launcher" or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    master = rank == 0 and not hosted
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, master,
                          timeout=timedelta(seconds=120), wait_for_workers=False, multi_tenant=master)
    dist.init_process_group("gloo", store=dist.PrefixStore("qccl_perf", store), rank=rank, world_size=n,
                            timeout=timedelta(seconds=600))


# -- the table ------------------------------------------------------------------------------------------------------
HEAD1 = ("#" + " " * 62 + "out-of-place" + " " * 46 + "in-place")
HEAD2 = (f"#{'size':>11} {'count':>12} {'type':>7} {'redop':>6} {'root':>5}"
         + f" {'time':>9} {'algbw':>9} {'busbw':>9} {'#wrong':>6} {'tokens':>8} {'launch':>6}" * 2)
HEAD3 = (f"#{'(B)':>11} {'(elements)':>12} {'':>7} {'':>6} {'':>5}"
         + f" {'(us)':>9} {'(GB/s)':>9} {'(GB/s)':>9} {'':>6} {'/rank':>8} {'/rank':>6}" * 2)


def _half_text(h: Half | None) -> str:
    if h is None:
        return f" {'N/A':>9} {'N/A':>9} {'N/A':>9} {'N/A':>6} {'N/A':>8} {'N/A':>6}"
    return (f" {h.time:9.1f} {h.alg_bw:9.2e} {h.bus_bw:9.2e} {h.nwrong:6d} {h.tokens_per_rank:8.0f}"
            f" {h.launches_per_rank:6.0f}")


def row_text(row: Row) -> str:
    text = f" {row.size:11d} {row.count:12d} {row.type:>7} {row.redop:>6} {row.root:5d}"
    text += _half_text(row.out_of_place) + _half_text(row.in_place)
    gloo = [h.gloo_time for h in (row.out_of_place,) if h is not None and h.gloo_time is not None]
    text += f"   gloo {gloo[0]:9.1f} us" if gloo else ""
    algos = list(dict.fromkeys(h.algo for h in (row.out_of_place, row.in_place) if h is not None and h.algo))
    return text + (f"   algo {' / '.join(algos)}" if algos else "")


# -- main -------------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="qccl-perf", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("collectives", nargs="+", metavar="collective",
                    help=f"{', '.join(COLLECTIVES)} or all (nccl-tests' names; qccl's work too)")
    ap.add_argument("-b", "--minbytes", type=parse_size, default=4)
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=64)
    ap.add_argument("-f", "--stepfactor", type=int, default=2)
    ap.add_argument("-i", "--stepbytes", type=parse_size, default=0, help="add this instead of multiplying by -f")
    ap.add_argument("-g", "--ngpus", type=int, default=2, help="ranks (QwenGPUs)")
    ap.add_argument("-o", "--op", default="sum", help="sum, prod, max, min, avg or all")
    ap.add_argument("-d", "--datatype", default="int32", help="a dtype of the transport or all")
    ap.add_argument("-r", "--root", default="0", help="root of broadcast / reduce, or all")
    ap.add_argument("-n", "--iters", type=int, default=1)
    ap.add_argument("-w", "--warmup_iters", dest="warmup", type=int, default=0)
    ap.add_argument("-c", "--check", type=int, default=1, help="iterations whose results are checked (0: none)")
    ap.add_argument("-J", "--output_file", dest="json", default=None, help="write the results as JSON here")
    ap.add_argument("--transport", default="qlink")
    ap.add_argument("--backend", default="interpreter", help="qwengpu backend: interpreter or circuit")
    ap.add_argument("--algo", default=None, choices=ALGOS,
                    help="ring, multicast or auto (default: auto, the tuner's choice)")
    ap.add_argument("--vs", choices=("gloo",), default=None,
                    help="also time the same inputs through torch.distributed's gloo (implies --procs)")
    ap.add_argument("--procs", action="store_true", help="one process per rank (qccl.launch, gloo fabric)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=3600.0, help="--procs: stop every rank after this many s")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument("--procs-child", action="store_true", help=argparse.SUPPRESS)
    return ap


def _relaunch(argv: list[str], a) -> int:
    """One process per rank: this command again under qccl.launch, each process a rank."""
    import subprocess
    child = [x for x in argv if x != "--procs"] + ["--procs-child"]
    cmd = [sys.executable, "-m", "qccl.launch", "-n", str(a.ngpus), "--timeout", str(a.timeout), "-m",
           "qccl_bench.perf"] + child
    return subprocess.call(cmd)


def plan(a, dtypes) -> list[tuple]:
    kinds = list(COLLECTIVES) if "all" in a.collectives else a.collectives
    for k in kinds:
        if k not in COLLECTIVES and k not in COLLECTIVES.values():
            raise SystemExit(f"qccl-perf: unknown collective {k!r} (collectives: {', '.join(COLLECTIVES)}, all)")
    types = [t for t in dtypes if t in CHECKED] if a.datatype == "all" else [a.datatype]
    for t in types:
        if t not in dtypes:
            raise SystemExit(f"qccl-perf: datatype {t!r} is not supported by transport {a.transport} "
                             f"(supported: {', '.join(dtypes)})")
        if t not in CHECKED:
            raise SystemExit(f"qccl-perf: datatype {t!r}: the benchmark checks {', '.join(CHECKED)} against numpy "
                             "(bench/nccl_compare.py covers the others on the cupy transport)")
    ops = list(R.OPS) if a.op == "all" else [a.op]
    for o in ops:
        if o not in R.OPS:
            raise SystemExit(f"qccl-perf: unknown op {o!r} (ops: {', '.join(R.OPS)}, all)")
    roots = list(range(a.ngpus)) if a.root == "all" else [int(a.root)]
    if any(not 0 <= r < a.ngpus for r in roots):
        raise SystemExit(f"qccl-perf: root {a.root} is outside 0..{a.ngpus - 1}")
    out = []
    for k in kinds:
        kind = COLLECTIVES.get(k, k)
        name = next(n for n, v in COLLECTIVES.items() if v == kind)
        for t in types:
            for size in sizes(a.minbytes, a.maxbytes, a.stepfactor, a.stepbytes):
                for o in (ops if kind in REDUCING else ["none"]):
                    for root in (roots if kind in ROOTED else [-1]):
                        out.append((name, kind, t, size, o, root))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    if not 1 <= a.ngpus <= 8:
        raise SystemExit(f"qccl-perf: -g {a.ngpus}: qccl on QLink has 1..8 ranks")
    if (a.procs or a.vs) and not a.procs_child:
        return _relaunch(argv, a)
    runner = Runner(a)
    lead = runner.ranks[0] == 0
    out = sys.stdout if lead else open(os.devnull, "w")
    cases = plan(a, runner.dtypes)
    print(f"# qccl-perf: {', '.join(dict.fromkeys(c[0] for c in cases))} on {runner.n} ranks, transport "
          f"{a.transport}, backend {a.backend}, algo {a.algo or 'auto'}, "
          f"{'one process per rank' if a.procs_child else 'one process'}; -n {a.iters} -w {a.warmup} -c {a.check}",
          file=out)
    rows: list[Row] = []
    current = None
    t_start = time.monotonic()
    for i, (name, kind, t, size, o, root) in enumerate(cases):
        if name != current:
            current = name
            print(f"#\n# {name}\n{HEAD1}\n{HEAD2}\n{HEAD3}", file=out)
        dtype = np.dtype(t)
        count = size // dtype.itemsize
        per = count // runner.n if kind in PER_RANK else count
        if kind in PER_RANK:
            count = per * runner.n
        row = Row(name, count * dtype.itemsize, count, t, o, root)
        op = "sum" if o == "none" else o
        r0 = max(root, 0)
        row.out_of_place = runner.half(kind, per, dtype, op, r0, False, row.size)
        if kind in IN_PLACE:
            row.in_place = runner.half(kind, per, dtype, op, r0, True, row.size)
        rows.append(row)
        print(row_text(row), file=out, flush=True)
        if len(cases) > 1 and not a.quiet and lead:
            print(f"# [{i + 1}/{len(cases)}] {name} {t} {o} {size} B done, {time.monotonic() - t_start:.1f} s",
                  file=sys.stderr, flush=True)
    halves = [h for r in rows for h in (r.out_of_place, r.in_place) if h is not None]
    bad = sum(h.nwrong for h in halves)
    avg = sum(h.bus_bw for h in halves) / len(halves) if halves else 0.0
    print(f"# Out of bounds values : {bad} {'OK' if bad == 0 else 'FAILED'}", file=out)
    print(f"# Avg bus bandwidth    : {avg:.6g}", file=out)
    print("#", file=out)
    if a.json and lead:
        doc = {"version": qccl.__version__, "collectives": list(dict.fromkeys(c[0] for c in cases)),
               "nranks": runner.n, "transport": a.transport, "backend": a.backend, "algo": a.algo or "auto",
               "processes": runner.n if a.procs_child else 1, "iters": a.iters, "warmup_iters": a.warmup,
               "check_iters": a.check,
               "results": [{"collective": r.collective, "size": r.size, "count": r.count, "type": r.type,
                            "redop": r.redop, "root": r.root,
                            "out_of_place": r.out_of_place.json() if r.out_of_place else None,
                            "in_place": r.in_place.json() if r.in_place else None} for r in rows],
               "out_of_bounds": bad, "average_bus_bandwidth": avg}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    runner.close()
    if a.procs_child:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
