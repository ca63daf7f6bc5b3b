"""qccl's benchmarks and demo (python -m bench.demo)."""
