"""Made-up news in VNDS's TSV format for the summarization tests: its words, an article
with its summary, the file writer, and the config of a tiny summarizer run."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

HEADER = "article\tsummary\ttitle"

# Words of a made-up news language, some joined by "_" as VNDS joins a word's syllables.
WORDS = ["giá_vàng", "tăng", "mạnh", "Hà_Nội", "mưa", "lớn", "người_dân", "đường", "ngập",
         "bóng_đá", "đội", "thắng", "học_sinh", "thi", "điểm", "cao"]


def make_article(rng: random.Random) -> tuple[str, str]:
    """An article of 3-4 sentences; its summary is the first sentence."""
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 5))) + " ."
                 for _ in range(rng.randint(3, 4))]
    return " ".join(sentences), sentences[0]


def write_tsv(path: Path, rows, header: str = HEADER) -> Path:
    text = "\n".join([header, *rows]) + "\n"
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def tiny_run_config(data_dir: Path) -> dict:
    """A tiny pre-set summarizer over train.tsv.gz, dev.tsv.gz and test.tsv in `data_dir`."""
    return {
        "task": "summarization",
        "data": {"corpus": "tsv", "data_dir": str(data_dir), "train_source": "train.tsv.gz",
                 "dev_source": "dev.tsv.gz", "test_source": "test.tsv",
                 "max_source_length": 40, "max_target_length": 24, "tokens_per_batch": 1280,
                 "num_buckets": 2},
        "tokenizer": {"vocab_size": 120},
        "model": {"preset": "tiny", "overrides": {"dropout": 0.0, "share_embeddings": True}},
        "training": {"epochs": 4, "steps_per_epoch": 40, "warmup_steps": 60, "lr_scale": 0.3,
                     "label_smoothing": 0.0, "verbose": 0, "tensorboard": False},
        "eval": {"beam_size": 2, "alpha": 0.6, "dev_score_sentences": 20,
                 "no_repeat_ngram_size": 0, "min_length": 2, "samples": 3},
    }
