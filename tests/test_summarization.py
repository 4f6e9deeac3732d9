"""Task summarization: the VNDS reader, sentences and Lead baselines, ROUGE with Vietnamese
tokens, truncation, word joints, and `python -m train` end to end on a made-up corpus."""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from rouge_score import rouge_scorer
from rouge_score import tokenize as rouge_tokenize

from keras_transformer.decoding.settings import SEQ2SEQ_KEYS
from keras_transformer.text.pipeline import make_translation_dataset
from keras_transformer.text.rouge import VietnameseRougeTokenizer, rouge
from keras_transformer.text.tokenizer import SentencePieceTokenizer, train_sentencepiece
from tests.news_data import HEADER, WORDS, make_article, tiny_run_config, write_tsv
from train.config import ConfigError, load_config
from train.data import load_summaries, split_sentences, word_joints
from train.scoring import lead, lead_baselines
from train.tasks.base import final_split, score_prefix
from train.tasks.summarization import count_longer

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("KT_DATA_DIR") or ROOT.parent / "shared" / "data") / "vietnews"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
# ROUGE


def test_rouge_equals_hand_counted_f1_mean_over_documents():
    hypotheses = ["Mưa lớn ở Hà_Nội", "Giá vàng tăng mạnh"]
    references = ["Hà_Nội có mưa lớn .", "giá_vàng tăng"]
    # Pair 1. ref tokens: hà nội có mưa lớn (5); hyp: mưa lớn ở hà nội (5).
    #   unigrams in common: hà nội mưa lớn = 4 -> P = R = 4/5, F1 = 0.8
    #   bigrams: ref {hà nội, nội có, có mưa, mưa lớn}, hyp {mưa lớn, lớn ở, ở hà, hà nội}:
    #   2 in common -> P = R = 2/4, F1 = 0.5
    #   LCS: "hà nội" (or "mưa lớn") = 2 -> P = R = 2/5, F1 = 0.4
    # Pair 2. ref: giá vàng tăng (3); hyp: giá vàng tăng mạnh (4).
    #   unigrams: 3 -> P = 3/4, R = 1, F1 = 6/7
    #   bigrams: ref {giá vàng, vàng tăng}, hyp {giá vàng, vàng tăng, tăng mạnh}: 2 ->
    #   P = 2/3, R = 1, F1 = 0.8
    #   LCS: giá vàng tăng = 3 -> F1 = 6/7
    scores = rouge(hypotheses, references)
    assert scores["rouge1"] == pytest.approx(round((0.8 + 6 / 7) / 2 * 100, 2))
    assert scores["rouge2"] == pytest.approx(round((0.5 + 0.8) / 2 * 100, 2))
    assert scores["rougeL"] == pytest.approx(round((0.4 + 6 / 7) / 2 * 100, 2))
    assert "stem:no" in scores["rouge_signature"]
    assert "underscore:split" in scores["rouge_signature"]


def test_the_default_rouge_tokenizer_would_lose_the_diacritics():
    # rouge-score keeps only [a-z0-9]: "Hà_Nội" becomes three one-letter tokens, and two
    # different place names share "h" and "n".
    assert rouge_tokenize.tokenize("Hà_Nội", None) == ["h", "n", "i"]
    default = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=False)
    assert default.score("Hà Nội", "Hồ Nam")["rouge1"].fmeasure == pytest.approx(0.4)
    assert VietnameseRougeTokenizer().tokenize("Hà_Nội, Hồ Nam!") == ["hà", "nội", "hồ", "nam"]
    assert rouge(["Hồ Nam"], ["Hà Nội"])["rouge1"] == 0.0


def test_decomposed_and_composed_letters_are_one_token():
    composed = "Nội"
    decomposed = "No\u0302\u0323i"  # o + circumflex + dot below
    assert VietnameseRougeTokenizer().tokenize(decomposed) == [composed.lower()]


def test_word_joint_forms_score_alike():
    hyp = ["người_dân Hà_Nội đi làm", "đội bóng_đá thắng"]
    ref = ["người_dân đi làm sớm", "bóng_đá Việt_Nam thắng"]
    keep = rouge(hyp, ref)
    split = rouge([word_joints(h, "split") for h in hyp], [word_joints(r, "split") for r in ref])
    assert keep == split


# Sentences and Lead baselines


def test_split_sentences_ends_on_punctuation_tokens():
    assert split_sentences("A b . C d ! E ? F") == ["A b .", "C d !", "E ?", "F"]
    assert split_sentences("x ... y ?! z .") == ["x ...", "y ?!", "z ."]
    # "3.5" and "T.Ư" are not punctuation tokens; only whole tokens end a sentence.
    assert split_sentences("giá 3.5 tỷ .  T.Ư họp ") == ["giá 3.5 tỷ .", "T.Ư họp"]
    assert split_sentences("") == []


def test_lead_baselines_score_the_first_sentences():
    article = "Hà_Nội mưa lớn . Đường ngập . Người_dân đi làm muộn . Trời tạnh ."
    assert lead(article, 1) == "Hà_Nội mưa lớn ."
    assert lead(article, 3) == "Hà_Nội mưa lớn . Đường ngập . Người_dân đi làm muộn ."
    scores = lead_baselines([article], ["Hà_Nội mưa lớn"])
    assert scores["lead1"] == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0}
    # Lead-3: hà nội mưa lớn đường ngập người dân đi làm muộn, 11 tokens holding the
    # reference's 4: P = 4/11, R = 1, F1 = 2PR/(P+R) = 8/15; bigrams: the reference's 3 among
    # 10: P = 3/10, R = 1, F1 = 6/13; LCS 4: as ROUGE-1.
    assert scores["lead3"]["rouge1"] == pytest.approx(round(8 / 15 * 100, 2))
    assert scores["lead3"]["rouge2"] == pytest.approx(round(6 / 13 * 100, 2))
    assert scores["lead3"]["rougeL"] == pytest.approx(round(8 / 15 * 100, 2))


# The reader


@pytest.mark.parametrize("name", ["train.tsv.gz", "train.tsv"])
def test_reader_reads_gz_and_plain_and_counts_empty_rows(tmp_path, name, caplog):
    path = write_tsv(tmp_path / name, ["Bài một . Câu hai .\tTóm tắt một\ttiêu đề",
                                       "Bài hai .\t \ttiêu đề",
                                       "",
                                       "Bài ba .\tTóm tắt ba\t"])
    with caplog.at_level(logging.WARNING, logger="train"):
        data = load_summaries(path)
    assert data.articles == ["Bài một . Câu hai .", "Bài ba ."]
    assert data.summaries == ["Tóm tắt một", "Tóm tắt ba"]
    assert data.skipped_empty == 2
    assert "lines 3, 4" in caplog.text and name in caplog.text


def test_reader_takes_the_columns_by_the_header(tmp_path):
    path = write_tsv(tmp_path / "x.tsv", ["tóm tắt\tbài báo"], header="summary\tarticle")
    data = load_summaries(path)
    assert (data.articles, data.summaries) == (["bài báo"], ["tóm tắt"])


def test_reader_errors_name_the_file_and_line(tmp_path):
    wrong = write_tsv(tmp_path / "wrong.tsv.gz", ["a .\tb\tc", "a .\tb"])
    with pytest.raises(ValueError, match=r"wrong\.tsv\.gz line 3 has 2 tab-separated columns"):
        load_summaries(wrong)
    bad = tmp_path / "bad.tsv.gz"
    bad.write_bytes(gzip.compress(f"{HEADER}\na .\tb\tc\nx \xff\xfe\tb\tc\n".encode("latin-1")))
    with pytest.raises(ValueError, match=r"bad\.tsv\.gz line 3 is not valid UTF-8"):
        load_summaries(bad)
    headless = write_tsv(tmp_path / "headless.tsv", ["a .\tb\tc"], header="x\ty\tz")
    with pytest.raises(ValueError, match=r"headless\.tsv line 1: the header"):
        load_summaries(headless)
    broken = tmp_path / "broken.tsv.gz"
    broken.write_bytes(gzip.compress(b"article\tsummary\n")[:-6])
    with pytest.raises(ValueError, match=r"broken\.tsv\.gz is not a readable gzip"):
        load_summaries(broken)


def test_word_joints_option_is_checked_and_round_trips_through_sentencepiece(tmp_path):
    with pytest.raises(ConfigError, match="data.word_joints"):
        load_config(None, ["task=summarization", "data.word_joints=drop"])
    rng = random.Random(0)
    texts = [make_article(rng)[0] for _ in range(200)]
    for mode in ("keep", "split"):
        prepared = [word_joints(t, mode) for t in texts]
        assert ("_" in prepared[0]) == (mode == "keep")
        assert prepared == [t.replace("_", " ") if mode == "split" else t for t in texts]
        tok = SentencePieceTokenizer(train_sentencepiece(prepared, tmp_path / mode, 80))
        # The outputs come back in the references' form.
        assert tok.decode(tok.encode(prepared)) == prepared


# Truncation


def test_articles_and_summaries_are_cut_not_dropped(tmp_path):
    rng = random.Random(1)
    rows = [make_article(rng) for _ in range(60)]
    articles = [a for a, _ in rows]
    summaries = [s + " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12)))
                 for _, s in rows]
    tok = SentencePieceTokenizer(train_sentencepiece(articles + summaries, tmp_path / "spm", 60))
    n, m = 12, 9
    source_ids, target_ids = tok.encode(articles), tok.encode(summaries)
    cut_sources = sum(len(ids) > n - 1 for ids in source_ids)
    cut_targets = sum(len(ids) > m - 1 for ids in target_ids)
    assert cut_sources > 0
    assert 0 < cut_targets < len(summaries)
    assert count_longer(articles, tok, n) == cut_sources
    assert count_longer(summaries, tok, m) == cut_targets

    data = make_translation_dataset(articles, summaries, tok, tok, max_source_length=n,
                                    max_target_length=m, tokens_per_batch=1000, shuffle=False,
                                    drop_long=False, fixed_target_length=True,
                                    bucket_boundaries=[7, n + 1])
    got = []
    for (source, target_in), target_out in data:
        source, target_in, target_out = (np.asarray(x) for x in (source, target_in, target_out))
        assert source.shape[1] in (6, n) and target_in.shape[1] == target_out.shape[1] == m
        for s, t in zip(source, target_out, strict=True):
            got.append((tuple(s[s != tok.pad_id]), tuple(t[t != tok.pad_id])))
    expected = [(tuple(s[: n - 1]) + (tok.eos_id,), tuple(t[: m - 1]) + (tok.eos_id,))
                for s, t in zip(source_ids, target_ids, strict=True)]
    assert sorted(got) == sorted(expected)  # every pair, cut to its first pieces


# End to end


@pytest.fixture(scope="module")
def summary_run(tmp_path_factory):
    """(data directory, run directory, `python -m train`'s result) of a tiny summarizer."""
    data = tmp_path_factory.mktemp("vietnews")
    rng = random.Random(2)
    for name, count in (("train.tsv.gz", 600), ("dev.tsv.gz", 30), ("test.tsv", 30)):
        write_tsv(data / name, ["\t".join([*make_article(rng), "tiêu đề"])
                                for _ in range(count)])
    config = data / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_run_config(data), allow_unicode=True))
    out = data / "run"
    result = subprocess.run([sys.executable, "-m", "train", "--config", str(config),
                             "--out", str(out)], cwd=ROOT, env=ENV, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return data, out, result


@pytest.mark.slow
def test_summarization_run_writes_rouge_and_lead_baselines(summary_run):
    tmp_path, out, result = summary_run
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    for key in ("rouge1", "rouge2", "rougeL", "dev_rouge1", "lead1", "lead3", "dev_lead3",
                "best_dev_rouge", "rouge_signature", "articles_truncated"):
        assert key in metrics, key
    # Per epoch: the dev loss and ROUGE with its parts, their mean the score that picks best.
    dev = metrics["epoch_dev"]
    assert len(dev["rouge"]) == len(dev["loss"]) == len(metrics["epoch_minutes"]) \
        == metrics["epochs"]
    for i, mean in enumerate(dev["rouge"]):
        assert mean == pytest.approx(np.mean([dev[k][i] for k in ("rouge1", "rouge2", "rougeL")]),
                                     abs=1e-3)
    assert metrics["best_dev_rouge"] == pytest.approx(max(dev["rouge"]), abs=1e-3)
    assert metrics["epoch_minutes"] == sorted(metrics["epoch_minutes"])
    test = load_summaries(tmp_path / "test.tsv")
    hypotheses = (out / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 30
    # The scores are those of the written summaries, and the Lead baselines those of the
    # articles: here the summary is the first sentence, so Lead-1 is perfect.
    scores = rouge(hypotheses, test.summaries)
    assert {k: metrics[k] for k in ("rouge1", "rouge2", "rougeL")} == \
        {k: scores[k] for k in ("rouge1", "rouge2", "rougeL")}
    assert metrics["scored_split"] == "test" and metrics["articles"] == 30
    assert metrics["lead1"] == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0}
    assert metrics["lead3"] == lead_baselines(test.articles, test.summaries)["lead3"]
    # A 120-piece vocabulary cuts words into several pieces: nearly every article is longer
    # than 39 pieces, and is cut, counted and kept.
    sources = SentencePieceTokenizer(out / "spm.model")
    assert metrics["articles_truncated"]["test"] == count_longer(test.articles, sources, 40) > 0
    # A tiny model learns to copy the first sentence far better than chance.
    assert metrics["rouge1"] > 60.0, metrics
    assert "test: model ROUGE-1" in result.stdout and "test: lead3" in result.stdout
    assert result.stdout.count("  ARTICLE ") == 3


@pytest.mark.slow
def test_evaluate_scores_a_summarization_run_by_rouge(summary_run):
    """train.evaluate on the run's test TSV, with the run's own search settings, writes the
    run's test summaries again and records the run's own ROUGE; an option replaces a setting."""
    data, run, _ = summary_run
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    result = subprocess.run([sys.executable, "-m", "train.evaluate", "--run", str(run),
                             "--tsv", str(data / "test.tsv")], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    written = run / "eval" / "model" / "test.tsv.hyp"
    assert written.read_text(encoding="utf-8") == (run / "test.hyp").read_text(encoding="utf-8")
    entry = json.loads((run / "metrics.json").read_text(encoding="utf-8"))[
        "evaluations"]["model.keras"]["test.tsv"]
    assert {k: entry[k] for k in ("rouge1", "rouge2", "rougeL", "lead3")} == \
        {k: metrics[k] for k in ("rouge1", "rouge2", "rougeL", "lead3")}
    assert (entry["beam"], entry["min_length"]) == (2, 2)
    assert "model ROUGE-1" in result.stdout and "lead1 ROUGE-1 100.00" in result.stdout
    # --src/--ref take the articles the run wrote; --beam 1 is greedy, not the run's 2.
    greedy = subprocess.run([sys.executable, "-m", "train.evaluate", "--run", str(run),
                             "--src", str(run / "test.src"), "--ref", str(run / "test.ref"),
                             "--beam", "1", "--hyp", str(data / "greedy.hyp"),
                             "--plot-attention", "1"], cwd=ROOT,
                            env=ENV, capture_output=True, text=True, timeout=300)
    assert greedy.returncode == 0, greedy.stderr[-3000:]
    entry = json.loads((run / "metrics.json").read_text(encoding="utf-8"))[
        "evaluations"]["model.keras"]["test.src"]
    assert entry["beam"] == 1 and entry["sentences"] == 30
    # The heatmap of the first article, cut to the model's source length as the search cuts it.
    assert (run / "eval" / "model" / "attention" / "attention_001.png").stat().st_size > 0
    assert entry["rouge1"] == rouge((data / "greedy.hyp").read_text(
        encoding="utf-8").splitlines(), load_summaries(data / "test.tsv").summaries)["rouge1"]
    # A translation-only input form is refused for a summarization run, and the reverse.
    refused = subprocess.run([sys.executable, "-m", "train.evaluate", "--run", str(run),
                              "--tsv", str(data / "test.tsv"), "--ref", str(run / "test.ref")],
                             cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--tsv holds the references" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.slow
def test_summarization_export_summarizes_as_the_run_did(summary_run, tmp_path):
    """The export records the task and the run's search settings; export.translate with no
    search option summarizes the test articles exactly as the run did (ONNX, TF-free search),
    and export.parity passes on the articles."""
    from export import parity
    from export.common import Manifest
    from export.exporters import export_run

    data, run, _ = summary_run
    out = tmp_path / "export"
    export_run(run, out, formats=("onnx", "tflite"))
    manifest = Manifest(out)
    assert manifest.task == "summarization"
    assert manifest.search.to_dict(SEQ2SEQ_KEYS) == {"beam_size": 2, "alpha": 0.6,
                                                     "no_repeat_ngram_size": 0, "min_length": 2}
    assert manifest.data["search"] == manifest.search.to_dict(SEQ2SEQ_KEYS)
    articles = (run / "test.src").read_bytes()
    result = subprocess.run([sys.executable, "-m", "export.translate", "--export", str(out)],
                            input=articles, cwd=ROOT, env=ENV, capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.decode("utf-8") == (run / "test.hyp").read_text(encoding="utf-8")
    # One warning counts the articles cut to the model's source length.
    warnings = [line for line in result.stderr.decode().splitlines() if "truncated" in line]
    assert len(warnings) == 1 and re.match(r"WARNING: \d+ of 30 inputs", warnings[0]), \
        warnings
    # The options replace the run's settings: no bigram of pieces twice, so no pair of words
    # twice either (a word is always cut into the same pieces).
    loose = subprocess.run([sys.executable, "-m", "export.translate", "--export", str(out),
                            "--beam", "1", "--min-length", "0", "--no-repeat-ngram-size", "2"],
                           input=articles, cwd=ROOT, env=ENV, capture_output=True, timeout=300)
    assert loose.returncode == 0, loose.stderr[-3000:]
    for line in loose.stdout.decode("utf-8").splitlines():
        tokens = line.split()
        bigrams = list(zip(tokens, tokens[1:], strict=False))
        assert len(bigrams) == len(set(bigrams)), line
    printed = []
    sources = (run / "test.src").read_text(encoding="utf-8").splitlines()[:8]
    references = (run / "test.ref").read_text(encoding="utf-8").splitlines()[:8]
    assert parity.run(out, run, sentences=8, beam_sentences=4, bleu_sentences=8,
                      out=printed.append, sources=sources, references=references), printed
    assert any("ROUGE-L" in line for line in printed)
    with pytest.raises(Exception, match="give --src"):
        parity.run(out, run, out=printed.append)


# The real corpus


def test_real_vietnews_files_read_completely():
    files = [DATA / f"{split}.tsv.gz" for split in ("train", "dev", "test")]
    if not all(f.is_file() for f in files):
        pytest.skip(f"VNDS files not present under {DATA}")
    sizes = {f.name: len(load_summaries(f)) for f in files[1:]}
    assert sizes == {"dev.tsv.gz": 983, "test.tsv.gz": 988}
    dev = load_summaries(files[1])
    assert dev.skipped_empty == 0
    assert dev.articles[0].startswith("Bệnh Alzheimer hay còn gọi là bệnh đãng_trí")
    sentences = split_sentences(dev.articles[0])
    assert sentences[0].endswith(" .") and sentences[1] == (
        "Alzheimer ảnh_hưởng đến trí_nhớ , ngôn_ngữ và tư_duy .")
    assert len(load_summaries(files[0])) == 20_000


def test_baselines_command_prints_the_lead_scores(tmp_path, capsys):
    from train.baselines import main

    rng = random.Random(3)
    write_tsv(tmp_path / "dev.tsv", ["\t".join([*make_article(rng), ""]) for _ in range(5)])
    data = load_summaries(tmp_path / "dev.tsv")
    lead3 = lead_baselines(data.articles, data.summaries)["lead3"]
    assert main(["--data", str(tmp_path), "--split", "dev"]) == 0
    printed = capsys.readouterr().out
    assert "dev: lead1 ROUGE-1 100.00  ROUGE-2 100.00  ROUGE-L 100.00  (5 articles)" in printed
    assert (f"dev: lead3 ROUGE-1 {lead3['rouge1']:.2f}  ROUGE-2 {lead3['rouge2']:.2f}  "
            f"ROUGE-L {lead3['rougeL']:.2f}  (5 articles)") in printed
    # A missing split is bad input: exit 2 with one line naming the file.
    assert main(["--data", str(tmp_path), "--split", "test"]) == 2
    assert "test.tsv.gz" in capsys.readouterr().err


def test_the_vietnews_recipe_loads():
    config = load_config(ROOT / "train" / "configs" / "vietnews_summarization.yaml")
    assert config.task == "summarization" and config.data.word_joints == "keep"
    assert (config.data.max_source_length, config.data.max_target_length) == (200, 80)
    assert config.eval.no_repeat_ngram_size == 3 and config.training.max_minutes == 90
    assert config.training.average_last == 5 <= config.training.keep_checkpoints


def test_coverage_recall_is_the_summary_share_in_the_first_pieces():
    """train.coverage: recall of the summary by the article's first N - 1 pieces (one place
    is EOS), hand-counted on a tokenizer of whole words."""
    from train.coverage import recall

    class Words:
        vocab = ["hà_nội", "mưa", "lớn", "gió", "mạnh"]

        def encode(self, texts):
            return [[self.vocab.index(w) for w in t.split()] for t in texts]

        def decode(self, rows):
            return [" ".join(self.vocab[i] for i in row) for row in rows]

    articles = ["hà_nội mưa lớn gió mạnh", "gió mạnh mưa lớn"]
    summaries = ["Hà_Nội gió mạnh", "mưa lớn"]
    # N = 4 keeps 3 pieces. Article 1: "hà nội mưa lớn" holds hà, nội of the summary's 4
    # tokens (hà nội gió mạnh) -> R1 2/4, bigrams (hà nội) of 3 -> R2 1/3. Article 2: "gió
    # mạnh mưa" holds mưa of "mưa lớn" -> R1 1/2, no bigram -> R2 0.
    r1, r2 = recall(articles, summaries, Words(), 4)
    assert r1 == pytest.approx(100 * (2 / 4 + 1 / 2) / 2)
    assert r2 == pytest.approx(100 * (1 / 3 + 0) / 2)
    # Whole articles: every summary token is there.
    assert recall(articles, summaries, Words(), 6)[0] == pytest.approx(100.0)


def test_unprefixed_scores_name_their_split_so_dev_is_not_taken_for_test():
    with_test, without_test = {}, {}
    final = final_split(True)
    assert [score_prefix(name, final, with_test) for name in ("dev", "test")] == ["dev_", ""]
    assert score_prefix("dev", final_split(False), without_test) == ""
    assert (with_test["scored_split"], without_test["scored_split"]) == ("test", "dev")
