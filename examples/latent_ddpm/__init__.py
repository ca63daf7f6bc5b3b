"""Latent diffusion for digits on four QwenGPUs (issue 15): ``python -m examples.latent_ddpm``; its page is web/."""
