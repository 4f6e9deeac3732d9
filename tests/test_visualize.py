"""`python -m train.visualize` and the attention arrays behind its pictures (train.attention):
the saved matrices are the model's own weights (against direct model calls and the NumPy
attention of tests/reference.py), rows sum to 1, the decoder's triangle is exactly 0 above
the diagonal, padding columns are 0, the positional encoding is the paper's formula, and
the command fails cleanly on bad input.

One tiny translation run and one tiny classification run are trained for the module.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from keras_transformer.decoding import SearchSettings
from tests import reference
from tests.cli_probe import assert_clean_failure, call_main, run_cli, tree_digest
from tests.tiny_runs import train_args

pytestmark = pytest.mark.slow  # trains two runs end to end

TEXT = "she bought three dogs"
CPU = {"CUDA_VISIBLE_DEVICES": ""}
TRANSLATION_FIGURES = {
    "positional_encoding.png", "position_similarity.png", "cross_mean.png",
    *(f"{kind}_layer{n}.png" for kind in ("encoder_self", "decoder_self", "cross")
      for n in (1, 2))}


def visualize_main(*args):
    from train.visualize import main

    return call_main(main, *args)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished tiny demo translation run (2 layers each side, 2 heads)."""
    out = tmp_path_factory.mktemp("visualize") / "run"
    result = run_cli("train", *train_args(out), env=CPU)
    assert result.code == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def pictures(run, tmp_path_factory):
    """The command run as a user would, on `run`: (output directory, its stdout)."""
    out = tmp_path_factory.mktemp("pictures") / "pictures"
    result = run_cli("train.visualize", "--run", run, "--text", TEXT, "--out", out,
                     "--beam", 2, "--pe-positions", 24, "--pe-dims", 0, env=CPU)
    assert result.code == 0, result.stderr[-3000:]
    return out, result.stdout


@pytest.fixture(scope="module")
def model(run):
    from train.evaluate import load_run_model

    return load_run_model(run / "model.keras")


@pytest.fixture(scope="module")
def tokenizer(run):
    from train.tokenizers import load_run_tokenizers

    return load_run_tokenizers(run)[0]


def load(directory: Path) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(directory / "arrays.npz") as arrays:
        data = {name: arrays[name] for name in arrays.files}
    return data, json.loads((directory / "pictures.json").read_text(encoding="utf-8"))


def assert_rows_are_distributions(weights: np.ndarray) -> None:
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)


# --- a translation run ----------------------------------------------------------------------

def test_writes_every_picture_the_arrays_and_the_tokens(pictures, model, tokenizer, run):
    from keras_transformer.text.sources import default_max_length
    from keras_transformer.translator import translate
    from train.attention import pieces

    out, stdout = pictures
    arrays, record = load(out)
    assert set(record["figures"]) == TRANSLATION_FIGURES
    assert {p.name for p in out.iterdir()} == TRANSLATION_FIGURES | {"arrays.npz",
                                                                     "pictures.json"}
    for name in TRANSLATION_FIGURES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    # The sentence, its pieces and the output are those of the tokenizer and the search.
    ids = tokenizer.encode([TEXT])[0] + [model.config.eos_id]
    assert record["source_ids"] == ids == arrays["source_ids"].tolist()
    assert record["source_pieces"] == pieces(tokenizer, ids)
    assert record["source_pieces"][-1] == "</s>"
    expected = translate(model, tokenizer, tokenizer, [TEXT],
                         SearchSettings(beam_size=2, alpha=0.6))[0]
    assert record["output"] == expected and f"output: {expected}" in stdout
    # Up to and including EOS, or every token of an output cut at the maximum length.
    generated, eos = record["output_ids"], model.config.eos_id
    assert eos not in generated[:-1]
    assert generated[-1] == eos or len(generated) == default_max_length(
        len(ids), model.config.max_target_length)
    assert record["target_in_ids"] == [model.config.bos_id, *record["output_ids"][:-1]]
    assert record["output_pieces"] == pieces(tokenizer, record["output_ids"])
    s, t = len(ids), len(record["output_ids"])
    layers, heads = model.config.num_encoder_layers, model.config.num_heads
    assert arrays["encoder_self"].shape == (layers, heads, s, s)
    assert arrays["decoder_self"].shape == (layers, heads, t, t)
    assert arrays["cross"].shape == (layers, heads, t, s)
    assert record["arrays"] == {k: list(v.shape) for k, v in arrays.items()}


def test_saved_arrays_are_the_models_own_weights(pictures, model):
    import tensorflow as tf

    arrays, record = load(pictures[0])
    source = tf.constant([record["source_ids"]], tf.int32)
    memory, mask, encoder = model.encode(source, training=False, return_attention_scores=True)
    _, decoder = model.decode(tf.constant([record["target_in_ids"]], tf.int32), memory, mask,
                              training=False, return_attention_scores=True)
    for name, per_layer in (("encoder_self", encoder), ("decoder_self", decoder["self"]),
                            ("cross", decoder["cross"])):
        np.testing.assert_allclose(arrays[name], np.stack([w[0] for w in per_layer]),
                                   atol=1e-6, err_msg=name)
    np.testing.assert_allclose(arrays["cross_mean"], arrays["cross"].mean(axis=1), atol=1e-7)
    # The first layers against the paper's attention in NumPy (post-LN: the sub-layer reads
    # the embedded tokens as they are), with the causal mask for the decoder.
    assert not model.config.pre_norm
    x = np.asarray(model.source_embedding(source, training=False))
    _, weights = reference.multi_head_attention(
        model.encoder.encoder_layers[0].self_attention, x, x)
    np.testing.assert_allclose(arrays["encoder_self"][0], weights[0], atol=1e-5)
    y = np.asarray(model.target_embedding(tf.constant([record["target_in_ids"]], tf.int32),
                                          training=False))
    t = y.shape[1]
    _, weights = reference.multi_head_attention(
        model.decoder.decoder_layers[0].self_attention, y, y,
        np.tril(np.ones((t, t), bool))[None])
    np.testing.assert_allclose(arrays["decoder_self"][0], weights[0], atol=1e-5)


def test_rows_sum_to_one_and_the_decoder_triangle_is_exactly_zero(pictures):
    arrays, _ = load(pictures[0])
    for name in ("encoder_self", "decoder_self", "cross"):
        assert_rows_are_distributions(arrays[name])
    decoder = arrays["decoder_self"]
    above = np.triu(np.ones(decoder.shape[-2:], bool), k=1)
    assert above.any() and np.all(decoder[..., above] == 0.0)
    assert np.all(decoder[..., ~above] > 0.0)  # what is visible is nonzero
    # The first output token sees only BOS (to a float32 rounding: oneDNN's softmax kernel
    # differs between CPUs).
    np.testing.assert_allclose(decoder[..., 0, 0], 1.0, rtol=0, atol=2e-7)


def test_generated_tokens_keep_eos_or_the_whole_row_cut_at_the_limit():
    from keras_transformer.decoding import SearchResult
    from train.attention import generated_tokens, teacher_forced_input

    result = SearchResult(np.array([[5, 6, 3, 0, 0], [5, 6, 7, 8, 9]], np.int32),
                          np.zeros(2, np.float32))
    assert generated_tokens(result, eos_id=3) == [[5, 6, 3], [5, 6, 7, 8, 9]]
    assert teacher_forced_input(2, [5, 6, 3]).tolist() == [[2, 5, 6]]


def test_padding_columns_get_zero_weight(model, tokenizer):
    from keras_transformer.text.sources import pad_batch
    from train.attention import attention_maps

    c = model.config
    short, long = (tokenizer.encode([text])[0] + [c.eos_id]
                   for text in ("two cats", "she bought three dogs and two cats"))
    assert len(short) < len(long)
    target_in = np.array([[c.bos_id, *short[:3]]] * 2, np.int32)
    batch = pad_batch([short, long], c.pad_id)
    maps = attention_maps(model, batch, target_in)
    alone = attention_maps(model, np.array([short], np.int32), target_in[:1])
    s = len(short)
    for name in ("encoder_self", "cross"):
        assert_rows_are_distributions(maps[name])
        assert np.all(maps[name][:, 0, ..., s:] == 0.0), name  # the padding columns
        assert np.all(maps[name][:, 1] > 0.0), name  # the long row has no padding
    # The short source's weights do not change with the padding around it.
    np.testing.assert_allclose(maps["encoder_self"][:, 0, :, :s, :s], alone["encoder_self"][:, 0],
                               atol=1e-5)
    np.testing.assert_allclose(maps["cross"][:, 0, ..., :s], alone["cross"][:, 0], atol=1e-5)
    np.testing.assert_allclose(maps["decoder_self"][:, 0], alone["decoder_self"][:, 0],
                               atol=1e-5)


def test_positional_encoding_is_the_papers_formula(pictures, model):
    from keras_transformer.layers.embedding import sinusoidal_position_encoding
    from train.visualize import positional_arrays

    arrays, record = load(pictures[0])
    d = model.config.d_model
    assert record["pe"] == {"positions": 24, "dims": d}  # --pe-dims 0: the model's d_model
    # The table the model adds to its embeddings (section 3.5), and the paper's formula.
    np.testing.assert_array_equal(arrays["pe"], np.asarray(
        model.source_embedding.position_embedding)[:24])
    np.testing.assert_allclose(arrays["pe"], reference.positional_encoding(24, d), atol=1e-6)
    seeds = positional_arrays(20, 128)  # the default 20 x 128 grid
    np.testing.assert_array_equal(seeds["pe"], sinusoidal_position_encoding(20, 128))
    pe = reference.positional_encoding(20, 128)
    np.testing.assert_allclose(seeds["pe"], pe, atol=1e-6)
    # sin on the even dimensions 2i, cos on the odd ones 2i+1, of pos / 10000^(2i/d).
    angles = np.arange(20)[:, None] / 10000 ** (2 * np.arange(64)[None, :] / 128)
    np.testing.assert_allclose(seeds["pe"][:, 0::2], np.sin(angles), atol=1e-6)
    np.testing.assert_allclose(seeds["pe"][:, 1::2], np.cos(angles), atol=1e-6)
    # PE(pos)·PE(pos + k) = sum_i cos(k w_i): a function of k alone.
    similarity = seeds["pe_similarity"]
    np.testing.assert_allclose(similarity, pe @ pe.T, rtol=1e-5)
    frequencies = 1 / 10000 ** (np.arange(0, 128, 2) / 128)
    for pos in range(20):
        for k in range(20 - pos):
            assert similarity[pos, pos + k] == pytest.approx(
                np.cos(k * frequencies).sum(), abs=1e-3)
    assert similarity[0, 0] == pytest.approx(64.0, abs=1e-4)  # d/2: |PE(pos)|^2


def test_rerun_replaces_its_own_output_and_writes_inside_a_new_entry_of_the_run(run):
    out = run / "pictures"
    for _ in range(2):  # the second run replaces the first one's directory without asking
        result = visualize_main("--run", run, "--text", "two cats", "--out", out,
                                "--beam", 1, "--pe-positions", 8, "--pe-dims", 16)
        assert result.code == 0, result.stderr[-3000:]
    arrays, record = load(out)
    assert record["text"] == "two cats" and arrays["pe"].shape == (8, 16)
    shutil.rmtree(out)


@pytest.mark.parametrize("args, words", [
    (["--text", ""], ["--text is empty"]),
    (["--text", "   "], ["--text is empty"]),
    (["--text", " ".join(["dogs"] * 40)], ["max_source_length=24"]),
    (["--text", TEXT, "--model", "../model.keras"], ["file name in the run directory"]),
    (["--text", TEXT, "--model", "missing.keras"], ["model not found"]),
])
def test_bad_input_is_one_line_and_writes_nothing(run, tmp_path, args, words):
    before = tree_digest(run)
    result = visualize_main("--run", run, "--out", tmp_path / "out", *args)
    assert_clean_failure(result, 2, *words)
    assert not (tmp_path / "out").exists()
    assert tree_digest(run) == before


@pytest.mark.parametrize("flag, value", [
    ("--beam", "0"), ("--beam", "65"), ("--pe-positions", "0"), ("--pe-positions", "1025"),
    ("--pe-dims", "-1"), ("--pe-dims", "4097"), ("--dpi", "10"), ("--dpi", "x")])
def test_options_out_of_range_are_refused_at_parse_time(run, tmp_path, flag, value):
    result = visualize_main("--run", run, "--text", TEXT, "--out", tmp_path / "out", flag,
                            value)
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
    assert flag in result.stderr
    assert ("out of range" if value != "x" else "not an integer") in result.stderr
    assert not (tmp_path / "out").exists()


def test_missing_run_and_a_directory_that_is_no_run(tmp_path):
    result = visualize_main("--run", tmp_path / "nope", "--text", TEXT, "--out", tmp_path / "o")
    assert_clean_failure(result, 2, "run directory not found")
    result = visualize_main("--run", tmp_path, "--text", TEXT, "--out", tmp_path / "o")
    assert_clean_failure(result, 2, "no config.yaml")


def test_refuses_outputs_that_are_the_runs_or_not_its_own(run, tmp_path):
    before = tree_digest(run)
    for out, words in ((run, ["would replace the run directory"]),
                       (run.parent, ["would replace the run directory"]),
                       (run / "eval" / "pictures", ["one of the run's own entries"]),
                       (run / "checkpoints", ["one of the run's own entries"]),
                       (run / "model.keras", ["one of the run's own entries"])):
        for extra in ([], ["--overwrite"]):
            result = visualize_main("--run", run, "--text", TEXT, "--out", out, *extra)
            assert_clean_failure(result, 2, *words)
    assert tree_digest(run) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    result = visualize_main("--run", run, "--text", TEXT, "--out", mine)
    assert_clean_failure(result, 2, "--overwrite", str(mine))
    assert (mine / "notes.txt").read_text(encoding="utf-8") == "keep me"
    (tmp_path / "file").write_text("x", encoding="utf-8")
    result = visualize_main("--run", run, "--text", TEXT, "--out", tmp_path / "file",
                            "--overwrite")
    assert_clean_failure(result, 2, "is a file")
    result = visualize_main("--run", run, "--text", TEXT, "--out", mine, "--overwrite",
                            "--beam", 1)
    assert result.code == 0, result.stderr[-3000:]
    # --overwrite writes the pictures there and keeps what the command did not make.
    assert (mine / "notes.txt").read_text(encoding="utf-8") == "keep me"
    assert (mine / "pictures.json").is_file()


def test_a_rerun_replaces_only_its_own_pictures(run, tmp_path):
    """An earlier output with a file the user put there is not the command's own: a rerun
    without --overwrite is refused and changes nothing; with it, the pictures are replaced
    (one the new run does not draw is gone) and the user's file stays, byte for byte."""
    out = tmp_path / "v" / "pics"
    first = visualize_main("--run", run, "--text", TEXT, "--out", out, "--beam", 1,
                           "--word", "1")
    assert first.code == 0, first.stderr[-3000:]
    assert (out / "word_attention.png").is_file()
    (out / "my_notes.txt").write_text("mine", encoding="utf-8")
    (out / "mine").mkdir()
    (out / "mine" / "data.bin").write_bytes(b"\x00\x01")
    before = tree_digest(tmp_path)
    again = visualize_main("--run", run, "--text", TEXT, "--out", out, "--beam", 1)
    assert_clean_failure(again, 2, "my_notes.txt", "--overwrite")
    assert tree_digest(tmp_path) == before
    again = visualize_main("--run", run, "--text", TEXT, "--out", out, "--beam", 1,
                           "--overwrite")
    assert again.code == 0, again.stderr[-3000:]
    assert (out / "my_notes.txt").read_text(encoding="utf-8") == "mine"
    assert (out / "mine" / "data.bin").read_bytes() == b"\x00\x01"
    assert not (out / "word_attention.png").exists()
    record = json.loads((out / "pictures.json").read_text(encoding="utf-8"))
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["my_notes.txt", "mine", "pictures.json", "arrays.npz", *record["figures"]])
    # Its own earlier output alone is replaced without --overwrite.
    (out / "my_notes.txt").unlink()
    shutil.rmtree(out / "mine")
    alone = visualize_main("--run", run, "--text", "two cats", "--out", out, "--beam", 1)
    assert alone.code == 0, alone.stderr[-3000:]
    assert json.loads((out / "pictures.json").read_text(encoding="utf-8"))["text"] == "two cats"


def test_word_that_is_a_digit_but_no_number_is_named(run, tmp_path):
    """"²" is a digit to str.isdigit, not to int(): it is looked for as a word."""
    result = visualize_main("--run", run, "--text", TEXT, "--out", tmp_path / "o", "--beam",
                            1, "--word", "²")
    assert_clean_failure(result, 2, "--word '²' is not a word of the sentence")
    assert not (tmp_path / "o").exists()


def test_a_summarization_run_cuts_the_article_to_the_models_length(run, tmp_path):
    """The task in config.yaml decides: an article longer than max_source_length is cut to
    its first pieces, as the summarization task reads it, where a translation refuses it."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text(encoding="utf-8"))
    config["task"] = "summarization"
    (copy / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    article = " ".join(["she bought three dogs ."] * 12)
    result = visualize_main("--run", copy, "--text", article, "--out", tmp_path / "out",
                            "--beam", 1)
    assert result.code == 0, result.stderr[-3000:]
    arrays, record = load(tmp_path / "out")
    from train.tokenizers import load_run_tokenizers

    ids = load_run_tokenizers(copy)[0].encode([article])[0]
    assert len(ids) > 24
    assert record["source_ids"] == ids[:23] + [3]  # max_source_length 24, EOS last
    assert arrays["encoder_self"].shape[-1] == 24 and record["task"] == "summarization"


def test_a_language_model_gets_its_masked_self_attention(run, tmp_path):
    """A TransformerLM in a run: the positional encoding and the decoder's self-attention
    over BOS and the text, nothing else."""
    import tensorflow as tf

    from keras_transformer.models.language_model import TransformerLM
    from train.evaluate import load_run_model

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    config = load_run_model(run / "model.keras").config
    lm = TransformerLM(config)
    lm.build()
    lm.save(copy / "model.keras")
    result = visualize_main("--run", copy, "--text", TEXT, "--out", tmp_path / "out")
    assert result.code == 0, result.stderr[-3000:]
    arrays, record = load(tmp_path / "out")
    assert set(record["figures"]) == {"positional_encoding.png", "position_similarity.png",
                                      "decoder_self_layer1.png", "decoder_self_layer2.png"}
    ids = load_run_tokenizers_ids(copy, TEXT)
    assert record["target_in_ids"] == [config.bos_id, *ids]
    x = lm.embedding(tf.constant([record["target_in_ids"]], tf.int32), training=False)
    _, weights = lm.decoder(x, training=False, return_attention_scores=True)
    np.testing.assert_allclose(arrays["decoder_self"], np.stack([w[0] for w in weights["self"]]),
                               atol=1e-6)
    decoder = arrays["decoder_self"]
    assert np.all(decoder[..., np.triu(np.ones(decoder.shape[-2:], bool), k=1)] == 0.0)
    assert_rows_are_distributions(decoder)


def load_run_tokenizers_ids(run: Path, text: str) -> list[int]:
    from train.tokenizers import load_run_tokenizers

    return load_run_tokenizers(run)[1].encode([text])[0]


# --- a classification run -------------------------------------------------------------------

WORDS = {1: ["good", "great", "lovely", "fine", "warm", "bright"],
         0: ["bad", "dull", "awful", "poor", "cold", "grim"]}


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    rng = np.random.default_rng(3)
    for name, count in (("train.tsv", 160), ("dev.tsv", 16)):
        lines = ["sentence\tlabel"]
        for i in range(count):
            label = i % 2
            words = [*rng.choice(WORDS[label], 3), "movie", "plot"]
            lines.append(f"the {' '.join(rng.permutation(words))}\t{label}")
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = {
        "task": "classification",
        "data": {"corpus": "tsv", "data_dir": str(root), "train_source": "train.tsv",
                 "dev_source": "dev.tsv", "max_source_length": 16, "tokens_per_batch": 256},
        "tokenizer": {"vocab_size": 40},
        "model": {"preset": "tiny", "num_classes": 2,
                  "overrides": {"d_model": 16, "num_heads": 2, "d_ff": 32, "dropout": 0.0}},
        "training": {"epochs": 1, "steps_per_epoch": 3, "verbose": 0, "tensorboard": False},
    }
    (root / "tiny.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    result = run_cli("train", "--config", root / "tiny.yaml", "--out", root / "run", env=CPU)
    assert result.code == 0, result.stderr[-3000:]
    return root / "run"


def test_a_classifier_gets_the_encoders_pictures_and_its_class(classifier_run, tmp_path):
    import tensorflow as tf

    from train.evaluate import load_run_model

    text = "the great lovely movie"
    result = visualize_main("--run", classifier_run, "--text", text, "--out", tmp_path / "o")
    assert result.code == 0, result.stderr[-3000:]
    arrays, record = load(tmp_path / "o")
    assert set(record["figures"]) == {"positional_encoding.png", "position_similarity.png",
                                      "encoder_self_layer1.png", "encoder_self_layer2.png"}
    assert "decoder_self" not in arrays and "cross" not in arrays
    model = load_run_model(classifier_run / "model.keras")
    source = tf.constant([record["source_ids"]], tf.int32)
    probabilities = tf.nn.softmax(model(source, training=False))[0].numpy()
    assert record["predicted_class"] == int(np.argmax(probabilities))
    assert f"class: {record['predicted_class']}" in result.stdout
    np.testing.assert_allclose(record["probabilities"], probabilities, atol=1e-6)
    x = np.asarray(model.embedding(source, training=False))
    _, weights = reference.multi_head_attention(model.encoder.encoder_layers[0].self_attention,
                                                x, x)
    np.testing.assert_allclose(arrays["encoder_self"][0], weights[0], atol=1e-5)
    assert_rows_are_distributions(arrays["encoder_self"])


def test_evaluate_plots_a_translation_cut_at_the_maximum_length(run, model, tokenizer,
                                                               tmp_path):
    """train.evaluate --plot-attention shares train.attention: the barely trained model
    never says EOS, and its output of max_target_length tokens is drawn, not refused for
    one token too many."""
    from keras_transformer.translator import keras_translator
    from train.evaluate import main

    source = np.array([tokenizer.encode([TEXT])[0] + [model.config.eos_id]], np.int32)
    tokens = keras_translator(model).search_ids(source, SearchSettings(beam_size=1)).tokens[0]
    assert model.config.eos_id not in tokens
    assert len(tokens) == model.config.max_target_length
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    src = tmp_path / "in.src"
    src.write_text(f"{TEXT}\n", encoding="utf-8")
    result = call_main(main, "--run", copy, "--src", src, "--beam", 1, "--plot-attention", 1)
    assert result.code == 0, result.stderr[-3000:]
    plot = copy / "eval" / "model" / "attention" / "attention_001.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_word_draws_one_tokens_self_attention_per_layer_and_head(run, tmp_path):
    """--word: the seeds' one-word picture, a row of the encoder's own weights, chosen by a
    position or by the text of a piece; a word the sentence lacks is a one-line error."""
    by_text = visualize_main("--run", run, "--text", TEXT, "--out", tmp_path / "t",
                             "--word", TEXT.split()[1])
    assert by_text.code == 0, by_text.stderr[-3000:]
    arrays, record = load(tmp_path / "t")
    query = record["word"]["position"] - 1
    assert record["word"]["piece"] == record["source_pieces"][query]
    # The word's first piece: the pieces from it to the next word spell the word.
    spelled = record["source_pieces"][query].replace("▁", "")
    for piece in record["source_pieces"][query + 1:]:
        if piece.startswith("▁") or piece == "</s>":
            break
        spelled += piece
    assert spelled == TEXT.split()[1]
    np.testing.assert_array_equal(arrays["word_attention"],
                                  arrays["encoder_self"][:, :, query, :])
    assert arrays["word_attention"].shape[:2] == arrays["encoder_self"].shape[:2]
    np.testing.assert_allclose(arrays["word_attention"].sum(-1), 1.0, atol=1e-5)
    assert "word_attention.png" in record["figures"]
    by_position = visualize_main("--run", run, "--text", TEXT, "--out", tmp_path / "p",
                                 "--word", str(query + 1))
    assert by_position.code == 0, by_position.stderr[-3000:]
    np.testing.assert_array_equal(load(tmp_path / "p")[0]["word_attention"],
                                  arrays["word_attention"])
    for word in ("zzzz", "999"):
        result = visualize_main("--run", run, "--text", TEXT, "--out", tmp_path / word,
                                "--word", word)
        assert_clean_failure(result, 2, "--word")
        assert not (tmp_path / word).exists()
