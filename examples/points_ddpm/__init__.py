"""A point-cloud DDPM on four QwenGPUs (issue 15): ``python -m examples.points_ddpm``."""
