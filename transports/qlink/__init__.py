"""QLink: QwenGPUs connected by their own store records.

A store a kernel makes into a peer's aperture leaves the device as a packet (its three tokens, untouched) and enters the
peer's context at a record boundary, where it writes the same memory row a host copy would. See aperture.py (routing
by header token), lockstep.py (ticks, bursts, the deadlock detector), fabric.py (in-memory and gloo) and plugin.py
(the qccl transport).
"""
from .aperture import Aperture, Router
from .fabric import Fabric, GlooFabric, InMemoryFabric
from .lockstep import Lockstep

__all__ = ["Aperture", "Router", "Fabric", "InMemoryFabric", "GlooFabric", "Lockstep"]
