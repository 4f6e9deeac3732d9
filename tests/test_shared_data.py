"""Loading the real corpora beside the checkout (skipped where ../shared/data is absent)."""

import os
import shutil
import subprocess
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


IWSLT15_SCRIPT = ROOT / "train" / "data" / "iwslt15.sh"
IWSLT15_CHECKED = ("tst2012.en", "tst2012.vi", "vocab.en", "vocab.vi")


def run_iwslt15(dest: Path, mirror: Path):
    return subprocess.run(["bash", str(IWSLT15_SCRIPT), str(dest)], capture_output=True,
                          text=True, env={**os.environ, "IWSLT15_URL": str(mirror)})


def test_iwslt15_script_fetches_from_a_local_folder_and_checks_the_published_sha256(tmp_path):
    need(*(f"iwslt15_en_vi/{name}" for name in IWSLT15_CHECKED))
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name in IWSLT15_CHECKED:  # the real files: their published checksums must match
        shutil.copyfile(DATA / "iwslt15_en_vi" / name, mirror / name)
    for name in ("train.en", "train.vi", "tst2013.en", "tst2013.vi"):
        (mirror / name).write_text("not the corpus\n")
    dest = tmp_path / "dest"
    result = run_iwslt15(dest, mirror)
    assert result.returncode == 1
    for name in IWSLT15_CHECKED:
        assert f"{name}: sha256 ok" in result.stdout
        assert (dest / name).read_bytes() == (mirror / name).read_bytes()
    assert "tst2013.en: no reference checksum" in result.stdout
    assert "train.en: sha256 MISMATCH" in result.stderr
    assert "train.vi: sha256 MISMATCH" in result.stderr
    assert not list(dest.glob("*.part"))
    # Files already in DEST are checked, not fetched again: the mirror is gone.
    shutil.rmtree(mirror)
    again = run_iwslt15(dest, mirror)
    assert again.returncode == 1 and "fetching" not in again.stdout
    assert all(f"{name}: sha256 ok" in again.stdout for name in IWSLT15_CHECKED)


def test_iwslt15_script_without_the_files_fails_in_one_line_and_creates_nothing(tmp_path):
    mirror = tmp_path / "empty"
    mirror.mkdir()
    dest = tmp_path / "dest"
    result = run_iwslt15(dest, mirror)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"could not fetch {mirror}/train.en: without network, set IWSLT15_URL to a folder "
        f"holding the files"]
    assert not dest.exists()
