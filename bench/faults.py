"""Fault injection across processes: ``python -m qccl_bench.faults [--injections 100] [--json out.json]``.

Each injection starts ``python -m qccl.launch -n N`` (N = 2 or 4) on a worker (this module with ``--worker``) that
runs a sequence of collectives over QLink (kinds and counts vary, so consecutive calls always differ) and checks each
result against numpy. One rank, the victim, injects one fault at a random call:

  raise     raises RuntimeError (the process ends through the interpreter: excepthook, atexit)
  exit      os._exit(7) (no cleanup at all)
  kill      SIGKILL to itself
  abort     comm.abort(), then its next call (which raises InvalidUsage)
  mismatch  op max where the others pass sum (another root for a broadcast, an allreduce for an allgather)
                                                     -> InvalidUsage on every rank, then the next calls work
  count     half the count                           -> the same
  skip      skips the call (its later calls shift)   -> InvalidUsage on every rank, and RemoteError at the end
            (its last call skipped: it exits cleanly, having nothing left to mismatch; the others name it gone)
  late      sleeps 30 s before the call              -> the others' DeadlockError after QCCL_TIMEOUT s (naming it)
  launcher  (not a rank) the launcher itself is killed: every rank must die with it

Recorded per injection: every rank's first error (class, time since the fault), whether it recovered (mismatch,
count: the following calls were right), exit codes, the launcher's status, whether it hung (no end within a deadline)
and the processes left behind. The summary prints one row per fault and rank count.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FAULTS = ("raise", "exit", "kill", "abort", "mismatch", "count", "skip", "late", "launcher")
LATE = 30.0                 # seconds the late rank sleeps
CALL_TIMEOUT = 10.0         # QCCL_TIMEOUT for these runs: the others give up on a live but absent rank after this
DEAD_AFTER = 10.0           # QCCL_DEAD_AFTER (qccl's default): a silent death; the others are named by records
SLACK = 3.0                 # start-up of the check, the poll period, a busy 2-core machine
GRACE = 25.0                # the launcher's grace: longer than LATE - CALL_TIMEOUT, so the late rank wakes up by itself
HANG = 240.0                # an injection that has not ended after this is a hang (a loaded 2-core host is slow)


def sequence(calls: int, seed: int) -> list[tuple[str, int, int]]:
    """(kind, count, root) per call; consecutive calls differ in kind or count, so a shifted call is a mismatch."""
    rng = random.Random(seed)
    out, last = [], None
    while len(out) < calls:
        c = (rng.choice(("allreduce", "allgather", "broadcast", "reduce_scatter")), rng.choice((2, 4, 6)),
             rng.randrange(8))
        if last is None or c[:2] != last[:2]:
            out.append(c)
            last = c
    return out


# -- one rank (under qccl.launch) --------------------------------------------------------------------------------------
def worker(a) -> int:
    import qccl
    from qccl_bench import harness as H
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    report = {"rank": rank, "error": None, "t_error": None, "recovered": None, "wrong": 0, "done": 0}
    out = Path(a.report)

    def save():
        # whole or not at all: the launcher fault kills ranks at any moment, mid-write included, and a truncated
        # report would read as no JSON at all (a rename within one folder is atomic)
        part = out / f"rank{rank}.json.part"
        part.write_text(json.dumps(report))
        os.replace(part, out / f"rank{rank}.json")

    def fault_now():
        (out / "fault_time").write_text(repr(time.time()))

    comm = qccl.Communicator.init(n, rank, qccl.get_unique_id())
    save()
    victim = rank == a.victim
    errors_after = False
    for i, (kind, count, root) in enumerate(sequence(a.calls, a.seed)):
        root %= n
        op = "sum"
        if victim and i == a.at:
            fault_now()
            if a.fault == "raise":
                raise RuntimeError(f"injected fault at call {i}")
            if a.fault == "exit":
                os._exit(7)
            if a.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if a.fault == "abort":
                comm.abort()
            if a.fault == "mismatch":       # a reduction's op, a broadcast's root, or another kind of call
                if kind in ("allreduce", "reduce_scatter"):
                    op = "max"
                elif kind == "broadcast":
                    root = (root + 1) % n
                else:
                    kind = "allreduce"
            if a.fault == "count":
                count //= 2
            if a.fault == "skip":
                continue
            if a.fault == "late":
                time.sleep(LATE)
        b = H.prepare(n, kind, count, np.int32, seed=1000 * a.seed + i)
        try:
            H.issue(comm, kind, b.inputs[rank], b.outs[rank], op, root)
        except Exception as e:      # noqa: BLE001  (recorded: the point of the run)
            if report["error"] is None:
                report["error"] = f"{type(e).__name__}: {e}"
                report["t_error"] = time.time()
                save()
            if type(e).__name__ != "InvalidUsage" or "aborted" in str(e) or "destroyed" in str(e):
                save()
                return 1        # a broken world: stop (as a training script would)
            errors_after = True
            continue
        if a.fault in ("mismatch", "count") and report["error"] is not None and report["recovered"] is None:
            report["recovered"] = True
        exp = H.expect(kind, b, op, root)[rank]
        if op == "sum" and not H.same(b.outs[rank], exp):
            report["wrong"] += 1
        report["done"] += 1
        save()
    comm.destroy()
    save()
    return 1 if errors_after or report["wrong"] else 0


# -- the driver ----------------------------------------------------------------------------------------------------------
def leftovers(marker: str) -> list[int]:
    """Processes whose command line still names this injection's report folder."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if marker in (p / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(p.name))
        except OSError:
            pass
    return pids


def bound(fault: str, rank: int, victim: int) -> float:
    """Seconds after the fault within which this rank must have ended with an error."""
    if fault == "late":
        return (LATE if rank == victim else CALL_TIMEOUT) + SLACK + DEAD_AFTER
    return DEAD_AFTER + 2 * SLACK


def inject(fault: str, n: int, victim: int, at: int, calls: int, seed: int, launcher: str = "qccl") -> dict:
    """One injection under ``launcher`` ("qccl": python -m qccl.launch; "torchrun": torch's own launcher, which
    stops the other ranks itself once one fails, so there qccl's errors race with its SIGTERM)."""
    with tempfile.TemporaryDirectory(prefix="qccl-fault-") as d:
        env = dict(os.environ, QCCL_TIMEOUT=str(CALL_TIMEOUT), QCCL_DEAD_AFTER=str(DEAD_AFTER))
        if launcher == "torchrun":
            if fault == "launcher":
                raise ValueError("the launcher fault is qccl.launch's (torchrun's agent is torch's)")
            start = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
                     "--log-dir", str(Path(d) / "torchrun")]         # removed with d, not left in /tmp
        else:
            start = [sys.executable, "-m", "qccl.launch", "-n", str(n), "--grace", str(GRACE)]
        cmd = start + ["-m", "qccl_bench.faults", "--worker", "--fault", fault if fault != "launcher" else "none",
                       "--victim", str(victim), "--at", str(at), "--calls", str(calls), "--seed", str(seed),
                       "--report", d]
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        hung = False
        if fault == "launcher":
            # kill the launcher once every rank has reported in (inited), at a random moment of the sequence
            while len(list(Path(d).glob("rank*.json"))) < n and time.time() - t0 < HANG:
                time.sleep(0.05)
            time.sleep(random.Random(seed).uniform(0.0, 2.0))
            Path(d, "fault_time").write_text(repr(time.time()))
            p.kill()
        try:
            text, _ = p.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            hung = True
            p.kill()
            text, _ = p.communicate()
        end = time.time()
        time.sleep(0.5 if fault != "launcher" else DEAD_AFTER)      # PDEATHSIG is immediate; let the kernel reap
        left = leftovers(d)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        t_fault = float(Path(d, "fault_time").read_text()) if Path(d, "fault_time").exists() else None
        ranks = []
        for r in range(n):
            f = Path(d, f"rank{r}.json")
            rep = json.loads(f.read_text()) if f.exists() else {"rank": r, "error": None, "t_error": None}
            rep["delay"] = None if rep.get("t_error") is None or t_fault is None else rep["t_error"] - t_fault
            ranks.append(rep)
    return {"fault": fault, "n": n, "victim": victim, "at": at, "calls": calls, "seed": seed, "launcher": launcher,
            "status": p.returncode, "hung": hung,
            "left": len(left), "wall": end - t0, "t_fault": t_fault, "ranks": ranks, "log": text[-3000:]}


def judge(res: dict) -> dict:
    """Did every rank end within the bound with an error (or, for the victim of raise/exit/kill, by dying)?"""
    f, v = res["fault"], res["victim"]
    late_ranks = []
    delays = []
    for rep in res["ranks"]:
        r = rep["rank"]
        if f in ("exit", "kill", "raise") and r == v:
            continue        # the victim died by its own hand
        if f == "launcher":
            continue        # every rank dies with the launcher: counted by `left`
        if f == "skip" and r == v and res["at"] == res.get("calls", 6) - 1:
            continue        # it skipped its last call: no later call of its own to mismatch, it exits cleanly (the
            #                 others must name it gone)
        d = rep.get("delay")
        if d is None and res.get("launcher") == "torchrun" and not res["hung"]:
            continue        # torchrun's agent stopped it (SIGTERM) before qccl's error: an end, not a hang
        if d is None or d > bound(f, r, v):
            late_ranks.append(r)
        else:
            delays.append(d)
    recovered = None
    if f in ("mismatch", "count") and res["at"] < res.get("calls", 6) - 1:     # a call after it must be right
        recovered = all(rep.get("recovered") for rep in res["ranks"])
    ok = (not res["hung"] and res["left"] == 0 and res["status"] != 0 and not late_ranks
          and recovered is not False and all(rep.get("wrong", 0) == 0 for rep in res["ranks"]))
    return {"ok": ok, "late_ranks": late_ranks, "max_delay": max(delays) if delays else None, "recovered": recovered}


def plan(count: int, seed: int, calls: int, faults=FAULTS, sizes=(2, 4)) -> list[tuple]:
    """``count`` injections cycling through faults x sizes, each with a random victim and call."""
    rng = random.Random(seed)
    out = []
    combos = [(f, n) for f in faults for n in sizes]
    for i in range(count):
        f, n = combos[i % len(combos)]
        out.append((f, n, rng.randrange(n), rng.randrange(calls), calls, rng.randrange(1 << 30)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fault", default="raise")
    ap.add_argument("--victim", type=int, default=0)
    ap.add_argument("--at", type=int, default=0)
    ap.add_argument("--calls", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", default=None)
    ap.add_argument("--injections", type=int, default=len(FAULTS) * 2)
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--sizes", default="2,4")
    ap.add_argument("--launcher", default="qccl", choices=("qccl", "torchrun"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--jsonl", default=None, help="append each injection's record to this file as it ends")
    ap.add_argument("--summarize", nargs="*", default=None, help="print the summary of these --jsonl files")
    a = ap.parse_args(argv)
    if a.summarize is not None:
        rows = [json.loads(line) for f in a.summarize for line in Path(f).read_text().splitlines() if line]
        rows = [{**r, **judge(r)} for r in rows]        # judged again: the records keep what every rank saw
        print(f"{len(rows)} injections")
        print(summary(rows))
        return 0 if all(r["ok"] for r in rows) else 1
    if a.worker:
        return worker(a)
    faults = tuple(a.faults.split(","))
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        ap.error(f"unknown faults {unknown} (faults: {', '.join(FAULTS)})")
    results = []
    for i, (f, n, victim, at, calls, seed) in enumerate(plan(a.injections, a.seed, a.calls, faults,
                                                            tuple(int(x) for x in a.sizes.split(",")))):
        res = inject(f, n, victim, at, calls, seed, a.launcher)
        res.update(judge(res))
        results.append(res)
        if a.jsonl:         # one line per injection as it ends: a long run can be summarised while it goes on
            with open(a.jsonl, "a") as fh:
                fh.write(json.dumps(res) + "\n")
        delays = ", ".join("-" if r.get("delay") is None else f"{r['delay']:.1f}" for r in res["ranks"])
        print(f"[{i + 1}/{a.injections}] {f:8s} n={n} victim={victim} at={at}: {'ok ' if res['ok'] else 'BAD'} "
              f"status={res['status']} hung={res['hung']} left={res['left']} delays=[{delays}] s "
              f"wall={res['wall']:.1f} s", flush=True)
        if not res["ok"]:
            print(res["log"], flush=True)
    print(summary(results))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


def summary(results: list) -> str:
    rows = {}
    for r in results:
        rows.setdefault((r["fault"], r["n"]), []).append(r)
    lines = ["| fault | ranks | injections | all ranks ended with an error in the bound | max time to error (s) | "
             "hangs | leftover processes | launcher status |", "|---|---|---|---|---|---|---|---|"]
    for (f, n), rs in sorted(rows.items(), key=lambda kv: (FAULTS.index(kv[0][0]), kv[0][1])):
        delays = [x["max_delay"] for x in rs if x["max_delay"] is not None]
        statuses = sorted({x["status"] for x in rs})
        lines.append(f"| {f} | {n} | {len(rs)} | {sum(x['ok'] for x in rs)}/{len(rs)} | "
                     f"{max(delays):.1f} | {sum(x['hung'] for x in rs)} | {sum(x['left'] for x in rs)} | "
                     f"{', '.join(map(str, statuses))} |" if delays else
                     f"| {f} | {n} | {len(rs)} | {sum(x['ok'] for x in rs)}/{len(rs)} | - | "
                     f"{sum(x['hung'] for x in rs)} | {sum(x['left'] for x in rs)} | {', '.join(map(str, statuses))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
