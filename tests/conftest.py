import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Under another Keras backend than TensorFlow (KERAS_BACKEND=jax or torch), tests marked
    tf_only (tf.function, tf.data, SavedModel, ...) are skipped, saying why."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return
    skip = pytest.mark.skip(reason=f"needs TensorFlow; KERAS_BACKEND={backend}")
    for item in items:
        if "tf_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _float32_policy():
    keras.mixed_precision.set_global_policy("float32")
    yield


@pytest.fixture
def seeded():
    """Seed Keras/TF/NumPy. Not autouse: tf.random.set_seed clears TF's kernel cache, which
    frees the resources of tensorflow-text tokenizers created earlier in the same module."""
    keras.utils.set_random_seed(0)


@pytest.fixture
def tiny_config():
    from keras_transformer.config import TransformerConfig

    return TransformerConfig.preset(
        "tiny", source_vocab_size=40, target_vocab_size=40, d_model=32, num_heads=4, d_ff=64,
        max_source_length=24, max_target_length=24, dropout=0.0)


def random_ids(rng: np.random.Generator, batch: int, length: int, vocab: int = 40):
    """Ids that avoid pad/bos/eos (0, 2, 3) so tests control where specials go."""
    return rng.integers(4, vocab, size=(batch, length)).astype("int32")
