"""Task language_model: the windows of one token stream, the summed negative log-likelihood and
the perplexities derived from it against hand-computed values, `python -m train` end to end on
a made-up Vietnamese-like corpus, `python -m train.generate` (greedy = the uncached argmax,
reproducible sampling, bad input), and `python -m train.evaluate` on a text file (the run's
own test perplexity)."""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml

from keras_transformer.text.pipeline import language_model_rows, make_language_model_dataset
from tests.cli_probe import ROOT, assert_clean_failure, call_main
from train.config import load_config
from train.scoring import perplexities, syllables_and_characters
from train.tasks.language_model import summed_nll

DATA = Path(os.environ.get("KT_DATA_DIR") or ROOT.parent / "shared" / "data")
PAD, BOS, EOS = 0, 2, 3


class TableTokenizer:
    """Each text's ids from a table: the rows' construction checked by hand."""

    special_ids = {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS}

    def __init__(self, table: dict[str, list[int]]):
        self.table = table

    def encode(self, texts):
        return [self.table[t] for t in texts]


TEXTS = ["Hà_Nội mưa", "nắng", "gió to"]
TABLE = TableTokenizer({"Hà_Nội mưa": [5, 6, 7], "nắng": [8], "gió to": [9, 10]})


def test_rows_cut_one_stream_into_windows_overlapping_by_one():
    rows = language_model_rows(TEXTS, TABLE, 4)
    # stream: 2 5 6 7 3 | 2 8 3 | 2 9 10 3 (12 tokens, 11 of them targets): 3 rows of 4 + 1.
    np.testing.assert_array_equal(rows, [[2, 5, 6, 7, 3], [3, 2, 8, 3, 2], [2, 9, 10, 3, 0]])
    (inputs, targets), = make_language_model_dataset(rows, batch_size=8, pad_id=PAD,
                                                     bos_id=BOS, shuffle=False)
    np.testing.assert_array_equal(inputs, [[2, 5, 6, 7], [3, 2, 8, 3], [2, 9, 10, 3]])
    # BOS targets are given, never predicted: padding. Each piece and each EOS is a target once.
    np.testing.assert_array_equal(targets, [[5, 6, 7, 3], [0, 8, 3, 0], [9, 10, 3, 0]])
    assert int((np.asarray(targets) != PAD).sum()) == sum(len(TABLE.encode([t])[0]) + 1
                                                           for t in TEXTS) == 9
    # A stream of length + 1 tokens is exactly one row.
    np.testing.assert_array_equal(language_model_rows(["nắng"], TABLE, 2), [[2, 8, 3]])


def test_shuffled_batches_hold_every_row_once_per_pass():
    rows = np.arange(7 * 5, dtype=np.int32).reshape(7, 5) + 10
    seen = [tuple(r) for inputs, _ in make_language_model_dataset(
        rows, batch_size=3, pad_id=PAD, bos_id=BOS, seed=4) for r in np.asarray(inputs)]
    assert sorted(seen) == [tuple(r) for r in rows[:, :-1]]


def test_syllables_split_word_joints_and_count_punctuation():
    assert syllables_and_characters(["Hà_Nội mưa .", "  nắng  "]) == (5, 12 + 8)
    assert syllables_and_characters(TEXTS) == (3 + 1 + 2, 10 + 4 + 6)


class Bigram:
    """A model whose next-token logits depend on the current token only: logits = table[ids]."""

    def __init__(self, table):
        self.table = tf.constant(table, tf.float32)

    def __call__(self, ids, training=False):
        return tf.gather(self.table, ids)


def test_summed_nll_and_perplexities_against_hand_computed_values():
    rows = language_model_rows(TEXTS, TABLE, 4)
    data = make_language_model_dataset(rows, batch_size=2, pad_id=PAD, bos_id=BOS,
                                       shuffle=False)
    # Uniform over V = 16 tokens: every target costs ln 16.
    nll, tokens = summed_nll(Bigram(np.zeros((16, 16))), data, PAD)
    assert tokens == 9 and nll == pytest.approx(9 * math.log(16), rel=1e-6)
    scores = perplexities(nll, tokens, *syllables_and_characters(TEXTS))
    assert scores["perplexity_token"] == pytest.approx(16.0, rel=1e-6)
    # 6 syllables, 20 characters: exp(9 ln 16 / 6) = 16^1.5 = 64; 9 * 4 bits / 20 characters.
    assert scores["perplexity_syllable"] == pytest.approx(64.0, rel=1e-6)
    assert scores["bits_per_character"] == pytest.approx(1.8, rel=1e-6)
    assert (scores["tokens"], scores["syllables"], scores["characters"]) == (9, 6, 20)

    # Any table: the NumPy log-softmax of each target, summed over the non-padding targets.
    table = np.random.default_rng(0).normal(size=(16, 12)) * 2
    nll, tokens = summed_nll(Bigram(table), data, PAD)
    inputs, targets = rows[:, :-1], np.where(rows[:, 1:] == BOS, PAD, rows[:, 1:])
    log_probs = table - np.log(np.exp(table).sum(axis=1, keepdims=True))
    mask = targets != PAD
    assert tokens == int(mask.sum())
    assert nll == pytest.approx(-log_probs[inputs[mask], targets[mask]].sum(), rel=1e-5)


def test_perplexities_need_counts():
    with pytest.raises(ValueError, match="syllables"):
        perplexities(1.0, 3, 0, 5)


# The shipped config


def test_vi_news_lm_config_reads_the_articles_of_the_vietnews_files():
    config = load_config(ROOT / "train" / "configs" / "vi_news_lm.yaml",
                         [f"data.data_dir={DATA}"])
    assert config.task == "language_model" and config.training.label_smoothing == 0.0
    assert config.training.max_minutes > 0
    dev = DATA / config.data.dev_source
    if not dev.is_file():
        pytest.skip(f"real corpus file not present: {dev}")
    from train.data import load_summaries, word_joints

    articles = [word_joints(a, config.data.word_joints) for a in load_summaries(dev).articles]
    assert len(articles) == 983  # vietnews/README.md
    assert config.data.word_joints == "split" and not any("_" in a for a in articles)


# End to end

SYLLABLES = ["giá", "vàng", "tăng", "mạnh", "Hà_Nội", "mưa", "lớn", "người_dân", "đường",
             "ngập", "bóng_đá", "đội", "thắng", "học_sinh", "thi", "điểm", "cao"]


def make_article(rng: random.Random) -> str:
    """Sentences of a made-up news language with a little grammar: a word picks its next."""
    sentences = []
    for _ in range(rng.randint(2, 4)):
        word = rng.randrange(len(SYLLABLES))
        words = []
        for _ in range(rng.randint(3, 6)):
            words.append(SYLLABLES[word])
            word = (word + rng.choice((1, 1, 2))) % len(SYLLABLES)
        sentences.append(" ".join(words) + " .")
    return " ".join(sentences)


def tiny_config(data_dir: Path) -> dict:
    return {
        "task": "language_model",
        "data": {"corpus": "tsv", "data_dir": str(data_dir), "train_source": "train.tsv.gz",
                 "dev_source": "dev.tsv.gz", "test_source": "test.tsv",
                 "max_target_length": 24, "tokens_per_batch": 384, "word_joints": "split"},
        "tokenizer": {"vocab_size": 60},
        "model": {"preset": "tiny", "overrides": {"dropout": 0.0}},
        "training": {"epochs": 1, "warmup_steps": 20, "label_smoothing": 0.0, "verbose": 0,
                     "tensorboard": False},
        "eval": {"dev_score_sentences": 10, "samples": 2, "max_sentences": 15},
    }


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A tiny language_model run, trained once for the module by `python -m train`."""
    root = tmp_path_factory.mktemp("lm")
    rng = random.Random(5)
    for name, count in (("train.tsv.gz", 300), ("dev.tsv.gz", 20), ("test.tsv", 20)):
        text = "\n".join(["article\tsummary\ttitle",
                          *(f"{make_article(rng)}\ttóm tắt\ttiêu đề" for _ in range(count))])
        data = (text + "\n").encode("utf-8")
        (root / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config(root), allow_unicode=True), encoding="utf-8")
    out = root / "run"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "train", "--config", str(config), "--out",
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, root, done.stdout


@pytest.mark.slow
def test_run_writes_perplexities_from_one_summed_nll(lm_run):
    out, root, stdout = lm_run
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    from train.data import load_summaries, word_joints
    from train.evaluate import load_run_model
    from train.tokenizers import load_run_tokenizers

    tok = load_run_tokenizers(out)[0]
    model = load_run_model(out / "model.keras")
    for split, path in (("dev", root / "dev.tsv.gz"), ("test", root / "test.tsv")):
        # eval.max_sentences: the first 15 articles of each split are scored.
        texts = [word_joints(a, "split") for a in load_summaries(path).articles][:15]
        tokens = sum(len(ids) + 1 for ids in tok.encode(texts))  # every piece and each EOS
        syllables, characters = syllables_and_characters(texts)
        m = {k.removeprefix(f"{split}_"): v for k, v in metrics.items()
             if k.startswith(f"{split}_")}
        assert (m["tokens"], m["syllables"], m["characters"], m["articles"]) == (
            tokens, syllables, characters, 15)
        assert m["perplexity_token"] == pytest.approx(math.exp(m["nll"] / tokens))
        assert m["perplexity_syllable"] == pytest.approx(math.exp(m["nll"] / syllables))
        assert m["bits_per_character"] == pytest.approx(m["nll"] / characters / math.log(2))
        # The same sum from the saved model's logits, in NumPy.
        rows = language_model_rows(texts, tok, 24)
        logits = np.asarray(model(rows[:, :-1]), np.float64)
        targets = np.where(rows[:, 1:] == BOS, PAD, rows[:, 1:])
        log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
        assert m["nll"] == pytest.approx(-picked[targets != PAD].sum(), rel=1e-4)
        assert f"{split}: perplexity {m['perplexity_token']:.2f} per token" in stdout
    # A trained model beats the uniform distribution over its vocabulary.
    assert metrics["test_perplexity_token"] < model.config.target_vocab_size
    # The dev score is minus the per-token perplexity of the first 10 dev articles; it picks
    # best.keras.
    dev = metrics["epoch_dev"]
    assert dev["neg_perplexity"] == [-v for v in dev["perplexity_token"]]
    assert metrics["best_dev_neg_perplexity"] == pytest.approx(max(dev["neg_perplexity"]),
                                                               abs=1e-3)
    assert metrics["dev_score_articles"] == 10 and (out / "best.keras").is_file()
    assert stdout.count("PROMPT ") == 2


@pytest.mark.slow
def test_evaluate_gives_the_runs_test_perplexity_on_its_text(lm_run, tmp_path):
    """train.evaluate on the run's test articles, one a line with their word joints as the
    file holds them (data.word_joints splits them, as in training) and a blank line among
    them, gives the run's own test perplexities and counts; no output file is written."""
    from train.data import load_summaries
    from train.evaluate import main

    out, root, _ = lm_run
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    articles = load_summaries(root / "test.tsv").articles[:15]  # eval.max_sentences
    assert any("_" in a for a in articles)
    src = tmp_path / "test.txt"
    src.write_text("\n".join([*articles[:7], "", *articles[7:]]) + "\n", encoding="utf-8")
    result = call_main(main, "--run", out, "--src", src)
    assert result.code == 0, result.stderr[-3000:]
    entry = json.loads((out / "metrics.json").read_text(encoding="utf-8"))[
        "evaluations"]["model.keras"]["test.txt"]
    for key in ("tokens", "syllables", "characters"):
        assert entry[key] == metrics[f"test_{key}"], key
    for key in ("nll", "perplexity_token", "perplexity_syllable", "bits_per_character"):
        assert entry[key] == pytest.approx(metrics[f"test_{key}"], rel=1e-9), key
    assert (entry["articles"], entry["skipped"]) == (15, 1)
    assert f"perplexity {metrics['test_perplexity_token']:.2f} per token" in result.stdout
    assert "skipped 1 empty lines" in result.stderr
    assert not (out / "eval").exists()


@pytest.mark.slow
@pytest.mark.parametrize("args, words", [
    (("--ref", "REF"), ["--ref does not apply to a language_model run", "--batch-size"]),
    (("--hyp", "OUT"), ["--hyp does not apply to a language_model run"]),
    (("--beam", "2"), ["--beam does not apply"]),
    (("--plot-attention", "1"), ["--plot-attention does not apply"]),
])
def test_evaluate_refuses_what_a_language_model_does_not_take(lm_run, tmp_path, args, words):
    from train.evaluate import main

    src = tmp_path / "a.txt"
    src.write_text("mưa lớn .\n", encoding="utf-8")
    args = [str(src) if a == "REF" else str(tmp_path / "o.txt") if a == "OUT" else a
            for a in args]
    result = call_main(main, "--run", lm_run[0], "--src", src, *args)
    assert_clean_failure(result, 2, *words)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n", encoding="utf-8")
    assert_clean_failure(call_main(main, "--run", lm_run[0], "--src", blank), 2,
                         "no non-empty line")


def generate(out: Path, *args):
    from train.generate import main

    return call_main(main, "--run", out, *args)


@pytest.mark.slow
def test_greedy_generation_equals_the_uncached_argmax(lm_run):
    out = lm_run[0]
    prompt = "giá vàng tăng"
    first = generate(out, "--prompt", prompt, "--max-new-tokens", "12")
    assert first.code == 0, first.stderr
    assert generate(out, "--prompt", prompt, "--max-new-tokens", "12").stdout == first.stdout
    # Reference: the full forward pass over the whole sequence, argmax at its last position.
    from train.evaluate import load_run_model
    from train.tokenizers import load_run_tokenizers

    tok = load_run_tokenizers(out)[0]
    model = load_run_model(out / "model.keras")
    ids = [BOS, *tok.encode([prompt])[0]]
    start = len(ids)
    for _ in range(12):
        ids.append(int(np.argmax(np.asarray(model(np.array([ids], np.int32)))[0, -1])))
        if ids[-1] == EOS:
            break
    assert first.stdout.splitlines() == tok.decode([ids])
    assert len(ids) > start


@pytest.mark.slow
def test_sampling_is_reproducible_under_a_seed(lm_run):
    out = lm_run[0]
    args = ("--prompt", "Hà Nội mưa", "--temperature", "1.2", "--top-k", "20", "--top-p",
            "0.95", "--num-samples", "3", "--max-new-tokens", "15")
    one = generate(out, *args, "--seed", "5")
    assert one.code == 0, one.stderr
    texts = one.stdout.splitlines()
    assert len(texts) == 3 and all(t.startswith("Hà Nội mưa") for t in texts)
    assert generate(out, *args, "--seed", "5").stdout == one.stdout
    assert generate(out, *args, "--seed", "6").stdout != one.stdout
    unseeded = generate(out, *args)
    seed = unseeded.stderr.split("--seed ")[1].split()[0]
    assert generate(out, *args, "--seed", seed).stdout == unseeded.stdout


@pytest.mark.parametrize("args, words", [
    (("--top-p", "0"), ["--top-p", "(0, 1]"]),
    (("--top-p", "1.5"), ["--top-p", "(0, 1]"]),
    (("--top-k", "0"), ["--top-k", "at least 1"]),
    (("--temperature", "0"), ["--temperature", "(0, 100]"]),
    (("--temperature", "-1"), ["--temperature", "(0, 100]"]),
    (("--max-new-tokens", "0"), ["--max-new-tokens", "from 1 to 4096"]),
])
def test_out_of_range_options_are_refused_by_the_parser(tmp_path, args, words):
    result = generate(tmp_path, "--prompt", "mưa", *args)
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("python -m train.generate: error: argument"), error
    assert all(word in error for word in words), error


@pytest.mark.parametrize("args, words", [
    (("--prompt", " "), ["--prompt", "empty"]),
    (("--prompt", "mưa", "--num-samples", "3"), ["--num-samples", "sampling"]),
    (("--prompt", "mưa", "--model", "../model.keras"), ["--model", "file name"]),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    assert_clean_failure(generate(tmp_path, *args), 2, *words)


@pytest.mark.slow
@pytest.mark.parametrize("args, words", [
    (("--prompt", "mưa " * 40), ["prompt", "at most 22", "shorten"]),
    (("--prompt", "mưa", "--model", "missing.keras"), ["missing.keras"]),
])
def test_bad_input_for_the_run_is_one_line_and_exit_2(lm_run, args, words):
    assert_clean_failure(generate(lm_run[0], *args), 2, *words)


def test_a_run_of_another_task_or_no_run_is_refused(tmp_path):
    from train.config import RunConfig, save_config
    from train.generate import main

    assert_clean_failure(call_main(main, "--run", tmp_path / "none", "--prompt", "x"), 2,
                         "run directory not found")
    save_config(RunConfig(), tmp_path / "config.yaml")
    assert_clean_failure(call_main(main, "--run", tmp_path, "--prompt", "x"), 2,
                         "translation run", "language_model")
