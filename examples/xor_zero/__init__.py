"""ZeRO-1 training of xor_ddp's network on four QwenGPUs (``python -m examples.xor_zero``): ReduceScatter of the
gradients, each rank updates its quarter of the parameters, a multicast AllGather lands the updated quarters in every
replica. The parameters equal xor_ddp's at every step (the same replay checks both)."""
