"""torch_q8: the Q8 XOR MLP trained data-parallel with torch tensors over torch.distributed's "qccl" backend.

    torchrun --standalone --nproc-per-node 4 -m examples.torch_q8 --steps 30
"""
