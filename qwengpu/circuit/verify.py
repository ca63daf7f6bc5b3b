"""Verify mode: a backend reads a recorded token stream and must predict every token the model wrote in it.

The reference drives (an interpreter device records its stream: host tokens, peers' packets, the model's tokens);
the backend under test is fed the same stream, and at each position followed by a model-written token its argmax
must be that token. By induction over positions, the backend run greedily would have written the same stream.

Example::

    from qwengpu import Device
    from qwengpu.circuit.exact import CircuitBackend
    from qwengpu.circuit.verify import verify
    dev = Device()                                   # the interpreter records
    ...                                              # writes, launches, reads
    result = verify(CircuitBackend(), dev.tokens)
    assert result.mismatches == []
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import tokens as T


@dataclass
class Verification:
    """What a backend did on a stream: model tokens compared, the mismatches, the smallest argmax margin, time."""
    backend: str
    compared: int = 0
    fed: int = 0
    mismatches: list = field(default_factory=list)     # (position, expected, predicted)
    min_margin: float = float("inf")
    seconds: float = 0.0
    times: list = field(default_factory=list)          # seconds of each backend.feed

    @property
    def seconds_per_token(self) -> float:
        return self.seconds / max(self.fed, 1)

    def __str__(self) -> str:
        text = (f"{self.backend}: {self.compared} model tokens compared, {len(self.mismatches)} mismatches, "
                f"min margin {self.min_margin:g}, {self.seconds_per_token * 1000:.1f} ms per token")
        for position, expected, got in self.mismatches[:5]:
            text += f"\n  position {position}: expected {T.name(expected)}, predicted {T.name(got)}"
        return text


def verify(backend, stream, stop_after: int | None = None, after_feed=None) -> Verification:
    """Feed ``stream`` (qwengpu.tokens.Token list) to ``backend``; check each model-written token's prediction.

    A token is predicted at the position before it, except an EXEC or END after write records spliced in at a
    record boundary (host copies, peers' packets): the model predicted it before them, at the record's last token.
    ``after_feed(token)``, if given, runs after each token is fed (the deviation report compares layers there).
    """
    result = Verification(getattr(backend, "name", type(backend).__name__))
    predictions: list[tuple[int, float]] = []
    start = time.perf_counter()
    for position, token in enumerate(stream):
        if token.origin == T.MODEL and position > 0:
            expected = token.written if token.written is not None else token.id
            at = _predicted_at(stream, position)
            predicted, margin = predictions[at]
            result.compared += 1
            result.min_margin = min(result.min_margin, margin)
            if predicted != expected:
                result.mismatches.append((position, expected, predicted))
                if stop_after is not None and len(result.mismatches) >= stop_after:
                    break
        fed = time.perf_counter()
        backend.feed(token.id)
        result.times.append(time.perf_counter() - fed)
        result.fed += 1
        if after_feed is not None:
            after_feed(token)
        predictions.append((backend.predict(), backend.margin() if hasattr(backend, "margin") else float("inf")))
    result.seconds = time.perf_counter() - start
    return result


def _predicted_at(stream, position: int) -> int:
    """Where the model predicted the token at ``position`` (see verify)."""
    at = position - 1
    if T.kind(stream[position].id) in ("EXEC", "END"):
        while at >= 2 and T.kind(stream[at - 2].id) == "MEM" and \
                all(t.origin != T.MODEL for t in stream[at - 2:at + 1]):
            at -= 3
    return at
