"""The masked language model's head on the masked positions only, on every Keras backend: its
logits are the all-positions logits at those positions, and the loss, the masked accuracy
and a training step's update are those of the all-positions head on the same batch."""

import keras
import numpy as np
import pytest

MASK, PAD, EOS = 4, 0, 3


def masked_batch(rng, vocab: int, slots: int):
    """A batch as the masked-LM pipeline gives it, made in NumPy: ids with padding rows,
    targets (PAD where not masked), and the NumPy reference of the gathered form: each row's
    masked positions in order, then position 0 with label PAD up to `slots`."""
    ids = rng.integers(5, vocab, size=(4, 12)).astype("int32")
    ids[:, -1] = EOS
    ids[1, 7:] = PAD
    ids[3, 4:] = PAD
    ordinary = ids > MASK
    chosen = ordinary & (rng.random(ids.shape) < 0.3)
    chosen[2] = False  # a row with nothing masked: every slot padding
    chosen[0, :slots + 2] = ordinary[0, :slots + 2]  # one row fills every slot
    chosen[0, slots:] = False
    targets = np.where(chosen, ids, PAD).astype("int32")
    inputs = np.where(chosen, MASK, ids).astype("int32")
    positions = np.zeros((len(ids), slots), "int32")
    labels = np.full((len(ids), slots), PAD, "int32")
    for row in range(len(ids)):
        where = np.flatnonzero(chosen[row])
        positions[row, : len(where)] = where
        labels[row, : len(where)] = ids[row, where]
    return inputs, targets, positions, labels


def built(config, weights=None):
    from keras_transformer.models.masked_lm import TransformerMaskedLM

    model = TransformerMaskedLM(config)
    model.build()
    bias = np.random.default_rng(1).normal(size=model.head_bias.shape).astype("float32")
    model.head_bias.assign(bias)
    if weights is not None:
        model.set_weights(weights)
    return model


def test_the_gathered_logits_are_the_all_positions_logits_at_those_positions(tiny_config):
    rng = np.random.default_rng(0)
    inputs, _, positions, _ = masked_batch(rng, tiny_config.source_vocab_size, slots=5)
    model = built(tiny_config)
    every = keras.ops.convert_to_numpy(model(inputs))
    gathered = keras.ops.convert_to_numpy(model((inputs, positions)))
    assert gathered.shape == (*positions.shape, tiny_config.source_vocab_size)
    np.testing.assert_allclose(gathered, np.take_along_axis(every, positions[..., None], 1),
                               atol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_accuracy_and_a_training_step_are_those_of_the_all_positions_head(tiny_config,
                                                                              smoothing):
    import keras

    from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
    from keras_transformer.metrics import MaskedAccuracy

    rng = np.random.default_rng(2)
    inputs, targets, positions, labels = masked_batch(rng, tiny_config.source_vocab_size,
                                                      slots=5)
    every = built(tiny_config)
    gathered = built(tiny_config, every.get_weights())
    for model in (every, gathered):
        # Plain SGD at rate 1: the update is minus the gradient, compared as it is.
        model.compile(optimizer=keras.optimizers.SGD(1.0),
                      loss=MaskedLabelSmoothedCrossEntropy(smoothing, PAD),
                      metrics=[MaskedAccuracy(PAD, name="masked_accuracy")])
    full = every.evaluate(inputs, targets, batch_size=len(inputs), verbose=0,
                          return_dict=True)
    few = gathered.evaluate((inputs, positions), labels, batch_size=len(inputs), verbose=0,
                            return_dict=True)
    assert full.keys() == few.keys()
    for key in full:
        np.testing.assert_allclose(few[key], full[key], atol=1e-5, err_msg=key)
    # The loss against a NumPy reference over the masked pieces alone.
    logits = keras.ops.convert_to_numpy(every(inputs)).astype("float64")
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    picked = targets != PAD
    gold = np.take_along_axis(logp, targets[..., None], -1)[..., 0][picked]
    nll = -((1 - smoothing) * gold + smoothing * logp[picked].mean(-1))
    np.testing.assert_allclose(few["loss"], nll.mean(), atol=1e-5)

    before = [keras.ops.convert_to_numpy(w).copy() for w in every.weights]
    every.train_on_batch(inputs, targets)
    gathered.train_on_batch((inputs, positions), labels)
    for w0, a, b in zip(before, every.weights, gathered.weights, strict=True):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(b) - w0, keras.ops.convert_to_numpy(a) - w0, atol=1e-5,
                                   err_msg=a.path)


def test_the_gathered_head_survives_a_keras_file(tiny_config, tmp_path):
    import keras

    import keras_transformer  # noqa: F401

    inputs, _, positions, _ = masked_batch(np.random.default_rng(3),
                                           tiny_config.source_vocab_size, slots=5)
    model = built(tiny_config)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded((inputs, positions))),
                               keras.ops.convert_to_numpy(model((inputs, positions))), atol=1e-6)


def test_positions_that_are_not_an_integer_matrix_are_refused(tiny_config):
    model = built(tiny_config)
    ids = np.array([[5, 6, EOS]], "int32")
    with pytest.raises(ValueError, match="positions must be integer positions"):
        model((ids, np.array([[0.0, 1.0]], "float32")))
    with pytest.raises(ValueError, match="positions must be integer positions"):
        model((ids, np.array([0, 1], "int32")))
