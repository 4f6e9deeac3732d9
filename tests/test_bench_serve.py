"""bench.serve's CTranslate2 ceiling: the work it hands CTranslate2 (the server's length rule
on the export's own sentences and shape), how the calls are grouped, the faster backend kept,
and the ratios against the batching cells, on hand-made values (no timing is asserted)."""

from __future__ import annotations

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

    rows = serve.best_ceiling({"0": run({4: 50.0, 1: 90.0}), "1": run({4: 60.0, 1: 80.0})},
                              work)
    assert [(r["beam_size"], r["sentences_per_s"], r["ct2_use_mkl"]) for r in rows] == [
        (4, 60.0, "1"), (1, 90.0, "0")]
    assert rows[0]["sentences_per_s_by_mkl"] == {"0": 50.0, "1": 60.0}
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
    (row,) = serve.best_ceiling({"0": run(50.0, 30.0), "1": run(60.0, 24.0)}, work)
    assert (row["ct2_use_mkl"], row["sentences_per_s"]) == ("1", 60.0)
    assert (row["unbatched_sentences_per_s"], row["batching_gain"]) == (24.0, 2.5)


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
