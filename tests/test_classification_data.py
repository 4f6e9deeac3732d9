"""Labeled sentences for task classification: the two file formats, label names and unknown
labels, and the accuracy / per-class F1 / macro-F1 the task reports."""

from __future__ import annotations

import pytest

from train.config import ConfigError, load_config
from train.data import load_classification, load_labeled_lines, load_labeled_tsv
from train.scoring import classification_scores

NAMES = ["negative", "neutral", "positive"]


def write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_macro_f1_against_hand_computed_values():
    gold = [0, 0, 0, 1, 1, 2, 2, 2, 2, 2]
    predicted = [0, 0, 1, 1, 2, 2, 2, 2, 0, 2]
    # class 0: 2 right of 3 labeled and 3 predicted: P = R = 2/3, F1 = 2/3
    # class 1: 1 right of 2 labeled and 2 predicted: F1 = 1/2
    # class 2: 4 right of 5 labeled and 5 predicted: F1 = 4/5
    scores = classification_scores(gold, predicted, NAMES)
    assert scores["accuracy"] == 70.0
    assert scores["f1"] == {"negative": 66.67, "neutral": 50.0, "positive": 80.0}
    assert scores["macro_f1"] == round(100 * (2 / 3 + 1 / 2 + 4 / 5) / 3, 2) == 65.56


def test_macro_f1_counts_a_class_never_predicted_and_skips_an_absent_one():
    # "neutral" is labeled twice and never predicted: F1 0, in the average. "other" is
    # neither labeled nor predicted: null, left out (scikit-learn's macro average).
    gold = [0, 0, 1, 1, 2, 2]
    predicted = [0, 0, 0, 2, 2, 2]
    scores = classification_scores(gold, predicted, [*NAMES, "other"])
    # negative: P = 2/3, R = 1 -> F1 = 0.8; positive: P = 2/3, R = 1 -> 0.8
    assert scores["f1"] == {"negative": 80.0, "neutral": 0.0, "positive": 80.0, "other": None}
    assert scores["macro_f1"] == round(100 * (0.8 + 0 + 0.8) / 3, 2) == 53.33
    assert scores["accuracy"] == round(100 * 4 / 6, 2)


def test_uit_vsfc_format_reads_ids_or_names(tmp_path):
    texts = write(tmp_path / "sents.txt", ["giảng viên nhiệt tình .", "", "phòng học nóng ."])
    labels = write(tmp_path / "sentiments.txt", ["2", "", "negative"])
    split = load_labeled_lines(texts, labels, NAMES)
    # The blank sentence is dropped with its (blank) label; a name and an id both read.
    assert split.texts == ["giảng viên nhiệt tình .", "phòng học nóng ."]
    assert split.labels == [2, 0]


@pytest.mark.parametrize("label, names, words", [
    ("3", NAMES, ["sentiments.txt:2", "unknown label '3'", "negative, neutral, positive"]),
    ("positive", (), ["sentiments.txt:2", "unknown label 'positive'", "data.labels"]),
    ("-1", (), ["sentiments.txt:2", "unknown label '-1'"]),
])
def test_unknown_label_names_file_and_line(tmp_path, label, names, words):
    texts = write(tmp_path / "sents.txt", ["tốt .", "tệ ."])
    labels = write(tmp_path / "sentiments.txt", ["0", label])
    with pytest.raises(ValueError) as err:
        load_labeled_lines(texts, labels, names)
    for word in words:
        assert word in str(err.value)


def test_uit_vsfc_format_refuses_misaligned_files_and_missing_labels(tmp_path):
    texts = write(tmp_path / "sents.txt", ["tốt .", "tệ ."])
    with pytest.raises(ValueError, match="has 2 lines but .*has 1"):
        load_labeled_lines(texts, write(tmp_path / "one.txt", ["0"]), NAMES)
    with pytest.raises(ValueError, match=r"blank.txt:2: empty label"):
        load_labeled_lines(texts, write(tmp_path / "blank.txt", ["0", " "]), NAMES)


def test_tsv_format_reads_names_and_skips_a_header(tmp_path):
    tsv = write(tmp_path / "train.tsv", ["sentence\tlabel", "good film\tpositive", "bad\t0"])
    split = load_labeled_tsv(tsv, NAMES)
    assert split.texts == ["good film", "bad"] and split.labels == [2, 0]
    with pytest.raises(ValueError, match=r"train.tsv:3: unknown label '7'"):
        load_labeled_tsv(write(tsv, ["sentence\tlabel", "a\t1", "b\t7"]), ["no", "yes"])


def test_load_classification_reads_the_test_split_of_either_format(tmp_path):
    for split in ("train", "dev", "test"):
        write(tmp_path / f"{split}.txt", ["a b", "c d"])
        write(tmp_path / f"{split}.lab", ["neutral", "2"])
    sets = [f"data.data_dir={tmp_path}", "task=classification", "data.corpus=parallel",
            "data.labels=[negative, neutral, positive]"]
    sets += [f"data.{s}_{side}={s}.{ext}" for s in ("train", "dev", "test")
             for side, ext in (("source", "txt"), ("target", "lab"))]
    splits = load_classification(load_config(None, sets).data)
    assert sorted(splits) == ["dev", "test", "train"]
    assert splits["test"].labels == [1, 2]


@pytest.mark.parametrize("value, words", [("[a, a]", "distinct"), ("[1, 2]", "non-empty strings"),
                                          ("pos", "list")])
def test_data_labels_is_checked_when_the_config_loads(value, words):
    from train.tasks import load_run_config

    with pytest.raises(ConfigError, match=words):
        load_run_config(None, ["task=classification", f"data.labels={value}"])
