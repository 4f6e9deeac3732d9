"""Denoising pre-training (BART) and fine-tuning from it: text infilling against a loop that
follows the rule piece by piece, its spans and share against Poisson and the rate, sentence
permutation, the batches' targets, and the runs end to end (pre-train, then fine-tune a
summarizer by training.init_from) with their refusals."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.cli_probe import ROOT, assert_clean_failure, run_cli

tf = pytest.importorskip("tensorflow")

PAD, UNK, BOS, EOS, MASK = 0, 1, 2, 3, 4


def rows_of(lengths, width, first=5):
    """(B, width) rows of distinct ids (first, first + 1, ...) of the given lengths, each
    followed by EOS and padding: a hidden piece is then known by its id."""
    ids = np.full((len(lengths), width), PAD, np.int32)
    for b, n in enumerate(lengths):
        ids[b, :n] = np.arange(first, first + n)
        ids[b, n] = EOS
    return ids


def reference_spans(row, lengths, keys, rate, width, *, shortest=0, too_many=lambda spans: False):
    """One row's pieces and its spans placed by keras_transformer.text.noising's rule, one span
    at a time: lengths drawn until they cover round(n * rate) pieces (each at least
    `shortest`), the last cut to fit; the last spans dropped while they do not fit in the
    gaps or the width, or while `too_many(spans)`. (pieces, {gap: span length}, pieces left)."""
    pieces = [int(t) for t in row if t not in (PAD, EOS)]
    n = len(pieces)
    budget = math.floor(n * rate + 0.5)
    spans, hidden = [], 0
    for length in lengths:
        if hidden >= budget:
            break
        spans.append(min(max(int(length), shortest), budget - hidden))
        hidden += spans[-1]
    while spans and (len(spans) > n - sum(spans) + 1
                     or n - sum(spans) + len(spans) + 1 > width or too_many(spans)):
        spans.pop()
    left = n - sum(spans)
    gaps = sorted(np.argsort(keys[: left + 1], kind="stable")[: len(spans)])
    return pieces, dict(zip(gaps, spans, strict=True)), left


def reference_infill(ids, span_lengths, gap_keys, rate):
    """BART's text infilling, one row and one span at a time (keras_transformer.text.noising's
    rule), from the same draws."""
    out = np.full_like(ids, PAD)
    for b in range(len(ids)):
        pieces, span_at, left = reference_spans(ids[b], span_lengths[b], gap_keys[b], rate,
                                                ids.shape[1])
        result, position = [], 0
        for g in range(left + 1):
            if g in span_at:
                result.append(MASK)
                position += span_at[g]
            if g < left:
                result.append(pieces[position])
                position += 1
        out[b, : len(result) + 1] = [*result, EOS]
    return out


SENTINELS = list(range(100, 110))  # ten sentinels: rows hold at most nine spans


def reference_span_corruption(ids, span_lengths, gap_keys, rate, sentinels=SENTINELS):
    """T5's span corruption by keras_transformer.text.noising's rule, one row and one span at
    a time: the spans placed as infilling places them, every length at least 1, at most
    len(sentinels) - 1 spans and a target that fits its width. (inputs, targets)."""
    width = ids.shape[1]
    target_width = min(width, 2 * math.floor((width - 1) * rate + 0.5) + 2)
    source = np.full_like(ids, PAD)
    target = np.full((len(ids), target_width), PAD, ids.dtype)
    for b in range(len(ids)):
        pieces, span_at, left = reference_spans(
            ids[b], span_lengths[b], gap_keys[b], rate, width, shortest=1,
            too_many=lambda spans: (len(spans) >= len(sentinels)
                                    or sum(spans) + len(spans) + 2 > target_width))
        read, written, position = [], [], 0
        for g in range(left + 1):
            if g in span_at:
                k = sum(1 for t in written if t in sentinels)
                read.append(sentinels[k])
                written += [sentinels[k], *pieces[position:position + span_at[g]]]
                position += span_at[g]
            if g < left:
                read.append(pieces[position])
                position += 1
        written.append(sentinels[len(span_at)])
        source[b, : len(read) + 1] = [*read, EOS]
        target[b, : len(written) + 1] = [*written, EOS]
    return source, target


def noised(ids, index=0, seed=7, rate=0.3, span_lambda=3.0, sentence_ids=None):
    from keras_transformer.text.noising import noise_batch

    sentences = None if sentence_ids is None else tf.constant(sentence_ids, tf.int32)
    return noise_batch(tf.constant(ids), index, rate=rate, span_lambda=span_lambda,
                       mask_id=MASK, pad_id=PAD, eos_id=EOS, seed=seed,
                       sentence_ids=sentences).numpy()


def spans_of(original, source):
    """(hidden pieces, span lengths) of one row, read back from the input by aligning the
    pieces left (distinct ids) with the original; asserts they kept their order and that
    each gap of hidden pieces is one [MASK]."""
    pieces = [int(t) for t in original if t not in (PAD, EOS)]
    position = {t: i for i, t in enumerate(pieces)}
    read = [int(t) for t in source if t not in (PAD, EOS)]
    assert list(source).count(EOS) == 1
    spans, at, pending = [], 0, False
    for t in read:
        if t == MASK:
            assert not pending, "two [MASK]s in a row"
            pending = True
            continue
        gap = position[t] - at
        assert gap >= 0, "a piece left moved"
        # Hidden pieces without a [MASK] before them would be lost silently.
        assert pending or gap == 0
        if pending:
            spans.append(gap)
        at, pending = position[t] + 1, False
    if pending:
        spans.append(len(pieces) - at)
    else:
        assert at == len(pieces)
    return sum(spans), spans


def test_infilling_equals_the_rule_followed_one_span_at_a_time():
    from keras_transformer.text.noising import infill, noise_draws

    rng = np.random.default_rng(0)
    width = 24
    # Long rows, short ones (fewer gaps than spans), empty and one-piece rows; a rate whose
    # budget rounds up; small lambdas with many zero-length spans that would widen the row.
    lengths = [23, 23, 1, 0, 2, 5, 12, 20, *rng.integers(0, 24, 40)]
    ids = rows_of(lengths, width)
    for rate, span_lambda in ((0.3, 3.0), (0.5, 0.4), (0.15, 1.0), (0.9, 8.0)):
        draws = noise_draws(tf.shape(ids), 5, seed=3, span_lambda=span_lambda)
        got = infill(tf.constant(ids), draws[0], draws[1], rate=rate, mask_id=MASK,
                     pad_id=PAD, eos_id=EOS).numpy()
        want = reference_infill(ids, draws[0].numpy(), draws[1].numpy(), rate)
        np.testing.assert_array_equal(got, want)


def test_span_corruption_equals_the_rule_followed_one_span_at_a_time():
    from keras_transformer.text.noising import corrupt_spans, noise_draws

    rng = np.random.default_rng(5)
    width = 24
    lengths = [23, 23, 1, 0, 2, 5, 12, 20, *rng.integers(0, 24, 40)]
    ids = rows_of(lengths, width)
    # T5's rate; one whose target would be as wide as the input; many short spans that run
    # out of sentinels; long spans.
    for rate, span_lambda in ((0.15, 3.0), (0.5, 1.0), (0.4, 0.3), (0.3, 8.0)):
        draws = noise_draws(tf.shape(ids), 2, seed=9, span_lambda=span_lambda)
        got = corrupt_spans(tf.constant(ids), draws[0], draws[1], rate=rate,
                            sentinel_ids=SENTINELS, pad_id=PAD, eos_id=EOS)
        want = reference_span_corruption(ids, draws[0].numpy(), draws[1].numpy(), rate)
        np.testing.assert_array_equal(got[0].numpy(), want[0])
        np.testing.assert_array_equal(got[1].numpy(), want[1])


def test_span_corruption_input_and_target_give_the_text_back():
    """Each sentinel of the input replaced by what follows it in the target, up to the next
    sentinel, is the original row; every span is 1 piece or more and the rows hide the rate."""
    from keras_transformer.text.noising import span_corruption_batch

    lengths = [199] * 40 + [60] * 40
    ids = rows_of(lengths, 200)
    source, target = span_corruption_batch(tf.constant(ids), 0, rate=0.15, span_lambda=3.0,
                                           sentinel_ids=list(range(1000, 1100)),
                                           pad_id=PAD, eos_id=EOS, seed=3)
    source, target = source.numpy(), target.numpy()
    assert target.shape == (80, 2 * 30 + 2)
    spans_seen = []
    for b, n in enumerate(lengths):
        written = [int(t) for t in target[b] if t not in (PAD, EOS)]
        fills, k = {}, None
        for t in written:
            if t >= 1000:  # the rows' own ids run from 5 to 203
                k = t
                fills[k] = []
            else:
                fills[k].append(t)
        closing = written[-1]
        assert fills.pop(closing) == [] and closing == 1000 + len(fills)
        assert all(len(span) >= 1 for span in fills.values())
        spans_seen += [len(span) for span in fills.values()]
        restored = [p for t in source[b] if t not in (PAD, EOS)
                    for p in (fills[t] if t >= 1000 else [t])]
        np.testing.assert_array_equal(restored, ids[b, :n])
        assert sum(map(len, fills.values())) == math.floor(n * 0.15 + 0.5)
    # Poisson(3) with zeros made 1 and each row's last span cut to its budget.
    assert 2.6 < np.mean(spans_seen) < 3.3


def budgeted_spans(lengths, rate, span_lambda, rng):
    """Span lengths as the rule draws them, simulated with NumPy's Poisson: drawn until they
    cover round(n * rate) pieces of each row, the last one cut to fit."""
    spans = []
    for n in lengths:
        budget, hidden = math.floor(n * rate + 0.5), 0
        while hidden < budget:
            spans.append(min(int(rng.poisson(span_lambda)), budget - hidden))
            hidden += spans[-1]
    return np.array(spans)


def test_spans_follow_poisson_and_hide_the_rate_each_one_mask():
    lengths = [200] * 150 + [60] * 150
    ids = rows_of(lengths, 208)
    hidden, spans, pieces = 0, [], 0
    for index in range(3):
        source = noised(ids, index=index)
        for b in range(len(ids)):
            count, row_spans = spans_of(ids[b], source[b])
            # Rows this long hold every span drawn: exactly round(n * rate) pieces hidden.
            assert count == math.floor(lengths[b] * 0.3 + 0.5)
            hidden, pieces = hidden + count, pieces + lengths[b]
            spans += row_spans
    assert abs(hidden / pieces - 0.3) < 0.005
    spans = np.array(spans)
    # Poisson(3) but for each row's last span, cut to the budget, which pulls the mean a little
    # below 3 and adds short spans: the same rule simulated with NumPy's draws.
    want = budgeted_spans(lengths * 20, 0.3, 3.0, np.random.default_rng(0))
    assert 2.8 < want.mean() < 3.0
    assert abs(spans.mean() - want.mean()) < 0.06
    for k in range(9):
        assert abs((spans == k).mean() - (want == k).mean()) < 0.012, k


def test_noise_is_a_function_of_seed_and_batch_index():
    ids = rows_of([30] * 20, 32)
    np.testing.assert_array_equal(noised(ids, index=3), noised(ids, index=3))
    assert (noised(ids, index=3) != noised(ids, index=4)).any()
    assert (noised(ids, seed=1) != noised(ids, seed=2)).any()


def test_sentence_permutation_moves_whole_sentences_and_keeps_each_in_order():
    from keras_transformer.text.noising import noise_draws, permute_sentences

    rng = np.random.default_rng(1)
    ids = rows_of([30] * 50, 32)
    sentence_ids = np.zeros_like(ids)
    for b in range(len(ids)):
        cuts = np.sort(rng.choice(np.arange(1, 30), 4, replace=False))
        sentence_ids[b, :30] = np.searchsorted(cuts, np.arange(30), side="right")
    keys = noise_draws(tf.shape(ids), 0, seed=3, span_lambda=3.0)[2]
    out = permute_sentences(tf.constant(ids), tf.constant(sentence_ids), keys, pad_id=PAD,
                            eos_id=EOS).numpy()
    orders = set()
    for b in range(len(ids)):
        sentences = [ids[b, :30][sentence_ids[b, :30] == s] for s in range(5)]
        ranks = np.argsort(np.argsort(keys.numpy()[b, :5], kind="stable"), kind="stable")
        want = np.concatenate([sentences[s] for s in np.argsort(ranks, kind="stable")])
        np.testing.assert_array_equal(out[b, :30], want)
        np.testing.assert_array_equal(out[b, 30:], ids[b, 30:])
        orders.add(tuple(np.argsort(ranks)))
    assert len(orders) > 20  # the orders differ between rows


@pytest.mark.parametrize("rate, span_lambda, message", [
    (0.0, 3.0, "noise rate"), (1.0, 3.0, "noise rate"), (0.3, 0.0, "Poisson lambda"),
    (0.3, 65.0, "Poisson lambda")])
def test_a_noise_rate_of_0_or_1_or_a_bad_span_mean_is_refused(rate, span_lambda, message):
    from keras_transformer.text.noising import check_noise

    with pytest.raises(ValueError, match=message):
        check_noise(rate, span_lambda)


def test_batches_target_the_original_text_and_read_it_corrupted():
    from keras_transformer.text.noising import noise_batch
    from keras_transformer.text.pipeline import make_denoising_dataset

    rng = np.random.default_rng(2)
    rows = [[*rng.integers(5, 90, size=n).tolist(), EOS] for n in rng.integers(1, 31, 60)]
    sentence_ids = [[i // 7 for i in range(len(r))] for r in rows]
    noising = dict(rate=0.3, span_lambda=3.0, mask_id=MASK, seed=11)
    data = make_denoising_dataset(rows, sentence_ids, max_length=32, tokens_per_batch=128,
                                  pad_id=PAD, bos_id=BOS, eos_id=EOS, noising=noising,
                                  permute_sentences=True, num_buckets=2, shuffle=False)
    seen = []
    for index, ((source, target_in), target_out) in enumerate(data):
        target_out = target_out.numpy()
        for row in target_out:
            n = int((row != PAD).sum())
            seen.append(row[:n].tolist())
            np.testing.assert_array_equal(row[n:], PAD)
        # target_in: BOS, then the text without its EOS.
        expected_in = np.where(target_out == EOS, PAD, target_out)[:, :-1]
        np.testing.assert_array_equal(target_in.numpy()[:, 0], BOS)
        np.testing.assert_array_equal(target_in.numpy()[:, 1:], expected_in)
        sentences = np.array([[i // 7 for i in range(target_out.shape[1])]] * len(target_out))
        again = noise_batch(tf.constant(target_out), index, pad_id=PAD, eos_id=EOS,
                            sentence_ids=tf.constant(sentences), **noising)
        np.testing.assert_array_equal(source.numpy(), again.numpy())
    assert sorted(seen) == sorted(rows)


def test_span_corruption_batches_target_the_spans_of_their_rows():
    from keras_transformer.text.pipeline import make_denoising_dataset

    rng = np.random.default_rng(3)
    rows = [[*rng.integers(5, 90, size=n).tolist(), EOS] for n in rng.integers(1, 31, 60)]
    noising = dict(rate=0.15, span_lambda=3.0, sentinel_ids=SENTINELS, seed=11)
    data = make_denoising_dataset(rows, [[0] * len(r) for r in rows], max_length=32,
                                  tokens_per_batch=128, pad_id=PAD, bos_id=BOS, eos_id=EOS,
                                  noising=noising, noise="span_corruption", num_buckets=2,
                                  shuffle=False)
    seen = []
    for (source, target_in), target_out in data:
        source, target_in, target_out = source.numpy(), target_in.numpy(), target_out.numpy()
        # Targets of one width for inputs of one width: 2 * round(31 * 0.15) + 2 at most.
        assert target_out.shape[1] == min(source.shape[1], 2 * math.floor(
            (source.shape[1] - 1) * 0.15 + 0.5) + 2)
        expected_in = np.where(target_out == EOS, PAD, target_out)[:, :-1]
        np.testing.assert_array_equal(target_in[:, 0], BOS)
        np.testing.assert_array_equal(target_in[:, 1:], expected_in)
        for read, written in zip(source, target_out, strict=True):
            fills, k = {}, None
            for t in written[: list(written).index(EOS)]:
                k = t if t in SENTINELS else k
                fills.setdefault(k, []).extend([] if t in SENTINELS else [int(t)])
            seen.append([p for t in read if t != PAD
                         for p in (fills[t] if t in SENTINELS else [int(t)])])
    assert sorted(seen) == sorted(rows)


def test_sentences_are_packed_in_order_into_rows_of_the_limit():
    from train.tasks.denoising import pack_sentences

    rows, indices = pack_sentences([[5, 6], [7, 8, 9], [], [10] * 7, [11], [12, 13]], 5)
    assert rows == [[5, 6, 7, 8, 9], [10] * 5, [11, 12, 13]]
    assert indices == [[0, 0, 1, 1, 1], [0] * 5, [0, 1, 1]]


def test_a_summarizer_takes_a_denoisers_weights_by_name_the_copy_gate_new(tiny_config,
                                                                          tmp_path):
    """A pre-training without copy attention into a summarizer with it: every shared weight
    loaded, the copy gate's reported new and left as initialized."""
    import keras

    from keras_transformer.models.transformer import Transformer
    from train.warm_start import start_from

    config = tiny_config.replace(share_embeddings=True,
                                 target_vocab_size=tiny_config.source_vocab_size)
    source = Transformer(config)
    source.build()
    source.save(tmp_path / "model.keras")
    target = Transformer(config.replace(copy_attention=True))
    target.build()
    target.compile(optimizer=keras.optimizers.Adam())
    gate = [np.asarray(w).copy() for w in target.copy_gate.weights]
    report = start_from(target, tmp_path / "model.keras", 0)
    assert report["new"] and all(n.startswith("copy_gate/") for n in report["new"])
    assert not report["left"] and len(report["loaded"]) == len(source.weights)
    given = {w.path.split("/", 1)[1]: np.asarray(w) for w in source.weights}
    for w in target.weights:
        name = w.path.split("/", 1)[1]
        if name in given:
            np.testing.assert_array_equal(np.asarray(w), given[name])
    for before, after in zip(gate, target.copy_gate.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(after), before)


# -- end to end: pre-train on made-up news, fine-tune a summarizer from it -----------------

SMALL = ["tokenizer.vocab_size=80", "model.preset=tiny", "model.overrides.d_model=16",
         "model.overrides.d_ff=32", "model.overrides.num_heads=2", "data.max_source_length=40",
         "data.tokens_per_batch=320", "training.epochs=1", "training.steps_per_epoch=3",
         "training.verbose=0", "training.tensorboard=false", "training.warmup_steps=10",
         "training.jit_compile=false", "training.precision=float32", "training.max_minutes=0",
         "eval.samples=1", "eval.batch_size=8"]


def write_news(folder: Path) -> Path:
    import random

    from tests.news_data import make_article, write_tsv

    rng = random.Random(4)
    folder.mkdir(parents=True, exist_ok=True)
    for name, count in (("train.tsv.gz", 120), ("dev.tsv.gz", 12), ("test.tsv.gz", 6)):
        write_tsv(folder / name,
                  ["\t".join([*make_article(rng), "t"]) for _ in range(count)])
    return folder


def load(config: str, data: Path, *extra: str):
    from train.tasks import load_run_config

    return load_run_config(ROOT / "train" / "configs" / config,
                           [f"data.data_dir={data.parent}", *SMALL, *extra])


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    from train.run import run

    root = tmp_path_factory.mktemp("denoise")
    data = write_news(root / "vietnews")
    out = root / "pre"
    run(load("vi_denoising.yaml", data, "eval.dev_score_sentences=40"), out)
    return root, data, out


@pytest.mark.slow
def test_pre_training_then_fine_tuning_a_summarizer_takes_the_tokenizer_and_every_weight(
        pretrained, caplog):
    import keras

    import keras_transformer  # noqa: F401
    from keras_transformer.text.tokenizer import SentencePieceTokenizer
    from train.run import run

    root, data, pre = pretrained
    metrics = json.loads((pre / "metrics.json").read_text())
    # Below a uniform guess over the 80 pieces, and ln of it is the dev loss.
    assert 1 < metrics["dev_perplexity"] < 80 and metrics["dev_target_pieces"] > 0
    assert metrics["dev_loss"] == pytest.approx(math.log(metrics["dev_perplexity"]))
    assert SentencePieceTokenizer(pre / "spm.model").piece_id("[MASK]") is not None
    out = root / "fine"
    # A learning rate near zero: after its steps the summarizer still holds the weights it
    # began with, which must be the pre-trained run's.
    with caplog.at_level("INFO", logger="train"):
        run(load("vietnews_summarization_pretrained.yaml", data, f"training.init_from={pre}",
                 "data.max_target_length=24", "training.lr_scale=1e-12",
                 "training.average_last=0", "eval.dev_score_sentences=2",
                 "eval.max_sentences=2", "eval.beam_size=1", "eval.min_length=0"), out)
    source = keras.models.load_model(pre / "model.keras", compile=False)
    assert f"loaded {len(source.weights)} pre-trained weights" in caplog.text
    assert "newly initialized" not in caplog.text
    assert (out / "spm.model").read_bytes() == (pre / "spm.model").read_bytes()
    tuned = keras.models.load_model(out / "model.keras", compile=False)
    assert type(tuned) is type(source) and tuned.config.copy_attention
    for a, b in zip(tuned.weights, source.weights, strict=True):
        assert a.path.split("/", 1)[1] == b.path.split("/", 1)[1]
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


@pytest.mark.slow
def test_span_corruption_pre_trains_on_sentinels_and_restores_the_spans(pretrained, tmp_path,
                                                                        capsys):
    from keras_transformer.text.noising import SENTINEL_PIECES
    from keras_transformer.text.tokenizer import SentencePieceTokenizer
    from train.run import run

    root, data, _ = pretrained
    out = tmp_path / "t5"
    # 100 sentinels need a larger vocabulary than SMALL's 80 pieces.
    run(load("vi_denoising.yaml", data, "eval.dev_score_sentences=40", "tokenizer.vocab_size=240",
             "data.noise=span_corruption", "data.noise_rate=0.15"), out)
    tok = SentencePieceTokenizer(out / "spm.model")
    ids = [tok.piece_id(piece) for piece in SENTINEL_PIECES]
    assert None not in ids and len(set(ids)) == len(SENTINEL_PIECES)
    metrics = json.loads((out / "metrics.json").read_text())
    assert 1 < metrics["dev_perplexity"] < 240
    shown = capsys.readouterr().out
    # The restoration printed reads a sentinel for each span.
    assert "IN   " in shown and "<extra_id_0>" in shown.split("IN   ", 1)[1]


@pytest.mark.slow
def test_a_fine_tune_of_other_sizes_is_refused_in_one_line(pretrained, tmp_path):
    root, data, pre = pretrained
    result = run_cli("train", "--config",
                     str(ROOT / "train" / "configs" / "vietnews_summarization_pretrained.yaml"),
                     "--out", str(tmp_path / "wide"),
                     *[a for item in [f"data.data_dir={root}", *SMALL,
                                      f"training.init_from={pre}", "model.overrides.d_ff=64",
                                      "training.average_last=0"] for a in ("--set", item)])
    assert_clean_failure(result, 2, "training.init_from", "another model's weights")


def test_pre_training_on_a_dev_split_or_at_a_noise_rate_of_1_is_refused_before_work(
        tmp_path):
    data = write_news(tmp_path / "vietnews")
    out = tmp_path / "run"
    config = str(ROOT / "train" / "configs" / "vi_denoising.yaml")

    def args(*extra):
        return ["--config", config, "--out", str(out),
                *[a for item in [f"data.data_dir={data.parent}", *SMALL, *extra]
                  for a in ("--set", item)]]

    result = run_cli("train", *args("data.texts=[vietnews/dev.tsv.gz]"))
    assert_clean_failure(result, 2, "dev or test split")
    result = run_cli("train", *args("data.noise_rate=1"))
    assert_clean_failure(result, 2, "data.noise_rate must be > 0 and < 1")
    result = run_cli("train", *args("data.span_lambda=0"))
    assert_clean_failure(result, 2, "data.span_lambda must be > 0")
    result = run_cli("train", *args("data.noise=masking"))
    assert_clean_failure(result, 2, "data.noise must be one of infilling, span_corruption")
    result = run_cli("train", *args("data.noise=span_corruption",
                                    "data.permute_sentences=true"))
    assert_clean_failure(result, 2, "data.permute_sentences goes with data.noise: infilling")
    assert not (out / "model.keras").exists()
