"""The residual stream as named one-hot groups (the circuit's coordinate system).

Every weight of the compiled model is written against names, never raw indices: a Group is a named set of slots, each
slot one residual dimension, and exactly one slot of every group holds HOT at every layer of every token. A layer
changes a group only by *moving* its hot entry (adding HOT * (e_new - e_old)), so the sum of squares of the residual is
the same constant everywhere and every RMSNorm is the same exact factor (1 / 8 with HOT = 8 and mean(x^2) = 64).

The dimensions no group uses hold constant "ballast" values (powers of two) chosen so that mean(x^2) is exactly 64.
"""
from __future__ import annotations

from dataclasses import dataclass, field

HOT = 8                 # value of a hot slot in the residual; normalised by the RMSNorms to exactly 1
MEAN_SQUARE = HOT * HOT  # mean(x^2) of every residual vector


class CircuitError(Exception):
    """The circuit cannot be built (a width or a budget is too small) or an exactness invariant broke."""


@dataclass(frozen=True)
class Group:
    """A one-hot feature group: ``slots`` are its values (ints or names), ``default`` is hot unless a layer moves it."""
    name: str
    slots: tuple
    default: object
    start: int

    def __post_init__(self):
        if self.default not in self.slots:
            raise CircuitError(f"group {self.name}: default {self.default!r} is not one of its slots")

    def dim(self, slot) -> int:
        try:
            return self.start + self.slots.index(slot)
        except ValueError:
            raise CircuitError(f"group {self.name} has no slot {slot!r}") from None

    @property
    def size(self) -> int:
        return len(self.slots)

    def slot_of(self, vector) -> object:
        """The hot slot of a residual vector (exact values), or raise if the group is not one-hot with HOT."""
        values = vector[self.start:self.start + self.size]
        hot = [i for i, v in enumerate(values) if v != 0]
        if len(hot) != 1 or values[hot[0]] != HOT:
            raise CircuitError(f"group {self.name} is not one-hot with value {HOT}: "
                               f"{ {self.slots[i]: float(values[i]) for i in hot} }")
        return self.slots[hot[0]]


@dataclass
class Residual:
    """Allocates groups in a residual stream of ``width`` dimensions; dimension 0 is the constant ONE."""
    width: int
    groups: dict[str, Group] = field(default_factory=dict)
    _next: int = 1
    _ballast: dict[int, float] | None = None
    _free: list = field(default_factory=list)      # groups whose dimensions a later group may take

    ONE = 0

    def group(self, name: str, slots, default=None) -> Group:
        if self._ballast is not None:
            raise CircuitError(f"group {name}: the residual is sealed (ballast placed)")
        if name in self.groups:
            raise CircuitError(f"group {name} is defined twice")
        slots = tuple(slots)
        default = slots[0] if default is None else default
        for old in self._free:
            if old.size == len(slots) and slots.index(default) == 0:
                # the old group is back at its default, which is the new group's default dimension
                self._free.remove(old)
                group = Group(name, slots, default, old.start)
                self.groups[name] = group
                return group
        group = Group(name, slots, default, self._next)
        if group.start + group.size > self.width:
            raise CircuitError(f"group {name} ({group.size} slots) does not fit: {self.width - self._next} of "
                               f"{self.width} residual dimensions are left")
        self.groups[name] = group
        self._next += group.size
        return group

    def free(self, group: Group) -> None:
        """The layers are done with ``group`` and have moved it back to its default slot: reuse its dimensions."""
        if group.slots.index(group.default) == 0:
            self._free.append(group)

    @property
    def used(self) -> int:
        return self._next

    def __getitem__(self, name: str) -> Group:
        return self.groups[name]

    def seal(self) -> None:
        """Place the ballast: constants on the unused dimensions so that sum(x^2) = MEAN_SQUARE * width."""
        # ONE and one hot slot per group, each HOT^2 (a group placed on a freed group's dimensions shares its slot)
        hot = 1 + len({g.dim(g.default) for g in self.groups.values()})
        missing = self.width - hot                  # in units of HOT^2
        free = list(range(self._next, self.width))
        ballast: dict[int, float] = {}
        # Greedy in squares of powers of two: values stay exact in bf16, and few dimensions are needed.
        for dim in free:
            if missing == 0:
                break
            m = 1
            while (2 * m) ** 2 <= missing:
                m *= 2
            ballast[dim] = float(HOT * m)
            missing -= m * m
        if missing:
            raise CircuitError(f"no room for ballast: {len(free)} free dimensions cannot hold {missing} more units")
        self._ballast = ballast

    @property
    def ballast(self) -> dict[int, float]:
        if self._ballast is None:
            raise CircuitError("the residual is not sealed yet")
        return self._ballast

    def vector(self, hot: dict[str, object]) -> list[float]:
        """A residual vector: ONE, the ballast, every group at its default except the slots named in ``hot``."""
        unknown = set(hot) - set(self.groups)
        if unknown:
            raise CircuitError(f"no group named {sorted(unknown)}")
        x = [0.0] * self.width
        x[self.ONE] = float(HOT)
        for dim, value in self.ballast.items():
            x[dim] = value
        for name, group in self.groups.items():
            x[group.dim(hot.get(name, group.default))] = float(HOT)
        return x

    def describe(self) -> dict:
        return {"width": self.width, "one": self.ONE, "hot": HOT,
                "groups": {g.name: {"start": g.start, "slots": [str(s) for s in g.slots], "default": str(g.default)}
                           for g in self.groups.values()},
                "ballast": {str(k): v for k, v in self.ballast.items()}}
