"""Tests for SentencePiece training, the Python/in-graph tokenizer, and text loaders."""

from __future__ import annotations

import random

import numpy as np
import pytest
import sentencepiece as spm

from keras_transformer.text.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    ParallelText,
    SentencePieceTokenizer,
    load_parallel_text,
    load_tsv_pairs,
    train_sentencepiece,
)

# fmt: off
WORDS = [
    "the", "a", "cat", "dog", "bird", "sat", "ran", "flew", "on", "under", "over", "mat",
    "tree", "house", "big", "small", "red", "blue", "green", "quickly", "slowly", "happily",
    "river", "mountain",
]
# fmt: on


def make_sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_sentences(200)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory, corpus):
    return train_sentencepiece(corpus, tmp_path_factory.mktemp("spm") / "sp", vocab_size=64)


@pytest.fixture(scope="module")
def tok(model_path) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(model_path)


def padded(rows: list[list[int]], width: int) -> np.ndarray:
    out = np.full((len(rows), width), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


# ------------------------------------------------------------------------ training
def test_train_writes_model_and_vocab(model_path):
    assert model_path.name == "sp.model" and model_path.is_file()
    assert model_path.with_suffix(".vocab").is_file()


def test_special_ids(tok):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    sp = spm.SentencePieceProcessor(model_file=str(tok.model_path))
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert 4 < tok.vocab_size <= 64
    assert tok.vocab_size == sp.get_piece_size()


def test_train_is_reproducible(tmp_path, corpus, tok):
    again = SentencePieceTokenizer(train_sentencepiece(corpus, tmp_path / "again", vocab_size=64))
    a = spm.SentencePieceProcessor(model_proto=tok.model_bytes)
    b = spm.SentencePieceProcessor(model_proto=again.model_bytes)
    assert a.get_piece_size() == b.get_piece_size()
    for i in range(a.get_piece_size()):
        assert (a.id_to_piece(i), a.get_score(i)) == (b.id_to_piece(i), b.get_score(i))


def test_train_vocab_too_large_for_corpus_shrinks(tmp_path, corpus):
    path = train_sentencepiece(corpus[:20], tmp_path / "big", vocab_size=5000, model_type="bpe")
    size = SentencePieceTokenizer(path).vocab_size
    assert 4 < size < 5000


def test_a_vocabulary_smaller_than_its_required_pieces_names_the_size_that_trains(tmp_path):
    # "hello world": 7 letters and the word-start mark, the 4 special pieces, 3 of their own.
    symbols = ("[MASK]", "<extra_id_0>", "<extra_id_1>")
    needed = 8 + 4 + len(symbols)
    with pytest.raises(ValueError) as info:
        train_sentencepiece(["hello world"] * 20, tmp_path / "x", vocab_size=needed - 1,
                            user_defined_symbols=symbols)
    message = str(info.value)
    assert "\n" not in message and f"at least {needed}" in message and "[MASK]" in message
    assert not (tmp_path / "x.model").exists()
    path = train_sentencepiece(["hello world"] * 20, tmp_path / "y", vocab_size=needed,
                               user_defined_symbols=symbols)
    assert SentencePieceTokenizer(path).vocab_size == needed


@pytest.mark.parametrize("texts", [[], ["", "   ", "\n"]])
def test_train_without_texts_raises(tmp_path, texts):
    with pytest.raises(ValueError, match="no non-empty texts"):
        train_sentencepiece(texts, tmp_path / "x", vocab_size=32)
    assert not (tmp_path / "x.model").exists()


def test_train_rejects_bad_model_type(tmp_path, corpus):
    with pytest.raises(ValueError, match="model_type"):
        train_sentencepiece(corpus, tmp_path / "x", vocab_size=32, model_type="wordpiece")


# ------------------------------------------------------------------------ Python side
def test_encode_has_no_bos_eos(tok, corpus):
    ids = tok.encode(corpus)
    assert len(ids) == len(corpus)
    flat = [i for row in ids for i in row]
    assert BOS_ID not in flat and EOS_ID not in flat and PAD_ID not in flat
    assert all(0 <= i < tok.vocab_size for i in flat)


def test_decode_roundtrip_and_stops_at_eos(tok, corpus):
    ids = tok.encode(corpus[:10])
    assert tok.decode(ids) == corpus[:10]
    # BOS before, EOS then junk after: only the part between counts.
    junk = tok.encode(["river mountain"])[0]
    rows = [[BOS_ID, *r, EOS_ID, *junk] for r in ids]
    assert tok.decode(rows) == corpus[:10]
    assert tok.decode(padded(rows, 40)) == corpus[:10]
    # Without the EOS the junk would be decoded.
    assert tok.decode([[*ids[0], *junk]]) != [corpus[0]]
    assert tok.decode([[EOS_ID, *ids[0]]]) == [""]


def test_encode_rejects_single_string(tok):
    with pytest.raises(TypeError):
        tok.encode("the cat")


def test_python_side_builds_no_tf_state(model_path):
    t = SentencePieceTokenizer(model_path)
    t.decode(t.encode(["the cat"]))
    assert t._tf_tokenizer is None


# ------------------------------------------------------------------------ in-graph side
def test_in_graph_tokenize_matches_python_encode(tok, corpus):
    import tensorflow as tf

    texts = corpus + ["the zebra & the cat!", "ÄÖ üb", "", "  the   cat  "]
    ragged = tok.tokenize(tf.constant(texts))
    assert isinstance(ragged, tf.RaggedTensor)
    assert ragged.dtype == tf.int32
    assert ragged.to_list() == tok.encode(texts)
    # Unknown characters really do hit UNK, so the comparison above covers it.
    assert UNK_ID in tok.encode(["the zebra & the cat!"])[0]


def test_in_graph_detokenize_roundtrip(tok, corpus):
    import tensorflow as tf

    ids = tok.encode(corpus)
    rows = [[BOS_ID, *r, EOS_ID] for r in ids]
    out = tok.detokenize(tf.constant(padded(rows, max(map(len, rows)) + 3)))
    assert out.dtype == tf.string
    assert [s.decode("utf-8") for s in out.numpy()] == corpus


def test_in_graph_detokenize_stops_at_eos(tok):
    import tensorflow as tf

    a, b = tok.encode(["the cat sat", "river mountain"])
    rows = [[*a, EOS_ID, *b], [BOS_ID, *b, EOS_ID, *a, EOS_ID], [EOS_ID, *a], [*a]]
    out = [s.decode("utf-8") for s in tok.detokenize(tf.constant(padded(rows, 20))).numpy()]
    assert out == ["the cat sat", "river mountain", "", "the cat sat"]
    assert out == tok.decode(padded(rows, 20))


def test_first_use_inside_tf_function_then_eager(model_path, corpus):
    import tensorflow as tf

    # A fresh tokenizer whose in-graph side is first built while tracing.
    fresh = SentencePieceTokenizer(model_path)

    @tf.function
    def f(x):
        return fresh.tokenize(x).to_tensor()

    dense = f(tf.constant(corpus[:5])).numpy()
    assert fresh.decode(dense) == corpus[:5]
    assert fresh.tokenize(tf.constant(corpus[:5])).to_list() == fresh.encode(corpus[:5])
    ds = tf.data.Dataset.from_tensor_slices(corpus[:5]).map(fresh.tokenize)
    assert [x.numpy().tolist() for x in ds] == fresh.encode(corpus[:5])


# ------------------------------------------------------------------------ construction
def test_from_bytes_equals_from_path(tok, corpus):
    import tensorflow as tf

    other = SentencePieceTokenizer(tok.model_bytes)
    assert other.model_path is None
    assert other.vocab_size == tok.vocab_size
    assert other.encode(corpus) == tok.encode(corpus)
    assert other.tokenize(tf.constant(corpus[:5])).to_list() == tok.encode(corpus[:5])


def test_save_and_load(tok, tmp_path, corpus):
    saved = tok.save(tmp_path / "out", "src")
    assert saved == tmp_path / "out" / "src.model"
    assert (tmp_path / "out" / "src.vocab").is_file()
    loaded = SentencePieceTokenizer.load(saved)
    assert loaded.model_bytes == tok.model_bytes
    assert loaded.encode(corpus) == tok.encode(corpus)


def test_missing_model_file(tmp_path):
    path = tmp_path / "nope.model"
    with pytest.raises(FileNotFoundError, match="nope.model"):
        SentencePieceTokenizer.load(path)


@pytest.mark.parametrize("content", [b"", b"this is not a protobuf \xff\xfe"])
def test_corrupt_model_file(tmp_path, content):
    path = tmp_path / "broken.model"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="broken.model"):
        SentencePieceTokenizer(path)


def test_model_with_other_special_ids_rejected(tmp_path, corpus):
    # sentencepiece's defaults: unk=0, bos=1, eos=2, no pad.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_prefix=str(tmp_path / "default"),
        vocab_size=40,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="special ids"):
        SentencePieceTokenizer(tmp_path / "default.model")


# ------------------------------------------------------------------------ loaders
def test_load_parallel_text_drops_empty_pairs(tmp_path):
    src = tmp_path / "a.en"
    tgt = tmp_path / "a.de"
    src.write_text("hello  \nworld\n\n  \nlast one\t\n", encoding="utf-8")
    tgt.write_text("hallo\n\nleer\nx\nletzte\r\n", encoding="utf-8")
    result = load_parallel_text(src, tgt)
    assert isinstance(result, ParallelText)
    assert result.sources == ["hello", "last one"]
    assert result.targets == ["hallo", "letzte"]
    assert result.dropped == 3
    sources, targets, dropped = result
    assert (sources, targets, dropped) == (["hello", "last one"], ["hallo", "letzte"], 3)


def test_load_parallel_text_keeps_unicode_line_separators(tmp_path):
    src = tmp_path / "s.txt"
    tgt = tmp_path / "t.txt"
    src.write_text("\ufeffone\u2028two\nthree\n", encoding="utf-8")
    tgt.write_text("eins\nzwei\n", encoding="utf-8")
    result = load_parallel_text(src, tgt)
    assert result.sources == ["one\u2028two", "three"]
    assert result.dropped == 0


def test_load_parallel_text_mismatch(tmp_path):
    src = tmp_path / "a.en"
    tgt = tmp_path / "a.de"
    src.write_text("1\n2\n3\n", encoding="utf-8")
    tgt.write_text("1\n2\n3\n4\n5\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_parallel_text(src, tgt)
    msg = str(info.value)
    assert "a.en" in msg and "a.de" in msg
    assert "3 lines" in msg and "5 lines" in msg


def test_load_parallel_text_missing(tmp_path):
    (tmp_path / "a.en").write_text("x\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="missing.de"):
        load_parallel_text(tmp_path / "a.en", tmp_path / "missing.de")


def test_load_parallel_text_bad_utf8(tmp_path):
    (tmp_path / "a.en").write_bytes(b"ok\n\xff\xfe bad\n")
    (tmp_path / "a.de").write_text("ok\nok\n", encoding="utf-8")
    with pytest.raises(ValueError, match="a.en"):
        load_parallel_text(tmp_path / "a.en", tmp_path / "a.de")


def test_load_tsv_pairs(tmp_path):
    path = tmp_path / "spa.txt"
    path.write_text(
        "Go.\tVe.\tCC-BY 2.0 (France) Attribution\n"
        "\n"
        "Hi. \t Hola.\n"
        "Run!\t\tattribution\n"
        "Who?\t¿Quién?\n",
        encoding="utf-8",
    )
    result = load_tsv_pairs(path)
    assert result.sources == ["Go.", "Hi.", "Who?"]
    assert result.targets == ["Ve.", "Hola.", "¿Quién?"]
    assert result.dropped == 2
    swapped = load_tsv_pairs(path, src_col=1, tgt_col=0)
    assert swapped.sources == result.targets and swapped.targets == result.sources


def test_load_tsv_pairs_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="none.tsv"):
        load_tsv_pairs(tmp_path / "none.tsv")
    path = tmp_path / "bad.tsv"
    path.write_text("a\tb\nno tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.tsv:2"):
        load_tsv_pairs(path)
