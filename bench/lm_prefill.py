"""A language model's prompt in ONNX Runtime: stepwise through decode_step, or one prefill graph.

    python -m bench.lm_prefill [--configs tiny small] [--prompts 8 32 128] [--batch 1 3]

The export's way is stepwise: the prompt's tokens go one per call through decoder_step.onnx
(export/onnx_graph.py), each step's keys/values written into the cache in place, as
export.runtime's Generator runs it. The alternative is a prefill graph: every prompt position
in one call, returning the last position's logits and every position's keys/values, copied into
the cache. The prefill graph here is the Keras model's own forward pass plus each layer's
key/value projection, converted by tf2onnx, and timed with its copy into the cache. Both are
timed on random-weight TransformerLMs; `step` is one decode_step at the end of the prompt, the
cost of each new token after it (each the fastest of its timed calls), and `saved` is the share of a generation of NEW_TOKENS tokens
after the prompt (its prompt plus NEW_TOKENS steps) that the prefill graph saves. Writes
bench/results/lm_prefill.json.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.common import (  # noqa: E402
    SEED,
    add_results_option,
    payload,
    print_table,
    results_dir,
    time_interleaved,
    write_json,
)
from keras_transformer.command_line import (  # noqa: E402
    add_debug_flag,
    entry_point,
    float_in,
    int_in,
)

# The LM shapes of the tiny and small presets, with the peers' vocabulary of 8000.
PRESETS = ("tiny", "small")
VOCAB = 8000
MAX_LENGTH = 256
NEW_TOKENS = 60  # export.generate's default --max-new-tokens


def build_lm(preset: str):
    import keras

    from keras_transformer.config import TransformerConfig
    from keras_transformer.models.language_model import TransformerLM

    keras.utils.set_random_seed(SEED)
    config = TransformerConfig.preset(preset, source_vocab_size=VOCAB, target_vocab_size=VOCAB,
                                      max_target_length=MAX_LENGTH, dropout=0.0)
    model = TransformerLM(config, dtype="float32")
    model.build()
    return model


def prefill_onnx(model):
    """ids (B,P) -> logits (B,V) of the last position, keys/values (B,L,2,H,P,dh): the model's
    forward pass with each layer's self-attention keys and values, converted by tf2onnx."""
    import tensorflow as tf
    import tf2onnx

    from export.onnx_convert import safe_reshape_merging

    def prefill(ids):
        x = model.embedding(ids, training=False)
        rows = []
        for layer in model.decoder.decoder_layers:
            h = layer.self_attention_norm.normalize_input(x)
            keys, values = layer.self_attention.key_value_heads(h)
            rows.append(tf.stack([keys, values], axis=1))
            x = layer(x, training=False)
        hidden = model.decoder._close(x)
        return {"logits": model.logits(hidden[:, -1, :]),
                "key_values": tf.stack(rows, axis=1)}

    signature = [tf.TensorSpec([None, None], tf.int32, name="ids")]
    with safe_reshape_merging():
        proto, _ = tf2onnx.convert.from_function(tf.function(prefill, input_signature=signature),
                                                 input_signature=signature, opset=17)
    return proto


def session(proto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def measure(preset: str, prompts: list[int], batches: list[int], min_seconds: float) -> list:
    model = build_lm(preset)  # first: it loads Keras before the library's layers
    from export.onnx_graph import build_decoder_step
    from keras_transformer.cache import layout

    c = model.config
    layers, heads, d_model = c.num_decoder_layers, c.num_heads, c.d_model
    step = session(build_decoder_step(model))
    prefill = session(prefill_onnx(model))
    names = layout.cache_names(layers)
    rng = np.random.default_rng(SEED)
    rows = []
    for batch in batches:
        for length in prompts:
            ids = rng.integers(4, VOCAB, size=(batch, length)).astype(np.int32)
            cache = layout.zeros(layers, batch, heads, length + 1, d_model)

            def stepwise(ids=ids, cache=cache):
                for index in range(ids.shape[1]):
                    logits, rows_ = step.run(["logits", "step_key_values"], {
                        "tokens": ids[:, index], "index": np.asarray(index, np.int32),
                        **dict(zip(names, cache, strict=True))})
                    layout.write(cache, rows_, index)
                return logits

            def one_graph(ids=ids, cache=cache):
                logits, key_values = prefill.run(["logits", "key_values"], {"ids": ids})
                for i, array in enumerate(cache):
                    layer, kind = layout.layer_kind(i)
                    array[:, :, : ids.shape[1]] = key_values[:, layer, kind]
                return logits

            def next_token(ids=ids, cache=cache):
                return step.run(["logits"], {"tokens": ids[:, -1],
                                             "index": np.asarray(ids.shape[1], np.int32),
                                             **dict(zip(names, cache, strict=True))})

            # The two agree: the prefill graph is not a cheaper computation.
            np.testing.assert_allclose(one_graph(), stepwise(), atol=1e-3)
            timed = time_interleaved([stepwise, one_graph, next_token], warmup=1,
                                     repeats=3, min_seconds=min_seconds)
            # The fastest call of each: a host shared with other work stretches the medians
            # of the many short calls of a stepwise prompt most.
            rows.append({"config": preset, "batch": batch, "prompt": length,
                         "stepwise_ms": 1e3 * timed[0]["min_s"],
                         "prefill_ms": 1e3 * timed[1]["min_s"],
                         "step_ms": 1e3 * timed[2]["min_s"],
                         "timings": {"stepwise": timed[0], "prefill": timed[1],
                                     "step": timed[2]}})
    return rows


@entry_point
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lm_prefill",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(PRESETS), choices=PRESETS)
    parser.add_argument("--prompts", nargs="+", type=int_in(1), default=[8, 32, 128])
    parser.add_argument("--batch", nargs="+", type=int_in(1), default=[1, 3])
    parser.add_argument("--min-seconds", type=float_in(0, 3600), default=1.5,
                        help="timed seconds per cell and way")
    add_results_option(parser)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    if max(args.prompts) >= MAX_LENGTH:
        parser.error(f"--prompts must be below {MAX_LENGTH}")
    data = payload("lm_prefill", vocab=VOCAB)
    print(f"CPU: {data['machine']['cpu_model']}, {data['machine']['usable_cores']} usable cores")
    rows = []
    for preset in args.configs:
        rows += measure(preset, args.prompts, args.batch, args.min_seconds)
    for r in rows:
        generation = r["stepwise_ms"] + NEW_TOKENS * r["step_ms"]
        r["saved"] = (r["stepwise_ms"] - r["prefill_ms"]) / generation
    print_table(["config", "batch", "prompt", "stepwise ms", "prefill ms", "ratio",
                 "1 step ms", f"saved of +{NEW_TOKENS}"],
                [[r["config"], r["batch"], r["prompt"], f"{r['stepwise_ms']:.2f}",
                  f"{r['prefill_ms']:.2f}", f"{r['stepwise_ms'] / r['prefill_ms']:.1f}x",
                  f"{r['step_ms']:.3f}", f"{100 * r['saved']:.0f}%"] for r in rows])
    path = write_json(Path(results_dir(args)) / "lm_prefill.json", {**data, "results": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
