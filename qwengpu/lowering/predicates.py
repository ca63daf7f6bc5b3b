"""Lane predicates as truth tables over predicate registers (atoms): exact, so p&c | p&!c simplifies back to p.

Example::

    >>> p, c = Predicate.atom("%p1"), Predicate.atom("%p2")
    >>> (p & c) | (p & ~c) == p
    True
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class Predicate:
    atoms: tuple[str, ...]
    rows: frozenset      # assignments (tuples of bools, one per atom) under which a lane is active

    @staticmethod
    def const(value: bool) -> "Predicate":
        return Predicate((), frozenset({()}) if value else frozenset())

    @staticmethod
    def atom(name: str, negated: bool = False) -> "Predicate":
        return Predicate((name,), frozenset({(not negated,)}))

    def _expand(self, atoms):
        rows = set()
        for assignment in itertools.product((False, True), repeat=len(atoms)):
            mine = tuple(assignment[atoms.index(a)] for a in self.atoms)
            if mine in self.rows:
                rows.add(assignment)
        return rows

    def _combine(self, other, fn) -> "Predicate":
        atoms = tuple(sorted(set(self.atoms) | set(other.atoms)))
        mine, theirs = self._expand(atoms), other._expand(atoms)
        rows = {a for a in itertools.product((False, True), repeat=len(atoms)) if fn(a in mine, a in theirs)}
        return Predicate(atoms, frozenset(rows)).simplify()

    def __and__(self, other):
        return self._combine(other, lambda x, y: x and y)

    def __or__(self, other):
        return self._combine(other, lambda x, y: x or y)

    def __invert__(self):
        every = set(itertools.product((False, True), repeat=len(self.atoms)))
        return Predicate(self.atoms, frozenset(every - self.rows)).simplify()

    def simplify(self) -> "Predicate":
        atoms, rows = list(self.atoms), set(self.rows)
        i = 0
        while i < len(atoms):
            low = {r[:i] + r[i + 1:] for r in rows if not r[i]}
            high = {r[:i] + r[i + 1:] for r in rows if r[i]}
            if low == high:
                atoms.pop(i)
                rows = low
            else:
                i += 1
        return Predicate(tuple(atoms), frozenset(rows))

    @property
    def always(self) -> bool:
        return not self.atoms and bool(self.rows)

    @property
    def never(self) -> bool:
        return not self.rows


TRUE, FALSE = Predicate.const(True), Predicate.const(False)
