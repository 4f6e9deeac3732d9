"""The whole stack learns: tiny models overfit small data with model.fit."""

import keras
import numpy as np
import pytest

from keras_transformer.decoding import SearchSettings
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.models.language_model import TransformerLM
from keras_transformer.models.transformer import Transformer
from keras_transformer.translator import keras_translator

pytestmark = pytest.mark.usefixtures("seeded")


def copy_reverse_batch(rng, batch=16, length=6, vocab=40):
    """Target = reversed source: learnable only through attention across positions."""
    body = rng.integers(4, vocab, size=(batch, length)).astype("int32")
    src = np.concatenate([body, np.full((batch, 1), 3, "int32")], 1)
    rev = body[:, ::-1]
    tgt_in = np.concatenate([np.full((batch, 1), 2, "int32"), rev], 1)
    tgt_out = np.concatenate([rev, np.full((batch, 1), 3, "int32")], 1)
    return src, tgt_in, tgt_out


@pytest.mark.slow
def test_tiny_transformer_overfits_and_decodes(tiny_config):
    rng = np.random.default_rng(0)
    src, tgt_in, tgt_out = copy_reverse_batch(rng)
    model = Transformer(tiny_config)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=MaskedLabelSmoothedCrossEntropy(0.0), metrics=[MaskedAccuracy()])
    history = model.fit((src, tgt_in), tgt_out, epochs=150, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < 0.05
    assert history.history["masked_accuracy"][-1] == 1.0
    # Greedy and beam decoding through the cache reproduce the memorised targets.
    for beam in (1, 3):
        result = keras_translator(model).search_ids(
            src, SearchSettings(beam_size=beam, max_length=10))
        np.testing.assert_array_equal(np.array(result.to_lists(3)), tgt_out[:, :-1])


def test_beam_one_equals_greedy_on_a_real_model(tiny_config):
    rng = np.random.default_rng(1)
    model = Transformer(tiny_config)
    model.build()
    src = rng.integers(4, 40, size=(5, 7)).astype("int32")
    src[3, 4:] = 0
    greedy = keras_translator(model).search_ids(src, SearchSettings(beam_size=1, max_length=12))
    from keras_transformer.decoding import beam_search
    from keras_transformer.generation import BackendStepper
    from keras_transformer.translator import model_backend

    stepper = BackendStepper(model_backend(model), src, beam_size=1, max_length=12)
    beam = beam_search(stepper.step, stepper.reorder, 5, beam_size=1, bos_id=2, eos_id=3,
                       max_length=12, alpha=0.6)
    np.testing.assert_array_equal(beam.tokens, greedy.tokens)


@pytest.mark.slow
def test_classifier_learns_a_token_rule(tiny_config):
    rng = np.random.default_rng(2)
    ids = rng.integers(4, 40, size=(64, 8)).astype("int32")
    ids[:32, 5:] = 0
    labels = (ids == 7).any(axis=1).astype("int32")  # "does the sentence contain token 7?"
    ids[labels == 0] = np.where(ids[labels == 0] == 7, 8, ids[labels == 0])
    model = TransformerClassifier(tiny_config, num_classes=2)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(ids, labels, epochs=60, batch_size=32, verbose=0)
    assert history.history["accuracy"][-1] == 1.0
    assert keras.ops.convert_to_numpy(model(ids)).shape == (64, 2)


def test_language_model_cache_and_generation(tiny_config, tmp_path):
    rng = np.random.default_rng(3)
    model = TransformerLM(tiny_config)
    ids = rng.integers(4, 40, size=(2, 9)).astype("int32")
    full = keras.ops.convert_to_numpy(model(ids))
    cache = model.init_cache(2, 9)
    for t in range(9):
        logits, cache = model.decode_step(ids[:, t], cache, t)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), full[:, t], atol=1e-4)

    # Greedy generation (temperature 0) equals repeated argmax over full forward passes.
    prompts = [[2, 5, 6], [2, 9]]
    generated = model.generate(prompts, 5, temperature=0.0, eos_id=-1)
    for prompt, new in zip(prompts, generated, strict=True):
        seq = list(prompt)
        for _ in range(5):
            seq.append(int(np.argmax(keras.ops.convert_to_numpy(model(np.array([seq], "int32")))[0, -1])))
        assert new == seq[len(prompt):]

    # Sampled tokens stay inside the top-k set of the model's own distribution.
    sampled = model.generate([[2, 5]], 1, top_k=3, seed=7)[0][0]
    top3 = np.argsort(-keras.ops.convert_to_numpy(model(np.array([[2, 5]], "int32")))[0, -1])[:3]
    assert sampled in top3
    # The search as one SearchSettings is the search the keywords give; not both at once.
    from keras_transformer.decoding import SearchSettings

    as_settings = SearchSettings(temperature=1.0, top_k=3, seed=7)
    assert model.generate([[2, 5], [2, 9]], 4, as_settings, eos_id=-1) == model.generate(
        [[2, 5], [2, 9]], 4, top_k=3, seed=7, eos_id=-1)
    with pytest.raises(ValueError, match="not both: top_k given beside settings"):
        model.generate([[2, 5]], 1, as_settings, top_k=3)

    path = tmp_path / "lm.keras"
    model.save(path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.models.load_model(path)(ids)), full)


@pytest.mark.slow
def test_xla_training_and_decoding_match_graph_mode(tiny_config):
    """jit_compile=True (XLA on the CPU) computes the same steps as plain graph mode."""
    rng = np.random.default_rng(4)
    src, tgt_in, tgt_out = copy_reverse_batch(rng, batch=8)
    losses = {}
    weights = None
    for jit in (False, True):
        model = Transformer(tiny_config)
        model.build()
        if weights is None:
            weights = model.get_weights()
        model.set_weights(weights)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=MaskedLabelSmoothedCrossEntropy(0.1), jit_compile=jit)
        losses[jit] = [float(model.train_on_batch((src, tgt_in), tgt_out)) for _ in range(4)]
    outputs = {
        j: keras_translator(model, jit_compile=j).search_ids(
            src, SearchSettings(beam_size=2, max_length=8)).tokens
        for j in (False, True)
    }
    np.testing.assert_array_equal(outputs[True], outputs[False])
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-4)
    assert losses[True][-1] < losses[True][0]


@pytest.mark.tf_only  # export is TensorFlow (SavedModel, TFLite)
def test_the_seq2seq_rebuild_refuses_a_classifier_by_name(tiny_config, tmp_path):
    from export.module import load_float32_model

    model = TransformerClassifier(tiny_config, num_classes=2)
    model(np.ones((1, 4), np.int32))
    model.save(tmp_path / "model.keras")
    with pytest.raises(ValueError, match="holds a TransformerClassifier; this rebuild takes a Transformer"):
        load_float32_model(tmp_path)
