"""bench.train_real's logic (no timings are asserted): token counting on hand-made batches,
the timed window, throughput arithmetic, the training budget's checkpoints, BLEU on plain
text, the JSON and table; end to end with --quick where the data (and the peer environment)
are here."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from bench import real_harness
from bench.__main__ import commands
from bench.common import PEER_TF_PYTHON, ROOT
from bench.train_real import (
    bleu_scores,
    plain,
    ratios,
    report,
    score_curve,
)

SPA_TXT = ROOT.parent / "shared" / "data" / "spa_eng" / "spa.txt"

# Two rows, PAD 0, EOS 3: "a b EOS", "EOS" as labels; sources "x y EOS", "z EOS".
SOURCE = np.array([[5, 6, 3, 0], [7, 3, 0, 0]], np.int32)
TARGET_OUT = np.array([[8, 9, 3, 0], [3, 0, 0, 0]], np.int32)


def test_batch_counts_count_labels_that_are_not_padding():
    counts = real_harness.batch_counts(SOURCE, TARGET_OUT, pad_id=0)
    assert counts == {"rows": 2, "shape": [2, 4], "target_tokens": 4, "target_positions": 8,
                      "source_tokens": 5, "source_positions": 8}
    # keras-hub's fixed-length batches: [END] = 3 counts, [PAD] = 0 does not.
    hub = np.array([[10, 11, 12, 3, 0, 0], [13, 3, 0, 0, 0, 0]], np.int32)
    assert real_harness.batch_counts(hub, hub, pad_id=0)["target_tokens"] == 6


def test_counter_records_every_batch_in_the_order_fit_reads_them():
    import tensorflow as tf

    counter = real_harness.BatchCounter(pad_id=0)
    second = (SOURCE[:1], TARGET_OUT[:1])
    ds = tf.data.Dataset.from_tensors(((SOURCE, SOURCE), TARGET_OUT)).concatenate(
        tf.data.Dataset.from_tensors(((second[0], second[0]), second[1])))
    seen = [labels.numpy() for _, labels in ds.map(counter).prefetch(2)]
    assert [b["target_tokens"] for b in counter.batches] == [4, 3]
    assert [b["rows"] for b in counter.batches] == [2, 1]
    np.testing.assert_array_equal(seen[0], TARGET_OUT)


def batches(shapes, tokens=10):
    return [{"rows": s[0], "shape": list(s), "target_tokens": tokens,
             "target_positions": s[0] * s[1], "source_tokens": tokens,
             "source_positions": s[0] * s[1]} for s in shapes]


def test_timed_window_starts_after_warmup_and_every_new_shape():
    a, b = (4, 10), (2, 20)
    assert real_harness.timed_window(batches([a, a, a, a, a]), warmup=1, steps=3) == (1, 4)
    # A new shape at step 3 (a trace, or a compile with XLA) moves the window after it.
    assert real_harness.timed_window(batches([a, a, a, b, a, a, a]), 1, 3) == (4, 7)
    assert real_harness.timed_window(batches([a, a, a, b, a, a]), 1, 3) is None


def test_throughput_of_hand_made_steps():
    # 6 steps; steps 2..5 are timed (from the end of step 1 to that of step 5: 0.5 -> 3.0 s);
    # 10 labels each.
    data = batches([(4, 10)] * 6)
    ends = [0.2, 0.5, 1.0, 1.5, 2.0, 3.0]
    r = real_harness.throughput(data, ends, first=2, end=6, windows=2)
    assert r["steps"] == 4 and r["seconds"] == pytest.approx(2.5)
    assert r["target_tokens"] == 40 and r["target_tokens_per_s"] == pytest.approx(16.0)
    assert r["sentences_per_s"] == pytest.approx(6.4)
    assert r["target_padding_fraction"] == pytest.approx(0.75)  # 40 of 160 positions
    # Windows: steps 2-3 (20 tokens in 1.0 s), steps 4-5 (20 in 1.5 s).
    assert sorted(r["window_tokens_per_s"]["windows"]) == pytest.approx([40 / 3, 20.0])
    assert r["median_step_s"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        real_harness.throughput(data, ends, first=0, end=6)


def test_training_budget_evaluates_on_schedule_and_stops():
    class FakeModel:
        stop_training = False

    calls = []
    budget = real_harness.TrainingBudget(0.06, 0.02, lambda m: calls.append(1) or {"x": 1},
                                         log=lambda *a: None)
    budget.set_model(FakeModel())
    budget.on_train_begin()
    while not budget.model.stop_training:
        time.sleep(0.005)
        budget.on_train_batch_end(0, {"loss": 2.0})
    points = budget.checkpoints
    assert len(points) == len(calls) >= 2 and points[-1]["minutes"] * 60 >= 0.06
    assert [p["steps"] for p in points] == sorted(p["steps"] for p in points)
    assert points[-1]["steps"] == budget.steps and points[-1]["loss"] == 2.0


def test_plain_bleu_ignores_case_and_punctuation():
    assert plain("¿Dónde está, Tom?") == "dónde está tom"
    assert plain("i don ' t know .") == plain("I don't know.") == "i don t know"
    refs = ["¿Dónde está Tom?", "Me gusta el té."]
    hyps = ["¿ dónde está tom ?", "me gusta el té ."]  # keras-hub's form
    scores = bleu_scores(hyps, refs)
    assert scores["plain_bleu"] == pytest.approx(100.0) and scores["bleu"] < 100
    assert "case:mixed" in scores["signature"]


def test_curve_json_and_table(tmp_path):
    refs = ["Tom no sabe dónde vive Mary.", "Me gustaría beber un café."]
    curve = [{"minutes": 2.5, "steps": 40, "loss": 5.0, "hypotheses": list(refs)},
             {"minutes": 5.0, "steps": 80, "loss": 4.0, "hypotheses": list(refs)}]
    checkpoints = score_curve(curve, refs, samples=1)
    assert [p["bleu"] for p in checkpoints] == [100.0, 100.0]
    assert "hypotheses" not in checkpoints[0] and checkpoints[0]["samples"] == refs[:1]
    row = {"side": "ours", "jit_compile": False, "steps": 3, "target_tokens_per_s": 300.0,
           "sentences_per_s": 30.0, "target_tokens_per_sentence": 10.0,
           "target_padding_fraction": 0.1, "source_padding_fraction": 0.2,
           "median_step_s": 1.0, "window_tokens_per_s": {"p25": 290.0, "p75": 310.0}}
    hub = {**row, "side": "keras-hub", "target_tokens_per_s": 200.0, "sentences_per_s": 20.0}
    assert ratios([row, hub])["best"]["target_tokens"] == pytest.approx(1.5)
    data = {"started_utc": "now", "command_line": ["python", "-m", "bench.train_real"],
            "loadavg_start": [1.0], "machine": {"cpu_model": "CPU (family 1, model 2)", "usable_cores": 2,
                                   "cpu_flags": {"amx_bf16": False, "f16c": True}},
            "throughput": [row, hub], "ratios": ratios([row, hub]),
            "curves": [{"side": "ours", "jit_compile": False, "checkpoints": checkpoints}]}
    path = report(data, tmp_path, "train_real")
    assert json.loads(path.read_text())["curves"][0]["checkpoints"][1]["steps"] == 80
    text = (tmp_path / "train_real.md").read_text()
    assert "| ours | off | 5.0 | 80 | 100.00 | 100.00 |" in text
    assert "1.50x target tokens/s" in text and "amx_bf16 no" in text
    assert "CPU: CPU (family 1, model 2) (2 usable cores; amx_bf16 no);" in text


def test_bench_main_runs_train_real_without_peers_when_asked():
    class Args:
        quick, results, configs, no_peers = False, None, None, True

    (cmd,) = commands("train_real", Args)
    assert cmd[-3:] == ["-m", "bench.train_real", "--no-peer"]
    Args.no_peers = False
    assert "--no-peer" not in commands("train_real", Args)[0]


def run_quick(tmp_path, *extra):
    if not SPA_TXT.is_file():
        pytest.skip(f"{SPA_TXT} is not here")
    cmd = [sys.executable, "-m", "bench.train_real", "--quick", "--results", str(tmp_path),
           *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads((tmp_path / "train_real.json").read_text())


@pytest.mark.slow
def test_quick_run_of_ours(tmp_path):
    data = run_quick(tmp_path, "--no-peer")
    (row,) = data["throughput"]
    assert row["side"] == "ours" and row["steps"] == 4 and row["target_tokens_per_s"] > 0
    assert 0 <= row["target_padding_fraction"] < 1
    (curve,) = data["curves"]
    assert curve["checkpoints"] and all("plain_bleu" in p for p in curve["checkpoints"])


@pytest.mark.slow
def test_quick_run_against_keras_hub(tmp_path):
    if not PEER_TF_PYTHON.is_file():
        pytest.skip(f"{PEER_TF_PYTHON} is not here (bash ../shared/peers/setup_venvs.sh)")
    data = run_quick(tmp_path, "--parts", "throughput")
    assert {r["side"] for r in data["throughput"]} == {"ours", "keras-hub"}
    assert "best" in data["ratios"]


@pytest.mark.slow
def test_quick_run_of_keras_hubs_own_model_alone(tmp_path):
    """--keras-hub-size example: two vocabularies and an untied output layer, reported;
    --peer-only: no side of ours."""
    if not PEER_TF_PYTHON.is_file():
        pytest.skip(f"{PEER_TF_PYTHON} is not here (bash ../shared/peers/setup_venvs.sh)")
    data = run_quick(tmp_path, "--parts", "throughput", "--jit", "off",
                     "--keras-hub-size", "example", "--peer-only")
    hub = data["keras_hub"]
    assert hub["size"] == "tiny-example" and hub["model"]["joint"] is False
    assert hub["vocabulary_size"] > 4 and hub["target_vocabulary_size"] > 4
    (row,) = data["throughput"]  # --peer-only: keras-hub's row alone, no ratio
    assert row["side"] == "keras-hub" and row["target_tokens_per_s"] > 0
    assert data["ratios"] == {}
    text = (tmp_path / "train_real.md").read_text()
    assert "(`--size tiny-example`): 1 + 1 layers" in text and "an untied output layer" in text
