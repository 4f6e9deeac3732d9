"""python -m train.prepare_wmt14 on a tiny fabricated WMT14 folder (the archives' layout: the
corpora in subfolders, newstest2013 in SGML, newstest2014 in plain text): the shards hold every
pair once, in turn, with empty sides dropped and tabs made spaces; dev and test are the
newstest sets; bad folders are refused in one line; the paper's configs hold its setting and
run on the prepared files."""

import gzip
import json

import pytest

from keras_transformer.text.shards import shard_pairs
from tests.cli_probe import ROOT
from train.config import model_preview
from train.prepare_wmt14 import CORPORA, main
from train.tasks import load_run_config


def fabricate(folder):
    """Three corpora of a few pairs each; the second has a pair with an empty side and a tab
    inside a sentence. Returns the training pairs the shards must hold, in order."""
    expected = []
    for n, name in enumerate(CORPORA):
        english = [f"{name} sentence {i} in English" for i in range(5 + n)]
        german = [f"{name} Satz {i} auf Deutsch" for i in range(5 + n)]
        if n == 1:
            english[2], german[3] = "", "ein\tTab"
        place = folder / ("training" if n < 2 else "training-parallel-nc-v9")
        place.mkdir(parents=True, exist_ok=True)
        (place / f"{name}.en").write_text("".join(f"{e}\n" for e in english))
        (place / f"{name}.de").write_text("".join(f"{d}\n" for d in german))
        expected += [(e, d.replace("\t", " ")) for e, d in zip(english, german, strict=True)
                     if e and d]
    dev = folder / "dev"
    dev.mkdir()
    for side, role, text in (("en", "src", "Hello &amp; welcome"), ("de", "ref", "Hallo")):
        (dev / f"newstest2013-{role}.{side}.sgm").write_text(
            f'<srcset setid="newstest2013">\n<doc docid="1">\n<seg id="1">{text}</seg>\n'
            f'<seg id="2">{text} two</seg>\n</doc>\n</srcset>\n')
    (dev / "newstest2014.en").write_text("Test one\nTest two\nTest three\n")
    (dev / "newstest2014.de").write_text("Eins\nZwei\nDrei\n")
    return expected


def test_prepared_shards_hold_the_corpora_and_the_newstest_sets(tmp_path, capsys):
    src = tmp_path / "wmt14"
    expected = fabricate(src)
    out = tmp_path / "out"
    assert main(["--src-dir", str(src), "--out", str(out), "--shards", "4"]) == 0
    shards = sorted(out.glob("train-*-of-00004.tsv.gz"))
    assert len(shards) == 4
    assert all(path.read_bytes()[:2] == b"\x1f\x8b" for path in shards)
    read = [list(shard_pairs(path)) for path in shards]
    assert [pair for i in range(len(expected)) for pair in [read[i % 4][i // 4]]] == expected
    assert sum(map(len, read)) == len(expected)
    assert (out / "dev.tsv").read_text() == ("Hello & welcome\tHallo\n"
                                             "Hello & welcome two\tHallo two\n")
    assert (out / "test.tsv").read_text() == "Test one\tEins\nTest two\tZwei\nTest three\tDrei\n"
    assert f"{len(expected)} training pairs of 3 corpora in 4 shards (1 with an empty side " \
           f"dropped, 1 tabs replaced)" in capsys.readouterr().out
    assert not list(out.glob(".*"))  # no temporary file left
    # The same folder gives the same bytes.
    again = tmp_path / "again"
    main(["--src-dir", str(src), "--out", str(again), "--shards", "4"])
    assert [p.read_bytes() for p in shards] == [
        p.read_bytes() for p in sorted(again.glob("train-*"))]


def test_bad_folders_are_refused_in_one_line(tmp_path, capsys):
    def error(*argv):
        assert main(list(argv)) != 0
        message = capsys.readouterr().err.strip()
        assert "\n" not in message and message.startswith("error: ")
        return message

    assert f"--src-dir {tmp_path / 'none'}: no such folder" in error(
        "--src-dir", str(tmp_path / "none"), "--out", str(tmp_path / "o"))
    src = tmp_path / "wmt14"
    fabricate(src)
    (src / "training" / "commoncrawl.de-en.de").unlink()
    assert f"commoncrawl.de-en: none of commoncrawl.de-en.de under {src}" in error(
        "--src-dir", str(src), "--out", str(tmp_path / "o"))
    (src / "training" / "commoncrawl.de-en.de").write_text("nur eine Zeile\n")
    message = error("--src-dir", str(src), "--out", str(tmp_path / "o"))
    assert "commoncrawl.de-en.de ends at line 1" in message and "line-aligned" in message
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").glob("train-*"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert "is not empty; add --overwrite" in error("--src-dir", str(src), "--out",
                                                    str(tmp_path / "full"))


def test_the_papers_configs_hold_its_setting():
    sizes = {"base": (512, 8, 2048, 0.1, 5), "big": (1024, 16, 4096, 0.3, 20)}
    for name, (d_model, heads, d_ff, dropout, averaged) in sizes.items():
        config = load_run_config(ROOT / "train" / "configs" / f"wmt14_ende_{name}.yaml", [])
        model = model_preview(config)
        assert (model.d_model, model.num_heads, model.d_ff, model.dropout) == (
            d_model, heads, d_ff, dropout)
        assert (model.num_encoder_layers, model.num_decoder_layers) == (6, 6)
        t, d, tok = config.training, config.data, config.tokenizer
        assert d.tokens_per_batch * t.accumulate_steps == 25000
        assert (t.warmup_steps, t.label_smoothing, t.beta_2, t.epsilon) == (4000, 0.1, 0.98,
                                                                           1e-9)
        assert t.steps_per_epoch * t.epochs == (100_000 if name == "base" else 300_000)
        assert t.average_last == averaged
        assert (tok.vocab_size, tok.joint, tok.model_type, d.stream) == (37000, True, "bpe",
                                                                         True)
        assert model.share_embeddings and model.tie_output


@pytest.mark.slow
@pytest.mark.tf_only
def test_the_base_config_trains_on_prepared_files(tmp_path):
    from tests.test_train_configs import SHRINK
    from train.run import run

    src = tmp_path / "wmt14"
    expected = fabricate(src)
    main(["--src-dir", str(src), "--out", str(tmp_path / "data"), "--shards", "3"])
    shrink = [item for item in SHRINK if not item.startswith(("data.data_dir",
                                                              "tokenizer.vocab_size"))]
    config = load_run_config(ROOT / "train" / "configs" / "wmt14_ende_base.yaml", [
        *shrink, f"data.data_dir={tmp_path / 'data'}", "tokenizer.vocab_size=60",
        "tokenizer.sample_sentences=100", "training.accumulate_steps=2", "eval.beam_size=1",
        "eval.dev_score_sentences=0", "eval.samples=0", "training.average_last=0",
        "training.jit_compile=false", "training.precision=float32"])
    run(config, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["accumulate_steps"] == 2
    assert (metrics["streamed_train_pairs"], metrics["stream_shards"]) == (len(expected), 3)
    assert gzip.decompress((tmp_path / "data" / "train-00000-of-00003.tsv.gz").read_bytes())
    assert len((tmp_path / "run" / "test.hyp").read_text().splitlines()) == 3
