"""An asynchronous reference transport on the CPU: every rank a thread driving its own QwenGPU (the interpreter),
with no lockstep. A store into a peer's aperture becomes a packet that reaches the peer after a seeded random delay,
at one of the peer's record boundaries; ranks run at seeded random relative speeds.

It shows on CI what the CuPy transport relies on: qccl's kernels wait only on flags, never on timing. The results of
every collective must equal the lockstep transport's whatever the delays (tests/test_threads_transport.py, and
``python -m qccl_bench.threads_seeds`` for 200 seeds per collective).

    comms = qccl.Communicator.init_all(4, transport="threads", config={"transport_options": {"seed": 7}})
"""
