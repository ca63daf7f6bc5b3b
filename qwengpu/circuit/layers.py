"""Building blocks of one compiled Qwen3.5 linear-attention decoder layer, written against named residual groups.

A layer has a Gated DeltaNet mixer (heads) and a SwiGLU MLP (units). The two block kinds used everywhere:

- ``Layer.table``: one GDN head as a keyed table. At positions where a condition holds it writes a row (delta rule,
  beta exactly 1) keyed by a one-hot group and holding one-hot groups, each taken from the current token or one to
  three tokens back through the causal conv; it reads the row a query group names (q is two-hot with a row that is
  never written, so q / sqrt(128) stays dyadic) and moves residual groups to the slots it read. A row never written
  reads as zero, which leaves the destination groups at their defaults. A "copy" of an earlier token's features is a
  table with one row that every token overwrites.
- ``Layer.unit``: one SwiGLU hidden unit as a conjunction: its gate is +32 when every condition holds and <= -96
  otherwise (silu exactly 32 or exactly 0 in bf16), and it moves residual groups.
- ``Layer.threshold``: two SwiGLU units whose difference is a step: 1 when a sum of one-hot groups' values reaches a
  bound, else 0. The gates are STEP * (sum - bound + 1) and STEP * (sum - bound): silu is the identity on the
  multiples of STEP above zero and exactly 0 at zero and below, so silu(g + STEP) - silu(g) is STEP or 0. Steps at
  every bound 1, 2, ... move a group to the sum's value by telescoping, which adds many one-hot numbers in one layer.

Every scale below is chosen so that each value is a small dyadic number and each nonlinearity sits in saturation;
``qwengpu.circuit.exact`` evaluates the result exactly and checks those invariants.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .basis import HOT, CircuitError, Group, Residual

CHANNEL = 32.0          # a live q/k channel after the conv and SiLU (silu(32) = 32 in bf16 and fp32)
V_CHANNEL = 1024.0      # a live value channel: large, so eps = 1e-6 vanishes in the gated norm's fp32 mean
GATE_ON = 32.0          # MLP gate of a unit whose conditions all hold
GATE_STEP = 160.0       # gate weight per condition; one short gives -128, where silu is exactly 0 in bf16 and fp32
BETA_LOGIT = 128.0      # b = +128 -> beta = 1, b = -128 -> beta = 0
DECAY_LOGIT = 128.0     # a = +128 -> the state decays to exactly 0 (reset), a = -128 -> it is kept
Z_GATE = 32.0           # gated-norm gate: silu(32) = 32
STEP = 128.0            # threshold gate per unit of the sum: silu(-128) = 0 and STEP * n is exact in bf16 for n <= 256
MAX_SUM = 255           # largest sum a threshold may see (STEP * (MAX_SUM + 1) is still exact in bf16)
ALLOWED_HOT = (2, 8, 32, 128)   # hot counts whose normalised value sqrt(128 / m) is a power of two


@dataclass(frozen=True)
class Width:
    """The shape of the compiled stack. QWEN35_2B is Qwen3.5-2B's; narrower widths are for fast tests."""
    hidden: int = 2048
    heads: int = 16             # GDN key heads = value heads
    head_dim: int = 128         # key and value head dimension (one memory word per state row)
    intermediate: int = 6144
    conv: int = 4

    @property
    def key_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return 3 * self.key_dim


QWEN35_2B = Width()


@dataclass(frozen=True)
class Source:
    """A residual group read from the token ``tap`` positions back (0 = the current token) through the conv."""
    group: Group | None         # None: the constant ONE
    tap: int = 0

    def __post_init__(self):
        if not 0 <= self.tap <= 3:
            raise CircuitError(f"conv tap {self.tap}: the kernel-4 conv reaches 0..3 tokens back")


@dataclass
class Layer:
    """The sparse weights of one decoder layer, as {(row, col): value} maps in transformers' parameter shapes."""
    index: int
    width: Width
    residual: Residual
    purpose: str = ""
    qkv: dict = field(default_factory=dict)
    conv: dict = field(default_factory=dict)           # channel -> [w(t-3), w(t-2), w(t-1), w(t)]
    z: dict = field(default_factory=dict)
    b: dict = field(default_factory=dict)
    a: dict = field(default_factory=dict)
    out: dict = field(default_factory=dict)
    gate: dict = field(default_factory=dict)
    up: dict = field(default_factory=dict)
    down: dict = field(default_factory=dict)
    a_log: dict = field(default_factory=dict)          # head -> A_log (default -inf: no decay)
    heads: list = field(default_factory=list)          # head index -> name
    units: list = field(default_factory=list)          # unit index -> name

    # -- the mixer -------------------------------------------------------------------------------------------------
    def _head(self, name: str) -> int:
        if len(self.heads) >= self.width.heads:
            raise CircuitError(f"layer {self.index} ({self.purpose}): no GDN head left for {name} "
                               f"(all {self.width.heads} used: {self.heads})")
        self.heads.append(name)
        return len(self.heads) - 1

    def _channel(self, part: str, head: int, i: int) -> int:
        d, kd = self.width.head_dim, self.width.key_dim
        return {"q": 0, "k": kd, "v": 2 * kd}[part] + head * d + i

    def _tap(self, channel: int, tap: int) -> None:
        """The conv of ``channel`` selects the token ``tap`` positions back (one tap per channel)."""
        taps = self.conv.setdefault(channel, [0.0] * self.width.conv)
        if any(t != 0.0 for i, t in enumerate(taps) if i != 3 - tap):
            raise CircuitError(f"layer {self.index}: channel {channel} reads two taps")
        taps[3 - tap] = 1.0

    def _value(self, channel: int, source: Source, slot) -> None:
        """A value channel: V_CHANNEL when ``source`` holds ``slot`` (always, for the constant ONE)."""
        _add(self.qkv, (channel, Residual.ONE if source.group is None else source.group.dim(slot)), V_CHANNEL)
        self._tap(channel, source.tap)

    def _conjunction(self, channel: int, conditions: list[tuple], tap: int) -> None:
        """A q/k channel that is CHANNEL when every (group, slot-or-slots) condition holds at ``tap``, else 0."""
        _conjunction(self.qkv, channel, conditions, GATE_STEP, CHANNEL)
        self._tap(channel, tap)

    def table(self, name: str, *, writes: list[tuple[int, list]] | None, key_tap: int = 0, values: list[Source],
              when: list[tuple], reads: list[tuple[int, list, int]] | None, outputs: dict | None = None,
              reset_when: list[tuple] | None = None) -> int:
        """One GDN head used as a keyed table.

        writes: (row, conditions) pairs: the row whose conditions hold at ``key_tap`` is the one written (none: no
        write); None: always row 0. values: one-hot sources stored in the row, channel after channel. when: the
        conjunction on the current token that enables the write (beta = 1, else 0). reads: (row, conditions, tap)
        triples: the row read (none live: nothing read); None: always row 0. outputs: index into values -> (dst
        group, {source slot: dst slot}): what was read, moved into the residual. reset_when: conjunction that zeroes
        the whole state before this token's write (decay exp(-128) = 0).
        """
        d = self.width.head_dim
        head = self._head(name)
        dummy = d - 1                                       # never written: q = e_row + e_dummy stays dyadic
        for row, conditions in (writes if writes is not None else [(0, [])]):
            if not 0 <= row < dummy:
                raise CircuitError(f"{name}: row {row} is outside 0..{dummy - 1}")
            self._conjunction(self._channel("k", head, row), conditions, key_tap)
        channel = 0
        for source in values:
            for slot in ([None] if source.group is None else source.group.slots):
                self._value(self._channel("v", head, channel), source, slot)
                channel += 1
        hot = len(values)
        target = next((m for m in ALLOWED_HOT if m >= hot), None)
        if target is None or channel + (target - hot) > d:
            raise CircuitError(f"{name}: {hot} value groups in {channel} channels do not fit a {d}-dim head")
        tap = values[0].tap if values else 0
        for _ in range(target - hot):
            self._value(self._channel("v", head, channel), Source(None, tap), None)
            channel += 1
        self._logit(self.b, head, when, BETA_LOGIT)
        if reset_when is not None:
            self.a_log[head] = 0.0
            self._logit(self.a, head, reset_when, DECAY_LOGIT)
        self._conjunction(self._channel("q", head, dummy), [], 0)
        for row, conditions, tap in (reads if reads is not None else [(0, [], 0)]):
            self._conjunction(self._channel("q", head, row), conditions, tap)
        for j in range(d):
            self.z[head * d + j, Residual.ONE] = Z_GATE
        scale = HOT / (Z_GATE * (d / target) ** 0.5)
        channel = 0
        for index, source in enumerate(values):
            if outputs and index in outputs:
                dst, mapping = outputs[index]
                for slot, dst_slot in mapping.items():
                    self._move(self.out, head * d + channel + source.group.slots.index(slot), dst, dst_slot, scale)
            channel += 1 if source.group is None else source.group.size
        return head

    def _logit(self, target: dict, head: int, conditions: list[tuple], magnitude: float) -> None:
        """+magnitude when every condition holds, <= -magnitude otherwise (2 * magnitude per condition)."""
        _conjunction(target, head, conditions, 2 * magnitude, magnitude)

    # -- the MLP ---------------------------------------------------------------------------------------------------
    def unit(self, name: str, conditions: list[tuple], moves: list[tuple]) -> int:
        """One SwiGLU unit: if every (group, slot-or-slots) condition holds, move each (group, to[, from]) group."""
        u = self._new_unit(name)
        _conjunction(self.gate, u, conditions, GATE_STEP, GATE_ON)
        self.up[u, Residual.ONE] = 1.0
        for move in moves:
            group, to = move[0], move[1]
            source = move[2] if len(move) > 2 else group.default
            self._move(self.down, u, group, to, HOT / GATE_ON, source)
        return u

    def threshold(self, name: str, terms: list[tuple[Group, dict]], bound: int, moves: list[tuple]) -> None:
        """Two SwiGLU units that move each (group, to, from) group when sum(weights[slot of group]) >= ``bound``.
        ``terms``: (group, {slot: weight}) with integer weights >= 0 (slots not named weigh 0); the sum must stay
        within MAX_SUM."""
        largest = sum(max(weights.values(), default=0) for _, weights in terms)
        if largest > MAX_SUM or bound < 1:
            raise CircuitError(f"layer {self.index}: threshold {name}: sums up to {largest} (limit {MAX_SUM}), "
                               f"bound {bound} (at least 1)")
        for offset, sign in ((1, 1.0), (0, -1.0)):
            u = self._new_unit(name)
            for group, weights in terms:
                for slot, weight in weights.items():
                    if weight:
                        _add(self.gate, (u, group.dim(slot)), STEP * weight)
            _add(self.gate, (u, Residual.ONE), STEP * (offset - bound))
            self.up[u, Residual.ONE] = 1.0
            for group, to, source in moves:
                self._move(self.down, u, group, to, sign * HOT / STEP, source)

    def _new_unit(self, name: str) -> int:
        if len(self.units) >= self.width.intermediate:
            raise CircuitError(f"layer {self.index} ({self.purpose}): no MLP unit left for {name} "
                               f"({self.width.intermediate} used)")
        self.units.append(name)
        return len(self.units) - 1

    @staticmethod
    def _move(target: dict, column: int, group: Group, to, scale: float, source=None) -> None:
        source = group.default if source is None else source
        if to == source:
            return
        for slot, sign in ((to, 1.0), (source, -1.0)):
            _add(target, (group.dim(slot), column), sign * scale)


def _conjunction(target: dict, row: int, conditions: list[tuple], step: float, on: float) -> None:
    """A weight row that reads ``on`` when every (group, slot-or-slots) condition holds and at most on - step when
    one fails: ``step`` on each condition's slots (a group has one hot slot), on - step * len on the constant ONE."""
    for group, slots in conditions:
        for slot in _slots(slots):
            _add(target, (row, group.dim(slot)), step)
    _add(target, (row, Residual.ONE), on - step * len(conditions))


def _add(target: dict, key: tuple, weight: float) -> None:
    target[key] = target.get(key, 0.0) + weight


def _slots(slots) -> list:
    """A condition's slots: one slot, or any of several (a list, tuple, set or range)."""
    return list(slots) if isinstance(slots, (list, tuple, set, frozenset, range)) else [slots]


def dense(entries: dict, shape: tuple[int, int]):
    """A {(row, col): value} map as a numpy array (for the state dict)."""
    import numpy as np
    out = np.zeros(shape, dtype=np.float32)
    for (r, c), v in entries.items():
        out[r, c] = v
    return out
