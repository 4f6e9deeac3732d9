# One-command set-up: each target creates .venv from requirements.txt when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint setup clean

setup: $(STAMP)

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

DEMO_SENTENCES := she bought three small dogs\nwe will sell two red bicycles\ntwenty-one thousand four hundred five\n

# Train -> export every format -> cross-runtime parity -> translate with ONNX Runtime.
demo: $(STAMP)
	$(PY) -m train --config train/configs/demo.yaml --out runs/demo --overwrite
	$(PY) -m export --run runs/demo --format all --quantize all --with-attention --out runs/demo/export
	$(PY) -m export.parity --export runs/demo/export
	printf '$(DEMO_SENTENCES)' | $(PY) -m export.translate --export runs/demo/export --runtime onnx

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q --durations=15

# The inner loop: every test but those marked slow (end-to-end training, export, training
# processes); `make test` runs them all.
test-fast: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -m "not slow" --durations=10

lint: $(STAMP)
	$(PY) -m ruff check .

clean:
	rm -rf runs .pytest_cache .ruff_cache
