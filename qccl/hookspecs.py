"""qccl's plugin hooks (pluggy, project name "qccl"): every hook a plugin may implement, documented in one place.

qccl never imports a plugin. A package registers a module or object implementing some of these hooks through an entry
point group that qccl loads on first use::

    [project.entry-points.qccl_transports]       # transports (qccl.transport)
    qlink = "qccl_transports.qlink.plugin"

    [project.entry-points.qccl_plugins]          # the other kinds, as NCCL has them: tuner, profiler
    tuner = "qccl_plugins.tuner"

or at run time with ``qccl.plugin_manager().register(obj)``. Mark implementations with ``qccl.hookimpl``
(pytest's pattern)::

    import qccl

    class AlwaysRing:
        @qccl.hookimpl
        def qccl_tune(self, request):
            return qccl.Tuning("ring")

    qccl.plugin_manager().register(AlwaysRing())

Three kinds of hooks:

* transports: :func:`qccl_transports`;
* tuner: :func:`qccl_tune` (the first non-None answer wins; pluggy asks the plugin registered last first, so a user's
  tuner overrides the built-in one, which is marked ``trylast``);
* profiler: :func:`qccl_profiler_mask`, :func:`qccl_profiler_start`, :func:`qccl_profiler_stop` (NCCL's
  startEvent / stopEvent), with :class:`ProfilerEvent` describing a group, a collective, a launch or an exchange.

The argument types of the hooks live here too, so the contract is one module.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pluggy

hookspec = pluggy.HookspecMarker("qccl")
hookimpl = pluggy.HookimplMarker("qccl")

# Profiler event kinds, as bits of the mask a profiler asks for (NCCL's ncclProfileGroup, Coll, KernelCh, ProxyOp).
GROUP, COLLECTIVE, LAUNCH, EXCHANGE = 1, 2, 4, 8
EVENT_KINDS = {GROUP: "group", COLLECTIVE: "collective", LAUNCH: "launch", EXCHANGE: "exchange"}


@dataclass
class ProfilerEvent:
    """One profiled span. Start fields are set before :func:`qccl_profiler_start`; the counters and ``end`` before
    :func:`qccl_profiler_stop` (the same object is passed to both, so a profiler may keep state on it in ``user``).

    kind: "group" (one epoch: the calls of a group, or a single call), "collective" (one call of one rank; sends and
    receives appear as "send" / "recv"), "launch" (one kernel launch on one rank), "exchange" (the fabric exchanges of
    one rank during an epoch: in one process the in-memory lockstep, across processes the gloo all_gathers that carry
    every window's packets; emitted by each process for its own ranks, so a launch under ``python -m qccl.launch``
    gives one per process and epoch; ``op_count`` is the rank's first call in the epoch, ``call`` its calls joined
    by "+", ``note`` the fabric, and the counters ``packets_sent``, ``packets_received``, ``exchanges`` say what
    crossed the link). Counters are what the rank's device did during the span: ``tokens_written`` (the
    model's tokens: the cost), ``tokens_fed`` (prefill), ``records``, ``launches``; ``packets_sent`` /
    ``packets_received`` / ``exchanges`` for the links. A collective's counters are its rank's share of the epoch
    when the rank made only that call in it; with several calls of one rank in a group they are None (the group
    event has the total). Times are ``time.perf_counter()`` seconds.
    """
    kind: str
    comm: str                       # the communicator (its world), as a short hex id
    rank: int | None = None         # None for a group event (it covers every rank of this process in the epoch)
    nranks: int = 0
    ranks: tuple[int, ...] = ()     # the ranks a group event covers
    op_count: int = 0               # NCCL's opCount: calls of this rank on this communicator so far
    call: str = ""                  # allreduce, broadcast, ..., send, recv; the kernel for a launch
    count: int = 0
    dtype: str = ""
    op: str = ""
    root: int | None = None         # root of broadcast / reduce, peer of send / recv
    algo: str = ""                  # ring, multicast; "ring:4" when a tuner chose 4-word chunks
    note: str = ""                  # a launch's step (e.g. "allreduce recvReduceSend(2)")
    threads: int = 0
    start: float = 0.0
    end: float = 0.0
    tokens_written: int | None = None
    tokens_fed: int | None = None
    records: int | None = None
    launches: int | None = None
    packets_sent: int | None = None
    packets_received: int | None = None
    exchanges: int | None = None
    user: dict = field(default_factory=dict)

    @property
    def wall(self) -> float:
        """Seconds between start and stop."""
        return self.end - self.start


@dataclass(frozen=True)
class TuneRequest:
    """What a tuner is asked for one call: the collective, its size and the communicator's shape.

    ``count`` is NCCL's count for the call (allgather: sendcount; reduce_scatter: recvcount), ``algos`` the
    algorithms this collective has, ``config`` the communicator's config (fifo_slots, slot_words, window_words...).
    The answer must be the same on every rank (a tuner sees only values that every rank shares).
    ``block_words`` is what the schedule moves per rank's block, in 32-bit words (the copy collectives carry any
    dtype as padded words: 3 int64 are 6 words, 3 int8 one word); ``chunks`` gives, per algorithm, the most words
    per chunk the communicator's heap allows (a :class:`Tuning`'s ``chunk`` may be 1..that)."""
    kind: str
    nranks: int
    count: int
    dtype: str
    op: str | None
    root: int | None
    algos: tuple[str, ...]
    config: dict
    block_words: int | None = None
    chunks: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Words per rank's block (``block_words``, or ``count`` when it was not given)."""
        return self.count if self.block_words is None else self.block_words


@dataclass(frozen=True)
class Tuning:
    """A tuner's choice: ``algo`` (one of the request's ``algos``), the words per chunk the call runs with
    (``chunk``: 1 up to ``request.chunks[algo]``, the most the heap allows; None: that most) and, optionally, its
    predicted cost in model-written tokens per rank (``tokens``). Fewer words per chunk mean more ring steps or
    multicast rounds; the result is the same. A chunk outside 1..most is InvalidArgument, before anything moves."""
    algo: str
    chunk: int | None = None
    tokens: int | None = None
    source: str = ""


@hookspec
def qccl_transports() -> list:
    """Return the :class:`qccl.transport.Transport` objects this plugin provides (each has a unique ``name``).

    A transport declares the dtypes it moves (``dtypes``) and creates the :class:`qccl.transport.World` of a
    communicator (``create_world(nranks, ranks, uid, config)``)."""


@hookspec(firstresult=True)
def qccl_tune(request: TuneRequest) -> Tuning | None:
    """Choose the algorithm and the chunking of a call made with ``algo="auto"`` (the default): return a
    :class:`Tuning`, or None to let the next tuner answer. Asked for every collective that has a schedule with
    chunks (allreduce, allgather, broadcast: ring or multicast; reduce, reduce_scatter: ring), on every rank with
    the same request; the first non-None answer is used. A call that names its algorithm is not tuned."""


@hookspec
def qccl_profiler_mask() -> int:
    """The event kinds this profiler wants now, as bits (GROUP | COLLECTIVE | LAUNCH | EXCHANGE); 0 for none.
    Asked once per epoch, so a profiler may switch itself on and off (e.g. from an environment variable)."""


@hookspec
def qccl_profiler_start(event: ProfilerEvent) -> None:
    """A span begins (only kinds some profiler asked for are emitted; filter on ``event.kind``)."""


@hookspec
def qccl_profiler_stop(event: ProfilerEvent) -> None:
    """The span ``event`` ended: its counters and ``end`` are set."""
