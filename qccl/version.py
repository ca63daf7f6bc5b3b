"""qccl's version, as a string and as NCCL's version code (major * 10000 + minor * 100 + patch).

    >>> get_version()
    100
"""
__version__ = "0.1.0"


def get_version() -> int:
    """ncclGetVersion: the version code of this qccl (0.1.0 -> 100).

    >>> get_version() // 10000, get_version() // 100 % 100
    (0, 1)
    """
    major, minor, patch = (int(x) for x in __version__.split("."))
    return major * 10000 + minor * 100 + patch
