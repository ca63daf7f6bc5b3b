"""Apertures and the router: which stores leave a device, decided from the header token alone."""
from __future__ import annotations

from dataclasses import dataclass

from qwengpu import tokens as T
from qwengpu.isa import SINK


@dataclass(frozen=True)
class Aperture:
    """Addresses [start, stop) of a device that belong to ``peers``: a store there is forwarded to them.

    Unicast: the device feeds itself the sink (MEM 127) in place of the header, so local memory is untouched.
    Multicast: the local write is kept and the store goes to every peer as well.
    """
    start: int
    stop: int
    peers: tuple[int, ...]
    multicast: bool = False
    name: str = ""

    def __post_init__(self):
        if not 0 <= self.start < self.stop <= SINK:
            raise ValueError(f"aperture [{self.start}, {self.stop}) is outside device memory 0..{SINK - 1}")
        if not self.peers:
            raise ValueError(f"aperture [{self.start}, {self.stop}) has no peer")
        if not self.multicast and len(self.peers) != 1:
            raise ValueError(f"a unicast aperture has one peer, got {self.peers}")
        object.__setattr__(self, "peers", tuple(int(p) for p in self.peers))

    def __contains__(self, address: int) -> bool:
        return self.start <= address < self.stop

    def __str__(self) -> str:
        label = f"{self.name} " if self.name else ""
        if self.multicast:
            return f"multicast aperture {label}[{self.start}, {self.stop}) -> ranks {','.join(map(str, self.peers))}"
        return f"aperture {label}[{self.start}, {self.stop}) -> rank {self.peers[0]}"


class Router:
    """A device's aperture table. ``route(address)`` is what the device asks for every store header it writes."""

    def __init__(self, apertures=()):
        self._table: list[Aperture] = []
        self._by_address: list[Aperture | None] = [None] * SINK
        for a in apertures:
            self.add(a)

    def add(self, aperture: Aperture) -> None:
        for a in range(aperture.start, aperture.stop):
            if self._by_address[a] is not None:
                raise ValueError(f"{aperture} overlaps {self._by_address[a]}")
        for a in range(aperture.start, aperture.stop):
            self._by_address[a] = aperture
        self._table.append(aperture)

    @property
    def apertures(self) -> tuple[Aperture, ...]:
        return tuple(self._table)

    def route(self, address: int) -> Aperture | None:
        """The aperture holding ``address`` (None: local memory). Loads never ask: they always read local memory."""
        if 0 <= address < SINK:
            return self._by_address[address]
        return None

    def route_header(self, token: int) -> Aperture | None:
        """Route by a write record's header token (MEM a); the payload tokens are never looked at."""
        if T.kind(token) != "MEM":
            raise ValueError(f"route_header: {T.name(token)} is not a write record header")
        return self.route(T.argument(token))

    def __str__(self) -> str:
        return "; ".join(str(a) for a in self._table) or "no apertures"
