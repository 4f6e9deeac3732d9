"""Task extractive_summarization: sentence selection, the sentence grid, the masked sentence
loss against NumPy, the extractor model, its config checks, and `python -m train` end to end
on a made-up corpus."""

from __future__ import annotations

import json
import os
from pathlib import Path

import keras
import numpy as np
import pytest

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
from train.config import ConfigError, load_config

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
        load_config(ROOT / "train" / "configs" / "vietnews_extractive.yaml", overrides)
