"""Task extractive_summarization: sentence selection, the sentence grid, the masked sentence
loss against NumPy, the extractor model, its config checks, and `python -m train` end to end
on a made-up corpus."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import yaml

from keras_transformer.config import TransformerConfig
from keras_transformer.losses import MaskedSentenceCrossEntropy, sentence_bce
from keras_transformer.models.extractor import TransformerExtractor
from keras_transformer.text.extractive import (
    Selection,
    SentenceScorer,
    article_ids,
    candidate_selections,
    select,
)
from keras_transformer.text.ranking import by_probability
from tests.news_data import WORDS, write_tsv
from train.config import ConfigError
from train.tasks import load_run_config

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}

SENTENCES = ["Mưa lớn ở Hà_Nội .",                       # 6 syllables (with ".")
             "Đường ngập sâu vì mưa lớn ở Hà_Nội .",     # 10, shares "mưa lớn ở" with 0
             "Người_dân đi làm muộn .",                   # 6
             "Trời tạnh ."]                               # 3


# Selection


def test_select_takes_the_k_best_in_article_order():
    scores = [0.2, 0.9, 0.5, 0.1]
    assert select(scores, SENTENCES, Selection(sentences=1)) == [1]
    assert select(scores, SENTENCES, Selection(sentences=2)) == [1, 2]
    assert select(scores, SENTENCES, Selection(sentences=9)) == [0, 1, 2, 3]
    # Ties go to the earlier sentence.
    assert select([0.5, 0.5, 0.5, 0.5], SENTENCES, Selection(sentences=2)) == [0, 1]


def test_select_by_syllable_budget_stops_once_reached():
    scores = [0.2, 0.9, 0.5, 0.1]
    # 10 syllables reach a budget of 10; 11 needs the next best too (10 + 6 = 16).
    assert select(scores, SENTENCES, Selection(syllables=10)) == [1]
    assert select(scores, SENTENCES, Selection(syllables=11)) == [1, 2]
    assert select(scores, SENTENCES, Selection(syllables=1)) == [1]  # at least one
    assert select(scores, SENTENCES, Selection(syllables=999)) == [0, 1, 2, 3]


def test_trigram_blocking_skips_a_repeating_sentence():
    scores = [0.8, 0.9, 0.5, 0.1]
    assert select(scores, SENTENCES, Selection(sentences=2)) == [0, 1]
    # Sentence 0 repeats "mưa lớn ở" of the chosen sentence 1: the next best comes instead.
    assert select(scores, SENTENCES, Selection(sentences=2, trigram_blocking=True)) == [1, 2]


@pytest.mark.parametrize("selection, message", [
    (Selection(), "exactly one"), (Selection(sentences=2, syllables=30), "exactly one"),
    (Selection(sentences=17), "more than the model reads"), (Selection(syllables=-1),
                                                             "exactly one")])
def test_a_bad_selection_is_one_line_saying_what_to_fix(selection, message):
    with pytest.raises(ValueError, match=message) as err:
        selection.check(16)
    assert "\n" not in str(err.value)


def test_selection_round_trips_and_the_grid_respects_k():
    selection = Selection(syllables=40, trigram_blocking=True)
    assert Selection.from_dict(json.loads(json.dumps(selection.to_dict()))) == selection
    with pytest.raises(ValueError, match="not a selection"):
        Selection.from_dict({"sentences": 1})
    assert all(s.sentences <= 2 for s in candidate_selections(2))
    assert len({s.trigram_blocking for s in candidate_selections(4)}) == 2
    assert {s.trigram_blocking for s in candidate_selections(4, (False,))} == {False}


# The sentence grid


def fake_encode(texts):
    """One piece per space-separated token, its length + 4 as the id."""
    return [[len(t) + 4 for t in text.split()] for text in texts]


def test_scorer_reads_the_first_k_sentences_cuts_long_ones_and_keeps_input_order():
    seen = []

    def run(ids):
        seen.append(ids.copy())
        # The probability of a sentence: its first id / 100 (so the test can tell rows apart).
        return ids[:, :, 0] / 100.0

    scorer = SentenceScorer(run, fake_encode, max_sentences=2, max_length=3, pad_id=0, eos_id=2)
    articles = ["a bb ccc dddd . e .", "no end punctuation", "x . yy . zzz ."]
    results = scorer.score(articles, batch_size=2)
    assert [r[0] for r in results] == [["a bb ccc dddd .", "e ."], ["no end punctuation"],
                                       ["x .", "yy ."]]
    # Sentence pieces cut to max_length - 1 = 2, then EOS; padding rows and pieces are PAD.
    np.testing.assert_allclose(results[0][1], [0.05, 0.05])
    np.testing.assert_allclose(results[1][1], [0.06])
    assert scorer.cut_articles == 1 and scorer.cut_sentences == 2
    by_rows = {ids.shape[0]: ids for ids in seen}
    # Batched by sentence count: the one-sentence article first, padded with a PAD row.
    np.testing.assert_array_equal(by_rows[2], [[[6, 7, 2], [0, 0, 0]], [[5, 6, 2], [5, 5, 2]]])
    np.testing.assert_array_equal(by_rows[1], [[[5, 5, 2], [6, 5, 2]]])
    with pytest.raises(ValueError, match="article 2 is empty"):
        scorer.score(["a .", "  "])


def test_a_lowercase_scorer_reads_lower_cased_pieces_and_keeps_the_articles_case():
    seen = []

    def run(ids):
        seen.append(ids.copy())
        return np.full(ids.shape[:2], 0.5, np.float32)

    def encode(texts):  # the ord of each token's first letter: case shows in the ids
        return [[ord(t[0]) for t in text.split()] for text in texts]

    options = dict(max_sentences=2, max_length=4, pad_id=0, eos_id=2)
    lower = SentenceScorer(run, encode, lowercase=True, **options)
    (sentences, _), = lower.score(["Hà Nội mưa . Trời lạnh ."])
    assert sentences == ["Hà Nội mưa .", "Trời lạnh ."]
    np.testing.assert_array_equal(seen[-1][0], [[ord("h"), ord("n"), ord("m"), 2],
                                                [ord("t"), ord("l"), ord("."), 2]])
    SentenceScorer(run, encode, **options).score(["Hà Nội mưa . Trời lạnh ."])
    assert seen[-1][0, 0, 0] == ord("H")


def test_article_ids_pad_to_the_batch_or_given_sizes():
    ids = article_ids([[[5, 2]], [[6, 7, 2], [8, 2]]], pad_id=0)
    np.testing.assert_array_equal(ids, [[[5, 2, 0], [0, 0, 0]], [[6, 7, 2], [8, 2, 0]]])
    assert article_ids([[[5, 2]]], pad_id=0, sentences=4, length=6).shape == (1, 4, 6)


# The loss


def test_sentence_loss_is_the_masked_mean_binary_cross_entropy():
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=4, size=(3, 5)).astype(np.float32)
    labels = np.array([[1, 0, 0, -1, -1], [0, 1, 1, 0, 0], [1, -1, -1, -1, -1]], np.float32)
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    reference = -(np.clip(labels, 0, 1) * np.log(p) + (1 - np.clip(labels, 0, 1)) * np.log(1 - p))
    mask = labels >= 0
    loss, got_mask = sentence_bce(labels, logits)
    np.testing.assert_allclose(np.asarray(loss), np.where(mask, reference, 0), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got_mask), mask)
    mean = float(MaskedSentenceCrossEntropy()(labels, logits))
    assert mean == pytest.approx(reference[mask].mean(), rel=1e-5)
    # A huge logit neither overflows nor loses the loss.
    big, _ = sentence_bce(np.array([[0.0]]), np.array([[200.0]], np.float32))
    assert float(big[0, 0]) == pytest.approx(200.0)


# The model


def tiny_extractor(**kwargs):
    config = TransformerConfig.preset("tiny", source_vocab_size=50, target_vocab_size=50,
                                      max_source_length=8, dropout=0.0)
    model = TransformerExtractor(config, max_sentences=kwargs.pop("max_sentences", 4), **kwargs)
    model.build()
    return model


def test_extractor_scores_each_sentence_and_ignores_padding():
    model = tiny_extractor()
    ids = np.array([[[5, 6, 2, 0], [7, 2, 0, 0], [0, 0, 0, 0]]], np.int32)
    logits = np.asarray(model(ids))
    assert logits.shape == (1, 3) and logits.dtype == np.float32
    # More padding pieces and padding sentences leave the real sentences' logits alone.
    padded = np.zeros((1, 4, 7), np.int32)
    padded[0, :3, :4] = ids[0]
    np.testing.assert_allclose(np.asarray(model(padded))[0, :2], logits[0, :2], atol=1e-5)
    # The sentence vectors are the mean of each sentence's encoded pieces.
    vectors, mask = model.sentence_vectors(ids)
    flat = ids.reshape(3, 4)
    states = np.asarray(model.encoder(model.embedding(flat), flat != 0))
    np.testing.assert_allclose(np.asarray(vectors)[0, 0], states[0, :3].mean(0), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(mask), [[True, True, False]])
    # A sentence's place matters: the same sentences in another order score otherwise.
    swapped = np.asarray(model(ids[:, [1, 0, 2]]))
    assert not np.allclose(swapped[0, [1, 0]], logits[0, :2], atol=1e-4)


def test_extractor_round_trips_through_keras_file(tmp_path):
    import keras_transformer  # noqa: F401  (registers the classes)

    model = tiny_extractor(sentence_layers=1)
    ids = np.array([[[5, 6, 2], [7, 2, 0]]], np.int32)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras", compile=False)
    assert isinstance(loaded, TransformerExtractor)
    assert loaded.max_sentences == 4 and loaded.sentence_layers == 1
    np.testing.assert_allclose(np.asarray(loaded(ids)), np.asarray(model(ids)), atol=1e-6)


def test_extractor_refuses_ids_of_another_rank():
    with pytest.raises(ValueError, match=r"shape \(batch, sentences, length\)"):
        tiny_extractor()(np.zeros((2, 3), np.int32))
    with pytest.raises(ValueError, match="max_sentences"):
        TransformerExtractor(max_sentences=0)


# Config


@pytest.mark.parametrize("overrides, message", [
    (["eval.summary_sentences=17"], "more than the sentences the model reads"),
    (["eval.summary_sentences=2", "eval.summary_syllables=30"], "set one"),
    (["data.article_sentences=0"], "data.article_sentences must be >= 1"),
    (["eval.trigram_blocking=maybe"], "true or false or auto"),
])
def test_config_refuses_a_bad_selection(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_run_config(ROOT / "train" / "configs" / "vietnews_extractive.yaml", overrides)


# End to end

KEY = "khẩn_cấp"  # the word that marks the sentence the summary repeats


def make_article(rng: random.Random) -> tuple[str, str]:
    """An article of 2-6 sentences, one of them (anywhere) holding KEY; its summary is that
    sentence, so Lead-1 is right only when it comes first."""
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6))) + " ."
                 for _ in range(rng.randint(2, 6))]
    key = rng.randrange(len(sentences))
    sentences[key] = f"{KEY} {sentences[key]}"
    return " ".join(sentences), sentences[key]


def run_command(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def extractive_run(tmp_path_factory):
    """(data directory, run directory, `python -m train`'s result) of a tiny extractor."""
    data = tmp_path_factory.mktemp("vietnews_ext")
    rng = random.Random(4)
    for name, count in (("train.tsv.gz", 400), ("dev.tsv.gz", 40), ("test.tsv", 40)):
        write_tsv(data / name, ["\t".join([*make_article(rng), "tiêu đề"])
                                for _ in range(count)])
    # Bad rows: an empty article and an empty summary are skipped and counted.
    with gzip.open(data / "train.tsv.gz", "at", encoding="utf-8") as f:
        f.write(" \tmột tóm tắt\tx\nmưa lớn .\t \tx\n")
    config = {
        "task": "extractive_summarization",
        "data": {"corpus": "tsv", "data_dir": str(data), "train_source": "train.tsv.gz",
                 "dev_source": "dev.tsv.gz", "test_source": "test.tsv",
                 "article_sentences": 5, "max_source_length": 6, "tokens_per_batch": 480},
        "tokenizer": {"vocab_size": 60},
        "model": {"preset": "tiny", "sentence_layers": 1, "overrides": {"dropout": 0.0}},
        "training": {"epochs": 2, "steps_per_epoch": 50, "warmup_steps": 40,
                     "verbose": 0, "tensorboard": False},
        "eval": {"dev_score_sentences": 20, "samples": 2},
    }
    (data / "tiny.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    out = data / "run"
    result = run_command("train", "--config", str(data / "tiny.yaml"), "--out", str(out),
                         timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, out, result


@pytest.mark.slow
def test_extractive_run_learns_and_scores_beside_the_baselines(extractive_run):
    data, out, result = extractive_run
    from train.data import load_summaries
    from train.scoring import lead_baselines

    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    test = load_summaries(data / "test.tsv")
    assert {k: metrics[k] for k in ("lead1", "lead2", "lead3", "oracle")} == \
        lead_baselines(test.articles, test.summaries)
    # The key sentence is anywhere: Lead-1 finds it in about a quarter of the articles, the
    # model learns the marker.
    assert metrics["rouge2"] > metrics["lead1"]["rouge2"] + 20, metrics
    assert metrics["scored_split"] == "test"
    assert metrics["empty_skipped"]["train"] == 2
    assert metrics["articles_cut"]["train"] > 0 and metrics["sentences_cut"]["train"] > 0
    assert len(metrics["epoch_dev"]["rouge"]) == 2
    selection = json.loads((out / "selection.json").read_text(encoding="utf-8"))
    assert selection == metrics["selection"]
    assert max(row["rouge"] for row in metrics["selection_dev"]) == pytest.approx(
        float(np.mean([metrics["dev_rouge1"], metrics["dev_rouge2"], metrics["dev_rougeL"]])),
        abs=0.01)
    # The oracle labels are the greedy oracle of each article's first 5 sentences.
    from train.data import split_sentences
    from train.scoring import oracle

    labels = json.loads((out / "oracle.json").read_text(encoding="utf-8"))["labels"]
    assert labels["test"] == [oracle(split_sentences(a)[:5], s)
                              for a, s in zip(test.articles, test.summaries, strict=True)]
    hypotheses = (out / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(test)
    assert "test: oracle ROUGE-1" in result.stdout and "CHOSEN" in result.stdout


@pytest.mark.slow
def test_train_evaluate_scores_an_extractive_run_like_training(extractive_run, tmp_path):
    data, out, _ = extractive_run
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    result = run_command("train.evaluate", "--run", str(out), "--tsv", str(data / "test.tsv"))
    assert result.returncode == 0, result.stderr[-2000:]
    entry = json.loads((out / "metrics.json").read_text(encoding="utf-8"))[
        "evaluations"]["model.keras"]["test.tsv"]
    assert {k: entry[k] for k in ("rouge1", "rouge2", "rougeL", "lead2", "oracle")} == \
        {k: metrics[k] for k in ("rouge1", "rouge2", "rougeL", "lead2", "oracle")}
    hyp = out / "eval" / "model" / "test.tsv.hyp"
    assert hyp.read_text(encoding="utf-8") == (out / "test.hyp").read_text(encoding="utf-8")
    # --src/--ref with a blank line: skipped, its output line empty.
    src = (out / "test.src").read_text(encoding="utf-8").splitlines()
    ref = (out / "test.ref").read_text(encoding="utf-8").splitlines()
    (tmp_path / "a.txt").write_text("\n".join(src[:3] + [""]) + "\n", encoding="utf-8")
    (tmp_path / "r.txt").write_text("\n".join(ref[:3] + ["x"]) + "\n", encoding="utf-8")
    result = run_command("train.evaluate", "--run", str(out), "--src", str(tmp_path / "a.txt"),
                         "--ref", str(tmp_path / "r.txt"), "--hyp", str(tmp_path / "h.txt"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "skipped 1 empty lines" in result.stderr
    lines = (tmp_path / "h.txt").read_text(encoding="utf-8").splitlines()
    assert lines == (out / "test.hyp").read_text(encoding="utf-8").splitlines()[:3] + [""]
    # An option of the abstractive search does not apply.
    result = run_command("train.evaluate", "--run", str(out), "--tsv", str(data / "test.tsv"),
                         "--beam", "2")
    assert result.returncode == 2 and "--beam does not apply" in result.stderr


@pytest.fixture(scope="module")
def extractive_export(extractive_run):
    _, out, _ = extractive_run
    export = out.parent / "export"
    result = run_command("export", "--run", str(out), "--out", str(export), "--quantize",
                         "int8", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, export


@pytest.mark.slow
def test_export_parity_of_sentence_scores_and_selections(extractive_export):
    out, export = extractive_export
    manifest = json.loads((export / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["kind"] == "extractor" and manifest["max_sentences"] == 5
    assert manifest["selection"] == json.loads((out / "selection.json").read_text())
    result = run_command("export.parity", "--export", str(export), "--run", str(out),
                         "--src", str(out / "test.src"), "--ref", str(out / "test.ref"),
                         "--sentences", "40", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    for runtime in ("savedmodel", "onnx", "tflite"):
        assert any(line.strip().startswith(runtime) and line.strip().endswith("ok")
                   for line in result.stdout.splitlines()), (runtime, result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnx", "tflite"])
def test_summarize_without_tensorflow_writes_the_runs_summaries(extractive_export, runtime,
                                                                 tmp_path):
    out, export = extractive_export
    # TensorFlow made unimportable: the onnx and tflite runtimes must not need it.
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "tensorflow.py").write_text("raise ImportError('no TensorFlow here')\n")
    env = {**ENV, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"}
    result = subprocess.run([sys.executable, "-m", "export.summarize", "--export", str(export),
                             "--runtime", runtime, str(out / "test.src"), "--scores"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == \
        (out / "test.hyp").read_text(encoding="utf-8").splitlines()
    # --sentences 1: one sentence, the most probable one.
    result = subprocess.run([sys.executable, "-m", "export.summarize", "--export", str(export),
                             "--runtime", runtime, "--sentences", "1", str(out / "test.src")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    from keras_transformer.text.sentences import split_sentences

    for line, scored in zip(result.stdout.splitlines(), lines, strict=True):
        probabilities = [float(p) for p in scored.split("\t")[1].split()]
        assert len(split_sentences(line)) == 1
        assert line == split_sentences(
            (out / "test.src").read_text(encoding="utf-8").splitlines()[
                lines.index(scored)])[int(np.argmax(probabilities))]


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--sentences", "0"], "--sentences: 0 is out of range"),
    (["--sentences", "6"], "more than the model reads"),
    (["--sentences", "2", "--syllables", "9"], "not allowed with"),
    (["--no-truncate"], "drop --no-truncate"),
])
def test_summarize_refuses_bad_input_in_one_line(extractive_export, args, message, tmp_path):
    out, export = extractive_export
    article = tmp_path / "a.txt"
    article.write_text("một . hai . ba . bốn . năm . sáu .\n", encoding="utf-8")
    result = run_command("export.summarize", "--export", str(export), str(article), *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    article.write_text("mưa lớn .\n\n", encoding="utf-8")
    result = run_command("export.summarize", "--export", str(export), str(article))
    assert result.returncode == 2 and "line 2 is empty" in result.stderr


# Oracle labels and the export manifest


def test_oracle_labels_are_computed_once_and_redone_for_other_articles(tmp_path, monkeypatch):
    from train.data import Summaries
    from train.tasks import extractive

    splits = {"train": Summaries(["Mưa lớn . Trời tạnh .", "Giá vàng tăng ."],
                                 ["trời tạnh", "giá vàng"])}
    calls = []
    real = extractive.oracle
    monkeypatch.setattr(extractive, "oracle", lambda *a: calls.append(a) or real(*a))
    assert extractive.oracle_labels(tmp_path, splits, 4) == {"train": [[1], [0]]}
    assert len(calls) == 2
    assert extractive.oracle_labels(tmp_path, splits, 4) == {"train": [[1], [0]]}
    assert len(calls) == 2  # read from oracle.json
    assert extractive.oracle_labels(tmp_path, splits, 1) == {"train": [[], [0]]}
    assert len(calls) == 4  # another K: computed again
    splits["train"].summaries[0] = "mưa lớn"
    assert extractive.oracle_labels(tmp_path, splits, 1)["train"][0] == [0]


def extractor_manifest(**changes) -> dict:
    manifest = {"files": {}, "formats": {}, "kind": "extractor",
                "tokenizer": {"source": "spm.model"}, "vocab": {"source_size": 60},
                "special_ids": {"pad": 0, "unk": 1, "eos": 3}, "max_source_length": 6,
                "max_sentences": 5, "word_joints": "keep",
                "selection": {"sentences": 2, "syllables": 0, "trigram_blocking": False}}
    return {**manifest, **changes}


@pytest.mark.parametrize("changes, message", [
    ({"selection": {"sentences": 6, "syllables": 0, "trigram_blocking": False}},
     "more than the model reads"),
    ({"selection": {"sentences": 0, "syllables": 0, "trigram_blocking": False}},
     "exactly one"),
    ({"selection": {"k": 2}}, "not a selection"),
    ({"max_sentences": 0}, "'max_sentences' is 0"),
    ({"word_joints": "join"}, "not keep or split"),
    ({"lowercase": "yes"}, "'lowercase' must be true or false"),
])
def test_an_extractor_manifest_is_checked(changes, message):
    from export.common import ExportError, validate

    validate(extractor_manifest())
    with pytest.raises(ExportError, match=message):
        validate(extractor_manifest(**changes))


@pytest.mark.slow
def test_the_api_batches_articles_and_answers_each_as_export_summarize_alone(
        extractive_export):
    """export.api's engine for an extractive summarizer: the test articles from concurrent
    requests, batched, each answered with the summary the Summarizer gives it alone."""
    from export.engines import open_engine
    from export.kinds import open_export
    from tests.serving import batched

    out, export = extractive_export
    articles = (out / "test.src").read_text(encoding="utf-8").splitlines()[:9]
    requests = [articles[i:i + 3] for i in range(0, len(articles), 3)]
    outputs, _, sizes = batched(open_engine(export), requests)
    summarizer = open_export(export)
    for inputs, answer in zip(requests, outputs, strict=True):
        assert answer == [summarizer.extract([a])[0].summary for a in inputs]
    assert sizes == [9]


# Bottom-up summarization: the extractive run as the copy model's selector


@pytest.fixture(scope="module")
def bottom_up_run(extractive_run):
    """(data directory, extractive run, copy run with eval.selector the extractive run)."""
    from tests.news_data import tiny_run_config

    data, extractive, _ = extractive_run
    config = tiny_run_config(data)
    config["model"]["overrides"]["copy_attention"] = True
    config["tokenizer"]["joint"] = True
    config["training"]["epochs"] = 2
    config["eval"].update(selector=str(extractive), selector_epsilon=0.5)
    (data / "copy.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    out = data / "copy_run"
    result = run_command("train", "--config", str(data / "copy.yaml"), "--out", str(out),
                         timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, extractive, out, result


@pytest.mark.slow
def test_a_copy_run_with_a_selector_summarizes_the_selected_sentences(bottom_up_run):
    from keras_transformer.decoding import SearchSettings
    from keras_transformer.text.bottom_up import BottomUpSummarizer
    from keras_transformer.translator import keras_translator
    from train.data import load_summaries
    from train.tasks import load_run

    data, extractive, out, result = bottom_up_run
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    selection = metrics["selection"]
    assert selection["selector"] == str(extractive) and selection["epsilon"] == 0.5
    assert selection["articles"] == 40 and 0 < selection["kept_share"] < 1
    assert "selection: " in result.stdout
    # The run's summaries are the pipeline's, run here from its two models.
    ext_task, ext_model = load_run(extractive, "extractive_summarization")
    copy_task, copy_model = load_run(out, "summarization")
    scorer = ext_task.make_scorer(ext_model)
    summarizer = BottomUpSummarizer(
        scorer.score, keras_translator(copy_model, copy_task.source_tok, copy_task.target_tok),
        0.5)
    test = load_summaries(data / "test.tsv")
    settings = SearchSettings(beam_size=2, alpha=0.6, min_length=2)
    want = summarizer.summarize(test.articles, settings)
    assert (out / "test.hyp").read_text(encoding="utf-8").splitlines() == want
    assert summarizer.stats.to_dict()["kept"] == selection["kept"]
    # train.evaluate scores the pipeline alike.
    evaluated = run_command("train.evaluate", "--run", str(out), "--tsv", str(data / "test.tsv"))
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    entry = json.loads((out / "metrics.json").read_text(encoding="utf-8"))[
        "evaluations"]["model.keras"]["test.tsv"]
    assert entry["selection"] == selection and "selection: " in evaluated.stdout
    hyp = out / "eval" / "model" / "test.tsv.hyp"
    assert hyp.read_text(encoding="utf-8").splitlines() == want


@pytest.mark.slow
@pytest.mark.parametrize("share", [0.0, 1.0])
def test_extract_then_abstract_trains_on_the_oracles_or_the_selectors_sentences(
        bottom_up_run, share, tmp_path):
    """data.extract_sources: a training article's source is the greedy oracle's sentences
    among the selector's first K (share 1) or the selector's 2 best (share 0), in article
    order; dev's is always the selector's, as the pipeline reads it."""
    from train.data import load_summaries, split_sentences
    from train.scoring import oracle
    from train.tasks import load_run, task_class

    data, extractive, _, _ = bottom_up_run
    config = yaml.safe_load((data / "copy.yaml").read_text(encoding="utf-8"))
    config["data"].update(extract_sources=True, oracle_share=share)
    config["eval"].update(selector_top_k=2, selector_source="extract")
    path = tmp_path / "extract.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    task = task_class("summarization")(load_run_config(path))
    task.prepare(tmp_path)
    ext_task, ext_model = load_run(extractive, "extractive_summarization")
    k = ext_task.config.data.article_sentences
    scorer = ext_task.make_scorer(ext_model)
    for name, file in (("train", "train.tsv.gz"), ("dev", "dev.tsv.gz")):
        split = load_summaries(data / file)
        scores = [s for _, s in scorer.score(split.articles)]
        want = []
        for article, reference, p in zip(split.articles, split.summaries, scores, strict=True):
            sentences = split_sentences(article)
            chosen = oracle(sentences[:k], reference) if name == "train" and share else []
            chosen = chosen or list(np.sort(by_probability(p)[:2]))
            want.append(" ".join(sentences[i] for i in sorted(chosen)))
        assert task.sources[name] == want, name
        assert task.sources[name] != split.articles
    # The oracle is the selector run's own, read, not computed again.
    assert not (tmp_path / "oracle.json").exists()


@pytest.mark.slow
def test_a_selector_that_is_not_an_extractive_run_is_refused_before_training(bottom_up_run,
                                                                            tmp_path):
    data, extractive, out, _ = bottom_up_run
    config = yaml.safe_load((data / "copy.yaml").read_text(encoding="utf-8"))
    for selector, message in ((tmp_path / "nothing", "is not a finished training run"),
                              (out, "is a summarization run; give a run of task extractive_summarization")):
        config["eval"]["selector"] = str(selector)
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(config, allow_unicode=True))
        result = run_command("train", "--config", str(path), "--out", str(tmp_path / "run"))
        assert result.returncode == 2 and message in result.stderr, result.stderr[-1500:]
        assert "Traceback" not in result.stderr
        assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
            next(line for line in result.stderr.splitlines() if message in line)]
        assert not (tmp_path / "run" / "model.keras").exists()


@pytest.mark.parametrize("overrides, message", [
    (["eval.selector=runs/x"], "eval.selector restricts a copy model's attention"),
    (["eval.selector_epsilon=1.5"], "eval.selector_epsilon must be"),
    (["eval.selector_top_k=-1"], "eval.selector_top_k must be"),
    (["eval.selector_source=rewrite"], "eval.selector_source must be one of"),
    (["data.extract_sources=true"], "data.extract_sources trains the copy model"),
    (["data.oracle_share=1.5"], "data.oracle_share must be"),
])
def test_a_selector_without_copy_attention_or_epsilon_outside_0_1_is_refused(overrides,
                                                                             message, tmp_path):
    from tests.news_data import tiny_run_config

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_run_config(tmp_path)))
    with pytest.raises(ConfigError, match=message):
        load_run_config(path, overrides)


@pytest.mark.slow
def test_the_pipeline_exports_as_one_and_runs_without_tensorflow_as_trained(bottom_up_run,
                                                                           tmp_path):
    data, extractive, out, _ = bottom_up_run
    export = tmp_path / "export"
    result = run_command("export", "--run", str(out), "--out", str(export), "--format", "onnx",
                         "--with-attention", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((export / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["selector"] == {"export": "selector", "epsilon": 0.5, "top_k": 0,
                                    "source": "mask"}
    assert "selector/manifest.json" in manifest["files"]
    sub = json.loads((export / "selector" / "manifest.json").read_text(encoding="utf-8"))
    assert sub["kind"] == "extractor" and list(sub["formats"]) == ["onnx"]
    want = (out / "test.hyp").read_text(encoding="utf-8").splitlines()
    articles = out / "test.src"
    got = run_command("export.translate", "--export", str(export), "--runtime", "onnx",
                      str(articles), "-o", str(tmp_path / "onnx.hyp"))
    assert got.returncode == 0, got.stderr[-2000:]
    assert (tmp_path / "onnx.hyp").read_text(encoding="utf-8").splitlines() == want
    # export.summarize runs it too, without TensorFlow; the extractive options do not apply.
    summarized = run_command("export.summarize", "--export", str(export), str(articles),
                             "-o", str(tmp_path / "summarize.hyp"))
    assert summarized.returncode == 0, summarized.stderr[-2000:]
    assert (tmp_path / "summarize.hyp").read_text(encoding="utf-8").splitlines() == want
    refused = run_command("export.summarize", "--export", str(export), "--sentences", "2",
                          str(articles))
    assert refused.returncode == 2 and "--sentences is for an extractive" in refused.stderr
    # Epsilon 0 keeps every piece: the copy model alone, as the search graph writes it.
    from export.kinds import open_export
    from keras_transformer.decoding import SearchSettings

    lines = articles.read_text(encoding="utf-8").splitlines()[:6]
    pipeline = open_export(export)
    settings = SearchSettings(beam_size=2, alpha=0.6, min_length=2)
    assert pipeline.translate(lines, settings, epsilon=0.0) == \
        pipeline.translator.translate(lines, settings)
    assert pipeline.translate(["", lines[0]], settings) == ["", want[0]]
    # A manifest's rule reaches the runner: the selector's 2 best sentences alone (extract
    # then abstract) in the onnx runtime, as the Keras pipeline writes them.
    from keras_transformer.text.bottom_up import BottomUpSummarizer
    from keras_transformer.translator import keras_translator
    from train.tasks import load_run

    extract = tmp_path / "extract"
    shutil.copytree(export, extract)
    manifest["selector"].update(top_k=2, source="extract")
    (extract / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    ext_task, ext_model = load_run(extractive, "extractive_summarization")
    copy_task, copy_model = load_run(out, "summarization")
    keras_pipeline = BottomUpSummarizer(
        ext_task.make_scorer(ext_model).score,
        keras_translator(copy_model, copy_task.source_tok, copy_task.target_tok), 0.5,
        top_k=2, source="extract")
    assert open_export(extract).translate(lines, settings) == \
        keras_pipeline.summarize(lines, settings)
    # export.parity checks both stages together in every exported runtime.
    parity = run_command("export.parity", "--export", str(export), "--run", str(out),
                         "--src", str(out / "test.src"), "--ref", str(out / "test.ref"),
                         "--sentences", "8", "--beam-sentences", "2", "--bleu-sentences", "8",
                         timeout=900)
    assert parity.returncode == 0, parity.stdout[-3000:] + parity.stderr[-2000:]
    assert "6. the pipeline" in parity.stdout and "summaries identical" in parity.stdout
    # The explorer shows the pipeline's summary, the selector's probability of each source
    # token, and attention over the kept tokens only: the Keras model's, so restricted.
    import keras

    from export.explorer import open_explorer

    answer = open_explorer(export).explain(lines[0])
    assert answer["output"] == want[0]
    encoded, probabilities, masks = pipeline.summarizer().sources([lines[0]])
    assert answer["selector"] == {"probabilities": probabilities[0].tolist(),
                                  "kept": masks[0].tolist(), "epsilon": 0.5, "top_k": 0,
                                  "source": "mask"}
    sp = pipeline.source_sp
    assert [sp.piece_to_id(p) for p in answer["source_tokens"]] == encoded[0]
    produced = [sp.piece_to_id(p) for p in answer["output_tokens"]]
    target_in = np.array([[pipeline.bos_id, *produced[:-1]]], np.int32)
    model = keras.models.load_model(out / "model.keras")
    source = np.array(encoded, np.int32)
    memory, mask = model.encode(source)
    _, weights = model.decode(target_in, memory, np.logical_and(mask, masks[0][None]),
                              source_ids=source, return_attention_scores=True)
    copy = np.asarray(answer["attention"]["copy"])[0, 0]
    np.testing.assert_allclose(copy, np.asarray(weights["copy"])[0], atol=1e-4)
    assert np.all(copy[:, ~masks[0]] == 0.0) and not masks[0].all()
    # A damaged selector sub-export is refused in one line.
    (export / "selector" / "manifest.json").write_text("{}", encoding="utf-8")
    bad = run_command("export.translate", "--export", str(export), str(articles))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr[-1500:]
    assert "selector" in bad.stderr.splitlines()[-1], bad.stderr[-1500:]


@pytest.mark.slow
def test_bench_bottom_up_scores_each_epsilon_and_epsilon_0_is_the_copy_model(bottom_up_run,
                                                                           tmp_path):
    from keras_transformer.text.rouge import rouge
    from keras_transformer.translator import translate
    from train.data import load_summaries
    from train.tasks import load_run

    data, extractive, out, _ = bottom_up_run
    result = run_command("bench.bottom_up", "--copy", str(out), "--extractive", str(extractive),
                         "--articles", "6", "--epsilon", "0", "0.9", "--beam", "1",
                         "--out", str(tmp_path / "sweep.json"), timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads((tmp_path / "sweep.json").read_text(encoding="utf-8"))["results"]
    assert [row["epsilon"] for row in rows] == [0.0, 0.9]
    assert rows[0]["kept_share"] == 1.0 and rows[1]["kept_share"] < 1.0
    task, model = load_run(out, "summarization")
    dev = load_summaries(data / "dev.tsv.gz")
    alone = translate(model, task.source_tok, task.target_tok, dev.articles[:6],
                      task.search_settings(beam_size=1), truncate=True)
    assert rows[0]["rouge2"] == rouge(alone, dev.summaries[:6])["rouge2"]


@pytest.mark.parametrize("lowercase", [False, True])
def test_an_extractor_exports_summarizer_reads_as_its_manifest_says(tmp_path, lowercase):
    """export's Summarizer lower-cases what its model reads when the manifest says so (a
    fine-tune of a lower-cased masked LM), and keeps the article's case in the summary."""
    from export.common import MANIFEST_VERSION, Manifest, file_entry
    from export.kinds.extractor.runtime import Summarizer
    from keras_transformer.text.sentences import split_sentences
    from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

    text = "Hà Nội mưa to . HÀ NỘI MƯA TO . hà nội mưa to ."
    model = train_sentencepiece([text] * 50, tmp_path / "spm", 40)
    (tmp_path / "spm.model").write_bytes(model.read_bytes())
    manifest = extractor_manifest(lowercase=lowercase, max_source_length=40,
                                  manifest_version=MANIFEST_VERSION,
                                  files={"spm.model": file_entry(tmp_path,
                                                                 tmp_path / "spm.model")})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    seen = []

    def run(ids):
        seen.append(ids.copy())
        return np.full(ids.shape[:2], 0.5, np.float32)

    article = "HÀ NỘI MƯA TO . Hà Nội mưa to ."
    summary = Summarizer(Manifest(tmp_path), run).extract([article])[0].summary
    assert summary == article
    tok = SentencePieceTokenizer.load(tmp_path / "spm.model")
    read = article.lower() if lowercase else article
    want = [ids + [3] for ids in tok.encode(split_sentences(read))]
    assert [list(row[row != 0]) for row in seen[0][0]] == want
