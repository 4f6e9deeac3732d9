"""data.lowercase: the tasks whose model reads lower-cased text (a pre-training and the
fine-tunes that read as it did), in training, in a warm start and in the exported runtimes;
the reference is str.lower on the text as written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from train.config import ConfigError, load_config


@pytest.mark.parametrize("task, refused", [
    ("masked_lm", False), ("denoising", False), ("classification", False),
    ("extractive_summarization", False), ("content_selection", False), ("translation", True),
    ("summarization", True),
    ("language_model", True),
])
def test_data_lowercase_is_refused_where_the_task_would_ignore_it(task, refused):
    from train.tasks import task_class

    config = load_config(None, [f"task={task}", "data.lowercase=true"])
    if refused:
        with pytest.raises(ConfigError, match=f"task {task} reads its text as written"):
            task_class(task).check_config(config)
    else:
        try:
            task_class(task).check_config(config)
        except ConfigError as err:
            assert "lowercase" not in str(err)


def test_a_classifiers_splits_are_lower_cased_when_the_config_says(tmp_path):
    from train.data import load_classification

    lines = ["sentence\tlabel", "A Fine FILM\t1", "Dull\t0"]
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for lowercase in (False, True):
        config = load_config(None, ["task=classification", "data.corpus=tsv",
                                    f"data.data_dir={tmp_path}", "data.train_source=train.tsv",
                                    "data.dev_source=dev.tsv", f"data.lowercase={lowercase}"])
        texts = load_classification(config.data)["dev"].texts
        written = [line.split("\t")[0] for line in lines[1:]]
        assert texts == ([t.lower() for t in written] if lowercase else written)


def test_a_warm_start_from_a_run_that_read_another_case_is_refused(tmp_path):
    from train.config import save_config
    from train.warm_start import check_text_reading

    run = tmp_path / "pre"
    run.mkdir()
    save_config(load_config(None, ["task=masked_lm", "data.lowercase=true"]), run / "config.yaml")
    check_text_reading(load_config(None, ["task=classification", "data.lowercase=true"]), run)
    with pytest.raises(ValueError, match="read its text lower-cased .*set data.lowercase: true"):
        check_text_reading(load_config(None, ["task=classification"]), run)


def test_a_warm_start_from_a_run_that_read_word_joints_otherwise_is_refused(tmp_path):
    from train.config import save_config
    from train.warm_start import check_text_reading

    run = tmp_path / "pre"
    run.mkdir()
    save_config(load_config(None, ["task=denoising", "data.word_joints=split"]),
                run / "config.yaml")
    check_text_reading(load_config(None, ["task=summarization", "data.word_joints=split"]), run)
    with pytest.raises(ValueError, match="word_joints: split; set data.word_joints: split"):
        check_text_reading(load_config(None, ["task=summarization"]), run)
    # A classifier reads its text as written, whatever its data.word_joints says.
    check_text_reading(load_config(None, ["task=classification"]), run)


@pytest.mark.parametrize("lowercase", [False, True])
def test_an_exported_classifier_reads_as_its_manifest_says(tmp_path, lowercase):
    from export.common import MANIFEST_VERSION, Manifest, file_entry
    from export.kinds.classifier.runtime import Classifier
    from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece

    text = "A Fine Film . a fine film . A FINE FILM ."
    (tmp_path / "spm.model").write_bytes(
        train_sentencepiece([text] * 50, tmp_path / "spm", 40).read_bytes())
    manifest = {"manifest_version": MANIFEST_VERSION, "kind": "classifier", "formats": {},
                "files": {"spm.model": file_entry(tmp_path, tmp_path / "spm.model")},
                "tokenizer": {"source": "spm.model"}, "vocab": {"source_size": 40},
                "special_ids": {"pad": 0, "unk": 1, "eos": 3}, "max_source_length": 32,
                "labels": ["negative", "positive"], "lowercase": lowercase,
                "model": {"num_classes": 2}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    seen = []

    def run(ids):
        seen.append(ids.copy())
        return np.full((len(ids), 2), 0.5, np.float32)

    Classifier(Manifest(tmp_path), run).probabilities(["A FINE Film ."])
    tok = SentencePieceTokenizer.load(tmp_path / "spm.model")
    read = "a fine film ." if lowercase else "A FINE Film ."
    assert list(seen[0][0]) == tok.encode([read])[0] + [3]
