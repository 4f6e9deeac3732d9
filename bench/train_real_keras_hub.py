"""The keras-hub side of `bench.train_real`, run in the peer environment (tensorflow, keras,
keras-hub; no keras_transformer):

    /tmp/peers/tf/bin/python -m bench.train_real_keras_hub --work DIR --mode throughput ...

The pipeline of the Keras example "English-to-Spanish translation with KerasHub": pairs
lowercased, a WordPiece vocabulary (keras_hub.tokenizers.compute_word_piece_vocabulary, which
splits off punctuation), `StartEndPacker` padding every source to `--length` and every target
to `--length` + 1 ([START] y [END], cut into decoder input and labels), batches of 64 in a
seeded order, `TokenAndPositionEmbedding`, `TransformerEncoder` and `TransformerDecoder`, and
the example's compile (RMSprop, sparse cross-entropy over every position, padding included).
`--size small` (the default) changes the model to match our `small` preset: 3 + 3 layers of
d_model 256, 4 heads, d_ff 1024, dropout 0.1, and one joint vocabulary of `--vocab-size` whose
embedding is shared by encoder and decoder and tied to the output layer (as in
../shared/peers/keras_model.py). `--size example` keeps the example's own model: 1 + 1 layers
of d_model 256, 8 heads, d_ff 2048, no dropout inside the layers, dropout 0.5 before an untied
output layer, and one WordPiece vocabulary of `--vocab-size` (the example's 15,000) per
language.

Reads DIR/train.json and DIR/dev.json ({"sources": [...], "targets": [...]}, written by
bench.train_real from our split), caches the vocabulary in DIR/wordpiece.txt, and writes the
JSON named by --out: per-batch token counts and step times (throughput) or the dev
translations at each checkpoint (curve); bench.train_real scores and reports them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench.real_harness import (  # noqa: E402
    BatchCounter,
    StepClock,
    TrainingBudget,
    measured_row,
    timed_window,
)

RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]
PAD, UNK, START, END = range(4)
# joint: one vocabulary for both languages, one embedding tied to the output layer; else one
# vocabulary and embedding per language and an output layer of its own after head_dropout.
SIZES = {"small": dict(d_model=256, heads=4, ffn=1024, layers=3, dropout=0.1, joint=True),
         "example": dict(d_model=256, heads=8, ffn=2048, layers=1, dropout=0.0, joint=False,
                         head_dropout=0.5),
         "tiny": dict(d_model=64, heads=4, ffn=256, layers=1, dropout=0.1, joint=True),
         "tiny-example": dict(d_model=64, heads=4, ffn=256, layers=1, dropout=0.0,
                              joint=False, head_dropout=0.5)}


def log(*args) -> None:
    print(f"[keras-hub {time.strftime('%H:%M:%S')}]", *args, file=sys.stderr, flush=True)


def read_pairs(path: Path) -> tuple[list[str], list[str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["sources"], data["targets"]


def vocabulary(work: Path, texts: list[str], size: int, name: str) -> list[str]:
    """The example's WordPiece vocabulary of lowercased training text, cached as DIR/NAME."""
    path = work / f"wordpiece_{name}_{size}.txt"
    if path.is_file():
        return path.read_text(encoding="utf-8").split("\n")
    t0 = time.perf_counter()
    texts = tf.data.Dataset.from_tensor_slices([s.lower() for s in texts])
    vocab = keras_hub.tokenizers.compute_word_piece_vocabulary(
        texts.batch(1000).prefetch(2), vocabulary_size=size, reserved_tokens=RESERVED)
    path.write_text("\n".join(vocab), encoding="utf-8")
    log(f"WordPiece vocabulary of {len(vocab)} in {time.perf_counter() - t0:.0f} s")
    return vocab


def tokenizers(work: Path, sources, targets, size: int, joint: bool):
    """(source tokenizer, target tokenizer): one shared vocabulary, or one per language."""
    def tokenizer(vocab):
        return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocab, lowercase=False)

    if joint:
        shared = tokenizer(vocabulary(work, [*sources, *targets], size, "joint"))
        return shared, shared
    return (tokenizer(vocabulary(work, sources, size, "source")),
            tokenizer(vocabulary(work, targets, size, "target")))


def make_dataset(sources, targets, tokenizer, target_tokenizer, length: int, batch: int,
                 seed: int):
    """((source, decoder input), labels) batches as the example builds them, repeated."""
    pairs = [(s.lower(), t.lower()) for s, t in zip(sources, targets, strict=True)]
    random.Random(seed).shuffle(pairs)
    source_packer = keras_hub.layers.StartEndPacker(sequence_length=length, pad_value=PAD)
    target_packer = keras_hub.layers.StartEndPacker(sequence_length=length + 1,
                                                    start_value=START, end_value=END,
                                                    pad_value=PAD)

    def preprocess(eng, spa):
        eng = source_packer(tokenizer(eng))
        spa = target_packer(target_tokenizer(spa))
        return (eng, spa[:, :-1]), spa[:, 1:]

    ds = tf.data.Dataset.from_tensor_slices(([p[0] for p in pairs], [p[1] for p in pairs]))
    ds = ds.batch(batch).map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).cache()
    return ds.shuffle(2048, seed=seed).repeat()


class Model:
    """The example's layers at one of SIZES."""

    def __init__(self, vocab_sizes: tuple[int, int], length: int, size: str, seed: int):
        c = SIZES[size]
        keras.utils.set_random_seed(seed)

        def embedding(vocab_size: int):
            return keras_hub.layers.TokenAndPositionEmbedding(
                vocabulary_size=vocab_size, sequence_length=length,
                embedding_dim=c["d_model"], tie_weights=c["joint"])

        self.embedding = embedding(vocab_sizes[0])
        if c["joint"]:
            self.target_embedding, self.head_dropout, self.head = self.embedding, None, None
        else:
            self.target_embedding = embedding(vocab_sizes[1])
            self.head_dropout = keras.layers.Dropout(c["head_dropout"])
            self.head = keras.layers.Dense(vocab_sizes[1])
        kw = dict(intermediate_dim=c["ffn"], num_heads=c["heads"], dropout=c["dropout"],
                  activation="relu")
        self.encoders = [keras_hub.layers.TransformerEncoder(**kw) for _ in range(c["layers"])]
        self.decoders = [keras_hub.layers.TransformerDecoder(**kw) for _ in range(c["layers"])]
        src = keras.Input(shape=(None,), dtype="int32", name="encoder_inputs")
        tgt = keras.Input(shape=(None,), dtype="int32", name="decoder_inputs")
        self.keras = keras.Model([src, tgt], self.decode(tgt, self.encode(src)))

    def encode(self, src, training=None):
        x = self.embedding(src)
        for layer in self.encoders:
            x = layer(x, training=training)
        return x

    def decode(self, tgt, memory, training=None, last_only=False):
        y = self.target_embedding(tgt)
        for layer in self.decoders:
            y = layer(y, memory, training=training)
        if last_only:
            y = y[:, -1:]
        if self.head is None:
            return self.embedding.token_embedding(y, reverse=True)
        return self.head(self.head_dropout(y, training=training))


def compiled(args, vocab_sizes: tuple[int, int], jit: bool) -> Model:
    model = Model(vocab_sizes, args.length, args.size, args.seed)
    model.keras.compile(optimizer=keras.optimizers.RMSprop(),
                        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        jit_compile=jit)
    return model


def greedy(model: Model, tokenizer, target_tokenizer, sources, length: int,
           batch: int = 100) -> list[str]:
    """Greedy translations: the decoder re-run over the prefix at each step (the example's
    loop, without a cache), stopping once every row has [END]; detokenized as keras-hub
    gives them (lowercase, punctuation split off by spaces)."""
    packer = keras_hub.layers.StartEndPacker(sequence_length=length, pad_value=PAD)
    out = []
    for i in range(0, len(sources), batch):
        src = packer(tokenizer([s.lower() for s in sources[i: i + batch]]))
        memory = model.encode(src, training=False)
        rows = int(src.shape[0])
        tokens = np.full((rows, 1), START, np.int32)
        finished = np.zeros(rows, bool)
        for _ in range(length):
            logits = model.decode(tf.constant(tokens), memory, training=False, last_only=True)
            nxt = np.argmax(np.asarray(logits)[:, -1], axis=-1).astype(np.int32)
            nxt[finished] = PAD
            tokens = np.concatenate([tokens, nxt[:, None]], axis=1)
            finished |= nxt == END
            if finished.all():
                break
        for row in tokens[:, 1:]:
            ids = [int(t) for t in row if t not in (PAD, START)]
            ids = ids[: ids.index(END)] if END in ids else ids
            text = target_tokenizer.detokenize(tf.constant(ids, tf.int32)) if ids else ""
            if not isinstance(text, str):  # a scalar string tensor
                text = text.numpy().decode("utf-8")
            out.append(text)
    return out


def measure_throughput(args, ds, vocab_sizes: tuple[int, int], jit: bool) -> dict:
    model = compiled(args, vocab_sizes, jit)
    counter = BatchCounter(PAD)

    def enough(done: int) -> bool:
        window = timed_window(counter.batches[:done], args.warmup, args.steps)
        return window is not None or done >= args.warmup + 3 * args.steps

    clock = StepClock(enough)
    t0 = time.perf_counter()
    model.keras.fit(ds.map(counter).prefetch(tf.data.AUTOTUNE), epochs=1,
                    steps_per_epoch=args.warmup + 3 * args.steps, callbacks=[clock], verbose=0)
    row = measured_row("keras-hub", jit, counter, clock, t0, args.warmup, args.steps,
                       "warm-up")
    log(f"jit={jit}: {row['target_tokens_per_s']:,.0f} target tok/s over {row['steps']} steps "
        f"(median step {row['median_step_s']:.2f} s)")
    return row


def run_curve(args, ds, tokenizer, target_tokenizer, vocab_sizes: tuple[int, int],
              jit: bool) -> dict:
    model = compiled(args, vocab_sizes, jit)
    dev_sources, _ = read_pairs(args.work / "dev.json")

    def evaluate(keras_model):
        return {"hypotheses": greedy(model, tokenizer, target_tokenizer, dev_sources,
                                     args.length)}

    budget = TrainingBudget(args.budget_minutes * 60, args.eval_every_minutes * 60, evaluate,
                            log=log)
    model.keras.fit(ds.prefetch(tf.data.AUTOTUNE), epochs=1, steps_per_epoch=10**9,
                    callbacks=[budget], verbose=0)
    return {"side": "keras-hub", "jit_compile": jit, "checkpoints": budget.checkpoints}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--mode", choices=["throughput", "curve"], required=True)
    parser.add_argument("--jit", nargs="+", choices=["on", "off"], default=["off", "on"])
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--budget-minutes", type=float, default=10.0)
    parser.add_argument("--eval-every-minutes", type=float, default=2.5)
    parser.add_argument("--vocab-size", type=int, default=8000,
                        help="of the joint vocabulary, or of each language's (--size example)")
    parser.add_argument("--length", type=int, default=40, help="the example's sequence_length")
    parser.add_argument("--batch", type=int, default=64, help="the example's batch size")
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    sources, targets = read_pairs(args.work / "train.json")
    tokenizer, target_tokenizer = tokenizers(args.work, sources, targets, args.vocab_size,
                                             SIZES[args.size]["joint"])
    vocab_sizes = (int(tokenizer.vocabulary_size()), int(target_tokenizer.vocabulary_size()))
    ds = make_dataset(sources, targets, tokenizer, target_tokenizer, args.length, args.batch,
                      args.seed)
    jits = [j == "on" for j in args.jit]
    result = {"vocabulary_size": vocab_sizes[0], "target_vocabulary_size": vocab_sizes[1],
              "size": args.size, "model": SIZES[args.size], "train_pairs": len(sources),
              "versions": {m.__name__: m.__version__ for m in (tf, keras, keras_hub)},
              "settings": {k: str(v) for k, v in vars(args).items()}}
    if args.mode == "throughput":
        result["results"] = [measure_throughput(args, ds, vocab_sizes, jit) for jit in jits]
    else:
        result["results"] = [run_curve(args, ds, tokenizer, target_tokenizer, vocab_sizes, jit)
                             for jit in jits]
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n",
                        encoding="utf-8")


if __name__ == "__main__":
    main()
