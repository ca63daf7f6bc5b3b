"""Verify mode: a backend reads a recorded token stream and must predict every token the model wrote in it.

The reference drives (an interpreter device records its stream: host tokens, peers' packets, the model's tokens);
the backend under test is fed the same stream, and at each position followed by a model-written token its argmax
must be that token. By induction over positions, the backend run greedily would have written the same stream.

Chunked verify (``Verifier``, ``verify_chunked``, ``verify_ranks``) feeds the recorded stream many positions per
forward (teacher forcing): the model checks a long run at prefill speed instead of one forward per written token.
Which Gated DeltaNet rule runs on a multi-token forward is ``path``: "chunked" (transformers' own chunked form, the
default) or "recurrent" (the decode rule over the whole chunk in one call). The compiled circuit is exact on both, at
every layer (qwengpu/circuit/README.md, "Verify mode"; tests/test_circuit_model.py checks the chunked one).

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
from ..isa import MachineError


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

    @property
    def positions_per_second(self) -> float:
        return self.fed / self.seconds if self.seconds else float("inf")

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


class Verifier:
    """Chunked verify of one growing stream: call ``check(stream)`` with the whole stream recorded so far, as often as
    wanted (checkpoints along a run); each call feeds only the new positions, ``chunk`` per forward, and checks
    every model-written token among them. ``result`` accumulates over the calls.

        verifier = Verifier(ModelBackend(checkpoint="merged-2b"), chunk=256)
        for step in training:
            ...
            print(verifier.check(device.tokens))    # 0 mismatches, positions per second
    """

    def __init__(self, backend, chunk: int = 256, path: str = "chunked"):
        from .model import GDN_PATHS
        if not hasattr(backend, "feed_many"):
            raise MachineError(f"backend {getattr(backend, 'name', backend)!r} has no feed_many: chunked verify "
                               "needs the model backend")
        if chunk < 1 or path not in GDN_PATHS:
            raise MachineError(f"chunk={chunk}, path={path!r}: chunk >= 1 and path one of {GDN_PATHS}")
        self.backend, self.chunk, self.path = backend, chunk, path
        self.result = Verification(f"{getattr(backend, 'name', 'model')} chunked ({path}, {chunk} per forward)")
        self._predictions: list[tuple[int, float]] = []

    def check(self, stream) -> Verification:
        from .model import gdn_path
        done = len(self._predictions)
        if len(stream) < done:
            raise MachineError(f"the stream has {len(stream)} positions, {done} were verified already: "
                               "check() takes the whole stream recorded so far")
        start = time.perf_counter()
        for first in range(done, len(stream), self.chunk):
            tokens = [token.id for token in stream[first:first + self.chunk]]
            fed = time.perf_counter()
            with gdn_path(self.path):
                argmax, margins = self.backend.feed_many(tokens)
            self.result.times.append(time.perf_counter() - fed)
            self._predictions.extend(zip(argmax, margins))
        self.result.fed = len(self._predictions)
        for position in range(max(done, 1), len(stream)):
            token = stream[position]
            if token.origin != T.MODEL:
                continue
            expected = token.written if token.written is not None else token.id
            predicted, margin = self._predictions[_predicted_at(stream, position)]
            self.result.compared += 1
            self.result.min_margin = min(self.result.min_margin, margin)
            if predicted != expected:
                self.result.mismatches.append((position, expected, predicted))
        self.result.seconds += time.perf_counter() - start
        return self.result


def verify_chunked(backend, stream, chunk: int = 256, path: str = "chunked") -> Verification:
    """Chunked verify of a whole recorded stream in one call (see Verifier)."""
    return Verifier(backend, chunk, path).check(stream)


def verify_ranks(streams: dict, make_backend, chunk: int = 256, path: str = "chunked") -> dict:
    """Chunked verify of a recorded multi-rank run: ``streams`` maps rank -> that rank's token stream (the device's
    ``tokens``), ``make_backend(rank)`` gives a fresh model backend. Returns rank -> Verification.

        results = verify_ranks({r: world.devices[r].tokens for r in range(4)},
                               lambda r: ModelBackend(checkpoint="merged-2b"))
        assert all(not v.mismatches for v in results.values())
    """
    return {rank: verify_chunked(make_backend(rank), stream, chunk, path) for rank, stream in sorted(streams.items())}


def _predicted_at(stream, position: int) -> int:
    """Where the model predicted the token at ``position`` (see verify)."""
    at = position - 1
    if T.kind(stream[position].id) in ("EXEC", "END"):
        while at >= 2 and T.kind(stream[at - 2].id) == "MEM" and \
                all(t.origin != T.MODEL for t in stream[at - 2:at + 1]):
            at -= 3
    return at
