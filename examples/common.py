"""What the training runs share: four QwenGPUs with a qccl communicator, a word map, host ops, progress, reports.

A run is a host program that only loads data, copies words and launches kernels; every parameter, gradient,
activation and loss comes out of the machines, and a numpy replay written independently checks them after every step.

Example (a run's skeleton)::

    from examples import common
    m = common.Machines(nranks=4, backend="interpreter")
    p = m.alloc("parameters", 32)                      # the same address on every rank
    m.run({r: [m.write(p, init[r]), m.launch(KERNEL, 32, (p,))] for r in m.ranks})
    words = m.read_all(p, 32)                          # {rank: int32 array}, read by the machines (D2H)
    common.check_equal("p", step=0, machine=words, replay=expected)

The communicator's symmetric heap comes first (qccl lays it out from word 0); a run's buffers are allocated after it,
where no aperture routes a store, so the runs' kernels read and write local memory only. ``HEAP`` is the smallest
heap the XOR runs' collectives need: a ring channel of two 8-word slots (18 words, as in the seed), 8 staging words,
two 4-word multicast windows and 4 flags, and three 1-word p2p channels (qccl lays these out whether or not a run
sends point to point).
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import qccl
from qccl.buffers import as_buffer
from qccl.transport import Kernel, Launch, Read, Work, Write
from qwengpu.isa import SINK

Q8 = 256                                    # 1.0 in the runs' fixed point
HEAP = {"slot_words": 8, "window_words": 4, "p2p_slot_words": 1}
# The XOR runs' heaps (62 and 58 words; their buffers take 65 more): xor_ddp's AllReduce of 32 words over 16-word
# multicast windows (4-word ring slots for its ReduceScatter half), xor_zero's ReduceScatter over 8-word ring slots
# and its AllGather over 8-word multicast windows.
HEAP_DDP = {"slot_words": 4, "window_words": 16, "p2p_slot_words": 1}
HEAP_ZERO = {"slot_words": 8, "window_words": 8, "p2p_slot_words": 1}


class ReplayMismatch(AssertionError):
    """The machines' words differ from the numpy replay (names the step, rank, array and first differing index)."""


def check_equal(name: str, step: int, machine: dict, replay) -> None:
    """Every rank's ``machine[rank]`` must equal the replay's words bit for bit (``replay``: one array for all
    ranks, or a dict per rank). Raises ReplayMismatch naming where they first differ.

    >>> check_equal("p", 0, {0: np.array([1, 2], np.int32)}, np.array([1, 2]))
    """
    for rank, words in sorted(machine.items()):
        want = np.asarray(replay[rank] if isinstance(replay, dict) else replay).astype(np.int64) & 0xFFFFFFFF
        got = np.asarray(words).astype(np.int64) & 0xFFFFFFFF
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = int(np.flatnonzero(got != want)[0]) if got.shape == want.shape else -1
            raise ReplayMismatch(f"step {step}, rank {rank}: {name}: the machine's words differ from the numpy replay at "
                                 f"index {bad} "
                                 f"(machine {got.astype(np.uint32).view(np.int32)[bad] if bad >= 0 else got.shape}, "
                                 f"replay {want.astype(np.uint32).view(np.int32)[bad] if bad >= 0 else want.shape})")


@dataclass
class Machines:
    """``nranks`` QwenGPUs in this process with one qccl communicator each (QLink, in-memory fabric).

    ``backend``: "interpreter", "circuit" or "model" (qwengpu backends); ``heap``: qccl config keys sizing the
    communicator's heap. ``memory_map()`` lists what every word is used for.
    """
    nranks: int = 4
    backend: str = "interpreter"
    heap: dict = field(default_factory=lambda: dict(HEAP))
    comms: list = field(init=False)
    _next: int = field(init=False)
    _map: list = field(init=False)

    def __post_init__(self):
        # the whole token stream is kept: verify_contexts replays every context of the run
        self.comms = qccl.Communicator.init_all(self.nranks, config={**self.heap, "backend": self.backend,
                                                                     "backend_options": {"token_log": None}})
        self.world = self.comms[0].world
        heap = self.comms[0].heap
        self._next = heap.used
        self._map = [("qccl heap", 0, heap.used, heap.describe())]

    @property
    def ranks(self) -> range:
        return range(self.nranks)

    # -- memory ------------------------------------------------------------------------------------------------------
    def alloc(self, name: str, n: int) -> int:
        """n words at the same address on every rank, after the heap; refuses to run past word 126."""
        if n < 1 or self._next + n > SINK:
            raise qccl.InvalidArgument(f"alloc({name!r}, {n}): words {self._next}..{self._next + n - 1} do not fit "
                                       f"below the sink (word {SINK}); {SINK - self._next} words are free")
        at = self._next
        self._next += n
        self._map.append((name, at, n, ""))
        return at

    def memory_map(self) -> list[dict]:
        """[{what, first word, words}] for every region, heap first; the last entry is the total used of 127."""
        rows = [{"what": name, "at": at, "words": n} for name, at, n, _ in self._map]
        return rows + [{"what": "used", "at": 0, "words": self._next}]

    # -- host ops ----------------------------------------------------------------------------------------------------
    @staticmethod
    def write(address: int, words) -> Write:
        """Host -> device copy of int32 words (fed, free)."""
        data = np.ascontiguousarray(np.asarray(words, dtype=np.int32).reshape(-1))
        return Write(address, as_buffer(data, "write"), 0, data.size)

    @staticmethod
    def launch(kernel: Kernel, threads: int, args, note: str = "") -> Launch:
        return Launch(kernel, threads, tuple(int(a) for a in args), note)

    @staticmethod
    def read(address: int, dest: np.ndarray) -> Read:
        """Device -> host copy into ``dest`` (int32; the machine writes 2 tokens a word)."""
        return Read(address, as_buffer(dest, "read"), 0, dest.size)

    def run(self, ops: dict) -> None:
        """Run every rank's host ops together (lockstep: the ranks' records interleave) until all are done."""
        self.world.run([Work(r, list(ops[r])) for r in sorted(ops)])
        for r in sorted(ops):
            self.world.synchronize(r)

    def read_all(self, address: int, n: int) -> dict:
        out = {r: np.zeros(n, np.int32) for r in self.ranks}
        self.run({r: [self.read(address, out[r])] for r in self.ranks})
        return out

    def rebase(self) -> None:
        """Context rebase on every rank (between launches): each device's 127 words are read back, a fresh context
        starts, the words are written back (qwengpu.Device.rebase: a copy, no computation)."""
        for r in self.ranks:
            self.world.devices[r].rebase()

    def rebases(self) -> list[int]:
        return [self.world.devices[r].rebases for r in self.ranks]

    def tokens_written(self) -> list[int]:
        return [c.stats["tokens_written"] for c in self.comms]

    def launches(self) -> list[int]:
        return [c.stats["launches"] for c in self.comms]

    def streams(self) -> dict:
        """Each rank's token stream so far: [(id, origin, written)] (for comparing backends)."""
        return {r: [(t.id, t.origin, t.written) for t in self.world.devices[r].tokens] for r in self.ranks}


class VerifyMismatch(AssertionError):
    """A backend fed a rank's recorded context predicted another token than the one the machine wrote."""


def verify_contexts(machines: Machines, backend="circuit") -> dict:
    """Verify mode: every rank's recorded stream, one context at a time (a context ends at each rebase), is fed to a
    ``backend`` ("circuit", "model", or "interpreter") with qwengpu.circuit.verify; at every position the backend's
    argmax must be the token the machine wrote there. By induction over positions, that backend run greedily would
    have written the same streams. Returns positions compared, contexts, seconds and positions per second; raises
    VerifyMismatch at the first difference.

    >>> verify_contexts(run.m, "circuit")["positions_per_s"]
    """
    from qwengpu.circuit.verify import verify
    from qwengpu.device import make_backend
    checker = make_backend(backend) if isinstance(backend, str) else backend
    fresh = checker.snapshot()
    report = {"backend": getattr(checker, "name", str(backend)), "compared": 0, "fed": 0, "contexts": 0, "seconds": 0.0}
    for r in machines.ranks:
        dev = machines.world.devices[r]
        bounds = list(dev.context_starts) + [len(dev.tokens)]
        for context, (a, b) in enumerate(zip(bounds, bounds[1:])):
            checker.restore(fresh)
            result = verify(checker, dev.tokens[a:b], stop_after=1)
            report["compared"] += result.compared
            report["fed"] += result.fed
            report["seconds"] += result.seconds
            report["contexts"] += 1
            if result.mismatches:
                raise VerifyMismatch(f"rank {r}, context {context} (tokens {a}..{b - 1}): {result}")
    report["positions_per_s"] = round(report["fed"] / max(report["seconds"], 1e-9), 1)
    report["seconds"] = round(report["seconds"], 1)
    return report


def kernel(folder: str | Path, source: str, name: str) -> Kernel:
    """A run's CUDA kernel: ``source`` in the run's folder (its PTX checked in beside it)."""
    return Kernel(Path(folder).resolve() / source, name)


# -- command line, progress, reports -----------------------------------------------------------------------------
def parser(description: str, steps: int) -> argparse.ArgumentParser:
    """The options every run takes: --steps --json --save --backend --png --seed --quiet."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=steps, help=f"training steps (default {steps})")
    ap.add_argument("--json", help="write steps, tokens, launches, memory map, wall time and results here")
    ap.add_argument("--save", help="save the final Q8 parameters (named int32 arrays) to this .npz")
    ap.add_argument("--png", help="save the loss curve here (matplotlib)")
    ap.add_argument("--backend", default="interpreter", choices=("interpreter", "circuit", "model"),
                    help="the QwenGPUs' backend (circuit and model: a few steps; they decode every token)")
    ap.add_argument("--verify", choices=("circuit", "model"),
                    help="after the run, feed every rank's recorded contexts to this backend: it must predict every "
                         "token the machines wrote (verify mode: no greedy decoding)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rebase-every", type=int, default=None, metavar="N",
                    help="context rebase on every rank after every N steps (default: never on the interpreter, "
                         "every step on the circuit and model backends)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def check_steps(steps: int) -> None:
    if steps < 1:
        raise qccl.InvalidArgument(f"--steps {steps}: a run has at least 1 step")


def rebase_every(option: int | None, backend: str) -> int:
    """Steps between context rebases (0: never)."""
    if option is None:
        return 0 if backend == "interpreter" else 1
    if option < 0:
        raise qccl.InvalidArgument(f"--rebase-every {option}: a number of steps >= 0 (0: never)")
    return option


class Progress:
    """A tqdm bar over the steps showing the loss and model tokens per second (silent with quiet=True)."""

    def __init__(self, steps: int, label: str, quiet: bool = False):
        self.started = time.perf_counter()
        self.bar = None
        if not quiet:
            from tqdm import tqdm
            self.bar = tqdm(total=steps, desc=label, unit="step")

    def update(self, loss, tokens_total: int) -> None:
        if self.bar is not None:
            rate = tokens_total / max(time.perf_counter() - self.started, 1e-9)
            self.bar.set_postfix(loss=loss, tok_s=f"{rate:,.0f}")
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


@dataclass
class StepLog:
    """Per-step figures: tokens written per rank (min / max), launches, the machine's loss words."""
    rows: list = field(default_factory=list)

    def add(self, step: int, tokens_before: list, tokens_after: list, launches_before: list, launches_after: list,
            **values) -> dict:
        per_rank = [a - b for a, b in zip(tokens_after, tokens_before)]
        launches = [a - b for a, b in zip(launches_after, launches_before)]
        row = {"step": step, "tokens_min": min(per_rank), "tokens_max": max(per_rank), "launches": max(launches),
               **values}
        self.rows.append(row)
        return row


def summary(rows: list, key: str) -> dict:
    """min / max / median of a per-step field (bookkeeping counters, not machine values)."""
    values = [r[key] for r in rows]
    return {"min": int(min(values)), "max": int(max(values)), "median": float(np.median(values))}


def tokens_per_step(rows: list) -> dict:
    """Tokens written per step per rank over a run: the least of the per-step minima, the most and the median of the
    per-step maxima (rows carry ``tokens_min`` / ``tokens_max`` over ranks)."""
    most = summary(rows, "tokens_max")
    return {"min": summary(rows, "tokens_min")["min"], "max": most["max"], "median": most["median"]}


def report_verify(machines: Machines, backend) -> dict:
    """verify_contexts, with its one-line summary printed; the runs' --verify option."""
    v = verify_contexts(machines, backend)
    print(f"  verify mode on the {v['backend']}: {v['compared']:,} written tokens predicted in {v['contexts']} "
          f"contexts, {v['positions_per_s']} positions/s")
    return v


def write_json(path: str | None, report: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(report, indent=2, default=_plain))


def _plain(x):
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON: {type(x).__name__}")


def save_npz(path: str | None, arrays: dict) -> None:
    if path:
        np.savez(path, **{k: np.asarray(v, dtype=np.int32) for k, v in arrays.items()})


def plot_loss(path: str | None, title: str, series: dict, ylabel: str) -> None:
    """One line per series (name -> list of per-step values) to a PNG (matplotlib, no display)."""
    if not path:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, values in series.items():
        ax.plot(range(len(values)), values, label=name, lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_memory_map(rows: list[dict]) -> None:
    for row in rows:
        if row["what"] == "used":
            print(f"  {row['words']} of {SINK} words used")
        else:
            print(f"  {row['at']:>3}..{row['at'] + row['words'] - 1:<3} {row['words']:>3} words  {row['what']}")
