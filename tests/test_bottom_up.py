"""Bottom-up summarization (keras_transformer.text.bottom_up): the selection of an article's
pieces from its sentences' probabilities, and the search over a copy model restricted to
them, against a search without a cache over the model's own full decode, and across the Keras
and ONNX runtimes."""

import numpy as np
import pytest

from keras_transformer import generation
from keras_transformer.decoding import SearchSettings
from keras_transformer.text.bottom_up import (
    EOS_SENTENCE,
    BottomUpSummarizer,
    check_epsilon,
    chosen_sentences,
    piece_probabilities,
    selection_mask,
    sentence_pieces,
    source_pieces,
)
from keras_transformer.text.extractive import Selection, select
from keras_transformer.text.ranking import by_probability

pytestmark = pytest.mark.usefixtures("seeded")


def _encode(texts):
    """A stand-in tokenizer: a piece per word, the word's length + 4 as its id."""
    return [[len(word) + 4 for word in text.split()] for text in texts]


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "x", None, True])
def test_epsilon_outside_zero_to_one_is_refused_with_what_to_give(value):
    with pytest.raises(ValueError, match="epsilon must be a number from 0 to 1"):
        check_epsilon(value)


def test_epsilon_at_the_bounds_is_kept():
    assert check_epsilon(0) == 0.0 and check_epsilon("1") == 1.0


def test_sentence_pieces_follow_the_sentences_and_stop_at_the_model_length():
    sentences = ["a bb .", "ccc dddd eeeee .", "ff ."]
    ids, owners = sentence_pieces(sentences, _encode, max_length=7, eos_id=3)
    # Room for 6 pieces + EOS: sentence 0 whole (3), sentence 1's first 3.
    assert ids == [5, 6, 5, 7, 8, 9, 3]
    assert owners == [0, 0, 0, 1, 1, 1, EOS_SENTENCE]
    ids, owners = sentence_pieces(sentences, _encode, max_length=64, eos_id=3)
    assert ids == [5, 6, 5, 7, 8, 9, 5, 6, 5, 3] and owners[-3:] == [2, 2, EOS_SENTENCE]


def test_a_source_is_cut_only_when_its_pieces_pass_the_model_length():
    sentences = ["a bb .", "ccc dddd eeeee ."]  # 3 + 4 pieces
    assert source_pieces(sentences, _encode, max_length=8, eos_id=3)[2] is False  # 7 + EOS
    ids, owners, cut = source_pieces(sentences, _encode, max_length=7, eos_id=3)
    assert cut is True and len(ids) == 7
    assert source_pieces(sentences + ["f ."], _encode, max_length=8, eos_id=3)[2] is True
    assert source_pieces(sentences + [""], _encode, max_length=8, eos_id=3)[2] is False


def test_the_summarizer_counts_and_names_the_articles_it_cuts(caplog):
    """The copy model reads 15 pieces + EOS: the pipeline's sources cut there are counted in
    its stats and named in one warning, as a plain summarizer's are."""
    short, long = "a bb . ccc .", " ".join(["dd ."] * 6) + " e ." * 3  # 5 and 18 pieces
    articles = [short, long, short]
    probabilities = {short: [0.9, 0.1], long: [0.5] * 9}
    for source in ("mask", "extract"):
        summarizer, _, _ = _stand_in_summarizer(probabilities, epsilon=0.4, source=source)
        caplog.clear()
        with caplog.at_level("WARNING"):
            encoded, _, _ = summarizer.sources(articles)
        # The short article whole (5 pieces) or its one kept sentence (3), + EOS; the long
        # one's 18 pieces cut to 15, + EOS.
        fits = 6 if source == "mask" else 4
        assert [len(ids) for ids in encoded] == [fits, 16, fits]
        assert summarizer.stats.cut == 1 and summarizer.stats.to_dict()["cut_articles"] == 1
        assert "1 of 3 inputs are longer than the model's max_source_length=16" in caplog.text
        assert "(line 2)" in caplog.text


def test_sentence_pieces_are_the_whole_articles_pieces_for_sentencepiece(tmp_path):
    from keras_transformer.text.sentences import split_sentences
    from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

    text = ("Hà_Nội mưa to . Nhiều tuyến phố ngập sâu , giao_thông ùn_tắc ! "
            "Chiều nay trời tạnh ? Người dân về nhà .")
    tok = SentencePieceTokenizer.load(train_sentencepiece([text] * 50, tmp_path / "spm", 60))
    ids, owners = sentence_pieces(split_sentences(text), tok.encode, 200, eos_id=3)
    assert ids[:-1] == tok.encode([text])[0]
    assert max(owners) == 3


def test_a_piece_has_its_sentences_probability_and_eos_is_always_kept():
    owners = [0, 0, 1, 2, 2, EOS_SENTENCE]
    probabilities = piece_probabilities(owners, [0.9, 0.1])  # sentence 2 was not read
    np.testing.assert_array_equal(probabilities, [0.9, 0.9, 0.1, 0.0, 0.0, 1.0])
    mask, unselected = selection_mask(probabilities, owners, 0.5)
    assert mask.tolist() == [True, True, False, False, False, True] and not unselected
    mask, _ = selection_mask(probabilities, owners, 0.0)
    assert mask.all()  # epsilon 0: the copy model alone


def test_an_article_with_nothing_selected_is_read_whole():
    owners = [0, 1, EOS_SENTENCE]
    mask, unselected = selection_mask(piece_probabilities(owners, [0.2, 0.3]), owners, 0.5)
    assert unselected and mask.all()


def test_a_selection_that_keeps_nothing_or_has_the_wrong_shape_is_refused():
    limits = type("L", (), {"pad_id": 0, "bos_id": 2, "eos_id": 3, "max_source_length": 8,
                            "max_target_length": 8})()
    backend = generation.Backend(num_layers=1, num_heads=1, d_model=4)
    source = np.array([[5, 6, 3]], np.int32)
    with pytest.raises(ValueError, match="at least one source position"):
        generation.search_ids(backend, source, limits, SearchSettings(),
                              np.zeros((1, 3), bool))
    with pytest.raises(ValueError, match="selection must be bool"):
        generation.search_ids(backend, source, limits, SearchSettings(), np.ones((1, 2), bool))


# -- the search over a copy model ---------------------------------------------------------


def _copy_model():
    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.transformer import Transformer

    model = Transformer(TransformerConfig.preset(
        "tiny", d_model=32, num_heads=4, d_ff=64, source_vocab_size=50, target_vocab_size=50,
        max_source_length=16, max_target_length=16, share_embeddings=True,
        copy_attention=True, dropout=0.0), dtype="float32")
    model.build()
    rng = np.random.default_rng(0)
    # A gate that copies about half the mass: the copy distribution decides tokens.
    model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype(np.float32)
                       for w in model.get_weights()])
    return model, rng


def _greedy_without_cache(model, source, selection, steps):
    """Greedy tokens from the model's full decode over the restricted memory mask, every
    prefix decoded anew: no cache, no stepper, no Backend."""
    memory, mask = model.encode(source)
    mask = np.logical_and(np.asarray(mask), selection)
    c = model.config
    rows = np.full((source.shape[0], 1), c.bos_id, np.int32)
    for _ in range(steps):
        log_probs, scores = model.decode(rows, memory, mask, source_ids=source,
                                         return_attention_scores=True)
        copy = np.asarray(scores["copy"])
        assert np.all(copy[~np.broadcast_to(selection[:, None, :], copy.shape)] == 0.0)
        np.testing.assert_allclose(copy.sum(-1), 1.0, atol=1e-5)
        rows = np.concatenate([rows, np.asarray(log_probs)[:, -1].argmax(-1)[:, None]
                               .astype(np.int32)], axis=1)
    return rows[:, 1:]


def test_a_selected_search_is_the_greedy_decode_over_the_selected_pieces():
    from keras_transformer.translator import keras_translator

    model, rng = _copy_model()
    source = rng.integers(4, 50, (3, 10)).astype(np.int32)
    source[:, -1] = model.config.eos_id
    selection = np.zeros(source.shape, bool)
    selection[0, :4] = selection[1, 5:] = selection[2, ::2] = True
    selection[:, -1] = True
    settings = SearchSettings(beam_size=1, max_length=6)
    translator = keras_translator(model)
    got = translator.search_ids(source, settings, selection).tokens
    want = _greedy_without_cache(model, source, selection, got.shape[1])
    eos = model.config.eos_id
    for row, reference in zip(got, want, strict=True):
        n = list(row).index(eos) + 1 if eos in row else len(row)
        np.testing.assert_array_equal(row[:n], reference[:n])
    whole = translator.search_ids(source, settings).tokens
    assert not np.array_equal(whole, got)  # the selection changed what was written


class _OnnxCopyBackend(generation.Backend):
    """The exported encoder.onnx and decoder_step.onnx as a NumPy Backend (the default
    restrict, as every TensorFlow-free runtime has it)."""

    def __init__(self, directory, config):
        import onnxruntime as ort

        from keras_transformer.cache.layout import cache_names

        super().__init__(num_layers=config.num_decoder_layers, num_heads=config.num_heads,
                         d_model=config.d_model, copy_attention=True)
        self.encoder = ort.InferenceSession(str(directory / "encoder.onnx"))
        self.step = ort.InferenceSession(str(directory / "decoder_step.onnx"))
        self.cache_input_names = cache_names(config.num_decoder_layers)

    def encode(self, source_ids):
        *memory, mask = self.encoder.run([*self._memory_names, "memory_mask"],
                                         {"source_ids": source_ids})
        return memory, mask

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        feeds = {"tokens": tokens, "memory_mask": memory_mask,
                 "index": np.asarray(index, np.int32)}
        feeds.update(zip(self._memory_names, memory, strict=True))
        feeds.update(zip(self.cache_input_names, cache, strict=True))
        return tuple(self.step.run(["logits", "step_key_values"], feeds))


def test_the_selected_beam_search_is_the_same_in_keras_and_onnx(tmp_path):
    from export.kinds.decoding import export_onnx
    from keras_transformer.translator import keras_translator

    model, rng = _copy_model()
    export_onnx(model, tmp_path, int8=False)
    source = rng.integers(4, 50, (4, 12)).astype(np.int32)
    source[:, -1] = model.config.eos_id
    source[3, 8:] = model.config.pad_id
    source[3, 7] = model.config.eos_id
    selection = rng.random(source.shape) < 0.5
    selection[np.arange(4), [11, 11, 11, 7]] = True
    settings = SearchSettings(beam_size=3, alpha=0.6, max_length=10)
    keras = keras_translator(model).search_ids(source, settings, selection)
    onnx = generation.search_ids(_OnnxCopyBackend(tmp_path, model.config), source,
                                 model.config, settings, selection)
    eos = model.config.eos_id
    assert keras.to_lists(eos) == onnx.to_lists(eos)
    np.testing.assert_allclose(keras.scores, onnx.scores, atol=1e-4)


def test_the_summarizer_reads_only_the_sentences_at_or_above_epsilon():
    """BottomUpSummarizer end to end over a stand-in tokenizer: the selection it passes is
    the pieces of the sentences whose probability reaches epsilon, with the EOS."""
    from keras_transformer.translator import keras_translator

    model, _ = _copy_model()
    translator = keras_translator(model)
    translator._encode_texts = _encode
    translator._decode_rows = lambda rows: [" ".join(map(str, r)) for r in rows]
    articles = ["a bb . ccc dddd . eeeee ff .", "ggg . h ."]
    probabilities = {articles[0]: [0.9, 0.2, 0.6], articles[1]: [0.1, 0.3]}

    def score(texts):
        return [(None, np.array(probabilities[t])) for t in texts]

    summarizer = BottomUpSummarizer(score, translator, 0.5)
    encoded, _, masks = summarizer.sources(articles)
    assert encoded[0] == [5, 6, 5, 7, 8, 5, 9, 6, 5, 3]
    assert masks[0].tolist() == [True] * 3 + [False] * 3 + [True] * 4
    assert masks[1].all()  # nothing reached 0.5: read whole
    assert summarizer.stats.to_dict() == {"articles": 2, "pieces": 15, "kept": 12,
                                          "kept_share": 0.8, "unselected_articles": 1,
                                          "cut_articles": 0}
    settings = SearchSettings(beam_size=1, max_length=5)
    got = summarizer.summarize(articles, settings)
    want_ids = translator.search_ids(
        generation.pad_batch(encoded, 0), settings,
        np.array([m.tolist() + [False] * (10 - len(m)) for m in masks])
    ).to_lists(model.config.eos_id)
    assert got == [" ".join(map(str, r)) for r in want_ids]
    with pytest.raises(ValueError, match="epsilon must be"):
        BottomUpSummarizer(score, translator, 2)


def test_the_selector_stage_inside_the_run_directory_is_kept_and_never_deleted(tmp_path):
    from keras_transformer.command_line import CommandError
    from train.config import load_config
    from train.run_directory import prepare_run_directory

    out = tmp_path / "pipeline"
    (out / "selector").mkdir(parents=True)
    (out / "selector" / "metrics.json").write_text("{}")
    config = load_config(None, ["task=summarization",
                                f"eval.selector={out / 'selector'}"])
    assert prepare_run_directory(out, config) == "new"
    (out / "notes.txt").write_text("mine")  # a file no stage made is still refused
    (out / "run.json").unlink()
    with pytest.raises(CommandError, match="files this tool did not make"):
        prepare_run_directory(out, config)
    (out / "notes.txt").unlink()
    (out / "metrics.json").write_text("{}")  # a finished run, replaced with --overwrite
    prepare_run_directory(out, config, overwrite=True)
    assert (out / "selector" / "metrics.json").is_file()
    # Without the selector in the config the stage is a foreign directory.
    plain = load_config(None, ["task=summarization"])
    (out / "run.json").unlink()
    with pytest.raises(CommandError, match="files this tool did not make"):
        prepare_run_directory(out, plain)


def test_an_article_of_one_sentence_is_read_whole_or_by_its_one_probability():
    owners = sentence_pieces(["a bb ccc"], _encode, max_length=16, eos_id=3)[1]
    assert owners == [0, 0, 0, EOS_SENTENCE]
    kept, unselected = selection_mask(piece_probabilities(owners, [0.7]), owners, 0.5)
    assert kept.all() and not unselected
    kept, unselected = selection_mask(piece_probabilities(owners, [0.2]), owners, 0.5)
    assert kept.all() and unselected  # nothing reached epsilon: read whole
    assert sentence_pieces([], _encode, max_length=16, eos_id=3) == ([3], [EOS_SENTENCE])


def test_chosen_sentences_by_epsilon_or_the_k_best_in_article_order():
    scores = [0.2, 0.7, 0.2, 0.9, 0.1]
    assert chosen_sentences(scores, 0.5).tolist() == [1, 3]
    assert chosen_sentences(scores, 0.0).tolist() == [0, 1, 2, 3, 4]
    assert chosen_sentences(scores, 0.5, top_k=3).tolist() == [0, 1, 3]  # tie: the earlier
    assert chosen_sentences(scores, 0.5, top_k=9).tolist() == [0, 1, 2, 3, 4]
    assert chosen_sentences([], 0.5, top_k=2).tolist() == []


def test_nearly_equal_probabilities_rank_in_article_order_in_every_runtime():
    # A saturated selector's probabilities, as Keras gave them; another runtime's float32
    # sums move each in its seventh digit, which must not reorder them.
    keras = np.array([8.079833e-05, 8.088282e-05, 0.9999065, 8.083263e-05])
    rng = np.random.default_rng(0)
    for _ in range(20):
        other = keras + rng.uniform(-1e-7, 1e-7, keras.shape)
        assert chosen_sentences(other, 0.5, top_k=2).tolist() == [0, 2]
        assert by_probability(other).tolist() == [2, 0, 1, 3]
        assert select(other, ["a b c", "d e f", "g h i", "j k l"],
                      Selection(sentences=2)) == [0, 2]
    # Apart by more than the rounding, the more probable comes first.
    assert by_probability([0.1, 0.1002, 0.0999]).tolist() == [1, 0, 2]


def _stand_in_summarizer(probabilities, **options):
    from keras_transformer.translator import keras_translator

    model, _ = _copy_model()
    translator = keras_translator(model)
    translator._encode_texts = _encode
    translator._decode_rows = lambda rows: [" ".join(map(str, r)) for r in rows]

    def score(texts):
        return [(None, np.array(probabilities[t])) for t in texts]

    return BottomUpSummarizer(score, translator, **options), translator, model


def test_the_k_best_sentences_select_as_an_epsilon_between_the_kth_and_the_next():
    articles = ["a bb . ccc dddd . eeeee ff . g .", "ggg . h ."]
    probabilities = {articles[0]: [0.3, 0.8, 0.1, 0.5], articles[1]: [0.4, 0.35]}
    by_rank, translator, _ = _stand_in_summarizer(probabilities, epsilon=0.0, top_k=2)
    encoded, _, masks = by_rank.sources(articles)
    # The 2 best are those at or above 0.45 in the first article, both (0.3) in the second.
    for article, ids, mask, epsilon in zip(articles, encoded, masks, (0.45, 0.3),
                                           strict=True):
        by_epsilon = BottomUpSummarizer(by_rank.score, translator, epsilon)
        (want_ids,), _, (want,) = by_epsilon.sources([article])
        assert ids == want_ids and mask.tolist() == want.tolist()
    settings = SearchSettings(beam_size=1, max_length=5)
    assert by_rank.summarize(articles[:1], settings) == \
        BottomUpSummarizer(by_rank.score, translator, 0.45).summarize(articles[:1], settings)
    with pytest.raises(ValueError, match="top_k must be"):
        _stand_in_summarizer(probabilities, epsilon=0.0, top_k=-1)


def test_extract_then_abstract_reads_the_kept_sentences_alone_in_article_order():
    """source="extract": the copy model's source is the kept sentences joined in article
    order, as the plain translator encodes that text, nothing masked; an article with
    nothing kept is read whole."""
    articles = ["a bb . ccc dddd . eeeee ff . g .", "ggg . h ."]
    probabilities = {articles[0]: [0.3, 0.8, 0.1, 0.5], articles[1]: [0.1, 0.2]}
    summarizer, translator, model = _stand_in_summarizer(probabilities, epsilon=0.4,
                                                         source="extract")
    encoded, piece_scores, masks = summarizer.sources(articles)
    kept_text = "ccc dddd . g ."
    assert encoded[0] == translator.pieces([kept_text])[0] + [model.config.eos_id]
    assert piece_scores[0].tolist() == [0.8, 0.8, 0.8, 0.5, 0.5, 1.0]
    assert encoded[1] == translator.pieces([articles[1]])[0] + [model.config.eos_id]
    assert all(m.all() for m in masks) and summarizer.stats.unselected == 1
    settings = SearchSettings(beam_size=2, max_length=5)
    assert summarizer.summarize(articles, settings) == translator.translate(
        [kept_text, articles[1]], settings)
    with pytest.raises(ValueError, match="source must be one of"):
        _stand_in_summarizer(probabilities, epsilon=0.4, source="rewrite")


def test_a_pipelines_rule_comes_from_its_manifest_and_epsilon_given_selects_by_threshold():
    """export: the manifest's selector block (epsilon, top_k, source; an older export's
    epsilon alone) is the rule of the pipeline's summarizer; a given epsilon (export.summarize
    --epsilon) is a threshold, whatever top_k the export has; a bad rule is refused."""
    from types import SimpleNamespace

    from export.common import ExportError, _selector
    from export.kinds.seq2seq.pipeline import PipelineTranslator, selector_rule

    manifest = {"selector": {"export": "selector", "epsilon": 0.2}}  # an older export's
    assert selector_rule(manifest) == {"epsilon": 0.2, "top_k": 0, "source": "mask"}
    manifest["selector"] = {"export": "selector", "epsilon": 0.2, "top_k": 2,
                            "source": "extract"}
    selector = SimpleNamespace(scorer=SimpleNamespace(score=None), prepare=None)
    pipeline = PipelineTranslator(object(), selector, **selector_rule(manifest))
    assert pipeline.summarizer().describe() == {"epsilon": 0.2, "top_k": 2,
                                                "source": "extract"}
    assert pipeline.summarizer(0.3).describe() == {"epsilon": 0.3, "top_k": 0,
                                                   "source": "extract"}
    files = {"selector/manifest.json": {}}
    _selector({"selector": manifest["selector"]}, files)
    for key, value, message in (("top_k", -1, "selector.top_k"), ("top_k", True, "top_k"),
                                ("source", "rewrite", "selector.source")):
        with pytest.raises(ExportError, match=message):
            _selector({"selector": {**manifest["selector"], key: value}}, files)
