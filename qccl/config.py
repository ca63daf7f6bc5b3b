"""A communicator's configuration (ncclConfig_t's role): the keys that exist, their defaults, and their checks.

    >>> Config.of({"burst": 4}).burst, Config().fifo_slots
    (4, 2)
    >>> Config.of({"bursts": 4})
    Traceback (most recent call last):
    qccl.errors.InvalidArgument: unknown config key 'bursts' (valid keys: backend, burst, fabric, fifo_slots, ...

Communicator.init / init_all take a Config or a dict of its keys; the transport receives them as a dict
(``as_dict()``), so a transport reads the keys it knows with ``config.get(key)``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from .errors import InvalidArgument


@dataclass(frozen=True)
class Config:
    """fifo_slots: FIFO slots per channel (two: one deadlocks the ring); slot_words: words per slot (1..32);
    window_words: words per multicast window; p2p_slot_words: words per point-to-point slot (None: what fits);
    p2p_pipeline: software-pipeline grouped send/recv (False: the naive order, which deadlocks two slots);
    burst: records each device writes between exchanges; stall_windows: idle windows before the deadlock detector
    fires; backend: the machine ("interpreter", "circuit", "model"); fabric: "memory" or "gloo" (None: from how the
    communicator was made); thread_timeout: seconds a thread's call waits for the other threads' ranks; algo: the
    algorithm of calls that name none ("auto", the default: the tuner's choice of algorithm and chunking, which
    never writes more tokens than the cheaper algorithm on the shapes qccl_bench.tuner_check measures; "ring";
    "multicast" for the collectives that have it, the ring for the others); backend_options: keyword
    arguments of the machine's backend (e.g. {"checkpoint": DIR}); transport_options: a
    dict of keys the transport defines and checks (threads: seed, delay_us, timeout; cupy: devices, timeout,
    pinned_bytes)."""
    fifo_slots: int = 2
    slot_words: int = 8
    window_words: int = 16
    p2p_slot_words: int | None = None
    p2p_pipeline: bool = True
    burst: int = 1
    stall_windows: int = 2
    backend: str = "interpreter"
    fabric: str | None = None
    thread_timeout: float = 60.0
    algo: str = "auto"
    transport_options: dict | None = None       # keys a transport defines (e.g. threads' seed), passed to it as is
    backend_options: dict = field(default_factory=dict)     # keyword arguments of the QLink backend's Device

    def __post_init__(self):
        _int(self, "fifo_slots", 1)
        _int(self, "slot_words", 1, 32)
        _int(self, "window_words", 1)
        if self.p2p_slot_words is not None:
            _int(self, "p2p_slot_words", 1, 32)
        _int(self, "burst", 1)
        _int(self, "stall_windows", 1)
        if not isinstance(self.p2p_pipeline, bool):
            raise InvalidArgument(f"config p2p_pipeline={self.p2p_pipeline!r}: expected True or False")
        if not isinstance(self.backend, str) or not self.backend:
            raise InvalidArgument(f"config backend={self.backend!r}: expected a backend name such as 'interpreter'")
        if self.fabric not in (None, "memory", "gloo"):
            raise InvalidArgument(f"config fabric={self.fabric!r}: valid values are None, 'memory' and 'gloo'")
        if self.algo not in ("ring", "multicast", "auto"):
            raise InvalidArgument(f"config algo={self.algo!r}: valid values are 'ring', 'multicast' and 'auto'")
        if self.transport_options is not None and not isinstance(self.transport_options, dict):
            raise InvalidArgument(f"config transport_options={self.transport_options!r}: expected a dict of the "
                                  "transport's own keys")
        if not isinstance(self.backend_options, dict):
            raise InvalidArgument(f"config backend_options={self.backend_options!r}: expected a dict of the backend's "
                                  "keyword arguments (e.g. {'checkpoint': DIR})")
        t = self.thread_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
            raise InvalidArgument(f"config thread_timeout={t!r}: expected a number of seconds > 0")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(sorted(f.name for f in fields(cls)))

    @classmethod
    def of(cls, config) -> "Config":
        """A Config from None (the defaults), a Config, or a dict of its keys (an unknown key is InvalidArgument
        naming the valid ones)."""
        if config is None:
            return cls()
        if isinstance(config, Config):
            return config
        if not isinstance(config, dict):
            raise InvalidArgument(f"config: expected a qccl.Config or a dict, got {type(config).__name__}")
        for key in config:
            if key not in cls.keys():
                raise InvalidArgument(f"unknown config key {key!r} (valid keys: {', '.join(cls.keys())})")
        return cls(**{k: _plain(v) for k, v in config.items()})

    def as_dict(self) -> dict:
        return asdict(self)

    def get(self, key: str, default=None):
        """A key's value, as from a dict (``config.get("burst")``)."""
        return getattr(self, key, default)


def _plain(value):
    """numpy scalars as Python numbers, so that checks and messages see 4, not np.int64(4)."""
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def _int(cfg: Config, name: str, lo: int, hi: int | None = None) -> None:
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        limit = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise InvalidArgument(f"config {name}={v!r}: expected an integer {limit}")
