from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.encoder import Encoder
from keras_transformer.models.transformer import Transformer
from tests.conftest import random_ids

pytestmark = pytest.mark.usefixtures("seeded")

VARIANTS = {
    "post_ln_sinusoidal": {},
    "pre_ln_learned": {"pre_norm": True, "positional": "learned"},
    "untied": {"tie_output": False},
    "shared": {"share_embeddings": True},
    "copy_heads_mean": {"share_embeddings": True, "copy_attention": True},
    "copy_head_1_pre_ln": {"share_embeddings": True, "copy_attention": True, "copy_head": 1,
                           "pre_norm": True},
}


def make_model(config, **overrides):
    model = Transformer(config.replace(**overrides))
    model.build()
    return model


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_causality(tiny_config, variant):
    """Changing target tokens after position t leaves the logits at positions <= t unchanged."""
    rng = np.random.default_rng(0)
    model = make_model(tiny_config, **VARIANTS[variant])
    src, tgt = random_ids(rng, 2, 7), random_ids(rng, 2, 9)
    base = keras.ops.convert_to_numpy(model((src, tgt)))
    for t in (0, 3, 7):
        changed = tgt.copy()
        changed[:, t + 1:] = random_ids(rng, 2, 9 - t - 1)
        out = keras.ops.convert_to_numpy(model((src, changed)))
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-5)
        assert not np.allclose(out[:, t + 1:], base[:, t + 1:], atol=1e-3)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_padding_invariance(tiny_config, variant):
    """Appending padding to source or target leaves the real positions' logits unchanged."""
    rng = np.random.default_rng(1)
    model = make_model(tiny_config, **VARIANTS[variant])
    src, tgt = random_ids(rng, 2, 6), random_ids(rng, 2, 5)
    base = keras.ops.convert_to_numpy(model((src, tgt)))
    padded_src = np.pad(src, ((0, 0), (0, 5)))
    padded_tgt = np.pad(tgt, ((0, 0), (0, 4)))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model((padded_src, tgt))), base, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model((src, padded_tgt)))[:, :5], base, atol=1e-5)
    # Padding inside the batch: row 1 shorter than row 0 gives its own unpadded result.
    single = keras.ops.convert_to_numpy(model((src[1:, :3], tgt[1:])))
    mixed = src.copy()
    mixed[1, 3:] = 0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model((mixed, tgt)))[1:], single, atol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_decoding_equals_full_forward(tiny_config, variant):
    rng = np.random.default_rng(2)
    model = make_model(tiny_config, **VARIANTS[variant])
    src, tgt = random_ids(rng, 3, 8), random_ids(rng, 3, 10)
    src[2, 5:] = 0
    full = keras.ops.convert_to_numpy(model((src, tgt)))
    cross_kv, mask = model.encode_for_decoding(src)
    cache = model.init_cache(3, 12)
    for t in range(10):
        logits, cache = model.decode_step(tgt[:, t], cross_kv, mask, cache, t)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), full[:, t], atol=1e-4)


def test_config_round_trip_and_keras_file(tiny_config, tmp_path):
    rng = np.random.default_rng(3)
    model = make_model(tiny_config, pre_norm=True, share_embeddings=True)
    src, tgt = random_ids(rng, 2, 6), random_ids(rng, 2, 5)
    out = keras.ops.convert_to_numpy(model((src, tgt)))

    clone = Transformer.from_config(model.get_config())
    clone.build()
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone((src, tgt))), out)
    assert clone.config == model.config

    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, Transformer)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded((src, tgt))), out)


def test_keras_files_saved_before_the_shared_stack_base_still_load():
    """tests/data holds a pre-LN Transformer (two encoder and two decoder layers, so final
    LayerNorms too) and a post-LN TransformerLM, saved when Encoder and Decoder were written
    out each in full, with their outputs on fixed ids: the weights' paths in the files and
    the configs' keys are the stacks' saved interface."""
    data = Path(__file__).parent / "data"
    io = np.load(data / "tiny_models_io.npz")
    model = keras.models.load_model(data / "tiny_transformer.keras")
    assert isinstance(model, Transformer) and model.encoder.final_norm is not None
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model((io["source"], io["target"]), training=False)),
        io["transformer"], rtol=1e-5, atol=1e-6)
    lm = keras.models.load_model(data / "tiny_lm.keras")
    assert not lm.decoder.cross_attention and lm.decoder.final_norm is None
    np.testing.assert_allclose(keras.ops.convert_to_numpy(lm(io["target"], training=False)),
                               io["lm"], rtol=1e-5, atol=1e-6)


def test_stack_configs_keep_their_keys_and_round_trip():
    arguments = dict(num_layers=2, d_model=8, num_heads=2, d_ff=16, dropout=0.1,
                     attention_dropout=0.05, pre_norm=True, epsilon=1e-5)
    for stack, extra in ((Encoder, {}), (Decoder, {"cross_attention": False})):
        layer = stack(**arguments, **extra, name="stack")
        config = layer.get_config()
        assert list(config)[-len(arguments) - len(extra):] == [*arguments, *extra]
        assert {k: config[k] for k in [*arguments, *extra]} == {**arguments, **extra}
        clone = stack.from_config(config)
        assert clone.get_config() == config
        layers = clone.encoder_layers if stack is Encoder else clone.decoder_layers
        assert [sub.name for sub in layers] == ["layer_0", "layer_1"]
        assert all(sub.get_config()["epsilon"] == 1e-5 for sub in layers)
        if stack is Decoder:
            assert not any(sub.cross_attention for sub in layers)


def test_tied_and_shared_weights(tiny_config):
    tied = make_model(tiny_config)
    untied = make_model(tiny_config, tie_output=False)
    shared = make_model(tiny_config, share_embeddings=True)
    v, d = tiny_config.target_vocab_size, tiny_config.d_model
    assert untied.count_params() - tied.count_params() == v * d + v
    assert tied.count_params() - shared.count_params() == v * d
    assert shared.source_embedding.embeddings is shared.target_embedding.embeddings


def test_logits_are_embedding_transpose_when_tied(tiny_config):
    model = make_model(tiny_config)
    hidden = np.random.default_rng(4).normal(size=(2, 3, tiny_config.d_model)).astype("float32")
    matrix = keras.ops.convert_to_numpy(model.target_embedding.embeddings)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.logits(hidden)), hidden @ matrix.T, atol=1e-5)


def test_bad_inputs_are_clear_errors(tiny_config):
    model = make_model(tiny_config)
    with pytest.raises(ValueError, match=r"shape \(batch, length\)"):
        model((np.zeros((5,), "int32"), np.zeros((1, 3), "int32")))
    with pytest.raises(TypeError, match="integer token ids"):
        model((np.zeros((1, 3), "float32"), np.zeros((1, 3), "int32")))
    with pytest.raises(ValueError, match="source_ids is empty"):
        model((np.zeros((1, 0), "int32"), np.ones((1, 3), "int32")))
    with pytest.raises(ValueError, match="disagree on the batch size"):
        model((np.ones((2, 3), "int32"), np.ones((3, 3), "int32")))
    too_long = np.ones((1, tiny_config.max_source_length + 1), "int32")
    with pytest.raises(ValueError, match="max_source_length"):
        model((too_long, np.ones((1, 3), "int32")))
    with pytest.raises(ValueError, match="exceeds max_target_length"):
        model.init_cache(1, tiny_config.max_target_length + 1)


@pytest.mark.parametrize("changes,message", [
    ({"d_model": 30, "num_heads": 4}, "divisible by num_heads"),
    ({"dropout": 1.5}, "dropout must be in"),
    ({"positional": "rope"}, "positional must be one of"),
    ({"share_embeddings": True, "source_vocab_size": 50}, "joint vocabulary"),
    ({"num_heads": 0}, "positive integer"),
])
def test_config_validation(changes, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.preset("tiny", **changes)


def test_presets_match_the_paper():
    base = TransformerConfig.preset("base")
    assert (base.d_model, base.num_heads, base.d_ff, base.num_encoder_layers) == (512, 8, 2048, 6)
    small = TransformerConfig.preset("small")
    assert (small.d_model, small.num_heads, small.d_ff, small.num_decoder_layers) == (256, 4, 1024, 3)
    big = TransformerConfig.preset("big")
    assert (big.d_model, big.num_heads, big.d_ff, big.dropout) == (1024, 16, 4096, 0.3)
    with pytest.raises(ValueError, match="unknown preset"):
        TransformerConfig.preset("huge")
    with pytest.raises(ValueError, match="unknown TransformerConfig keys"):
        TransformerConfig.from_dict({"d_modle": 3})
