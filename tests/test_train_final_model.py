"""training.final_model: which weights are model.keras (and so what metrics.json scores), the
step and minutes of the best dev epoch, and the checks of the key."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from train.callbacks import DevScoring
from train.config import ConfigError, load_config
from train.tasks.base import DevScore

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "train" / "configs" / "demo.yaml"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
       "CUDA_VISIBLE_DEVICES": ""}


def test_dev_scoring_keeps_the_step_and_minutes_of_the_best_epoch():
    scores = iter([1.0, 3.0, 2.0, math.nan])
    steps = iter([100, 200, 300, 400])
    model = SimpleNamespace(stop_training=False)
    scoring = DevScoring(DevScore(lambda m: next(scores)), None)
    scoring.set_model(model)
    for epoch, minutes in enumerate([1.5, 3.25, 5.0, 7.5]):
        step = next(steps)
        model.optimizer = SimpleNamespace(iterations=np.int64(step))
        scoring.on_epoch_end(epoch, {"minutes": minutes})
    # Epoch 2 was best; neither the lower epoch 3 nor the NaN of epoch 4 replaced it.
    assert (scoring.best, scoring.best_epoch, scoring.best_step, scoring.best_minutes) == (
        3.0, 2, 200, 3.25)
    # A resumed run reads them back from the backup's state.
    resumed = DevScoring(DevScore(lambda m: 0.0), None)
    resumed.load_state(json.loads(json.dumps(scoring.state())))
    assert (resumed.best, resumed.best_epoch, resumed.best_step, resumed.best_minutes) == (
        3.0, 2, 200, 3.25)
    # A backup written before these were kept: unknown, not a wrong number.
    old = DevScoring(DevScore(lambda m: 0.0), None)
    old.load_state({"best_score": 3.0, "best_epoch": 2, "bad_epochs": 1})
    assert (old.best_step, old.best_minutes) == (0, None)


def test_final_model_is_checked_against_average_last_and_the_dev_score():
    assert load_config(DEMO).training.final_model == "auto"
    assert load_config(DEMO, ["training.final_model=best"]).training.final_model == "best"
    average = ["training.keep_checkpoints=3", "training.average_last=3"]
    assert load_config(DEMO, [*average, "training.final_model=average"]).training.average_last == 3
    with pytest.raises(ConfigError, match=r"^training.final_model must be one of \('auto', "
                                          r"'last', 'average', 'best'\), got 'mean'$"):
        load_config(DEMO, ["training.final_model=mean"])
    with pytest.raises(ConfigError, match="final_model: average needs training.average_last "
                                          "of 2 or more"):
        load_config(DEMO, ["training.final_model=average"])
    for choice in ("last", "best"):
        with pytest.raises(ConfigError, match=rf"average_last \(3\) makes the final model a "
                                              rf"mean, training.final_model says {choice}"):
            load_config(DEMO, [*average, f"training.final_model={choice}"])
    with pytest.raises(ConfigError, match=r"final_model: best needs the per-epoch dev score "
                                          r"\(eval.dev_score_sentences > 0\)"):
        load_config(DEMO, ["training.final_model=best", "eval.dev_score_sentences=0"])


@pytest.mark.slow
def test_best_final_model_and_a_short_plans_warmup_in_one_run(tmp_path):
    """One-pass epochs of a few hundred pairs with final_model: best and warmup_fraction: the
    counted plan is the steps the run took, the warm-up ends inside it, and model.keras (what
    the run scored) holds best.npz's weights."""
    out = tmp_path / "run"
    overrides = ["data.train_size=300", "data.dev_size=20", "data.test_size=6",
                 "data.max_source_length=24", "data.max_target_length=24",
                 "data.tokens_per_batch=576", "tokenizer.vocab_size=200",
                 "model.overrides.d_model=32", "model.overrides.d_ff=64",
                 "training.epochs=3", "training.verbose=0", "training.tensorboard=false",
                 "training.keep_checkpoints=3", "training.final_model=best",
                 "training.warmup_fraction=0.5", "eval.dev_score_sentences=4",
                 "eval.beam_size=2", "eval.samples=0"]
    args = [sys.executable, "-m", "train", "--config", str(DEMO), "--out", str(out)]
    for item in overrides:
        args += ["--set", item]
    result = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())

    # The plan, counted by reading a tf.data pass in the run, is 3 of the passes read here.
    # (Not `steps`: on a one-pass tf.data epoch Keras counts one optimizer step more than
    # the batches it trains on, where the iterator runs out.)
    from train.tasks.translation import TranslationTask

    task = TranslationTask(load_config(out / "config.yaml"))
    task.prepare(tmp_path / "again")
    make_train, _ = task.datasets()
    assert metrics["planned_steps"] == 3 * sum(1 for _ in make_train())
    assert metrics["warmup_steps"] == math.ceil(0.5 * metrics["planned_steps"]) < 1000
    assert "warms up over" in result.stderr

    best = metrics["best_epoch"]
    assert metrics["final_model"] == "best" and 1 <= best <= 3
    assert len(metrics["epoch_steps"]) == len(metrics["epoch_minutes"]) == 3
    assert metrics["best_step"] == metrics["epoch_steps"][best - 1]
    assert metrics["best_minutes"] == metrics["epoch_minutes"][best - 1]
    assert metrics["epoch_dev"]["bleu"][best - 1] == pytest.approx(metrics["best_dev_bleu"],
                                                                   abs=1e-4)

    import keras

    import keras_transformer.models.transformer  # noqa: F401  (registers it for load_model)
    from keras_transformer.decoding import SearchSettings
    from keras_transformer.translator import translate
    from train.callbacks import load_weights_npz
    from train.tokenizers import load_run_tokenizers

    model = keras.models.load_model(out / "model.keras", compile=False)
    weights = model.get_weights()
    for w, b in zip(weights, load_weights_npz(out / "best.npz"), strict=True):
        np.testing.assert_array_equal(w, b)
    # The last epoch's weights are model.keras's exactly when the last epoch was best.
    last = load_weights_npz(out / "checkpoints" / "epoch_0003.npz")
    same = all(np.array_equal(w, v) for w, v in zip(weights, last, strict=True))
    assert same == (best == 3)
    # The run's test translations are the best weights'.
    source_tok, target_tok = load_run_tokenizers(out)
    sources = (out / "test.src").read_text(encoding="utf-8").splitlines()
    hypotheses = translate(model, source_tok, target_tok, sources,
                           SearchSettings(beam_size=2, alpha=0.6))
    assert hypotheses == (out / "test.hyp").read_text(encoding="utf-8").splitlines()
