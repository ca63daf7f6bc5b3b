"""xor_ddp: a 2-8-1 ReLU MLP learns XOR on four QwenGPUs, data parallel, checked against the replay every step.

    python -m examples.xor_ddp --steps 200 --json xor_ddp.json --save xor_ddp.npz --png xor_ddp.png

A step on every rank: H2D the batch of 8 samples (x0, x1 and the negated target, which the forward turns into the
error); xor_forward_samples (a sample a lane: outputs, errors, the loss word); xor_backward_units twice (a hidden unit
a lane, units 0-3 then 4-7, each summing its gradients over the 8 samples), each followed by a D2H of its 16 gradient
words; qccl AllReduce of the 32 (algorithm "multicast": the ring's ReduceScatter steps store each reduced block into a
16-word multicast window); H2D of the sums; xor_sgd. Before step 0 rank 0's initial parameters reach every rank
through a qccl Broadcast. The host never adds, scales or compares a value: every number below comes out of the
machines, and the replay only checks them.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

import qccl
from examples import common
from qccl.buffers import as_buffer
from qccl.transport import Read

from . import replay as R

HERE = Path(__file__).resolve().parent
KERNELS = {name: common.kernel(HERE, "xor.cu", name)
           for name in ("xor_forward_samples", "xor_backward_units", "xor_correct", "xor_sgd",
                        "xor_forward", "xor_backward", "xor_loss")}     # the last three: examples/torch_q8's
PARAMS = 32
HALF = 4                # the half-batch kernels' samples (examples/torch_q8)
DATASET = 64            # samples in the training set (XOR corners); each rank holds a quarter
BATCH = 8               # samples per step per rank (the batch's array stride in xor.cu, NS)
UNITS = 4               # hidden units per xor_backward_units launch (one warp); its gradients: 4 arrays of UNITS words


class XorRun:
    """The machines, the word map and the host schedule of one XOR run; ``communicate`` is the data-parallel part
    (xor_zero overrides it)."""

    name = "xor_ddp"
    heap = common.HEAP_DDP      # qccl's heap: 4-slot ring of 4 words, two 16-word multicast windows
    algo = "multicast"          # the AllReduce's algorithm, named (qccl's default may change)

    def __init__(self, seed: int = 0, backend: str = "interpreter", nranks: int = 4):
        self.seed, self.nranks = seed, nranks
        self.m = common.Machines(nranks=nranks, backend=backend, heap=dict(self.heap))
        self.p = self.m.alloc("parameters (W1 8x2, b1 8, W2 8)", PARAMS)
        self.b = self.m.alloc("batch (x0 8, x1 8, error 8); a backward launch stores its dW1 sums over x0, which "
                              "the host copies in again; after the backward: the 32 summed gradients (with the next "
                              "8 words)", 3 * BATCH)
        self.a = self.m.alloc("a backward launch's atomic sums (db1 4, dW2 4)", 2 * UNITS)
        self.loss = self.m.alloc("loss / correct-count word", 1)
        self.g = self.b             # the backward's dW1 sums land on x0 (stored after its last read of the batch)
        self.sums = self.b          # the AllReduce's sums are copied in over the batch and the atomic sums
        rng = np.random.default_rng(seed)
        points = rng.integers(0, 4, DATASET)
        self.shards = [points[r * DATASET // nranks:(r + 1) * DATASET // nranks] for r in range(nranks)]
        self.replay_p = R.init_params(seed)
        self.collective_tokens = [0] * nranks      # tokens written inside qccl calls this step, per rank

    # -- data --------------------------------------------------------------------------------------------------------
    def minibatch(self, step: int, rank: int) -> np.ndarray:
        """Indices into the four XOR points of the rank's BATCH samples for this step (drawn from its shard)."""
        rng = np.random.default_rng([self.seed, step, rank])
        return self.shards[rank][rng.choice(len(self.shards[rank]), BATCH, replace=False)]

    @staticmethod
    def batch_words(points: np.ndarray) -> np.ndarray:
        """What the loader copies in: x0[8], x1[8], then each target negated (the data set stores -t); fewer points
        fill the first words of each array (the kernels' stride is BATCH)."""
        words = np.zeros(3 * BATCH, np.int32)
        n = len(points)
        words[0:n], words[BATCH:BATCH + n], words[2 * BATCH:2 * BATCH + n] = R.X[points, 0], R.X[points, 1], -R.T[points]
        return words

    # -- the schedule ------------------------------------------------------------------------------------------------
    def broadcast_init(self) -> None:
        """Rank 0 initialises; a Broadcast makes the replicas equal; each host copies its replica in."""
        init = R.init_params(self.seed).astype(np.int32)
        recv = [np.zeros(PARAMS, np.int32) for _ in range(self.nranks)]
        with qccl.group():
            for c in self.m.comms:
                c.broadcast(init if c.rank == 0 else None, recv[c.rank], root=0, algo="ring")
        self.m.run({r: [self.m.write(self.p, recv[r])] for r in self.m.ranks})

    def compute(self, step: int, between=None) -> tuple[dict, dict]:
        """Forward, loss and backward of the batch on every rank; -> (gradients, loss word) per rank. ``between``:
        called after the forward and before the backward (e.g. Machines.rebase, to check the two apart)."""
        m, K = self.m, KERNELS
        grads = {r: np.zeros(PARAMS, np.int32) for r in m.ranks}
        losses = {r: np.zeros(1, np.int32) for r in m.ranks}
        forward, backward = {}, {}
        for r in m.ranks:
            words = self.batch_words(self.minibatch(step, r))
            forward[r] = [m.write(self.b, words), m.write(self.loss, np.zeros(1, np.int32)),
                          m.launch(K["xor_forward_samples"], BATCH, (self.p, self.b, self.loss), "forward"),
                          m.read(self.loss, losses[r])]
            backward[r] = []
            for u in range(0, 8, UNITS):
                if u:       # the last launch stored its dW1 sums over x0: the loader's words again (a copy)
                    backward[r].append(m.write(self.b, words[:BATCH]))
                backward[r] += [m.write(self.a, np.zeros(2 * UNITS, np.int32)),
                                m.launch(K["xor_backward_units"], UNITS, (self.p, self.b, self.g, self.a, u),
                                         f"backward {u}-{u + UNITS - 1}")]
                # the launch's 4 arrays of UNITS words land at their places in the gradient vector (a copy of words)
                into = as_buffer(grads[r], "read")
                backward[r] += [Read(self.g, into, u, UNITS), Read(self.g + UNITS, into, 8 + u, UNITS),
                                Read(self.a, into, 16 + u, UNITS), Read(self.a + UNITS, into, 24 + u, UNITS)]
        if between is None:
            m.run({r: forward[r] + backward[r] for r in m.ranks})
        else:
            m.run(forward)
            between()
            m.run(backward)
        return grads, losses

    def communicate(self, grads: dict) -> None:
        """DDP: AllReduce the gradients, copy the sums in, SGD on all 32 parameters."""
        m = self.m
        summed = {r: np.zeros(PARAMS, np.int32) for r in m.ranks}
        with self.collective():
            with qccl.group():
                for c in m.comms:
                    c.allreduce(grads[c.rank], summed[c.rank], op=qccl.SUM, algo=self.algo)
        m.run({r: [m.write(self.sums, summed[r]), m.launch(KERNELS["xor_sgd"], PARAMS, (self.p, self.sums), "sgd")]
               for r in m.ranks})

    @contextlib.contextmanager
    def collective(self):
        """Count the tokens each rank writes inside the qccl calls of the block (the communication's cost)."""
        before = self.m.tokens_written()
        yield
        self.collective_tokens = [c + a - b for c, a, b in zip(self.collective_tokens, self.m.tokens_written(),
                                                                  before)]

    # -- the replay ----------------------------------------------------------------------------------------------------
    def replay_step(self, step: int) -> tuple[dict, dict]:
        """The replay's per-rank gradients and losses for this step; advances the replay's parameters."""
        grads, losses = {}, {}
        for r in self.m.ranks:
            batch = self.minibatch(step, r)
            grads[r] = R.gradients(self.replay_p, R.X[batch], R.T[batch])
            losses[r] = np.array([R.loss(self.replay_p, R.X[batch], R.T[batch])])
        total = R.wrap(sum(grads[r] for r in self.m.ranks))
        self.replay_p = R.step(self.replay_p, total)
        return grads, losses

    def evaluate(self) -> dict:
        """Every rank classifies the four XOR points on its machine; -> {rank: correct count} (the machine's word)."""
        m, K = self.m, KERNELS
        counts = {r: np.zeros(1, np.int32) for r in m.ranks}
        every = np.arange(4)
        m.run({r: [m.write(self.b, self.batch_words(every)), m.write(self.loss, np.zeros(1, np.int32)),
                   m.launch(K["xor_forward_samples"], 4, (self.p, self.b, self.loss), "eval forward"),
                   m.write(self.loss, np.zeros(1, np.int32)),
                   # xor_correct reads the errors at its argument + 2 * HALF: the batch's errors are at b + 2 * BATCH
                   m.launch(K["xor_correct"], 4, (self.b + 2 * BATCH - 2 * HALF, self.loss), "correct"),
                   m.read(self.loss, counts[r])] for r in m.ranks})
        common.check_equal("correct count", -1, counts, np.array([R.correct(self.replay_p, R.X, R.T)]))
        return {r: int(counts[r][0]) for r in m.ranks}

    # -- the run -------------------------------------------------------------------------------------------------------
    def train(self, steps: int, quiet: bool = True, on_step=None, rebase_every: int = 0) -> dict:
        """Broadcast, then ``steps`` steps, each checked against the replay on every rank; returns the report.
        ``rebase_every``: a context rebase on every rank after every that many steps (0: never)."""
        common.check_steps(steps)
        m = self.m
        self.broadcast_init()
        common.check_equal("initial parameters", 0, m.read_all(self.p, PARAMS), self.replay_p)
        log = common.StepLog()
        progress = common.Progress(steps, self.name, quiet)
        for step in range(steps):
            t0, l0 = m.tokens_written(), m.launches()
            self.collective_tokens = [0] * self.nranks
            grads, losses = self.compute(step)
            t1 = m.tokens_written()
            self.communicate(grads)
            t2, l2 = m.tokens_written(), m.launches()
            want_g, want_l = self.replay_step(step)
            common.check_equal("gradients", step, grads, want_g)
            common.check_equal("loss", step, losses, want_l)
            common.check_equal("parameters", step, m.read_all(self.p, PARAMS), self.replay_p)
            comm = [b - a for a, b in zip(t1, t2)]
            row = log.add(step, t0, t2, l0, l2, comm_tokens_min=min(comm), comm_tokens_max=max(comm),
                          collective_tokens_min=min(self.collective_tokens),
                          collective_tokens_max=max(self.collective_tokens),
                          loss=[int(losses[r][0]) for r in m.ranks])
            progress.update(row["loss"][0], sum(t2))
            if on_step is not None:
                on_step(step, self)
            if rebase_every and (step + 1) % rebase_every == 0:
                m.rebase()
        progress.close()
        correct = self.evaluate()
        return {
            "run": self.name, "steps": steps, "seed": self.seed, "backend": m.backend, "ranks": self.nranks,
            "wall_s": round(progress.seconds, 2),
            "tokens_per_step": common.summary(log.rows, "tokens_max") | {"min_over_ranks": common.summary(
                log.rows, "tokens_min")},
            "comm_tokens_per_step": common.summary(log.rows, "comm_tokens_max"),
            "collective_tokens_per_step": common.summary(log.rows, "collective_tokens_max"),
            "launches_per_step": common.summary(log.rows, "launches"),
            "memory_map": m.memory_map(), "correct_of_4": correct, "rebases_per_rank": m.rebases(),
            "final_loss_q8": log.rows[-1]["loss"], "replay_checked_steps": steps, "steps_log": log.rows,
        }

    def parameters(self) -> dict:
        """The final Q8 parameters read from rank 0's machine, as named arrays (b2 is 0: the 32-parameter network
        of the seed has no output bias)."""
        p = self.m.read_all(self.p, PARAMS)[0]
        return {"W1": np.stack([p[0:8], p[8:16]], axis=1), "b1": p[16:24], "W2": p[24:32],
                "b2": np.zeros(1, np.int32)}


def report(result: dict) -> None:
    tok = result["tokens_per_step"]
    print(f"{result['run']}: {result['steps']} steps on {result['ranks']} {result['backend']} QwenGPUs in "
          f"{result['wall_s']} s; every step equal to the numpy replay on every rank")
    print(f"  tokens written per step per rank: median {tok['median']:.0f} (min over ranks {tok['min_over_ranks']['min']}, "
          f"max {tok['max']}); communication and update {result['comm_tokens_per_step']['median']:.0f}, of which "
          f"qccl calls {result['collective_tokens_per_step']['median']:.0f}; launches per step "
          f"{result['launches_per_step']['max']}")
    print(f"  final loss words (Q8, per rank): {result['final_loss_q8']}; XOR points right: {result['correct_of_4']}; "
          f"context rebases per rank: {result['rebases_per_rank']}")
    print("  memory map:")
    common.print_memory_map(result["memory_map"])


def main(argv=None, run_class=XorRun, steps: int = 200) -> dict:
    ap = common.parser(run_class.__doc__.splitlines()[0] if run_class.__doc__ else "XOR", steps)
    args = ap.parse_args(argv)
    run = run_class(seed=args.seed, backend=args.backend)
    result = run.train(args.steps, quiet=args.quiet,
                       rebase_every=common.rebase_every(args.rebase_every, args.backend))
    report(result)
    if args.verify:
        result["verify"] = common.report_verify(run.m, args.verify)
    common.write_json(args.json, result)
    common.save_npz(args.save, run.parameters())
    common.plot_loss(args.png, f"{run.name}: loss word of each rank (Q8)",
                     {f"rank {r}": [row["loss"][r] for row in result["steps_log"]] for r in run.m.ranks},
                     "sum of e^2/2 over 8 samples (Q8)")
    return result
