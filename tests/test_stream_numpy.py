"""The streamed input without TensorFlow (numpy_pipeline.StreamBatches, shards.interleaved_pairs):
unshuffled, tf.data's batches batch for batch, for one worker and for a worker's part; shuffled,
a pass holds exactly the shards' pairs, seeded, in a bounded buffer; two workers' parts are
disjoint and make one pass; a streamed run trains under JAX on exactly the stream's batches."""

import gzip
import json
import os
import subprocess
from collections import Counter

import numpy as np
import pytest
import yaml

from keras_transformer.text.demo_corpus import demo_splits
from keras_transformer.text.numpy_pipeline import StreamBatches, buffer_shuffled
from keras_transformer.text.shards import compression_of, interleaved_pairs, worker_part
from keras_transformer.text.tokenizer import PAD_ID, SentencePieceTokenizer, train_sentencepiece
from tests.cli_probe import ROOT

LIMITS = dict(max_source_length=24, max_target_length=24, tokens_per_batch=240)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Five shards of different lengths, gzip and plain, one with a blank line: more shards
    than the interleave's 4 places, so a finished shard's place is taken by the fifth."""
    folder = tmp_path_factory.mktemp("numpy_stream")
    pairs = demo_splits(600, 1, 1, 7)["train"]
    files = []
    for i in range(5):
        chunk = pairs[i::5][: 40 + 30 * i]
        text = "".join(f"{s}\t{t}\n" for s, t in chunk) + ("\n" if i == 1 else "")
        path = folder / f"train-{i}.tsv{'.gz' * (i % 2)}"
        path.write_bytes(gzip.compress(text.encode()) if i % 2 else text.encode())
        files.append(path)
    used = [p for i in range(5) for p in pairs[i::5][: 40 + 30 * i]]
    tok = SentencePieceTokenizer(train_sentencepiece([t for p in used for t in p],
                                                     folder / "spm", 150))
    return files, used, tok


def arrays(batches):
    return [(np.asarray(i[0]), np.asarray(i[1]), np.asarray(o)) for i, o in batches]


def rows(batches) -> Counter:
    """Each (source, target_out) of `arrays`' batches, padding removed."""
    found = Counter()
    for source, _, target_out in batches:
        for s, t in zip(source, target_out, strict=True):
            found[(tuple(s[s != PAD_ID].tolist()), tuple(t[t != PAD_ID].tolist()))] += 1
    return found


def expected_rows(pairs, tok) -> Counter:
    """The reference: every pair that fits the limits, as source + EOS and target + EOS."""
    found = Counter()
    for s, t in zip(tok.encode([p[0] for p in pairs]), tok.encode([p[1] for p in pairs]),
                    strict=True):
        if len(s) < LIMITS["max_source_length"] and len(t) < LIMITS["max_target_length"]:
            found[(tuple(s) + (3,), tuple(t) + (3,))] += 1
    return found


@pytest.mark.tf_only
@pytest.mark.parametrize("workers, worker", [(1, 0), (2, 0), (2, 1), (7, 3)])
@pytest.mark.parametrize("drop_long", [True, False])
def test_unshuffled_batches_are_tf_datas(corpus, workers, worker, drop_long):
    from keras_transformer.text.pipeline import make_tsv_stream_dataset

    files, _, tok = corpus
    options = dict(LIMITS, shuffle_buffer=50, shuffle=False, repeat=False, workers=workers,
                   worker=worker, drop_long=drop_long)
    expected = arrays(make_tsv_stream_dataset([str(f) for f in files],
                                              [compression_of(f) for f in files], tok, tok,
                                              **options).as_numpy_iterator())
    got = arrays(StreamBatches(files, tok, tok, **options))
    assert len(got) == len(expected) > 3
    for a, b in zip(got, expected, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def test_a_shuffled_pass_holds_every_pair_once_seeded(corpus):
    files, used, tok = corpus
    options = dict(LIMITS, shuffle_buffer=40, repeat=False)
    first = arrays(StreamBatches(files, tok, tok, seed=3, **options))
    assert rows(first) == expected_rows(used, tok)
    again = arrays(StreamBatches(files, tok, tok, seed=3, **options))
    other = arrays(StreamBatches(files, tok, tok, seed=4, **options))
    assert [b[2].tolist() for b in again] == [b[2].tolist() for b in first]
    assert [b[2].tolist() for b in other] != [b[2].tolist() for b in first]
    # skip(n) drops the first n batches of the same stream (a resumed run's).
    skipped = arrays(StreamBatches(files, tok, tok, seed=3, **options).skip(4))
    assert [b[2].tolist() for b in skipped] == [b[2].tolist() for b in first[4:]]


def test_two_workers_parts_are_disjoint_and_make_one_pass(corpus):
    files, used, tok = corpus
    for count in (5, 1):  # whole shards apiece; fewer shards than workers: every other line
        parts = [rows(arrays(StreamBatches(files[:count], tok, tok, seed=3, shuffle_buffer=40,
                                           repeat=False, workers=2, worker=i, **LIMITS)))
                 for i in range(2)]
        assert not set(parts[0]) & set(parts[1])
        whole = rows(arrays(StreamBatches(files[:count], tok, tok, seed=3, shuffle_buffer=40,
                                          repeat=False, **LIMITS)))
        assert parts[0] + parts[1] == whole
    assert worker_part(5, 2, 1) == ([1, 3], False)
    assert worker_part(1, 2, 1) == ([0], True)


def test_the_endless_stream_reads_on_with_new_shard_orders(corpus):
    files, used, tok = corpus
    per_pass = sum(1 for _ in interleaved_pairs(files, shuffle=False, seed=0, repeat=False,
                                                cycle_length=1))
    # One shard open at a time: pass p is the shards in pass p's order, so three passes'
    # worth of lines hold every pair three times, and the passes' first lines differ.
    lines = interleaved_pairs(files, shuffle=True, seed=3, repeat=True, cycle_length=1)
    read = [next(lines) for _ in range(3 * per_pass)]
    assert Counter(p for p in read if p is not None) == Counter({pair: 3 for pair in used})
    firsts = {read[p * per_pass] for p in range(3)}
    assert len(firsts) > 1
    # Four open at a time, the next pass's first shards open beside the last of this pass's.
    lines = interleaved_pairs(files, shuffle=True, seed=3, repeat=True, cycle_length=4)
    counts = Counter(p for p in (next(lines) for _ in range(3 * per_pass)) if p is not None)
    assert set(counts) == set(used) and set(counts.values()) <= {2, 3, 4}


def test_the_shuffle_buffer_is_bounded_and_tf_datas_draw():
    consumed = []

    def items():
        for i in range(1000):
            consumed.append(i)
            yield i

    out = buffer_shuffled(items(), 10, np.random.default_rng(0))
    for n in range(1, 200):
        next(out)
        assert len(consumed) <= n + 10  # never more than the buffer ahead
    rest = list(out)
    assert sorted(rest + [i for i in range(1000) if i not in rest]) == list(range(1000))
    assert list(buffer_shuffled(range(50), 1, np.random.default_rng(0))) == list(range(50))
    full = list(buffer_shuffled(range(50), 50, np.random.default_rng(0)))
    assert sorted(full) == list(range(50)) and full != list(range(50))


@pytest.mark.slow
def test_a_streamed_run_trains_under_jax_on_the_streams_batches(corpus, tmp_path):
    """`python -m train` with data.stream under KERAS_BACKEND=jax: the target tokens it trained
    on (metrics.json, counted as the batches are read) are those of the stream's first batches,
    made here from the run's tokenizer."""
    files, used, _ = corpus
    jax_python = ROOT / ".venv-jax" / "bin" / "python"
    if not jax_python.exists():
        pytest.skip("no .venv-jax (make setup-jax)")
    data = tmp_path / "data"
    data.mkdir()
    for path in files:
        (data / path.name).write_bytes(path.read_bytes())
    held = demo_splits(240, 20, 10, 7)
    for name in ("dev", "test"):
        (data / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in held[name]))
    config = yaml.safe_load((ROOT / "train" / "configs" / "spa_eng_stream.yaml").read_text())
    config["data"].update(data_dir=str(data), train_source="train-*", dev_source="dev.tsv",
                          test_source="test.tsv", max_source_length=24, max_target_length=24,
                          tokens_per_batch=240, shuffle_buffer=100)
    config["tokenizer"].update(vocab_size=150, sample_sentences=300)
    config["model"] = {"preset": "tiny", "overrides": {"d_model": 16, "d_ff": 32,
                                                       "num_heads": 2, "dropout": 0.0}}
    config["training"].update(max_minutes=0, epochs=2, steps_per_epoch=3, save_every_steps=3,
                              jit_compile=True, verbose=0, tensorboard=False,
                              average_last=0, early_stopping_patience=0)
    config["eval"].update(dev_score_sentences=0, beam_size=1, max_sentences=1, samples=0)
    path = tmp_path / "stream.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT),
           "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([str(jax_python), "-m", "train", "--config", str(path), "--out",
                             str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 6 and metrics["streamed_train_pairs"] == len(used)
    tok = SentencePieceTokenizer(out / "spm.model")
    stream = StreamBatches(sorted(data.glob("train-*")), tok, tok, seed=0,
                           shuffle_buffer=100, **LIMITS).iterate()
    tokens = [int(np.count_nonzero(next(stream)[1])) for _ in range(6)]
    assert metrics["train_target_tokens"] == sum(tokens[:6])
