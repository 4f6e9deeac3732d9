"""eval.max_sentences cuts the final dev and test scores of every task to each split's first
N items (the translation, summarization and language-model tasks are tested with their
runs): the extractive summarizer's and content selection's articles, the classifier's
sentences, the masked LM's and the denoiser's dev rows. Each task is prepared on made-up
data and its untrained model scored at N and at 0 (the whole split)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from tests.classifier_run import NAMES, write_uit_splits
from tests.news_data import make_article, write_tsv

pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[1]
CUT = 4
TINY_MODEL = {"preset": "tiny", "overrides": {"d_model": 16, "d_ff": 32, "num_heads": 2,
                                              "dropout": 0.0}}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """News in VNDS's format (train 60, dev 10, test 9 articles), UIT-VSFC-style labeled
    sentences (train 120, dev 10, test 9) and text files of sentences."""
    root = tmp_path_factory.mktemp("data")
    rng = random.Random(3)
    news = root / "news"
    news.mkdir()
    for name, count in (("train.tsv.gz", 60), ("dev.tsv.gz", 10), ("test.tsv", 9)):
        write_tsv(news / name, ["\t".join([*make_article(rng), "t"]) for _ in range(count)])
    return write_uit_splits(root, 120, 10, 9)


def prepared(config: dict, base: str | None, folder: Path):
    """(task, untrained model) of `config` (over the repository's config `base`), prepared
    into `folder` as train.engine.train prepares it."""
    from train.tasks import load_run_config, task_class

    path = folder / "config.yaml"
    if base:
        settings = yaml.safe_load((ROOT / "train" / "configs" / base).read_text())
        for key, value in config.items():
            settings[key] = {**settings.get(key, {}), **value} if isinstance(value, dict) \
                else value
        config = settings
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    loaded = load_run_config(path)
    task = task_class(loaded.task)(loaded)
    out = folder / "run"
    out.mkdir()
    model = task.build_model(task.prepare(out))
    return task, model, out


def evaluated(task, model, out: Path, max_sentences: int) -> dict:
    task.config.eval.max_sentences = max_sentences
    metrics = {}
    task.evaluate(model, out, None, metrics)
    return metrics


def news_config(task: str, data: Path, **extra) -> dict:
    return {"task": task,
            "data": {"corpus": "tsv", "data_dir": str(data / "news"),
                     "train_source": "train.tsv.gz", "dev_source": "dev.tsv.gz",
                     "test_source": "test.tsv", "tokens_per_batch": 480, **extra},
            "tokenizer": {"vocab_size": 60}, "model": TINY_MODEL,
            "eval": {"samples": 0, "dev_score_sentences": 5}}


def test_the_extractive_summarizer_scores_and_selects_on_the_first_articles(data, tmp_path):
    task, model, out = prepared(news_config("extractive_summarization", data,
                                            article_sentences=4, max_source_length=8),
                                None, tmp_path)
    cut = evaluated(task, model, out, CUT)
    assert cut["dev_articles"] == cut["articles"] == CUT
    assert len((out / "test.hyp").read_text(encoding="utf-8").splitlines()) == CUT
    assert (out / "dev.src").read_text(encoding="utf-8").splitlines() == \
        task.splits["dev"].articles[:CUT]
    whole = evaluated(task, model, out, 0)
    assert (whole["dev_articles"], whole["articles"]) == (10, 9)
    assert len((out / "test.hyp").read_text(encoding="utf-8").splitlines()) == 9


def test_content_selection_scores_the_words_of_the_first_articles(data, tmp_path):
    task, model, out = prepared(news_config("content_selection", data, max_source_length=24),
                                None, tmp_path)
    cut = evaluated(task, model, out, CUT)
    whole = evaluated(task, model, out, 0)
    assert cut["dev_articles"] == cut["articles"] == CUT
    assert (whole["dev_articles"], whole["articles"]) == (10, 9)
    for prefix, name in (("dev_", "dev"), ("", "test")):
        assert cut[f"{prefix}words"] == sum(len(label) for label in task.labels[name][:CUT])
        assert whole[f"{prefix}words"] == sum(len(label) for label in task.labels[name])
    assert cut["words"] < whole["words"]


def test_the_classifier_scores_the_first_sentences(data, tmp_path, capsys):
    config = {"task": "classification",
              "data": {"corpus": "parallel", "data_dir": str(data), "labels": NAMES,
                       "max_source_length": 24, "tokens_per_batch": 768,
                       **{f"{split}_{side}": f"{split}/{name}" for split in ("train", "dev", "test")
                          for side, name in (("source", "sents.txt"),
                                             ("target", "sentiments.txt"))}},
              "tokenizer": {"vocab_size": 60}, "model": {**TINY_MODEL, "num_classes": 3}}
    task, model, out = prepared(config, None, tmp_path)
    cut = evaluated(task, model, out, CUT)
    assert (cut["dev_sentences"], cut["test_sentences"]) == (CUT, CUT)
    gold, predicted = task.predict(model, task.splits["test"])
    assert cut["test_accuracy"] == pytest.approx(100 * (gold[:CUT] == predicted[:CUT]).mean(),
                                                 abs=0.01)
    whole = evaluated(task, model, out, 0)
    assert (whole["dev_sentences"], whole["test_sentences"]) == (10, 9)
    assert whole["test_accuracy"] == pytest.approx(100 * (gold == predicted).mean(), abs=0.01)
    assert f"test: accuracy {cut['test_accuracy']:.2f}%" in capsys.readouterr().out


def text_config(task: str, data: Path, **extra) -> dict:
    return {"task": task, "data": {"data_dir": str(data), "texts": ["train/sents.txt"],
                     "dev_texts": ["dev/sents.txt"], "max_source_length": 16,
                     "tokens_per_batch": 64, **extra},
            "tokenizer": {"vocab_size": 60}, "model": TINY_MODEL,
            "training": {"precision": "float32", "jit_compile": False},
            "eval": {"samples": 0, "dev_score_sentences": 8}}


def test_the_masked_lm_scores_the_first_dev_rows(data, tmp_path):
    task, model, out = prepared(text_config("masked_lm", data), "vi_masked_lm.yaml", tmp_path)
    assert len(task.rows["dev"]) == 8  # eval.dev_score_sentences' rows
    cut = evaluated(task, model, out, CUT)
    whole = evaluated(task, model, out, 0)
    assert (cut["dev_scored_rows"], whole["dev_scored_rows"]) == (CUT, 8)
    assert 0 < cut["dev_masked_pieces"] < whole["dev_masked_pieces"]
    assert whole["dev_masked_pieces"] == task.scores(model)["masked_pieces"]


def test_the_denoiser_scores_the_first_dev_rows(data, tmp_path):
    task, model, out = prepared(text_config("denoising", data, max_source_length=12,
                                            num_buckets=1),
                                "vi_denoising.yaml", tmp_path)
    rows = len(task.rows["dev"][0])
    assert rows > CUT
    cut = evaluated(task, model, out, CUT)
    whole = evaluated(task, model, out, 0)
    assert (cut["dev_scored_rows"], whole["dev_scored_rows"]) == (CUT, rows)
    assert cut["dev_target_pieces"] == sum(len(row) for row in task.rows["dev"][0][:CUT])
    assert whole["dev_target_pieces"] == sum(len(row) for row in task.rows["dev"][0])
