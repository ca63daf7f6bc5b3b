"""Lowered programs per argument shape, not per launch.

The lowering binds a launch's arguments as constants, so every mode test folds away and a launch runs only the
blocks it needs. Launches whose arguments change every time (qccl's flag counters: a training step's collectives
count up) would each lower again, which was most of a training step's time. A ``Specializer`` lowers once with the
arguments *traced*: each argument is a ``Traced`` int that behaves as its value and remembers how every value derived
from it was computed, and every decision the lowering takes on one (a compare, a truth test, a hash, a conversion
to a plain int) is recorded with its outcome. The program that comes out holds traced immediates where argument
values flowed into it. Another launch reuses that program when every recorded decision comes out the same for its
arguments: the lowering would then have run the same way, so its program is the same but for those immediates,
which are recomputed from the new arguments. ``prim`` with new counters decides nothing new (``swait > 0`` is still
true), so one lowering serves every step of a run.

Why this is exact: the lowering is Python; Python only branches on an int through the methods ``Traced`` records
(``__bool__``, the comparisons, ``__hash__``, ``__index__``, ``__int__``...), so equal outcomes mean the same path
and the same operations, and arithmetic on traced values is replayed exactly by ``evaluate``. A value the lowering
only formats (a listing line) is not a decision; the listing is rebuilt for each program.

    >>> from qwengpu.ptx import parse
    >>> from qwengpu.toolchain import ptx_for
    >>> spec = Specializer(parse(ptx_for("qccl/kernels/prim.cu")).kernels["prim"])    # doctest: +SKIP
    >>> spec.program(args, threads=4)                                                   # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import operator
import threading
from collections import OrderedDict

from .lowering import Program, lower

_state = threading.local()      # the decisions of the lowering running in this thread


def _record(kind: str, expr, other, outcome):
    decisions = getattr(_state, "decisions", None)
    if decisions is not None:
        decisions.append((kind, expr, other, outcome))
    return outcome


def _expr(x):
    return x.expr if isinstance(x, Traced) else x


_ARITHMETIC = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
    "mod": operator.mod, "lshift": operator.lshift, "rshift": operator.rshift, "and": operator.and_,
    "or": operator.or_, "xor": operator.xor, "pow": operator.pow,
}
_UNARY = {"neg": operator.neg, "pos": operator.pos, "invert": operator.invert, "abs": operator.abs}
_DECISIONS = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "bool": lambda a, _: bool(a), "hash": lambda a, _: hash(a), "int": lambda a, _: int(a),
    "float": lambda a, _: float(a), "bit_length": lambda a, _: a.bit_length(), "bit_count": lambda a, _: a.bit_count(),
    "truediv": operator.truediv, "rtruediv": lambda a, b: b / a, "divmod": divmod, "rdivmod": lambda a, b: divmod(b, a),
}


def _postorder(expr, done=()):
    """The operation nodes of a traced expression, each once (by identity), operands before the nodes using them.
    Iterative and shared-aware: a float op's chain of integer ops on an argument is hundreds deep and shares its
    subexpressions, so a recursive walk overflows the stack or takes exponential time. Nodes whose id is in
    ``done`` are left out with everything below them."""
    order, seen, stack = [], set(), [(expr, False)]
    while stack:
        node, ready = stack.pop()
        if not isinstance(node, tuple) or node[0] == "arg" or (not ready and (id(node) in seen or id(node) in done)):
            continue
        if ready:
            order.append(node)
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((operand, False) for operand in reversed(node[1:]))
    return order


def evaluate(expr, args):
    """The value of a traced expression for these arguments (plain ints)."""
    values: dict[int, int] = {}

    def value(x):
        if not isinstance(x, tuple):
            return x
        return args[x[1]] if x[0] == "arg" else values[id(x)]
    for node in _postorder(expr):
        kind = node[0]
        if kind in _UNARY:
            values[id(node)] = _UNARY[kind](value(node[1]))
        else:
            values[id(node)] = _ARITHMETIC[kind](value(node[1]), value(node[2]))
    return value(expr)


def _binary(name, reflected=False):
    """``self <op> other`` (or, reflected, ``other <op> self``) as a traced value."""
    def method(self, other):
        if not isinstance(other, int):
            return NotImplemented
        value = getattr(int, f"__r{name}__" if reflected else f"__{name}__")(self, other)
        if value is NotImplemented:
            return value
        operands = (_expr(other), self.expr) if reflected else (self.expr, _expr(other))
        return Traced(value, (name,) + operands)
    return method


def _unary(name):
    def method(self):
        return Traced(getattr(int, f"__{name}__")(self), (name, self.expr))
    return method


def _decision(name, base):
    def method(self, *other):
        outcome = base(self, *other)
        if outcome is NotImplemented:       # Python asks the other operand next; nothing was decided on our value
            return outcome
        return _record(name, self.expr, tuple(_expr(o) for o in other), outcome)
    return method


class Traced(int):
    """An int that remembers how it was computed from the launch arguments (``expr``) and records the decisions
    taken on it."""

    def __new__(cls, value: int, expr):
        self = int.__new__(cls, value)
        self.expr = expr
        return self

    def __repr__(self):
        return int.__repr__(self)

    __str__ = __repr__

    def __format__(self, spec):
        return int.__format__(int.__int__(self), spec)

    for _name in _ARITHMETIC:
        locals()[f"__{_name}__"] = _binary(_name)
        locals()[f"__r{_name}__"] = _binary(_name, reflected=True)
    for _name in _UNARY:
        locals()[f"__{_name}__"] = _unary(_name)
    for _name in ("eq", "ne", "lt", "le", "gt", "ge", "truediv", "rtruediv", "divmod", "rdivmod"):
        locals()[f"__{_name}__"] = _decision(_name, getattr(int, f"__{_name}__"))
    __bool__ = _decision("bool", int.__bool__)
    __hash__ = _decision("hash", int.__hash__)
    __index__ = _decision("int", int.__index__)
    __int__ = _decision("int", int.__int__)
    __float__ = _decision("float", int.__float__)
    __trunc__ = __floor__ = __ceil__ = __round__ = _decision("int", lambda self, *_: int.__int__(self))
    bit_length = _decision("bit_length", int.bit_length)
    bit_count = _decision("bit_count", int.bit_count)

    def to_bytes(self, *args, **kwargs):
        return int.to_bytes(_record("int", self.expr, (), int.__int__(self)), *args, **kwargs)

    @property
    def real(self):
        return _record("int", self.expr, (), int.__int__(self))

    numerator = real

    def __reduce__(self):           # a copy is a plain int: the trace stays with the lowering
        return (int, (int.__int__(self),))

    del _name


_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "lshift": "<<", "rshift": ">>",
            "and": "&", "or": "|", "xor": "^", "pow": "**", "neg": "-", "pos": "+", "invert": "~",
            "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _identity(expr):
    """A key for a traced expression that costs nothing to hash: the tuple's identity (a plain value is itself)."""
    return ("id", id(expr)) if isinstance(expr, tuple) else expr


def _test(decisions):
    """One function that tells whether every decision comes out as recorded for arguments ``a``: the checks are
    generated as Python source once per template (a launch runs hundreds of them). Each traced value is one
    statement (``t7 = t3 + a[1]``) written just before the first check that needs it, so a long chain of arithmetic
    (a float's integer ops on an argument) nests no deeper than one operator, shared values are computed once, and
    a check is not reached once an earlier one has failed (as the lowering, which took that branch, never was)."""
    lines: list[str] = []
    names: dict[int, str] = {}

    def name(expr) -> str:
        if not isinstance(expr, tuple):
            return repr(expr)
        if expr[0] == "arg":
            return f"a[{expr[1]}]"
        for node in _postorder(expr, names):
            kind = node[0]
            if kind == "abs":
                value = f"abs({name(node[1])})"
            elif kind in _UNARY:
                value = f"{_SYMBOLS[kind]}{name(node[1])}"
            else:
                value = f"{name(node[1])} {_SYMBOLS[kind]} {name(node[2])}"
            names[id(node)] = f"t{len(names)}"
            lines.append(f"    {names[id(node)]} = {value}")
        return names[id(expr)]

    for kind, expr, others, outcome in decisions:
        x = name(expr)
        if kind in _SYMBOLS:
            test = f"({x} {_SYMBOLS[kind]} {name(others[0])}) == {outcome!r}"
        else:
            test = f"D[{kind!r}]({x}, {name(others[0]) if others else None}) == {outcome!r}"
        lines.append(f"    if not ({test}):\n        return False")
    namespace = {"D": _DECISIONS, "nan": float("nan"), "inf": float("inf")}
    exec("def fits(a):\n" + "\n".join(lines + ["    return True"]), namespace)     # noqa: S102 (source built here)
    return namespace["fits"]


def _map(x, leaf):
    """A program value with each traced int replaced by ``leaf(it)`` (tuples, lists, sets and frozen dataclasses
    rebuilt; a dataclass with nothing to replace is kept as it is)."""
    if isinstance(x, Traced):
        return leaf(x)
    if isinstance(x, tuple):
        return tuple(_map(v, leaf) for v in x)
    if isinstance(x, (list, frozenset, set)):
        return type(x)(_map(v, leaf) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changes = {f.name: _map(getattr(x, f.name), leaf) for f in dataclasses.fields(x)}
        return dataclasses.replace(x, **changes) if any(
            changes[k] is not getattr(x, k) for k in changes) else x
    return x


def _plain(x):
    """A program value with every Traced int made plain."""
    return _map(x, int.__int__)


def _fill(x, args):
    """A program value with each traced int replaced by its expression's value for ``args``."""
    return _map(x, lambda t: evaluate(t.expr, args))


def _holes(x):
    """Does this program value hold a traced int?"""
    if isinstance(x, Traced):
        return True
    if isinstance(x, (tuple, list, frozenset, set)):
        return any(_holes(v) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return any(_holes(getattr(x, f.name)) for f in dataclasses.fields(x))
    return False


@dataclasses.dataclass
class Template:
    """One traced lowering: the decisions it took, its program with traced immediates, and that program for the
    arguments it was lowered with."""
    decisions: list
    traced: Program
    holes: list                  # indices of the blocks that hold traced immediates
    plain: list                  # the blocks without traces (those without holes are every launch's)

    def __post_init__(self):
        self.fits = _test(self.decisions)
        # what each hole block's listing line says before and after the block itself (the same for every launch)
        self.heads, self.tails = {}, {}
        for i in self.holes:
            line, block = self.traced.listing[i], str(self.plain[i])
            self.heads[i] = line[:line.index(block)]
            self.tails[i] = line[len(self.heads[i]) + len(block):]

    def program(self, args) -> Program:
        blocks = list(self.plain)
        listing = list(self.traced.listing)
        for i in self.holes:
            blocks[i] = _fill(self.traced.blocks[i], args)
            listing[i] = self.heads[i] + str(blocks[i]) + self.tails[i]
        return dataclasses.replace(self.traced, blocks=blocks, listing=listing,
                                   reserved=_fill(self.traced.reserved, args),
                                   cleared=_fill(self.traced.cleared, args),
                                   registers=int(_fill(self.traced.registers, args)))


class Specializer:
    """The lowered programs of one PTX kernel, one traced lowering per launch shape (thread count, grid, shared
    bytes, and the decisions its arguments lead to), at most ``limit`` of them (least recently used dropped)."""

    def __init__(self, kernel, limit: int = 64, variables: dict[str, int] | None = None):
        self.kernel = kernel
        self.limit = limit
        self.variables = variables or {}        # __device__ / __constant__ variable -> its word (fixed at load)
        self.templates: OrderedDict = OrderedDict()     # (threads, block, blocks, shared, n) -> [Template]
        self.lowered = 0                                # traced lowerings run (for tests and benchmarks)

    def __len__(self) -> int:
        return sum(len(v) for v in self.templates.values())

    def program(self, args, threads: int, block: int = 0, blocks: int = 1, shared: int = 0,
                block_shape: tuple | None = None, grid_shape: tuple | None = None) -> Program:
        args = tuple(int(a) for a in args)
        shape = (threads, block, blocks, shared, len(args), block_shape, grid_shape)
        candidates = self.templates.get(shape, [])
        for i, template in enumerate(candidates):
            if template.fits(args):
                self.templates.move_to_end(shape)
                candidates.insert(0, candidates.pop(i))         # the next launch most likely fits it again
                return template.program(args)
        template = self._trace(args, threads, block, blocks, shared, block_shape, grid_shape)
        self.templates.setdefault(shape, []).insert(0, template)
        self.templates.move_to_end(shape)
        while len(self) > self.limit:
            oldest = next(iter(self.templates))
            self.templates[oldest].pop()
            if not self.templates[oldest]:
                del self.templates[oldest]
        return template.program(args)

    def _trace(self, args, threads, block, blocks, shared, block_shape, grid_shape) -> Template:
        traced_args = [Traced(a, ("arg", i)) for i, a in enumerate(args)]
        _state.decisions = decisions = []
        try:
            program = lower(self.kernel, traced_args, threads, block=block, blocks=blocks, shared=shared,
                            shape=block_shape, grid=grid_shape, variables=self.variables)
        finally:
            _state.decisions = None
        self.lowered += 1
        holes = [i for i, b in enumerate(program.blocks) if _holes(b)]
        # a decision holds plain values already (an expression is built of expressions and plain ints: _expr keeps
        # a traced operand's expression, never the operand; an outcome is int's own result). Repeats are told apart
        # by the identity of their expressions, not their hash: a float op's chain shares subexpressions, and a
        # tuple's hash walks every path through them (exponential in the chain's length; the fuzzer's --arith hung
        # on a division of arguments). The decisions list keeps every expression alive, so ids stay unique.
        seen, unique = set(), []
        for kind, expr, others, outcome in decisions:
            key = (kind, _identity(expr), tuple(_identity(o) for o in others), outcome)
            if key not in seen:
                seen.add(key)
                unique.append((kind, expr, others, outcome))
        return Template(unique, program, holes, [_plain(b) for b in program.blocks])
