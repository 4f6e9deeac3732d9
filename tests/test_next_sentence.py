"""BERT's next-sentence prediction beside the masked pieces (data.next_sentence): the pairs
against a reading of the documents, the head against NumPy, the batches' labels against the
rows they belong to, the .keras round trip, and a run that pre-trains on pairs and is
fine-tuned from."""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli_probe import assert_clean_failure, run_cli
from tests.test_masked_lm import EOS, MASK, PAD, SPECIALS, WORDS, args, fine_tune_args

tf = pytest.importorskip("tensorflow")

SEP = 5


def documents(rng, count=30, vocab=(6, 400)):
    """Documents of 1 to 5 sentences of 1 to 12 ordinary ids."""
    return [[list(rng.integers(*vocab, size=rng.integers(1, 13)))
             for _ in range(rng.integers(1, 6))] for _ in range(count)]


def test_each_sentence_with_a_next_opens_one_pair_of_its_next_or_another_documents():
    from keras_transformer.text.sentence_pairs import sentence_pairs

    docs = documents(np.random.default_rng(0), count=200)
    rows, labels = sentence_pairs(docs, max_length=64, sep_id=SEP, eos_id=EOS, seed=3)
    # Read back: row k is the k-th sentence that has a next one, then its B.
    openers = [(d, i) for d, doc in enumerate(docs) for i in range(len(doc) - 1)]
    assert len(rows) == len(labels) == len(openers)
    where = {}
    for d, doc in enumerate(docs):
        for sentence in doc:
            where.setdefault(tuple(sentence), set()).add(d)
    for row, label, (d, i) in zip(rows, labels, openers, strict=True):
        assert row[-1] == EOS and row.count(SEP) == 1  # ordinary ids never equal SEP
        cut = row.index(SEP)
        a, b = row[:cut], row[cut + 1: -1]
        assert a == docs[d][i]  # 12 + 12 + 2 <= 64: nothing truncated
        if label == 1:
            assert b == docs[d][i + 1]
        else:
            assert label == 0 and where[tuple(b)] - {d}  # a sentence of another document
    assert abs(np.mean(labels) - 0.5) < 0.07
    again = sentence_pairs(docs, max_length=64, sep_id=SEP, eos_id=EOS, seed=3)
    assert again == (rows, labels)
    assert sentence_pairs(docs, max_length=64, sep_id=SEP, eos_id=EOS, seed=4)[1] != labels


def test_a_pair_too_long_loses_the_longer_segments_last_pieces():
    from keras_transformer.text.sentence_pairs import truncate_pair

    # Room 7: (6, 4) -> (5, 4) -> (4, 4) -> (3, 4), the tie cutting a.
    assert truncate_pair([1, 2, 3, 4, 5, 6], [7, 8, 9, 10], 7) == ([1, 2, 3], [7, 8, 9, 10])
    assert truncate_pair([1], [2, 3, 4, 5], 3) == ([1], [2, 3])
    assert truncate_pair([1, 2], [3], 9) == ([1, 2], [3])


@pytest.mark.parametrize("docs, message", [
    ([[[7]], [[8]], [[9]]], "at least two sentences"),
    ([[[7], [8], [9]]], "at least two documents"),
    ([[[7], []], [[], [8]]], "at least two sentences"),  # empty sentences are dropped
])
def test_text_with_no_pair_or_no_other_document_is_refused(docs, message):
    from keras_transformer.text.sentence_pairs import sentence_pairs

    with pytest.raises(ValueError, match=message):
        sentence_pairs(docs, max_length=16, sep_id=SEP, eos_id=EOS, seed=0)


def test_the_batches_carry_each_rows_own_label_and_never_mask_sep():
    from keras_transformer.text.pipeline import make_masked_lm_dataset
    from keras_transformer.text.sentence_pairs import sentence_pairs

    rows, labels = sentence_pairs(documents(np.random.default_rng(1), count=300),
                                  max_length=20, sep_id=SEP, eos_id=EOS, seed=2)
    label_of = {tuple(r): y for r, y in zip(rows, labels, strict=True)}
    masking = dict(rate=0.3, mask_id=MASK, vocab_size=400, special_ids=(*SPECIALS, SEP),
                   seed=4, max_predictions=12)
    common = dict(max_length=20, tokens_per_batch=160, pad_id=PAD, masking=masking,
                  shuffle=True, seed=5, next_sentence=labels)
    seen = 0
    for inputs, (targets, follows) in make_masked_lm_dataset(rows, **common):
        inputs, targets = inputs.numpy(), targets.numpy()
        original = np.where(targets != PAD, targets, inputs)
        assert not (targets == SEP).any()
        for row, label in zip(original, follows.numpy(), strict=True):
            assert label_of[tuple(int(i) for i in row[row != PAD])] == label
            seen += 1
    assert seen == len(rows)
    # With positions, the same batches and labels.
    positioned = make_masked_lm_dataset(rows, positions=True, **common)
    plain = make_masked_lm_dataset(rows, **common)
    for ((inputs, _), (_, follows)), (plain_inputs, (_, plain_follows)) in zip(
            positioned, plain, strict=True):
        np.testing.assert_array_equal(inputs.numpy(), plain_inputs.numpy())
        np.testing.assert_array_equal(follows.numpy(), plain_follows.numpy())
    with pytest.raises(ValueError, match="one a row"):
        make_masked_lm_dataset(rows, **{**common, "next_sentence": labels[:-1]})


def test_the_next_sentence_head_is_berts_pooler_over_the_mean_then_two_classes(tiny_config):
    from keras_transformer.models.masked_lm import TransformerMaskedLM

    model = TransformerMaskedLM(tiny_config, next_sentence=True)
    model.build()
    ids = np.array([[7, 8, SEP, 9, EOS, PAD], [10, SEP, 11, 12, 13, EOS]], np.int32)
    states, _ = model.encode(ids)
    states, real = np.asarray(states), (ids != PAD)[..., None]
    mean = (states * real).sum(1) / real.sum(1)
    pooler, head = model.nsp_pooler, model.nsp_head
    pooled = np.tanh(mean @ np.asarray(pooler.kernel) + np.asarray(pooler.bias))
    expected = pooled @ np.asarray(head.kernel) + np.asarray(head.bias)
    np.testing.assert_allclose(np.asarray(model.next_sentence_logits(ids)), expected,
                               atol=1e-5)
    # With positions: the fill logits gathered there, and the head's.
    positions = np.array([[0, 3], [2, 4]], np.int32)
    logits, follows = model((ids, positions))
    full = np.asarray(model(ids))
    np.testing.assert_allclose(np.asarray(logits),
                               np.take_along_axis(full, positions[..., None], 1), atol=1e-5)
    np.testing.assert_allclose(np.asarray(follows), expected, atol=1e-5)
    plain = TransformerMaskedLM(tiny_config)
    plain.build()
    with pytest.raises(ValueError, match="no next-sentence head"):
        plain.next_sentence_logits(ids)


def test_a_masked_lm_with_the_head_round_trips_through_a_keras_file(tiny_config, tmp_path):
    import keras

    import keras_transformer  # noqa: F401
    from keras_transformer.models.masked_lm import TransformerMaskedLM

    model = TransformerMaskedLM(tiny_config, next_sentence=True)
    model.build()
    ids = np.array([[7, SEP, 8, EOS]], np.int32)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.next_sentence
    np.testing.assert_allclose(np.asarray(loaded.next_sentence_logits(ids)),
                               np.asarray(model.next_sentence_logits(ids)), atol=1e-6)


def test_a_text_files_documents_end_at_blank_lines_or_are_its_lines(tmp_path):
    from train.tasks.masked_lm import read_documents, read_texts

    (tmp_path / "docs.txt").write_text("One.\nTwo.\n\n\nThree.\n\nFour.\tx\nFive.\n")
    assert read_documents(tmp_path / "docs.txt", "keep", True) == [
        ["one.", "two."], ["three."], ["four.", "five."]]
    assert read_texts(tmp_path / "docs.txt", "keep", False) == [
        "One.", "Two.", "Three.", "Four.", "Five."]
    # Without a blank line inside, each line is a document of its own (separate sentences).
    (tmp_path / "lines.txt").write_text("\nOne.\nTwo.\nThree.\n\n")
    assert read_documents(tmp_path / "lines.txt", "keep", False) == [
        ["One."], ["Two."], ["Three."]]


def write_documents(folder: Path, rng, documents=60) -> None:
    """Text files of documents separated by blank lines; each document's words from its own
    third of WORDS, so that a next sentence shares its first sentence's words."""
    for split, count in (("train", documents), ("dev", documents // 3)):
        (folder / split).mkdir(parents=True, exist_ok=True)
        docs = []
        for d in range(count):
            words = WORDS[(d % 3) * 8: (d % 3) * 8 + 8]
            docs.append("\n".join(" ".join(rng.choice(words, size=rng.integers(3, 7)))
                                  for _ in range(rng.integers(2, 5))))
        (folder / split / "sents.txt").write_text("\n\n".join(docs) + "\n")
        # The classifier's lines: the same sentences without the blank lines.
        (folder / split / "lines.txt").write_text("\n".join(docs) + "\n")
        labels = [str(i % 3) for i in range(sum(d.count("\n") + 1 for d in docs))]
        (folder / split / "labels.txt").write_text("\n".join(labels) + "\n")


@pytest.mark.slow
def test_pre_training_on_pairs_reports_the_accuracy_and_a_classifier_leaves_its_head(
        tmp_path):
    write_documents(tmp_path / "corpus", np.random.default_rng(6))
    pre = tmp_path / "pre"
    result = run_cli("train", *args("vi_masked_lm.yaml", pre, tmp_path / "corpus",
                                    "data.texts=[train/sents.txt]",
                                    "data.dev_texts=[dev/sents.txt]", "data.next_sentence=true",
                                    "training.epochs=2"))
    assert result.code == 0, result.stderr[-3000:]
    metrics = json.loads((pre / "metrics.json").read_text())
    import keras

    import keras_transformer  # noqa: F401
    from train.tasks import load_run_config, task_class

    # The reported accuracy is the saved model's over the dev pairs, counted here again from
    # the run's config and tokenizer.
    model = keras.models.load_model(pre / "model.keras", compile=False)
    assert model.next_sentence
    config = load_run_config(pre / "config.yaml", [f"tokenizer.model={pre / 'spm.model'}"])
    task = task_class("masked_lm")(config)
    (tmp_path / "again").mkdir()
    task.prepare(tmp_path / "again")
    right = total = 0
    for inputs, (_, follows) in task.dataset("dev", seed=12345, shuffle=False,
                                             positions=False):
        guess = np.argmax(np.asarray(model.next_sentence_logits(inputs)), -1)
        right += int((guess == follows.numpy()).sum())
        total += len(guess)
    assert total == metrics["sentences"]["dev"] and 0 < sum(task.follows["dev"]) < total
    assert metrics["dev_next_sentence_accuracy"] == round(100 * right / total, 2)
    assert len(metrics["epoch_dev"]["next_sentence_accuracy_percent"]) == 2
    assert task.tok.piece_id("[SEP]") is not None
    # A classifier fine-tuned from it takes the trunk and leaves the pooler and both heads.
    out = tmp_path / "fine"
    tuned = run_cli("train", *fine_tune_args(tmp_path, out, pre,
                                             "data.train_source=train/lines.txt",
                                             "data.dev_source=dev/lines.txt"))
    assert tuned.code == 0, tuned.stderr[-3000:]
    assert "nsp_pooler/kernel" in tuned.stderr and "nsp_head/kernel" in tuned.stderr
    assert model.nsp_head.kernel.shape == (16, 2)
    # Separate sentences (no blank line between documents) give no pair.
    (tmp_path / "one" / "train").mkdir(parents=True)
    (tmp_path / "one" / "dev").mkdir(parents=True)
    for split in ("train", "dev"):
        (tmp_path / "one" / split / "sents.txt").write_text("a b\nc d\ne f\n")
    refused = run_cli("train", *args("vi_masked_lm.yaml", tmp_path / "no", tmp_path / "one",
                                     "data.texts=[train/sents.txt]",
                                     "data.dev_texts=[dev/sents.txt]",
                                     "data.next_sentence=true"))
    assert_clean_failure(refused, 2, "data.next_sentence", "documents of at least two")
