"""Data-parallel training of a 2-8-1 ReLU MLP on XOR on four QwenGPUs (``python -m examples.xor_ddp``).

Each step, on every rank: the host copies the rank's two half-batches in; CUDA kernels (xor.cu) run the forward, the
loss and the backward; qccl AllReduces the gradients over QLink; a kernel applies SGD. After the step every rank's
32 parameters are read back and compared with the numpy replay (replay.py) bit for bit.
"""
