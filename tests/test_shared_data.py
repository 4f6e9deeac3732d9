"""Loading the real corpora beside the checkout (skipped where ../shared/data is absent)."""

import os
from pathlib import Path

import pytest

from train.config import DataConfig
from train.data import load_corpus

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("KT_DATA_DIR") or ROOT.parent / "shared" / "data")


def need(*names):
    missing = [n for n in names if not (DATA / n).is_file()]
    if missing:
        pytest.skip(f"real corpus files not present under {DATA}: {missing}")


def test_iwslt_partial_training_set_loads_with_its_empty_line_dropped():
    need("iwslt15_en_vi/train_head1000.en", "iwslt15_en_vi/tst2012.vi")
    corpus = load_corpus(DataConfig(
        corpus="parallel", data_dir=str(DATA),
        train_source="iwslt15_en_vi/train_head1000.en",
        train_target="iwslt15_en_vi/train_head1000.vi",
        dev_source="iwslt15_en_vi/tst2012.en", dev_target="iwslt15_en_vi/tst2012.vi"))
    # Line 470 of the English side is empty (see the corpus README): dropped and counted.
    assert len(corpus.train) == 999
    assert corpus.dropped_empty >= 1
    assert corpus.train.sources[0] == "Rachel Pike : The science behind a climate headline"
    assert corpus.train.targets[0] == "Khoa học đằng sau một tiêu đề về khí hậu"
    assert len(corpus.dev) <= 1553


def test_tatoeba_spanish_split_is_seeded_and_disjoint():
    need("spa_eng/spa.txt")
    config = DataConfig(corpus="tsv", data_dir=str(DATA), tsv="spa_eng/spa.txt",
                        dev_size=500, test_size=500, seed=7)
    first, again = load_corpus(config), load_corpus(config)
    assert first.dev.sources == again.dev.sources
    assert len(first.train) + 1000 + first.dropped_empty == 116_964
    dev_pairs = set(zip(first.dev.sources, first.dev.targets, strict=True))
    train_pairs = set(zip(first.train.sources, first.train.targets, strict=True))
    assert not dev_pairs & train_pairs
