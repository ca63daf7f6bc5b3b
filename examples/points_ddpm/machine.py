"""The split denoiser on four QwenGPUs: memory layout, the host ops of a training step and of DDIM sampling, and the
check of every step against the numpy replay (split.py).

The host writes data and schedule constants, launches denoiser.cu's kernels, reads the partial outputs, hands them
to qccl's AllReduce and writes the sum back; every parameter, activation and sample comes out of the machines.

>>> from examples.points_ddpm.fixed import schedule
>>> sd = SplitDenoiser(D=2, H=32, samples=8)           # doctest: +SKIP
>>> sd.load(w1, w2); sd.train_step(x0, t, eps, schedule(20), L=5)    # doctest: +SKIP
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import qccl
from examples import common
from qccl.buffers import as_buffer
from qccl.transport import Write

from . import split
from .fixed import ONE, Schedule

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "denoiser.cu"
NOISE, FORWARD, HIDDEN, BACKWARD, UPDATE, DDIM = (common.kernel(HERE, "denoiser.cu", n) for n in (
    "dn_noise", "dn_forward", "dn_hidden", "dn_backward", "dn_update", "dn_ddim"))

# The smallest heap qccl lays out for 4 ranks (29 words): a ring of two 1-word slots, one staging word, 4-word
# multicast windows, 1-word p2p slots. The diffusion runs only AllReduce; this leaves 98 words for the denoiser.
HEAP = {"slot_words": 1, "window_words": 4, "p2p_slot_words": 1}


class SplitDenoiser:
    """A D -> H -> D denoiser (input: D numbers and the noise level) split over ``ranks`` QwenGPUs, with room to
    sample ``samples`` vectors at a time. ``backend``: qwengpu backend of the machines.

    Memory per rank (after qccl's heap): w1, w2, u (samples rows of D + 2 words), out (samples x D words) and hbuf
    (Hr words used only inside the backward): u's spare rows when there are enough, else the output bias row, which
    the host copies out and back around the backward.
    """

    def __init__(self, D: int, H: int, samples: int = 1, ranks: int = 4, backend: str = "interpreter",
                 heap: dict | None = None):
        if H % ranks:
            raise qccl.InvalidArgument(f"H={H} hidden units do not split over {ranks} ranks")
        self.D, self.H, self.ranks, self.samples = D, H, ranks, samples
        self.hr, self.n1 = H // ranks, D + 2
        self.m = common.Machines(nranks=ranks, backend=backend, heap=dict(HEAP if heap is None else heap))
        m = self.m
        self.w1 = m.alloc("w1 (inputs, noise level, bias) x hidden", self.n1 * self.hr)
        self.w2 = m.alloc("w2 (hidden, bias) x outputs", (self.hr + 1) * D)
        self.bias = self.w2 + self.hr * D
        self.u = m.alloc(f"u: {samples} x (x, F[t], 1.0)", samples * self.n1)
        self.out = m.alloc(f"out: {samples} x partial / AllReduce", samples * D)
        if (samples - 1) * self.n1 >= self.hr:
            self.hbuf, self.spill = self.u + self.n1, False
        elif D >= self.hr:
            self.hbuf, self.spill = self.bias, True
        else:
            raise qccl.InvalidArgument(f"no room for the backward's {self.hr} words: samples={samples}, D={D}")
        self.one = self.u + self.n1 - 1          # u's constant 1.0 (256), the bias rows' input

    # -- parameters ------------------------------------------------------------------------------------------------
    def load(self, w1: np.ndarray, w2: np.ndarray) -> None:
        """Host -> device copy of each rank's initial parameters (shapes as split.init_params)."""
        self.m.run({r: [self.m.write(self.w1, w1[r]), self.m.write(self.w2, w2[r])] for r in self.m.ranks})

    def params(self) -> tuple[np.ndarray, np.ndarray]:
        """Each rank's parameters read back (D2H): W1 (R, n1, Hr), W2 (R, Hr + 1, D), int64."""
        a = self.m.read_all(self.w1, self.n1 * self.hr)
        b = self.m.read_all(self.w2, (self.hr + 1) * self.D)
        return (np.stack([a[r].reshape(self.n1, self.hr) for r in self.m.ranks]).astype(np.int64),
                np.stack([b[r].reshape(self.hr + 1, self.D) for r in self.m.ranks]).astype(np.int64))

    def _allreduce(self, n: int) -> dict:
        """Read every rank's partial (D2H), AllReduce them over qccl, return the sums (host buffers)."""
        m = self.m
        part = {r: np.zeros(n, np.int32) for r in m.ranks}
        m.run({r: [m.read(self.out, part[r])] for r in m.ranks})
        total = {r: np.zeros(n, np.int32) for r in m.ranks}
        with qccl.group():
            for c in m.comms:
                c.allreduce(part[c.rank], total[c.rank], op=qccl.SUM)
        return total

    # -- training ----------------------------------------------------------------------------------------------------
    def train_step(self, x0: np.ndarray, t: int, eps: np.ndarray, sch: Schedule, L: int) -> np.ndarray:
        """One step on one sample (Q8 x0, eps of D numbers, level t); returns the AllReduce's result (the error),
        as every rank received it (R, D)."""
        m, D, hr, n1 = self.m, self.D, self.hr, self.n1
        u_row = np.concatenate([x0, [sch.F[t], ONE]]).astype(np.int32)
        m.run({r: [m.write(self.u, u_row), m.write(self.out, eps),
                   m.launch(NOISE, D, (self.u, self.out, self.bias, sch.A[t], sch.S[t], int(r == 0)), "noise"),
                   m.launch(FORWARD, hr, (self.w1, self.w2, self.u, self.out, n1, hr, D, 1), "forward")]
               for r in m.ranks})
        err = self._allreduce(D)
        saved = {r: np.zeros(D, np.int32) for r in m.ranks}
        ops = {}
        for r in m.ranks:
            ops[r] = [m.write(self.out, err[r]),
                      m.launch(UPDATE, D, (self.bias, self.one, self.out, 1, D, L), "bias row")]
            if self.spill:
                ops[r].append(m.read(self.bias, saved[r]))
            ops[r] += [m.launch(HIDDEN, hr, (self.w1, self.u, self.hbuf, n1, hr), "hidden"),
                       m.launch(BACKWARD, hr, (self.w2, self.out, self.hbuf, hr, D, L), "backward"),
                       m.launch(UPDATE, hr, (self.w1, self.u, self.hbuf, n1, hr, L), "w1")]
            if self.spill:      # the bias row goes back as it was read: a copy (Write reads the buffer when it runs)
                ops[r].append(Write(self.bias, as_buffer(saved[r], "bias row"), 0, D))
        m.run(ops)
        return np.stack([err[r] for r in m.ranks]).astype(np.int64)

    # -- sampling ----------------------------------------------------------------------------------------------------
    def sample(self, xT: np.ndarray, sch: Schedule, on_step=None) -> np.ndarray:
        """DDIM from x_T (Q8, (n, D) with n <= samples) to x_0 on the machines; ``on_step(t, e)`` sees each step's
        AllReduce result (R, n, D). Returns x_0 as every rank holds it (R, n, D)."""
        m, D, hr, n1 = self.m, self.D, self.hr, self.n1
        n = len(xT)
        if not 1 <= n <= self.samples:
            raise qccl.InvalidArgument(f"{n} samples at a time: this layout holds 1..{self.samples}")
        rows = np.concatenate([xT, np.zeros((n, 1)), np.full((n, 1), ONE)], axis=1).astype(np.int32)
        # C1 = 256, C2 = 0 leaves x as written and starts out at the bias row (see dn_ddim)
        m.run({r: [m.write(self.u, rows), m.launch(DDIM, D, (self.u, self.out, self.bias, n1, D, n, ONE, 0), "start")]
               for r in m.ranks})
        for t in range(sch.T, 0, -1):
            f = np.array([sch.F[t]], np.int32)
            m.run({r: [m.write(self.u + s * n1 + D, f) for s in range(n)] +
                   [m.launch(FORWARD, hr, (self.w1, self.w2, self.u, self.out, n1, hr, D, n), "forward")]
                   for r in m.ranks})
            e = self._allreduce(n * D)
            if on_step is not None:
                on_step(t, np.stack([e[r].reshape(n, D) for r in m.ranks]).astype(np.int64))
            m.run({r: [m.write(self.out, e[r]),
                       m.launch(DDIM, D, (self.u, self.out, self.bias, n1, D, n, sch.C1[t], sch.C2[t]), "ddim")]
                   for r in m.ranks})
        got = m.read_all(self.u, n * n1)
        return np.stack([got[r].reshape(n, n1)[:, :D] for r in m.ranks]).astype(np.int64)


def check(name: str, step: int, machine: np.ndarray, replay: np.ndarray) -> None:
    """Every rank's words (first axis) must equal the replay's bit for bit (common.ReplayMismatch otherwise)."""
    common.check_equal(name, step, {r: np.asarray(machine[r]).reshape(-1) for r in range(len(machine))},
                       {r: np.asarray(replay[r] if replay.shape == machine.shape else replay).reshape(-1)
                        for r in range(len(machine))})


def check_step(sd: SplitDenoiser, step: int, w1, w2, err, e_replay):
    """After a training step: the error on every rank and every rank's parameters equal the replay's; returns the
    parameters read from the machines."""
    R = sd.ranks
    check("error (AllReduce)", step, err, np.broadcast_to(e_replay, (R,) + e_replay.shape))
    m1, m2 = sd.params()
    check("w1", step, m1, w1)
    check("w2", step, m2, w2)
    return m1, m2


__all__ = ["SplitDenoiser", "HEAP", "check", "check_step", "split"]
