"""Each shipped config runs end to end for a few steps on the real files (skipped where
../shared/data or $KT_DATA_DIR lacks them), with a shrunken model so the suite stays fast."""

import json
import os
from pathlib import Path

import pytest

from train.config import load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "train" / "configs"
DATA = Path(os.environ.get("KT_DATA_DIR") or ROOT.parent / "shared" / "data")

SHRINK = ["model.overrides.d_model=32", "model.overrides.num_heads=2", "model.overrides.d_ff=64",
          "model.overrides.num_encoder_layers=1", "model.overrides.num_decoder_layers=1",
          "training.steps_per_epoch=2", "training.epochs=1", "training.verbose=0",
          "training.tensorboard=false", "training.precision=float32", "tokenizer.vocab_size=400",
          "data.tokens_per_batch=1024", f"data.data_dir={DATA}"]
TRANSLATION = ["eval.dev_score_sentences=4", "eval.max_sentences=4", "eval.beam_size=1",
               "eval.samples=0"]


def need(*names):
    missing = [n for n in names if not (DATA / n).is_file()]
    if missing:
        pytest.skip(f"real corpus files not present under {DATA}: {missing}")


def run(name: str, out: Path, *extra: str) -> dict:
    from train.run import run as train_run

    config = load_config(CONFIGS / f"{name}.yaml", [*SHRINK, *extra])
    train_run(config, out)
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["iwslt15_envi_small", "iwslt15_envi_base"])
def test_iwslt15_configs_run_on_the_partial_training_set(name, tmp_path):
    need("iwslt15_en_vi/train_head1000.en", "iwslt15_en_vi/train_head1000.vi",
         "iwslt15_en_vi/tst2012.en", "iwslt15_en_vi/tst2012.vi")
    metrics = run(name, tmp_path, *TRANSLATION)
    assert metrics["steps"] == 2
    assert metrics["empty_dropped"] >= 1  # line 470 of train_head1000.en is empty
    assert 0.0 <= metrics["bleu"] <= 100.0
    assert (tmp_path / "spm_source.model").is_file() and (tmp_path / "spm_target.model").is_file()


@pytest.mark.slow
def test_spa_eng_small_config_holds_out_whole_sources(tmp_path):
    need("spa_eng/spa.txt")
    metrics = run("spa_eng_small", tmp_path, *TRANSLATION, "data.dev_size=200",
                  "data.test_size=200")
    assert metrics["steps"] == 2
    assert 0.0 <= metrics["bleu"] <= 100.0


def test_spa_eng_grouped_split_shares_no_source_between_splits():
    need("spa_eng/spa.txt")
    from train.data import load_corpus

    config = load_config(CONFIGS / "spa_eng_small.yaml", [f"data.data_dir={DATA}"])
    corpus = load_corpus(config.data)
    train = set(corpus.train.sources)
    assert not train & set(corpus.dev.sources)
    assert not train & set(corpus.test.sources)
    assert not set(corpus.dev.sources) & set(corpus.test.sources)
    assert len(corpus.dev) >= 2000 and len(corpus.test) >= 2000
    assert len(corpus.train) + len(corpus.dev) + len(corpus.test) + corpus.dropped_empty == (
        116_964)


@pytest.mark.slow
def test_sst2_classifier_config_reports_dev_accuracy(tmp_path):
    need("sst2/train.tsv", "sst2/dev.tsv")
    metrics = run("sst2_classifier", tmp_path)
    assert metrics["dev_sentences"] == 872
    assert 0.0 <= metrics["dev_accuracy"] <= 100.0
    assert metrics["steps"] == 2


UIT_VSFC = [f"uit_vsfc/{split}/{name}.txt" for split in ("train", "dev", "test")
            for name in ("sents", "sentiments")]


def test_uit_vsfc_config_reads_the_papers_splits():
    need(*UIT_VSFC)
    from collections import Counter

    from train.data import load_classification

    config = load_config(CONFIGS / "uit_vsfc_sentiment.yaml", [f"data.data_dir={DATA}"])
    splits = load_classification(config.data)
    # The sizes and the negative / neutral / positive counts of the corpus README.
    assert {s: len(data) for s, data in splits.items()} == {
        "train": 11_426, "dev": 1_583, "test": 3_166}
    assert Counter(splits["train"].labels) == {0: 5_325, 1: 458, 2: 5_643}
    assert Counter(splits["test"].labels) == {0: 1_409, 1: 167, 2: 1_590}


@pytest.mark.slow
def test_uit_vsfc_config_reports_dev_and_test_macro_f1(tmp_path):
    need(*UIT_VSFC)
    metrics = run("uit_vsfc_sentiment", tmp_path)
    assert metrics["dev_sentences"] == 1_583 and metrics["test_sentences"] == 3_166
    assert json.loads((tmp_path / "labels.json").read_text()) == [
        "negative", "neutral", "positive"]
    for split in ("dev", "test"):
        f1 = [v for v in metrics[f"{split}_f1"].values() if v is not None]
        assert set(metrics[f"{split}_f1"]) == {"negative", "neutral", "positive"}
        assert metrics[f"{split}_macro_f1"] == pytest.approx(sum(f1) / len(f1), abs=0.01)
        assert 0.0 <= metrics[f"{split}_accuracy"] <= 100.0
    # The dev macro-F1 of the one epoch picks best.keras.
    assert metrics["best_dev_macro_f1"] == metrics["epoch_dev"]["macro_f1"][0]
    assert metrics["best_epoch"] == 1 and (tmp_path / "best.keras").is_file()


def test_tatoeba_envi_holds_out_whole_english_sources():
    need("vie_eng_tatoeba/vie.txt")
    from train.data import load_corpus

    config = load_config(CONFIGS / "tatoeba_envi.yaml", [f"data.data_dir={DATA}"])
    corpus = load_corpus(config.data)
    train, dev, test = (set(s.sources) for s in (corpus.train, corpus.dev, corpus.test))
    assert not train & dev and not train & test and not dev & test
    assert len(corpus.dev) >= 500 and len(corpus.test) >= 500
    # Every one of the README's 8,050 lines lands in one split (none is empty).
    assert len(corpus.train) + len(corpus.dev) + len(corpus.test) + corpus.dropped_empty == 8_050


@pytest.mark.slow
def test_tatoeba_envi_config_reports_test_bleu(tmp_path):
    need("vie_eng_tatoeba/vie.txt")
    metrics = run("tatoeba_envi", tmp_path, *TRANSLATION, "data.dev_size=50",
                  "data.test_size=50")
    assert metrics["steps"] == 2
    assert 0.0 <= metrics["bleu"] <= 100.0


# Recipes that train in another precision than auto, and the word their config gives for it.
OTHER_PRECISION = {"demo": "reproducibility"}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_recipe_trains_in_the_fastest_precision_of_the_cpu_at_hand(path):
    """training.precision: auto in every recipe (the schema's default is float32, which
    would quietly give up an AMX host's bfloat16), unless the recipe says why not."""
    precision = load_config(path, []).training.precision
    if path.stem in OTHER_PRECISION:
        assert precision != "auto"
        assert OTHER_PRECISION[path.stem] in path.read_text()
    else:
        assert precision == "auto", f"{path.name}: training.precision is {precision}"
