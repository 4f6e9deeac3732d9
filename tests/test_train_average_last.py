"""training.average_last: the run's final model is the mean of its last epoch checkpoints, and
the run's own dev and test scores are of that mean."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.decoding import SearchSettings
from train.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "train" / "configs" / "demo.yaml"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
       "CUDA_VISIBLE_DEVICES": ""}
TINY = ["data.train_size=300", "data.dev_size=20", "data.test_size=6",
        "data.max_source_length=24", "data.max_target_length=24", "data.tokens_per_batch=576",
        "tokenizer.vocab_size=200", "model.overrides.d_model=32", "model.overrides.d_ff=64",
        "training.steps_per_epoch=3", "training.epochs=3", "training.verbose=0",
        "training.keep_checkpoints=3", "training.average_last=2",
        "eval.dev_score_sentences=4", "eval.beam_size=2", "eval.samples=0"]


def test_average_last_is_checked_against_the_checkpoints_kept():
    config = load_config(DEMO, ["training.keep_checkpoints=5", "training.average_last=5"])
    assert config.training.average_last == 5
    with pytest.raises(ConfigError, match=r"training.average_last \(6\) must be at most "
                                          r"training.keep_checkpoints \(5\)"):
        load_config(DEMO, ["training.keep_checkpoints=5", "training.average_last=6"])
    with pytest.raises(ConfigError, match="training.average_last must be >= 0"):
        load_config(DEMO, ["training.average_last=-1"])


@pytest.mark.slow
def test_final_model_is_the_mean_of_the_last_checkpoints(tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "train", "--config", str(DEMO), "--out", str(out)]
    for item in TINY:
        args += ["--set", item]
    result = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True,
                            timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["averaged_checkpoints"] == ["epoch_0002.npz", "epoch_0003.npz"]

    import keras

    import keras_transformer.models.transformer  # noqa: F401  (registers it for load_model)
    from keras_transformer.translator import translate
    from train.tokenizers import load_run_tokenizers

    checkpoints = [np.load(out / "checkpoints" / name) for name in metrics["averaged_checkpoints"]]
    model = keras.models.load_model(out / "model.keras", compile=False)
    weights = model.get_weights()
    assert len(weights) == len(checkpoints[0].files)
    for i, w in enumerate(weights):
        a, b = (c[f"arr_{i}"].astype(np.float64) for c in checkpoints)
        np.testing.assert_array_equal(w, ((a + b) / 2).astype(w.dtype))
    # The last step's weights differ from the mean (else the test proves nothing).
    last = checkpoints[1]
    assert any(not np.array_equal(w, last[f"arr_{i}"]) for i, w in enumerate(weights))

    # The run's test translations are the averaged model's.
    source_tok, target_tok = load_run_tokenizers(out)
    sources = (out / "test.src").read_text(encoding="utf-8").splitlines()
    hypotheses = translate(model, source_tok, target_tok, sources,
                           SearchSettings(beam_size=2, alpha=0.6))
    assert hypotheses == (out / "test.hyp").read_text(encoding="utf-8").splitlines()
