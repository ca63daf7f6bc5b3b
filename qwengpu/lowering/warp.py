"""Warp-level instructions as machine ops: shuffles, votes, activemask, matches, warp reductions and the lane-dependent
special registers (mixed into ``emit.Emitter``).

The machine has no path between the lanes of a warp except memory, and one warp runs at a time, so a value crosses
lanes through the warp's exchange words: ``EXCHANGE``, LANES words at the top of memory that ``shared_layout``
reserves beside the __shared__ arrays of a kernel that uses these instructions (every warp reuses them; a warp's
store and the load that follows it are consecutive records of one warp's run, with no barrier between).

- ``shfl.sync.{up,down,bfly,idx}.b32 d|p, a, b, c, membermask``: every lane stores a in word ``lane``, then loads the
  word of its source lane j, computed as PTX defines it from b, c and the lane (``maxLane``, ``minLane``). The warp
  is 4 lanes (``warpSize`` is 4, so ``for (o = warpSize / 2; o > 0; o >>= 1)`` reductions are exact). A source lane
  known at launch that the segment has but the machine's warp does not (j > 3 at a width of 32: an offset of 16
  unrolled from code written for 32 lanes) is refused, since a GPU would read another thread there; one the machine
  computes, or one past the block's last thread in a last, partial warp, is out of range like one outside the
  segment, so d = a and p = 0. The store is made by every lane, including lanes
  inactive here (their registers hold a value), so a lane never reads a word no lane wrote in this shuffle.
- ``vote.sync.{ballot,any,all,uni}``, ``activemask``: word 0 (and 1 for uni) is set, then the active lanes whose
  predicate holds change it (ballot: an atomic or of 1 << lane), then every active lane loads it.
- ``redux.sync.{add,min,max,and,or,xor}``: word 0 holds the op's identity, each active lane applies the op to it
  atomically (the machine's atomic block, lanes in order), then every active lane loads it.
- ``match.any.sync`` / ``match.all.sync.b32``: the active lanes' mask (as activemask), then every active lane stores
  its value in word ``lane`` and compares the four words with its own (a lane not active is left out by the mask).
- ``membermask`` is not checked: the active lanes take part, as on a GPU where every active lane names itself.

Values that depend only on the thread index (the source lane of a shuffle whose b and c are known at launch, 1 <<
lane, the lane masks) are tabulated at lowering time and computed by the cheapest sequence found (``thread_table``):
a known value, tid + k, one ALU op of (tid + k1, k2) plus k3, the same of the lane, or a sum of steps.
"""
from __future__ import annotations

from ..isa import LANES, OPS, DIVISIONS, alu
from .mop import MOp
from .predicates import FALSE, TRUE, Predicate
from .transfer import sources
from .values import MASK32, THREAD_INDEX, Const, signed, unsupported, width

EXCHANGE = "%exchange"      # the exchange words' symbol: not a PTX identifier, so no __shared__ array takes it

SHUFFLES = ("up", "down", "bfly", "idx")
# The one-op candidates of thread_table: (op, k1, k2) with A = tid + k1 (or the lane + k1) and B = k2, either order.
_SEARCH_OPS = [name for name in OPS if name not in ("a", "b") + DIVISIONS]
_SEARCH_K1 = range(-LANES, LANES + 1)
_SEARCH_K2 = tuple(range(0, 9)) + (15, 16, 31, 32, MASK32)
# The identity of each warp reduction, and the machine op that applies it (signed / unsigned min and max).
REDUCTIONS = {("add", False): (0, "add"), ("and", False): (MASK32, "and"), ("or", False): (0, "or"),
              ("xor", False): (0, "xor"), ("min", False): (MASK32, "min_u"), ("min", True): (0x7FFFFFFF, "min_s"),
              ("max", False): (0, "max_u"), ("max", True): (0x80000000, "max_s")}


def shuffle_source(mode: str, lane: int, b: int, c: int) -> tuple[int, bool]:
    """PTX's shfl: the source lane j (5-bit lane arithmetic) and whether it is in the segment (p)."""
    bval, cval, segmask = b & 31, c & 31, (c >> 8) & 31
    max_lane = (lane & segmask) | (cval & ~segmask & 31)
    min_lane = lane & segmask
    if mode == "up":
        j = lane - bval
        return j, j >= max_lane
    j = {"down": lane + bval, "bfly": lane ^ bval, "idx": min_lane | (bval & ~segmask & 31)}[mode]
    return j, j <= max_lane


class WarpOps:
    """``shfl`` / ``vote`` / ``activemask`` / ``redux`` and the lane-dependent special registers. Uses the emitter's
    ``src``, ``op``, ``emit``, ``temp`` and ``context``."""

    # -- values that depend only on the thread index ---------------------------------------------------------------
    def thread_table(self, table: list[int], lane: tuple | None = None) -> tuple:
        """A machine operand holding ``table[tid]`` on every thread of the launch (computed under every lane);
        ``lane``: an operand already holding tid % 4 in this instruction, else one is computed if needed."""
        table = [v & MASK32 for v in table]
        if len(set(table)) == 1:
            return (None, table[0])
        found = self._one_op(("tid", 0), list(range(len(table))), table)
        if found is not None:
            return found
        lane = lane or self._lane()
        warp0 = table[:LANES]
        if all(table[t] == warp0[t % LANES] for t in range(len(table))):
            return self._lane_function(lane, warp0)
        # The last warp is partial and differs (a source lane it does not have): its own function of the lane,
        # taken where tid is in it.
        first = len(table) - len(table) % LANES
        last = table[first:] + warp0[len(table) - first:]
        full = self._lane_function(lane, warp0)
        other = self._lane_function(lane, last)
        in_last = self._emit_true("ge_u", ("tid", 0), (None, first))
        moved = self._emit_true("mul", (self._emit_true("sub", other, full), 0), (in_last, 0))
        return (moved, full[1]) if full[0] is None else (self._emit_true("add", full, (moved, 0)), 0)

    def _lane_function(self, lane: tuple, values: list[int]) -> tuple:
        """values[lane] for a lane operand holding 0..len(values)-1."""
        if len(set(values)) == 1:
            return (None, values[0])
        found = self._one_op(lane, list(range(len(values))), values)
        if found is not None:
            return found
        acc = (None, values[0])
        for i in range(1, len(values)):             # values[0] + sum of (values[i] - values[i-1]) * (lane >= i)
            step = (values[i] - values[i - 1]) & MASK32
            if step:
                reached = self._emit_true("ge_u", lane, (None, i))
                part = self._emit_true("mul", (reached, 0), (None, step))
                acc = (self._emit_true("add", acc, (part, 0)), 0) if acc[0] is not None else (part, acc[1])
        return acc

    def _one_op(self, source: tuple, xs: list[int], ys: list[int]) -> tuple | None:
        """An operand for ys[i] given ``source`` holding xs[i]: source + k, or op(source + k1, k2) + k3 in either
        operand order, one ALU op (the first found; candidates fail at their first mismatch)."""
        k = (ys[0] - xs[0]) & MASK32
        if all((y - x) & MASK32 == k for x, y in zip(xs, ys)):
            return (source[0], (source[1] + k) & MASK32)
        for name in _SEARCH_OPS:
            for swapped in (False, True):
                for k1 in _SEARCH_K1:
                    for k2 in _SEARCH_K2:
                        def f(x):
                            return alu(name, k2, x + k1) if swapped else alu(name, x + k1, k2)
                        k3 = (ys[0] - f(xs[0])) & MASK32
                        if all((f(x) + k3) & MASK32 == y for x, y in zip(xs[1:], ys[1:])):
                            a, b = (source[0], (source[1] + k1) & MASK32), (None, k2 & MASK32)
                            result = self._emit_true(name, b, a) if swapped else self._emit_true(name, a, b)
                            return (result, k3)
        return None

    def _lane(self) -> tuple:
        """An operand holding the lane, tid % 4 (tid itself when the block is one warp)."""
        if self.context.threads <= LANES:
            return ("tid", 0)
        return (self._emit_true("and", ("tid", 0), (None, LANES - 1)), 0)

    def _thread_index(self, name: str) -> tuple:
        """threadIdx.x / .y / .z of a block of more than one dimension from the linear tid (x fastest): a mask or
        shift for a power of two, else the machine's division by an immediate (which the circuit and the model
        take for 1..8, and refuse otherwise before the launch)."""
        nx, ny, _ = self.context.block_shape

        def divide(x: tuple, n: int) -> tuple:
            if n == 1:
                return x
            if n & (n - 1) == 0:
                return (self._emit_true("shr_u", x, (None, n.bit_length() - 1)), 0)
            return (self._emit_true("div_u", x, (None, n)), 0)

        def modulo(x: tuple, n: int) -> tuple:
            if n & (n - 1) == 0:
                return (self._emit_true("and", x, (None, n - 1)), 0)
            return (self._emit_true("rem_u", x, (None, n)), 0)
        tid = ("tid", 0)
        if name == "%tid.x":
            return modulo(tid, nx)
        if name == "%tid.y":
            return modulo(divide(tid, nx), ny)
        return divide(divide(tid, nx), ny)

    def _emit_true(self, name: str, a: tuple, b: tuple) -> str:
        """dst = name(a, b) on every lane (a value of the thread index, valid whatever the predicate)."""
        dst = self.temp()
        self.emit(MOp(name, a, b, dst), TRUE)
        return dst

    def special(self, name: str) -> tuple:
        """A lane-dependent special register (values.LANE_SPECIAL), or a thread index of a block of more than one
        dimension (values.THREAD_INDEX), as a machine operand."""
        if name in THREAD_INDEX:
            return self._thread_index(name)
        lanes = [t % LANES for t in range(self.context.threads)]
        table = {"%laneid": lanes, "%warpid": [t // LANES for t in range(self.context.threads)],
                 "%lanemask_eq": [1 << l for l in lanes], "%lanemask_le": [(2 << l) - 1 for l in lanes],
                 "%lanemask_lt": [(1 << l) - 1 for l in lanes], "%lanemask_ge": [MASK32 << l for l in lanes],
                 "%lanemask_gt": [MASK32 << (l + 1) for l in lanes]}[name]
        return self.thread_table(table)

    # -- the instructions ------------------------------------------------------------------------------------------
    def _exchange(self) -> int:
        return self.context.symbols[EXCHANGE] // 4

    def _op_shfl(self, read, dst: str) -> None:
        inst = self.inst
        mode = next((m for m in inst.modifiers if m in SHUFFLES), None)
        if mode is None or width(inst) != 32 or len(sources(inst)) < 3:
            raise unsupported(inst, "shuffles are shfl.sync.up / down / bfly / idx of 32-bit words")
        ops = sources(inst)
        b, c = read(ops[1]), read(ops[2])
        if not isinstance(c, Const):
            raise unsupported(inst, "a shuffle's c operand (its width) must be known at launch")
        threads, word = self.context.threads, self._exchange()
        lane = self._lane()
        value = self.src(read, 0)
        self.emit(MOp("a", value, store=(lane[0], word)), TRUE)      # every lane offers its value
        if isinstance(b, Const):
            beyond = sorted({j for t in range(threads) for j, p in [shuffle_source(mode, t % LANES, b.value, c.value)]
                             if p and j >= LANES})
            if beyond:
                # A GPU's warp has these lanes and reads another thread's value there; the machine's would give each
                # lane its own: code written for 32 lanes (an unrolled offset of 16) would run, silently different.
                raise unsupported(inst, f"the shuffle reads lane {beyond[0]} of its segment, which a warp of the "
                                        f"machine ({LANES} lanes: warpSize) does not have, where a GPU's warp of 32 "
                                        f"reads another thread's value; write offsets and lanes from warpSize ("
                                        f"for (int o = warpSize / 2; o > 0; o /= 2))")
            rows = []
            for t in range(threads):
                j, p = shuffle_source(mode, t % LANES, b.value, c.value)
                valid = p and 0 <= j < LANES and t - t % LANES + j < threads
                rows.append((j if valid else t % LANES, int(valid)))
            source = self.thread_table([j for j, _ in rows], lane)
            in_range = (lambda: self.thread_table([p for _, p in rows], lane))
        else:
            source, valid = self._dynamic_source(mode, lane, self.src(read, 1), c.value)
            in_range = (lambda: (valid, 0))
        self.op("a", (source[0], (source[1] + word) & MASK32), dst=dst, load=True)
        if inst.pair is not None and inst.pair.name in self.dynamic:
            self.op("a", in_range(), dst=inst.pair.name)

    def _dynamic_source(self, mode: str, lane: tuple, b: tuple, c: int) -> tuple[tuple, str]:
        """The source lane of a shuffle whose b the machine computes: PTX's formula, then out of range -> own lane.
        Returns (source lane operand, register holding p). At the full width (c = 0x1f, or 0 for up: every
        reduction loop over ``warpSize``) the segment's bound lies outside the warp's 4 lanes, so p is the source
        lane's existence alone and costs nothing more."""
        threads = self.context.threads
        lanes = [t % LANES for t in range(threads)]
        segmask, cval = (c >> 8) & 31, c & 31
        bounds = [(l & segmask) | (cval & ~segmask & 31) for l in lanes]
        bval = self.op("and", b, (None, 31))
        if mode == "idx":
            high = self.op("and", (bval, 0), (None, ~segmask & 31))
            j = self.op("or", (high, 0), self.thread_table([l & segmask for l in lanes], lane))
        else:
            j = self.op({"up": "sub", "down": "add", "bfly": "xor"}[mode], lane, (bval, 0))
        valid = self.op("lt_u", (j, 0), (None, LANES))        # a lane of the warp (j < 0 wraps to a large word)
        # the offset to the source lane (up and down: b itself)
        offset = (None, 0) if mode in ("up", "down") else (self.op("sub", (j, 0), lane), 0)
        if threads % LANES:             # the last warp is partial: the source's thread must exist
            reached = self.op({"up": "sub", "down": "add"}.get(mode, "add"), ("tid", 0),
                              (bval, 0) if mode in ("up", "down") else offset)
            valid = self.op("and", (valid, 0), (self.op("lt_u", (reached, 0), (None, threads)), 0))
        inside = min(bounds) >= LANES - 1 if mode != "up" else max(bounds) <= 0
        if not inside:
            in_segment = self.op("ge_s" if mode == "up" else "le_s", (j, 0), self.thread_table(bounds, lane))
            valid = self.op("and", (in_segment, 0), (valid, 0))
        if mode in ("up", "down"):
            moved = self.op("mul", (bval, 0), (valid, 0))
            return (self.op("sub" if mode == "up" else "add", lane, (moved, 0)), 0), valid
        moved = self.op("mul", offset, (valid, 0))
        return (self.op("add", lane, (moved, 0)), 0), valid

    def _vote_word(self, start: int, lanes: Predicate, change: tuple, dst: str | None, offset: int = 0) -> None:
        """Exchange word ``offset`` := start on the active lanes; then on ``lanes`` ``change``: ("store", value) or
        (op, B) applied atomically; then dst := the word on every active lane (None: no load)."""
        where = (None, self._exchange() + offset)
        self.emit(MOp("a", (None, start), store=where))
        name, value = change
        if not lanes.never:
            self.emit(MOp("a", value, store=where) if name == "store" else
                      MOp(name, where, value, load=True, store=where, atomic=True), lanes)
        if dst is not None:
            self.op("a", where, dst=dst, load=True)

    def _lanes_where(self, read, operand) -> Predicate:
        """The active lanes where a vote's predicate operand holds."""
        value = read(operand)
        if isinstance(value, Const):
            return self.pred if value.value & 1 else FALSE
        return self.pred & Predicate.atom(operand.name)

    def _lane_bits(self) -> tuple:
        return self.thread_table([1 << (t % LANES) for t in range(self.context.threads)])

    def _op_vote(self, read, dst: str) -> None:
        inst = self.inst
        kind = next((m for m in inst.modifiers if m in ("ballot", "any", "all", "uni")), None)
        if kind is None or not sources(inst):
            raise unsupported(inst, "votes are vote.sync.ballot / any / all / uni")
        holds = self._lanes_where(read, sources(inst)[0])
        fails = self.pred & ~holds
        if kind == "ballot":
            self._vote_word(0, holds, ("or", self._lane_bits()), dst)
        elif kind == "any":
            self._vote_word(0, holds, ("store", (None, 1)), dst)
        elif kind == "all":
            self._vote_word(1, fails, ("store", (None, 0)), dst)
        else:                       # uni: not (some lane holds and some lane fails)
            word = self._exchange()
            self._vote_word(0, holds, ("store", (None, 1)), None)
            self._vote_word(0, fails, ("store", (None, 1)), None, offset=1)
            some = self.op("a", (None, word), load=True)
            both = self.op("and", (None, word + 1), (some, 0), load=True)
            self.op("eq", (both, 0), (None, 0), dst=dst)

    def _op_activemask(self, read, dst: str) -> None:
        self._vote_word(0, self.pred, ("or", self._lane_bits()), dst)

    def _op_match(self, read, dst: str) -> None:
        """``__match_any_sync`` / ``__match_all_sync``: the active lanes (activemask's word first, into a register),
        then every active lane stores its value in its exchange word and compares the warp's words with its own.
        any: the active lanes whose value equals this lane's; all: the active lanes where every one holds the same
        value, else 0, and p (``d|p``) whether they do."""
        inst = self.inst
        kind = next((m for m in inst.modifiers if m in ("any", "all")), None)
        if kind is None or width(inst) != 32 or len(sources(inst)) != 2 or (kind == "any") != (inst.pair is None):
            raise unsupported(inst, "warp matches are match.any.sync.b32 d, a and match.all.sync.b32 d|p, a (32-bit "
                                    "values)")
        active = self.temp()
        self._vote_word(0, self.pred, ("or", self._lane_bits()), active)
        word, lane, value = self._exchange(), self._lane(), self.src(read, 0)
        self.emit(MOp("a", value, store=(lane[0], (lane[1] + word) & MASK32)), self.pred)
        same = None
        for j in range(LANES):
            equal = (self.op("eq", (None, word + j), value, load=True), 0)
            bit = (self.op("shl", equal, (None, j)), 0) if j else equal
            same = bit if same is None else (self.op("or", same, bit), 0)
        if kind == "any":
            self.op("and", same, (active, 0), dst=dst)
            return
        everyone = self.op("eq", (self.op("and", same, (active, 0)), 0), (active, 0))
        self.op("mul", (active, 0), (everyone, 0), dst=dst)
        if inst.pair.name in self.dynamic:
            self.op("a", (everyone, 0), dst=inst.pair.name)

    def _op_redux(self, read, dst: str) -> None:
        inst = self.inst
        kind = next((m for m in inst.modifiers if m in ("add", "min", "max", "and", "or", "xor")), None)
        key = (kind, signed(inst) and kind in ("min", "max"))
        if key not in REDUCTIONS or width(inst) != 32:
            raise unsupported(inst, "warp reductions are redux.sync.add / min / max / and / or / xor of 32-bit words")
        identity, op = REDUCTIONS[key]
        self._vote_word(identity, self.pred, (op, self.src(read, 0)), dst)
