"""bench.serve's CTranslate2 ceiling: the work it hands CTranslate2 (the server's length rule
on the export's own sentences and shape), how the calls are grouped, the fastest setting
(CT2_USE_MKL and replicas) kept, and the ratios against the batching cells, on hand-made
values (no timing is asserted); and a summarizer's export loaded on its route."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import precision_ct2, serve


def cell(mode, beam, clients, per_s):
    return {"mode": mode, "beam_size": beam, "clients": clients, "sentences_per_s": per_s}


def test_calls_group_one_length_limit_at_most_a_batch_each():
    limits = [20, 14, 20, 14, 20, 17, 20]
    assert precision_ct2.length_batches(limits, 2) == [[1, 3], [5], [0, 2], [4, 6]]
    assert precision_ct2.length_batches(limits, 32) == [[1, 3], [5], [0, 2, 4, 6]]
    assert precision_ct2.length_batches([], 4) == []


def test_the_faster_backend_is_kept_per_beam_with_both_figures():
    work = {"beams": [4, 1], "max_batch_size": 32, "shape": {"d_model": 128},
            "sources": [[5, 3]] * 10}

    def run(per_s):
        return {"versions": {"ctranslate2": "4.8.5"}, "compute_type_used": "float32",
                "threads": 2, "results": [{"beam_size": b, "sentences_per_s": v}
                                          for b, v in per_s.items()]}

    rows = serve.best_ceiling({("0", 1): run({4: 50.0, 1: 90.0}),
                               ("1", 1): run({4: 60.0, 1: 80.0})}, work)
    assert [(r["beam_size"], r["sentences_per_s"], r["ct2_use_mkl"]) for r in rows] == [
        (4, 60.0, "1"), (1, 90.0, "0")]
    assert rows[0]["sentences_per_s_by_setting"] == {"mkl=0,replicas=1": 50.0,
                                                     "mkl=1,replicas=1": 60.0}
    # A run before --replicas: one replica of all the cores.
    assert (rows[0]["replicas"], rows[0]["intra_threads"]) == (1, 2)
    assert rows[0]["max_batch_size"] == 32 and rows[0]["sentences_per_pass"] == 10
    assert "batching_gain" not in rows[0]  # a run without one-sentence calls


def test_the_ceilings_own_batching_gain_is_the_same_settings_one_sentence_calls():
    work = {"beams": [4], "max_batch_size": 32, "shape": {}, "sources": [[5]] * 4}

    def run(batched, single):
        return {"versions": {"ctranslate2": "4.8.5"}, "compute_type_used": "float32",
                "threads": 2, "results": [
                    {"beam_size": 4, "max_batch_size": 32, "sentences_per_s": batched},
                    {"beam_size": 4, "max_batch_size": 1, "sentences_per_s": single}]}

    # MKL on is faster batched, so its own one-sentence figure (not the faster 30) is used.
    (row,) = serve.best_ceiling({("0", 1): run(50.0, 30.0), ("1", 1): run(60.0, 24.0)},
                                work)
    assert (row["ct2_use_mkl"], row["sentences_per_s"]) == ("1", 60.0)
    assert (row["unbatched_sentences_per_s"], row["batching_gain"]) == (24.0, 2.5)


def ceiling_run(mkl, replicas, batched, single=None, threads=2):
    """precision_ct2 --ceiling's output at one setting: {beam: sentences/s} in batches of
    32, and (one replica) {beam: sentences/s} one sentence a call."""
    results = [{"beam_size": b, "max_batch_size": 32, "sentences_per_s": v, "calls": 10,
                "sentences": 250} for b, v in batched.items()]
    results += [{"beam_size": b, "max_batch_size": 1, "sentences_per_s": v}
                for b, v in (single or {}).items()]
    return {"versions": {"ctranslate2": "4.8.5"}, "compute_type_used": "float32",
            "threads": threads, "replicas": replicas,
            "intra_threads": max(1, threads // replicas), "ct2_use_mkl": mkl,
            "results": results}


def test_the_fastest_setting_of_mkl_and_replicas_is_kept_per_beam_every_one_recorded():
    work = {"beams": [4, 1], "max_batch_size": 32, "shape": {}, "sources": [[5]] * 8}
    runs = {("0", 1): ceiling_run("0", 1, {4: 50.0, 1: 90.0}, {4: 25.0, 1: 30.0}),
            ("0", 2): ceiling_run("0", 2, {4: 70.0, 1: 85.0}),
            ("1", 1): ceiling_run("1", 1, {4: 40.0, 1: 95.0}, {4: 20.0, 1: 38.0}),
            ("1", 2): ceiling_run("1", 2, {4: 45.0, 1: 60.0})}
    beam4, beam1 = serve.best_ceiling(runs, work)
    # Beam 4: two replicas of one thread with MKL off; beam 1: one replica of two with MKL on.
    assert (beam4["beam_size"], beam4["sentences_per_s"], beam4["ct2_use_mkl"],
            beam4["replicas"], beam4["intra_threads"]) == (4, 70.0, "0", 2, 1)
    assert (beam1["beam_size"], beam1["sentences_per_s"], beam1["ct2_use_mkl"],
            beam1["replicas"], beam1["intra_threads"]) == (1, 95.0, "1", 1, 2)
    assert beam4["sentences_per_s_by_setting"] == {
        "mkl=0,replicas=1": 50.0, "mkl=0,replicas=2": 70.0,
        "mkl=1,replicas=1": 40.0, "mkl=1,replicas=2": 45.0}
    assert beam1["sentences_per_s_by_setting"] == {
        "mkl=0,replicas=1": 90.0, "mkl=0,replicas=2": 85.0,
        "mkl=1,replicas=1": 95.0, "mkl=1,replicas=2": 60.0}
    # The gain is over the same MKL setting's one sentence a call with one replica: 70 / 25
    # (not the other setting's 20), and 95 / 38.
    assert (beam4["unbatched_sentences_per_s"], beam4["batching_gain"]) == (25.0, 2.8)
    assert (beam1["unbatched_sentences_per_s"], beam1["batching_gain"]) == (38.0, 2.5)
    assert beam4["threads"] == 2 and beam4["calls"] == 10 and beam4["sentences"] == 250
    # Without that setting's one-replica run there is no gain to give.
    (row,) = serve.best_ceiling({("0", 2): runs["0", 2]}, {**work, "beams": [4]})
    assert "batching_gain" not in row and row["replicas"] == 2


def test_the_ceiling_is_measured_with_one_replica_and_one_a_core():
    assert serve.ceiling_replicas(2) == [1, 2]
    assert serve.ceiling_replicas(1) == [1]
    assert serve.ceiling_replicas(1, workers=2) == [1]
    assert serve.ceiling_replicas(16, workers=4) == [1, 4, 16]
    assert serve.setting_name("0", 2) == "mkl=0,replicas=2"


def test_measure_ceiling_runs_every_setting_and_passes_replicas(tmp_path, monkeypatch):
    """measure_ceiling's commands, with a stand-in for the peers' python that writes a
    run whose figures follow the setting, at the compute type of the server's variant."""
    import argparse
    import json

    import export.runtime

    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        "exec " + __import__("sys").executable + " - \"$@\" <<'EOF'\n"
        "import json, os, sys\n"
        "a = sys.argv[1:]\n"
        "r = int(a[a.index('--replicas') + 1])\n"
        "mkl = os.environ['CT2_USE_MKL']\n"
        "v = 10.0 * r + int(mkl)\n"
        "res = [{'beam_size': 4, 'max_batch_size': 32, 'sentences_per_s': v}]\n"
        "res += [{'beam_size': 4, 'max_batch_size': 1, 'sentences_per_s': 4.0}] * (r == 1)\n"
        "ct = a[a.index('--compute-type') + 1]\n"
        "out = {'versions': {'ctranslate2': 'x'}, 'compute_type_used': ct,\n"
        "       'threads': 2, 'replicas': r, 'intra_threads': 2 // r,\n"
        "       'ct2_use_mkl': mkl, 'results': res}\n"
        "open(a[a.index('--out') + 1], 'w').write(json.dumps(out))\n"
        "EOF\n")
    fake.chmod(0o755)
    monkeypatch.setattr(export.runtime, "usable_cores", lambda: 2)
    args = argparse.Namespace(ct2_python=fake, cache_dir=tmp_path, workers=1, variant="int8")
    work = {"beams": [4], "max_batch_size": 32, "shape": {}, "sources": [[5]] * 2}
    (row,) = serve.measure_ceiling(args, work)
    assert row["sentences_per_s_by_setting"] == {
        "mkl=0,replicas=1": 10.0, "mkl=0,replicas=2": 20.0,
        "mkl=1,replicas=1": 11.0, "mkl=1,replicas=2": 21.0}
    assert (row["ct2_use_mkl"], row["replicas"], row["intra_threads"]) == ("1", 2, 1)
    assert (row["unbatched_sentences_per_s"], row["batching_gain"]) == (4.0, 5.25)
    assert row["compute_type"] == "int8"
    assert json.dumps(row)  # what serve.json stores


def test_batching_cells_as_a_fraction_of_the_ceiling():
    results = [cell("batching", 4, 8, 5.0), cell("batching", 4, 32, 7.0),
               cell("no batching", 4, 32, 2.0), cell("batching", 1, 8, 6.0)]
    ceiling = [{"beam_size": 4, "sentences_per_s": 20.0},
               {"beam_size": 1, "sentences_per_s": 30.0}]
    summary = serve.against_ceiling(results, ceiling)
    assert [r.get("of_ceiling") for r in results] == [0.25, 0.35, None, 0.2]
    # Beam 4 is read at 32 clients; beam 1 has no 32-client cell: its most clients instead.
    assert summary == [
        {"beam_size": 4, "ceiling_sentences_per_s": 20.0, "clients": 32,
         "batching_sentences_per_s": 7.0, "of_ceiling": 0.35},
        {"beam_size": 1, "ceiling_sentences_per_s": 30.0, "clients": 8,
         "batching_sentences_per_s": 6.0, "of_ceiling": 0.2}]
    assert serve.against_ceiling(results, []) == []


def test_the_work_is_the_servers_sentences_limits_and_shape(tmp_path):
    """The ids and limits the server decodes (pieces + EOS; 1.5x the source + 10, capped by
    the model) and the model's shape, on a tiny export."""
    from export.common import Manifest
    from export.exporters import export_run
    from export.runtime.base import load_sentencepiece
    from tests.serving import tiny_run

    tiny_run(tmp_path / "run")
    export_run(tmp_path / "run", tmp_path / "export", formats=("onnx",), search_graph=False)
    sentences = ["three small red cats saw one big blue dog", "a dog"]
    work = serve.ceiling_work(str(tmp_path / "export"), sentences, [4, 1], 32, 1.5)
    manifest = Manifest(tmp_path / "export")
    sp = load_sentencepiece(manifest.tokenizer_files()[0])
    assert work["sources"] == [sp.encode(s, out_type=int) + [manifest.special_ids["eos"]]
                               for s in sentences]
    assert work["limits"] == [min(20, len(r) * 3 // 2 + 10) for r in work["sources"]]
    assert work["limits"][0] == 20  # tiny_run's max_target_length caps the long one
    assert work["shape"] == {"vocab": manifest["vocab"]["target_size"], "d_model": 32,
                             "heads": 4, "ffn": 64, "enc_layers": 2, "dec_layers": 2,
                             "dropout": 0.0}
    assert (work["beams"], work["max_batch_size"], work["seconds"]) == ([4, 1], 32, 1.5)
    # The converted model's name follows the shape only.
    assert work["name"] == serve.ceiling_work(str(tmp_path / "export"), ["a"], [1], 8,
                                              1.0)["name"]


def test_a_missing_venv_is_one_line_by_default_and_an_error_when_asked(tmp_path, capsys):
    missing = tmp_path / "none" / "python"
    args = serve.parse_args(["--ct2-python", str(missing)])
    assert serve.ceiling_wanted(args) is False
    assert "setup_venvs.sh" in capsys.readouterr().out
    assert serve.ceiling_wanted(serve.parse_args(["--no-ceiling"])) is False
    with pytest.raises(serve.CommandError, match="setup_venvs.sh"):
        serve.ceiling_wanted(serve.parse_args(["--ceiling", "--ct2-python", str(missing)]))


def test_the_results_page_names_the_ceiling_only_when_measured():
    from bench.results_page import serve_ceiling

    assert serve_ceiling({"results": []}) == []
    data = {"ceiling": [{"beam_size": 4, "max_batch_size": 32, "compute_type": "float32",
                         "ct2_use_mkl": "0", "calls": 4, "sentences": 90}],
            "against_ceiling": [{"beam_size": 4, "ceiling_sentences_per_s": 20.0,
                                 "clients": 32, "batching_sentences_per_s": 7.0,
                                 "of_ceiling": 0.35}]}
    (blank, line) = serve_ceiling(data)
    assert blank == "" and "batches of 32" in line
    assert ("beam 4 20.0 sentences/s in calls of 22.5 on average (CT2_USE_MKL=0), batching at "
            "32 clients 0.35x of it") in line
    data["ceiling"][0].update(unbatched_sentences_per_s=8.0, batching_gain=2.5)
    (_, line) = serve_ceiling(data)
    assert "(CT2_USE_MKL=0; one sentence a call 8.0, so batching gains it 2.50x)" in line
    # A run that measured replicas names the kept one's layout.
    data["ceiling"][0].update(replicas=2, intra_threads=1)
    (_, line) = serve_ceiling(data)
    assert ("(CT2_USE_MKL=0, 2 replicas of 1 thread; one sentence a call 8.0 with one "
            "replica, so batching gains it 2.50x)") in line
    data["ceiling"][0].update(replicas=1, intra_threads=2)
    (_, line) = serve_ceiling(data)
    assert "(CT2_USE_MKL=0, 1 replica of 2 threads; one sentence a call 8.0, so" in line


@pytest.mark.slow
def test_a_summarizers_export_is_loaded_on_its_route_with_articles_of_a_tsv(tmp_path, capsys,
                                                                            monkeypatch):
    """A copy-attention summarizer's export: the articles of a VNDS-style TSV sent to
    /v1/summarize, every answer 200; no CTranslate2 ceiling (it has no copy attention), an
    asked-for one refused in one line; --timeout given to the server in both modes."""
    from export.exporters import export_run
    from tests.serving import WORDS, tiny_run

    tiny_run(tmp_path / "run", "task: summarization\n", copy_attention=True,
             share_embeddings=True)
    export = tmp_path / "export"
    export_run(tmp_path / "run", export, formats=("onnx",))
    rng = np.random.default_rng(0)
    articles = [" ".join(rng.choice(WORDS, size=8)) + " . " + " ".join(rng.choice(WORDS, size=5))
                for _ in range(6)]
    tsv = tmp_path / "test.tsv"
    tsv.write_text("article\tsummary\ttitle\n" + "".join(f"{a}\tx\ty\n" for a in articles),
                   encoding="utf-8")
    assert serve.read_inputs(tsv) == articles
    assert serve.main(["--export", str(export), "--sentences", str(tsv), "--ceiling"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said[-1] == ("error: --ceiling: the export's model has copy attention, which "
                        "CTranslate2 does not run; pass --no-ceiling")
    started, start = [], serve.start
    monkeypatch.setattr(serve, "start", lambda export, log, *options: (
        started.append([str(o) for o in options]), start(export, log, *options))[1])
    code = serve.main(["--export", str(export), "--sentences", str(tsv), "--clients", "2",
                       "--beams", "1", "--seconds", "1", "--timeout", "45",
                       "--results", str(tmp_path / "out")])
    assert code == 0
    assert len(started) == 2 and all(
        options[options.index("--timeout") + 1] == "45.0" for options in started), started
    assert "no CTranslate2 ceiling: the export's model has copy attention" in \
        capsys.readouterr().out
    cells = json.loads((tmp_path / "out" / "serve.json").read_text())["results"]
    assert {c["mode"] for c in cells} == {"batching", "no batching"}
    assert all(c["sentences"] > 0 and c["failed"] == 0 for c in cells), cells


def test_only_a_search_export_is_loaded(tmp_path):
    with pytest.raises(serve.CommandError, match="not found"):
        serve.export_route(str(tmp_path / "none"))
    (tmp_path / "text.txt").write_bytes(b"\xff\xfe bad")
    with pytest.raises(serve.CommandError, match="not UTF-8"):
        serve.read_inputs(tmp_path / "text.txt")
