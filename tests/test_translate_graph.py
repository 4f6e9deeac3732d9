"""export/translate_graph.py: the SavedModel `translate` signature's search against the NumPy
search.

The reference is keras_transformer.decoding's greedy and beam search driving the Keras model
(generation.search_ids over tf_backend.KerasBackend, what `export.translate --runtime keras`
runs), on random-weight models (one whose output bias makes EOS frequent, so hypotheses
finish at different lengths, and a copy-attention model, whose decode_step returns
log-probabilities): the graph's token ids must be identical, greedy and beam, with and
without no_repeat_ngram_size and min_length, over random batches with padding.
"""

from __future__ import annotations

import numpy as np
import pytest

from keras_transformer.decoding import SearchSettings
from tests.decoding_toys import random_transformer

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.tf_only

VOCAB = 40
SETTINGS = [
    SearchSettings(beam_size=1, no_repeat_ngram_size=2, min_length=5),
    SearchSettings(beam_size=2, alpha=1.0),
    SearchSettings(beam_size=4, alpha=0.6, no_repeat_ngram_size=2),
    SearchSettings(beam_size=3, alpha=0.0, no_repeat_ngram_size=3, min_length=4),
    SearchSettings(beam_size=5, alpha=1.2, no_repeat_ngram_size=1, min_length=6),
    # 2K candidates of a beam: the whole vocabulary.
    SearchSettings(beam_size=21, alpha=0.6, no_repeat_ngram_size=2, min_length=3),
]


def _model(seed: int, **options):
    return random_transformer(seed, VOCAB, **options)


@pytest.fixture(scope="module", params=["post_ln", "eos_often", "copy_attention"])
def model(request):
    if request.param == "post_ln":
        return _model(3)
    if request.param == "eos_often":
        return _model(4, eos_bias=2.5, positional="learned", share_embeddings=False,
                      tie_output=False)
    return _model(5, share_embeddings=True, copy_attention=True)


def _sources(rng, eos_id: int, pad_id: int):
    batch, length = int(rng.integers(1, 6)), int(rng.integers(2, 12))
    source = rng.integers(4, VOCAB, (batch, length)).astype(np.int32)
    source[:, -1] = eos_id
    for row in range(1, batch):  # shorter, padded rows
        cut = int(rng.integers(1, length))
        source[row, cut - 1:] = pad_id
        source[row, cut - 1] = eos_id
    return source


def _graph_search(model, settings):
    from export.translate_graph import search_tokens

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def run(source_ids):
        return search_tokens(model, settings, source_ids,
                             tf.zeros([tf.shape(source_ids)[0]], tf.bool))

    return run


@pytest.mark.parametrize("settings", SETTINGS,
                         ids=lambda s: f"beam{s.beam_size}_a{s.alpha}_ng"
                                       f"{s.no_repeat_ngram_size}_min{s.min_length}")
def test_graph_search_matches_the_numpy_search(model, settings):
    from keras_transformer.generation import search_ids
    from keras_transformer.tf_backend import KerasBackend

    c = model.config
    run = _graph_search(model, settings)
    rng = np.random.default_rng(settings.beam_size * 100 + settings.min_length)
    for _ in range(4):
        source = _sources(rng, c.eos_id, c.pad_id)
        expected = search_ids(KerasBackend(model), source, c, settings).tokens
        got = run(tf.constant(source)).numpy()
        width = expected.shape[1]
        assert got[:, :width].tolist() == expected.tolist(), (settings, source.tolist())
        assert (got[:, width:] == c.pad_id).all()


def test_the_eos_model_finishes_hypotheses_at_several_lengths():
    """What makes the beam comparisons above test the finished hypotheses and the stopping
    rule: with the EOS-biased model and min_length 3, beam search ends sources with EOS at
    different lengths and runs others to max_length."""
    from keras_transformer.generation import search_ids
    from keras_transformer.tf_backend import KerasBackend

    model = _model(4, eos_bias=2.5, positional="learned", share_embeddings=False,
                   tie_output=False)
    c = model.config
    rng = np.random.default_rng(0)
    lengths = set()
    cut = 0
    for _ in range(6):
        source = _sources(rng, c.eos_id, c.pad_id)
        tokens = search_ids(KerasBackend(model), source, c,
                            SearchSettings(beam_size=4, min_length=3)).tokens
        for row in tokens.tolist():
            if c.eos_id in row:
                lengths.add(row.index(c.eos_id))
            else:
                cut += 1
    assert len(lengths) >= 2 and cut >= 1, (lengths, cut)


def test_blank_rows_are_done_from_the_start():
    """A blank row (source [EOS]) flagged blank generates nothing, and the other rows are
    searched as without it."""
    from export.translate_graph import search_tokens

    model = _model(3)
    c = model.config
    settings = SearchSettings(beam_size=4, no_repeat_ngram_size=2)
    source = _sources(np.random.default_rng(7), c.eos_id, c.pad_id)
    with_blank = np.concatenate([source, np.full((1, source.shape[1]), c.pad_id, np.int32)])
    with_blank[-1, 0] = c.eos_id
    blank = tf.constant([False] * len(source) + [True])
    got = search_tokens(model, settings, tf.constant(with_blank), blank).numpy()
    alone = _graph_search(model, settings)(tf.constant(source)).numpy()
    assert (got[-1] == c.pad_id).all()
    assert got[:-1].tolist() == alone.tolist()
