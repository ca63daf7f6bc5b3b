"""qccl's benchmarks and demo (python -m qccl_bench.demo)."""
