"""qccl's other plugin kinds, as NCCL has them (installed as ``qccl_plugins``; found through the ``qccl_plugins``
entry points, like transports):

- ``qccl_plugins.tuner``: the built-in tuner; chooses ring or multicast for ``algo="auto"`` from a cost model in
  model-written tokens (``qccl_plugins.cost``).
- ``qccl_plugins.debug``: ``QCCL_DEBUG=INFO`` prints an NCCL_DEBUG-style line per call (opCount, call, count,
  datatype, op, root, comm, tokens).
- ``qccl_plugins.trace``: ``QCCL_TRACE=file.json`` writes a Chrome / Perfetto trace (a track per rank, a slice per
  launch, token counters).

Each is an ordinary pluggy plugin written against :mod:`qccl.hookspecs`; a user's own tuner or profiler registers the
same way (``qccl.plugin_manager().register(obj)``) and a user's tuner overrides the built-in one.
"""
