"""Masked language modelling and fine-tuning from it: BERT's masking rule against a count of
what it did, the tied head against NumPy, the .keras round trip, weights loaded by name into
the classifier, and the runs end to end (pre-train, then fine-tune) with their refusals."""

import json
from math import erf
from pathlib import Path

import numpy as np
import pytest

from tests.cli_probe import ROOT, assert_clean_failure, run_cli

tf = pytest.importorskip("tensorflow")

MASK, PAD, UNK, BOS, EOS = 4, 0, 1, 2, 3
SPECIALS = (PAD, UNK, BOS, EOS)


def masked(ids, index=0, seed=7, rate=0.15, vocab=500, word_starts=None, cap=None):
    from keras_transformer.text.masking import mask_batch

    inputs, targets = mask_batch(tf.constant(ids, tf.int32), index, rate=rate, mask_id=MASK,
                                 pad_id=PAD, vocab_size=vocab, special_ids=SPECIALS, seed=seed,
                                 word_starts=word_starts, max_predictions=cap)
    return inputs.numpy(), targets.numpy()


def ordinary_ids(rng, rows=200, length=60, vocab=500):
    ids = rng.integers(5, vocab, size=(rows, length)).astype(np.int32)
    ids[:, -1] = EOS
    ids[:50, 40:] = PAD  # some padded rows
    return ids


def test_masking_follows_berts_rule_and_never_touches_special_pieces():
    ids = ordinary_ids(np.random.default_rng(0))
    inputs, targets = masked(ids)
    chosen = targets != PAD
    ordinary = ~np.isin(ids, [*SPECIALS, MASK])
    # Targets: the original piece where chosen, padding elsewhere; specials never chosen.
    np.testing.assert_array_equal(targets[chosen], ids[chosen])
    assert not (chosen & ~ordinary).any()
    np.testing.assert_array_equal(inputs[~chosen], ids[~chosen])
    # 15% of the ordinary pieces; of those 80% [MASK], 10% another piece, 10% unchanged.
    n = chosen.sum()
    assert abs(n / ordinary.sum() - 0.15) < 0.01
    as_mask = (inputs[chosen] == MASK).mean()
    unchanged = (inputs[chosen] == ids[chosen]).mean()
    assert abs(as_mask - 0.8) < 0.03 and abs(unchanged - 0.1 - 1 / 495) < 0.03
    assert not np.isin(inputs[chosen & (inputs != MASK)], SPECIALS).any()


def test_masking_is_a_function_of_seed_and_batch_index():
    ids = ordinary_ids(np.random.default_rng(1))
    np.testing.assert_array_equal(masked(ids, index=3)[0], masked(ids, index=3)[0])
    assert (masked(ids, index=3)[1] != masked(ids, index=4)[1]).any()
    assert (masked(ids, seed=1)[1] != masked(ids, seed=2)[1]).any()


def test_whole_word_masking_hides_every_piece_of_a_chosen_word_and_only_those():
    rng = np.random.default_rng(2)
    ids = ordinary_ids(rng, rows=100)
    starts = rng.random(ids.shape) < 0.4
    starts[:, 0] = True
    inputs, targets = masked(ids, rate=0.3, word_starts=tf.constant(starts))
    chosen = targets != PAD
    ordinary = ~np.isin(ids, [*SPECIALS, MASK])
    for row in range(len(ids)):
        word = np.cumsum(starts[row]) - 1
        for w in np.unique(word):
            pieces = (word == w) & ordinary[row]
            # One decision per word: all of its ordinary pieces chosen, or none.
            assert chosen[row][pieces].all() or not chosen[row][pieces].any()
    share = chosen.sum() / ordinary.sum()
    assert 0.2 < share < 0.4


def position_reference(targets, slots):
    """NumPy's reading of the gathered form: each row's masked positions in order and their
    targets, then position 0 with label PAD up to min(slots, length)."""
    slots = min(slots, targets.shape[1])
    positions = np.zeros((len(targets), slots), np.int32)
    labels = np.full((len(targets), slots), PAD, np.int32)
    for row, target in enumerate(targets):
        where = np.flatnonzero(target != PAD)
        assert len(where) <= slots
        positions[row, : len(where)] = where
        labels[row, : len(where)] = target[where]
    return positions, labels


@pytest.mark.parametrize("whole_words", [False, True])
def test_a_cap_keeps_at_most_that_many_chosen_pieces_and_leaves_the_others_untouched(
        whole_words):
    rng = np.random.default_rng(6)
    ids = ordinary_ids(rng, rows=400)
    starts = None
    if whole_words:
        starts = rng.random(ids.shape) < 0.5
        starts[:, 0] = True
        starts = tf.constant(starts)
    cap = 9  # at 30% of a row's 59 ordinary pieces (39 in 50 rows), most rows choose more
    free_inputs, free_targets = masked(ids, rate=0.3, word_starts=starts)
    inputs, targets = masked(ids, rate=0.3, word_starts=starts, cap=cap)
    free, kept = free_targets != PAD, targets != PAD
    counts = kept.sum(1)
    assert counts.max() <= cap and not (kept & ~free).any()
    # The pieces the cap drops are read as they are; the kept ones masked as without a cap.
    np.testing.assert_array_equal(inputs[~kept], ids[~kept])
    np.testing.assert_array_equal(inputs[kept], free_inputs[kept])
    under = free.sum(1) <= cap
    np.testing.assert_array_equal(targets[under], free_targets[under])
    if whole_words:
        # A word's pieces share its draw: a cut at the cap never splits a word.
        for row in range(len(ids)):
            word = np.cumsum(starts.numpy()[row]) - 1
            for w in np.unique(word[free[row]]):
                pieces = (word == w) & free[row]
                assert kept[row][pieces].all() or not kept[row][pieces].any()
    else:
        assert (counts[~under] == cap).all()
        # The kept ones are a sample of the chosen, not the first ones of a row: the first
        # half of the positions holds about half of them (18 chosen there of ~35 a row).
        over = free[~under]
        first_half = kept[~under][:, :30].sum() / kept[~under].sum()
        chosen_half = over[:, :30].sum() / over.sum()
        assert abs(first_half - chosen_half) < 0.05


def test_masked_positions_list_each_rows_targets_as_numpy_does():
    from keras_transformer.text.masking import mask_batch, masked_positions

    ids = ordinary_ids(np.random.default_rng(8), rows=60, length=20)
    for cap in (6, 40):  # 40: more slots than the 20 positions, so min(cap, length) slots
        _, targets = mask_batch(tf.constant(ids), 0, rate=0.2, mask_id=MASK, pad_id=PAD,
                                vocab_size=500, special_ids=SPECIALS, seed=3,
                                max_predictions=cap)
        positions, labels = masked_positions(targets, PAD, cap)
        want_positions, want_labels = position_reference(targets.numpy(), cap)
        np.testing.assert_array_equal(positions.numpy(), want_positions)
        np.testing.assert_array_equal(labels.numpy(), want_labels)


def test_the_dataset_with_positions_masks_as_the_one_without():
    from keras_transformer.text.pipeline import make_masked_lm_dataset

    rng = np.random.default_rng(9)
    rows = [[*rng.integers(5, 500, size=rng.integers(2, 30)), EOS] for _ in range(120)]
    masking = dict(rate=0.15, mask_id=MASK, vocab_size=500, special_ids=SPECIALS, seed=4,
                   max_predictions=7)
    common = dict(max_length=32, tokens_per_batch=256, pad_id=PAD, masking=masking,
                  shuffle=False)
    with_positions = make_masked_lm_dataset(rows, positions=True, **common)
    plain = make_masked_lm_dataset(rows, **common)
    batches = 0
    for ((inputs, positions), labels), (plain_inputs, targets) in zip(with_positions, plain,
                                                                      strict=True):
        np.testing.assert_array_equal(inputs.numpy(), plain_inputs.numpy())
        want_positions, want_labels = position_reference(targets.numpy(), 7)
        np.testing.assert_array_equal(positions.numpy(), want_positions)
        np.testing.assert_array_equal(labels.numpy(), want_labels)
        batches += 1
    assert batches > 3
    uncapped = {k: v for k, v in masking.items() if k != "max_predictions"}
    with pytest.raises(ValueError, match="max_predictions"):
        make_masked_lm_dataset(rows, positions=True, **{**common, "masking": uncapped})


def test_the_cap_defaults_to_three_deviations_above_the_mean_and_is_bounded():
    from keras_transformer.text.masking import check_max_predictions, default_max_predictions

    for rate, length in ((0.15, 64), (0.15, 16), (0.4, 128), (0.9, 8)):
        mean, spread = rate * length, np.sqrt(length * rate * (1 - rate))
        assert default_max_predictions(rate, length) == min(length,
                                                            int(np.ceil(mean + 3 * spread)))
    assert default_max_predictions(0.15, 64) == 19
    assert check_max_predictions(10, 0.15, 64) == 10
    for cap in (9, 65):  # below a full row's 15% (9.6), above its length
        with pytest.raises(ValueError, match="between 10 .* and 64"):
            check_max_predictions(cap, 0.15, 64)


@pytest.mark.parametrize("cap, refused", [(0, False), (10, False), (64, False), (9, True),
                                          (65, True), (-1, True)])
def test_data_max_predictions_is_checked_when_the_config_loads(cap, refused):
    from train.config import ConfigError
    from train.tasks import load_run_config

    recipe = ROOT / "train" / "configs" / "vi_masked_lm.yaml"
    overrides = [f"data.max_predictions={cap}"]
    if refused:
        with pytest.raises(ConfigError, match="data.max_predictions"):
            load_run_config(recipe, overrides)
    else:
        assert load_run_config(recipe, overrides).data.max_predictions == cap


@pytest.mark.parametrize("rate", [0.0, 1.0, -0.1])
def test_a_mask_rate_of_0_or_1_is_refused(rate):
    from keras_transformer.text.masking import check_rate

    with pytest.raises(ValueError, match="mask rate"):
        check_rate(rate)


def test_the_head_is_the_tied_embedding_plus_a_bias_after_a_gelu_layer_norm(tiny_config):
    from keras_transformer.models.masked_lm import TransformerMaskedLM

    model = TransformerMaskedLM(tiny_config)
    model.build()
    bias = np.random.default_rng(3).normal(size=model.head_bias.shape).astype("float32")
    model.head_bias.assign(bias)
    ids = np.array([[5, 6, 7, EOS, PAD], [8, 9, EOS, PAD, PAD]], np.int32)
    states, _ = model.encode(ids)
    dense = model.head_transform
    h = np.asarray(states) @ np.asarray(dense.kernel) + np.asarray(dense.bias)
    h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    norm = model.head_norm
    h = (h - mean) / np.sqrt(var + norm.epsilon) * np.asarray(norm.gamma) + np.asarray(norm.beta)
    expected = h @ np.asarray(model.embedding.embeddings).T + bias
    np.testing.assert_allclose(np.asarray(model(ids)), expected, atol=2e-4)


def test_a_masked_lm_round_trips_through_a_keras_file(tiny_config, tmp_path):
    import keras

    import keras_transformer  # noqa: F401
    from keras_transformer.models.masked_lm import TransformerMaskedLM

    model = TransformerMaskedLM(tiny_config)
    model.build()
    ids = np.array([[5, 6, 7, EOS]], np.int32)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert type(loaded).__name__ == "TransformerMaskedLM"
    np.testing.assert_allclose(np.asarray(loaded(ids)), np.asarray(model(ids)), atol=1e-6)


def test_a_classifier_takes_the_embedding_and_encoder_by_name_and_only_those(tiny_config):
    from keras_transformer.models.classifier import TransformerClassifier
    from keras_transformer.models.language_model import TransformerLM
    from keras_transformer.models.masked_lm import TransformerMaskedLM
    from keras_transformer.models.presets import load_by_name

    source = TransformerMaskedLM(tiny_config)
    source.build()
    target = TransformerClassifier(tiny_config, num_classes=3)
    target.build()
    head_before = np.asarray(target.head.kernel).copy()
    report = load_by_name(target, source, "pre.keras")
    assert sorted(report["new"]) == ["classifier/bias", "classifier/kernel"]
    assert "mlm_bias" in report["left"] and "mlm_transform/kernel" in report["left"]
    np.testing.assert_array_equal(np.asarray(target.embedding.embeddings),
                                  np.asarray(source.embedding.embeddings))
    for a, b in zip(target.encoder.weights, source.encoder.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(target.head.kernel), head_before)
    ids = np.array([[5, 6, EOS, PAD]], np.int32)
    np.testing.assert_allclose(np.asarray(target.encode(ids)[0]),
                               np.asarray(source.encode(ids)[0]), atol=1e-6)

    wider = TransformerClassifier(tiny_config.replace(d_ff=2 * tiny_config.d_ff), num_classes=3)
    wider.build()
    with pytest.raises(ValueError, match="of shape"):
        load_by_name(wider, source, "pre.keras")
    # A decoder-only model shares only the token embedding's name; with another vocabulary
    # even that one is refused.
    other = TransformerLM(tiny_config.replace(target_vocab_size=tiny_config.source_vocab_size
                                              + 1))
    other.build()
    with pytest.raises(ValueError, match="embedding"):
        load_by_name(other, source, "pre.keras")


@pytest.mark.parametrize("path, refused", [
    ("uit_vsfc/train/sents.txt", False), ("vietnews/train.tsv.gz", False),
    ("uit_vsfc/dev/sents.txt", True), ("sst2/dev.tsv", True), ("vietnews/test.tsv.gz", True),
    ("iwslt15_en_vi/tst2012.en", True), ("corpus/valid.txt", True)])
def test_pre_training_text_from_a_dev_or_test_split_is_refused(path, refused):
    from train.config import ConfigError
    from train.tasks.masked_lm import check_training_text

    if refused:
        with pytest.raises(ConfigError, match="dev or test split"):
            check_training_text(Path("/data") / path)
    else:
        check_training_text(Path("/data") / path)


# -- end to end: pre-train on a small text, fine-tune a classifier from it ----------------

WORDS = ["rất", "hay", "giảng", "viên", "nhiệt", "tình", "bài", "tập", "khó", "phòng", "học", "nóng", "thầy", "dạy", "dễ", "hiểu", "môn", "này", "chán", "quá", "tài", "liệu", "đầy", "đủ"]
SMALL = ["tokenizer.vocab_size=60", "model.preset=tiny", "model.overrides.d_model=16",
         "model.overrides.d_ff=32", "model.overrides.num_heads=2", "data.max_source_length=16",
         "data.tokens_per_batch=256", "training.epochs=1", "training.steps_per_epoch=3",
         "training.verbose=0", "training.tensorboard=false", "training.warmup_steps=10",
         "training.precision=float32"]


def write_text(folder: Path, rng, lines=300) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 9))) for _ in range(lines)]
    (folder / "train").mkdir(exist_ok=True)
    (folder / "dev").mkdir(exist_ok=True)
    (folder / "train" / "sents.txt").write_text("\n".join(texts[:240]) + "\n")
    (folder / "dev" / "sents.txt").write_text("\n".join(texts[240:]) + "\n")
    labels = [str(i % 3) for i in range(len(texts))]
    (folder / "train" / "labels.txt").write_text("\n".join(labels[:240]) + "\n")
    (folder / "dev" / "labels.txt").write_text("\n".join(labels[240:]) + "\n")


def args(config: str, out: Path, data: Path, *extra: str) -> list[str]:
    result = ["--config", str(ROOT / "train" / "configs" / config), "--out", str(out)]
    for item in (f"data.data_dir={data}", *SMALL, *extra):
        result += ["--set", item]
    return result


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    write_text(root / "corpus", np.random.default_rng(4))
    out = root / "pre"
    result = run_cli("train", *args("vi_masked_lm.yaml", out, root / "corpus",
                                    "data.texts=[train/sents.txt]",
                                    "data.dev_texts=[dev/sents.txt]"))
    assert result.code == 0, result.stderr[-3000:]
    return root, out


def fine_tune_args(root: Path, out: Path, pre: Path, *extra: str) -> list[str]:
    return args("uit_vsfc_pretrained.yaml", out, root / "corpus",
                "data.train_source=train/sents.txt", "data.train_target=train/labels.txt",
                "data.dev_source=dev/sents.txt", "data.dev_target=dev/labels.txt",
                'data.test_source=""', 'data.test_target=""', f"training.init_from={pre}",
                *extra)


@pytest.mark.slow
def test_pre_training_then_fine_tuning_takes_the_tokenizer_and_the_trunk(pretrained):
    root, pre = pretrained
    metrics = json.loads((pre / "metrics.json").read_text())
    assert metrics["dev_masked_pieces"] > 0
    assert 1 < metrics["dev_masked_perplexity"] < 60  # below a uniform guess over the pieces
    out = root / "fine"
    # A learning rate near zero: the fine-tuned trunk still holds the pre-trained weights.
    result = run_cli("train", *fine_tune_args(root, out, pre, "training.lr_scale=1e-12"))
    assert result.code == 0, result.stderr[-3000:]
    assert "newly initialized" in result.stderr and "classifier/kernel" in result.stderr
    assert (out / "spm.model").read_bytes() == (pre / "spm.model").read_bytes()

    import keras

    import keras_transformer  # noqa: F401

    source = keras.models.load_model(pre / "model.keras", compile=False)
    tuned = keras.models.load_model(out / "model.keras", compile=False)
    np.testing.assert_allclose(np.asarray(tuned.embedding.embeddings),
                               np.asarray(source.embedding.embeddings), atol=1e-6)


@pytest.mark.slow
def test_a_fine_tune_of_other_sizes_or_from_a_run_sharing_nothing_is_refused_in_one_line(
        pretrained):
    root, pre = pretrained
    out = root / "wide"
    result = run_cli("train", *fine_tune_args(root, out, pre, "model.overrides.d_ff=64"))
    assert_clean_failure(result, 2, "training.init_from", "of shape")
    out = root / "cased"
    result = run_cli("train", *fine_tune_args(root, out, pre, "data.lowercase=false"))
    assert_clean_failure(result, 2, "training.init_from", "set data.lowercase: true")
    assert not out.exists()


def test_pre_training_on_a_dev_split_or_at_a_mask_rate_of_1_is_refused_before_work(tmp_path):
    root = tmp_path
    write_text(root / "corpus", np.random.default_rng(5), lines=20)
    out = root / "run"
    result = run_cli("train", *args("vi_masked_lm.yaml", out, root / "corpus",
                                    "data.texts=[dev/sents.txt]",
                                    "data.dev_texts=[dev/sents.txt]"))
    assert_clean_failure(result, 2, "dev or test split")
    result = run_cli("train", *args("vi_masked_lm.yaml", out, root / "corpus",
                                    "data.mask_rate=1"))
    assert_clean_failure(result, 2, "data.mask_rate")
    assert not (out / "model.keras").exists()


def test_from_preset_builds_the_runs_sizes_and_takes_its_trunk(tiny_config, tmp_path):
    from keras_transformer.models.classifier import TransformerClassifier
    from keras_transformer.models.extractor import TransformerExtractor
    from keras_transformer.models.masked_lm import TransformerMaskedLM

    source = TransformerMaskedLM(tiny_config)
    source.build()
    source.save(tmp_path / "model.keras")
    (tmp_path / "model_config.json").write_text(json.dumps(tiny_config.to_dict()))
    ids = np.array([[5, 6, EOS, PAD]], np.int32)
    for model in (TransformerClassifier.from_preset(tmp_path, num_classes=3),
                  TransformerExtractor.from_preset(tmp_path)):
        assert model.config == tiny_config
        trunk = [*model.embedding.weights, *model.encoder.weights]
        given = [*source.embedding.weights, *source.encoder.weights]
        for a, b in zip(trunk, given, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    again = TransformerMaskedLM.from_preset(tmp_path)
    np.testing.assert_allclose(np.asarray(again(ids)), np.asarray(source(ids)), atol=1e-6)
    with pytest.raises(FileNotFoundError, match="model_config.json"):
        TransformerClassifier.from_preset(tmp_path / "nothing")


def test_text_files_are_read_by_their_kind(tmp_path):
    import gzip

    from train.config import ConfigError
    from train.tasks.masked_lm import read_texts

    (tmp_path / "sst.tsv").write_text("sentence\tlabel\nA fine film \t1\n\nno wit\t0\n")
    assert read_texts(tmp_path / "sst.tsv", "keep", True) == ["a fine film", "no wit"]
    (tmp_path / "pairs.txt").write_text("Go.\tVe.\tCC-BY\nRun!\tCorre.\n\n")
    assert read_texts(tmp_path / "pairs.txt", "keep", False) == ["Go.", "Run!"]
    with gzip.open(tmp_path / "news.tsv.gz", "wt", encoding="utf-8") as handle:
        handle.write("article\tsummary\tt\nMột câu . Câu hai_nữa .\tTóm_tắt .\tx\n")
    assert read_texts(tmp_path / "news.tsv.gz", "split", False) == [
        "Một câu .", "Câu hai nữa .", "Tóm tắt ."]
    (tmp_path / "other.tsv").write_text("text\tlabel\nx\t1\n")
    with pytest.raises(ConfigError, match="neither an article column"):
        read_texts(tmp_path / "other.tsv", "keep", False)
