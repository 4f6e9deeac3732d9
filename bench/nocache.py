"""Decoding without the key/value cache, in every runtime: the cost the cache exists to avoid.

    python -m bench.nocache --configs small [--cache-dir /tmp/kt-bench] [--force]

The export formats hold only the cached step (`decode_step`), so this module makes a second,
benchmark-only export of each config beside bench.export_models' one: `encode` (source_ids
(B,S) -> memory (B,S,D), memory_mask (B,S)) and `decode_last` (prefix (B,t) int32, memory,
memory_mask -> logits (B,V) of the last position), as a SavedModel, an ONNX pair (tf2onnx) and
one .tflite with both signatures. `decode_last` is the Keras model's own `decode` over the
whole prefix, as `NoCacheStepper` runs it for the keras runtimes, so every runtime re-runs the
same decoder at every step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import weakref
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.common import CONFIGS, SEED, cache_directory  # noqa: E402
from bench.export_models import CACHE_DIR, CACHE_HELP, code_fingerprint, ensure  # noqa: E402
from keras_transformer.command_line import add_debug_flag, entry_point  # noqa: E402

FORMATS = ("savedmodel", "onnx", "tflite")
ONNX_FILES = {"encode": "encode.onnx", "decode_last": "decode_last.onnx"}
META = "nocache_meta.json"


def nocache_dir(cache_dir: Path, name: str) -> Path:
    return Path(cache_dir) / name / "nocache"


def _meta(name: str, seed: int) -> dict:
    return {"config_name": name, "seed": seed, "formats": list(FORMATS),
            "code_sha256": code_fingerprint()}


def is_current(cache_dir: Path, name: str, seed: int = SEED) -> bool:
    try:
        return json.loads((nocache_dir(cache_dir, name) / META).read_text()) == _meta(name, seed)
    except (OSError, ValueError):
        return False


def last_logits(model, prefix, memory, memory_mask):
    """prefix (B,t) -> logits (B,V) of its last position, decoding the whole prefix."""
    return model.decode(prefix, memory, memory_mask, training=False)[:, -1, :]


def _module(model):
    import tensorflow as tf

    d_model = model.config.d_model
    module = tf.Module()
    module.vars = [v.value for v in model.weights]  # tracked, or TFLite writes no weights

    def encode(source_ids):
        memory, mask = model.encode(source_ids, training=False)
        return {"memory": tf.identity(memory, name="memory"),
                "memory_mask": tf.identity(mask, name="memory_mask")}

    def decode_last(prefix, memory, memory_mask):
        return {"logits": tf.identity(last_logits(model, prefix, memory, memory_mask),
                                      name="logits")}

    module.encode = tf.function(encode, input_signature=[
        tf.TensorSpec([None, None], tf.int32, name="source_ids")])
    module.decode_last = tf.function(decode_last, input_signature=[
        tf.TensorSpec([None, None], tf.int32, name="prefix"),
        tf.TensorSpec([None, None, d_model], tf.float32, name="memory"),
        tf.TensorSpec([None, None], tf.bool, name="memory_mask")])
    return module


def export_nocache(model, out: Path) -> None:
    """`model`'s encode/decode_last as out/savedmodel, out/encode.onnx + decode_last.onnx and
    out/model.tflite."""
    import onnx
    import tensorflow as tf
    import tf2onnx

    from export.onnx_convert import safe_reshape_merging
    from export.onnx_nodes import ONNX_OPSET

    out.mkdir(parents=True, exist_ok=True)
    module = _module(model)
    signatures = {"encode": module.encode.get_concrete_function(),
                  "decode_last": module.decode_last.get_concrete_function()}
    tf.saved_model.save(module, str(out / "savedmodel"), signatures=signatures)
    for role, file in ONNX_FILES.items():
        function = getattr(module, role)
        with safe_reshape_merging():
            proto, _ = tf2onnx.convert.from_function(
                function, input_signature=function.input_signature, opset=ONNX_OPSET)
        onnx.checker.check_model(proto, full_check=True)
        onnx.save(proto, str(out / file))
    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(out / "savedmodel"), signature_keys=list(signatures))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    (out / "model.tflite").write_bytes(converter.convert())


def build(name: str, cache_dir: Path = CACHE_DIR, seed: int = SEED, force: bool = False) -> Path:
    """The no-cache exports of config `name`, made first if missing or stale."""
    out = nocache_dir(cache_dir, name)
    if not force and is_current(cache_dir, name, seed):
        print(f"{name}: reusing {out}")
        return out
    from export.module import load_float32_model

    start = time.perf_counter()
    ensure(name, cache_dir, seed)  # its run directory holds the model
    out.mkdir(parents=True, exist_ok=True)
    (out / META).unlink(missing_ok=True)  # stale until the exports below complete
    export_nocache(load_float32_model(Path(cache_dir) / name / "run"), out)
    (out / META).write_text(json.dumps(_meta(name, seed), indent=2))
    print(f"{name}: no-cache exports in {out} in {time.perf_counter() - start:.0f} s")
    return out


def build_in_child(name: str, cache_dir: Path = CACHE_DIR, seed: int = SEED) -> Path:
    """build() in a separate process: the caller's peak RSS stays its runtime's, and the
    onnxruntime and TFLite processes load no TensorFlow."""
    import subprocess
    import sys

    if not is_current(cache_dir, name, seed):
        subprocess.run([sys.executable, "-m", "bench.nocache", "--configs", name,
                        "--cache-dir", str(cache_dir), "--seed", str(seed)], check=True)
    return nocache_dir(cache_dir, name)


class _SavedModel:
    def __init__(self, root: Path):
        import tensorflow as tf

        self.tf = tf
        loaded = tf.saved_model.load(str(root / "savedmodel"))
        self._keep = loaded
        self._encode, self._decode = (loaded.signatures["encode"],
                                      loaded.signatures["decode_last"])

    def encode(self, source_ids):
        out = self._encode(source_ids=self.tf.constant(source_ids))
        return out["memory"], out["memory_mask"]

    def repeat(self, x, times):
        return self.tf.repeat(x, times, axis=0)

    def decode_last(self, prefix, memory, memory_mask):
        return self._decode(prefix=self.tf.constant(prefix), memory=memory,
                            memory_mask=memory_mask)["logits"].numpy()


class _NumPy:
    def repeat(self, x, times):
        return np.repeat(x, times, axis=0)


class _Onnx(_NumPy):
    def __init__(self, root: Path):
        import onnxruntime as ort

        def session(file):
            options = ort.SessionOptions()
            options.log_severity_level = 3
            return ort.InferenceSession(str(root / file), options,
                                        providers=["CPUExecutionProvider"])

        self._encode = session(ONNX_FILES["encode"])
        self._decode = session(ONNX_FILES["decode_last"])
        # tf2onnx names the graph's inputs after the signature's arguments.
        self._names = [i.name for i in self._decode.get_inputs()]

    def encode(self, source_ids):
        memory, mask = self._encode.run(["memory", "memory_mask"], {"source_ids": source_ids})
        return memory, mask

    def decode_last(self, prefix, memory, memory_mask):
        feeds = dict(zip(self._names, (prefix, memory, memory_mask), strict=True))
        return self._decode.run(["logits"], feeds)[0]


class _TFLite(_NumPy):
    def __init__(self, root: Path):
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=str(root / "model.tflite"),
                                  num_threads=os.cpu_count())
        self._encode = interpreter.get_signature_runner("encode")
        self._decode = interpreter.get_signature_runner("decode_last")

    def encode(self, source_ids):
        out = self._encode(source_ids=source_ids)
        return out["memory"], out["memory_mask"]

    def decode_last(self, prefix, memory, memory_mask):
        return self._decode(prefix=prefix, memory=memory, memory_mask=memory_mask)["logits"]


class _Keras:
    """The model itself, through one pair of tf.functions per (model, XLA)."""

    _compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, model, jit_compile: bool):
        import tensorflow as tf

        self.tf = tf
        per_model = self._compiled.setdefault(model, {})
        if jit_compile not in per_model:
            per_model[jit_compile] = (
                tf.function(lambda ids: model.encode(ids, training=False),
                            jit_compile=jit_compile, reduce_retracing=True),
                tf.function(lambda *args: last_logits(model, *args),
                            jit_compile=jit_compile, reduce_retracing=True))
        self._encode, self._decode = per_model[jit_compile]

    def encode(self, source_ids):
        return self._encode(self.tf.constant(source_ids))

    def repeat(self, x, times):
        return self.tf.repeat(x, times, axis=0)

    def decode_last(self, prefix, memory, memory_mask):
        return self._decode(self.tf.constant(prefix), memory, memory_mask).numpy()


def load_runtime(runtime: str, name: str, cache_dir: Path = CACHE_DIR, model=None):
    """encode/decode_last of config `name` in `runtime` (keras and keras-xla take `model`)."""
    if runtime in ("keras", "keras-xla"):
        return _Keras(model, jit_compile=runtime == "keras-xla")
    return open_export(runtime, build_in_child(name, cache_dir))


def open_export(runtime: str, root: Path):
    """encode/decode_last of the no-cache exports in `root`, in savedmodel, onnx or tflite."""
    return {"savedmodel": _SavedModel, "onnx": _Onnx, "tflite": _TFLite}[runtime](root)


class NoCacheStepper:
    """step/reorder that re-run the decoder over the whole prefix and keep the last position.

    Memory is encoded once (as the cached path does) and repeated per beam, in the runtime's
    own arrays (TF tensors stay tensors); reorder gathers the prefix rows.
    """

    def __init__(self, runtime, source_ids: np.ndarray, *, beam_size: int):
        self.runtime = runtime
        memory, mask = runtime.encode(np.asarray(source_ids, np.int32))
        if beam_size > 1:
            memory, mask = runtime.repeat(memory, beam_size), runtime.repeat(mask, beam_size)
        self.memory, self.mask = memory, mask
        self.prefix = np.zeros((len(source_ids) * beam_size, 0), np.int32)

    def step(self, tokens: np.ndarray, index: int) -> np.ndarray:
        self.prefix = np.concatenate([self.prefix, np.asarray(tokens, np.int32)[:, None]], 1)
        return np.asarray(self.runtime.decode_last(self.prefix, self.memory, self.mask))

    def reorder(self, indices: np.ndarray) -> None:
        self.prefix = self.prefix[indices]


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["small", "base"], choices=CONFIGS)
    parser.add_argument("--cache-dir", type=cache_directory, default=CACHE_DIR,
                        help=CACHE_HELP)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--force", action="store_true", help="re-export even if current")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    for name in args.configs:
        build(name, args.cache_dir, args.seed, args.force)


if __name__ == "__main__":
    sys.exit(main())
