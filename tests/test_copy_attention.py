import keras
import numpy as np
import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.copy_attention import (
    CopyGate,
    copy_distribution,
    copy_mixture_log_probs,
)
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
from keras_transformer.models.transformer import Transformer
from tests.conftest import random_ids
from tests.reference import copy_mixture, label_smoothed_loss, softmax

pytestmark = pytest.mark.usefixtures("seeded")


def _inputs(rng, rows=4, source=7, vocab=12):
    logits = rng.normal(size=(rows, vocab)).astype("float32") * 3
    gate = rng.normal(size=(rows, 1)).astype("float32")
    attention = softmax(rng.normal(size=(rows, source))).astype("float32")
    # Repeated ids in every row: 5 twice, 9 three times.
    source_ids = rng.integers(4, vocab, size=(rows, source)).astype("int32")
    source_ids[:, :2] = 5
    source_ids[:, 2:5] = 9
    return logits, gate, attention, source_ids


def test_mixture_matches_the_numpy_reference_with_repeated_source_ids():
    logits, gate, attention, source_ids = _inputs(np.random.default_rng(0))
    got = np.exp(np.asarray(copy_mixture_log_probs(logits, gate, attention, source_ids)))
    want = copy_mixture(logits, gate[:, 0], attention, source_ids)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)


def test_gate_at_one_gives_the_attention_mass_per_source_id():
    attention = np.array([[0.1, 0.2, 0.3, 0.4]], "float32")
    source_ids = np.array([[7, 5, 7, 7]], "int32")
    logits = np.zeros((1, 10), "float32")
    got = np.exp(np.asarray(copy_mixture_log_probs(logits, np.array([[60.0]], "float32"),
                                                   attention, source_ids)))
    want = np.zeros(10)
    want[7], want[5] = 0.1 + 0.3 + 0.4, 0.2
    np.testing.assert_allclose(got[0], want, atol=1e-6)
    np.testing.assert_allclose(np.asarray(copy_distribution(attention, source_ids, 10))[0],
                               want, atol=1e-7)


def test_gate_at_zero_gives_the_vocabulary_softmax():
    logits, _, attention, source_ids = _inputs(np.random.default_rng(1))
    gate = np.full((logits.shape[0], 1), -60.0, "float32")
    got = np.exp(np.asarray(copy_mixture_log_probs(logits, gate, attention, source_ids)))
    np.testing.assert_allclose(got, softmax(logits.astype(np.float64)), atol=1e-6)


def test_copy_distribution_of_every_target_position_reads_its_own_attention():
    rng = np.random.default_rng(2)
    attention = softmax(rng.normal(size=(2, 3, 5))).astype("float32")  # (B, T, S)
    source_ids = rng.integers(0, 6, size=(2, 5)).astype("int32")
    got = np.asarray(copy_distribution(attention, source_ids, 6))
    for b in range(2):
        for t in range(3):
            want = np.zeros(6)
            np.add.at(want, source_ids[b], attention[b, t])
            np.testing.assert_allclose(got[b, t], want, atol=1e-7)


def test_gradient_is_finite_where_the_copy_mass_is_zero():
    import tensorflow as tf

    logits, gate, attention, source_ids = (tf.constant(x) for x in
                                           _inputs(np.random.default_rng(3)))
    with tf.GradientTape() as tape:
        tape.watch([logits, gate, attention])
        loss = tf.reduce_sum(copy_mixture_log_probs(logits, gate, attention, source_ids))
    for grad in tape.gradient(loss, [logits, gate, attention]):
        assert np.all(np.isfinite(grad.numpy()))


def _copy_model(tiny_config, **changes):
    model = Transformer(tiny_config.replace(share_embeddings=True, copy_attention=True,
                                            **changes))
    model.build()
    return model


def test_model_output_is_the_mixture_of_its_own_logits_gate_and_attention(tiny_config):
    rng = np.random.default_rng(4)
    model = _copy_model(tiny_config)
    src, tgt = random_ids(rng, 2, 7), random_ids(rng, 2, 5)
    src[:, 1] = src[:, 4]  # a repeated source id
    src[1, 5:] = 0
    log_probs, scores = model.decode(tgt, *model.encode(src), source_ids=src,
                                     return_attention_scores=True)
    memory, mask = model.encode(src)
    x = model.target_embedding(tgt)
    hidden = model.decoder(x, memory, mask)
    logits = np.asarray(model.logits(hidden)).reshape(-1, 40)
    gate = np.asarray(scores["copy_gate"]).reshape(-1)
    attention = np.asarray(scores["cross"][-1]).mean(axis=1)  # the heads' mean, (B, T, S)
    np.testing.assert_allclose(np.asarray(scores["copy"]), attention, atol=1e-6)
    want = copy_mixture(logits, np.log(gate / (1 - gate)), attention.reshape(-1, 7),
                        np.repeat(src, 5, axis=0))
    np.testing.assert_allclose(np.exp(np.asarray(log_probs)).reshape(-1, 40), want, atol=1e-5)
    assert np.all(np.asarray(scores["copy"])[1, :, 5:] == 0.0)  # padding is never copied


def test_loss_on_the_mixture_equals_the_reference(tiny_config):
    rng = np.random.default_rng(5)
    model = _copy_model(tiny_config)
    src, tgt = random_ids(rng, 2, 6), random_ids(rng, 2, 5)
    labels = random_ids(rng, 2, 5)
    labels[:, :2] = src[:, :2]  # targets that are in the source
    labels[1, 3:] = 0
    log_probs = np.asarray(model((src, tgt)))
    got = float(MaskedLabelSmoothedCrossEntropy(0.1)(labels, log_probs))
    # The reference's own softmax of log-probabilities is the mixture again.
    assert got == pytest.approx(label_smoothed_loss(labels, log_probs, 0.1), rel=1e-5)


def test_copy_attention_needs_one_shared_vocabulary():
    with pytest.raises(ValueError, match="share_embeddings=True"):
        TransformerConfig.preset("tiny", copy_attention=True)
    with pytest.raises(ValueError, match="copy_head"):
        TransformerConfig.preset("tiny", share_embeddings=True, copy_attention=True,
                                 copy_head=8)


def test_decode_without_source_ids_is_refused(tiny_config):
    model = _copy_model(tiny_config)
    src = random_ids(np.random.default_rng(6), 1, 4)
    with pytest.raises(ValueError, match="needs source_ids"):
        model.decode(src, *model.encode(src))


def test_copy_gate_round_trips_its_config():
    gate = CopyGate(8, name="g")
    clone = CopyGate.from_config(gate.get_config())
    assert clone.d_model == 8
    assert isinstance(keras.layers.deserialize(keras.layers.serialize(gate)), CopyGate)
