"""The seed's training runs on four QwenGPUs over qccl, one folder each (run from the repository root):

    python -m examples.xor_ddp      # data-parallel XOR (Broadcast, AllReduce)
    python -m examples.xor_zero     # the same network as ZeRO-1 (ReduceScatter, multicast AllGather)
    python -m examples.mnist_tp     # a tensor-parallel linear classifier on MNIST (AllReduce of partial logits)

examples.common holds what they share (the machines and their word map, host ops, replay checks, progress bars,
JSON, loss curves). Not installed: examples/ is run from a checkout.
"""
