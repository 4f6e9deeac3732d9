"""Streamed-corpus runs shared by the stream tests, without TensorFlow (the JAX tests import
them): shards of every compression, spa_eng_stream.yaml and vi_masked_lm.yaml made small and
streamed, and their command line."""

import gzip
import os
import sys
from pathlib import Path

import yaml

from keras_transformer.text.demo_corpus import demo_splits
from tests.cli_probe import ROOT

PYTHONS = {"tensorflow": Path(sys.executable), "jax": ROOT / ".venv-jax" / "bin" / "python"}


def write_shards(folder, pairs):
    """Three shards: plain, gzip named .gz, and gzip under a plain name (found by its magic
    bytes); the first also holds a blank line and a pair with an empty side."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{s}\t{t}\n" for s, t in pairs]
    third = len(lines) // 3
    (folder / "train-0.tsv").write_text("".join(lines[:third]) + "   \nonly a source\t \n")
    (folder / "train-1.tsv.gz").write_bytes(gzip.compress("".join(lines[third:2 * third])
                                                          .encode()))
    (folder / "train-2.tsv").write_bytes(gzip.compress("".join(lines[2 * third:]).encode()))
    return sorted(folder.glob("train-*"))


def stream_config(folder: Path) -> Path:
    """spa_eng_stream.yaml over three small shards (a shuffle buffer smaller than a shard),
    12 steps with a backup every 2, written in `folder`."""
    splits = demo_splits(300, 20, 10, 11)
    write_shards(folder / "data", splits["train"])
    for name in ("dev", "test"):
        (folder / "data" / f"{name}.tsv").write_text(
            "".join(f"{s}\t{t}\n" for s, t in splits[name]))
    config = yaml.safe_load((ROOT / "train" / "configs" / "spa_eng_stream.yaml").read_text())
    config["data"].update(data_dir=str(folder / "data"), train_source="train-*",
                          dev_source="dev.tsv", test_source="test.tsv", max_source_length=24,
                          max_target_length=24, tokens_per_batch=240, shuffle_buffer=50)
    config["tokenizer"].update(vocab_size=150, sample_sentences=200)
    config["model"] = {"preset": "tiny", "overrides": {"d_model": 16, "d_ff": 32,
                                                       "num_heads": 2, "dropout": 0.0}}
    config["training"].update(precision="float32", max_minutes=0, epochs=3, steps_per_epoch=4, save_every_steps=2,
                              verbose=0, tensorboard=False, average_last=0,
                              early_stopping_patience=0)
    config["eval"].update(dev_score_sentences=0, beam_size=1, max_sentences=5, samples=0)
    path = folder / "stream.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def masked_lm_stream_config(folder: Path) -> Path:
    """vi_masked_lm.yaml streamed (data.stream) over a glob of three small text shards (the
    second gzip), a shuffle buffer smaller than a shard, sizes as tests/test_masked_lm.py's
    SMALL: 12 steps with a backup every 2, written in `folder`."""
    splits = demo_splits(300, 20, 10, 12)
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    lines = [f"{vi}\n" for _, vi in splits["train"]]
    (data / "text-0.txt").write_text("".join(lines[:100]))
    (data / "text-1.txt.gz").write_bytes(gzip.compress("".join(lines[100:200]).encode()))
    (data / "text-2.txt").write_text("".join(lines[200:]))
    (data / "dev.txt").write_text("".join(f"{vi}\n" for _, vi in splits["dev"]))
    config = yaml.safe_load((ROOT / "train" / "configs" / "vi_masked_lm.yaml").read_text())
    config["data"].update(data_dir=str(data), stream=True, texts=["text-*"],
                          dev_texts=["dev.txt"], max_source_length=16, tokens_per_batch=256,
                          shuffle_buffer=50)
    config["tokenizer"].update(vocab_size=70, sample_sentences=200)
    config["model"] = {"preset": "tiny", "overrides": {"d_model": 16, "d_ff": 32,
                                                       "num_heads": 2, "dropout": 0.0}}
    config["training"].update(precision="float32", max_minutes=0, epochs=3, steps_per_epoch=4,
                              save_every_steps=2, warmup_steps=4, verbose=0,
                              tensorboard=False)
    config.setdefault("eval", {}).update(dev_score_sentences=20, samples=0)
    path = folder / "masked_lm.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def command(backend: str, config: Path, out: Path) -> tuple[list[str], dict]:
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT),
           "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    return [str(PYTHONS[backend]), "-m", "train", "--config", str(config), "--out",
            str(out)], env
