"""A run's tokenizer from a model the user brings (tokenizer.model), checked and copied into
the run, or trained on a seeded sample of the training sentences (tokenizer.sample_sentences)."""

import os
import subprocess
import sys
from collections import Counter

import pytest

from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece
from tests.cli_probe import ROOT
from tests.tiny_runs import DEMO
from train.config import ConfigError, load_config
from train.tokenizer_sources import given_model, sample_sentences
from train.tokenizers import build_tokenizers, train_tokenizer

WORDS = ["red", "green", "blue", "small", "big", "old", "new", "cat", "dog", "bird", "tree",
         "house", "river", "stone"]


def sentences(count: int, offset: int = 0) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 4)) + f" n{i}"
            for i in range(offset, offset + count)]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A SentencePiece model of 40 pieces with the project's special ids."""
    folder = tmp_path_factory.mktemp("spm")
    path = train_sentencepiece(sentences(300), folder / "given", 40)
    assert SentencePieceTokenizer(path).vocab_size == 40
    return path


def config(*overrides: str):
    return load_config(None, ["tokenizer.vocab_size=40", *overrides])


def test_the_sample_is_seeded_in_corpus_order_and_uniform():
    texts = [f"s{i}" for i in range(100)]
    sample = sample_sentences(texts, 10, seed=5)
    assert sample == sample_sentences(iter(texts), 10, seed=5)  # a stream gives the same
    assert len(sample) == 10 and sample == sorted(sample, key=texts.index)
    assert sample != sample_sentences(texts, 10, seed=6)
    assert sample_sentences(texts, 500, seed=5) == texts  # fewer texts than asked: all
    # Every position is drawn with probability 10/100: over 3,000 seeds each is drawn about
    # 300 times (a binomial's standard deviation is about 16).
    counts = Counter(text for seed in range(3000) for text in sample_sentences(texts, 10, seed))
    assert len(counts) == 100 and 230 < min(counts.values()) <= max(counts.values()) < 370


def test_sample_sentences_trains_on_the_seeded_sample_only(tmp_path):
    texts = sentences(400)
    cfg = config("tokenizer.sample_sentences=80", "data.seed=9")
    sampled = train_tokenizer(cfg, texts, tmp_path / "sampled")
    train_sentencepiece(sample_sentences(texts, 80, seed=9), tmp_path / "reference", 40)
    # The pieces and their scores (the model file also names its own path).
    pieces = (tmp_path / "sampled.vocab").read_text()
    assert sampled.vocab_size == 40 and pieces == (tmp_path / "reference.vocab").read_text()
    train_tokenizer(config(), texts, tmp_path / "all")
    assert (tmp_path / "all.vocab").read_text() != pieces


def test_a_given_model_is_copied_into_the_run_and_serves_both_sides(spm_model, tmp_path):
    cfg = config(f"tokenizer.model={spm_model}")
    source, target = build_tokenizers(cfg, ["unused"], ["unused"], tmp_path)
    assert source is target
    assert (tmp_path / "spm.model").read_bytes() == spm_model.read_bytes()
    assert (tmp_path / "spm.vocab").read_bytes() == spm_model.with_suffix(".vocab").read_bytes()
    assert source.encode(["red cat"]) == SentencePieceTokenizer(spm_model).encode(["red cat"])


def test_a_bad_given_model_is_refused_in_one_line_naming_it(spm_model, tmp_path):
    missing = tmp_path / "missing.model"
    with pytest.raises(FileNotFoundError, match=f"^tokenizer.model: {missing} not found"):
        given_model(config(f"tokenizer.model={missing}"))
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"not a sentencepiece model")
    with pytest.raises(ValueError, match=f"^tokenizer.model: {garbage} is not a readable") as err:
        given_model(config(f"tokenizer.model={garbage}"))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="has 40 pieces, tokenizer.vocab_size is 80"):
        given_model(load_config(None, [f"tokenizer.model={spm_model}",
                                       "tokenizer.vocab_size=80"]))
    other_ids = train_sentencepiece(sentences(300), tmp_path / "other_ids", 40, eos_id=1)
    with pytest.raises(ValueError, match=r"has special ids \{'pad_id': 0, 'bos_id': 2, "
                                         r"'eos_id': 1\}, the config"):
        given_model(config(f"tokenizer.model={other_ids}"))
    # The model's ids, set in the config, are accepted.
    given_model(config(f"tokenizer.model={other_ids}", "model.overrides.eos_id=1"))


@pytest.mark.parametrize("overrides, message", [
    (["tokenizer.sample_sentences=5"], "set only one of them"),
    (["training.init_from=runs/x"], "both give the tokenizer"),
    (["tokenizer.joint=false"], "set tokenizer.joint: true"),
])
def test_a_given_model_with_another_source_of_tokenizer_is_a_config_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["tokenizer.model=spm.model", *overrides])


def test_sample_sentences_below_zero_is_refused():
    with pytest.raises(ConfigError, match="^tokenizer.sample_sentences must be >= 0, got -1$"):
        load_config(None, ["tokenizer.sample_sentences=-1"])


@pytest.mark.slow
def test_the_command_refuses_a_missing_model_before_the_run_directory(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "train", "--config", str(DEMO), "--out",
                             str(out), "--set", f"tokenizer.model={tmp_path / 'no.model'}"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "tokenizer.model" in line]
    assert len(lines) == 1 and f"{tmp_path / 'no.model'} not found" in lines[0]
    assert not out.exists()
