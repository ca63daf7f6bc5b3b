"""The table the cost scripts print (loop_cost, pairs_cost): each case measured in each variant, the first variant
the base, with records, tokens written and the ratio of the tokens to the base's; the figures also as JSON."""
from __future__ import annotations

import json
from typing import Callable, Iterable


def tabulate(cases: Iterable[str], variants: Iterable[str], measure: Callable[[str, str], dict],
             heads: tuple[str, str], json_path: str | None = None) -> dict:
    """``measure(case, variant)`` -> {"records": ..., "tokens": ...} for each pair, printed as a row (``heads``:
    the names of the two first columns); returns the figures by "case variant"."""
    cases, variants = list(cases), list(variants)
    width = max(len(heads[0]), *map(len, cases)), max(len(heads[1]), *map(len, variants))
    print(f"{heads[0]:{width[0]}s} {heads[1]:{width[1]}s} {'records':>8s} {'tokens':>8s} {'ratio':>6s}")
    figures = {}
    for case in cases:
        base = None
        for variant in variants:
            row = measure(case, variant)
            base = base or row["tokens"]
            figures[f"{case} {variant}"] = row
            print(f"{case:{width[0]}s} {variant:{width[1]}s} {row['records']:8d} {row['tokens']:8d} "
                  f"{row['tokens'] / base:6.2f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(figures, f, indent=1)
    return figures
