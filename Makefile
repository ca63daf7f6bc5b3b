# make demo / make test work on a fresh clone: .venv is created and filled on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test verify install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m qccl_bench.machine_demo
	$(PY) -m qccl_bench.demo

test: $(STAMP)
	$(PY) -m pytest

# The whole kernel suite on the compiled circuit and the bf16 model: tokens compared, mismatches, time per token.
verify: $(STAMP)
	$(PY) -m qwengpu.circuit.suite

clean:
	rm -rf $(VENV) build *.egg-info
