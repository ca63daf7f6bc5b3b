"""The CuPy transport: qccl's kernels and host schedule on NVIDIA GPUs (cupy-cuda12x), stores crossing into the
peers' memory through peer pointers, CUDA IPC or buffers of the same context. See world.py for the set-up order and
the watchdog, order.py for how several ranks share one GPU with guaranteed progress, memory.py for apertures as
pointers and multicast windows, kernels.py and prim_t.cu for the sources per dtype.
"""
