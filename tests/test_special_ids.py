"""Special ids flow from one source: the run config trains the tokenizer with them, the
pipeline and the model config take them from the tokenizer, decoding uses the model's."""

from __future__ import annotations

import numpy as np
import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.decoding import SearchSettings
from keras_transformer.models.transformer import Transformer
from keras_transformer.text.pipeline import make_classification_dataset, make_translation_dataset
from keras_transformer.text.sources import encode_sources, pad_batch
from keras_transformer.translator import keras_translator, translate
from train.config import load_config
from train.tasks.base import transformer_config
from train.tokenizers import train_tokenizer

PAD, BOS, EOS = 1, 5, 4
IDS = [f"model.overrides.pad_id={PAD}", f"model.overrides.bos_id={BOS}",
       f"model.overrides.eos_id={EOS}"]
SMALL = ["tokenizer.vocab_size=60", "model.overrides.d_model=32", "model.overrides.d_ff=64",
         "model.overrides.dropout=0.0"]
WORDS = ["red", "blue", "cat", "dog", "big", "small", "one", "two", "three", "I", "saw"]


@pytest.fixture(scope="module")
def texts():
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(WORDS, size=rng.integers(2, 7))) for _ in range(300)]


@pytest.fixture(scope="module")
def config():
    return load_config(None, [*IDS, *SMALL])


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, config, texts):
    return train_tokenizer(config, texts, tmp_path_factory.mktemp("spm") / "spm")


def test_the_tokenizer_holds_the_configured_ids(tokenizer):
    assert tokenizer.special_ids == {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS}
    assert tokenizer.unk_id == 0  # the smallest id below 4 that no other special takes
    ids = tokenizer.encode(["I saw two big red dogs"])[0]
    assert not {PAD, BOS, EOS} & set(ids)
    assert tokenizer.decode([[BOS, *ids, EOS, 7, 8, PAD]]) == tokenizer.decode([ids])
    detok = tokenizer.detokenize(np.array([[BOS, *ids, EOS, 7, PAD]], np.int32))
    assert detok.numpy()[0].decode() == tokenizer.decode([ids])[0]


def test_pipeline_examples_put_the_tokenizer_ids_in_place(tokenizer, texts):
    sources, targets = texts[:64], texts[64:128]
    data = make_translation_dataset(sources, targets, tokenizer, tokenizer, max_source_length=16,
                                    max_target_length=16, tokens_per_batch=256, shuffle=False)
    reference = {(tuple(s), tuple(t)) for s, t in zip(tokenizer.encode(sources),
                                                       tokenizer.encode(targets), strict=True)}
    seen = set()
    for (source, target_in), target_out in data.as_numpy_iterator():
        for s, ti, to in zip(source, target_in, target_out, strict=True):
            n, m = list(s).index(EOS), list(to).index(EOS)
            assert (s[n + 1:] == PAD).all() and (to[m + 1:] == PAD).all()
            assert ti[0] == BOS and (ti[1: m + 1] == to[:m]).all() and (ti[m + 1:] == PAD).all()
            seen.add((tuple(s[:n]), tuple(to[:m])))
    assert seen == reference

    labeled = make_classification_dataset(texts[:5], [0, 1, 0, 1, 1], tokenizer, max_length=10,
                                          batch_size=5, shuffle=False)
    ids, _ = next(labeled.as_numpy_iterator())
    for row, expected in zip(ids, tokenizer.encode(texts[:5]), strict=True):
        assert list(row) == [*expected[:9], EOS] + [PAD] * (9 - min(len(expected), 9))


def test_model_config_copies_the_ids_and_rejects_a_disagreeing_override(config, tokenizer):
    model_config = transformer_config(config, tokenizer, tokenizer, max_source_length=16,
                                      max_target_length=16)
    assert (model_config.pad_id, model_config.bos_id, model_config.eos_id) == (PAD, BOS, EOS)
    other = load_config(None, [*SMALL, "model.overrides.bos_id=2"])
    with pytest.raises(ValueError, match=f"model.overrides.bos_id=2 but the tokenizer has "
                                         f"bos_id={BOS}; drop the override"):
        transformer_config(other, tokenizer, tokenizer, max_source_length=16,
                           max_target_length=16)


def reference_greedy(model, source_ids, steps):
    """Greedy decoding by full teacher-forced recomputation from the model's BOS."""
    c = model.config
    memory, mask = model.encode(source_ids, training=False)
    prefix = np.full((len(source_ids), 1), c.bos_id, np.int32)
    finished = np.zeros(len(source_ids), bool)
    outputs = [[] for _ in source_ids]
    for _ in range(steps):
        logits = np.asarray(model.decode(prefix, memory, mask, training=False))[:, -1]
        best = np.where(finished, c.pad_id, logits.argmax(-1)).astype(np.int32)
        for row, token in zip(outputs, best, strict=True):
            row.append(int(token))
        finished |= best == c.eos_id
        prefix = np.concatenate([prefix, best[:, None]], axis=1)
    return [row[: row.index(c.eos_id)] if c.eos_id in row else row for row in outputs]


def test_a_tiny_model_decodes_from_the_tokenizer_ids(config, tokenizer):
    import keras

    keras.utils.set_random_seed(0)
    model_config = transformer_config(config, tokenizer, tokenizer, max_source_length=16,
                                      max_target_length=16)
    model = Transformer(model_config)
    model.build()
    sentences = ["I saw two big red dogs", "cat", "one small blue cat"]
    rows = encode_sources(sentences, tokenizer.encode, 16, EOS)
    assert all(r[-1] == EOS for r in rows)
    source = pad_batch(rows, PAD)
    assert (source[1, len(rows[1]):] == PAD).all()
    expected = reference_greedy(model, source, 6)
    greedy = SearchSettings(beam_size=1, max_length=6)
    assert keras_translator(model).search_ids(source, greedy).to_lists(EOS) == expected
    assert translate(model, tokenizer, tokenizer, sentences, greedy) == tokenizer.decode(
        expected)


def test_old_configs_with_extra_still_load():
    config = TransformerConfig.preset("tiny", source_vocab_size=40, target_vocab_size=40)
    assert TransformerConfig.from_dict({**config.to_dict(), "extra": {"note": 1}}) == config
    model = Transformer.from_config({"config": {**config.to_dict(), "extra": {}}})
    assert model.config == config
    assert "extra" not in config.to_dict() and not hasattr(config, "head_dim")
