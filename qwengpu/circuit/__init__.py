"""The QwenGPU compiled into Qwen3.5 weights: the compiler, the exact ``circuit`` backend and the transformers ``model``
backend (see README.md in this folder). Backends are chosen through ``qwengpu.Device(backend=...)``."""
