# One-command set-up: each target creates .venv from requirements.txt when it is missing,
# and the backend targets .venv-jax (JAX and PyTorch, no TensorFlow) from requirements-torch.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
VENV_JAX := .venv-jax
PY_JAX := $(VENV_JAX)/bin/python
STAMP_JAX := $(VENV_JAX)/.installed
# A dropped connection to the package index is retried rather than failing the set-up.
PIP_INSTALL := -m pip install --quiet --retries 10 --timeout 60
# The library's tests, run again under JAX and PyTorch (tf_only tests skip there).
LIBRARY_TESTS := tests/test_attention.py tests/test_embedding.py \
	tests/test_feed_forward_add_norm.py tests/test_losses_schedules.py tests/test_decoding_*.py \
	tests/test_transformer.py tests/test_dropout.py tests/test_translator.py \
	tests/test_training.py tests/test_backends.py tests/test_numpy_pipeline.py \
	tests/test_stream_numpy.py tests/test_jax_processes.py tests/test_process_batches.py \
	tests/test_public_api.py tests/test_masked_lm_head.py

.PHONY: demo test test-fast test-backends demo-jax-tiny lint setup setup-jax clean \
	uit-vsfc-pretrained sst2-pretrained vietnews-summarizer

setup: $(STAMP)

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) $(PIP_INSTALL) --upgrade pip
	$(PY) $(PIP_INSTALL) -r requirements.txt
	touch $(STAMP)

setup-jax: $(STAMP_JAX)

$(STAMP_JAX): requirements-jax.txt requirements-torch.txt
	test -x $(PY_JAX) || $(PYTHON) -m venv $(VENV_JAX)
	$(PY_JAX) $(PIP_INSTALL) --upgrade pip
	$(PY_JAX) $(PIP_INSTALL) -r requirements-torch.txt
	touch $(STAMP_JAX)

DEMO_SENTENCES := she bought three small dogs\nwe will sell two red bicycles\ntwenty-one thousand four hundred five\n

# Train -> export every format -> cross-runtime parity -> translate with ONNX Runtime.
demo: $(STAMP)
	$(PY) -m train --config train/configs/demo.yaml --out runs/demo --overwrite
	$(PY) -m export --run runs/demo --format all --quantize all --with-attention --out runs/demo/export
	$(PY) -m export.parity --export runs/demo/export
	printf '$(DEMO_SENTENCES)' | $(PY) -m export.translate --export runs/demo/export --runtime onnx

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n auto --dist loadfile --durations=15

# The inner loop: every test but those marked slow (end-to-end training, export, training
# processes); `make test` runs them all.
test-fast: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n auto --dist loadfile -m "not slow" --durations=10

# The library's tests under JAX and PyTorch, without TensorFlow (the slow ones under JAX only:
# a .keras file crossing backends, a model trained to memorise).
test-backends: $(STAMP_JAX)
	KERAS_BACKEND=jax $(PY_JAX) -m pytest -q -n auto --dist loadfile $(LIBRARY_TESTS)
	KERAS_BACKEND=torch $(PY_JAX) -m pytest -q -n auto --dist loadfile -m "not slow" $(LIBRARY_TESTS)

# A small demo run trained and decoded under JAX, whose model.keras TensorFlow exports with
# parity passing.
demo-jax-tiny: $(STAMP) $(STAMP_JAX)
	KERAS_BACKEND=jax $(PY_JAX) -m train --config train/configs/demo.yaml --out runs/demo_jax_tiny \
	  --overwrite --set data.train_size=3000 --set data.dev_size=40 --set data.test_size=40 \
	  --set data.num_buckets=1 --set training.epochs=1 --set training.steps_per_epoch=40 \
	  --set eval.beam_size=2
	$(PY) -m export --run runs/demo_jax_tiny --format onnx --out runs/demo_jax_tiny/export --overwrite
	$(PY) -m export.parity --export runs/demo_jax_tiny/export

# UIT-VSFC and SST-2 fine-tuned from a masked language model (docs/training.md#pre-training-and-fine-tuning):
# the pre-training run first (an interrupted one resumes, a finished one is reused).
uit-vsfc-pretrained: $(STAMP)
	test -f runs/vi_masked_lm/metrics.json || \
	  $(PY) -m train --config train/configs/vi_masked_lm.yaml --out runs/vi_masked_lm
	test -f runs/uit_vsfc_pretrained/metrics.json || \
	  $(PY) -m train --config train/configs/uit_vsfc_pretrained.yaml --out runs/uit_vsfc_pretrained

sst2-pretrained: $(STAMP)
	test -f runs/en_masked_lm/metrics.json || \
	  $(PY) -m train --config train/configs/en_masked_lm.yaml --out runs/en_masked_lm
	test -f runs/sst2_pretrained/metrics.json || \
	  $(PY) -m train --config train/configs/sst2_pretrained.yaml --out runs/sst2_pretrained

# Bottom-up summarization of Vietnamese news (docs/summarization.md): the extractive model
# that selects, then the copy model that reads only what it selected; a finished stage is
# reused, an interrupted one resumes.
vietnews-summarizer: $(STAMP)
	test -f runs/vietnews_summarizer/selector/metrics.json || \
	  $(PY) -m train --config train/configs/vietnews_extractive.yaml \
	    --out runs/vietnews_summarizer/selector --set training.max_minutes=25
	test -f runs/vi_denoising/metrics.json || \
	  $(PY) -m train --config train/configs/vi_denoising.yaml --out runs/vi_denoising
	test -f runs/vietnews_copy/metrics.json || \
	  $(PY) -m train --config train/configs/vietnews_summarization_pretrained.yaml \
	    --out runs/vietnews_copy --set training.max_minutes=50
	test -f runs/vietnews_summarizer/metrics.json || \
	  $(PY) -m train --config train/configs/vietnews_summarization_extracted.yaml \
	    --out runs/vietnews_summarizer --set eval.selector=runs/vietnews_summarizer/selector \
	    --set training.init_from=runs/vietnews_copy

lint: $(STAMP)
	$(PY) -m ruff check .

clean:
	rm -rf runs .pytest_cache .ruff_cache
