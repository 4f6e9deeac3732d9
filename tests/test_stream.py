"""Streamed training input (data.stream): TSV shards, gzip or not, read by tf.data as training
consumes them give the pairs the in-memory path gives; broken shards are refused in one line
naming the file; a short run trains on them end to end."""

import gzip
import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from keras_transformer.text.demo_corpus import demo_splits
from keras_transformer.text.pipeline import make_translation_dataset, make_tsv_stream_dataset
from keras_transformer.text.tokenizer import (
    PAD_ID,
    SentencePieceTokenizer,
    load_tsv_pairs,
    train_sentencepiece,
)
from tests.cli_probe import ROOT
from tests.stream_runs import write_shards
from train.config import ConfigError, load_config
from train.shards import scan_shards, shard_files

pytestmark = pytest.mark.tf_only
LIMITS = dict(max_source_length=24, max_target_length=24, tokens_per_batch=240)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stream")
    pairs = demo_splits(240, 1, 1, 7)["train"]
    files = write_shards(folder / "shards", pairs)
    (folder / "all.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    tok = SentencePieceTokenizer(train_sentencepiece(
        [text for pair in pairs for text in pair], folder / "spm", 150))
    return folder, pairs, files, tok


def rows(dataset) -> Counter:
    """Each (source, target_out) of a pass's batches, padding removed."""
    found = Counter()
    for (source, _), target_out in dataset.as_numpy_iterator():
        for s, t in zip(source, target_out, strict=True):
            found[(tuple(s[s != PAD_ID]), tuple(t[t != PAD_ID]))] += 1
    return found


def test_one_streamed_pass_yields_the_in_memory_pairs(corpus):
    folder, pairs, files, tok = corpus
    scan = scan_shards(files, sample=50, seed=3)
    assert scan.compressions == ["", "GZIP", "GZIP"]
    assert (scan.pairs, scan.dropped_empty) == (len(pairs), 2)
    drawn = set(zip(scan.sample_sources, scan.sample_targets, strict=True))
    assert len(drawn) == 50 and drawn <= set(pairs)
    streamed = rows(make_tsv_stream_dataset(
        [str(f) for f in files], scan.compressions, tok, tok, shuffle_buffer=64, seed=5,
        repeat=False, **LIMITS))
    memory = load_tsv_pairs(folder / "all.tsv")
    in_memory = rows(make_translation_dataset(memory.sources, memory.targets, tok, tok,
                                              shuffle=False, **LIMITS))
    assert sum(in_memory.values()) > 150  # most pairs fit the limits
    assert streamed == in_memory


def test_the_stream_is_shuffled_and_repeats_with_its_seed(corpus):
    _, _, files, tok = corpus
    compressions = scan_shards(files, 0, 0).compressions

    def first_batches(seed):
        data = make_tsv_stream_dataset([str(f) for f in files], compressions, tok, tok,
                                       shuffle_buffer=64, seed=seed, repeat=True, **LIMITS)
        return [b[1].tolist() for b in data.take(12).as_numpy_iterator()]

    assert first_batches(1) == first_batches(1)
    assert first_batches(1) != first_batches(2)


def test_broken_shards_are_refused_in_one_line_naming_the_file(tmp_path):
    config = load_config(None, [f"data.data_dir={tmp_path}", "data.train_source=w/train-*.gz"])
    with pytest.raises(FileNotFoundError, match=f"no file matches {tmp_path}/w/train-"):
        shard_files(config.data)
    missing = load_config(None, [f"data.data_dir={tmp_path}", "data.train_source=none.tsv"])
    with pytest.raises(FileNotFoundError, match=f"shard not found: {tmp_path}/none.tsv"):
        shard_files(missing.data)

    columns = tmp_path / "columns.tsv"
    columns.write_text("a\tb\nc\td\textra\n")
    with pytest.raises(ValueError, match=f"^shard {columns} line 2 has 3 tab-separated"):
        scan_shards([columns], 0, 0)

    # A shard cut short (a partial copy) and one damaged in the middle: the reader stops at
    # the damage, with the file's name (a damaged deflate block may decode to garbage lines
    # first, which then fail the column check).
    data = gzip.compress("".join(f"source {i}\ttarget {i}\n" for i in range(20000)).encode())
    cut = tmp_path / "cut.tsv.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=f"^shard {cut} is a corrupt gzip file after line "):
        scan_shards([cut], 0, 0)
    damaged = bytearray(data)
    damaged[len(data) // 2: len(data) // 2 + 64] = b"\0" * 64
    broken = tmp_path / "damaged.tsv.gz"
    broken.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match=f"^shard {broken} ") as err:
        scan_shards([broken], 0, 0)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("overrides, message", [
    (["training.steps_per_epoch=0"], "set training.steps_per_epoch"),
    (["tokenizer.sample_sentences=0"], "set tokenizer.sample_sentences"),
    (["data.tsv=x.tsv"], "not data.tsv"),
    (["data.corpus=parallel"], "reads TSV shards: for task translation set data.corpus: tsv"),
    (["task=masked_lm", "data.corpus=text"], "reads data.texts .* set data.texts"),
    (["task=summarization", "data.extract_sources=true"], "reads whole articles"),
    (["task=masked_lm", "data.corpus=text", "data.texts=[a.txt]", "data.next_sentence=true"],
     "data.next_sentence pairs sentences"),
    (["task=classification", "training.init_from=runs/pre", "tokenizer.sample_sentences=0",
      "model.num_classes=2"], None),
])
def test_stream_needs_are_config_errors(overrides, message):
    base = ["data.stream=true", "data.corpus=tsv", "data.train_source=s/*.tsv",
            "data.dev_source=dev.tsv", "training.steps_per_epoch=5",
            "tokenizer.sample_sentences=100"]
    load_config(None, base)
    if message is None:  # a fine-tune takes its tokenizer from the pre-trained run
        load_config(None, [*base, *overrides])
        return
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*base, *overrides])


@pytest.mark.slow
def test_a_short_run_trains_on_streamed_shards(corpus, tmp_path):
    folder, pairs, _, _ = corpus
    data = tmp_path / "data"
    write_shards(data, pairs)
    held = demo_splits(240, 20, 10, 7)
    for name in ("dev", "test"):
        (data / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in held[name]))
    config = yaml.safe_load((ROOT / "train" / "configs" / "spa_eng_stream.yaml").read_text())
    config["data"].update(data_dir=str(data), train_source="train-*", dev_source="dev.tsv",
                          test_source="test.tsv", max_source_length=24, max_target_length=24,
                          tokens_per_batch=240, shuffle_buffer=100)
    config["tokenizer"].update(vocab_size=150, sample_sentences=200)
    config["model"] = {"preset": "tiny", "overrides": {"d_model": 16, "d_ff": 32,
                                                       "num_heads": 2, "dropout": 0.0}}
    config["training"].update(max_minutes=0, epochs=2, steps_per_epoch=3, save_every_steps=2,
                              jit_compile=False, verbose=0, tensorboard=False,
                              average_last=0, early_stopping_patience=0)
    config["eval"].update(dev_score_sentences=3, beam_size=1, max_sentences=3, samples=0)
    path = tmp_path / "stream.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT),
           "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, "-m", "train", "--config", str(path), "--out",
                             str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 6 and metrics["epochs"] == 2
    assert (metrics["streamed_train_pairs"], metrics["stream_shards"]) == (len(pairs), 3)
    # The test split is the final one: its scores are named without a prefix.
    assert metrics["empty_dropped"] == 2 and "bleu" in metrics and "dev_bleu" in metrics
    assert len((out / "test.hyp").read_text().splitlines()) == 3
    assert (out / "spm.model").is_file()
