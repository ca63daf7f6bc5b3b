"""Tensor-parallel MNIST on four QwenGPUs (``python -m examples.mnist_tp --variant pool|pca``): a linear classifier
split like Megatron's RowParallelLinear, one AllReduce of the partial logits per image, each rank updating its own 80
weights from local data; checked against the numpy replay (replay.py) after every step."""
