"""The glyph "7" of DejaVu Sans (the font matplotlib ships) as a point cloud, and the two-sided distance to it.

>>> g = Glyph()
>>> pts = g.sample(np.random.default_rng(0), 100)
>>> pts.shape, bool(np.all(np.abs(pts) <= 1.0))
((100, 2), True)
"""
from __future__ import annotations

import numpy as np


class Glyph:
    """The filled outline of ``char`` scaled so its longer side spans [-1, 1] and centred at the origin."""

    def __init__(self, char: str = "7", family: str = "DejaVu Sans"):
        from matplotlib.font_manager import FontProperties
        from matplotlib.path import Path
        from matplotlib.textpath import TextPath
        raw = TextPath((0, 0), char, size=1.0, prop=FontProperties(family=family))
        verts = raw.to_polygons()
        if not verts:
            raise ValueError(f"the font {family!r} draws nothing for {char!r}")
        allv = np.concatenate(verts)
        lo, hi = allv.min(0), allv.max(0)
        centre, half = (lo + hi) / 2, (hi - lo).max() / 2
        self.polygons = [(v - centre) / half for v in verts]
        self.paths = [Path(p) for p in self.polygons]
        self.lo, self.hi = (lo - centre) / half, (hi - centre) / half

    def inside(self, pts: np.ndarray) -> np.ndarray:
        # even-odd over the outline's polygons, so a glyph with a hole (e.g. "0") is filled right too
        count = sum(p.contains_points(pts).astype(int) for p in self.paths)
        return count % 2 == 1

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n points uniform over the filled glyph (rejection from its bounding box), float64 (n, 2)."""
        out = []
        while sum(len(o) for o in out) < n:
            cand = rng.uniform(self.lo, self.hi, size=(4 * n + 16, 2))
            out.append(cand[self.inside(cand)])
        return np.concatenate(out)[:n]


def one_sided(a: np.ndarray, b: np.ndarray, chunk: int = 2048) -> float:
    """Mean over the points of ``a`` of the distance to the nearest point of ``b``."""
    best = []
    for i in range(0, len(a), chunk):
        d = np.sqrt(((a[i:i + chunk, None, :] - b[None, :, :]) ** 2).sum(-1))
        best.append(d.min(1))
    return float(np.concatenate(best).mean())


def two_sided(samples: np.ndarray, reference: np.ndarray) -> float:
    """The two-sided average distance: the mean of samples -> glyph and glyph -> samples (a symmetric Chamfer
    distance; 0 only when each set lies on the other). ``reference`` is a dense sample of the glyph.

    >>> x = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> two_sided(x, x), two_sided(x, np.array([[0.0, 0.0]]))
    (0.0, 0.25)
    """
    return (one_sided(samples, reference) + one_sided(reference, samples)) / 2
