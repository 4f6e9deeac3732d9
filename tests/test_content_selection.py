"""Task content_selection: Gehrmann et al.'s copied-span labels against a brute force and by
hand, the tagger's rows and word probabilities, the TransformerTagger against NumPy, the word
path of bottom-up summarization, the selection scores, and `python -m train` end to end on a
made-up corpus."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import yaml

from keras_transformer.config import TransformerConfig
from keras_transformer.models.tagger import TransformerTagger
from keras_transformer.text.bottom_up import EOS_SENTENCE, BottomUpSummarizer, word_pieces
from keras_transformer.text.copied_spans import content_labels, token_maxima, word_counts, words
from keras_transformer.text.word_scorer import WordScorer
from tests import reference
from tests.news_data import WORDS, write_tsv

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}


# Labels


def test_labels_by_hand():
    # giá vàng tăng | mạnh | . | giá vàng | giảm | .
    article = "Giá vàng tăng mạnh . Giá_vàng giảm ."
    assert words(article) == ["Giá", "vàng", "tăng", "mạnh", ".", "Giá", "vàng", "giảm", "."]
    # "giá vàng tăng" is the longest run from the start found in the summary (case aside);
    # the first "." is a span of its own; "giá vàng" is another span, first seen here; the
    # second "." repeats a span already labelled.
    assert content_labels(article, "giá vàng tăng .").tolist() == [1, 1, 1, 0, 1, 1, 1, 0, 0]
    # A span starts where the last one ended: "x" alone (the summary has no "x y"), then
    # "y x".
    assert content_labels("x y x", "y x").tolist() == [1, 1, 1]
    # A repeated span is 0; a shorter span of the same words is another span.
    assert content_labels("x y x y", "x y").tolist() == [1, 1, 0, 0]
    assert content_labels("b c d x b c", "b c d").tolist() == [1, 1, 1, 0, 1, 1]
    assert content_labels("a b c d e", "c d e").tolist() == [0, 0, 1, 1, 1]


def test_labels_of_an_empty_article_or_a_summary_that_copies_nothing():
    assert content_labels("", "một câu").tolist() == []
    assert content_labels("mưa lớn .", "trời nắng").tolist() == [0, 0, 0]
    assert content_labels("mưa lớn .", "").tolist() == [0, 0, 0]


def test_labels_compare_words_case_insensitively_and_in_nfc():
    import unicodedata

    decomposed = unicodedata.normalize("NFD", "Hà Nội")
    assert content_labels(f"{decomposed} mưa", "hà nội").tolist() == [1, 1, 0]


@pytest.mark.parametrize("seed", range(300))
def test_labels_match_the_brute_force_on_random_articles(seed):
    rng = random.Random(seed)
    vocabulary = ["a", "b", "c", "d", "A", "."][: rng.randint(2, 6)]
    article = [rng.choice(vocabulary) for _ in range(rng.randint(0, 30))]
    summary = [rng.choice(vocabulary) for _ in range(rng.randint(0, 12))]
    got = content_labels(" ".join(article), " ".join(summary)).tolist()
    assert got == reference.copied_span_labels(article, summary)
    # The first k words' labels, as a selector that reads k words needs them.
    for k in range(len(article) + 2):
        assert content_labels(" ".join(article), " ".join(summary), k).tolist() == got[:k]


def test_labels_of_a_long_article_take_linear_time():
    import time

    rng = random.Random(0)
    article = " ".join(rng.choice(WORDS) for _ in range(5000))
    summary = " ".join(rng.choice(WORDS) for _ in range(300))
    start = time.perf_counter()
    labels = content_labels(article, summary)
    assert time.perf_counter() - start < 1.0 and len(labels) == len(words(article))


# Words, tokens and pieces


def _encode(texts):
    """A stand-in tokenizer: a piece per 2 characters of each word (at least one), the
    piece's length + 4 as its id."""
    return [[len(text[i:i + 2]) + 4 for i in range(0, max(len(text), 1), 2)]
            for text in texts]


def test_a_token_holds_its_words_and_takes_their_largest_value():
    tokens = ["lái_xe", "đi", "_", "Hà_Nội_mới"]
    assert word_counts(tokens) == [2, 1, 0, 3]
    values = [0.1, 0.7, 0.2, 0.3, 0.9]  # the last word ("mới") was not read
    np.testing.assert_allclose(token_maxima(values, word_counts(tokens)), [0.7, 0.2, 0.0, 0.9])
    np.testing.assert_allclose(token_maxima(values[:3], word_counts(tokens)), [0.7, 0.2, 0, 0])


def test_the_taggers_row_owns_each_piece_by_its_token_and_cuts_at_the_length():
    scorer = WordScorer(None, _encode, max_length=6, pad_id=0, eos_id=3)
    row, = scorer.encode_articles(["abc_de f ghijk l"])
    # abc_de: 3 pieces (2 words), f: 1, ghijk: the 1 piece left of 3; then EOS.
    assert row.ids == [6, 6, 6, 5, 6, 3]
    assert row.owners == [0, 0, 0, 1, 2, EOS_SENTENCE]
    assert row.counts == [2, 1, 1] and row.words == 4 and row.cut
    # Labels of the words -> of the pieces (the EOS left out, -1).
    np.testing.assert_array_equal(row.piece_values([0, 1, 0, 1]), [1, 1, 1, 0, 1, -1])
    # The pieces' probabilities -> each word's: the largest of its token's pieces.
    np.testing.assert_allclose(row.word_probabilities([0.1, 0.6, 0.2, 0.3, 0.8, 0.9]),
                               [0.6, 0.6, 0.3, 0.8])
    with pytest.raises(ValueError, match="3 piece probabilities for a row of 6"):
        row.word_probabilities([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="article 2 is empty"):
        scorer.encode_articles(["a", " "])


def test_the_scorer_reads_lower_cased_pieces_and_gives_every_article_its_words():
    seen = []

    def run(ids):
        seen.append(ids.copy())
        return ids / 100.0  # a piece's probability: its id / 100

    def encode(texts):  # one piece a token, the ord of its first letter
        return [[ord(t[0])] for t in texts]

    scorer = WordScorer(run, encode, max_length=8, pad_id=0, eos_id=3, lowercase=True)
    results = scorer.score(["Hà_Nội mưa", "Trời"], batch_size=8)
    assert [r[0] for r in results] == [["Hà", "Nội", "mưa"], ["Trời"]]
    np.testing.assert_allclose(results[0][1], [ord("h") / 100] * 2 + [ord("m") / 100])
    np.testing.assert_array_equal(seen[0], [[ord("t"), 3, 0], [ord("h"), ord("m"), 3]])
    assert scorer.cut_articles == 0


# The model


def tiny_tagger():
    config = TransformerConfig.preset("tiny", source_vocab_size=50, target_vocab_size=50,
                                      max_source_length=12, dropout=0.0)
    model = TransformerTagger(config)
    model.build()
    return model


def test_the_tagger_is_the_head_on_each_encoder_state():
    model = tiny_tagger()
    ids = np.array([[5, 6, 7, 3, 0, 0], [8, 9, 3, 0, 0, 0]], np.int32)
    logits = np.asarray(model(ids))
    assert logits.shape == (2, 6) and logits.dtype == np.float32
    states = np.asarray(model.encoder(model.embedding(ids), ids != 0))
    np.testing.assert_allclose(logits, reference.dense(model.head, states)[..., 0], atol=1e-5)
    # Padding leaves the real pieces' logits alone.
    padded = np.pad(ids, ((0, 0), (0, 3)))
    np.testing.assert_allclose(np.asarray(model(padded))[:, :4], logits[:, :4], atol=1e-5)


def test_the_tagger_round_trips_through_a_keras_file_and_shares_the_masked_lms_names(
        tmp_path):
    import keras_transformer  # noqa: F401  (registers the classes)
    from keras_transformer.models.masked_lm import TransformerMaskedLM
    from keras_transformer.models.presets import load_by_name

    model = tiny_tagger()
    ids = np.array([[5, 6, 3, 0]], np.int32)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras", compile=False)
    assert isinstance(loaded, TransformerTagger)
    np.testing.assert_allclose(np.asarray(loaded(ids)), np.asarray(model(ids)), atol=1e-6)
    masked = TransformerMaskedLM(model.config)
    masked.build()
    report = load_by_name(model, masked)
    assert report["new"] == ["tagger/kernel", "tagger/bias"]
    assert all(n.startswith(("embedding/", "encoder/")) for n in report["loaded"])
    np.testing.assert_allclose(np.asarray(model.encode(ids)[0]),
                               np.asarray(masked.encode(ids)[0]), atol=1e-6)


# Bottom-up: the copy model's pieces from the selector's words


def test_the_copy_models_pieces_take_their_words_probabilities():
    # The copy model keeps the joints: "lái_xe" is one token of two words (max 0.8), "_" is
    # a token of no word (0); "về" (word 4) was not read by the selector (0).
    tokens = ["lái_xe", "đi", "_", "về"]
    ids, owners, probabilities = word_pieces(tokens, [0.2, 0.8, 0.4], _encode, 16, eos_id=3)
    assert ids == [6, 6, 6, 6, 5, 6, 3] and owners == [0, 0, 0, 1, 2, 3, EOS_SENTENCE]
    np.testing.assert_allclose(probabilities, [0.8, 0.8, 0.8, 0.4, 0.0, 0.0, 1.0])
    # Cut at the copy model's length: 4 pieces + EOS.
    ids, owners, probabilities = word_pieces(tokens, [0.2, 0.8, 0.4], _encode, 5, eos_id=3)
    assert owners == [0, 0, 0, 1, EOS_SENTENCE]
    np.testing.assert_allclose(probabilities, [0.8, 0.8, 0.8, 0.4, 1.0])


def _copy_translator():
    from keras_transformer.translator import keras_translator

    config = TransformerConfig.preset("tiny", source_vocab_size=40, target_vocab_size=40,
                                      d_model=32, num_heads=4, d_ff=64, max_source_length=24,
                                      max_target_length=24, dropout=0.0, copy_attention=True,
                                      share_embeddings=True)
    from keras_transformer.models.transformer import Transformer

    model = Transformer(config)
    model.build()
    translator = keras_translator(model)
    translator._encode_texts = _encode
    translator._decode_rows = lambda rows: [" ".join(map(str, r)) for r in rows]
    return translator


def test_a_word_level_selector_masks_the_copy_models_pieces_by_epsilon():
    translator = _copy_translator()
    articles = ["Hà_Nội mưa to .", "trời nắng ."]
    word_scores = {articles[0]: [0.9, 0.6, 0.1, 0.7, 0.2], articles[1]: [0.1, 0.2, 0.3]}

    def score(texts):
        return [(words(t), np.array(word_scores[t])) for t in texts]

    summarizer = BottomUpSummarizer(score, translator, 0.5, level="word")
    encoded, probabilities, masks = summarizer.sources(articles)
    # Hà_Nội: 3 pieces, max(0.9, 0.6); mưa: 2 pieces, 0.1; to 0.7; "." 0.2; EOS.
    assert encoded[0] == [6, 6, 6, 6, 5, 6, 5, 3]
    np.testing.assert_allclose(probabilities[0], [0.9, 0.9, 0.9, 0.1, 0.1, 0.7, 0.2, 1.0])
    assert masks[0].tolist() == [True, True, True, False, False, True, False, True]
    assert masks[1].all()  # nothing reached 0.5: read whole
    assert summarizer.stats.unselected == 1
    assert summarizer.describe() == {"epsilon": 0.5, "top_k": 0, "source": "mask",
                                     "level": "word"}
    for options, message in (({"top_k": 2}, "give top_k 0"), ({"source": "extract"},
                                                              "source mask"),
                             ({"level": "piece"}, "level must be one of")):
        with pytest.raises(ValueError, match=message):
            BottomUpSummarizer(score, translator, 0.5, **{"level": "word", **options})


# The selection scores


def test_selection_scores_against_pairwise_auc_and_counted_f1():
    from train.tasks.content_selection import selection_scores

    rng = np.random.default_rng(0)
    labels = [rng.random(n) < 0.3 for n in (7, 20, 1)]
    probabilities = [np.round(rng.random(len(y)), 1) for y in labels]  # ties included
    scores = selection_scores(probabilities, labels)
    p, y = np.concatenate(probabilities), np.concatenate(labels)
    assert scores["auc"] == pytest.approx(reference.roc_auc(p, y), abs=1e-4)
    chosen = p >= 0.5
    precision, recall = (chosen & y).sum() / chosen.sum(), (chosen & y).sum() / y.sum()
    assert scores["f1"] == pytest.approx(200 * precision * recall / (precision + recall),
                                         abs=0.01)
    best = max((2 * ((p >= t) & y).sum() / ((p >= t).sum() + y.sum()), t) for t in set(p))
    assert scores["best_f1"] == pytest.approx(100 * best[0], abs=0.01)
    assert scores["best_f1_threshold"] == pytest.approx(best[1])
    assert scores["words"] == 28
    assert selection_scores([[0.2, 0.9]], [[0, 0]])["auc"] == 0.5  # no positive
    with pytest.raises(ValueError, match="2 word probabilities for 1 labels"):
        selection_scores([[0.2, 0.9]], [[1]])


# End to end

KEY = "khẩn_cấp"
# The words of the sentences the summary does not copy: none of WORDS.
OTHER = ["thời_tiết", "hôm_nay", "nắng", "gió", "biển", "tàu", "chợ", "rau", "giá_rẻ", "sáng"]


def make_article(rng: random.Random) -> tuple[str, str]:
    """An article of 2-5 sentences, one of them (anywhere) of WORDS after KEY, the others of
    OTHER; its summary is that sentence without KEY, so the copied words are its words."""
    sentences = [" ".join(rng.choice(OTHER) for _ in range(rng.randint(3, 6))) + " ."
                 for _ in range(rng.randint(2, 5))]
    key = rng.randrange(len(sentences))
    summary = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6))) + " ."
    sentences[key] = f"{KEY} {summary}"
    return " ".join(sentences), summary


def run_command(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def selection_run(tmp_path_factory):
    """(data directory, run directory, `python -m train`'s result) of a tiny tagger."""
    data = tmp_path_factory.mktemp("vietnews_sel")
    rng = random.Random(5)
    for name, count in (("train.tsv.gz", 300), ("dev.tsv.gz", 30), ("test.tsv", 30)):
        write_tsv(data / name, ["\t".join([*make_article(rng), "tiêu đề"])
                                for _ in range(count)])
    config = {
        "task": "content_selection",
        "data": {"corpus": "tsv", "data_dir": str(data), "train_source": "train.tsv.gz",
                 "dev_source": "dev.tsv.gz", "test_source": "test.tsv",
                 "max_source_length": 24, "tokens_per_batch": 384, "word_joints": "split",
                 "lowercase": True},
        "tokenizer": {"vocab_size": 60},
        "model": {"preset": "tiny", "overrides": {"dropout": 0.0}},
        "training": {"epochs": 2, "steps_per_epoch": 40, "warmup_steps": 30,
                     "verbose": 0, "tensorboard": False, "final_model": "best"},
        "eval": {"dev_score_sentences": 20, "samples": 2},
    }
    (data / "tiny.yaml").write_text(yaml.safe_dump(config, allow_unicode=True))
    out = data / "run"
    result = run_command("train", "--config", str(data / "tiny.yaml"), "--out", str(out),
                         timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, out, result


@pytest.mark.slow
def test_a_content_selection_run_learns_the_copied_words_and_scores_them(selection_run):
    data, out, result = selection_run
    from train.data import load_summaries, word_joints
    from train.tasks import load_run

    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["scored_split"] == "test" and len(metrics["epoch_dev"]["auc"]) == 2
    task, model = load_run(out, "content_selection")
    assert task.config.data.lowercase and isinstance(model, TransformerTagger)
    # The test scores, recomputed here: the words read, their labels by the brute force,
    # the model's probabilities on the lower-cased pieces, the largest of each word's.
    test = load_summaries(data / "test.tsv")
    articles = [word_joints(a, "split") for a in test.articles]
    tok = task.tok
    probabilities, labels = [], []
    for article, summary in zip(articles, test.summaries, strict=True):
        tokens = article.split()
        pieces = [tok.encode([t.lower()])[0] for t in tokens]
        ids, owner = [], []
        for k, p in enumerate(pieces):
            take = p[: 23 - len(ids)]
            ids += take
            owner += [k] * len(take)
        logits = np.asarray(model(np.array([ids + [tok.eos_id]], np.int32)))[0, :-1]
        read = max(owner) + 1
        word_p = np.array([max(1 / (1 + np.exp(-logits[i])) for i in range(len(ids))
                               if owner[i] == k) for k in range(read)])
        probabilities.append(word_p)
        labels.append(np.array(reference.copied_span_labels(
            words(article), words(summary))[:read], bool))
    p, y = np.concatenate(probabilities), np.concatenate(labels)
    assert metrics["auc"] == pytest.approx(reference.roc_auc(p, y), abs=2e-4)
    chosen = p >= 0.5
    f1 = 200 * (chosen & y).sum() / (chosen.sum() + y.sum())
    assert metrics["f1"] == pytest.approx(f1, abs=0.02) and metrics["words"] == len(y)
    # The copied words are those of WORDS (and the first "."): the tagger learns them.
    assert metrics["auc"] > 0.9, metrics
    assert metrics["precision"] == "float32"  # the training's, not a selection score
    assert "test: selection AUC" in result.stdout and "  IN   " in result.stdout
    # train.evaluate scores a file the same way.
    result = run_command("train.evaluate", "--run", str(out), "--tsv", str(data / "test.tsv"))
    assert result.returncode == 0, result.stderr[-2000:]
    entry = json.loads((out / "metrics.json").read_text(encoding="utf-8"))[
        "evaluations"]["model.keras"]["test.tsv"]
    assert {k: entry[k] for k in ("auc", "f1", "words")} == \
        {k: metrics[k] for k in ("auc", "f1", "words")}


@pytest.mark.slow
def test_a_copy_run_takes_the_tagger_as_its_word_level_selector(selection_run, tmp_path):
    """eval.selector names a content_selection run: the copy model's pieces take the largest
    probability of their token's words, the tagger reading the article as its run did; a
    sentence rule with it is refused in one line."""
    from keras_transformer.models.transformer import Transformer
    from train.config import ConfigError, load_config
    from train.tasks.summarization import SummarizationTask

    data, out, _ = selection_run
    options = ["task=summarization", f"eval.selector={out}", "eval.selector_epsilon=0.5",
               "model.overrides.copy_attention=true", "model.overrides.share_embeddings=true"]
    task = SummarizationTask(load_config(None, options))
    task.load_selector()
    tagger_task, tagger = task.selector
    tok = tagger_task.tok
    task.source_tok = task.target_tok = tok
    config = TransformerConfig.preset("tiny", source_vocab_size=tok.vocab_size,
                                      target_vocab_size=tok.vocab_size, max_source_length=12,
                                      max_target_length=8, copy_attention=True,
                                      share_embeddings=True, **tok.special_ids)
    model = Transformer(config)
    model.build()
    summarizer = task.bottom_up(model)
    assert summarizer.level == "word"
    article = "Hà_Nội mưa lớn . Giá_vàng tăng mạnh ."
    _, word_p = tagger_task.make_scorer(tagger).score([word_joints_split(article)])[0]
    encoded, probabilities, _ = summarizer.sources([article])
    tokens, start, want = article.split(), 0, []
    for token in tokens:
        n = len(words(token))
        pieces = len(tok.encode([token])[0])
        want += [max(word_p[start:start + n], default=0.0)] * pieces  # 0: not read
        start += n
    want = (want[:11] + [1.0])
    assert encoded[0][:-1] == [i for t in tokens for i in tok.encode([t])[0]][:11]
    np.testing.assert_allclose(probabilities[0], want, atol=1e-6)
    refused = SummarizationTask(load_config(None, [*options, "eval.selector_top_k=2"]))
    with pytest.raises(ConfigError, match="selects words by epsilon: set "
                                          "eval.selector_top_k: 0"):
        refused.load_selector()


def word_joints_split(text: str) -> str:
    return text.replace("_", " ")


def test_bench_bottom_up_refuses_a_sentence_rule_with_a_tagger():
    result = run_command("bench.bottom_up", "--copy", "runs/none", "--tagger", "runs/none",
                         "--top-k", "2")
    assert result.returncode == 2 and "--tagger selects words by --epsilon" in result.stderr
    assert "Traceback" not in result.stderr
