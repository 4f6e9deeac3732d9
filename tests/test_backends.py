"""The library on the Keras backend KERAS_BACKEND names (tensorflow, jax or torch): cached
decoding against an oracle that runs the full forward pass at every step, training through
model.fit, and .keras files that load under another backend with the same outputs."""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.decoding import SearchSettings, search
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.transformer import Transformer
from keras_transformer.translator import keras_translator, model_backend
from tests.conftest import random_ids

ROOT = Path(__file__).resolve().parent.parent


class UncachedStepper:
    """The searches' step/reorder over the model's full forward pass on each row's whole
    prefix: no cache, no compiled step, so nothing the cached path does is shared."""

    def __init__(self, model, source_ids, beam_size):
        self.model = model
        self.source = np.repeat(source_ids, beam_size, axis=0)
        self.prefixes = np.zeros((len(self.source), 0), np.int32)

    def step(self, tokens, index):
        assert index == self.prefixes.shape[1]
        self.prefixes = np.concatenate([self.prefixes, np.asarray(tokens, np.int32)[:, None]], 1)
        logits = self.model((self.source, self.prefixes), training=False)
        return keras.ops.convert_to_numpy(logits)[:, -1].astype(np.float64)

    def reorder(self, indices):
        self.prefixes = self.prefixes[indices]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_search_equals_the_uncached_oracle(tiny_config, beam_size):
    keras.utils.set_random_seed(4)
    model = Transformer(tiny_config)
    model.build()
    src = random_ids(np.random.default_rng(4), 4, 7)
    src[:, -1] = tiny_config.eos_id
    src[2, 4:] = tiny_config.pad_id
    settings = SearchSettings(beam_size=beam_size, alpha=0.6, max_length=9)
    cached = keras_translator(model).search_ids(src, settings)
    oracle = search(UncachedStepper(model, src, beam_size), len(src), settings,
                    bos_id=tiny_config.bos_id, eos_id=tiny_config.eos_id,
                    pad_id=tiny_config.pad_id)
    np.testing.assert_array_equal(cached.tokens, oracle.tokens)
    np.testing.assert_allclose(cached.scores, oracle.scores, atol=1e-4)


def test_the_backend_keeps_the_cache_in_its_own_tensors(tiny_config):
    model = Transformer(tiny_config)
    model.build()
    backend = model_backend(model)
    expected = ("KerasBackend" if keras.backend.backend() == "tensorflow"
                else "KerasOpsBackend")
    assert type(backend).__name__ == expected
    cache = backend.init_cache(2, 5)
    # TensorFlow's runtime keeps them as tf.Variables (cache.variables.VariableCache).
    arrays = cache.variables if hasattr(cache, "variables") else cache
    assert not isinstance(arrays, np.ndarray) and not isinstance(arrays[0], np.ndarray)


def copy_reverse(rng, batch=16, length=6, vocab=40):
    body = rng.integers(4, vocab, size=(batch, length)).astype("int32")
    rev = body[:, ::-1]
    return (np.concatenate([body, np.full((batch, 1), 3, "int32")], 1),
            np.concatenate([np.full((batch, 1), 2, "int32"), rev], 1),
            np.concatenate([rev, np.full((batch, 1), 3, "int32")], 1))


def test_fit_with_dropout_learns_and_round_trips_through_a_keras_file(tiny_config, tmp_path):
    keras.utils.set_random_seed(0)
    src, tgt_in, tgt_out = copy_reverse(np.random.default_rng(0))
    model = Transformer(dataclasses.replace(tiny_config, dropout=0.1))
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=MaskedLabelSmoothedCrossEntropy(0.0), metrics=[MaskedAccuracy()])
    history = model.fit((src, tgt_in), tgt_out, epochs=120, batch_size=16, verbose=0)
    losses = history.history["loss"]
    # Uniform guessing over 40 tokens costs log(40) = 3.7; the reversal is learnt.
    assert losses[0] > 3.0 and losses[-1] < 0.3
    model.save(tmp_path / "m.keras")
    again = keras.models.load_model(tmp_path / "m.keras")
    for a, b in zip(model.get_weights(), again.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model((src, tgt_in))),
        keras.ops.convert_to_numpy(again((src, tgt_in))))
    greedy = keras_translator(again).search_ids(
        src, SearchSettings(beam_size=1, max_length=8)).to_lists(3)
    assert np.mean(np.array(greedy) == tgt_out[:, :-1]) > 0.9


SAVE = """
import numpy as np, keras, keras_transformer
from keras_transformer.config import TransformerConfig
from keras_transformer.models.transformer import Transformer
keras.utils.set_random_seed(1)
c = TransformerConfig.preset("tiny", source_vocab_size=40, target_vocab_size=40, d_model=32,
                             num_heads=4, d_ff=64, max_source_length=12, max_target_length=12)
m = Transformer(c)
m.build()
m.save("{dir}/m.keras")
"""

LOAD = """
import numpy as np, keras, keras_transformer
m = keras.models.load_model("{dir}/m.keras")
rng = np.random.default_rng(0)
src, tgt = rng.integers(4, 40, (3, 8)).astype("int32"), rng.integers(4, 40, (3, 5)).astype("int32")
np.save("{dir}/{name}.npy", keras.ops.convert_to_numpy(m((src, tgt))))
"""


def _other_backend():
    here = keras.backend.backend()
    for name, module in (("jax", "jax"), ("torch", "torch"), ("tensorflow", "tensorflow")):
        if name != here and importlib.util.find_spec(module) is not None:
            return name
    return None


def _run(code, backend):
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)


@pytest.mark.slow
def test_a_keras_file_saved_here_loads_under_another_backend(tmp_path):
    other = _other_backend()
    if other is None:
        pytest.skip("no second Keras backend installed beside this one")
    here = keras.backend.backend()
    _run(SAVE.format(dir=tmp_path), here)
    _run(LOAD.format(dir=tmp_path, name=here), here)
    _run(LOAD.format(dir=tmp_path, name=other), other)
    np.testing.assert_allclose(np.load(tmp_path / f"{other}.npy"),
                               np.load(tmp_path / f"{here}.npy"), atol=2e-5)


def test_tensorflow_only_training_options_are_refused_elsewhere():
    from train.distribute import OneDevice, make_strategy, resolve_jit
    from train.tasks import check_task

    backend = keras.backend.backend()
    if backend == "tensorflow":
        pytest.skip("the refusals apply under JAX and PyTorch")
    # JAX runs mirrored as keras.distribution.DataParallel (one device here: no replicas) and
    # multiworker over jax.distributed (tests/test_jax_processes.py).
    refused = () if backend == "jax" else ("mirrored", "multiworker")
    for strategy in refused:
        with pytest.raises(ValueError, match=f"training.strategy={strategy} is a tf.distribute "
                                             f"strategy, which needs KERAS_BACKEND=tensorflow"):
            make_strategy(strategy)
    assert isinstance(make_strategy("auto"), OneDevice)
    if backend == "jax":
        assert isinstance(make_strategy("mirrored"), OneDevice)
    for task in ("classification", "language_model"):
        with pytest.raises(ValueError, match=f"task {task} reads its data with tf.data"):
            check_task(task)
    check_task("translation")
    # JAX compiles whatever the config says; PyTorch compiles only when asked.
    assert resolve_jit(False) is (backend == "jax")
    assert resolve_jit(True) is True


STEPS = """
import numpy as np, keras, keras_transformer
from keras_transformer.config import TransformerConfig
from keras_transformer.losses import MaskedLabelSmoothedCrossEntropy
from keras_transformer.models.transformer import Transformer
from keras_transformer.schedules import TransformerSchedule
keras.utils.set_random_seed(2)  # the dropout layers' seeds; the weights are the file's
c = TransformerConfig.preset("tiny", source_vocab_size=40, target_vocab_size=40, d_model=32,
                             num_heads=4, d_ff=64, max_source_length=12, max_target_length=12,
                             dropout=0.1)
m = Transformer(c)
m.build()
weights = np.load("{dir}/start.npz")
m.set_weights([weights[f"arr_{{i}}"] for i in range(len(weights.files))])
m.compile(optimizer=keras.optimizers.Adam(TransformerSchedule(32, 4, 2.0), beta_2=0.98,
                                          epsilon=1e-9),
          loss=MaskedLabelSmoothedCrossEntropy(0.1))
rng = np.random.default_rng(0)
batches = []
for rows, length in ((5, 8), (3, 11)):
    src, tgt = rng.integers(4, 40, (2, rows, length)).astype("int32")
    tgt[:, -2:] = 0
    batches.append(((src, tgt), np.roll(tgt, -1, axis=1)))
losses = [float(m.train_on_batch(*batches[i % 2])) for i in range(4)]
np.save("{dir}/{name}_losses.npy", np.array(losses))
"""


@pytest.mark.slow
def test_training_steps_with_dropout_are_the_same_under_another_backend(tmp_path):
    """The training step (loss, optimizer, schedule, the dropout masks from the layers'
    seeds) from the same weights on the same batches is the same computation on every
    backend: a run's outcome differs between backends only by the initial weights (each
    backend's random initializers) and the order of its batches."""
    other = _other_backend()
    if other is None:
        pytest.skip("no second Keras backend installed beside this one")
    here = keras.backend.backend()
    keras.utils.set_random_seed(2)
    model = Transformer(TransformerConfig.preset(
        "tiny", source_vocab_size=40, target_vocab_size=40, d_model=32, num_heads=4, d_ff=64,
        max_source_length=12, max_target_length=12, dropout=0.1))
    model.build()
    np.savez(tmp_path / "start.npz", *model.get_weights())
    for name in (here, other):
        _run(STEPS.format(dir=tmp_path, name=name), name)
    ours, theirs = (np.load(tmp_path / f"{n}_losses.npy") for n in (here, other))
    assert ours[2] < ours[0] and ours[3] < ours[1]  # it learns the two batches
    np.testing.assert_allclose(theirs, ours, rtol=1e-4)


DATA_PARALLEL = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import dataclasses, json
import jax, keras, numpy as np
from keras_transformer.config import TransformerConfig
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.transformer import Transformer
from train.distribute import JaxDataParallel, distribute, make_strategy, strategy_name
from train.losses import token_loss

config = TransformerConfig.preset("tiny", source_vocab_size=40, target_vocab_size=40,
                                  d_model=32, num_heads=4, d_ff=64, max_source_length=12,
                                  max_target_length=12, dropout=0.1)
rng = np.random.default_rng(0)


def batch(rows, length):
    ids = lambda: rng.integers(4, 40, (rows, length)).astype("int32")
    labels = ids()
    labels[:, length - 2:] = 0  # padding, left out of the loss
    return (ids(), ids()), labels


class Batches(keras.utils.PyDataset):
    # Odd row counts: a batch whose rows the devices cannot share evenly as it is.
    def __init__(self):
        super().__init__()
        self.pad_id = 0
        self.batches = [batch(5, 8), batch(4, 6), batch(3, 8), batch(6, 10)]

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]


data = Batches()


def trained(strategy, initial=None):
    keras.utils.set_random_seed(3)  # the dropout layers' seeds
    with strategy.scope():
        model = Transformer(config)
        model.build()
        if initial is not None:
            model.set_weights(initial)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=token_loss(0.1, 0, strategy.num_replicas_in_sync),
                      metrics=[MaskedAccuracy()])
    start = model.get_weights()
    history = model.fit(distribute(strategy, lambda: data), epochs=2, shuffle=False, verbose=0)
    devices = len(model.trainable_weights[0].value.sharding.device_set)
    return start, model.get_weights(), history.history["loss"], devices


assert len(jax.devices()) == 2
start, single, single_loss, _ = trained(make_strategy("default"))
strategy = make_strategy("auto")
_, parallel, parallel_loss, devices = trained(strategy, start)
print(json.dumps(dict(
    kind=type(strategy).__name__, name=strategy_name(strategy),
    replicas=strategy.num_replicas_in_sync, devices=devices, loss=type(token_loss(0.1, 0, 2)).__name__,
    single_loss=single_loss, parallel_loss=parallel_loss,
    diff=max(float(np.max(np.abs(a - b))) for a, b in zip(single, parallel, strict=True)),
    moved=max(float(np.max(np.abs(a - b))) for a, b in zip(single, start, strict=True)))))
"""


@pytest.mark.slow
def test_a_jax_data_parallel_fit_takes_the_single_device_steps(tmp_path):
    if keras.backend.backend() != "jax":
        pytest.skip("keras.distribution.DataParallel runs under KERAS_BACKEND=jax")
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", DATA_PARALLEL], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["kind"], result["name"], result["replicas"], result["devices"]) == (
        "JaxDataParallel", "DataParallel", 2, 2)
    # One program over the global batch: the plain token mean is the global mean.
    assert result["loss"] == "MaskedLabelSmoothedCrossEntropy"
    # Two epochs of four odd-sized batches, dropout on: the same steps on two devices.
    assert result["moved"] > 1e-3
    # Adam's step is about lr whatever a gradient's size, so where a gradient is near zero the
    # float32 rounding of another reduction order moves a weight by a small share of lr (the
    # share differs between CPUs): a split that changed the gradients would move them by lr.
    assert result["diff"] < 1e-2 * result["moved"], result
    # The logged epoch loss weighs each batch's loss by its rows, the added ones included.
    np.testing.assert_allclose(result["parallel_loss"], result["single_loss"], rtol=1e-3)


# The modules that are TensorFlow by nature (tf.Variable caches, tf.data); every other module
# of the library, and the training modules of the tasks that train anywhere, import without it.
TENSORFLOW_MODULES = ("keras_transformer.tf_backend", "keras_transformer.cache.variables",
                      "keras_transformer.text.pipeline", "keras_transformer.text.masking",
                      "keras_transformer.text.noising")
TRAINING_MODULES = ("train.cli", "train.run", "train.engine", "train.distribute",
                    "train.evaluate", "train.tasks.translation", "train.tasks.summarization",
                    "bench.gpu_train", "bench.backends")


def test_the_library_imports_without_tensorflow():
    backend = keras.backend.backend()
    if backend == "tensorflow":
        pytest.skip("Keras itself imports TensorFlow under KERAS_BACKEND=tensorflow")
    library = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "keras_transformer").rglob("*.py"))
    modules = [m for m in library if m not in TENSORFLOW_MODULES] + list(TRAINING_MODULES)
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "import keras_transformer; keras_transformer.register_serializables()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'tensorflow_text')))")
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert len(modules) > 30


def test_keras_backend_is_checked_before_keras_is_imported(monkeypatch):
    from keras_transformer.command_line import CommandError, check_keras_backend

    monkeypatch.setenv("KERAS_BACKEND", "numpy")
    with pytest.raises(CommandError, match="KERAS_BACKEND=numpy is not a backend this project "
                                           "runs on; set it to tensorflow, jax, torch"):
        check_keras_backend()
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "jax" else real(name, *a))
    with pytest.raises(CommandError, match="KERAS_BACKEND=jax but jax is not installed"):
        check_keras_backend()
    monkeypatch.undo()
    monkeypatch.setenv("KERAS_BACKEND", keras.backend.backend())  # the one installed here
    assert check_keras_backend() == keras.backend.backend()


def _train_tiny(out: Path, *extra: str, devices: int = 1) -> subprocess.CompletedProcess:
    """`python -m train` of a tiny demo run under this backend, on `devices` CPU devices."""
    from tests.tiny_runs import train_command

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    return subprocess.run(train_command(out, *extra), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow
def test_python_m_train_with_data_parallel_on_two_devices_ends_where_one_device_ends(tmp_path):
    """The whole command, as a user runs it: `training.strategy: mirrored` over two JAX
    devices trains the run one device trains (dropout 0: the same steps), and says so."""
    if keras.backend.backend() != "jax":
        pytest.skip("keras.distribution.DataParallel runs under KERAS_BACKEND=jax")
    one = _train_tiny(tmp_path / "one")
    two = _train_tiny(tmp_path / "two", "training.strategy=mirrored", devices=2)
    for done in (one, two):
        assert done.returncode == 0, done.stderr[-3000:]
    assert "strategy DataParallel with 2 replica(s)" in two.stdout + two.stderr
    single, parallel = (json.loads((tmp_path / n / "metrics.json").read_text())
                        for n in ("one", "two"))
    assert parallel["steps"] == single["steps"] == 12
    # The same steps: the weights move from epoch 1 to epoch 3 as they move on one device
    # (Adam scales each update by its gradient's size, so a near-zero gradient summed in
    # another order may move its weight differently by about the learning rate: the norm of
    # the whole movement is compared), with the same training losses and test translations.
    def movement(run):
        first, last = (np.load(tmp_path / run / "checkpoints" / f"epoch_{e:04d}.npz")
                       for e in (1, 3))
        return np.concatenate([(last[k] - first[k]).ravel() for k in first.files])

    alone, together = movement("one"), movement("two")
    assert np.linalg.norm(together - alone) < 0.02 * np.linalg.norm(alone)
    np.testing.assert_allclose(parallel["epoch_losses"], single["epoch_losses"], rtol=1e-4)
    assert (tmp_path / "two" / "test.hyp").read_text() == (
        tmp_path / "one" / "test.hyp").read_text()
    # Keras weighs each batch's logged loss by its rows, the rows added to make an odd dev
    # batch divide among the devices included: the logged dev loss moves a little.
    assert parallel["dev_loss"] == pytest.approx(single["dev_loss"], rel=1e-2)
    assert parallel["dev_loss"] < parallel["epoch_losses"][0]  # it learned
