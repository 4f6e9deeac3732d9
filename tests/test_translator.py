import numpy as np
import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.decoding import SearchSettings
from keras_transformer.models.transformer import Transformer
from keras_transformer.text.sources import encode_sources, pad_batch
from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece
from keras_transformer.translator import translate


@pytest.fixture(scope="module")
def spm_path(tmp_path_factory):
    words = ["red", "blue", "cat", "dog", "big", "small", "one", "two", "three", "I", "saw"]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=rng.integers(2, 7))) for _ in range(300)]
    return train_sentencepiece(texts, tmp_path_factory.mktemp("spm") / "spm", 60)


@pytest.fixture(scope="module")
def tokenizer(spm_path):
    return SentencePieceTokenizer(spm_path)


@pytest.fixture(scope="module")
def model(tokenizer):
    config = TransformerConfig.preset(
        "tiny", source_vocab_size=tokenizer.vocab_size, target_vocab_size=tokenizer.vocab_size,
        d_model=32, num_heads=4, d_ff=64, max_source_length=16, max_target_length=16,
        dropout=0.0)
    model = Transformer(config)
    model.build()
    return model


def test_batching_keeps_input_order(model, tokenizer):
    sentences = ["I saw two big red dogs", "cat", "one small blue cat", "dog dog"]
    # A fixed max_length: the default grows with the longest source of each batch.
    greedy = SearchSettings(beam_size=1, max_length=12)
    together = translate(model, tokenizer, tokenizer, sentences, greedy, batch_size=3)
    alone = [translate(model, tokenizer, tokenizer, [s], greedy)[0]
             for s in sentences]
    assert together == alone


def test_empty_and_over_long_sentences_are_clear_errors(model, tokenizer):
    with pytest.raises(ValueError, match="sentence 2 is empty"):
        translate(model, tokenizer, tokenizer, ["cat", "   "])
    long = " ".join(["red cat"] * 20)
    with pytest.raises(ValueError, match="max_source_length=16"):
        translate(model, tokenizer, tokenizer, [long])


def test_sources_end_with_eos_and_pad_with_zero(tokenizer):
    rows = encode_sources(["cat", "I saw a dog"], tokenizer.encode, 16, eos_id=3)
    assert all(r[-1] == 3 for r in rows)
    batch = pad_batch(rows)
    assert batch.shape == (2, max(len(r) for r in rows))
    assert (batch[0, len(rows[0]):] == 0).all()


def test_search_ids_rejects_ids_the_model_cannot_take(model):
    from keras_transformer.translator import keras_translator

    with pytest.raises(ValueError, match="17 tokens per row, more than this model's "
                                         "max_source_length=16"):
        keras_translator(model).search_ids(np.full((1, 17), 5, np.int32))
    with pytest.raises(ValueError, match=r"shape \(batch, length\), got int32 of shape \(4,\)"):
        keras_translator(model).search_ids(np.full((4,), 5, np.int32))
    with pytest.raises(ValueError, match="max_length=20 is more than this model's "
                                         "max_target_length=16"):
        keras_translator(model).search_ids(np.full((1, 4), 5, np.int32),
                                           SearchSettings(max_length=20))


def test_decoding_does_not_keep_a_model_alive(tokenizer):
    import gc
    import weakref

    from keras_transformer.translator import model_backend

    config = TransformerConfig.preset(
        "tiny", source_vocab_size=tokenizer.vocab_size, target_vocab_size=tokenizer.vocab_size,
        d_model=16, num_heads=2, d_ff=32, max_source_length=16, max_target_length=16)
    model = Transformer(config)
    model.build()
    compiled = type(model_backend(model))._compiled
    greedy = SearchSettings(beam_size=1, max_length=6)
    first = translate(model, tokenizer, tokenizer, ["red cat"], greedy)
    # the cached functions serve the second call
    assert translate(model, tokenizer, tokenizer, ["red cat"], greedy) == first
    assert model in compiled
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


SENTENCES = ["I saw two big red dogs", "cat", "one small blue cat", "dog dog", "three"]


def _repeats(ids):
    return len(ids) != len(set(ids))


def test_search_ids_passes_the_constraints_on(model, tokenizer):
    from keras_transformer.translator import keras_translator

    c = model.config
    source = pad_batch(encode_sources(SENTENCES, tokenizer.encode, c.max_source_length,
                                      c.eos_id), c.pad_id)
    for beam in (1, 3):
        translator, settings = keras_translator(model), SearchSettings(beam_size=beam,
                                                                        max_length=12)
        plain = translator.search_ids(source, settings).to_lists(c.eos_id)
        unique = translator.search_ids(
            source, settings.replace(no_repeat_ngram_size=1)).to_lists(c.eos_id)
        assert any(_repeats(ids) for ids in plain)  # the untrained model repeats itself
        assert not any(_repeats(ids) for ids in unique)
        long = translator.search_ids(source, settings.replace(min_length=12))
        assert long.tokens.shape == (len(SENTENCES), 12) and (long.tokens != c.eos_id).all()


class _Manifest:
    """What export's Translator reads of a manifest, for a tokenizer and a Keras model."""

    kind = "translator"

    def __init__(self, spm_path, config):
        from export.common import Manifest

        self.path, self.config = spm_path, config
        self.root = spm_path.parent
        self.require_kind = Manifest.require_kind.__get__(self)
        self.special_ids = {"pad": config.pad_id, "bos": config.bos_id, "eos": config.eos_id}

    def tokenizer_files(self):
        return self.path, self.path

    def __getitem__(self, key):
        return getattr(self.config, key)


def test_export_translator_passes_the_constraints_on(model, tokenizer, spm_path):
    from export.runtime.base import Translator
    from keras_transformer.translator import model_backend

    exported = Translator(_Manifest(spm_path, model.config), model_backend(model))
    for beam in (1, 3):
        options = SearchSettings(beam_size=beam, no_repeat_ngram_size=1, min_length=2)
        ids = exported.translate_ids(SENTENCES, options)
        assert not any(_repeats(row) for row in ids) and min(map(len, ids)) >= 2
        assert exported.translate(SENTENCES, options) == translate(
            model, tokenizer, tokenizer, SENTENCES, options)


def test_manifest_search_block_and_the_older_decoding_block():
    """An export's `search` block is its run's SearchSettings; an older export's `decoding`
    block is read the same; none gives the defaults; a bad value is one ExportError line
    naming the block and the option."""
    from export.common import ExportError, Manifest

    def manifest(data):
        m = Manifest.__new__(Manifest)
        m.data = data
        return m

    block = {"beam_size": 2, "alpha": 1.0, "no_repeat_ngram_size": 3, "min_length": 5}
    want = SearchSettings(**block)
    assert manifest({"search": block}).search == want
    assert manifest({"decoding": block}).search == want
    assert manifest({"search": block, "decoding": {"beam_size": 9}}).search == want
    assert manifest({}).search == SearchSettings()
    with pytest.raises(ExportError, match=r"^key 'decoding': beam_size must be an integer in "
                                          r"\[1, 64\], got 0$"):
        manifest({"decoding": {"beam_size": 0}}).search  # noqa: B018
    with pytest.raises(ExportError, match="^key 'search': unknown search option 'beam'"):
        manifest({"search": {"beam": 2}}).search  # noqa: B018
