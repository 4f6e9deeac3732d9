"""A tiny three-class classifier run in the UIT-VSFC file format, for the tests of its
export and of its explorer: the generated sentences, the data directory and the trained run
(module-scoped fixtures; a test module imports them to use them)."""

from __future__ import annotations

import random

import pytest

NAMES = ["negative", "neutral", "positive"]
# A class word in a sentence of filler words decides its class.
CLASS_WORDS = {0: "tệ", 1: "bình_thường", 2: "tốt"}
FILLER = ["giảng", "viên", "môn", "học", "phòng", "thầy", "cô", "bài", "tập", "slide", "thi",
          "điểm", "nhiệt", "tình", "dễ", "hiểu"]


def sentences(count: int, seed: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(count):
        label = rng.randrange(3)
        words = rng.choices(FILLER, k=rng.randrange(3, 12))
        words.insert(rng.randrange(len(words) + 1), CLASS_WORDS[label])
        texts.append(" ".join(words) + " .")
        labels.append(label)
    return texts, labels


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """train/dev/test splits as UIT-VSFC lays them out: sents.txt + sentiments.txt (names)."""
    return write_uit_splits(tmp_path_factory.mktemp("uit_format"), 900, 60, 90)


def write_uit_splits(root, train: int, dev: int, test: int):
    """`root`/{train,dev,test}/sents.txt + sentiments.txt (label names) of that many made-up
    sentences each, as UIT-VSFC lays them out; -> root."""
    for split, count, seed in (("train", train, 0), ("dev", dev, 1), ("test", test, 2)):
        texts, labels = sentences(count, seed)
        (root / split).mkdir()
        (root / split / "sents.txt").write_text("".join(t + "\n" for t in texts), "utf-8")
        (root / split / "sentiments.txt").write_text(
            "".join(NAMES[label] + "\n" for label in labels), "utf-8")
    return root


@pytest.fixture(scope="module")
def run_dir(data_dir, tmp_path_factory):
    from train.config import load_config
    from train.run import run

    out = tmp_path_factory.mktemp("classifier") / "run"
    run(load_config(None, run_sets(data_dir)), out)
    return out


def run_sets(data_dir) -> list[str]:
    """The --set assignments of the tiny classifier run on `data_dir` (later ones win)."""
    sets = [f"data.data_dir={data_dir}", "task=classification", "data.corpus=parallel",
            f"data.labels=[{', '.join(NAMES)}]", "data.max_source_length=24",
            "data.tokens_per_batch=768", "tokenizer.vocab_size=60", "model.num_classes=3",
            "model.overrides.d_model=32", "model.overrides.num_heads=2",
            "model.overrides.d_ff=64", "model.overrides.num_encoder_layers=1",
            "model.overrides.dropout=0.0", "training.epochs=4", "training.warmup_steps=50",
            "training.verbose=0", "training.tensorboard=false"]
    for split in ("train", "dev", "test"):
        sets += [f"data.{split}_source={split}/sents.txt",
                 f"data.{split}_target={split}/sentiments.txt"]
    return sets
